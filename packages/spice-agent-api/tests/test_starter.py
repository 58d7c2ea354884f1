"""``spice.agent.starter``: declarative ``AutoBean`` and ``AutoConfiguration`` records."""

from __future__ import annotations

import dataclasses

import pytest

from spice.agent.starter import AutoBean, AutoConfiguration


def build() -> object:
    """A factory."""
    return object()


def test_a_bean_defaults_to_a_non_primary_fallback() -> None:
    """``fallback=True, primary=False`` unless told otherwise."""
    bean = AutoBean("read", build)
    assert ("read", build, True, False) == (bean.name, bean.factory, bean.fallback, bean.primary)
    assert (False, True) == (
        AutoBean("read", build, fallback=False, primary=True).fallback,
        AutoBean("read", build, fallback=False, primary=True).primary,
    )


@pytest.mark.parametrize("name", ["a" * 128, "é" * 64])
def test_a_bean_name_at_the_identity_bound_is_accepted(name: str) -> None:
    """A name of 128 UTF-8 bytes is accepted."""
    assert name == AutoBean(name, build).name


@pytest.mark.parametrize("name", ["a" * 129, "é" * 64 + "a", "", " read", "re\0ad", "x\ud800", 3])
def test_a_bean_name_breaking_the_identity_rule_is_rejected(name: object) -> None:
    """Too long, empty, padded, control-bearing, surrogate or non-text names are rejected."""
    with pytest.raises(ValueError, match="bean name"):
        AutoBean(name, build)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("factory", "fallback", "primary", "rule"),
    [("build", True, False, "callable"), (build, 1, False, "bools"), (build, True, None, "bools")],
)
def test_a_bean_with_a_bad_field_is_rejected(
    factory: object, fallback: object, primary: object, rule: str
) -> None:
    """A non-callable factory or non-bool flags are rejected."""
    with pytest.raises(ValueError, match=rule):
        AutoBean("read", factory, fallback, primary)  # type: ignore[arg-type]


def test_a_configuration_keeps_its_beans_in_order_as_a_tuple() -> None:
    """Beans given as a list are kept, in order, as a tuple."""
    beans = [AutoBean("read", build), AutoBean("replace", build), AutoBean("shell", build)]
    configuration = AutoConfiguration("docs/dependency-review.md", beans)  # type: ignore[arg-type]
    assert tuple(beans) == configuration.beans
    assert "docs/dependency-review.md" == configuration.review
    with pytest.raises(dataclasses.FrozenInstanceError):
        configuration.review = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("review", "beans", "rule"),
    [
        ("", (), "review"),
        (None, (), "review"),
        ("r", "read", "collection"),
        ("r", 3, "collection"),
        ("r", (build,), "AutoBean"),
        ("r", (AutoBean("read", build), AutoBean("read", build)), "unique"),
    ],
)
def test_a_configuration_with_a_bad_field_is_rejected(
    review: object, beans: object, rule: str
) -> None:
    """An empty review, non-collections, non-beans and duplicate names are rejected."""
    with pytest.raises(ValueError, match=rule):
        AutoConfiguration(review, beans)  # type: ignore[arg-type]
