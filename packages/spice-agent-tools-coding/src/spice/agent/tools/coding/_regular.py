"""Open a regular file without following a final symlink and without blocking: one routine.

Every route that reads a file (``_root``'s portable walk and its ``openat2`` fast path,
``_cached``'s event-loop route, and ``_commit.inspect`` of ``replace``) opens it
through :func:`open_regular`, so the claim "every object that is read was a regular
file when it was opened" is checked in one place:

1. **Look without opening for I/O**: ``fstatat(AT_SYMLINK_NOFOLLOW)`` in the held
   directory (portable), or an ``O_PATH`` descriptor by ``openat2`` with the caller's
   ``resolve`` flags (fast). A FIFO, socket, device or directory is refused here and
   never opened for reading (a FIFO's open could block, a device's could act); a final
   symlink is refused as such (the portable walk follows it itself, by its rules).
2. **Admit the size** (optional): a file the caller would not read anyway is refused
   before it is opened, so an open that may wait (an on-access scanner's fanotify
   permission event) is not paid for nothing.
3. **Open** with ``O_NOFOLLOW`` (portable) and always ``O_NONBLOCK | O_CLOEXEC``.
4. **Same object**: ``fstat`` of the descriptor must show a regular file with the
   ``(st_dev, st_ino)`` the look saw; another object is :attr:`Refusal.CHANGED` (a race:
   a fresh resolution may succeed).

The answer is a :class:`Regular` (the descriptor, the caller's, and its ``fstat``) or a
:class:`Refused` with the reason; nothing is raised for an OS failure, and no
descriptor is left open on any refusal.
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, final

from ._openat2 import O_PATH, OPENAT2_ATTEMPTS, RESOLVE_CACHED, RETRIED, openat2


class Refusal(enum.Enum):
    """Why :func:`open_regular` gave no descriptor."""

    MISSING = "missing"
    """The name does not exist (at the look or at the open)."""
    LINK = "link"
    """The name is a symbolic link (portable look, or ``O_NOFOLLOW`` on the fast path)."""
    NOT_REGULAR = "not_regular"
    """A directory, FIFO, socket or device: never opened for I/O."""
    TOO_LARGE = "too_large"
    """``admit`` refused the size the look saw; nothing was opened."""
    CHANGED = "changed"
    """Another object was opened than the one looked at (a race)."""
    ESCAPE = "escape"
    """``openat2`` answered ``EXDEV``: the resolution would leave the beneath-root."""
    LOOK_FAILED = "look_failed"
    """The portable look failed otherwise (``errno`` says how)."""
    OPEN_FAILED = "open_failed"
    """The open, or the ``fstat`` of the opened descriptor, failed otherwise."""
    DECLINED = "declined"
    """``openat2`` gave an answer it cannot tell apart precisely, or would have to wait
    (``RESOLVE_CACHED``): the caller takes another route."""


@final
@dataclass(frozen=True, slots=True)
class Refused:
    """No descriptor: the ``reason`` and, where an OS call failed, its ``errno``."""

    reason: Refusal
    errno: int = 0


@final
@dataclass(frozen=True, slots=True)
class Regular:
    """An open regular file: ``fd`` (the caller's) and its ``fstat``."""

    fd: int
    status: os.stat_result


class Calls(Protocol):
    """The calls :func:`open_regular` makes on the portable route (``_commit.Syscalls``
    satisfies it, so ``replace``'s fault injection reaches this routine too)."""

    def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
        """``os.open(name, flags, mode, dir_fd=dir_fd)``."""
        ...

    def lstat(self, name: str, dir_fd: int) -> os.stat_result:
        """``os.stat(name, dir_fd=dir_fd, follow_symlinks=False)``."""
        ...

    def fstat(self, fd: int) -> os.stat_result:
        """``os.fstat``."""
        ...

    def close(self, fd: int) -> None:
        """``os.close``."""
        ...


@final
class _OsCalls:
    """The real calls."""

    def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
        return os.open(name, flags, mode, dir_fd=dir_fd)

    def lstat(self, name: str, dir_fd: int) -> os.stat_result:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def close(self, fd: int) -> None:
        os.close(fd)


OS_CALLS: Final[Calls] = _OsCalls()
"""The calls of the operating system."""

_LINK_OR_FILE: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EMLINK})
_ALWAYS: Final = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_regular(
    dir_fd: int,
    name: str,
    flags: int,
    *,
    resolve: int | None = None,
    admit: Callable[[int], bool] | None = None,
    calls: Calls = OS_CALLS,
) -> Regular | Refused:
    """Open the regular file ``name`` of ``dir_fd`` with ``flags`` (see the module doc).

    ``resolve=None``: the portable route; ``name`` is one component, looked at with
    ``lstat`` and opened with ``O_NOFOLLOW`` through ``calls``. ``resolve`` given: the
    ``openat2`` route; ``name`` may be a path, resolved with these ``RESOLVE_*`` flags,
    following a final symlink unless ``flags`` has ``O_NOFOLLOW``; an ``EAGAIN`` is
    retried ``OPENAT2_ATTEMPTS`` times, except under ``RESOLVE_CACHED`` (where it means
    "would wait": declined). ``admit(size)`` false refuses before the open.
    """
    if resolve is None:
        looked = _look(dir_fd, name, calls)
        flags |= os.O_NOFOLLOW
    else:
        looked = _probe(dir_fd, name, flags & os.O_NOFOLLOW, resolve, calls)
    if isinstance(looked, Refused):
        return looked
    if stat.S_ISLNK(looked.st_mode):
        return Refused(Refusal.LINK)
    if not stat.S_ISREG(looked.st_mode):
        return Refused(Refusal.NOT_REGULAR)
    if admit is not None and not admit(looked.st_size):
        return Refused(Refusal.TOO_LARGE)
    if resolve is None:
        try:
            fd = calls.open(name, flags | _ALWAYS, 0, dir_fd)
        except OSError as error:
            number = error.errno or errno.EIO
            if number == errno.ENOENT:
                return Refused(Refusal.MISSING, number)
            if number in _LINK_OR_FILE:
                return Refused(Refusal.CHANGED, number)  # it was a regular file at the look
            return Refused(Refusal.OPEN_FAILED, number)
    else:
        opened = _openat2(dir_fd, name, flags | _ALWAYS, resolve)
        if isinstance(opened, Refused):
            return opened
        fd = opened
    return _same(fd, looked, calls)


def _look(dir_fd: int, name: str, calls: Calls) -> os.stat_result | Refused:
    try:
        return calls.lstat(name, dir_fd)
    except OSError as error:
        number = error.errno or errno.EIO
        return Refused(Refusal.MISSING if number == errno.ENOENT else Refusal.LOOK_FAILED, number)


def _probe(
    dir_fd: int, name: str, nofollow: int, resolve: int, calls: Calls
) -> os.stat_result | Refused:
    probe = _openat2(dir_fd, name, O_PATH | os.O_CLOEXEC | nofollow, resolve)
    if isinstance(probe, Refused):
        return probe
    try:
        return calls.fstat(probe)
    except OSError as error:
        return Refused(Refusal.DECLINED, error.errno or errno.EIO)
    finally:
        calls.close(probe)


def _openat2(dir_fd: int, name: str, flags: int, resolve: int) -> int | Refused:
    """``openat2``: a descriptor, or the refusal its errno means."""
    attempts = 1 if resolve & RESOLVE_CACHED else OPENAT2_ATTEMPTS
    for _ in range(attempts):
        answer = openat2(dir_fd, name, flags, 0, resolve)
        if answer >= 0:
            return answer
        number = -answer
        if number in RETRIED and attempts > 1:
            continue
        if number == errno.EXDEV:
            return Refused(Refusal.ESCAPE, number)
        if number == errno.ENOENT:
            return Refused(Refusal.MISSING, number)
        return Refused(Refusal.DECLINED, number)
    return Refused(Refusal.CHANGED, errno.EAGAIN)


def _same(fd: int, looked: os.stat_result, calls: Calls) -> Regular | Refused:
    """Keep ``fd`` if it is the regular file ``looked`` described; close it otherwise."""
    try:
        now = calls.fstat(fd)
    except OSError as error:
        calls.close(fd)
        return Refused(Refusal.OPEN_FAILED, error.errno or errno.EIO)
    except BaseException:
        calls.close(fd)
        raise
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (
        looked.st_dev,
        looked.st_ino,
    ):
        calls.close(fd)
        return Refused(Refusal.CHANGED)
    return Regular(fd, now)
