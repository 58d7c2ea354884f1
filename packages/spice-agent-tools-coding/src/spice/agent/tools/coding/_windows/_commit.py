"""The write engine of ``replace`` on Windows: inspect, write aside, flush, re-check, rename.

The Windows counterpart of ``_commit`` (same :class:`~._commit.Outcome`, same texts, the
same :class:`~._commit.CommitGate`), on NT handles. Every name is relative to the held
handle of the target's directory (``_windows._root``)::

    inspect target (NtCreateFile beneath the directory handle, FILE_OPEN_REPARSE_POINT;
        a reparse point or a directory is not_regular; read <= bound, sha256)
    expected digest? else stale          same digest as the new content? no-op
    temporary = .spice-replace-<32 hex>.tmp   FILE_CREATE beneath the directory handle
    write all, FlushFileBuffers
    loop, at most REPLACE_ATTEMPTS times (cancellation-aware waits in between):
        -- process-wide commit lock --
        inspect again: regular, not a reparse point, same digest? else stale
        gate.enter()   rename the temporary's handle over the target, relative to the
                       directory handle (FileRenameInformationEx with POSIX semantics and
                       replace-if-exists, else FileRenameInformation with ReplaceIfExists)
        access-denied, sharing-violation or lock-violation (in the re-check or the
        rename): wait and try again; any other failure ends the call
    FlushFileBuffers(file), flush the directory (reopened beneath itself for writing)

Under the worktree's journal (``request.journal``), the entry is written (``begin_bytes``:
the replaced bytes the re-check read are kept in the entry's store) after the last check
and before the rename, under the commit lock, as on POSIX; a journal that cannot keep
them is ``journal_failed`` and nothing is renamed.

Creation renames without replace-if-exists: Windows refuses to overwrite
(``STATUS_OBJECT_NAME_COLLISION`` is ``already_exists``), so no hard link is needed. A
temporary that is not committed is deleted through its own handle
(``FileDispositionInformation``), never looked up by name again.

What differs from POSIX, and the answer says so where it matters: the replaced file's
DACL is given to the temporary before its content is written (``_windows._security``: the
Windows counterpart of keeping the mode; a DACL that cannot be read or given is
``temporary_failed``), its owner cannot be (``owner_changed: true`` when it differs from
the runner's), attributes such as hidden or read-only are not copied; ``durable`` is
true only when both the file and the directory were flushed, and a directory flush that
Windows does not allow is ``durable: false`` on a successful answer (not a failure).
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Final, final

from .._commit import CommitGate, temporary_name
from .._decision import (
    ABORTED,
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
    Occupied,
    Outcome,
    Request,
    decide,
    exists_outcome,
    stale_outcome,
)
from .._root import PathError
from . import _api as w
from . import _root as rw
from ._security import keep_security

REPLACE_ATTEMPTS: Final = 8
"""Tries of the re-check and rename of an existing target that another process holds
(access-denied, sharing-violation, lock-violation); then ``replace_failed``."""

RETRY_FIRST_DELAY_SECONDS: Final = 0.02
"""The wait after the first refused attempt; it doubles after each one."""

RETRY_MAXIMUM_DELAY_SECONDS: Final = 0.5
"""The longest single wait between attempts (all waits together stay under 2 s)."""

CANCELLATION_POLL_SECONDS: Final = 0.01
"""How often a wait between attempts looks at the cancellation flag."""

WRITE_CHUNK_BYTES: Final = 1 << 20
"""Bytes one ``WriteFile`` call is given."""

BUSY_STATUSES: Final = frozenset(
    {
        w.STATUS_ACCESS_DENIED,
        w.STATUS_SHARING_VIOLATION,
        w.STATUS_FILE_LOCK_CONFLICT,
        w.STATUS_LOCK_NOT_GRANTED,
        w.STATUS_DELETE_PENDING,
    }
)
"""What another process holding the target produces: the statuses that are retried."""

_POSIX_RENAME_REFUSED: Final = frozenset(
    {
        w.STATUS_NOT_IMPLEMENTED,
        w.STATUS_INVALID_INFO_CLASS,
        w.STATUS_INVALID_PARAMETER,
        w.STATUS_NOT_SUPPORTED,
    }
)
"""Answers of ``FileRenameInformationEx`` meaning "not here" (older Windows, FAT, Wine)."""

_INSPECT_ACCESS: Final = w.FILE_READ_DATA | w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE
_TEMPORARY_ACCESS: Final = (
    w.FILE_READ_DATA
    | w.FILE_WRITE_DATA
    | w.FILE_READ_ATTRIBUTES
    | w.FILE_WRITE_ATTRIBUTES
    | w.DELETE
    | w.READ_CONTROL
    | w.WRITE_DAC
    | w.SYNCHRONIZE
)
COMMIT_LOCK: Final = threading.Lock()


@final
@dataclass(frozen=True, slots=True)
class Busy:
    """The target is held by another process (a retried status)."""


Found = Current | Absent | Occupied | Busy


def inspect(directory: int, leaf: str, limit: int) -> Found:
    """What is at ``leaf`` in ``directory``: never follows a reparse point."""
    status, handle = rw.nt_open(
        directory, leaf, _INSPECT_ACCESS, w.FILE_OPEN, w.FILE_NON_DIRECTORY_FILE
    )
    if status in (w.STATUS_OBJECT_NAME_NOT_FOUND, w.STATUS_OBJECT_PATH_NOT_FOUND):
        return Absent()
    if status in BUSY_STATUSES:
        return Busy()
    if status in (w.STATUS_FILE_IS_A_DIRECTORY, w.STATUS_REPARSE_POINT_ENCOUNTERED):
        return Occupied("not_regular", NOT_REGULAR, symlink=status != w.STATUS_FILE_IS_A_DIRECTORY)
    if status != w.STATUS_SUCCESS:
        return Occupied("path_unavailable", PATH_UNAVAILABLE)
    try:
        kind = rw.kind(handle)
        if kind.reparse_point or kind.directory:
            return Occupied("not_regular", NOT_REGULAR, symlink=kind.reparse_point)
        info = rw.standard(handle)
        if info.EndOfFile > limit:
            return Occupied("file_too_large", TARGET_TOO_LARGE)
        identity = rw.file_id(handle)
        data = rw.read_all(handle, limit)
    except OSError:
        return Occupied("read_failed", READ_FAILED)
    finally:
        rw.close(handle)
    if data is None:
        return Occupied("file_too_large", TARGET_TOO_LARGE)
    return Current(
        device=0,
        inode=identity,
        mode=0,
        links=info.NumberOfLinks,
        uid=0,
        gid=0,
        sha256=rw.sha256_of(data),
        data=data,
    )


def inspect_settled(
    directory: int, leaf: str, limit: int, gate: CommitGate
) -> Current | Absent | Occupied | Outcome:
    """:func:`inspect`, retried while the target is held; an Outcome when cancelled or
    when the hold does not clear."""
    waits = _Waits(gate)
    while True:
        found = inspect(directory, leaf, limit)
        if not isinstance(found, Busy):
            return found
        stop = waits.next()
        if stop is not None:
            return stop


@final
class AttemptCount:
    """How many attempts this process's writers found refused by a hold, for waiting on.

    The seam a test waits on instead of sleeping: :meth:`wait_past` returns once another
    attempt was refused, so a test acts on the hold only after the retry loop was entered.
    """

    __slots__ = ("_changed", "_count")

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    @property
    def value(self) -> int:
        """Refused attempts so far."""
        with self._changed:
            return self._count

    def add(self) -> None:
        """One more refused attempt."""
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def wait_past(self, seen: int, timeout: float) -> bool:
        """Block until more than ``seen`` attempts were refused, at most ``timeout`` s."""
        with self._changed:
            return self._changed.wait_for(lambda: self._count > seen, timeout)


REFUSED_ATTEMPTS: Final = AttemptCount()
"""Every refused attempt of this process's Windows writers (see :class:`AttemptCount`)."""


@final
class _Waits:
    """The bounded, cancellation-aware waits between attempts."""

    __slots__ = ("_attempts", "_delay", "_gate")

    def __init__(self, gate: CommitGate) -> None:
        self._gate = gate
        self._attempts = 1
        self._delay = RETRY_FIRST_DELAY_SECONDS

    def next(self) -> Outcome | None:
        """Wait before another attempt; an Outcome when there must be none."""
        REFUSED_ATTEMPTS.add()
        if self._attempts >= REPLACE_ATTEMPTS:
            return Outcome("replace_failed", REPLACE_FAILED)
        deadline = time.monotonic() + self._delay
        while (left := deadline - time.monotonic()) > 0:
            if self._gate.cancelled:
                return ABORTED
            time.sleep(min(left, CANCELLATION_POLL_SECONDS))
        if self._gate.cancelled:
            return ABORTED
        self._attempts += 1
        self._delay = min(2 * self._delay, RETRY_MAXIMUM_DELAY_SECONDS)
        return None


def write_file(directory: int, request: Request, gate: CommitGate) -> Outcome:
    """Run one replace or create of ``request.leaf`` in ``directory`` (a held handle).

    Never raises for an operating-system failure: every one is an :class:`Outcome`.
    The temporary file is removed on every path the process survives.
    """
    if gate.cancelled:
        return ABORTED
    found = inspect_settled(directory, request.leaf, request.limit, gate)
    if isinstance(found, Outcome):
        return found
    current = decide(found, request)
    if isinstance(current, Outcome):
        return current
    if gate.cancelled:
        return ABORTED
    name = temporary_name()
    status, temporary = rw.nt_open(
        directory,
        name,
        _TEMPORARY_ACCESS,
        w.FILE_CREATE,
        w.FILE_NON_DIRECTORY_FILE,
        share=w.FILE_SHARE_READ | w.FILE_SHARE_DELETE,
    )
    if status != w.STATUS_SUCCESS:
        return Outcome("temporary_failed", TEMPORARY_FAILED)
    owner_changed = False
    stopped: Outcome | None = None
    try:
        if current is not None:
            kept = keep_security(directory, request.leaf, temporary)
            stopped = Outcome("temporary_failed", TEMPORARY_FAILED) if kept is None else None
            owner_changed = bool(kept)
        if stopped is None:
            stopped = _before_commit(directory, request, gate, current, temporary)
    except BaseException:
        rw.delete_on_close(temporary)
        rw.close(temporary)
        raise
    if stopped is not None:
        cleaned = rw.delete_on_close(temporary)  # through its own handle: never by name
        rw.close(temporary)
        cleaned = cleaned and gone(directory, name)
        if not cleaned and not stopped.aborted:
            return dataclasses.replace(stopped, temporary_cleaned=False)
        return stopped
    try:
        return _after_commit(directory, current, temporary, owner_changed=owner_changed)
    finally:
        rw.close(temporary)  # now the committed file's handle


def gone(directory: int, name: str) -> bool:
    """Whether ``name`` is no longer in ``directory`` (a deleted temporary really went:
    Wine, for one, deletes by the directory's old name after it was renamed)."""
    status, handle = rw.nt_open(
        directory, name, w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE, w.FILE_OPEN, 0
    )
    if status == w.STATUS_SUCCESS:
        rw.close(handle)
        return False
    return status in (
        w.STATUS_OBJECT_NAME_NOT_FOUND,
        w.STATUS_OBJECT_PATH_NOT_FOUND,
        w.STATUS_DELETE_PENDING,
    )


def _before_commit(
    directory: int, request: Request, gate: CommitGate, current: Current | None, temporary: int
) -> Outcome | None:
    """Write and flush the temporary, then re-check and rename; ``None`` once committed."""
    view = memoryview(request.data)
    offset = 0
    while offset < len(view):
        chunk = bytes(view[offset : offset + WRITE_CHUNK_BYTES])
        written = _write(temporary, chunk, offset)
        if written <= 0:
            return Outcome("write_failed", WRITE_FAILED)
        offset += written
    if not rw.flush(temporary):
        return Outcome("sync_failed", SYNC_FAILED)
    if gate.cancelled:
        return ABORTED
    if current is None:
        return _create(directory, request, gate, temporary)
    return _replace(directory, request, gate, temporary)


def _write(handle: int, chunk: bytes, offset: int) -> int:
    written = ctypes.c_ulong(0)
    position = w.Overlapped(0, 0, offset & 0xFFFFFFFF, offset >> 32, None)
    if not w.api().write_file(
        handle, chunk, len(chunk), ctypes.byref(written), ctypes.byref(position)
    ):
        return -1
    return written.value


def _replace(directory: int, request: Request, gate: CommitGate, temporary: int) -> Outcome | None:
    """The retried re-check and rename of an existing target."""
    waits = _Waits(gate)
    while True:
        with COMMIT_LOCK:
            again = inspect(directory, request.leaf, request.limit)
            if isinstance(again, Absent):
                return Outcome("not_found", NOT_FOUND)
            if isinstance(again, Occupied):
                return Outcome(again.code, again.message)
            if isinstance(again, Current):
                if again.sha256 != request.expected:
                    return stale_outcome(again.sha256, request)
                journaled = _journal(request, again.data)
                if journaled is not None:
                    return journaled
                if not gate.enter():
                    return ABORTED
                status = rename(temporary, directory, request.leaf, replace=True)
                if status == w.STATUS_SUCCESS:
                    return None
                if status not in BUSY_STATUSES:
                    return Outcome("replace_failed", REPLACE_FAILED)
                # Nothing happened. The gate stays entered: a cancellation from now on is
                # seen at the next wait (ABORTED), and the call's answer is the outcome.
        stop = waits.next()
        if stop is not None:
            return stop


def _create(directory: int, request: Request, gate: CommitGate, temporary: int) -> Outcome | None:
    """Commit a creation: a rename that never overwrites."""
    with COMMIT_LOCK:
        journaled = _journal(request, None)
        if journaled is not None:
            return journaled
        if not gate.enter():
            return ABORTED
        status = rename(temporary, directory, request.leaf, replace=False)
        if status == w.STATUS_SUCCESS:
            return None
    if status == w.STATUS_OBJECT_NAME_COLLISION:
        return exists_outcome(inspect(directory, request.leaf, request.limit), request)
    return Outcome("create_failed", CREATE_FAILED)


def _journal(request: Request, before: bytes | None) -> Outcome | None:
    """Write the journal's entry before the commit (keeping ``before``, the bytes the last
    check read); an ``Outcome`` when it cannot be."""
    if request.journal is None:
        return None
    try:
        request.journal.begin_bytes(before, request.sha256)
    except OSError:
        return Outcome("journal_failed", JOURNAL_FAILED)
    return None


def rename(handle: int, directory: int, leaf: str, *, replace: bool) -> int:
    """Rename the file of ``handle`` to ``leaf`` in ``directory``: an ``NTSTATUS``.

    POSIX semantics first (the name is replaced even while other handles have the old
    file open, as ``rename(2)`` does); where Windows or its file system has none, the
    classic rename with ``ReplaceIfExists``.
    """
    flags = w.FILE_RENAME_POSIX_SEMANTICS | (w.FILE_RENAME_REPLACE_IF_EXISTS if replace else 0)
    information = w.rename_information(flags, directory, leaf)
    status = w.set_information(handle, information, w.FILE_RENAME_INFORMATION_EX)
    if status not in _POSIX_RENAME_REFUSED:
        return status
    information = w.rename_information(1 if replace else 0, directory, leaf)
    return w.set_information(handle, information, w.FILE_RENAME_INFORMATION)


def _after_commit(
    directory: int, current: Current | None, temporary: int, *, owner_changed: bool
) -> Outcome:
    """Flush the committed file (its handle is the temporary's) and the directory.

    A file flush that fails, or a directory flush that fails with an I/O error, is
    ``durability_unconfirmed``. A directory flush Windows does not allow (access denied,
    not supported) is a success with ``durable: false``: the rename is in the file
    system's journal, but its entry was not confirmed on storage.
    """
    flushed = rw.flush(temporary)
    directory_state = rw.flush_directory(directory) if flushed else rw.DIRECTORY_FLUSH_FAILED
    failed = directory_state == rw.DIRECTORY_FLUSH_FAILED
    return Outcome(
        "durability_unconfirmed" if failed else None,
        DURABILITY_UNCONFIRMED if failed else "",
        committed=True,
        changed=True,
        created=current is None,
        durable=directory_state == rw.DIRECTORY_FLUSHED,
        hard_links_split=current is not None and current.links > 1,
        owner_changed=owner_changed,
    )


def flush_ancestors(root: int, parent: str, outcome: Outcome) -> Outcome:
    """After a create into directories it may have made: flush the root and every
    ancestor above ``parent``; ``durable`` only when each was flushed, and
    ``durability_unconfirmed`` when one could not be opened or failed with an I/O error."""
    names = parent.split("/")
    ancestors = [".", *("/".join(names[:depth]) for depth in range(1, len(names)))]
    for ancestor in ancestors:
        try:
            handle = rw.open_directory(root, ancestor)
        except PathError:
            state = rw.DIRECTORY_FLUSH_FAILED
        else:
            try:
                state = rw.flush_directory(handle)
            finally:
                rw.close(handle)
        if state == rw.DIRECTORY_FLUSH_FAILED:
            return dataclasses.replace(
                outcome,
                code="durability_unconfirmed",
                message=DURABILITY_UNCONFIRMED,
                durable=False,
            )
        if state == rw.DIRECTORY_FLUSH_REFUSED:
            outcome = dataclasses.replace(outcome, durable=False)
    return outcome
