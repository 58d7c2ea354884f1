"""A commit's directories synced one by one, or their file system once when the caller
has just synced it (a staged commit; 13.2, issue 44).

Real directories, real ``fsync`` and ``syncfs``; what is counted is which call was made
(``os.fsync`` and the looked-up ``syncfs`` wrapped, each still run for real).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from journal_helpers import snapshot

from spice.agent.tools.coding import _journal_sync
from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal
from spice.agent.tools.coding._journal_sync import SYNCFS_DIRECTORIES, sync_directories

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="syncfs is Linux's (elsewhere: fsync each)"
)


class _Counted:
    def __init__(self) -> None:
        self.fsyncs: list[int] = []
        self.syncfs: list[int] = []


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> _Counted:
    seen = _Counted()
    real_fsync = os.fsync
    real_syncfs = _journal_sync._syncfs()
    assert real_syncfs is not None

    def fsync(fd: int) -> None:
        seen.fsyncs.append(fd)
        real_fsync(fd)

    def syncfs(fd: int) -> int:
        seen.syncfs.append(fd)
        return real_syncfs(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(_journal_sync, "_SYNCFS", [syncfs])
    return seen


def _directories(base: Path, count: int) -> list[int]:
    fds = []
    for index in range(count):
        path = base / f"d{index}"
        path.mkdir()
        fds.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
    return fds


def _closing(fds: list[int], run: Callable[[list[int]], int]) -> int:
    try:
        return run(fds)
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("count", [0, 1, SYNCFS_DIRECTORIES - 1])
def test_below_the_bound_each_directory_is_synced(
    tmp_path: Path, counted: _Counted, count: int
) -> None:
    fds = _directories(tmp_path, count)
    assert _closing(fds, lambda held: sync_directories(held, whole=True)) == 0
    assert counted.syncfs == []
    assert sorted(counted.fsyncs) == sorted(fds)


@pytest.mark.parametrize("count", [SYNCFS_DIRECTORIES, 4 * SYNCFS_DIRECTORIES])
def test_from_the_bound_their_file_system_is_synced_once(
    tmp_path: Path, counted: _Counted, count: int
) -> None:
    fds = _directories(tmp_path, count)
    assert _closing(fds, lambda held: sync_directories(held, whole=True)) == 1
    assert len(counted.syncfs) == 1
    assert counted.fsyncs == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs a second file system")
def test_directories_are_grouped_by_file_system(tmp_path: Path, counted: _Counted) -> None:
    other = Path("/dev/shm")
    if os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same file system here")
    elsewhere = Path(tempfile.mkdtemp(dir=other))
    try:
        many = _directories(tmp_path, SYNCFS_DIRECTORIES)
        few = _directories(elsewhere, 2)
        assert _closing(many + few, lambda held: sync_directories(held, whole=True)) == 1
        assert sorted(counted.fsyncs) == sorted(few)
    finally:
        shutil.rmtree(elsewhere)


def test_unless_the_file_system_was_just_synced_each_directory_is(
    tmp_path: Path, counted: _Counted
) -> None:
    """A ``syncfs`` would write whatever other writers left dirty: not without ``whole``."""
    fds = _directories(tmp_path, 4 * SYNCFS_DIRECTORIES)
    assert _closing(fds, lambda held: sync_directories(held, whole=False)) == 0
    assert counted.syncfs == []
    assert sorted(counted.fsyncs) == sorted(fds)


def test_without_syncfs_or_when_it_fails_each_directory_is_synced(
    tmp_path: Path, counted: _Counted, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = _directories(tmp_path, SYNCFS_DIRECTORIES)
    try:
        monkeypatch.setattr(_journal_sync, "_SYNCFS", [None])
        assert sync_directories(fds, whole=True) == 0
        assert sorted(counted.fsyncs) == sorted(fds)
        counted.fsyncs.clear()
        monkeypatch.setattr(_journal_sync, "_SYNCFS", [lambda fd: -1])
        assert sync_directories(fds, whole=True) == 0
        assert sorted(counted.fsyncs) == sorted(fds)
    finally:
        for fd in fds:
            os.close(fd)


def test_a_closed_descriptor_is_skipped(tmp_path: Path, counted: _Counted) -> None:
    fds = _directories(tmp_path, 2)
    os.close(fds[0])
    assert _closing(fds[1:], lambda held: sync_directories([fds[0], *held], whole=True)) == 0
    assert counted.fsyncs == fds[1:]


@pytest.mark.parametrize("synced", [True, False])
def test_a_commit_over_many_directories_syncs_them_once_and_undoes_exactly(
    tmp_path: Path, counted: _Counted, synced: bool
) -> None:
    """A real commit writing in ``SYNCFS_DIRECTORIES`` directories: one ``syncfs`` for
    them after a synced stage (none otherwise), and the undo (never after a syncfs of
    its own caller) takes every file back byte for byte."""
    root, stage = tmp_path / "work", tmp_path / "stage"
    paths = [f"d{index}/f.txt" for index in range(SYNCFS_DIRECTORIES)]
    for tree, text in ((root, "old\n"), (stage, "new\n")):
        for path in paths:
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text(text)
    before = snapshot(root)
    journal = Journal.open(str(root), state_home=str(tmp_path / "state"))
    opened = journal.opening()
    changes = tuple(
        Change(path, "modified", "file", "file", 0o644, str(stage / path)) for path in paths
    )
    done = journal.commit("shell", None, Judged(changes), opened, synced=synced)
    assert len(done.applied) == len(paths)
    assert len(counted.syncfs) == (1 if synced else 0)
    assert all((root / path).read_text() == "new\n" for path in paths)
    assert done.entry is not None
    assert len(journal.undo(done.entry).restored) == len(paths)
    assert len(counted.syncfs) == (1 if synced else 0)
    assert snapshot(root) == before
