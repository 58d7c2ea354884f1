"""The put-back of the join's guard: the protected paths made what a baseline had.

``put_back`` removes what a call made (but a git directory's new ``config``, which keeps
what ``_gitconfig``'s allow-list keeps) and gives a changed or removed path its bytes and
mode again. Nothing is followed: each directory is opened from ``/`` with ``O_NOFOLLOW``,
and a link or file where a directory was is removed first.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import threading
from typing import Final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._gitconfig import filtered

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


def _is_git_config(path: str) -> bool:
    parts = path.split("/")
    return (
        len(parts) > 1
        and parts[-1] == "config"
        and any(ProtectedPaths.names_git_directory(part) for part in parts[:-1])
    )


def _open_directory(path: str, *, create: bool) -> int:
    """The directory ``path`` opened from ``/`` without following a link; with ``create``
    a missing one is made and a link or file where it should be is removed first."""
    fd = os.open("/", _STEP)
    try:
        for name in path.split("/"):
            if not name:
                continue
            try:
                step = os.open(name, _STEP, dir_fd=fd)
            except OSError as error:
                if not create or error.errno not in {errno.ENOENT, errno.ELOOP, errno.ENOTDIR}:
                    raise
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


def _remove(path: str) -> bool:
    """Remove ``path`` (a whole directory too) without following a link; whether it is gone."""
    parent, name = os.path.split(path)
    try:
        fd = _open_directory(parent, create=False)
    except OSError:
        return True  # no real directory leads there: nothing is at this path
    try:
        info = os.lstat(name, dir_fd=fd)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=fd)
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
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(name, dir_fd=fd)
            wrong = stat.S_ISDIR(info.st_mode) != (entry.kind == "directory")
            if wrong and stat.S_ISDIR(info.st_mode):
                shutil.rmtree(name, dir_fd=fd)
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
    except OSError:
        return False
    finally:
        os.close(fd)


def put_back(baseline: Snapshot, now: Snapshot) -> list[str]:
    """Make the protected paths of ``now`` what ``baseline`` had; the paths put back.

    A path the call made is removed, but a git directory's new ``config``, which keeps
    what the allow-list keeps; a changed or removed one gets its bytes and mode again
    (one larger than ``ENTRY_BYTES`` is removed, its bytes were not kept).
    """
    restored: list[str] = []
    removed: list[str] = []
    for path in sorted(now.entries):
        if path in baseline.entries or any(path.startswith(f"{gone}/") for gone in removed):
            continue
        entry = now.entries[path]
        if _is_git_config(path) and entry.kind == "file" and entry.data is not None:
            kept = filtered(entry.data.decode("utf-8", "replace")).encode()
            if kept != entry.data:
                _write(
                    path, Entry("file", entry.mode & 0o666, kept, hashlib.sha256(kept).hexdigest())
                )
                restored.append(path)
            continue
        _remove(path)
        removed.append(path)
        restored.append(path)
    for path in sorted(baseline.entries):
        entry = baseline.entries[path]
        if entry.same(now.entries.get(path)) or entry.kind == "other":
            continue
        if entry.kind == "file" and entry.data is None:
            _remove(path)
        else:
            _write(path, entry)
        restored.append(path)
    return restored
