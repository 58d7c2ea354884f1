"""The calls' socket directories, and the sweep of those killed servers left.

Each call's proxy listens on a UNIX socket in a private directory of the host's ``/tmp``
(``_socket_directory``), and holds an exclusive ``flock`` on a lock file there while it
runs (``_hold_lock``). A server that makes a proxy first removes the directories of dead
servers (``remove_stale``): it tells a live one by its held lock, never by connecting (a
probe connection was taken for a foreign peer, and its warning printed during normal
traffic: clients-round5 G6).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time
from typing import Final

__all__ = [
    "MAXIMUM_STALE_CHECKED",
    "SOCKET_BASE",
    "STALE_EMPTY_SECONDS",
    "remove_stale",
]

_SOCKET_NAME: Final = "proxy.sock"
_LOCK_NAME: Final = "alive.lock"
"""A file each live call's proxy holds an exclusive ``flock`` on: another server's sweep
tells a live socket from a dead one by trying the lock, never by connecting (a probe
connection read as a foreign peer, and its warning was printed during normal traffic)."""
_DIRECTORY_PREFIX: Final = "spice-proxy-"
_UNIX_PATH_BYTES: Final = 100
"""A UNIX socket's path must fit ``sun_path`` (108 bytes); this leaves room."""


SOCKET_BASE: Final = "/tmp"  # noqa: S108 - each call's private /tmp hides it from commands
"""Where the calls' socket directories are made: the host's ``/tmp``, which every call's
private ``/tmp`` hides, so that no command sees another call's proxy socket (only its
own, bound at ``_bridge.SOCKET``). Elsewhere (an unusable ``/tmp``) the temporary
directory, when its path is short enough for ``sun_path``."""


MAXIMUM_STALE_CHECKED: Final = 256
"""At most this many leftover socket directories are looked at when a proxy is made."""

STALE_EMPTY_SECONDS: Final = 60.0
"""A socket directory without its socket this old is a leftover of a start that died."""


def remove_stale(base: str = SOCKET_BASE) -> int:
    """Remove the socket directories that killed servers left in ``base``; how many.

    Only this user's directories with the proxy's prefix, mode 0700: one whose lock
    (``_LOCK_NAME``) nobody holds (its server is dead), one without a lock whose socket
    refuses a connection (a directory of an older version), or one without a socket made
    more than ``STALE_EMPTY_SECONDS`` ago. A live proxy is never connected to.
    """
    removed = 0
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith(_DIRECTORY_PREFIX))
    except OSError:
        return 0
    for name in names[:MAXIMUM_STALE_CHECKED]:
        directory = os.path.join(base, name)
        try:
            info = os.lstat(directory)
        except OSError:
            continue
        if info.st_uid != os.getuid() or info.st_mode & 0o7777 != 0o700:
            continue
        if not stat.S_ISDIR(info.st_mode) or not _stale(directory, info.st_mtime):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed += not os.path.lexists(directory)
    return removed


def _stale(directory: str, made: float) -> bool:
    path = os.path.join(directory, _SOCKET_NAME)
    if not os.path.lexists(path):
        return time.time() - made > STALE_EMPTY_SECONDS
    held = _lock_held(os.path.join(directory, _LOCK_NAME))
    if held is not None:
        return not held
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)  # noqa: FBT003 - socket's positional flag
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False  # busy (a full backlog) or unknown: not proven dead
    finally:
        probe.close()
    return False


def _lock_held(path: str) -> bool | None:
    """Whether a live proxy holds the lock at ``path``; ``None`` when there is no lock to
    judge by (the file is missing, a link, or cannot be opened)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        import fcntl  # noqa: PLC0415 - POSIX only (the module is imported everywhere)

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the lock taken just now, if any
    return False


def _hold_lock(directory: str) -> int:
    """Create the directory's lock file and hold an exclusive lock on it (the descriptor
    is closed with the listener)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(directory, _LOCK_NAME), flags, 0o600)
    try:
        import fcntl  # noqa: PLC0415 - POSIX only (the module is imported everywhere)

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _socket_directory() -> tuple[str, int]:
    """A new call's socket directory and the descriptor holding its lock."""
    try:
        directory = tempfile.mkdtemp(prefix=_DIRECTORY_PREFIX, dir=SOCKET_BASE)
    except OSError:
        base = tempfile.gettempdir()
        if len(os.fsencode(base)) + 40 > _UNIX_PATH_BYTES:
            raise
        directory = tempfile.mkdtemp(prefix=_DIRECTORY_PREFIX, dir=base)
    try:
        return directory, _hold_lock(directory)
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _release(lock: int | None) -> None:
    """Close the descriptor holding a directory's lock (once the directory is gone)."""
    if lock is not None:
        os.close(lock)
