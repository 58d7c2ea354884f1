"""``replace`` under the worktree's journal (13.2): one entry per write that changed a file,
the old bytes kept, taken back byte for byte; ``call_id`` in every answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from replace_helpers import content_of, create_arguments, digest, make_call, replace_arguments, run

from spice.agent.tools.coding import Config
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._journal_records import checked_place, read_json, write_record
from spice.agent.tools.coding._replace import ReplaceTool

OLD = b"old line\n"
NEW = "new line\n"
WAIT_SECONDS = 60.0


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    found: dict[str, tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        status = path.lstat()
        data = b"" if path.is_dir() else path.read_bytes()
        found[str(path.relative_to(root))] = (status.st_mode, data)
    return found


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    root, home = tmp_path / "work", tmp_path / "state"
    root.mkdir()
    (root / "a.txt").write_bytes(OLD)
    (root / "a.txt").chmod(0o640)
    return root, home


def occupy(path: Path) -> None:
    path.write_bytes(b"")


def tool_of(root: Path, home: Path) -> tuple[ReplaceTool, Journal]:
    journal = Journal.open(str(root), state_home=str(home))
    return ReplaceTool(Config(str(root), journal=journal)), journal


async def test_an_edit_and_a_create_are_entries_undone_with_to(places: tuple[Path, Path]) -> None:
    root, home = places
    before = snapshot(root)
    tool, journal = tool_of(root, home)
    _, edited = await run(tool, replace_arguments("a.txt", NEW, OLD), call_id="c-edit")
    _, created = await run(tool, create_arguments("new/deep/b.txt", "b\n"), call_id="c-new")
    assert (True, True) == (edited["ok"], created["ok"])
    assert ("c-edit", "c-new") == (edited["call_id"], created["call_id"])
    history = journal.history()
    assert [("replace", "c-new"), ("replace", "c-edit")] == [
        (e.tool, e.call_id) for e in history.entries
    ]
    assert ("A new/", "A new/deep/", "A new/deep/b.txt") == history.entries[0].paths
    assert ("M a.txt",) == history.entries[1].paths
    oldest = history.entries[-1].id
    undone = Journal.open(str(root), state_home=str(home)).undo(to=oldest)
    assert () == undone.refused
    assert before == snapshot(root)


async def test_a_write_that_changes_nothing_adds_no_entry(places: tuple[Path, Path]) -> None:
    root, home = places
    tool, journal = tool_of(root, home)
    same, content = await run(tool, replace_arguments("a.txt", OLD.decode(), OLD))
    assert content["ok"]
    assert not content["changed"]
    assert "call-1" == content["call_id"]
    _, stale = await run(tool, replace_arguments("a.txt", NEW, b"other\n"))
    _, exists = await run(tool, create_arguments("a.txt", NEW))
    _, invalid = await run(tool, {"path": "a.txt"})
    assert ["stale", "already_exists", "invalid_arguments"] == [
        stale["code"],
        exists["code"],
        invalid["code"],
    ]
    assert {"call-1"} == {stale["call_id"], exists["call_id"], invalid["call_id"]}
    assert () == journal.history().entries
    assert OLD == (root / "a.txt").read_bytes()
    del same


async def test_without_a_journal_the_answer_still_names_the_call(places: tuple[Path, Path]) -> None:
    root, home = places
    result = await ReplaceTool(Config(str(root))).execute(
        make_call(replace_arguments("a.txt", NEW, OLD), "plain")
    )
    assert "plain" == content_of(result)["call_id"]
    assert not home.exists()


async def test_a_journal_that_cannot_keep_the_bytes_refuses_the_write(
    places: tuple[Path, Path],
) -> None:
    root, home = places
    tool, journal = tool_of(root, home)
    # The next entry's store is taken by a file: the entry cannot be made.
    occupy(Path(journal.directory, "store", "1"))
    _, content = await run(tool, replace_arguments("a.txt", NEW, OLD))
    assert ("journal_failed", False) == (content["code"], content["committed"])
    _, made = await run(tool, create_arguments("x/y.txt", NEW))
    assert "journal_failed" == made["code"]
    assert OLD == (root / "a.txt").read_bytes()
    assert not (root / "x").exists()
    assert () == journal.history().entries


async def test_a_hard_linked_file_is_kept_as_a_copy(places: tuple[Path, Path]) -> None:
    root, home = places
    os.link(root / "a.txt", root / "twin.txt")
    tool, journal = tool_of(root, home)
    await run(tool, replace_arguments("a.txt", NEW, OLD))
    (root / "twin.txt").write_bytes(b"the twin changed later\n")
    journal.undo()
    assert OLD == (root / "a.txt").read_bytes()
    assert 0o640 == (root / "a.txt").stat().st_mode & 0o777


async def test_a_write_through_a_link_is_journaled_at_its_real_place(
    places: tuple[Path, Path],
) -> None:
    root, home = places
    (root / "real").mkdir()
    (root / "real/c.txt").write_bytes(OLD)
    (root / "via").symlink_to("real")
    tool, journal = tool_of(root, home)
    _, content = await run(tool, replace_arguments("via/c.txt", NEW, OLD))
    assert content["ok"]
    assert ("M real/c.txt",) == journal.history().entries[0].paths
    journal.undo()
    assert OLD == (root / "real/c.txt").read_bytes()


_KILLED = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from spice.agent.tool import Call
    from spice.agent.tools.coding import Config
    from spice.agent.tools.coding._commit import POSIX, Checkpoint
    from spice.agent.tools.coding._journal import Journal, JournalError
    from spice.agent.tools.coding._replace import ReplaceTool

    class Killing:
        def __getattr__(self, name):
            return getattr(POSIX, name)

        def checkpoint(self, point):
            if point == Checkpoint.COMMITTED:
                os.kill(os.getpid(), signal.SIGKILL)

    root, home, arguments = sys.argv[1:]
    journal = Journal.open(root, state_home=home)
    tool = ReplaceTool(Config(root, journal=journal), syscalls=Killing())
    asyncio.run(tool.execute(Call("killed", "replace", arguments)))
    """
)


@pytest.mark.parametrize("create", [False, True])
def test_a_server_killed_after_the_commit_is_rolled_back_at_the_next_start(
    places: tuple[Path, Path], create: bool
) -> None:
    root, home = places
    before = snapshot(root)
    arguments = create_arguments("n/m.txt", NEW) if create else replace_arguments("a.txt", NEW, OLD)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED, str(root), str(home), json.dumps(arguments)],
        check=False,
        timeout=WAIT_SECONDS,
        capture_output=True,
    )
    assert -signal.SIGKILL == child.returncode, child.stderr[-2000:]
    assert before != snapshot(root)  # the commit happened, the entry is pending
    journal = Journal.open(str(root), state_home=str(home))
    assert 1 == len(journal.recover())
    assert before == snapshot(root)
    assert () == journal.history().entries
    assert digest(OLD) == digest((root / "a.txt").read_bytes())


async def test_a_store_left_without_its_entry_does_not_block_the_next_write(
    places: tuple[Path, Path],
) -> None:
    """A server killed after making an entry's store and before writing its record leaves
    a store no record names: the next write under that id goes on (not journal_failed)."""
    root, home = places
    tool, journal = tool_of(root, home)
    orphan = Path(journal.directory) / "store" / "1"
    orphan.mkdir()
    (orphan / "b0").write_bytes(b"left by a killed server")
    _, content = await run(tool, replace_arguments("a.txt", NEW, OLD))
    assert content["ok"], content
    assert ["b0"] == [p.name for p in orphan.iterdir()]
    assert OLD == (orphan / "b0").read_bytes()
    assert 1 == len(journal.history().entries)


def test_the_windows_route_writes_records_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' Python opens no directory by descriptor: records are written by path
    there (a synced temporary, then ``os.replace``), and read back the same."""
    monkeypatch.setattr(sys, "platform", "win32")
    first = write_record(str(tmp_path), "r.json", {"format": 1, "n": 1})
    second = write_record(str(tmp_path), "r.json", {"format": 1, "n": 2})
    monkeypatch.undo()
    assert {"format": 1, "n": 2} == read_json(str(tmp_path / "r.json"), "shown")
    assert first != second  # each record is a new file (the index relies on it)
    assert second == (tmp_path / "r.json").stat().st_ino
    assert ["r.json"] == [p.name for p in tmp_path.iterdir()]


def test_the_windows_route_judges_no_mode_bits(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has no owner or mode bits here (the profile's ACL keeps the journal): a
    place POSIX refuses for its mode is used there, and one in the worktree never is."""
    root, home = places
    place = home / "journal"
    place.mkdir(parents=True)
    place.chmod(0o777)
    with pytest.raises(JournalError):
        checked_place(str(place), str(root))
    monkeypatch.setattr(sys, "platform", "win32")
    used = checked_place(str(place), str(root))
    with pytest.raises(JournalError) as inside:
        checked_place(str(root / "j"), str(root))
    monkeypatch.undo()
    assert str(place) == used
    assert "journal_in_worktree" == inside.value.code


def test_windows_begin_keeps_the_checked_bytes(places: tuple[Path, Path]) -> None:
    """The Windows engine hands the entry the bytes its last check read: they are the
    store's copy, the entry is pending until finished, and a retried rename's second
    call keeps what the first kept."""
    root, home = places
    journal = Journal.open(str(root), state_home=str(home))
    with journal.replacing("c-win", "a.txt") as pending:
        pending.begin_bytes(OLD, digest(NEW.encode()))
        pending.begin_bytes(b"never kept", digest(NEW.encode()))
        record = json.loads(
            (Path(journal.directory) / "entries" / "000000000001.json").read_bytes()
        )
        assert "pending" == record["phase"]
        assert pending.finish(committed=True)
    (item,) = json.loads((Path(journal.directory) / "entries" / "000000000001.json").read_bytes())[
        "items"
    ]
    assert (digest(OLD), digest(NEW.encode()), None) == (
        item["before"]["sha256"],
        item["after"]["sha256"],
        item["after"]["mode"],
    )
    assert OLD == (Path(journal.directory) / "store" / "1" / item["saved"]).read_bytes()
    assert [("replace", "c-win", ("M a.txt",))] == [
        (e.tool, e.call_id, e.paths) for e in journal.history().entries
    ]


def test_windows_begin_of_a_create_keeps_nothing(places: tuple[Path, Path]) -> None:
    root, home = places
    journal = Journal.open(str(root), state_home=str(home))
    with journal.replacing(None, "d/n.txt", [("d", None)]) as pending:
        pending.begin_bytes(None, digest(b"n"))
        pending.finish(committed=False)  # not committed: the entry goes
    assert () == journal.history().entries
    assert [] == list((Path(journal.directory) / "store").iterdir())
