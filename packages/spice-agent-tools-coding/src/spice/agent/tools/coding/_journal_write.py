"""One ``replace`` under the worktree's journal (13.2): its entry, written before the commit.

``Journal.replacing`` holds the journal's lock for one write and hands the write engine
(``_commit.write_file``) a ``PendingWrite``. At the commit point, after the engine's last
check and before its rename (or its ``link`` for a create), the engine calls ``begin``: the
replaced file's inode is hard-linked into the entry's store (copied where the store is on
another file system, or where the file has other hard links, whose later edits would
change the kept bytes), and the entry is written and synced as ``pending``, naming the
file and every directory the create made. ``finish(True)`` marks it ``done`` after the
commit (the journal's ``Mark``); any other end discards it, and nothing in the worktree
was changed by it. A server killed between the two leaves a ``pending`` entry that
``Journal.recover`` takes back: the worktree ends as before the call or as after it.

On Windows the engine (``_windows._commit``) calls ``begin_bytes`` instead: it holds the
bytes its last check read (their digest is the expected one), and those are what the store
keeps (a copy; Windows' Python cannot link by descriptor, and a link by name could pass a
reparse point).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Callable, Sequence
from typing import Final, final

from ._journal_apply import copy_entry
from ._journal_records import PRIVATE_DIRECTORY, Item, Record, State, state_at, write_new

__all__ = ["TOOL", "PendingWrite"]

TOOL: Final = "replace"
"""The tool an entry of ``replace`` names."""
_NO_LINK: Final = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES})


@final
class PendingWrite:
    """The entry of one ``replace``: ``begin`` before the commit, ``finish`` after it.

    ``path`` is the file's real path beneath the root; ``made`` the directories the create
    made on the way (outermost first). ``write``, ``mark``, ``discard`` and ``settle``
    are the journal's: write a record, mark one applied (with the items not applied and
    the store's size), drop an entry, apply the bounds after a new one.
    """

    def __init__(
        self,
        number: int,
        store: str,
        call_id: str | None,
        path: str,
        made: Sequence[tuple[str, int | None]],
        write: Callable[[Record], None],
        mark: Callable[[Record, Sequence[int], int], None],
        discard: Callable[[int], None],
        settle: Callable[[], None],
    ) -> None:
        self._number = number
        self._store = store
        self._call_id = call_id
        self._path = path
        self._made = tuple(made)
        self._write = write
        self._mark = mark
        self._discard = discard
        self._settle = settle
        self._record: Record | None = None
        self._finished = False

    @property
    def number(self) -> int:
        """The entry's id (what ``history`` shows and ``undo`` takes)."""
        return self._number

    def begin(self, dir_fd: int, leaf: str, replaced: int | None, sha256: str, fd: int) -> None:
        """Keep what ``leaf`` holds (``replaced``: its inode, ``None`` for a create) and
        write the entry ``pending``; ``fd`` is the new file (its mode is the entry's).
        ``OSError`` when it cannot: the caller must not commit."""
        os.mkdir(self._store, PRIVATE_DIRECTORY)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        before: State | None = None
        saved: str | None = None
        if replaced is not None:
            saved = f"b{len(self._made)}"
            before = self._keep(dir_fd, leaf, replaced, saved)
        items = [
            Item(path, None, State("directory", directory_mode, None))
            for path, directory_mode in self._made
        ]
        items.append(Item(self._path, before, State("file", mode, sha256), saved))
        record = Record(self._number, TOOL, self._call_id, time.time_ns(), "pending", tuple(items))
        self._record = record
        self._write(record)

    def begin_bytes(self, before: bytes | None, sha256: str) -> None:
        """The Windows ``begin``: keep ``before`` (the replaced file's bytes as the last
        check read them; ``None`` for a create) and write the entry ``pending``. Called
        again by a retried rename, it keeps what the first call kept (the same bytes: the
        check that precedes each attempt compares their digest). ``OSError`` when it
        cannot: the caller must not commit."""
        if self._record is not None:
            return
        os.mkdir(self._store, PRIVATE_DIRECTORY)
        saved: str | None = None
        kept: State | None = None
        if before is not None:
            saved = f"b{len(self._made)}"
            write_new(os.path.join(self._store, saved), before)
            kept = State("file", None, hashlib.sha256(before).hexdigest())
        items = [Item(path, None, State("directory", mode, None)) for path, mode in self._made]
        items.append(Item(self._path, kept, State("file", None, sha256), saved))
        record = Record(self._number, TOOL, self._call_id, time.time_ns(), "pending", tuple(items))
        self._write(record)
        self._record = record

    def _keep(self, dir_fd: int, leaf: str, inode: int, saved: str) -> State:
        """The replaced file in the store as ``saved`` (the same inode, else a copy)."""
        store_fd = os.open(self._store, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            status = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
            if status.st_ino != inode or not stat.S_ISREG(status.st_mode):
                raise OSError(errno.ESTALE, "replaced")
            linked = False
            if status.st_nlink == 1:
                try:
                    os.link(leaf, saved, src_dir_fd=dir_fd, dst_dir_fd=store_fd)
                    linked = True
                except OSError as error:
                    if error.errno not in _NO_LINK:
                        raise
            if not linked:
                copy_entry(dir_fd, leaf, store_fd, saved)
            kept = state_at(store_fd, saved)
            if not isinstance(kept, State) or (
                linked and os.stat(saved, dir_fd=store_fd).st_ino != inode
            ):
                raise OSError(errno.ESTALE, "replaced")
            os.fsync(store_fd)
            return kept
        finally:
            os.close(store_fd)

    def finish(self, committed: bool) -> bool:
        """After the engine: ``done`` when it committed, else the entry goes. False when
        the entry is not kept: a ``done`` that could not be written is discarded too, so
        a recovery never takes back a commit the answer reported."""
        if self._finished:
            return False
        self._finished = True
        record = self._record
        if record is None or not committed:
            with contextlib.suppress(OSError):
                self._discard(self._number)
            return False
        try:
            self._mark(record, (), _store_size(self._store))
        except OSError:
            with contextlib.suppress(OSError):
                self._discard(self._number)
            return False
        with contextlib.suppress(OSError):
            self._settle()
        return True


def _store_size(path: str) -> int:
    total = 0
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
    return total
