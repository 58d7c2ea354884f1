"""The journal (13.2): commits applied under it, taken back byte for byte and mode for mode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from journal_helpers import after_setup, snapshot

from spice.agent.tools.coding._changes import SHOWN_CHANGES, Change, Judged, shown_changes
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._journal_records import FORMAT, journal_directory


def project(root: Path) -> None:
    (root / "src/pkg/deep").mkdir(parents=True)
    (root / "src/pkg/deep/mod.py").write_text("x = 1\n")
    (root / "src/run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "src/run.sh").chmod(0o755)
    (root / "src/blob.bin").write_bytes(bytes(range(256)) * 40)
    (root / "src/empty").mkdir()
    (root / "src/link").symlink_to("run.sh")
    (root / "keep.txt").write_text("keep\n")


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, stage, home = tmp_path / "work", tmp_path / "stage", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    return root, stage, home


def test_rm_rf_src_taken_back_byte_for_byte(places: tuple[Path, Path, Path]) -> None:
    root, _stage, home = places
    project(root)
    before = snapshot(root)
    journal = Journal.open(str(root), state_home=str(home))
    opened = after_setup(journal, root)
    judged = Judged((Change("src", "deleted", None, "directory"),))
    committed = journal.commit("shell", "call-1", judged, opened)
    assert committed.entry is not None
    assert not committed.conflicts
    assert not committed.copied
    assert not (root / "src").exists()
    # Across a restart: a new Journal object on the same place.
    again = Journal.open(str(root), state_home=str(home))
    undone = again.undo()
    assert undone.restored == ("src",)
    assert not undone.refused
    assert snapshot(root) == before
    history = again.history()
    assert [(e.tool, e.undone) for e in history.entries] == [("undo", False), ("shell", True)]


def test_edit_and_create_undone_with_to(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    (root / "a.txt").write_text("old\n")
    before = snapshot(root)
    journal = Journal.open(str(root), state_home=str(home))
    opened = after_setup(journal, root)
    (stage / "a.txt").write_text("new\n")
    first = journal.commit(
        "replace",
        "r1",
        Judged((Change("a.txt", "modified", "file", "file", 0o644, str(stage / "a.txt")),)),
        opened,
    )
    (stage / "b.txt").write_text("made\n")
    second = journal.commit(
        "replace",
        "r2",
        Judged((Change("b.txt", "added", "file", None, 0o600, str(stage / "b.txt")),)),
        opened,
    )
    assert first.entry is not None
    assert second.entry is not None
    assert (root / "a.txt").read_text() == "new\n"
    assert (root / "b.txt").read_text() == "made\n"
    undone = journal.undo(to=first.entry)
    assert set(undone.restored) == {"a.txt", "b.txt"}
    assert snapshot(root) == before


def test_user_change_refused_then_forced(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    (root / "a.txt").write_text("old\n")
    journal = Journal.open(str(root), state_home=str(home))
    opened = after_setup(journal, root)
    (stage / "a.txt").write_text("call\n")
    journal.commit(
        "shell",
        "c",
        Judged((Change("a.txt", "modified", "file", "file", 0o644, str(stage / "a.txt")),)),
        opened,
    )
    (root / "a.txt").write_text("user\n")
    refused = journal.undo()
    assert refused.refused == ("a.txt",)
    assert refused.entry is None
    assert (root / "a.txt").read_text() == "user\n"
    forced = journal.undo(force=True)
    assert forced.restored == ("a.txt",)
    assert (root / "a.txt").read_text() == "old\n"
    # The undo is undone: the user's version comes back.
    journal.undo()
    assert (root / "a.txt").read_text() == "user\n"


def test_user_edit_during_call_wins(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    (root / "a.txt").write_text("old\n")
    (root / "b.txt").write_text("untouched\n")
    journal = Journal.open(str(root), state_home=str(home))
    opened = after_setup(journal, root)
    for attempt in range(100_000):  # until the file system's clock has ticked past the opening
        (root / "a.txt").write_text(f"user {attempt}\n")
        if (root / "a.txt").lstat().st_ctime_ns >= opened:
            break
    user = (root / "a.txt").read_bytes()
    (stage / "a.txt").write_text("call\n")
    (stage / "b.txt").write_text("call b\n")
    committed = journal.commit(
        "shell",
        "c",
        Judged(
            (
                Change("a.txt", "modified", "file", "file", 0o644, str(stage / "a.txt")),
                Change("b.txt", "modified", "file", "file", 0o644, str(stage / "b.txt")),
            )
        ),
        opened,
    )
    assert committed.conflicts == ("a.txt",)
    assert [c.path for c in committed.applied] == ["b.txt"]
    assert (root / "a.txt").read_bytes() == user
    assert (root / "b.txt").read_text() == "call b\n"
    kept = Path(journal.directory, "store", str(committed.entry), "c0")
    assert kept.read_text() == "call\n"


def test_nothing_changed_adds_no_entry(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    journal = Journal.open(str(root), state_home=str(home))
    assert journal.commit("shell", "c", Judged(()), 0).entry is None
    (stage / "n").write_text("n")
    dry = journal.commit(
        "shell",
        "c",
        Judged((Change("n", "added", "file", None, 0o644, str(stage / "n")),)),
        0,
        dry_run=True,
    )
    assert dry.entry is None
    assert not (root / "n").exists()
    assert journal.history().entries == ()


def test_fifo_source_refused(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    os.mkfifo(stage / "pipe")
    journal = Journal.open(str(root), state_home=str(home))
    committed = journal.commit(
        "shell",
        "c",
        Judged((Change("pipe", "added", "file", None, 0o644, str(stage / "pipe")),)),
        0,
    )
    assert committed.failed == ("pipe",)
    assert committed.entry is None
    assert not (root / "pipe").exists()


def test_hard_links_and_rewritten(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    (stage / "one").write_text("same")
    os.link(stage / "one", stage / "two")
    (stage / "config").write_text("[core]\n\tfsmonitor = evil\n")
    journal = Journal.open(str(root), state_home=str(home))
    changes = (
        Change("config", "added", "file", None, 0o644, str(stage / "config")),
        Change("one", "added", "file", None, 0o644, str(stage / "one"), link=1),
        Change("two", "added", "file", None, 0o644, str(stage / "two"), link=1),
    )
    journal.commit("shell", "c", Judged(changes, rewritten={"config": b"[core]\n"}), 0)
    assert (root / "config").read_bytes() == b"[core]\n"
    assert (root / "one").stat().st_ino == (root / "two").stat().st_ino


def test_unknown_id_and_empty_journal(places: tuple[Path, Path, Path]) -> None:
    root, _stage, home = places
    journal = Journal.open(str(root), state_home=str(home))
    with pytest.raises(JournalError) as raised:
        journal.undo(42)
    assert raised.value.code == "unknown_entry"
    assert "42" in str(raised.value)
    assert journal.undo().entry is None


def test_bad_places_refused(places: tuple[Path, Path, Path], tmp_path: Path) -> None:
    root, _stage, home = places
    with pytest.raises(JournalError) as inside:
        Journal.open(str(root), state_home=str(root / "state"))
    assert inside.value.code == "journal_in_worktree"
    assert not (root / "state").exists()
    open_place = tmp_path / "open"
    open_place.mkdir()
    open_place.chmod(0o777)
    with pytest.raises(JournalError) as writable:
        Journal.open(str(root), state_home=str(open_place / "state"))
    assert writable.value.code == "journal_writable"
    journal = Journal.open(str(root), state_home=str(home))
    Path(journal.directory).chmod(0o777)
    with pytest.raises(JournalError) as loose:
        Journal.open(str(root), state_home=str(home))
    assert loose.value.code == "journal_writable"
    Path(journal.directory).chmod(0o700)
    Path(journal.directory, "journal.json").write_text(f'{{"format": {FORMAT + 1}}}')
    with pytest.raises(JournalError) as newer:
        Journal.open(str(root), state_home=str(home))
    assert newer.value.code == "journal_newer"
    assert journal_directory(str(home), os.path.realpath(root)) in str(newer.value)


@pytest.mark.parametrize(("limit", "kept"), [(4096, 2), (4095, 1)])
def test_max_bytes_both_sides(places: tuple[Path, Path, Path], limit: int, kept: int) -> None:
    root, stage, home = places
    journal = Journal.open(str(root), state_home=str(home), max_bytes=limit)
    for name in ("a", "b"):
        (root / name).write_bytes(b"x" * 2048)
    opened = after_setup(journal, root)
    for name in ("a", "b"):
        (stage / name).write_bytes(b"y")
        journal.commit(
            "shell",
            name,
            Judged((Change(name, "modified", "file", "file", 0o644, str(stage / name)),)),
            opened,
        )
    history = journal.history()
    assert len(history.entries) == kept
    assert history.dropped == 2 - kept


@pytest.mark.parametrize(("days", "kept"), [(1, 1), (0, 0)])
def test_max_age_both_sides(places: tuple[Path, Path, Path], days: int, kept: int) -> None:
    root, stage, home = places
    journal = Journal.open(str(root), state_home=str(home), max_age_days=days)
    (stage / "a").write_text("a")
    journal.commit(
        "shell", "c", Judged((Change("a", "added", "file", None, 0o644, str(stage / "a")),)), 0
    )
    assert len(journal.history().entries) == kept


KILLED = textwrap.dedent(
    """
    import os, sys
    from spice.agent.tools.coding import _journal_apply
    from spice.agent.tools.coding._changes import SHOWN_CHANGES, Change, Judged, shown_changes
    from spice.agent.tools.coding._journal import Journal
    root, stage, home, point, mode, opened = sys.argv[1:7]
    real = _journal_apply.Applier.apply
    calls = []
    def apply(self, op, saved):
        if len(calls) == int(point):
            sys.stdout.write("at\\n"); sys.stdout.flush(); sys.stdin.read()
        calls.append(op.path)
        real(self, op, saved)
    _journal_apply.Applier.apply = apply
    journal = Journal.open(root, state_home=home)
    if mode == "commit":
        changes = [Change("src", "deleted", None, "directory")]
        for n in range(5):
            source = os.path.join(stage, f"f{n}")
            changes.append(Change(f"f{n}", "modified", "file", "file", 0o644, source))
        journal.commit("shell", "c", Judged(tuple(changes)), int(opened))
    else:
        journal.undo()
    sys.stdout.write("done\\n"); sys.stdout.flush()
    """
)


@pytest.mark.parametrize("mode", ["commit", "undo"])
@pytest.mark.parametrize("point", [0, 1, 3, 5])
def test_sigkill_leaves_before_or_after(
    places: tuple[Path, Path, Path], mode: str, point: int
) -> None:
    root, stage, home = places
    project(root)
    for n in range(5):
        (root / f"f{n}").write_text(f"old {n}")
        (stage / f"f{n}").write_text(f"new {n}")
    if mode == "undo":
        journal = Journal.open(str(root), state_home=str(home))
        changes = [Change("src", "deleted", None, "directory")]
        changes += [
            Change(f"f{n}", "modified", "file", "file", 0o644, str(stage / f"f{n}"))
            for n in range(5)
        ]
        journal.commit("shell", "c", Judged(tuple(changes)), after_setup(journal, root))
    before = snapshot(root)
    opened = after_setup(Journal.open(str(root), state_home=str(home)), root)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED,
            str(root),
            str(stage),
            str(home),
            str(point),
            mode,
            str(opened),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == b"at\n"
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    child.stdout.close()
    assert child.stdin is not None
    child.stdin.close()
    journal = Journal.open(str(root), state_home=str(home))
    taken_back = journal.recover()
    assert len(taken_back) == 1
    assert snapshot(root) == before
    assert not list(root.glob(".spice-journal-*"))
    assert journal.recover() == ()
    if mode == "undo":  # the undo can still run whole after the recovery
        assert journal.undo().restored
        assert (root / "src/run.sh").read_text().startswith("#!")


def test_answer_bytes_bounded_for_10000_files(places: tuple[Path, Path, Path]) -> None:
    root, stage, home = places
    changes = []
    for n in range(10_000):
        (stage / f"f{n}").write_bytes(b"")
        changes.append(Change(f"f{n}", "added", "file", None, 0o644, str(stage / f"f{n}")))
    journal = Journal.open(str(root), state_home=str(home))
    committed = journal.commit("shell", "c", Judged(tuple(changes)), 0)
    shown = shown_changes(committed.applied)
    assert shown["added"] == 10_000
    paths = shown["paths"]
    assert isinstance(paths, list)
    assert len(paths) == SHOWN_CHANGES
    assert journal.undo().restored
    assert not any(root.iterdir())


def test_an_added_directory_with_its_files_is_undone_without_force(
    places: tuple[Path, Path, Path],
) -> None:
    """The files beneath an added directory that the same undo takes back are not another
    writer's (undo refused every added directory that held anything)."""
    root, stage, home = places
    (stage / "d").mkdir()
    (stage / "d/f.py").write_text("x\n")
    journal = Journal.open(str(root), state_home=str(home))
    changes = (
        Change("d", "added", "directory", None, 0o755),
        Change("d/f.py", "added", "file", None, 0o644, str(stage / "d/f.py")),
    )
    assert journal.commit("shell", "c", Judged(changes), journal.opening()).entry is not None
    assert (root / "d/f.py").read_text() == "x\n"
    undone = journal.undo()
    assert undone.refused == ()
    assert not (root / "d").exists()
    # Another writer's file in an added directory still keeps it (and is named).
    (stage / "d").mkdir(exist_ok=True)
    (stage / "d/f.py").write_text("x\n")
    assert journal.commit("shell", "c2", Judged(changes), journal.opening()).entry is not None
    (root / "d/user.txt").write_text("mine\n")
    assert journal.undo().refused == ("d",)
    assert (root / "d/user.txt").read_text() == "mine\n"


def test_undo_to_takes_back_several_entries_that_changed_one_path(
    places: tuple[Path, Path, Path],
) -> None:
    """An agent edits one file three times (then deletes it): ``undo --to`` the first puts
    it back as it was before all of them; each step is checked against what the steps
    before it leave, not against the worktree as it was before the undo. An undo of that
    undo brings the last state back."""
    root, stage, home = places
    (root / "a.txt").write_text("v0\n")
    before = snapshot(root)
    journal = Journal.open(str(root), state_home=str(home))
    entries = []
    for version in ("v1", "v2", "v3"):
        (stage / "a.txt").write_text(f"{version}\n")
        change = Change("a.txt", "modified", "file", "file", 0o644, str(stage / "a.txt"))
        opened = after_setup(journal, root)  # each call opens after the one before
        entries.append(journal.commit("replace", version, Judged((change,)), opened).entry)
    opened = after_setup(journal, root)
    deleted = journal.commit(
        "shell", "rm", Judged((Change("a.txt", "deleted", None, "file"),)), opened
    )
    assert deleted.entry is not None
    assert not (root / "a.txt").exists()
    undone = journal.undo(to=entries[0])
    assert undone.refused == ()
    assert undone.restored.count("a.txt") == 4
    assert snapshot(root) == before
    assert journal.undo().refused == ()  # the undo undone: the last state again (deleted)
    assert not (root / "a.txt").exists()


def test_undo_to_still_refuses_a_path_the_user_changed_after_the_last_entry(
    places: tuple[Path, Path, Path],
) -> None:
    """Negative: the newest step finds the user's edit: that path is refused whole (every
    older step of it too), unless ``force``."""
    root, stage, home = places
    (root / "a.txt").write_text("v0\n")
    journal = Journal.open(str(root), state_home=str(home))
    first = None
    for version in ("v1", "v2"):
        (stage / "a.txt").write_text(f"{version}\n")
        change = Change("a.txt", "modified", "file", "file", 0o644, str(stage / "a.txt"))
        opened = after_setup(journal, root)
        entry = journal.commit("replace", version, Judged((change,)), opened).entry
        first = first or entry
    assert first is not None
    (root / "a.txt").write_text("mine\n")
    undone = journal.undo(to=first)
    assert set(undone.refused) == {"a.txt"}
    assert (root / "a.txt").read_text() == "mine\n"
    forced = journal.undo(to=first, force=True)
    assert forced.refused == ()
    assert (root / "a.txt").read_text() == "v0\n"
