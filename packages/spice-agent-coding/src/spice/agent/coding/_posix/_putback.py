"""The put-back of the join's guard: the protected paths made what a baseline had.

``put_back`` removes what a call made (but a git directory's new ``config``, which keeps
what ``_gitconfig``'s allow-list keeps) and gives a changed or removed path its bytes and
mode again. Nothing is followed: each directory is opened from ``/`` with ``O_NOFOLLOW``,
and a link or file where a directory was is removed first.

A server that is not root owns what its command made, but the mode bits bind it (a
``chmod 555 .git`` kept it from removing a planted ``commondir``): a directory it owns
that it cannot write or enter is given the owner's ``rwx`` for the change through its
descriptor, and its mode back afterwards (``_opened``). A path that could not be put
back is never listed as put back. An in-progress rebase's or sequencer's todo list that
came to run a command (``exec``) is put back, its state directory removed when the call
made it (contract 13.1); one that runs nothing is left.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from typing import Final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._gitconfig import filtered
from spice.agent.tools.coding._gitdir import TODOS, runs_a_command

from ._scan import Entry, Snapshot

__all__ = ["put_back"]

# POSIX-only flags with a default: the module imports on Windows, which never runs it.
_STEP: Final = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_TEMPORARY: Final = ".spice-guard-"


_TODOS: Final = frozenset(f"/{state}/{todo}" for state, todo in TODOS)


def _is_todo(path: str) -> bool:
    """Whether ``path`` is a git directory's rebase or sequencer todo list."""
    return any(path.endswith(tail) for tail in _TODOS)


def _runs(entry: Entry | None) -> bool:
    """Whether a todo list runs a command (or cannot be told: not a file kept whole)."""
    if entry is None:
        return False
    return entry.kind != "file" or entry.data is None or runs_a_command(entry.data)


def _todos(baseline: Snapshot, now: Snapshot) -> list[str]:
    """A todo list that runs a command where the baseline's did not: put back (its
    state directory removed when the call made it); one that runs nothing is the call's
    own rebase or cherry-pick, left as it is. The paths put back."""
    restored: list[str] = []
    for path in sorted(set(now.entries) | set(baseline.entries)):
        if not _is_todo(path):
            continue
        before, after = baseline.entries.get(path), now.entries.get(path)
        if not _runs(after) or _runs(before):
            continue
        if before is None:
            state = os.path.dirname(path)
            if _remove(state):
                restored.append(state)
        elif _write(path, before):
            restored.append(path)
    return restored


def _is_git_config(path: str) -> bool:
    parts = path.split("/")
    return (
        len(parts) > 1
        and parts[-1] == "config"
        and any(ProtectedPaths.names_git_directory(part) for part in parts[:-1])
    )


_OWNER: Final = 0o700
"""The bits a directory the server owns gets while the put-back changes it."""


def _enterable(name: str, fd: int) -> None:
    """Give the directory ``name`` beneath ``fd`` the owner's bits when the server owns it
    and it is a directory, not a link (a command made it unreadable: ``chmod 000``). Its
    mode is not put back: the owner could not enter it otherwise either."""
    info = os.lstat(name, dir_fd=fd)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
        os.chmod(name, stat.S_IMODE(info.st_mode) | _OWNER, dir_fd=fd)


def _step(name: str, fd: int) -> int:
    try:
        return os.open(name, _STEP, dir_fd=fd)
    except PermissionError:
        _enterable(name, fd)
        return os.open(name, _STEP, dir_fd=fd)


@contextlib.contextmanager
def _writable(fd: int) -> Iterator[None]:
    """The directory ``fd`` writable for the server while the block runs, when it owns
    it and the mode bits say no; its mode again afterwards."""
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    change = os.geteuid() != 0 and info.st_uid == os.geteuid() and mode & _OWNER != _OWNER
    if change:
        os.fchmod(fd, mode | _OWNER)
    try:
        yield
    finally:
        if change:
            with contextlib.suppress(OSError):
                os.fchmod(fd, mode)


def _open_directory(path: str, *, create: bool) -> int:
    """The directory ``path`` opened from ``/`` without following a link; with ``create``
    a missing one is made and a link or file where it should be is removed first."""
    fd = os.open("/", _STEP)
    try:
        for name in path.split("/"):
            if not name:
                continue
            try:
                step = _step(name, fd)
            except OSError as error:
                if not create or error.errno not in {errno.ENOENT, errno.ELOOP, errno.ENOTDIR}:
                    raise
                with _writable(fd):
                    if error.errno != errno.ENOENT:
                        os.unlink(name, dir_fd=fd)
                    os.mkdir(name, 0o755, dir_fd=fd)
                step = os.open(name, _STEP, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _rmtree(name: str, parent: int) -> None:
    """Remove the directory ``name`` beneath ``parent`` with all it holds, never following
    a link, each directory the server owns made writable first (``_writable``)."""
    fd = _step(name, parent)
    try:
        with _writable(fd):
            for entry in os.listdir(fd):
                info = os.lstat(entry, dir_fd=fd)
                if stat.S_ISDIR(info.st_mode):
                    _rmtree(entry, fd)
                else:
                    os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _remove(path: str) -> bool:
    """Remove ``path`` (a whole directory too) without following a link; whether it is gone."""
    parent, name = os.path.split(path)
    try:
        fd = _open_directory(parent, create=False)
    except OSError:
        return True  # no real directory leads there: nothing is at this path
    try:
        info = os.lstat(name, dir_fd=fd)
        with _writable(fd):
            if stat.S_ISDIR(info.st_mode):
                _rmtree(name, fd)
            else:
                os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _write(path: str, entry: Entry) -> bool:
    """Put ``entry`` back at ``path`` (made anew, renamed over what is there)."""
    parent, name = os.path.split(path)
    try:
        fd = _open_directory(parent, create=True)
    except OSError:
        return False
    try:
        with _writable(fd):
            return _write_in(fd, name, entry)
    except OSError:
        return False
    finally:
        os.close(fd)


def _write_in(fd: int, name: str, entry: Entry) -> bool:
    """``_write`` in the open (writable) parent ``fd``."""
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(name, dir_fd=fd)
        wrong = stat.S_ISDIR(info.st_mode) != (entry.kind == "directory")
        if wrong and stat.S_ISDIR(info.st_mode):
            _rmtree(name, fd)
        elif wrong:
            os.unlink(name, dir_fd=fd)
    if entry.kind == "directory":
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, entry.mode, dir_fd=fd)
        os.chmod(name, entry.mode, dir_fd=fd, follow_symlinks=False)
        return True
    temporary = f"{_TEMPORARY}{os.getpid()}-{threading.get_ident()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary, dir_fd=fd)
    if entry.kind == "link":
        assert entry.data is not None  # noqa: S101 - a link keeps its target
        os.symlink(entry.data, temporary, dir_fd=fd)
    else:
        assert entry.data is not None  # noqa: S101 - checked by the caller
        made = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=fd,
        )
        try:
            view = memoryview(entry.data)
            while view:
                view = view[os.write(made, view) :]
            os.fchmod(made, entry.mode)
        finally:
            os.close(made)
    os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
    return True


def put_back(baseline: Snapshot, now: Snapshot) -> list[str]:
    """Make the protected paths of ``now`` what ``baseline`` had; the paths put back (one
    that could not be is not among them).

    A path the call made is removed, but a git directory's new ``config``, which keeps
    what the allow-list keeps; a changed or removed one gets its bytes and mode again
    (one larger than ``ENTRY_BYTES`` is removed, its bytes were not kept).
    """
    restored = _todos(baseline, now)
    removed: list[str] = []
    for tree in sorted(now.overfull - baseline.overfull):
        # Its entries were not all seen: the whole tree goes, and what the baseline had
        # beneath it is written again below (a tree the baseline could not keep whole
        # either cannot be judged and is left).
        if _remove(tree):
            removed.append(tree)
            restored.append(tree)
            now.entries = {
                path: entry
                for path, entry in now.entries.items()
                if path != tree and not path.startswith(f"{tree}/")
            }
    for path in sorted(now.entries):
        if path in baseline.entries or any(path.startswith(f"{gone}/") for gone in removed):
            continue
        if _is_todo(path):
            continue  # judged by _todos
        entry = now.entries[path]
        if _is_git_config(path) and entry.kind == "file" and entry.data is not None:
            kept = filtered(entry.data.decode("utf-8", "replace")).encode()
            if kept != entry.data:
                safe = Entry("file", entry.mode & 0o666, kept, hashlib.sha256(kept).hexdigest())
                if _write(path, safe):
                    restored.append(path)
            continue
        if _remove(path):
            removed.append(path)
            restored.append(path)
    for path in sorted(baseline.entries):
        entry = baseline.entries[path]
        if entry.same(now.entries.get(path)) or entry.kind == "other" or _is_todo(path):
            continue
        lost = entry.kind == "file" and entry.data is None  # its bytes were not kept
        if _remove(path) if lost else _write(path, entry):
            restored.append(path)
    return list(dict.fromkeys(restored))
