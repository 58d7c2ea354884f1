"""The journal's records are read back strictly (contract 13.2): a record that is not what
the journal wrote (a truncated file, an edit by hand, another program's JSON) is refused as
a whole, never half trusted; what the journal writes reads back equal."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.tools.coding._journal_records import (
    ENTRY_MAX_BYTES,
    Item,
    JournalError,
    Record,
    State,
    atomic_json,
    locked,
    read_json,
    state_at,
)

GOOD_STATE: Final = {"kind": "file", "mode": 0o644, "sha256": "0" * 64}
GOOD_ITEM: Final = {
    "path": "a.txt",
    "before": GOOD_STATE,
    "after": None,
    "saved": "b0",
    "kept": None,
    "source": None,
}
GOOD_RECORD: Final = {
    "format": 1,
    "id": 3,
    "tool": "shell",
    "call_id": None,
    "time_ns": 1,
    "phase": "done",
    "size": 0,
    "items": [GOOD_ITEM],
}


def test_a_record_reads_back_what_was_written() -> None:
    record = Record.parse(GOOD_RECORD)
    assert Record.parse(record.json()) == record
    item = Item.parse({**GOOD_ITEM, "undoes": [2, 0]})
    assert item.undoes == (2, 0)
    assert Item.parse(item.json()) == item


@pytest.mark.parametrize(
    "state",
    [
        "file",
        [],
        {"kind": "fifo", "mode": 1, "sha256": None},
        {**GOOD_STATE, "mode": "644"},
        {**GOOD_STATE, "sha256": 5},
    ],
)
def test_a_state_that_is_not_the_journals_is_refused(state: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - State.parse raises a bare ValueError
        State.parse(state)


@pytest.mark.parametrize(
    "change",
    [
        {"path": "/abs"},
        {"path": "a/../b"},
        {"path": 7},
        {"saved": "b-0"},
        {"kept": ["x"]},
        {"source": 3},
        {"undoes": [1]},
        {"undoes": ["1", "2"]},
        {"undoes": "1,2"},
        {"whole": "yes"},
        {"whole": True},
        {"before": "file"},
    ],
)
def test_an_item_that_is_not_the_journals_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        Item.parse({**GOOD_ITEM, **change})


@pytest.mark.parametrize(
    "change",
    [
        {"id": "3"},
        {"tool": None},
        {"call_id": 5},
        {"time_ns": 1.5},
        {"phase": "half"},
        {"size": None},
        {"items": {}},
        {"items": [None]},
    ],
)
def test_a_record_that_is_not_the_journals_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        Record.parse({**GOOD_RECORD, **change})


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_no_json_value_makes_the_parser_fail_otherwise(value: object) -> None:
    """Whatever JSON a record file holds, parsing it returns a record or raises
    ``ValueError``: never another exception."""
    with contextlib.suppress(ValueError):
        Record.parse(value)


def test_the_state_of_each_kind_is_read_without_following_a_link(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("f")
    os.mkfifo(tmp_path / "p")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        seen = {name: state_at(fd, name) for name in ("f", "d", "l", "p", "missing")}
    finally:
        os.close(fd)
    assert isinstance(seen["f"], State)
    assert seen["f"].kind == "file"
    assert seen["f"].mode == stat.S_IMODE((tmp_path / "f").stat().st_mode)
    assert isinstance(seen["d"], State)
    assert seen["d"].kind == "directory"
    assert isinstance(seen["l"], State)
    assert seen["l"].kind == "symlink"
    assert seen["p"] == "other"
    assert seen["missing"] is None


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (None, "journal_unusable"),  # missing
        (b"{not json", "journal_unusable"),
        (b"[" * 10 + b"]" * 10, None),
        (json.dumps({"format": 999}).encode(), "journal_newer"),
        (b" " * (ENTRY_MAX_BYTES + 1), "journal_unusable"),
    ],
)
def test_a_record_file_is_read_bounded_and_strictly(
    tmp_path: Path, content: bytes | None, code: str | None
) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_bytes(content)
    if code is None:
        assert read_json(str(path), "J") == [[[[[[[[[[]]]]]]]]]]
        return
    with pytest.raises(JournalError) as refused:
        read_json(str(path), "J")
    assert refused.value.code == code
    assert "J" in refused.value.message


def test_a_record_written_whole_reads_back(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = atomic_json(fd, "r.json", {"a": 1})
        second = atomic_json(fd, "r.json", {"a": 2})
    finally:
        os.close(fd)
    assert first != second  # each write is a new file
    assert read_json(str(tmp_path / "r.json"), "J") == {"a": 2}
    assert not (tmp_path / ".r.json.tmp").exists()


def test_a_held_lock_is_waited_for_within_its_bound_then_refused(tmp_path: Path) -> None:
    """Another holder past the bound: ``journal_busy``, one line naming the journal; the
    lock taken once it is free."""
    with locked(str(tmp_path), "J"):
        with pytest.raises(JournalError) as busy, locked(str(tmp_path), "J", wait=0.0):
            pass  # pragma: no cover - never entered
        assert busy.value.code == "journal_busy"
    with locked(str(tmp_path), "J", wait=0.0):
        pass


def test_a_lock_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError) as refused, locked(str(tmp_path / "missing"), "J"):
        pass  # pragma: no cover - never entered
    assert refused.value.code == "journal_unusable"
