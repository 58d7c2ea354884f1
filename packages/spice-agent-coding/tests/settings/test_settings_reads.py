"""``--deny-read`` and ``--allow-read`` as the resolver reads them (contract 11.1), in
process: what is taken, what is refused at start (exit 2 naming it), on both sides of each
bound, and (with hypothesis) that any text either names a hidden credential or is refused
with the flag's own line, never another error."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.coding import _cli
from spice.agent.coding._settings._resolve import Settings, flags_of, resolve_settings
from spice.agent.coding._settings._values import (
    MAXIMUM_ALLOW_READ,
    MAXIMUM_DENY_READ,
    MAXIMUM_PATH_LENGTH,
    SettingsError,
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the POSIX sandbox's read rules")


def parsed(argv: list[str], environ: Mapping[str, str]) -> Settings:
    return resolve_settings(flags_of(_cli._parser().parse_args(argv)), environ)


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A worktree, a home with two credentials, and a directory beside them."""
    root, home, elsewhere = (tmp_path / name for name in ("root", "home", "elsewhere"))
    for path in (root / "sub", home / ".ssh", home / ".aws", elsewhere):
        path.mkdir(parents=True)
    return root, home, elsewhere


def deny(root: Path, home: Path, *paths: str) -> tuple[str, ...]:
    argv = ["--root", str(root)]
    for path in paths:
        argv += ["--deny-read", path]
    return parsed([*argv, "tools"], {"HOME": str(home)}).deny_read


def allow(root: Path, home: Path, *names: str) -> tuple[str, ...]:
    argv = ["--root", str(root)]
    for name in names:
        argv += ["--allow-read", name]
    return parsed([*argv, "tools"], {"HOME": str(home)}).allow_read


def test_deny_read_takes_existing_absolute_paths_resolved_and_once(
    places: tuple[Path, Path, Path],
) -> None:
    root, home, elsewhere = places
    link = home / "link"
    link.symlink_to(elsewhere)
    assert (str(elsewhere.resolve()),) == deny(root, home, str(elsewhere), str(link))
    assert () == deny(root, home)


@pytest.mark.parametrize(
    "shape", ["relative", "missing", "nul", "too long", "slash", "root", "inside", "parent"]
)
def test_deny_read_refuses_what_is_no_existing_path_outside_the_worktree(
    places: tuple[Path, Path, Path], shape: str
) -> None:
    root, home, _ = places
    value = {
        "relative": "elsewhere",
        "missing": str(home / "nothing"),
        "nul": str(home) + "\0x",
        "too long": "/" + "a" * MAXIMUM_PATH_LENGTH,
        "slash": "/",
        "root": str(root),
        "inside": str(root / "sub"),
        "parent": str(root.parent),
    }[shape]
    with pytest.raises(SettingsError, match="--deny-read"):
        deny(root, home, value)


def test_deny_read_holds_its_count_bound_on_both_sides(places: tuple[Path, Path, Path]) -> None:
    root, home, elsewhere = places
    paths = []
    for number in range(MAXIMUM_DENY_READ + 1):
        path = elsewhere / str(number)
        path.mkdir()
        paths.append(str(path))
    assert MAXIMUM_DENY_READ == len(deny(root, home, *paths[:MAXIMUM_DENY_READ]))
    with pytest.raises(SettingsError, match=f"at most {MAXIMUM_DENY_READ}"):
        deny(root, home, *paths)


def test_allow_read_takes_a_place_beneath_the_home_by_any_of_its_spellings_once(
    places: tuple[Path, Path, Path],
) -> None:
    root, home, _ = places
    spellings = ("~/.ssh", ".ssh", str(home / ".ssh"), " ~/.ssh ", str(home / ".aws"))
    assert (".ssh", ".aws") == allow(root, home, *spellings)
    assert (".config/gcloud",) == allow(root, home, "~/.config/gcloud/")
    # Contract 12.2: any place beneath the home, a default credential or not.
    assert (".bashrc", "notes/todo") == allow(root, home, "~/.bashrc", str(home / "notes/todo"))


def test_allow_read_holds_its_count_bound_on_both_sides(places: tuple[Path, Path, Path]) -> None:
    root, home, _ = places
    names = [f"~/n{number}" for number in range(MAXIMUM_ALLOW_READ + 1)]
    assert MAXIMUM_ALLOW_READ == len(allow(root, home, *names[:MAXIMUM_ALLOW_READ]))
    with pytest.raises(SettingsError, match=f"at most {MAXIMUM_ALLOW_READ}"):
        allow(root, home, *names)


@pytest.mark.parametrize(
    "value", ["/etc/passwd", "~", "", "../.ssh", "~/../x", "/", "HOMEx/sibling"]
)
def test_allow_read_refuses_what_is_not_beneath_the_home_naming_it(
    places: tuple[Path, Path, Path], value: str
) -> None:
    root, home, _ = places
    value = value.replace("HOMEx", str(home) + "x")  # a sibling that shares its prefix
    with pytest.raises(SettingsError) as refused:
        allow(root, home, value)
    assert str(refused.value).startswith(f"--allow-read {value!r}")


def test_allow_read_names_a_long_or_odd_value_cut_and_escaped(
    places: tuple[Path, Path, Path],
) -> None:
    """The refusal shows at most 200 characters of the value, control characters escaped."""
    root, home, _ = places
    with pytest.raises(SettingsError) as refused:
        allow(root, home, "\x1b[31m" + "x" * 500)
    line = str(refused.value)
    assert "\x1b" not in line
    assert "x" * 200 not in line
    assert "x" * 190 in line


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=64))
def test_any_allow_read_text_is_a_place_beneath_the_home_or_the_flags_refusal(
    places: tuple[Path, Path, Path], value: str
) -> None:
    root, home, _ = places
    if value.startswith("-") or "\0" in value:
        return  # a flag-shaped or NUL value never reaches the resolver as this flag's value
    try:
        taken = allow(root, home, value)
    except SettingsError as refused:
        assert str(refused).startswith("--allow-read")  # noqa: PT017 - either outcome is fine
    else:
        assert len(taken) == 1
        assert not os.path.isabs(taken[0])
        assert os.path.normpath(os.path.join(str(home), taken[0])).startswith(str(home) + "/")
