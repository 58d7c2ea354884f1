"""Taking a ``replace`` entry's paths back on Windows (13.2), beneath the held root handle.

The journal's engine (``_journal_apply``) opens directories by descriptor, which Windows'
Python cannot. On Windows only ``replace`` is journaled (``shell`` calls are never staged
there), so an entry holds regular files (modified or created) and the directories a create
made, and an undo's entry the same kinds: this module is all ``Journal.undo`` and
``Journal.recover`` need there. Every name is opened beneath the root handle, one
component at a time, never through a reparse point (``_windows._root``):

- a file is put back by the ``replace`` engine itself (``_windows._commit.write_file``):
  written beside, flushed, re-checked under the commit lock against the digest found here
  (a file changed in between is not overwritten), renamed over; its DACL kept;
- a file the call created is deleted through its own handle, opened with no write sharing
  and its digest checked first;
- a directory a create made is removed only when empty (``FileDispositionInformation`` on a
  directory that is not a reparse point), and made again by ``open_directory``.

A path's state here is its kind and digest: Windows has no POSIX mode, and the records'
``mode`` is ``None``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final, Literal, final

from .._commit import CommitGate
from .._decision import Absent, Current, Occupied, Request
from .._journal_records import State
from .._root import PathError
from . import _api as w
from . import _commit as cw
from . import _root as rw

__all__ = ["RESTORE_MAX_BYTES", "Found", "apply", "close", "look", "open_root", "same", "stored"]

RESTORE_MAX_BYTES: Final = 256 * 1024 * 1024
"""The largest file an undo or a recovery reads (what is there now, to check and keep it,
and what it puts back): a larger one is left and listed as refused."""

_CHECK_ACCESS: Final = w.FILE_READ_DATA | w.FILE_READ_ATTRIBUTES | w.DELETE | w.SYNCHRONIZE
_DIRECTORY_DELETE: Final = w.DELETE | w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE


@final
@dataclass(frozen=True, slots=True)
class Found:
    """What a path holds now: its state (``None``: nothing) and a file's bytes."""

    state: State | None
    data: bytes | None = field(default=None, repr=False)


def open_root(root: str) -> int:
    """The root's handle (``PathError`` when it cannot be opened)."""
    return rw.open_root(root)


def close(handle: int) -> None:
    """Close a handle of this module."""
    rw.close(handle)


def same(state: State | None, wanted: State | None) -> bool:
    """Whether ``state`` is ``wanted`` by kind and digest (Windows records no mode)."""
    if state is None or wanted is None:
        return state is wanted
    return (state.kind, state.sha256) == (wanted.kind, wanted.sha256)


def look(root: int, path: str) -> Found | Literal["other"]:
    """What ``path`` holds; ``"other"`` for what is never touched: a reparse point (on the
    way or at the end), a file held by another process, too large or unreadable."""
    parent, leaf = rw.split_parent(path)
    try:
        directory = rw.open_directory(root, parent)
    except PathError as error:
        return Found(None) if error.code == "not_found" else "other"
    try:
        found = cw.inspect(directory, leaf, RESTORE_MAX_BYTES)
        if isinstance(found, Absent):
            return Found(None)
        if isinstance(found, Current):
            return Found(State("file", None, found.sha256), found.data)
        if isinstance(found, Occupied) and found.code == "not_regular" and _plain(directory, leaf):
            return Found(State("directory", None, None))
        return "other"
    finally:
        rw.close(directory)


def _plain(directory: int, leaf: str) -> bool:
    """Whether ``leaf`` is a directory that is not a reparse point (a junction to a
    directory answers as a directory to a file's open)."""
    status, handle = rw.nt_open(
        directory, leaf, w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE, w.FILE_OPEN, w.FILE_DIRECTORY_FILE
    )
    if status != w.STATUS_SUCCESS:
        return False
    try:
        found = rw.kind(handle)
    except OSError:
        return False
    finally:
        rw.close(handle)
    return found.directory and not found.reparse_point


def apply(root: int, path: str, found: Found, wanted: State | None, source: str | None) -> bool:
    """Make ``path`` (which holds ``found``) hold ``wanted``: a file's bytes come from
    ``source`` (the store's copy, checked against ``wanted``'s digest). False when it
    cannot be (the path is left as it is)."""
    current = found.state
    if wanted is None:
        if current is None:
            return True
        if current.kind == "directory":
            return _remove_directory(root, path)
        return current.sha256 is not None and _remove_file(root, path, current.sha256)
    if wanted.kind == "directory":
        if current is None:
            return _make_directory(root, path)
        return current.kind == "directory"
    if wanted.kind != "file" or source is None or (current and current.kind != "file"):
        return False
    data = stored(source)
    if data is None or hashlib.sha256(data).hexdigest() != wanted.sha256:
        return False
    return _put_file(root, path, data, None if current is None else current.sha256)


def stored(source: str) -> bytes | None:
    """The bytes the journal's store keeps at ``source`` (``None``: unreadable, too large)."""
    try:
        with open(source, "rb") as kept:
            data = kept.read(RESTORE_MAX_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= RESTORE_MAX_BYTES else None


def _put_file(root: int, path: str, data: bytes, expected: str | None) -> bool:
    """The ``replace`` engine writes ``data`` at ``path`` if it still holds ``expected``
    (``None``: create, never overwriting)."""
    parent, leaf = rw.split_parent(path)
    try:
        directory = rw.open_directory(root, parent)
    except PathError:
        return False
    try:
        digest = hashlib.sha256(data).hexdigest()
        request = Request(leaf, data, digest, expected, RESTORE_MAX_BYTES)
        outcome = cw.write_file(directory, request, CommitGate())
    finally:
        rw.close(directory)
    return outcome.code is None and not outcome.aborted


def _remove_file(root: int, path: str, expected: str) -> bool:
    """Delete the regular file ``path`` if it holds ``expected`` (checked through the
    handle that deletes it, which no one may write through meanwhile)."""
    parent, leaf = rw.split_parent(path)
    try:
        directory = rw.open_directory(root, parent)
    except PathError:
        return False
    try:
        with cw.COMMIT_LOCK:
            status, handle = rw.nt_open(
                directory,
                leaf,
                _CHECK_ACCESS,
                w.FILE_OPEN,
                w.FILE_NON_DIRECTORY_FILE,
                share=w.FILE_SHARE_READ | w.FILE_SHARE_DELETE,
            )
            if status != w.STATUS_SUCCESS:
                return False
            try:
                found = rw.kind(handle)
                if found.reparse_point or found.directory:
                    return False
                data = rw.read_all(handle, RESTORE_MAX_BYTES)
                if data is None or rw.sha256_of(data) != expected:
                    return False
                return rw.delete_on_close(handle)
            except OSError:
                return False
            finally:
                rw.close(handle)
    finally:
        rw.close(directory)


def _remove_directory(root: int, path: str) -> bool:
    """Remove the directory ``path`` if it is empty and not a reparse point."""
    parent, leaf = rw.split_parent(path)
    try:
        directory = rw.open_directory(root, parent)
    except PathError:
        return False
    try:
        status, handle = rw.nt_open(
            directory, leaf, _DIRECTORY_DELETE, w.FILE_OPEN, w.FILE_DIRECTORY_FILE
        )
        if status != w.STATUS_SUCCESS:
            return False
        try:
            if rw.kind(handle).reparse_point:
                return False
            removed = rw.delete_on_close(handle)
        except OSError:
            return False
        finally:
            rw.close(handle)
        return removed and cw.gone(directory, leaf)
    finally:
        rw.close(directory)


def _make_directory(root: int, path: str) -> bool:
    """Make the directory ``path`` (and any missing above it) beneath the root."""
    try:
        handle = rw.open_directory(root, path, create_missing=True, made=[])
    except PathError:
        return False
    rw.close(handle)
    return True
