"""The journal's index (13.2): a commit does not re-read every entry for its bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from spice.agent.tools.coding import _journal_index
from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal
from spice.agent.tools.coding._journal_records import Record

ENTRIES = 12


def _commit(journal: Journal, stage: Path, name: str) -> int:
    (stage / name).write_text(name)
    change = Change(name, "added", "file", None, 0o644, str(stage / name))
    entry = journal.commit("shell", name, Judged((change,)), journal.opening()).entry
    assert entry is not None
    return entry


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ids of the records read back and parsed (a spy on the real parser)."""
    seen: list[int] = []
    real = Record.parse

    def spy(value: object) -> Record:
        record = real(value)
        seen.append(record.id)
        return record

    monkeypatch.setattr(Record, "parse", staticmethod(spy))
    return seen


def test_a_commit_reads_no_entry_the_journal_already_knows(
    tmp_path: Path, parsed: list[int]
) -> None:
    root, stage = tmp_path / "work", tmp_path / "stage"
    root.mkdir()
    stage.mkdir()
    journal = Journal.open(str(root), state_home=str(tmp_path / "state"))
    for index in range(ENTRIES):
        _commit(journal, stage, f"f{index}")
    parsed.clear()
    _commit(journal, stage, "last")
    assert parsed == []  # was every entry, twice (recovery's search and the bounds)


def test_entries_another_journal_wrote_or_dropped_are_seen(
    tmp_path: Path, parsed: list[int]
) -> None:
    """Another process's journal object on the same place: its new entry is read once,
    the entries its bounds dropped are forgotten, and a pending entry is always read."""
    root, stage, home = tmp_path / "work", tmp_path / "stage", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    mine = Journal.open(str(root), state_home=str(home))
    other = Journal.open(str(root), state_home=str(home))
    first = _commit(mine, stage, "a")
    second = _commit(other, stage, "b")
    parsed.clear()
    third = _commit(mine, stage, "c")
    assert (first, second, third) == (1, 2, 3)
    assert parsed == [second]
    ageless = Journal.open(str(root), state_home=str(home), max_age_days=0)  # drops all
    _commit(ageless, stage, "d")
    assert mine.history().entries == ()
    assert _commit(mine, stage, "e") == 5
    pending = Record(9, "shell", None, 0, "pending", ())
    other._write(pending)
    parsed.clear()
    for _ in range(2):
        mine._index.scan()
    assert parsed == [9, 9]  # a pending record is read each time, a done one never
    assert mine.recover() == (9,)
    assert mine.recover() == ()


def test_an_entry_name_is_its_id_or_nothing() -> None:
    assert _journal_index.entry_id("000000000012.json") == 12
    for name in (".000000000012.json.tmp", "12.txt", "x.json", ".json", "-1.json"):
        assert _journal_index.entry_id(name) is None
