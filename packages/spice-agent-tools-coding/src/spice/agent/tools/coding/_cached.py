"""The event loop's route of ``read``: open a regular file only when the kernel can do it
from its caches, on a local file system, so a small read can skip its worker thread.

:func:`open_cached_regular` answers with a descriptor or declines with ``None``, never an
error: every refusal goes to ``_root``'s routes, in a worker thread, which are the
authority for every answer. Confinement is the fast path's (``_root``): the same
``openat2`` flags, through the same :func:`~._regular.open_regular`.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from typing import Final

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows, where the route is off anyway
    resource = None  # type: ignore[assignment]

from ._mounts import MountTypes, on_local_filesystem
from ._openat2 import (
    AT_FDCWD,
    BENEATH,
    O_NOATIME,
    O_PATH,
    RESOLVE_CACHED,
    RESOLVE_NO_XDEV,
    fast_path_available,
    openat2,
    state_lock,
)
from ._regular import Regular, open_regular

CACHED_RESOLVE: Final = BENEATH | RESOLVE_CACHED | RESOLVE_NO_XDEV
"""The fast path's confinement, plus "no lookup that needs I/O" and "never into another
mount" (which could be a network or FUSE file system)."""

CACHED_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOCTTY", 0) | O_NOATIME
"""``O_NOATIME``: the open and the read write no access time on the loop (allowed to the
file's owner; ``EPERM`` for anyone else declines to the worker)."""

SLOW_OPEN_SECONDS: Final = 0.002
"""An open on the loop that slept (a voluntary context switch of the thread) this long
waited on something: a fanotify permission listener (an on-access scanner) answers
every open of the files it watches, and may take seconds. The route then pauses."""

SLOW_OPEN_PAUSE_SECONDS: Final = 60.0
"""How long the route stays off after a slow open: every read goes to the worker thread
meanwhile, and the loop keeps answering whatever the listener does. Then one open on
the loop tries again (a listener still there costs the loop one such wait per pause)."""

_cached_state: bool | None = None  # None: not tried yet; False: not usable in this process.
_mounts: MountTypes | None = None
_paused_until = 0.0  # on ``_clock``: the route is off until then (a slow open was seen)
_clock: Callable[[], float] = time.monotonic
_RUSAGE_THREAD: Final = getattr(resource, "RUSAGE_THREAD", None)


def _sleeps() -> int:
    """Voluntary context switches of the calling thread so far (-1 where unknown).

    Machine-independent evidence of a wait: an open that was only preempted by a busy
    machine switched involuntarily; one that waited for an answer slept.
    """
    if _RUSAGE_THREAD is None:
        return -1
    return resource.getrusage(_RUSAGE_THREAD).ru_nvcsw


def waited(seconds: float, sleeps: int) -> bool:
    """Whether an open that took ``seconds`` and slept ``sleeps`` times (``-1``: unknown)
    waited on something (``SLOW_OPEN_SECONDS``)."""
    return sleeps != 0 and seconds >= SLOW_OPEN_SECONDS


def paused() -> bool:
    """Whether a slow open turned the route off, ``SLOW_OPEN_PAUSE_SECONDS`` ago at most."""
    return _clock() < _paused_until


def _cached_open(dir_fd: int, path: str, flags: int, resolve: int) -> int | None:
    """One ``openat2`` that must not wait: a descriptor, or ``None`` for any refusal.

    ``EINVAL`` is a kernel without ``RESOLVE_CACHED`` (before 5.12): the route is off for
    good in this process.
    """
    global _cached_state  # noqa: PLW0603 - one process-wide decision
    answer = openat2(dir_fd, path, flags | os.O_CLOEXEC, 0, resolve)
    if answer >= 0:
        return answer
    if -answer == errno.EINVAL:
        _cached_state = False
    return None


def _cached_route_enabled() -> bool:
    """``openat2`` is in use, nothing forces the portable walk, and the kernel has not refused."""
    global _cached_state, _mounts  # noqa: PLW0603 - one process-wide decision, under a lock
    if _cached_state is False or not fast_path_available() or paused():
        return False
    if _cached_state is None:
        with state_lock:
            if _cached_state is None:
                _mounts = MountTypes.open()
                _cached_state = _mounts is not None
    return _cached_state


def open_cached_regular(
    root: str, cleaned: str, *, admit: Callable[[int], bool] | None = None
) -> int | None:
    """Open the regular file ``cleaned`` beneath ``root`` for reading without ever waiting.

    Returns a descriptor (the caller's) only when every step could be answered from the
    kernel's caches on a local file system, else ``None``, never an error: the caller
    then takes the blocking route (``open_root`` and ``open_beneath`` in a worker thread),
    which is the authority for every answer. The steps are the fast path's
    (``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``: symlinks followed only inside the root;
    an ``O_PATH`` look first, so nothing but a regular file is opened for I/O; the same
    ``(st_dev, st_ino)`` after the open), plus ``RESOLVE_CACHED`` (``EAGAIN`` instead of
    any lookup that needs I/O) and ``RESOLVE_NO_XDEV`` (never into another mount). Beneath
    a root whose mount is not of a type in ``LOCAL_FILESYSTEMS`` nothing is opened this
    way (the root itself is only looked up, ``O_PATH`` from the caches, to learn its
    mount): there an open itself may wait on a server. ``admit(size)`` false (the size
    the ``O_PATH`` look saw) declines before the open. ``O_NOATIME``: no access time is
    written from the loop (``EPERM`` for a file of another user: declined). An open
    that waited (``SLOW_OPEN_SECONDS``: a fanotify permission listener held it) turns the
    route off for ``SLOW_OPEN_PAUSE_SECONDS``. Only on Linux with ``openat2``, once the
    fast path has been probed.
    """
    global _cached_state, _paused_until  # noqa: PLW0603 - process-wide decisions
    if not _cached_route_enabled():
        return None
    root_fd = _cached_open(AT_FDCWD, root, O_PATH | os.O_DIRECTORY, RESOLVE_CACHED)
    if root_fd is None:
        return None
    try:
        if not on_local_filesystem(_mounts, root_fd):
            return None
        started, sleeps = _clock(), _sleeps()
        opened = open_regular(root_fd, cleaned, CACHED_FLAGS, resolve=CACHED_RESOLVE, admit=admit)
        elapsed, slept = _clock() - started, _sleeps() - sleeps if sleeps >= 0 else -1
        if waited(elapsed, slept):
            _paused_until = _clock() + SLOW_OPEN_PAUSE_SECONDS
    finally:
        os.close(root_fd)
    if isinstance(opened, Regular):
        return opened.fd
    if opened.errno == errno.EINVAL:
        _cached_state = False
    return None
