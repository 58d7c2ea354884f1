"""The atomic write engine of ``replace``: inspect, write aside, re-check, commit, sync.

Every name is relative to a held parent-directory file descriptor (``dir_fd``), so a
directory renamed while the call runs never redirects the write. The engine is
synchronous; ``_replace`` runs it in a worker thread and talks to it through a
:class:`CommitGate` (the cancellation flag, checked before the commit point).

The sequence for a replacement::

    inspect target (lstat, open O_NOFOLLOW|O_NONBLOCK, fstat, read <= bound, sha256)
    expected digest? else stale          same digest as the new content? no-op
    temporary = .spice-replace-<32 hex>.tmp   O_CREAT|O_EXCL|O_NOFOLLOW, mode 0o600
    fchown(owner and group of the replaced file)   only when they differ from the temporary's
    fchmod(mode of the replaced file)   without setuid/setgid when the fchown failed
    write all, fsync, close
    -- process-wide commit lock --
    inspect again: regular, same digest? else stale   (by content: a new inode holding
        the same bytes, as an editor's save-by-rename leaves, is not stale; its owner,
        group and mode are given to the temporary when they differ)
    gate.enter() (cancellation stops here)      rename(temporary, target)   <- commit
    -- unlock --
    fsync(committed file), fsync(directory)

Creation writes the temporary with ``0o666`` so the kernel applies the umask (and any
default ACL) exactly as for any new file, then commits with ``link`` (never overwrites;
``EEXIST`` is ``already_exists``) and removes the temporary name.

All operating-system calls go through :class:`Syscalls` so a test can inject the
faults it cannot cause for real (a failing ``close``, a failing ``unlink``) and count
calls; production uses :data:`POSIX`.

Owner and group: the temporary belongs to whoever runs the tool. A replacement takes
the replaced file's owner and group where it can (``fchown`` before the commit; root
can, an unprivileged user can for a file it owns in a group it belongs to). Where it
cannot, the setuid and setgid bits are dropped from the mode, so a root-run tool never
turns a user's file into a root-owned setuid program, and the answer says
``owner_changed``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import hashlib
import os
import re
import secrets
import stat
import sys
import threading
from dataclasses import dataclass
from typing import Final, Protocol, final

from ._decision import (
    ABORTED,
    CLEANUP_INCOMPLETE,
    CLOSE_FAILED,
    CREATE_FAILED,
    DURABILITY_UNCONFIRMED,
    JOURNAL_FAILED,
    NOT_FOUND,
    NOT_REGULAR,
    PATH_UNAVAILABLE,
    READ_FAILED,
    REPLACE_FAILED,
    SYNC_FAILED,
    TARGET_TOO_LARGE,
    TEMPORARY_FAILED,
    WRITE_FAILED,
    Absent,
    Current,
    Found,
    Occupied,
    Outcome,
    Request,
    decide,
    exists_outcome,
    stale_outcome,
)
from ._regular import Refusal, Refused, open_regular

TEMPORARY_PREFIX: Final = ".spice-replace-"
TEMPORARY_SUFFIX: Final = ".tmp"
TEMPORARY_TOKEN_BYTES: Final = 16
TEMPORARY_NAME: Final = re.compile(
    re.escape(TEMPORARY_PREFIX)
    + f"[0-9a-f]{{{2 * TEMPORARY_TOKEN_BYTES}}}"
    + re.escape(TEMPORARY_SUFFIX)
)
"""The shape of a replace temporary file's name: ``.spice-replace-<32 hex>.tmp``."""
"""Random bytes in a temporary name (32 hex digits)."""
READ_CHUNK_BYTES: Final = 65_536
INSPECT_ATTEMPTS: Final = 4
"""Looks ``inspect`` takes at a file replaced between its look and its open (a race)."""
CREATE_MODE: Final = 0o666
"""Mode a created file asks for; the kernel applies the umask (``0o666 & ~umask``)."""
PRIVATE_MODE: Final = 0o600
"""Mode of a replacement's temporary file until it takes the replaced file's mode."""
SET_ID_BITS: Final = stat.S_ISUID | stat.S_ISGID
"""Mode bits a replacement never keeps when it could not keep the owner and group."""

_COMMIT_LOCK: Final = threading.Lock()
"""Serializes the final re-check and the commit of every replace in this process.

The per-instance lease serializes one tool's calls; this lock makes two tool instances
of the same process unable to both pass the re-check of one file and both commit.
"""


@final
class Checkpoint(enum.StrEnum):
    """Points where the engine calls :meth:`Syscalls.checkpoint` (a test seam)."""

    EDITS_APPLIED = "edits_applied"
    """The edit form of ``replace`` read the file and applied its edits (``_replace``)."""
    PREFLIGHT_DONE = "preflight_done"
    TEMPORARY_SYNCED = "temporary_synced"
    COMMITTED = "committed"


class Syscalls(Protocol):
    """The operating-system calls of the engine; names are relative to ``dir_fd``."""

    def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
        """``os.open(name, flags, mode, dir_fd=dir_fd)``."""
        ...

    def read(self, fd: int, size: int) -> bytes:
        """``os.read``."""
        ...

    def write(self, fd: int, data: memoryview) -> int:
        """``os.write``; may write less than asked."""
        ...

    def fsync(self, fd: int) -> None:
        """Flush ``fd`` to stable storage (``F_FULLFSYNC`` on macOS where supported)."""
        ...

    def fchmod(self, fd: int, mode: int) -> None:
        """``os.fchmod``."""
        ...

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        """``os.fchown``."""
        ...

    def close(self, fd: int) -> None:
        """``os.close``."""
        ...

    def lstat(self, name: str, dir_fd: int) -> os.stat_result:
        """``os.stat(name, dir_fd=dir_fd, follow_symlinks=False)``."""
        ...

    def fstat(self, fd: int) -> os.stat_result:
        """``os.fstat``."""
        ...

    def rename(self, source: str, target: str, dir_fd: int) -> None:
        """``os.rename`` within one directory."""
        ...

    def link(self, source: str, target: str, dir_fd: int) -> None:
        """``os.link`` within one directory, never following a symlink."""
        ...

    def unlink(self, name: str, dir_fd: int) -> None:
        """``os.unlink``."""
        ...

    def checkpoint(self, point: Checkpoint) -> None:
        """Called by the worker at ``point``; production does nothing."""
        ...


if sys.platform == "darwin":  # pragma: no cover - Linux is the tested platform
    import fcntl

    def _full_sync(fd: int) -> None:
        # fsync on macOS only reaches the drive's cache; F_FULLFSYNC asks the drive to
        # flush. A file system that does not support it gets a plain fsync instead.
        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        except OSError as error:
            if error.errno not in {errno.ENOTSUP, errno.EINVAL, errno.ENOTTY}:
                raise
            os.fsync(fd)

else:

    def _full_sync(fd: int) -> None:
        os.fsync(fd)


@final
class PosixSyscalls:
    """The real calls."""

    def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
        """``os.open(name, flags, mode, dir_fd=dir_fd)``."""
        return os.open(name, flags, mode, dir_fd=dir_fd)

    def read(self, fd: int, size: int) -> bytes:
        """``os.read``."""
        return os.read(fd, size)

    def write(self, fd: int, data: memoryview) -> int:
        """``os.write``."""
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        """``fsync`` (``F_FULLFSYNC`` on macOS)."""
        _full_sync(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        """``os.fchmod``."""
        os.fchmod(fd, mode)

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        """``os.fchown``."""
        os.fchown(fd, uid, gid)

    def close(self, fd: int) -> None:
        """``os.close``."""
        os.close(fd)

    def lstat(self, name: str, dir_fd: int) -> os.stat_result:
        """``os.stat`` without following a final symlink."""
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def fstat(self, fd: int) -> os.stat_result:
        """``os.fstat``."""
        return os.fstat(fd)

    def rename(self, source: str, target: str, dir_fd: int) -> None:
        """``renameat`` within ``dir_fd``."""
        os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def link(self, source: str, target: str, dir_fd: int) -> None:
        """``linkat`` within ``dir_fd`` without following a symlink."""
        os.link(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)

    def unlink(self, name: str, dir_fd: int) -> None:
        """``unlinkat``."""
        os.unlink(name, dir_fd=dir_fd)

    def checkpoint(self, point: Checkpoint) -> None:
        """Nothing: checkpoints exist for tests."""


POSIX: Final[Syscalls] = PosixSyscalls()


@final
class CommitGate:
    """The cancellation flag shared by the event loop and the worker.

    The worker passes :meth:`enter` immediately before the commit; the loop calls
    :meth:`cancel`. Both take one lock, so exactly one of them wins: either the commit
    happens and ``cancel`` says so, or the worker stops before committing.
    """

    __slots__ = ("_cancelled", "_entered", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._entered = False

    def cancel(self) -> bool:
        """Ask the worker to stop; True when the commit point was already passed."""
        with self._lock:
            self._cancelled = True
            return self._entered

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        with self._lock:
            return self._cancelled

    @property
    def entered(self) -> bool:
        """Whether the worker passed the commit point."""
        with self._lock:
            return self._entered

    def enter(self) -> bool:
        """Pass the commit point unless cancelled; False means stop now."""
        with self._lock:
            if self._cancelled:
                return False
            self._entered = True
            return True


def _read_bounded(syscalls: Syscalls, fd: int, limit: int) -> bytes | None:
    """All of ``fd`` if it holds at most ``limit`` bytes, else ``None``."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = syscalls.read(fd, min(READ_CHUNK_BYTES, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def inspect(syscalls: Syscalls, dir_fd: int, leaf: str, limit: int) -> Found:
    """What is at ``leaf``: never follows a symlink, never blocks on a FIFO.

    Opened by ``_regular.open_regular`` (through ``syscalls``); a file replaced between
    its look and its open is looked at again, at most ``INSPECT_ATTEMPTS`` times.
    """
    for _ in range(INSPECT_ATTEMPTS):
        opened = open_regular(
            dir_fd, leaf, os.O_RDONLY, admit=lambda size: size <= limit, calls=syscalls
        )
        if not isinstance(opened, Refused) or opened.reason is not Refusal.CHANGED:
            break
    if isinstance(opened, Refused):
        return _occupied(opened.reason)
    try:
        data = _read_bounded(syscalls, opened.fd, limit)
    except OSError:
        return Occupied("read_failed", READ_FAILED)
    finally:
        with contextlib.suppress(OSError):
            syscalls.close(opened.fd)
    status = opened.status
    if data is None:
        return Occupied("file_too_large", TARGET_TOO_LARGE)
    return Current(
        device=status.st_dev,
        inode=status.st_ino,
        mode=stat.S_IMODE(status.st_mode),
        links=status.st_nlink,
        uid=status.st_uid,
        gid=status.st_gid,
        sha256=hashlib.sha256(data).hexdigest(),
        data=data,
    )


def _occupied(reason: Refusal) -> Found:
    """What ``inspect`` answers for a refusal of ``open_regular``."""
    if reason is Refusal.MISSING:
        return Absent()
    if reason is Refusal.LINK:
        return Occupied("not_regular", NOT_REGULAR, symlink=True)
    if reason is Refusal.NOT_REGULAR:
        return Occupied("not_regular", NOT_REGULAR)
    if reason is Refusal.TOO_LARGE:
        return Occupied("file_too_large", TARGET_TOO_LARGE)
    if reason is Refusal.OPEN_FAILED:
        return Occupied("read_failed", READ_FAILED)
    return Occupied("path_unavailable", PATH_UNAVAILABLE)


def temporary_name() -> str:
    """A fresh ``.spice-replace-<32 hex>.tmp`` name."""
    return f"{TEMPORARY_PREFIX}{secrets.token_hex(TEMPORARY_TOKEN_BYTES)}{TEMPORARY_SUFFIX}"


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` has the shape of a replace temporary file (``TEMPORARY_NAME``)."""
    return TEMPORARY_NAME.fullmatch(name) is not None


@final
@dataclass(slots=True)
class _Temporary:
    """The temporary file while it exists: its name, the descriptors still open, and the
    owner it has (``owner_changed``: it could not be given the replaced file's)."""

    name: str
    write_fd: int | None
    read_fd: int | None = None
    linked: bool = True
    owner: tuple[int, int] = (-1, -1)
    owner_changed: bool = False
    links: int = 1
    """Links the replaced file had when it was last inspected (``hard_links_split``)."""


def write_file(syscalls: Syscalls, dir_fd: int, request: Request, gate: CommitGate) -> Outcome:
    """Run one replace or create of ``request.leaf`` in the directory ``dir_fd``.

    Never raises for an operating-system failure: every one is an :class:`Outcome`.
    The temporary file is removed on every path the process survives.
    """
    if gate.cancelled:
        return ABORTED
    found = inspect(syscalls, dir_fd, request.leaf, request.limit)
    current = decide(found, request)
    if isinstance(current, Outcome):
        return current
    syscalls.checkpoint(Checkpoint.PREFLIGHT_DONE)
    if gate.cancelled:
        return ABORTED
    name = temporary_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = syscalls.open(name, flags, CREATE_MODE if current is None else PRIVATE_MODE, dir_fd)
    except OSError:
        return Outcome("temporary_failed", TEMPORARY_FAILED)
    temporary = _Temporary(name, fd)
    try:
        stopped = _before_commit(syscalls, dir_fd, request, gate, current, temporary)
    except BaseException:
        _discard(syscalls, dir_fd, temporary)
        raise
    if stopped is not None:
        if not _discard(syscalls, dir_fd, temporary) and not stopped.aborted:
            return dataclasses.replace(stopped, temporary_cleaned=False)
        return stopped
    try:
        return _after_commit(syscalls, dir_fd, current, temporary)
    finally:
        # Only after a defect is a descriptor still open. The temporary name is not
        # removed a second time: the answer already says whether it was.
        _close(syscalls, temporary)


def _before_commit(
    syscalls: Syscalls,
    dir_fd: int,
    request: Request,
    gate: CommitGate,
    current: Current | None,
    temporary: _Temporary,
) -> Outcome | None:
    """Write, sync and close the temporary file, re-check, commit; ``None`` once committed."""
    fd = temporary.write_fd
    assert fd is not None  # noqa: S101 - set by the caller
    try:
        # A second, read-only description of the same inode: after the commit it
        # syncs the committed file without looking its name up again.
        temporary.read_fd = syscalls.open(
            temporary.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0, dir_fd
        )
        written, reread = syscalls.fstat(fd), syscalls.fstat(temporary.read_fd)
        if (written.st_dev, written.st_ino) != (reread.st_dev, reread.st_ino):
            return Outcome("temporary_failed", TEMPORARY_FAILED)
        temporary.owner = (written.st_uid, written.st_gid)
    except OSError:
        return Outcome("temporary_failed", TEMPORARY_FAILED)
    view = memoryview(request.data)
    try:
        while view:
            count = syscalls.write(fd, view)
            if count <= 0:
                return Outcome("write_failed", WRITE_FAILED)
            view = view[count:]
    except OSError:
        return Outcome("write_failed", WRITE_FAILED)
    # The metadata after the content: without CAP_FSETID the kernel clears setuid and
    # setgid on every write (file_remove_privs), so a mode given before would be lost;
    # until here the temporary stays private (PRIVATE_MODE, the runner's).
    if current is not None:
        try:
            _give_metadata(syscalls, fd, current, temporary)
        except OSError:
            return Outcome("temporary_failed", TEMPORARY_FAILED)
    try:
        syscalls.fsync(fd)
    except OSError:
        return Outcome("sync_failed", SYNC_FAILED)
    temporary.write_fd = None
    try:
        syscalls.close(fd)  # never retried: the descriptor is gone either way
    except OSError:
        return Outcome("close_failed", CLOSE_FAILED)
    syscalls.checkpoint(Checkpoint.TEMPORARY_SYNCED)
    if gate.cancelled:
        return ABORTED
    if current is None:
        return _link(syscalls, dir_fd, request, gate, temporary)
    with _COMMIT_LOCK:
        again = inspect(syscalls, dir_fd, request.leaf, request.limit)
        if isinstance(again, Absent):
            return Outcome("not_found", NOT_FOUND)
        if isinstance(again, Occupied):
            return Outcome(again.code, again.message)
        # By content: identical bytes under a new inode (an editor's save-by-rename)
        # are what the caller read, so they are not stale (and a stale answer never
        # shows the expected digest as the current one).
        if again.sha256 != request.expected:
            return stale_outcome(again.sha256, request)
        if _metadata(again) != _metadata(current):
            read_fd = temporary.read_fd
            assert read_fd is not None  # noqa: S101 - opened above
            try:
                _give_metadata(syscalls, read_fd, again, temporary)
            except OSError:
                return Outcome("temporary_failed", TEMPORARY_FAILED)
        journaled = _journal(dir_fd, request, again.inode, temporary)
        if journaled is not None:
            return journaled
        if not gate.enter():
            return ABORTED
        try:
            syscalls.rename(temporary.name, request.leaf, dir_fd)
        except OSError:
            return Outcome("replace_failed", REPLACE_FAILED)
        temporary.linked = False
    return None


def _metadata(file: Current) -> tuple[int, int, int]:
    return file.uid, file.gid, file.mode


def _give_metadata(syscalls: Syscalls, fd: int, current: Current, temporary: _Temporary) -> None:
    """Give the temporary ``current``'s owner, group and mode (``OSError`` from ``fchmod``).

    The owner first: ``chown`` clears setuid/setgid, ``fchmod`` then sets the mode.
    When the owner or group cannot be kept, setuid and setgid are dropped.
    """
    mode = current.mode
    temporary.owner_changed = False
    if temporary.owner != (current.uid, current.gid):
        try:
            syscalls.fchown(fd, current.uid, current.gid)
        except OSError:
            temporary.owner_changed = True
            mode &= ~SET_ID_BITS
        else:
            temporary.owner = (current.uid, current.gid)
    syscalls.fchmod(fd, mode)
    temporary.links = current.links


def _journal(
    dir_fd: int, request: Request, replaced: int | None, temporary: _Temporary
) -> Outcome | None:
    """Write the journal's entry before the commit; an ``Outcome`` when it cannot be."""
    if request.journal is None:
        return None
    fd = temporary.read_fd
    assert fd is not None  # noqa: S101 - opened before the commit
    try:
        request.journal.begin(dir_fd, request.leaf, replaced, request.sha256, fd)
    except OSError:
        return Outcome("journal_failed", JOURNAL_FAILED)
    return None


def _link(
    syscalls: Syscalls, dir_fd: int, request: Request, gate: CommitGate, temporary: _Temporary
) -> Outcome | None:
    """Commit a creation: ``link`` fails instead of overwriting anything."""
    with _COMMIT_LOCK:
        journaled = _journal(dir_fd, request, None, temporary)
        if journaled is not None:
            return journaled
        if not gate.enter():
            return ABORTED
        try:
            syscalls.link(temporary.name, request.leaf, dir_fd)
        except FileExistsError:
            pass
        except OSError:
            return Outcome("create_failed", CREATE_FAILED)
        else:
            return None
    return exists_outcome(inspect(syscalls, dir_fd, request.leaf, request.limit), request)


def _after_commit(
    syscalls: Syscalls, dir_fd: int, current: Current | None, temporary: _Temporary
) -> Outcome:
    """Remove the temporary name (create), sync the file and the directory, once each."""
    syscalls.checkpoint(Checkpoint.COMMITTED)
    cleaned = True
    if temporary.linked:
        try:
            syscalls.unlink(temporary.name, dir_fd)
            temporary.linked = False
        except OSError:
            cleaned = False
    durable = True
    fd = temporary.read_fd
    temporary.read_fd = None
    if fd is None:  # pragma: no cover - always opened before the commit
        durable = False
    else:
        try:
            syscalls.fsync(fd)
        except OSError:
            durable = False
        finally:
            with contextlib.suppress(OSError):
                syscalls.close(fd)
    try:
        syscalls.fsync(dir_fd)  # an O_RDONLY directory descriptor (see _root.open_directory)
    except OSError:
        durable = False
    code, message = None, ""
    if not durable:
        code, message = "durability_unconfirmed", DURABILITY_UNCONFIRMED
    elif not cleaned:
        code, message = "cleanup_incomplete", CLEANUP_INCOMPLETE
    return Outcome(
        code,
        message,
        committed=True,
        changed=True,
        created=current is None,
        durable=durable,
        temporary_cleaned=cleaned,
        hard_links_split=temporary.links > 1,
        owner_changed=temporary.owner_changed,
    )


def _discard(syscalls: Syscalls, dir_fd: int, temporary: _Temporary) -> bool:
    """Close what is open and remove the temporary name; False when it stays behind."""
    _close(syscalls, temporary)
    if temporary.linked:
        try:
            syscalls.unlink(temporary.name, dir_fd)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        temporary.linked = False
    return True


def _close(syscalls: Syscalls, temporary: _Temporary) -> None:
    for fd in (temporary.write_fd, temporary.read_fd):
        if fd is not None:
            with contextlib.suppress(OSError):
                syscalls.close(fd)
    temporary.write_fd = temporary.read_fd = None
