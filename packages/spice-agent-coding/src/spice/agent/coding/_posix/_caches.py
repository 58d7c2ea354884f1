"""The worktrees' private caches: held while used, listed, cleaned, expired (contract 12.2).

Each worktree's cache is ``<user cache>/spice-coding/<hash of the root>/`` (made by
``_facts`` at start);
beside it, outside what any call may write, ``<hash>.lock`` is both its record and its
lock:

- its content names the root (JSON, at most ``MAX_RECORD_BYTES``), so ``cache list``
  can say whose cache it is; its modification time is the cache's last use;
- every server that uses the cache holds a shared ``flock`` on it for its whole life
  (``claim``), taken before the cache is made; removing a cache takes the exclusive lock
  without waiting, so a cache in use by a running server is never removed: it is
  reported ``in_use`` instead. The lock file is unlinked only under the exclusive lock,
  and a claim checks after locking that its file is still the one at the path.

Nothing here follows a symbolic link: a link planted where a cache or a record is
expected is neither listed, nor sized through, nor removed beyond its own name. Caches
made before records existed are listed with ``root: null`` and their directory's time.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, final

from .. import _sandbox
from ._supervisor import _tmpdir

__all__ = [
    "CACHE_APPLICATION",
    "MAX_CACHES_LISTED",
    "MAX_EXPIRED_PER_START",
    "MAX_RECORD_BYTES",
    "MAX_SIZE_ENTRIES",
    "ROOT_HASH_CHARACTERS",
    "CacheEntry",
    "ClaimFailed",
    "Removal",
    "cache_base",
    "cache_directory",
    "claim",
    "expire",
    "list_caches",
    "lock_path",
    "release_all",
    "remove_cache",
    "user_cache_directory",
]

SECONDS_PER_DAY: Final = 86_400
MAX_CACHES_LISTED: Final = 4_096
"""Bound of the caches one listing, clean or expiry looks at (the host of clients-round4
held 204); ``truncated`` says when more were there."""
MAX_SIZE_ENTRIES: Final = 200_000
"""Bound of the entries walked to size one cache; past it ``size_complete`` is false."""
MAX_EXPIRED_PER_START: Final = 16
"""Bound of the caches one server start removes (the rest wait for the next start)."""
MAX_RECORD_BYTES: Final = 8_192
"""Bound of a record read back (a root path is at most 4,096 bytes)."""
CLAIM_ATTEMPTS: Final = 8
"""Opens of the lock file before a claim gives up (each loses only to a clean's unlink)."""

CACHE_APPLICATION: Final = "spice-coding"
"""The application's directory under the user's cache directory."""
ROOT_HASH_CHARACTERS: Final = 16
"""Hex characters of the root's SHA-256 that name its cache (64 bits: no collision)."""

CLAIM_WAIT_SECONDS: Final = 60.0
"""Bound of a start's wait for a clean that is removing its worktree's cache."""
CLAIM_POLL_SECONDS: Final = 0.05

LOCK_SUFFIX: Final = ".lock"
_NAME: Final = re.compile(f"[0-9a-f]{{{ROOT_HASH_CHARACTERS}}}")
# POSIX-only flags with a default: the module imports on Windows (through ``_facts``),
# which never runs it.
_NO_FOLLOW: Final = (
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
)
_OPEN_FLAGS: Final = os.O_RDWR | _NO_FOLLOW
_READ_FLAGS: Final = os.O_RDONLY | _NO_FOLLOW
_HELD: dict[str, int] = {}
"""The lock descriptors this process holds, by cache path (kept for the process's life)."""


class ClaimFailed(Exception):
    """The cache's lock file could not be opened, locked or written (a start error)."""


@final
class Removal:
    """What became of one cache a clean or an expiry looked at."""

    REMOVED: Final = "removed"
    IN_USE: Final = "in_use"
    FAILED: Final = "failed"
    ABSENT: Final = "absent"


@final
@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One worktree's cache as ``cache list`` shows it."""

    cache: str
    root: str | None
    size_bytes: int
    size_complete: bool
    last_use: float
    in_use: bool

    def to_json(self) -> dict[str, object]:
        return {
            "cache": self.cache,
            "root": self.root,
            "size_bytes": self.size_bytes,
            "size_complete": self.size_complete,
            "last_use": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_use)),
            "in_use": self.in_use,
        }


def user_cache_directory(environ: Mapping[str, str], home: str | None) -> str | None:
    """``$XDG_CACHE_HOME`` when absolute, else ``~/.cache``."""
    chosen = environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(chosen):
        return os.path.realpath(chosen)
    return None if home is None else os.path.join(home, ".cache")


def cache_directory(root: str, environ: Mapping[str, str]) -> str | None:
    """The worktree's private cache directory (not made), ``None`` without a home."""
    base = cache_base(environ)
    if base is None:
        return None
    digest = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()
    return os.path.join(base, digest[:ROOT_HASH_CHARACTERS])


def cache_base(environ: Mapping[str, str]) -> str | None:
    """``<user cache>/spice-coding``, where every worktree's cache lies (``None``: no home)."""
    base = user_cache_directory(environ, _sandbox.home_directory(environ))
    return None if base is None else os.path.join(base, CACHE_APPLICATION)


def lock_path(cache: str) -> str:
    """The record and lock file of the cache directory ``cache`` (its sibling)."""
    return cache.rstrip(os.sep) + LOCK_SUFFIX


def claim(cache: str, root: str) -> None:
    """Hold the cache of ``root`` for this process's life: a shared lock, the record
    written, its time now. Idempotent; ``ClaimFailed`` when the lock cannot be had."""
    if cache in _HELD:
        with contextlib.suppress(OSError):  # the time is a hint; the lock is what holds
            os.utime(_HELD[cache])
        return
    path = lock_path(cache)
    record = json.dumps({"root": os.path.realpath(root)}).encode()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        for _ in range(CLAIM_ATTEMPTS):
            fd = os.open(path, _OPEN_FLAGS | os.O_CREAT, 0o600)
            try:
                _share(fd)
                if _still_at(fd, path):
                    _write_record(fd, record)
                    _HELD[cache] = fd
                    return
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # a clean unlinked it between our open and our lock: again
    except OSError:
        pass
    raise ClaimFailed(f"the cache's lock file {path} cannot be held")


def release_all() -> None:
    """Let go of every cache this process holds (a command run in process has ended)."""
    while _HELD:
        _, fd = _HELD.popitem()
        os.close(fd)


def _flock(fd: int, *, exclusive: bool) -> None:
    """A shared or an exclusive lock, never waiting (``BlockingIOError`` when held)."""
    if sys.platform == "win32":
        raise OSError(errno.ENOSYS, "no flock")
    import fcntl  # noqa: PLC0415 - POSIX only

    fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)


def _share(fd: int) -> None:
    """The shared lock, waiting at most ``CLAIM_WAIT_SECONDS`` for a clean that removes
    this very cache (``BlockingIOError`` past it)."""
    deadline = time.monotonic() + CLAIM_WAIT_SECONDS
    while True:
        try:
            _flock(fd, exclusive=False)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(CLAIM_POLL_SECONDS)
        else:
            return


def _still_at(fd: int, path: str) -> bool:
    """Whether the regular file open at ``fd`` is still the one named ``path``."""
    try:
        named = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    if not stat.S_ISREG(held.st_mode):
        raise IsADirectoryError(errno.EISDIR, "not a regular file")
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _write_record(fd: int, record: bytes) -> None:
    if os.pread(fd, MAX_RECORD_BYTES, 0) != record:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    os.utime(fd)


def _read_root(path: str) -> tuple[str | None, float | None]:
    """The root a record names and its time; ``(None, None)`` without a readable record."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None, None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, None
        try:
            loaded = json.loads(os.read(fd, MAX_RECORD_BYTES))
        except (ValueError, OSError):
            return None, info.st_mtime
        root = loaded.get("root") if isinstance(loaded, dict) else None
        return (root if isinstance(root, str) else None), info.st_mtime
    finally:
        os.close(fd)


def _in_use(path: str) -> bool:
    """Whether a server holds the lock ``path`` (an exclusive try that does not wait)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return False
    try:
        _flock(fd, exclusive=True)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a lock we got
    return False


def _caches(base: str) -> tuple[list[str], bool]:
    """The cache directories in ``base`` (real directories with a hash's name), bounded."""
    found: list[str] = []
    truncated = False
    try:
        with os.scandir(base) as entries:
            for entry in entries:
                if not _NAME.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
                    continue
                if len(found) == MAX_CACHES_LISTED:
                    truncated = True
                    break
                found.append(entry.path)
    except OSError:
        return [], False
    return sorted(found), truncated


def _size(cache: str) -> tuple[int, bool]:
    """Bytes of the regular files beneath ``cache`` (each inode once, no link followed)."""
    total = 0
    walked = 0
    complete = True
    seen: set[tuple[int, int]] = set()
    stack = [cache]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            complete = False
            continue
        for entry in entries:
            walked += 1
            if walked > MAX_SIZE_ENTRIES:
                return total, False
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                complete = False
                continue
            if stat.S_ISDIR(info.st_mode):
                stack.append(entry.path)
            elif stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total, complete


def _last_use(cache: str, record_time: float | None) -> float:
    if record_time is not None:
        return record_time
    try:
        return os.lstat(cache).st_mtime
    except OSError:
        return 0.0


def list_caches(environ: Mapping[str, str]) -> tuple[list[CacheEntry], bool]:
    """Every worktree's cache, most recently used first, and whether more were there."""
    base = cache_base(environ)
    if base is None:
        return [], False
    paths, truncated = _caches(base)
    listed: list[CacheEntry] = []
    for cache in paths:
        root, record_time = _read_root(lock_path(cache))
        size, complete = _size(cache)
        listed.append(
            CacheEntry(
                cache,
                root,
                size,
                complete,
                _last_use(cache, record_time),
                _in_use(lock_path(cache)),
            )
        )
    listed.sort(key=lambda entry: (-entry.last_use, entry.cache))
    return listed, truncated


def remove_cache(cache: str) -> str:
    """Remove one cache unless a server holds it; a ``Removal`` value.

    The exclusive lock is taken without waiting (a lock file is made for a cache that
    has none, so that a server starting meanwhile waits on it); the tree goes first, the
    lock file last, under the lock.
    """
    try:
        kind = os.lstat(cache).st_mode
    except FileNotFoundError:
        return Removal.ABSENT
    except OSError:
        return Removal.FAILED
    if not stat.S_ISDIR(kind):
        return Removal.FAILED
    path = lock_path(cache)
    try:
        fd = os.open(path, _OPEN_FLAGS | os.O_CREAT, 0o600)
    except OSError:
        return Removal.FAILED
    try:
        try:
            _flock(fd, exclusive=True)
        except BlockingIOError:
            return Removal.IN_USE
        try:
            if not _still_at(fd, path):
                return Removal.IN_USE
        except OSError:
            return Removal.FAILED
        if not _tmpdir.remove_tree(cache):
            return Removal.FAILED
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            return Removal.FAILED
        return Removal.REMOVED
    finally:
        os.close(fd)


def expire(environ: Mapping[str, str], max_age_days: int, now: float | None = None) -> list[str]:
    """Remove the caches unused for more than ``max_age_days`` (none when 0), at most
    ``MAX_EXPIRED_PER_START``; the caches removed. Caches in use are left."""
    if max_age_days <= 0:
        return []
    base = cache_base(environ)
    if base is None:
        return []
    limit = (time.time() if now is None else now) - max_age_days * SECONDS_PER_DAY
    removed: list[str] = []
    for cache in _caches(base)[0]:
        if len(removed) == MAX_EXPIRED_PER_START:
            break
        _, record_time = _read_root(lock_path(cache))
        if _last_use(cache, record_time) >= limit:
            continue
        if remove_cache(cache) == Removal.REMOVED:
            removed.append(cache)
    return removed
