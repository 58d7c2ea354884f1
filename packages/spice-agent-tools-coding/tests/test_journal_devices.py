"""The journal across two file systems (contract 13.1: "a stage that cannot sit on the
worktree's file system, so its commit copies"): the worktree on one, the journal and the
stage's sources on a tmpfs. Every path is copied, never half renamed, ``copied`` says so,
and undo takes everything back byte for byte and mode for mode."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from journal_helpers import after_setup, snapshot

from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal

SHM: Final = "/dev/shm"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """A directory on another file system than ``tmp_path``, removed after."""
    if not os.access(SHM, os.W_OK) or os.stat(SHM).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system here")
    place = Path(tempfile.mkdtemp(prefix="spice-journal-", dir=SHM))
    try:
        yield place
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_a_commit_across_file_systems_copies_and_undo_takes_it_back(
    tmp_path: Path, elsewhere: Path
) -> None:
    root = tmp_path / "root"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "deep" / "m.py").write_bytes(b"\x00\x01binary")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "a.txt").write_text("old\n")
    before = snapshot(root)
    stage = elsewhere / "stage"
    (stage / "tree" / "inner").mkdir(parents=True)
    (stage / "a.txt").write_text("new\n")
    (stage / "n.txt").write_text("added\n")
    (stage / "tree" / "inner" / "x").write_text("x\n")
    journal = Journal.open(str(root), state_home=str(elsewhere / "state"))
    opened = after_setup(journal, root)
    judged = Judged(
        (
            Change("a.txt", "modified", "file", "file", 0o600, str(stage / "a.txt")),
            Change("n.txt", "added", "file", None, 0o644, str(stage / "n.txt")),
            Change("run.sh", "deleted", None, "file"),
            Change("src", "deleted", None, "directory"),
        )
    )
    done = journal.commit("shell", None, judged, opened)
    assert done.entry is not None
    assert done.copied is True
    assert done.failed == ()
    assert (root / "a.txt").read_text() == "new\n"
    assert (root / "a.txt").stat().st_mode & 0o777 == 0o600
    assert (root / "n.txt").read_text() == "added\n"
    assert not (root / "src").exists()
    assert not (root / "run.sh").exists()
    undone = journal.undo(done.entry)
    assert undone.refused == ()
    assert snapshot(root) == before
    again = journal.undo()  # the undo undone: the call's state once more
    assert again.refused == ()
    assert (root / "a.txt").read_text() == "new\n"
    assert not (root / "src").exists()
