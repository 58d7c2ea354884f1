"""``Change``, the list a commit judges and applies (contract 13.1, 13.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.tools.coding._changes import (
    SHOWN_CHANGES,
    Change,
    shown_changes,
    sorted_changes,
    valid_path,
)

NAMES = st.text(st.characters(exclude_characters="/\0", exclude_categories=["Cs"]), min_size=1)


@given(st.lists(NAMES.filter(lambda n: n not in (".", "..")), min_size=1, max_size=6))
def test_a_normal_relative_path_is_valid(parts: list[str]) -> None:
    assert valid_path("/".join(parts))


@pytest.mark.parametrize("path", ["", "/a", "a//b", "a/./b", "a/../b", "..", ".", "a/", "a\0b"])
def test_a_path_that_is_not_normal_is_refused(path: str) -> None:
    assert not valid_path(path)
    with pytest.raises(ValueError, match="relative and normal"):
        Change(path, "added", "file", None)


@pytest.mark.parametrize(
    ("action", "kind", "before"),
    [
        ("added", None, None),
        ("added", "file", "file"),
        ("deleted", "file", "file"),
        ("deleted", None, None),
        ("modified", "file", None),
        ("modified", None, "file"),
        ("renamed", "file", "file"),
        ("modified", "fifo", "file"),
    ],
)
def test_a_change_that_contradicts_itself_is_refused(
    action: str, kind: str | None, before: str | None
) -> None:
    with pytest.raises(ValueError, match="change"):
        Change("a", action, kind, before)  # type: ignore[arg-type]


def test_the_answer_spells_each_action_and_marks_directories() -> None:
    changes = [
        Change("src/new.py", "added", "file", None, mode=0o644),
        Change("a.txt", "modified", "file", "file", mode=0o755),
        Change("build", "deleted", None, "directory"),
        Change("docs", "added", "directory", None, mode=0o755),
        Change("link", "modified", "symlink", "file"),
    ]
    assert [c.shown for c in changes] == [
        "A src/new.py",
        "M a.txt",
        "D build/",
        "A docs/",
        "M link",
    ]


def test_a_directory_sorts_before_what_lies_beneath_it() -> None:
    names = ["a.b", "a/b", "a", "a/b/c", "a-b", "b"]
    ordered = [c.path for c in sorted_changes(Change(n, "added", "file", None) for n in names)]
    assert ordered.index("a") < ordered.index("a/b") < ordered.index("a/b/c")
    assert ordered.index("a/b") < ordered.index("a.b")


@pytest.mark.parametrize(
    "count", [0, 1, SHOWN_CHANGES - 1, SHOWN_CHANGES, SHOWN_CHANGES + 1, 10_000]
)
def test_the_answer_names_at_most_the_bound_and_counts_all(count: int) -> None:
    changes = [
        Change(f"f{i}", "modified", "file", "file")
        if i % 2
        else Change(f"f{i}", "added", "file", None)
        for i in range(count)
    ]
    shown = shown_changes(changes)
    assert shown["added"] == (count + 1) // 2
    assert shown["modified"] == count // 2
    assert shown["deleted"] == 0
    assert isinstance(shown["paths"], list)
    assert len(shown["paths"]) == min(count, SHOWN_CHANGES)


def test_a_whole_change_is_an_added_directory_with_its_source() -> None:
    whole = Change("venv", "added", "directory", None, 0o755, "/stage/venv", whole=True)
    assert whole.whole
    assert whole.shown == "A venv/"
    assert not Change("venv", "added", "directory", None, 0o755).whole


@pytest.mark.parametrize(
    ("action", "kind", "before", "source"),
    [
        ("added", "directory", None, None),  # no source to rename
        ("added", "file", None, "/stage/f"),  # not a directory
        ("modified", "directory", "directory", "/stage/d"),  # something was there
        ("modified", "directory", "file", "/stage/d"),
        ("deleted", None, "directory", None),
    ],
)
def test_a_whole_change_that_is_not_a_new_directory_is_refused(
    action: str, kind: str | None, before: str | None, source: str | None
) -> None:
    with pytest.raises(ValueError, match="whole change"):
        Change("d", action, kind, before, 0o755, source, whole=True)  # type: ignore[arg-type]
