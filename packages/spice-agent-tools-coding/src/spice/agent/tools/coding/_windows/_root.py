"""Root-confined file access on Windows: every name is opened beneath a held directory handle.

The Windows counterpart of ``_root`` (whose docstring tells the POSIX story), the way
Go's ``os.Root`` does it on Windows:

1. **Names** are checked and cleaned by ``_windows._names.clean_windows_path`` before anything
   is opened (drive and UNC prefixes, streams, device names, trailing dots and spaces,
   8.3 aliases are ``invalid_arguments``).
2. **The root** is opened once per call (``CreateFileW`` with backup semantics, every
   share mode, so the root may even be renamed while it is held). Its own path is
   trusted configuration, so links in it are followed; a missing root is
   ``root_unavailable``.
3. **The walk**: each component is opened with ``NtCreateFile`` whose
   ``OBJECT_ATTRIBUTES.RootDirectory`` is the handle of the directory holding it (the
   root's for the first), one component per call, so no name is ever parsed from a
   drive or the current directory, and ``..`` never reaches the NT layer (it was
   applied lexically; NT itself refuses it beneath a handle). Every open carries
   ``FILE_OPEN_REPARSE_POINT``, so a reparse point (symbolic link, junction, mount
   point, or any other tag) is opened as itself and never followed, and
   ``OBJ_DONT_REPARSE`` where the system has it (Windows 10 1607 and later; a system
   that refuses the flag gets the walk without it, remembered for the process). The
   opened object's attributes are then read from the handle
   (``FileAttributeTagInformation``): a reparse point is refused (``path_escape`` for a
   directory on the way, ``not_regular`` for the file itself). Lookups are
   case-insensitive, as Win32's.

No reparse point is followed at all, not even one that stays inside the root: this is
stricter than the POSIX walk, which follows a symlink whose target stays inside.
Directory handles the walk holds are opened with every share mode, so nothing here
stops another process from renaming them; a name below a held directory is resolved
where that directory now is (the same-user trust boundary of ``_root``).

Errors are ``_root.PathError`` with a contract code and a fixed text.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Final, final

from .._root import MadeDirectory, PathError
from . import _api as w

MAXIMUM_CREATE_ATTEMPTS: Final = 4
"""Tries to create-then-open one missing directory that keeps vanishing (a race)."""

_ROOT: Final = "the worktree root is not available"
_MISSING: Final = "the path does not exist"
_UNAVAILABLE: Final = "the path could not be opened"
_NOT_DIRECTORY: Final = "a component of the path is not a directory"
_NOT_REGULAR: Final = "the path is not a regular file"
_REPARSE_COMPONENT: Final = (
    "a component of the path is a reparse point (symbolic link or junction); "
    "reparse points are never followed on Windows"
)
_REPARSE_FINAL: Final = (
    "the path is a reparse point (symbolic link or junction); "
    "reparse points are never followed on Windows"
)
_INVALID_NAME: Final = "the path is not a valid Windows file name"
_CREATE_FAILED: Final = "a missing directory could not be created"

_DIRECTORY_ACCESS: Final = (
    w.FILE_READ_DATA | w.FILE_TRAVERSE | w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE
)
READ_ACCESS: Final = w.FILE_READ_DATA | w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE

_NOT_FOUND: Final = frozenset({w.STATUS_OBJECT_NAME_NOT_FOUND, w.STATUS_OBJECT_PATH_NOT_FOUND})
_REPARSE: Final = frozenset({w.STATUS_REPARSE_POINT_ENCOUNTERED, w.STATUS_STOPPED_ON_SYMLINK})

_dont_reparse: bool | None = None
"""``OBJ_DONT_REPARSE`` in use: ``None`` until the first open tells."""


@final
@dataclass(frozen=True, slots=True)
class Kind:
    """What a handle is: its attributes and reparse tag."""

    attributes: int
    reparse_tag: int

    @property
    def reparse_point(self) -> bool:
        return bool(self.attributes & w.FILE_ATTRIBUTE_REPARSE_POINT) or self.reparse_tag != 0

    @property
    def directory(self) -> bool:
        return bool(self.attributes & w.FILE_ATTRIBUTE_DIRECTORY)


def close(handle: int) -> None:
    """Close a handle this module opened (errors are ignored: the handle is gone)."""
    w.api().close_handle(handle)


def nt_open(
    parent: int,
    name: str,
    access: int,
    disposition: int,
    options: int,
    *,
    share: int = w.SHARE_ALL,
) -> tuple[int, int]:
    """One ``NtCreateFile`` of ``name`` beneath ``parent``: ``(status, handle)``.

    Always ``FILE_OPEN_REPARSE_POINT`` and synchronous I/O, case-insensitive, and
    ``OBJ_DONT_REPARSE`` where the system has it. ``handle`` is 0 unless status is success.
    """
    global _dont_reparse  # noqa: PLW0603 - one process-wide decision
    if "\\" in name or "/" in name or name in {".", ".."}:
        # One component at a time, always: NT would parse a separator as another step.
        raise PathError("invalid_arguments", _INVALID_NAME)
    api = w.api()
    encoded_length = len(name.encode("utf-16-le"))
    # The structure keeps its own reference to the buffer ctypes makes for ``name``.
    unicode = w.UnicodeString(encoded_length, encoded_length, name)
    options |= w.FILE_OPEN_REPARSE_POINT | w.FILE_SYNCHRONOUS_IO_NONALERT
    attributes = w.OBJ_CASE_INSENSITIVE
    if _dont_reparse is not False:
        attributes |= w.OBJ_DONT_REPARSE
    while True:
        handle = ctypes.c_void_p(0)
        status_block = w.IoStatusBlock()
        objects = w.ObjectAttributes(
            ctypes.sizeof(w.ObjectAttributes),
            parent,
            ctypes.pointer(unicode),
            attributes,
            None,
            None,
        )
        status = w.unsigned(
            api.nt_create_file(
                ctypes.byref(handle),
                access,
                ctypes.byref(objects),
                ctypes.byref(status_block),
                None,
                w.FILE_ATTRIBUTE_NORMAL,
                share,
                disposition,
                options,
                None,
                0,
            )
        )
        if (
            status == w.STATUS_INVALID_PARAMETER
            and _dont_reparse is None
            and attributes & w.OBJ_DONT_REPARSE
        ):
            attributes &= ~w.OBJ_DONT_REPARSE  # a system older than the flag: ask again
            continue
        if _dont_reparse is None and attributes & w.OBJ_DONT_REPARSE:
            _dont_reparse = True
        elif _dont_reparse is None and status != w.STATUS_INVALID_PARAMETER:
            _dont_reparse = False
        return status, (handle.value or 0) if status == w.STATUS_SUCCESS else 0


def kind(handle: int) -> Kind:
    """The handle's attributes and reparse tag (``OSError`` when they cannot be read)."""
    info = w.FileAttributeTagInformation()
    status = w.query_information(handle, info, w.FILE_ATTRIBUTE_TAG_INFORMATION)
    if status != w.STATUS_SUCCESS:
        raise OSError("the file's attributes could not be read")
    return Kind(info.FileAttributes, info.ReparseTag)


def standard(handle: int) -> w.FileStandardInformation:
    """Size, link count and directory flag of the handle (``OSError`` on failure)."""
    info = w.FileStandardInformation()
    status = w.query_information(handle, info, w.FILE_STANDARD_INFORMATION)
    if status != w.STATUS_SUCCESS:
        raise OSError("the file's size could not be read")
    return info


def file_id(handle: int) -> int:
    """The file's 64-bit index on its volume (``OSError`` on failure)."""
    value = ctypes.c_ulonglong(0)
    status = w.query_information(handle, value, w.FILE_INTERNAL_INFORMATION)
    if status != w.STATUS_SUCCESS:
        raise OSError("the file's identity could not be read")
    return value.value


def mapped(status: int, *, final: bool) -> PathError:
    """The PathError of an ``NTSTATUS`` met while opening beneath the root."""
    if status in _NOT_FOUND:
        return PathError("not_found", _MISSING)
    if status == w.STATUS_NOT_A_DIRECTORY:
        return PathError("not_regular", _NOT_DIRECTORY)
    if status == w.STATUS_FILE_IS_A_DIRECTORY:
        return PathError("not_regular", _NOT_REGULAR)
    if status in _REPARSE:
        if final:
            return PathError("not_regular", _REPARSE_FINAL)
        return PathError("path_escape", _REPARSE_COMPONENT)
    if status == w.STATUS_OBJECT_NAME_INVALID:
        return PathError("invalid_arguments", _INVALID_NAME)
    return PathError("path_unavailable", _UNAVAILABLE)


def refuse_reparse_point(handle: int, *, final: bool) -> Kind:
    """Close ``handle`` and raise when it is a reparse point; else return its kind."""
    try:
        found = kind(handle)
    except OSError:
        close(handle)
        raise PathError("path_unavailable", _UNAVAILABLE) from None
    if found.reparse_point:
        close(handle)
        if final:
            raise PathError("not_regular", _REPARSE_FINAL)
        raise PathError("path_escape", _REPARSE_COMPONENT)
    return found


def open_root(root: str) -> int:
    """Open the configured root directory; ``PathError("root_unavailable")`` when it cannot be."""
    try:
        api = w.api()
    except OSError:
        raise PathError("root_unavailable", _ROOT) from None
    handle = api.create_file(
        root,
        _DIRECTORY_ACCESS,
        w.SHARE_ALL,
        None,
        w.OPEN_EXISTING,
        w.FILE_FLAG_BACKUP_SEMANTICS,
        None,
    )
    if handle is None or handle == w.INVALID_HANDLE_VALUE:
        raise PathError("root_unavailable", _ROOT)
    try:
        directory = kind(handle).directory
    except OSError:
        directory = False
    if not directory:
        close(handle)
        raise PathError("root_unavailable", _ROOT)
    return int(handle)


def open_directory(
    root: int,
    cleaned: str,
    *,
    create_missing: bool = False,
    made: list[MadeDirectory] | None = None,
    access: int = _DIRECTORY_ACCESS,
) -> int:
    """Open the directory ``cleaned`` beneath the root handle; the caller owns the handle.

    Missing components are created when ``create_missing`` (each appended to ``made``,
    shallowest first, with its file id as ``inode``). ``"."`` opens the root again.
    """
    names = [] if cleaned == "." else cleaned.split("/")
    if not names:
        status, handle = nt_open(root, "", access, w.FILE_OPEN, w.FILE_DIRECTORY_FILE)
        if status != w.STATUS_SUCCESS:
            raise PathError("root_unavailable", _ROOT)
        return handle
    current = root
    walked: list[str] = []
    try:
        for index, name in enumerate(names):
            last = index == len(names) - 1
            handle, identity = _enter(
                current, name, access if last else _DIRECTORY_ACCESS, create_missing
            )
            walked.append(name)
            if identity is not None and made is not None:
                made.append(MadeDirectory("/".join(walked), 0, identity))
            if current != root:
                close(current)
            current = handle
    except BaseException:
        if current != root:
            close(current)
        raise
    return current


def _enter(parent: int, name: str, access: int, create_missing: bool) -> tuple[int, int | None]:
    """Open (or make) directory ``name`` in ``parent``: its handle, and its id if made here."""
    for _ in range(MAXIMUM_CREATE_ATTEMPTS):
        status, handle = nt_open(parent, name, access, w.FILE_OPEN, w.FILE_DIRECTORY_FILE)
        if status == w.STATUS_SUCCESS:
            refuse_reparse_point(handle, final=False)
            return handle, None
        if status not in _NOT_FOUND or not create_missing:
            raise mapped(status, final=False)
        status, handle = nt_open(parent, name, access, w.FILE_CREATE, w.FILE_DIRECTORY_FILE)
        if status == w.STATUS_OBJECT_NAME_COLLISION:
            continue  # made by someone else meanwhile: open it
        if status != w.STATUS_SUCCESS:
            raise PathError("path_unavailable", _CREATE_FAILED)
        try:
            identity = file_id(handle)
        except OSError:
            identity = 0
        return handle, identity
    raise PathError("path_unavailable", _CREATE_FAILED)


def open_file(parent: int, name: str, access: int, *, share: int = w.SHARE_ALL) -> int:
    """Open the existing regular file ``name`` in ``parent`` without following a reparse point."""
    status, handle = nt_open(
        parent, name, access, w.FILE_OPEN, w.FILE_NON_DIRECTORY_FILE, share=share
    )
    if status != w.STATUS_SUCCESS:
        raise mapped(status, final=True)
    found = refuse_reparse_point(handle, final=True)
    if found.directory:
        close(handle)
        raise PathError("not_regular", _NOT_REGULAR)
    return handle


def split_parent(cleaned: str) -> tuple[str, str]:
    """``("a/b", "c")`` for ``"a/b/c"``; ``(".", "c")`` for ``"c"``."""
    parent, _, leaf = cleaned.rpartition("/")
    return (parent or "."), leaf


def open_regular(root: str, cleaned: str) -> int:
    """Open the regular file ``cleaned`` beneath ``root`` for reading: a CRT descriptor.

    The caller owns the descriptor (``os.close`` closes the handle); ``os.fstat`` works
    on it, and :func:`pread` reads it at an offset.
    """
    root_handle = open_root(root)
    try:
        parent, leaf = split_parent(cleaned)
        directory = root_handle if parent == "." else open_directory(root_handle, parent)
        try:
            handle = open_file(directory, leaf, READ_ACCESS)
        finally:
            if directory != root_handle:
                close(directory)
    finally:
        close(root_handle)
    return descriptor(handle, os.O_RDONLY)


def descriptor(handle: int, flags: int) -> int:
    """A CRT descriptor owning ``handle`` (binary mode); the handle is closed on failure."""
    if sys.platform != "win32":
        close(handle)
        raise PathError("path_unavailable", _UNAVAILABLE)
    import msvcrt  # noqa: PLC0415 - Windows only

    try:
        return int(msvcrt.open_osfhandle(handle, flags))
    except OSError:
        close(handle)
        raise PathError("path_unavailable", _UNAVAILABLE) from None


def pread(fd: int, count: int, offset: int) -> bytes:
    """Up to ``count`` bytes of ``fd`` at ``offset`` (``b""`` at the end): ``ReadFile``."""
    if sys.platform != "win32":
        raise OSError("positional reads of a descriptor need Windows here")
    import msvcrt  # noqa: PLC0415 - Windows only

    return read_handle(int(msvcrt.get_osfhandle(fd)), count, offset)


def read_handle(handle: int, count: int, offset: int) -> bytes:
    """One positional ``ReadFile`` on ``handle``; ``OSError`` on failure."""
    buffer = ctypes.create_string_buffer(count)
    got = ctypes.c_ulong(0)
    position = w.Overlapped(0, 0, offset & 0xFFFFFFFF, offset >> 32, None)
    if not w.api().read_file(handle, buffer, count, ctypes.byref(got), ctypes.byref(position)):
        if w.last_error() == w.ERROR_HANDLE_EOF:
            return b""
        raise OSError("the file could not be read")
    return buffer.raw[: got.value]


def read_all(handle: int, limit: int) -> bytes | None:
    """All of ``handle`` if it holds at most ``limit`` bytes, else ``None``."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = read_handle(handle, min(65_536, limit + 1 - total), total)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def sha256_of(data: bytes) -> str:
    """The lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def remove_made(root: int, made: list[MadeDirectory]) -> bool:
    """Remove the directories in ``made`` that are still empty and still the same, deepest first.

    Each is opened beneath the root (never through a reparse point), compared by file
    id, and deleted through its handle (``FileDispositionInformation``: refused for a
    directory that is not empty). True when every one is gone; ``made`` keeps the rest.
    """
    while made:
        directory = made[-1]
        parent, leaf = split_parent(directory.path)
        try:
            parent_handle = root if parent == "." else open_directory(root, parent)
        except PathError:
            return False
        try:
            status, handle = nt_open(
                parent_handle,
                leaf,
                w.DELETE | w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE,
                w.FILE_OPEN,
                w.FILE_DIRECTORY_FILE,
            )
            if status != w.STATUS_SUCCESS:
                return False
            try:
                found = kind(handle)
                if found.reparse_point or file_id(handle) != directory.inode:
                    return False
                if not delete_on_close(handle):
                    return False
            except OSError:
                return False
            finally:
                close(handle)
        finally:
            if parent_handle != root:
                close(parent_handle)
        made.pop()
    return True


def delete_on_close(handle: int) -> bool:
    """Mark ``handle``'s file for deletion when its last handle closes; True on success."""
    flag = ctypes.c_ubyte(1)
    status = w.set_information(handle, flag, w.FILE_DISPOSITION_INFORMATION)
    return status == w.STATUS_SUCCESS


DIRECTORY_FLUSHED: Final = "flushed"
DIRECTORY_FLUSH_REFUSED: Final = "refused"
DIRECTORY_FLUSH_FAILED: Final = "failed"

_FLUSH_REFUSALS: Final = frozenset(
    {
        w.ERROR_ACCESS_DENIED,
        w.ERROR_INVALID_FUNCTION,
        w.ERROR_NOT_SUPPORTED,
        w.ERROR_INVALID_PARAMETER,
    }
)
"""What a system that does not flush directories (or lets no one open one for writing)
answers: not an I/O failure."""


def flush_directory(directory: int) -> str:
    """Flush a directory's entries to storage: reopened beneath itself for writing, then
    ``FlushFileBuffers``.

    ``DIRECTORY_FLUSHED``; ``DIRECTORY_FLUSH_REFUSED`` where Windows does not allow it
    (access denied, not supported: the answer then says ``durable: false``); or
    ``DIRECTORY_FLUSH_FAILED`` for any other failure (an I/O error: the change may not
    survive a crash).
    """
    status, handle = nt_open(
        directory, "", w.FILE_WRITE_DATA | w.SYNCHRONIZE, w.FILE_OPEN, w.FILE_DIRECTORY_FILE
    )
    if status != w.STATUS_SUCCESS:
        refused = status in (w.STATUS_ACCESS_DENIED, w.STATUS_NOT_SUPPORTED)
        return DIRECTORY_FLUSH_REFUSED if refused else DIRECTORY_FLUSH_FAILED
    try:
        if w.api().flush_file_buffers(handle):
            return DIRECTORY_FLUSHED
        refused = w.last_error() in _FLUSH_REFUSALS
        return DIRECTORY_FLUSH_REFUSED if refused else DIRECTORY_FLUSH_FAILED
    finally:
        close(handle)


def flush(handle: int) -> bool:
    """``FlushFileBuffers`` on a file handle; True on success."""
    return bool(w.api().flush_file_buffers(handle))
