"""``replace`` under the worktree's journal on Windows (13.2, issue 45): an entry per write
that changed a file, the old bytes kept, taken back byte for byte beneath the held root
handle; an undo is an entry of its own; a killed write is recovered at the next open.

Runs under Windows CPython (real Windows, or Wine: ``make test-windows``); skipped
elsewhere with that reason.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from windows_helpers import make_junction, windows_only

from spice.agent.tool import Call, Result
from spice.agent.tools.coding import Config, new_replace
from spice.agent.tools.coding._commit import CommitGate
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._journal_records import journal_directory, locked
from spice.agent.tools.coding._journal_write import PendingWrite
from spice.agent.tools.coding._replace_arguments import decode
from spice.agent.tools.coding._windows import _restore
from spice.agent.tools.coding._windows._replace import work

pytestmark = windows_only

OLD = b"old line\r\n"
NEW = "new line\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_of(result: Result) -> dict[str, object]:
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    root, home = tmp_path / "work", tmp_path / "state"
    root.mkdir()
    (root / "a.txt").write_bytes(OLD)
    return root, home


def journal_of(places: tuple[Path, Path]) -> Journal:
    root, home = places
    return Journal.open(str(root), state_home=str(home))


async def replace(
    places: tuple[Path, Path], arguments: dict[str, object], call_id: str = "c"
) -> dict[str, object]:
    tool = new_replace(Config(str(places[0]), journal=journal_of(places)))
    result = await tool.execute(Call(call_id, "replace", json.dumps(arguments)))
    return content_of(result)


def edit(new: str = NEW, old: bytes = OLD) -> dict[str, object]:
    return {"path": "a.txt", "content": new, "expected_sha256": sha(old)}


def assert_outside(directory: Path, root: Path) -> None:
    assert directory.is_dir()
    assert not directory.is_relative_to(root)


# ---- positive -------------------------------------------------------------------------------


async def test_a_replace_adds_an_entry_and_undo_takes_it_back_byte_for_byte(
    places: tuple[Path, Path],
) -> None:
    root, home = places
    content = await replace(places, edit(), call_id="c-edit")
    assert (True, True, "c-edit") == (content["ok"], content["changed"], content["call_id"])
    assert NEW.encode() == (root / "a.txt").read_bytes()
    journal = journal_of(places)
    history = journal.history()
    assert [("replace", "c-edit", ("M a.txt",), False)] == [
        (e.tool, e.call_id, e.paths, e.undone) for e in history.entries
    ]
    assert_outside(Path(journal_directory(str(home), str(root.resolve()))), root)
    undone = journal.undo()
    assert (("a.txt",), ()) == (undone.restored, undone.refused)
    assert OLD == (root / "a.txt").read_bytes()
    history = journal.history()
    assert ["undo", "replace"] == [e.tool for e in history.entries]
    assert history.entries[1].undone
    again = journal.undo()  # an undo is undone like any entry: the call's bytes come back
    assert ("a.txt",) == again.restored
    assert NEW.encode() == (root / "a.txt").read_bytes()


async def test_the_entry_records_the_digests_before_and_after(places: tuple[Path, Path]) -> None:
    root, home = places
    await replace(places, edit())
    entries = Path(journal_directory(str(home), str(root.resolve()))) / "entries"
    (record_file,) = entries.glob("*.json")
    record = json.loads(record_file.read_bytes())
    assert "pending" == record["phase"]  # as written before the rename; applied by its mark
    assert [record_file.with_suffix(".done")] == list(entries.glob("*.done"))
    (item,) = record["items"]
    assert (sha(OLD), sha(NEW.encode())) == (item["before"]["sha256"], item["after"]["sha256"])


async def test_a_create_in_new_directories_is_undone_whole(places: tuple[Path, Path]) -> None:
    root, _home = places
    before = snapshot(root)
    content = await replace(
        places, {"path": "new/deep/b.txt", "content": "b\n", "create": True}, call_id="c-new"
    )
    assert content["ok"]
    journal = journal_of(places)
    assert ("A new/", "A new/deep/", "A new/deep/b.txt") == journal.history().entries[0].paths
    undone = journal.undo()
    assert () == undone.refused
    assert before == snapshot(root)
    journal.undo()  # and back again
    assert b"b\n" == (root / "new" / "deep" / "b.txt").read_bytes()


async def test_undo_to_takes_back_every_call_newest_first(places: tuple[Path, Path]) -> None:
    root, _home = places
    before = snapshot(root)
    await replace(places, edit())
    await replace(places, edit("third\n", NEW.encode()))
    await replace(places, {"path": "c.txt", "content": "c", "create": True})
    journal = journal_of(places)
    oldest = journal.history().entries[-1].id
    undone = journal.undo(to=oldest)
    assert () == undone.refused
    assert before == snapshot(root)


# ---- negative -------------------------------------------------------------------------------


async def test_a_write_that_changes_nothing_adds_no_entry(places: tuple[Path, Path]) -> None:
    same = await replace(places, edit(OLD.decode(), OLD))
    stale = await replace(places, edit(NEW, b"other\n"))
    assert (True, False) == (same["ok"], same["changed"])
    assert "stale" == stale["code"]
    assert () == journal_of(places).history().entries


async def test_a_path_changed_since_is_refused_unless_forced(places: tuple[Path, Path]) -> None:
    root, _home = places
    await replace(places, edit())
    (root / "a.txt").write_bytes(b"the user's edit\n")
    journal = journal_of(places)
    undone = journal.undo()
    assert ((), ("a.txt",), None) == (undone.restored, undone.refused, undone.entry)
    assert b"the user's edit\n" == (root / "a.txt").read_bytes()
    forced = journal.undo(force=True)
    assert ("a.txt",) == forced.restored
    assert OLD == (root / "a.txt").read_bytes()
    journal.undo()  # the forced undo is an entry: the user's edit comes back
    assert b"the user's edit\n" == (root / "a.txt").read_bytes()


async def test_a_created_directory_holding_more_is_left(places: tuple[Path, Path]) -> None:
    root, _home = places
    await replace(places, {"path": "d/f.txt", "content": "f", "create": True})
    (root / "d" / "mine.txt").write_bytes(b"mine")
    undone = journal_of(places).undo()
    assert ("d/f.txt",) == undone.restored
    assert ("d",) == undone.refused
    assert [b"mine"] == [p.read_bytes() for p in (root / "d").iterdir()]


def test_an_unknown_entry_is_an_error(places: tuple[Path, Path]) -> None:
    with pytest.raises(JournalError) as raised:
        journal_of(places).undo(7)
    assert "unknown_entry" == raised.value.code


async def test_undo_never_follows_a_junction(places: tuple[Path, Path]) -> None:
    root, _home = places
    await replace(places, {"path": "d/f.txt", "content": "f", "create": True})
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_bytes(b"f")
    (root / "d" / "f.txt").unlink()
    (root / "d").rmdir()
    make_junction(root / "d", outside)
    undone = journal_of(places).undo(force=True)
    assert "d/f.txt" not in undone.restored
    assert b"f" == (outside / "f.txt").read_bytes()


# ---- failure and recovery -------------------------------------------------------------------


def unmark(places: tuple[Path, Path]) -> None:
    """Every entry left ``pending``, as a server killed between its commit and its mark."""
    root, home = places
    entries = Path(journal_directory(str(home), str(root.resolve()))) / "entries"
    for path in entries.glob("*.done"):
        path.unlink()


async def test_a_write_killed_after_its_commit_is_taken_back_at_the_next_open(
    places: tuple[Path, Path],
) -> None:
    root, _home = places
    await replace(places, {"path": "n/new.txt", "content": "n", "create": True})
    await replace(places, edit())
    unmark(places)  # as a server killed between the commit and its mark leaves it
    journal = journal_of(places)
    assert 2 == len(journal.recover())
    assert OLD == (root / "a.txt").read_bytes()
    assert not (root / "n").exists()
    assert () == journal.history().entries


async def test_a_write_killed_before_its_commit_leaves_the_path_as_it_was(
    places: tuple[Path, Path],
) -> None:
    root, _home = places
    await replace(places, edit())
    unmark(places)
    (root / "a.txt").write_bytes(OLD)  # as if the rename never happened
    journal = journal_of(places)
    assert 1 == len(journal.recover())
    assert OLD == (root / "a.txt").read_bytes()
    assert () == journal.history().entries


async def test_a_journal_that_cannot_keep_the_old_file_refuses_the_write(
    places: tuple[Path, Path],
) -> None:
    root, home = places
    journal = journal_of(places)
    store = Path(journal.directory) / "store"
    store.rmdir()
    store.write_bytes(b"not a directory")
    tool = new_replace(Config(str(root), journal=journal))
    content = content_of(await tool.execute(Call("c", "replace", json.dumps(edit()))))
    assert "journal_failed" == content["code"]
    assert OLD == (root / "a.txt").read_bytes()
    assert () == journal.history().entries
    del home


# ---- cancellation and bounds ----------------------------------------------------------------


def test_a_cancellation_at_the_commit_point_leaves_no_entry(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry is written, then the gate refuses the commit: the entry goes, the file
    is as it was (the write never happened)."""
    root, _home = places
    journal = journal_of(places)
    gate = CommitGate()
    original = PendingWrite.begin_bytes

    def begin_then_cancel(self: PendingWrite, before: bytes | None, sha256: str) -> None:
        original(self, before, sha256)
        gate.cancel()

    monkeypatch.setattr(PendingWrite, "begin_bytes", begin_then_cancel)
    arguments = decode(json.dumps(edit()), Config(str(root)))
    done = work(Config(str(root), journal=journal), arguments, gate, "c-cancel")
    assert done.outcome.aborted
    assert OLD == (root / "a.txt").read_bytes()
    assert () == journal.history().entries
    assert [] == list((Path(journal.directory) / "store").iterdir())


def test_a_held_journal_is_busy_and_free_again_after(places: tuple[Path, Path]) -> None:
    journal = journal_of(places)
    with locked(journal.directory, "shown"):
        with pytest.raises(JournalError) as raised, locked(journal.directory, "shown", wait=0.0):
            pass
        assert "journal_busy" == raised.value.code
    with locked(journal.directory, "shown", wait=0.0):
        pass


@pytest.mark.parametrize(("extra", "restored"), [(0, True), (1, False)])
async def test_undo_reads_files_up_to_its_bound(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, extra: int, restored: bool
) -> None:
    root, _home = places
    new = "n" * 10
    await replace(places, edit(new))
    assert len(OLD) == len(new)  # the bound is met by what is there and what comes back
    monkeypatch.setattr(_restore, "RESTORE_MAX_BYTES", len(new) - extra)
    undone = journal_of(places).undo()
    assert restored == (("a.txt",) == undone.restored)
    assert (OLD if restored else new.encode()) == (root / "a.txt").read_bytes()
