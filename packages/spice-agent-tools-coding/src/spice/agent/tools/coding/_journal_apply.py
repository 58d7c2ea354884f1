"""Applying a journal entry's paths to the worktree, and taking them back (13.1, 13.2).

Every name is opened relative to the directory above it (``_root.open_directory`` with
``follow_symlinks=False``: ``O_NOFOLLOW|O_DIRECTORY`` step by step), so a link a call made
never leads a commit outside the worktree. For each path, in order:

1. the new entry is prepared beside it under ``.spice-journal-<entry>-<n>.tmp`` (a rename
   from the stage, or a copy where the stage is on another file system);
2. what the path held is put in the entry's store (a hard link of a file that is then
   replaced; a rename of a directory, or of what is deleted: one rename for a whole
   subtree);
3. the prepared entry is renamed onto the path.

A file from the stage that is added, or that replaces a file, and a whole added directory
(``Change.whole``), skip step 1: after step 2, one rename moves the stage's entry onto the
path (its mode set in the stage first); only where the stage is on another file system is
it copied beside first.

A path's temporary name is fixed by its entry and index, so ``rollback`` finds what a
killed commit left and takes it back: the worktree ends as before the entry.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from typing import Final, final

from ._journal_records import Item, State, state_of
from ._journal_sync import sync_directories
from ._root import PathError, open_directory

__all__ = ["Applier", "Op", "Refusal", "copy_entry", "temporary_name"]

COPY_CHUNK_BYTES: Final = 1024 * 1024
_CROSS: Final = frozenset({errno.EXDEV})
_NO_LINK: Final = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES})


@final
class Refusal(Exception):
    """A path's source is not something a commit writes (a device, FIFO or socket)."""


def temporary_name(entry: int, index: int) -> str:
    """The fixed temporary name of an entry's path ``index`` in its directory."""
    return f".spice-journal-{entry}-{index}.tmp"


@final
@dataclass(frozen=True, slots=True)
class Op:
    """One path to apply: what it becomes (``after``; ``None`` deletes it), where the new
    entry lies (``source``, absolute), bytes that replace the source's (``data``), the
    hard-link group (``link``)."""

    index: int
    path: str
    after: State | None
    source: str | None = None
    data: bytes | None = field(default=None, repr=False)
    link: int | None = None


def _split(path: str) -> tuple[str, str]:
    parent, _, leaf = path.rpartition("/")
    return parent or ".", leaf


def _lstat(name: str, dir_fd: int | None) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


@final
class Applier:
    """Applies (and takes back) the paths of one entry; ``close`` syncs every directory
    it wrote in. ``copied`` says whether some bytes were copied instead of renamed."""

    def __init__(self, root_fd: int, store_fd: int, entry: int, *, synced: bool = False) -> None:
        self._root_fd = root_fd
        self._synced = synced
        """The worktree's file system was synced just before (``_journal_sync``)."""
        self._store_fd = store_fd
        self._entry = entry
        self._parents: dict[str, int] = {}
        self._links: dict[int, tuple[str, str]] = {}
        self.copied = False

    def close(self, *, sync: bool = True) -> None:
        """Sync (``sync``: ``_journal_sync``) and close every directory held."""
        if sync:
            sync_directories(self._parents.values(), whole=self._synced)
        for fd in self._parents.values():
            os.close(fd)
        self._parents.clear()
        if sync:
            with contextlib.suppress(OSError):
                os.fsync(self._store_fd)

    def _parent(self, path: str) -> tuple[int, str]:
        parent, leaf = _split(path)
        fd = self._parents.get(parent)
        if fd is None:
            if parent == ".":
                fd = os.dup(self._root_fd)
            else:
                try:
                    fd = open_directory(self._root_fd, parent, follow_symlinks=False)
                except PathError:
                    raise FileNotFoundError(errno.ENOENT, "parent") from None
            self._parents[parent] = fd
        return fd, leaf

    def _forget(self, path: str) -> None:
        """A directory moved away: drop what is held at or beneath it."""
        for held in [p for p in self._parents if p == path or p.startswith(path + "/")]:
            os.close(self._parents.pop(held))

    def exists(self, path: str) -> os.stat_result | None:
        """``lstat`` of ``path`` (``None`` when it or a directory above is missing)."""
        try:
            fd, leaf = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return _lstat(leaf, fd)

    def state(self, path: str, status: os.stat_result) -> State | None:
        """The state of ``path`` whose ``lstat`` (``exists``) is ``status``; ``None`` for
        a device, FIFO or socket, or what cannot be read."""
        try:
            fd, leaf = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        found = state_of(fd, leaf, status)
        return found if isinstance(found, State) else None

    def changed_since(
        self, path: str, opened_ns: int, walk_limit: int, status: os.stat_result | None
    ) -> bool:
        """Whether ``path`` (whose ``lstat``, by ``exists``, is ``status``; or, for a
        directory, anything beneath it) has a change time at or after ``opened_ns``:
        another writer changed it while the call ran."""
        if status is None:
            return True
        try:
            fd, leaf = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        if status.st_ctime_ns >= opened_ns:
            return True
        return stat.S_ISDIR(status.st_mode) and _changed_beneath(fd, leaf, opened_ns, walk_limit)

    def apply(self, op: Op, saved: str | None) -> None:
        """Apply one path (``OSError`` or ``Refusal`` when it cannot be; ``rollback``
        then takes back what was done of it)."""
        fd, leaf = self._parent(op.path)
        old = _lstat(leaf, fd)
        after = op.after
        keeps_directory = old is not None and stat.S_ISDIR(old.st_mode)
        if (
            after is not None
            and after.kind == "directory"
            and op.source is None
            and keeps_directory
        ):
            os.chmod(leaf, after.mode or 0o755, dir_fd=fd)
            return
        tmp = temporary_name(self._entry, op.index)
        direct = after is not None and _direct(op, after, old, self._links)
        if after is not None and not direct:
            self._prepare(op, after, fd, tmp)
        if old is not None and saved is not None:
            replacing_file = (
                after is not None and after.kind != "directory" and not stat.S_ISDIR(old.st_mode)
            )
            if replacing_file:
                self._keep_copy(fd, leaf, saved)
            else:
                self._move(fd, leaf, self._store_fd, saved)
                self._forget(op.path)
        if after is None:
            return
        if direct:
            try:
                os.rename(op.source or "", leaf, dst_dir_fd=fd)
            except OSError as error:
                if error.errno not in _CROSS:
                    raise
                self._prepare(op, after, fd, tmp)  # another file system: a copy beside
                direct = False
        if not direct:
            os.rename(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)
        if after.kind == "file" and op.link is not None:
            self._links.setdefault(op.link, _split(op.path))

    def keep(self, op: Op, kept: str) -> None:
        """Put the call's version of a path left to the user in the store as ``kept``."""
        if op.after is None:
            return
        if op.after.kind == "directory":
            if op.source is not None:  # a whole directory: its tree, kept whole
                self._move_path(op.source, self._store_fd, kept)
            return
        if op.data is not None:
            _write_new(self._store_fd, kept, op.data, op.after.mode or 0o644)
        elif op.source is not None:
            self._move_path(op.source, self._store_fd, kept)

    def _prepare(self, op: Op, after: State, fd: int, tmp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            _remove(fd, tmp)  # one a killed commit left
        kind = after.kind
        if kind == "file":
            first = self._links.get(op.link) if op.link is not None else None
            if op.data is not None:
                _write_new(fd, tmp, op.data, after.mode or 0o644)
                return
            if first is not None:
                first_fd, first_leaf = self._parent("/".join(p for p in first if p != "."))
                os.link(first_leaf, tmp, src_dir_fd=first_fd, dst_dir_fd=fd, follow_symlinks=False)
                return
            self._source(op, stat.S_ISREG)
            self._move_path(op.source or "", fd, tmp)
            if after.mode is not None:
                os.chmod(tmp, after.mode, dir_fd=fd)
        elif kind == "symlink":
            self._source(op, stat.S_ISLNK)
            os.symlink(os.readlink(op.source or ""), tmp, dir_fd=fd)
        elif op.source is not None:
            self._source(op, stat.S_ISDIR)
            self._move_path(op.source, fd, tmp)
        else:
            os.mkdir(tmp, 0o700, dir_fd=fd)
            os.chmod(tmp, after.mode or 0o755, dir_fd=fd)

    @staticmethod
    def _source(op: Op, kind: object) -> None:
        status = None if op.source is None else _lstat(op.source, None)
        if status is None or not kind(status.st_mode):  # type: ignore[operator]
            raise Refusal

    def _move_path(self, source: str, dst_fd: int, name: str) -> None:
        try:
            os.rename(source, name, dst_dir_fd=dst_fd)
        except OSError as error:
            if error.errno not in _CROSS:
                raise
            self.copied = True
            copy_entry(None, source, dst_fd, name)

    def _move(self, fd: int, leaf: str, dst_fd: int, name: str) -> None:
        try:
            os.rename(leaf, name, src_dir_fd=fd, dst_dir_fd=dst_fd)
        except OSError as error:
            if error.errno not in _CROSS:
                raise
            self.copied = True
            partial = f"p{name}"
            copy_entry(fd, leaf, dst_fd, partial)
            os.rename(partial, name, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
            _remove(fd, leaf)

    def _keep_copy(self, fd: int, leaf: str, name: str) -> None:
        try:
            os.link(leaf, name, src_dir_fd=fd, dst_dir_fd=self._store_fd, follow_symlinks=False)
        except OSError as error:
            if error.errno not in _NO_LINK:
                raise
            self.copied = True
            partial = f"p{name}"
            copy_entry(fd, leaf, self._store_fd, partial)
            os.rename(partial, name, src_dir_fd=self._store_fd, dst_dir_fd=self._store_fd)

    def rollback(self, item: Item, index: int, back: str) -> None:
        """Take back what was applied of ``item``: the worktree path as before the entry.
        What the entry had put there goes back to its source (an undo's store) when
        it can, else to the store as ``back``."""
        try:
            fd, leaf = self._parent(item.path)
        except (FileNotFoundError, NotADirectoryError):
            return
        tmp = temporary_name(self._entry, index)
        if _lstat(tmp, fd) is not None:
            self._return(fd, tmp, item.source, back)
        if item.before is not None and item.before.kind == "directory" and item.saved is None:
            current = _lstat(leaf, fd)
            if current is not None and stat.S_ISDIR(current.st_mode):
                os.chmod(leaf, item.before.mode or 0o755, dir_fd=fd)
            return
        saved = None if item.saved is None else _lstat(item.saved, self._store_fd)
        current = _lstat(leaf, fd)
        if item.saved is not None and saved is not None:
            if current is not None and (current.st_dev, current.st_ino) == (
                saved.st_dev,
                saved.st_ino,
            ):
                os.unlink(item.saved, dir_fd=self._store_fd)
                return
            if current is not None:
                self._return(fd, leaf, item.source, back)
                self._forget(item.path)
            self._move(self._store_fd, item.saved, fd, leaf)
        elif (
            item.before is None
            and current is not None
            and item.after is not None
            and _kind(current) == item.after.kind
        ):
            self._return(fd, leaf, item.source, back)
            self._forget(item.path)

    def _return(self, fd: int, name: str, source: str | None, back: str) -> None:
        if source is not None and _lstat(source, None) is None:
            with contextlib.suppress(OSError):
                os.rename(name, source, src_dir_fd=fd)
                return
        try:
            self._move(fd, name, self._store_fd, back)
        except OSError:
            _remove(fd, name)


def _direct(
    op: Op, after: State, old: os.stat_result | None, links: dict[int, tuple[str, str]]
) -> bool:
    """Whether ``op``'s stage entry can be renamed onto its path with no copy beside:
    a file from the stage (not rewritten, not a later member of a hard-link group)
    added or replacing a file, or a whole directory added. Its mode is set in the
    stage first; ``Refusal`` when the stage holds another kind."""
    if op.source is None or op.data is not None:
        return False
    if after.kind == "file":
        if op.link is not None and op.link in links:
            return False
        if old is not None and not stat.S_ISREG(old.st_mode):
            return False
        status = _lstat(op.source, None)
        if status is None or not stat.S_ISREG(status.st_mode):
            raise Refusal
        if after.mode is not None and stat.S_IMODE(status.st_mode) != after.mode:
            os.chmod(op.source, after.mode)
        return True
    if after.kind == "directory" and old is None:
        status = _lstat(op.source, None)
        if status is None or not stat.S_ISDIR(status.st_mode):
            raise Refusal
        return True
    return False


def _changed_beneath(fd: int, leaf: str, opened_ns: int, walk_limit: int) -> bool:
    """Whether anything beneath the directory ``leaf`` has a change time at or after
    ``opened_ns`` (past ``walk_limit`` entries: yes, the user's edits win)."""
    seen = 0
    for _top, names, files, top_fd in os.fwalk(leaf, dir_fd=fd, follow_symlinks=False):
        for name in (*names, *files):
            seen += 1
            if seen > walk_limit:
                return True
            inner = _lstat(name, top_fd)
            if inner is not None and inner.st_ctime_ns >= opened_ns:
                return True
    return False


def _kind(status: os.stat_result) -> str:
    if stat.S_ISDIR(status.st_mode):
        return "directory"
    if stat.S_ISLNK(status.st_mode):
        return "symlink"
    return "file" if stat.S_ISREG(status.st_mode) else "other"


def _remove(fd: int, name: str) -> None:
    status = _lstat(name, fd)
    if status is None:
        return
    if stat.S_ISDIR(status.st_mode):
        shutil.rmtree(name, dir_fd=fd)
    else:
        os.unlink(name, dir_fd=fd)


def _write_new(fd: int, name: str, data: bytes, mode: int) -> None:
    out = os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
        os.fchmod(out, mode)
        os.fsync(out)
    finally:
        os.close(out)


def copy_entry(src_fd: int | None, src: str, dst_fd: int, name: str) -> None:
    """Copy a file, link or whole directory (modes kept) to ``name`` in ``dst_fd``;
    a device, FIFO or socket is ``Refusal``."""
    status = os.stat(src, dir_fd=src_fd, follow_symlinks=False)
    mode = status.st_mode
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(src, dir_fd=src_fd), name, dir_fd=dst_fd)
    elif stat.S_ISREG(mode):
        source = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd)
        try:
            out = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dst_fd,
            )
            try:
                while chunk := os.read(source, COPY_CHUNK_BYTES):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
                os.fchmod(out, stat.S_IMODE(mode))
                os.fsync(out)
            finally:
                os.close(out)
        finally:
            os.close(source)
    elif stat.S_ISDIR(mode):
        os.mkdir(name, 0o700, dir_fd=dst_fd)
        inner_src = os.open(
            src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd
        )
        try:
            inner_dst = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst_fd
            )
            try:
                for child in os.listdir(inner_src):
                    copy_entry(inner_src, child, inner_dst, child)
                os.fsync(inner_dst)
            finally:
                os.close(inner_dst)
        finally:
            os.close(inner_src)
        os.chmod(name, stat.S_IMODE(mode), dir_fd=dst_fd)
    else:
        raise Refusal
