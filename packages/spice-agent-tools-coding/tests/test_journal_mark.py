"""An entry is written once, ``pending``, and marked applied by a small ``Mark`` (13.2,
issue 45): what ``history`` and ``undo`` read is what the rewritten record said."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

import pytest
from journal_helpers import snapshot

from spice.agent.tools.coding import _journal
from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._journal_records import Mark, Record, write_record

FILES: Final = 5
MARK_MOST_BYTES: Final = 256
"""A mark of an entry that dropped nothing stays this small, whatever the entry's size."""


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, stage, home = tmp_path / "work", tmp_path / "stage", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    for index in range(FILES):
        (root / f"f{index}").write_text(f"old {index}\n")
        (stage / f"f{index}").write_text(f"new {index}\n")
    return root, stage, home


def _changes(stage: Path) -> list[Change]:
    return [
        Change(f"f{index}", "modified", "file", "file", 0o644, str(stage / f"f{index}"))
        for index in range(FILES)
    ]


def _entries(journal: Journal) -> Path:
    return Path(journal.directory, "entries")


def test_a_commit_writes_its_record_once_and_a_small_mark(
    places: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, stage, home = places
    written: list[str] = []
    real = write_record

    def spy(directory: str, name: str, value: object) -> int:
        written.append(name)
        return real(directory, name, value)

    journal = Journal.open(str(root), state_home=str(home))
    monkeypatch.setattr(_journal, "write_record", spy)
    done = journal.commit("shell", "c", Judged(tuple(_changes(stage))), journal.opening())
    assert done.entry == 1
    assert written == ["000000000001.json", "000000000001.done"]  # main: the record twice
    mark = _entries(journal) / "000000000001.done"
    assert mark.stat().st_size <= MARK_MOST_BYTES
    record = Record.parse(json.loads((_entries(journal) / "000000000001.json").read_text()))
    assert record.phase == "pending"  # as written before the first rename
    fresh = Journal.open(str(root), state_home=str(home))
    assert fresh._read(1) == journal._read(1)
    assert fresh._read(1).phase == "done"
    assert all(item.source is None for item in fresh._read(1).items)
    assert fresh.recover() == ()


def test_a_path_that_failed_is_not_in_the_applied_entry(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    before = snapshot(root)
    os.mkfifo(stage / "pipe")
    changes = [*_changes(stage), Change("pipe", "added", "file", None, 0o644, str(stage / "pipe"))]
    journal = Journal.open(str(root), state_home=str(home))
    done = journal.commit("shell", "c", Judged(tuple(changes)), journal.opening())
    assert done.failed == ("pipe",)
    assert done.entry is not None
    read = Journal.open(str(root), state_home=str(home))._read(done.entry)
    assert [item.path for item in read.items] == [f"f{index}" for index in range(FILES)]
    history = Journal.open(str(root), state_home=str(home)).history()
    assert history.entries[0].paths == tuple(f"M f{index}" for index in range(FILES))
    undone = Journal.open(str(root), state_home=str(home)).undo()
    assert len(undone.restored) == FILES
    assert snapshot(root) == before


def test_a_record_written_done_by_an_earlier_version_reads_as_before(
    places: tuple[Path, Path, Path],
) -> None:
    root, stage, home = places
    before = snapshot(root)
    journal = Journal.open(str(root), state_home=str(home))
    done = journal.commit("shell", "c", Judged(tuple(_changes(stage))), journal.opening())
    assert done.entry is not None
    applied = journal._read(done.entry)
    entries = _entries(journal)
    (entries / "000000000001.done").unlink()
    (entries / "000000000001.json").write_text(json.dumps(applied.json()))
    older = Journal.open(str(root), state_home=str(home))
    assert older._read(done.entry) == applied
    assert older.recover() == ()
    assert len(older.undo().restored) == FILES
    assert snapshot(root) == before


def test_a_mark_left_by_a_discarded_entry_never_marks_a_new_one(
    places: tuple[Path, Path, Path],
) -> None:
    """A new entry's pending record drops a mark of its id first: a server killed before
    its first rename leaves an entry that is taken back, not trusted."""
    root, _stage, home = places
    journal = Journal.open(str(root), state_home=str(home))
    stale = _entries(journal) / "000000000001.done"
    stale.write_text(json.dumps(Mark(1, (), 0).json()))
    journal._write(Record(1, "shell", None, 0, "pending", ()))
    assert not stale.exists()
    assert journal.recover() == (1,)
    assert list(_entries(journal).iterdir()) == []


def test_an_unreadable_mark_is_refused(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    journal = Journal.open(str(root), state_home=str(home))
    journal.commit("shell", "c", Judged(tuple(_changes(stage))), journal.opening())
    (_entries(journal) / "000000000001.done").write_text('{"id": 1, "dropped": "x"}')
    with pytest.raises(JournalError) as raised:
        Journal.open(str(root), state_home=str(home)).history()
    assert raised.value.code == "journal_unusable"


@pytest.mark.parametrize(
    "value",
    [
        [],
        {"id": "1", "dropped": [], "size": 0},
        {"id": 1, "dropped": [True, "x"], "size": 0},
        {"id": 1, "dropped": {}, "size": 0},
        {"id": 1, "dropped": [], "size": None},
        {"id": 1, "dropped": []},
    ],
)
def test_a_mark_is_read_strictly(value: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - Mark raises a bare ValueError
        Mark.parse(value)


def test_a_mark_applies_only_to_its_own_entry() -> None:
    assert Mark.parse(Mark(2, (0,), 5).json()) == Mark(2, (0,), 5)
    with pytest.raises(ValueError):  # noqa: PT011 - Mark raises a bare ValueError
        Mark(2, (), 0).applied(Record(3, "shell", None, 0, "pending", ()))
