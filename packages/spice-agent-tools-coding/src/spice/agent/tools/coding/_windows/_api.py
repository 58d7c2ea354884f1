"""The few ntdll and kernel32 calls of the Windows root, declared through ``ctypes``.

Importing this module is safe on every platform (it only defines structures and
constants); :func:`api` loads the DLLs, on Windows only, once per process. Each call
returns what Windows returns (an ``NTSTATUS``, a ``BOOL``); the callers (``_windows._root``)
turn those into model-visible codes. Nothing here formats an OS error text.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, final

# NTSTATUS values (as unsigned 32-bit numbers).
STATUS_SUCCESS: Final = 0x00000000
STATUS_BUFFER_OVERFLOW: Final = 0x80000005
STATUS_STOPPED_ON_SYMLINK: Final = 0x8000002D
STATUS_NOT_IMPLEMENTED: Final = 0xC0000002
STATUS_INVALID_INFO_CLASS: Final = 0xC0000003
STATUS_INVALID_PARAMETER: Final = 0xC000000D
STATUS_ACCESS_DENIED: Final = 0xC0000022
STATUS_OBJECT_NAME_INVALID: Final = 0xC0000033
STATUS_OBJECT_NAME_NOT_FOUND: Final = 0xC0000034
STATUS_OBJECT_NAME_COLLISION: Final = 0xC0000035
STATUS_OBJECT_PATH_NOT_FOUND: Final = 0xC000003A
STATUS_SHARING_VIOLATION: Final = 0xC0000043
STATUS_FILE_LOCK_CONFLICT: Final = 0xC0000054
STATUS_LOCK_NOT_GRANTED: Final = 0xC0000055
STATUS_DELETE_PENDING: Final = 0xC0000056
STATUS_FILE_IS_A_DIRECTORY: Final = 0xC00000BA
STATUS_NOT_SUPPORTED: Final = 0xC00000BB
STATUS_NOT_A_DIRECTORY: Final = 0xC0000103
STATUS_CANNOT_DELETE: Final = 0xC0000121
STATUS_NOT_A_REPARSE_POINT: Final = 0xC0000275
STATUS_REPARSE_POINT_ENCOUNTERED: Final = 0xC000050B

# Access rights.
FILE_READ_DATA: Final = 0x0001  # FILE_LIST_DIRECTORY on a directory
FILE_WRITE_DATA: Final = 0x0002  # FILE_ADD_FILE on a directory
FILE_APPEND_DATA: Final = 0x0004  # FILE_ADD_SUBDIRECTORY on a directory
FILE_TRAVERSE: Final = 0x0020
FILE_READ_ATTRIBUTES: Final = 0x0080
FILE_WRITE_ATTRIBUTES: Final = 0x0100
DELETE: Final = 0x00010000
READ_CONTROL: Final = 0x00020000
WRITE_DAC: Final = 0x00040000
SYNCHRONIZE: Final = 0x00100000
GENERIC_WRITE: Final = 0x40000000

# Share modes.
FILE_SHARE_READ: Final = 1
FILE_SHARE_WRITE: Final = 2
FILE_SHARE_DELETE: Final = 4
SHARE_ALL: Final = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE

# Create dispositions and options.
FILE_OPEN: Final = 1
FILE_CREATE: Final = 2
FILE_DIRECTORY_FILE: Final = 0x00000001
FILE_SYNCHRONOUS_IO_NONALERT: Final = 0x00000020
FILE_NON_DIRECTORY_FILE: Final = 0x00000040
FILE_OPEN_REPARSE_POINT: Final = 0x00200000

# Object attributes.
OBJ_CASE_INSENSITIVE: Final = 0x00000040
OBJ_DONT_REPARSE: Final = 0x00001000

# File attributes.
FILE_ATTRIBUTE_DIRECTORY: Final = 0x00000010
FILE_ATTRIBUTE_NORMAL: Final = 0x00000080
FILE_ATTRIBUTE_REPARSE_POINT: Final = 0x00000400

# FILE_INFORMATION_CLASS values.
FILE_STANDARD_INFORMATION: Final = 5
FILE_INTERNAL_INFORMATION: Final = 6
FILE_RENAME_INFORMATION: Final = 10
FILE_DISPOSITION_INFORMATION: Final = 13
FILE_ATTRIBUTE_TAG_INFORMATION: Final = 35
FILE_RENAME_INFORMATION_EX: Final = 65

# FileRenameInformationEx flags.
FILE_RENAME_REPLACE_IF_EXISTS: Final = 0x00000001
FILE_RENAME_POSIX_SEMANTICS: Final = 0x00000002

# kernel32.
OPEN_EXISTING: Final = 3
FILE_FLAG_BACKUP_SEMANTICS: Final = 0x02000000
ERROR_INVALID_FUNCTION: Final = 1
ERROR_ACCESS_DENIED: Final = 5
ERROR_HANDLE_EOF: Final = 38
ERROR_NOT_SUPPORTED: Final = 50
ERROR_INVALID_PARAMETER: Final = 87
INVALID_HANDLE_VALUE: Final = ctypes.c_void_p(-1).value


@final
class UnicodeString(ctypes.Structure):
    """``UNICODE_STRING``."""

    _fields_ = (
        ("Length", ctypes.c_ushort),
        ("MaximumLength", ctypes.c_ushort),
        ("Buffer", ctypes.c_wchar_p),
    )


@final
class ObjectAttributes(ctypes.Structure):
    """``OBJECT_ATTRIBUTES``."""

    _fields_ = (
        ("Length", ctypes.c_ulong),
        ("RootDirectory", ctypes.c_void_p),
        ("ObjectName", ctypes.POINTER(UnicodeString)),
        ("Attributes", ctypes.c_ulong),
        ("SecurityDescriptor", ctypes.c_void_p),
        ("SecurityQualityOfService", ctypes.c_void_p),
    )


@final
class IoStatusBlock(ctypes.Structure):
    """``IO_STATUS_BLOCK`` (the status/pointer union as a pointer-sized field)."""

    _fields_ = (("Status", ctypes.c_void_p), ("Information", ctypes.c_size_t))


@final
class Overlapped(ctypes.Structure):
    """``OVERLAPPED``: only the offset is used (positional reads and writes)."""

    _fields_ = (
        ("Internal", ctypes.c_size_t),
        ("InternalHigh", ctypes.c_size_t),
        ("Offset", ctypes.c_ulong),
        ("OffsetHigh", ctypes.c_ulong),
        ("hEvent", ctypes.c_void_p),
    )


@final
class FileStandardInformation(ctypes.Structure):
    """``FILE_STANDARD_INFORMATION``."""

    _fields_ = (
        ("AllocationSize", ctypes.c_longlong),
        ("EndOfFile", ctypes.c_longlong),
        ("NumberOfLinks", ctypes.c_ulong),
        ("DeletePending", ctypes.c_ubyte),
        ("Directory", ctypes.c_ubyte),
    )


@final
class FileAttributeTagInformation(ctypes.Structure):
    """``FILE_ATTRIBUTE_TAG_INFORMATION``."""

    _fields_ = (("FileAttributes", ctypes.c_ulong), ("ReparseTag", ctypes.c_ulong))


def rename_information(flags: int, root: int | None, name: str) -> ctypes.Array[ctypes.c_char]:
    """``FILE_RENAME_INFORMATION`` (and ``_EX``): flags (or ``ReplaceIfExists``), root, name.

    x64 layout: a 4-byte union padded to 8, the 8-byte ``RootDirectory``, the 4-byte
    ``FileNameLength``, then the UTF-16 name (at offset 20).
    """
    encoded = name.encode("utf-16-le")
    buffer = ctypes.create_string_buffer(20 + len(encoded) + 2)
    struct.pack_into(f"<I4xQI{len(encoded)}s", buffer, 0, flags, root or 0, len(encoded), encoded)
    return buffer


@final
class Api:
    """The loaded functions (Windows only)."""

    __slots__ = (
        "close_handle",
        "create_file",
        "flush_file_buffers",
        "nt_create_file",
        "nt_query_information_file",
        "nt_set_information_file",
        "read_file",
        "write_file",
    )

    def __init__(self) -> None:
        ntdll = library("ntdll")
        kernel32 = library("kernel32", last_error=True)
        handle, ulong, pointer = ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p
        self.nt_create_file = ntdll.NtCreateFile
        self.nt_create_file.restype = ctypes.c_long
        self.nt_create_file.argtypes = (
            ctypes.POINTER(handle),
            ulong,
            ctypes.POINTER(ObjectAttributes),
            ctypes.POINTER(IoStatusBlock),
            pointer,
            ulong,
            ulong,
            ulong,
            ulong,
            pointer,
            ulong,
        )
        self.nt_set_information_file = ntdll.NtSetInformationFile
        self.nt_set_information_file.restype = ctypes.c_long
        self.nt_set_information_file.argtypes = (
            handle,
            ctypes.POINTER(IoStatusBlock),
            pointer,
            ulong,
            ctypes.c_int,
        )
        self.nt_query_information_file = ntdll.NtQueryInformationFile
        self.nt_query_information_file.restype = ctypes.c_long
        self.nt_query_information_file.argtypes = self.nt_set_information_file.argtypes
        self.create_file = kernel32.CreateFileW
        self.create_file.restype = handle
        self.create_file.argtypes = (
            ctypes.c_wchar_p,
            ulong,
            ulong,
            pointer,
            ulong,
            ulong,
            handle,
        )
        self.close_handle = kernel32.CloseHandle
        self.close_handle.restype = ctypes.c_int
        self.close_handle.argtypes = (handle,)
        self.read_file = kernel32.ReadFile
        self.read_file.restype = ctypes.c_int
        self.read_file.argtypes = (
            handle,
            pointer,
            ulong,
            ctypes.POINTER(ulong),
            ctypes.POINTER(Overlapped),
        )
        self.write_file = kernel32.WriteFile
        self.write_file.restype = ctypes.c_int
        self.write_file.argtypes = self.read_file.argtypes
        self.flush_file_buffers = kernel32.FlushFileBuffers
        self.flush_file_buffers.restype = ctypes.c_int
        self.flush_file_buffers.argtypes = (handle,)


_Loaded = TypeVar("_Loaded")


def library(name: str, last_error: bool = False) -> Any:  # noqa: ANN401 - functions by name
    """The DLL ``name`` (``ctypes.WinDLL``), the one way this package loads one; with
    ``last_error`` its functions keep ``GetLastError`` for :func:`last_error`."""
    windll: Any = getattr(ctypes, "WinDLL")  # noqa: B009 - absent off Windows (mypy)
    return windll(name, use_last_error=last_error)


def loaded_once(load: Callable[[], _Loaded]) -> Callable[[], _Loaded]:
    """``load`` run at the first call only (under a lock), its result kept for the process;
    ``OSError`` off Windows, where the DLLs do not exist."""
    lock = threading.Lock()
    kept: list[_Loaded] = []

    def loaded() -> _Loaded:
        if sys.platform != "win32":
            raise OSError("the Windows API exists only on Windows")
        if not kept:
            with lock:
                if not kept:
                    kept.append(load())
        return kept[0]

    return loaded


def available() -> bool:
    """Whether this process can load the Windows API (it runs on Windows)."""
    return sys.platform == "win32"


api: Final = loaded_once(Api)
"""The loaded functions; ``OSError`` off Windows."""


def last_error() -> int:
    """``GetLastError`` of the last kernel32 call of this thread (0 off Windows)."""
    getter: Any = getattr(ctypes, "get_last_error", None)
    return int(getter()) if getter is not None else 0


def unsigned(status: int) -> int:
    """An ``NTSTATUS`` as the unsigned number the constants above use."""
    return status & 0xFFFFFFFF


Information = ctypes.Structure | ctypes.Array[ctypes.c_char] | ctypes.c_ulonglong | ctypes.c_ubyte
"""What an information call reads into or sets from: a structure, bytes or a number."""


def query_information(handle: int, into: Information, information_class: int) -> int:
    """``NtQueryInformationFile``: ``handle``'s information of ``information_class`` into the
    ctypes object ``into`` (its whole size); the unsigned ``NTSTATUS``."""
    call = api().nt_query_information_file
    size = ctypes.sizeof(into)
    return unsigned(
        call(handle, ctypes.byref(IoStatusBlock()), ctypes.byref(into), size, information_class)
    )


def set_information(handle: int, value: Information, information_class: int) -> int:
    """``NtSetInformationFile``: set ``handle``'s information of ``information_class`` from
    the ctypes object ``value`` (its whole size); the unsigned ``NTSTATUS``."""
    call = api().nt_set_information_file
    size = ctypes.sizeof(value)
    return unsigned(
        call(handle, ctypes.byref(IoStatusBlock()), ctypes.byref(value), size, information_class)
    )
