"""A whole added directory committed in one rename (``Change.whole``, contract 13.1, 13.2).

A directory a call added with everything beneath it arrives by one rename of its stage
directory and is one item of the entry; its paths are still counted and listed. What the
policy refused beneath it makes it applied path by path. Undo moves it whole into the
undo's store (nothing put there since is lost; ``undo`` of the undo brings it back).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from journal_helpers import after_setup, snapshot

from spice.agent.tools.coding._changes import Change, Judged, Kind, shown_changes
from spice.agent.tools.coding._journal import Journal
from spice.agent.tools.coding._journal_records import Item, Record, State

BINARY = bytes(range(256)) * 64


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, stage, home = tmp_path / "work", tmp_path / "stage", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    return root, stage, home


def new_tree(stage: Path) -> Path:
    """A new ``venv`` in the stage: nested directories, an executable, a symbolic link,
    an empty directory, a binary file."""
    top = stage / "venv"
    (top / "lib/site/pkg").mkdir(parents=True)
    (top / "bin").mkdir()
    (top / "empty").mkdir()
    (top / "bin/python").write_text("#!/bin/sh\necho py\n")
    (top / "bin/python").chmod(0o755)
    (top / "bin/python3").symlink_to("python")
    (top / "lib/site/pkg/__init__.py").write_text("X = 1\n")
    (top / "lib/site/pkg/data.bin").write_bytes(BINARY)
    (top / "lib/site/pkg/data.bin").chmod(0o600)
    (top / "lib").chmod(0o750)
    return top


def changes_of(stage: Path, top: str, *, whole: bool = True) -> tuple[Change, ...]:
    """The reader's list for ``stage/top`` (the directory marked ``whole``)."""
    found: list[Change] = []
    base = stage / top
    status = base.lstat()
    found.append(
        Change(
            top, "added", "directory", None, stat.S_IMODE(status.st_mode), str(base), None, whole
        )
        if whole
        else Change(top, "added", "directory", None, stat.S_IMODE(status.st_mode))
    )
    for path in sorted(base.rglob("*"), key=lambda p: str(p.relative_to(stage)).split("/")):
        relative = str(path.relative_to(stage))
        info = path.lstat()
        kind: Kind
        if stat.S_ISDIR(info.st_mode):
            found.append(Change(relative, "added", "directory", None, stat.S_IMODE(info.st_mode)))
            continue
        kind = "symlink" if stat.S_ISLNK(info.st_mode) else "file"
        mode = None if kind == "symlink" else stat.S_IMODE(info.st_mode)
        found.append(Change(relative, "added", kind, None, mode, str(path)))
    return tuple(found)


def record_of(journal: Journal, entry: int) -> Record:
    return journal._read(entry)


def test_a_new_tree_arrives_whole_and_undo_takes_it_back(
    places: tuple[Path, Path, Path],
) -> None:
    root, stage, home = places
    (root / "keep.txt").write_text("keep\n")
    new_tree(stage)
    expected = snapshot(stage / "venv")
    before = snapshot(root)
    journal = Journal.open(str(root), state_home=str(home))
    changes = changes_of(stage, "venv")
    committed = journal.commit("shell", "c", Judged(changes), after_setup(journal, root))
    assert committed.entry is not None
    assert committed.applied == changes  # every path said, the apply collapsed
    assert shown_changes(committed.applied)["added"] == len(changes)
    assert not committed.copied
    assert snapshot(root / "venv") == expected  # byte for byte, mode for mode
    assert not (stage / "venv").exists()  # renamed, not copied
    items = record_of(journal, committed.entry).items
    assert [(item.path, item.whole) for item in items] == [("venv", True)]
    assert journal.history().entries[0].paths == ("A venv/",)
    undone = journal.undo()
    assert undone.restored == ("venv",)
    assert undone.refused == ()
    assert snapshot(root) == before
    again = journal.undo()  # the undo undone: the tree comes back whole
    assert again.restored == ("venv",)
    assert snapshot(root / "venv") == expected


def test_what_the_user_put_in_it_later_is_kept_by_the_undo(
    places: tuple[Path, Path, Path],
) -> None:
    """Undo of a whole directory checks the directory itself and moves it whole into the
    undo's store: the user's later file is not lost, and comes back with it."""
    root, stage, home = places
    new_tree(stage)
    journal = Journal.open(str(root), state_home=str(home))
    journal.commit("shell", "c", Judged(changes_of(stage, "venv")), journal.opening())
    (root / "venv/user.txt").write_text("mine\n")
    (root / "venv/bin/python").write_text("edited\n")
    undone = journal.undo()
    assert undone.restored == ("venv",)
    assert not (root / "venv").exists()
    assert journal.undo().restored == ("venv",)
    assert (root / "venv/user.txt").read_text() == "mine\n"
    assert (root / "venv/bin/python").read_text() == "edited\n"


def test_a_changed_mode_of_the_directory_itself_is_refused_without_force(
    places: tuple[Path, Path, Path],
) -> None:
    root, stage, home = places
    new_tree(stage)
    journal = Journal.open(str(root), state_home=str(home))
    journal.commit("shell", "c", Judged(changes_of(stage, "venv")), journal.opening())
    (root / "venv").chmod(0o700)
    assert journal.undo().refused == ("venv",)
    assert (root / "venv/bin/python").exists()
    assert journal.undo(force=True).restored == ("venv",)
    assert not (root / "venv").exists()


def test_a_refused_path_inside_makes_it_applied_path_by_path(
    places: tuple[Path, Path, Path],
) -> None:
    root, stage, home = places
    new_tree(stage)
    (stage / "venv/secret.sh").write_text("refused\n")
    all_changes = changes_of(stage, "venv")
    kept = tuple(c for c in all_changes if c.path != "venv/secret.sh")
    journal = Journal.open(str(root), state_home=str(home))
    committed = journal.commit("shell", "c", Judged(kept, ("venv/secret.sh",)), journal.opening())
    assert committed.entry is not None
    assert committed.applied == kept
    assert not (root / "venv/secret.sh").exists()
    assert (root / "venv/lib/site/pkg/data.bin").read_bytes() == BINARY
    items = record_of(journal, committed.entry).items
    assert len(items) == len(kept)
    assert not any(item.whole for item in items)


def test_a_rewritten_file_inside_makes_it_applied_path_by_path(
    places: tuple[Path, Path, Path],
) -> None:
    root, stage, home = places
    new_tree(stage)
    changes = changes_of(stage, "venv")
    rewritten = {"venv/lib/site/pkg/__init__.py": b"REWRITTEN = 1\n"}
    journal = Journal.open(str(root), state_home=str(home))
    committed = journal.commit("shell", "c", Judged(changes, (), rewritten), journal.opening())
    assert committed.entry is not None
    assert (root / "venv/lib/site/pkg/__init__.py").read_bytes() == b"REWRITTEN = 1\n"
    assert len(record_of(journal, committed.entry).items) == len(changes)


def test_a_new_directory_beside_an_existing_one(places: tuple[Path, Path, Path]) -> None:
    """Only the new directory moves: ``venv`` beside ``venv2``, ``venv.old`` and a
    ``venv-x`` that exist; an empty new directory is whole too."""
    root, stage, home = places
    for name in ("venv2", "venv.old", "venv-x"):
        (root / name).mkdir()
        (root / name / "f").write_text(name)
    before = snapshot(root)
    new_tree(stage)
    (stage / "void").mkdir()
    changes = (*changes_of(stage, "venv"), *changes_of(stage, "void"))
    journal = Journal.open(str(root), state_home=str(home))
    committed = journal.commit("shell", "c", Judged(changes), after_setup(journal, root))
    assert committed.entry is not None
    assert [item.path for item in record_of(journal, committed.entry).items] == ["venv", "void"]
    assert (root / "void").is_dir()
    assert not any((root / "void").iterdir())
    for name in ("venv2", "venv.old", "venv-x"):
        assert (root / name / "f").read_text() == name
    journal.undo()
    assert snapshot(root) == before


def test_a_path_that_appeared_meanwhile_keeps_the_call_s_tree_in_the_journal(
    places: tuple[Path, Path, Path],
) -> None:
    """The user's edits win: a ``venv`` made while the call ran is left as it is; the
    call's tree is kept whole in the entry's store and every path is a conflict."""
    root, stage, home = places
    new_tree(stage)
    changes = changes_of(stage, "venv")
    journal = Journal.open(str(root), state_home=str(home))
    opened = journal.opening()
    (root / "venv").mkdir()
    (root / "venv/mine").write_text("mine\n")
    committed = journal.commit("shell", "c", Judged(changes), opened)
    assert committed.entry is None
    assert committed.conflicts == tuple(change.path for change in changes)
    assert (root / "venv/mine").read_text() == "mine\n"
    assert not (root / "venv/bin").exists()


def test_a_source_gone_fails_the_whole_tree_and_applies_nothing(
    places: tuple[Path, Path, Path],
) -> None:
    """Failure: the stage's directory is gone at the apply (the rename cannot happen):
    nothing of it is applied, every path of it is named failed, no entry is left."""
    root, stage, home = places
    top = new_tree(stage)
    changes = changes_of(stage, "venv")
    os.rename(top, stage / "elsewhere")
    journal = Journal.open(str(root), state_home=str(home))
    committed = journal.commit("shell", "c", Judged(changes), journal.opening())
    assert committed.entry is None
    assert committed.failed == tuple(change.path for change in changes)
    assert sorted(os.listdir(root)) == []
    assert journal.history().entries == ()


def test_a_copy_that_fails_across_file_systems_leaves_nothing_half_applied(
    places: tuple[Path, Path, Path],
) -> None:
    """Failure across file systems: the stage on another one is copied beside the path
    first; a FIFO inside stops the copy, and what was copied is taken away."""
    root, _stage, home = places
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == root.stat().st_dev:
        pytest.skip("no second file system here")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        stage = Path(other)
        new_tree(stage)
        changes = changes_of(stage, "venv")
        os.mkfifo(stage / "venv/lib/zz-pipe")
        journal = Journal.open(str(root), state_home=str(home))
        committed = journal.commit("shell", "c", Judged(changes), journal.opening())
        assert committed.entry is None
        assert committed.failed == tuple(change.path for change in changes)
        assert sorted(os.listdir(root)) == []
        # Without the FIFO the copy succeeds: the tree arrives, said copied.
        os.unlink(stage / "venv/lib/zz-pipe")
        expected = snapshot(stage / "venv")
        committed = journal.commit("shell", "c", Judged(changes), journal.opening())
        assert committed.entry is not None
        assert committed.copied
        assert snapshot(root / "venv") == expected


KILLED = textwrap.dedent(
    """
    import os, sys
    from spice.agent.tools.coding import _journal_apply
    from spice.agent.tools.coding._changes import Change, Judged
    from spice.agent.tools.coding._journal import Journal
    root, stage, home, point, changes = sys.argv[1:6]
    real = _journal_apply.Applier.apply
    calls = []
    def apply(self, op, saved):
        if len(calls) == int(point):
            sys.stdout.write("at\\n"); sys.stdout.flush(); sys.stdin.read()
        calls.append(op.path)
        real(self, op, saved)
    _journal_apply.Applier.apply = apply
    journal = Journal.open(root, state_home=home)
    import json
    listed = tuple(Change(*c[:5], c[5], None, c[6]) for c in json.loads(changes))
    journal.commit("shell", "c", Judged(listed), journal.opening())
    sys.stdout.write("done\\n"); sys.stdout.flush()
    """
)


@pytest.mark.parametrize("point", [0, 1])
def test_a_killed_commit_of_a_whole_tree_is_taken_back(
    places: tuple[Path, Path, Path], point: int
) -> None:
    """Kill: the server is killed before the whole directory's rename (point 0) or after
    it, before the next path (point 1); the recovery leaves the worktree as before."""
    root, stage, home = places
    (root / "keep.txt").write_text("keep\n")
    new_tree(stage)
    (stage / "after.txt").write_text("after\n")
    changes = (
        *changes_of(stage, "venv"),
        Change("after.txt", "added", "file", None, 0o644, str(stage / "after.txt")),
    )
    listed = json.dumps(
        [[c.path, c.action, c.kind, c.before, c.mode, c.source, c.whole] for c in changes]
    )
    before = snapshot(root)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(root), str(stage), str(home), str(point), listed],
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
    assert len(journal.recover()) == 1
    assert snapshot(root) == before
    assert not list(root.glob(".spice-journal-*"))
    assert (stage / "venv/bin/python").exists()  # back where the stage had it


def test_an_entry_names_a_whole_directory_only_as_a_directory() -> None:
    """An entry read back: ``whole`` is a boolean, on a directory's item only."""
    directory = State("directory", 0o755, None)
    item = Item("venv", None, directory, whole=True)
    assert Item.parse(item.json()) == item
    assert "whole" not in Item("venv", None, directory).json()
    for bad in ({**item.json(), "whole": "yes"}, {**item.json(), "whole": 1}):
        with pytest.raises(ValueError, match=r"^$"):
            Item.parse(bad)
    file_item = Item("f", None, State("file", 0o644, "0" * 64)).json()
    with pytest.raises(ValueError, match=r"^$"):
        Item.parse({**file_item, "whole": True})
    taken = Item("venv", directory, None, "b0", whole=True)  # an undo's item
    assert Item.parse(taken.json()) == taken
