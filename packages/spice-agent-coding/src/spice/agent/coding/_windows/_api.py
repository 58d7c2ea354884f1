"""The Windows calls the launcher makes, through ``ctypes`` (standard library only).

Job Objects (``CreateJobObjectW``, ``SetInformationJobObject``,
``AssignProcessToJobObject``, ``TerminateJobObject``, ``QueryInformationJobObject``) and
``NtResumeProcess`` for the launcher; a file's owner and access list
(``GetSecurityInfo``), the user's SID (``GetTokenInformation``) and a file created with a
private access list (``CreateFileW``) for the files only their user may open
(``_mcp._private``). The libraries are loaded on first use, so this module imports on every
platform; on any other platform each call raises ``OSError``. Failures are ``OSError``
with the Windows error number only (no system text).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from ctypes import wintypes
from typing import Final, final

CREATE_SUSPENDED: Final = 0x00000004
CREATE_NEW_PROCESS_GROUP: Final = 0x00000200
CREATE_BREAKAWAY_FROM_JOB: Final = 0x01000000

JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: Final = 0x00002000
JOB_OBJECT_LIMIT_BREAKAWAY_OK: Final = 0x00000800
JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK: Final = 0x00001000
JOB_LIMITS: Final = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
"""The limits of every command's job: kill on close; neither breakaway flag."""

_BASIC_ACCOUNTING: Final = 1  # JobObjectBasicAccountingInformation
_EXTENDED_LIMITS: Final = 9  # JobObjectExtendedLimitInformation


class _BasicLimits(ctypes.Structure):
    _fields_ = (
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", wintypes.DWORD),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", wintypes.DWORD),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", wintypes.DWORD),
        ("SchedulingClass", wintypes.DWORD),
    )


class _IoCounters(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    )


class ExtendedLimits(ctypes.Structure):
    """``JOBOBJECT_EXTENDED_LIMIT_INFORMATION``."""

    _fields_ = (
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    )


class BasicAccounting(ctypes.Structure):
    """``JOBOBJECT_BASIC_ACCOUNTING_INFORMATION``."""

    _fields_ = (
        ("TotalUserTime", ctypes.c_int64),
        ("TotalKernelTime", ctypes.c_int64),
        ("ThisPeriodTotalUserTime", ctypes.c_int64),
        ("ThisPeriodTotalKernelTime", ctypes.c_int64),
        ("TotalPageFaultCount", wintypes.DWORD),
        ("TotalProcesses", wintypes.DWORD),
        ("ActiveProcesses", wintypes.DWORD),
        ("TotalTerminatedProcesses", wintypes.DWORD),
    )


_loaded: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def _libraries() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """``kernel32`` and ``ntdll``, loaded once; ``OSError`` where they do not exist."""
    with _lock:
        if not _loaded:
            if sys.platform != "win32":
                raise OSError("Windows only")
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
            ntdll = ctypes.WinDLL("ntdll")
            kernel32.CreateJobObjectW.restype = wintypes.HANDLE
            kernel32.CreateJobObjectW.argtypes = (ctypes.c_void_p, wintypes.LPCWSTR)
            kernel32.SetInformationJobObject.restype = wintypes.BOOL
            kernel32.SetInformationJobObject.argtypes = (
                wintypes.HANDLE,
                ctypes.c_int,
                ctypes.c_void_p,
                wintypes.DWORD,
            )
            kernel32.QueryInformationJobObject.restype = wintypes.BOOL
            kernel32.QueryInformationJobObject.argtypes = (
                wintypes.HANDLE,
                ctypes.c_int,
                ctypes.c_void_p,
                wintypes.DWORD,
                ctypes.POINTER(wintypes.DWORD),
            )
            kernel32.AssignProcessToJobObject.restype = wintypes.BOOL
            kernel32.AssignProcessToJobObject.argtypes = (wintypes.HANDLE, wintypes.HANDLE)
            kernel32.TerminateJobObject.restype = wintypes.BOOL
            kernel32.TerminateJobObject.argtypes = (wintypes.HANDLE, wintypes.UINT)
            kernel32.TerminateProcess.restype = wintypes.BOOL
            kernel32.TerminateProcess.argtypes = (wintypes.HANDLE, wintypes.UINT)
            kernel32.CloseHandle.restype = wintypes.BOOL
            kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
            ntdll.NtResumeProcess.restype = ctypes.c_long
            ntdll.NtResumeProcess.argtypes = (wintypes.HANDLE,)
            _loaded["kernel32"], _loaded["ntdll"] = kernel32, ntdll
        return _loaded["kernel32"], _loaded["ntdll"]


def _advapi32() -> ctypes.CDLL:
    """``advapi32``, loaded once beside the others (the security calls)."""
    kernel32 = _kernel32()
    if sys.platform != "win32":
        raise OSError("Windows only")
    with _lock:
        if "advapi32" not in _loaded:
            advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)
            pointer = ctypes.POINTER(ctypes.c_void_p)
            advapi32.GetSecurityInfo.restype = wintypes.DWORD
            advapi32.GetSecurityInfo.argtypes = (
                wintypes.HANDLE,
                ctypes.c_int,
                wintypes.DWORD,
                pointer,
                pointer,
                pointer,
                pointer,
                pointer,
            )
            advapi32.GetLengthSid.restype = wintypes.DWORD
            advapi32.GetLengthSid.argtypes = (ctypes.c_void_p,)
            advapi32.OpenProcessToken.restype = wintypes.BOOL
            advapi32.OpenProcessToken.argtypes = (
                wintypes.HANDLE,
                wintypes.DWORD,
                ctypes.POINTER(wintypes.HANDLE),
            )
            advapi32.GetTokenInformation.restype = wintypes.BOOL
            advapi32.GetTokenInformation.argtypes = (
                wintypes.HANDLE,
                ctypes.c_int,
                ctypes.c_void_p,
                wintypes.DWORD,
                ctypes.POINTER(wintypes.DWORD),
            )
            kernel32.GetCurrentProcess.restype = wintypes.HANDLE
            kernel32.GetCurrentProcess.argtypes = ()
            kernel32.LocalFree.restype = ctypes.c_void_p
            kernel32.LocalFree.argtypes = (ctypes.c_void_p,)
            kernel32.CreateFileW.restype = wintypes.HANDLE
            kernel32.CreateFileW.argtypes = (
                wintypes.LPCWSTR,
                wintypes.DWORD,
                wintypes.DWORD,
                ctypes.c_void_p,
                wintypes.DWORD,
                wintypes.DWORD,
                wintypes.HANDLE,
            )
            _loaded["advapi32"] = advapi32
        return _loaded["advapi32"]


def _failed() -> OSError:
    number = int(getattr(ctypes, "get_last_error", lambda: 0)())
    return OSError(number, "a Windows call failed")


def _kernel32() -> ctypes.CDLL:
    return _libraries()[0]


def resume(process: int) -> None:
    """``NtResumeProcess``: let a process created suspended run."""
    status = int(_libraries()[1].NtResumeProcess(process))
    if status < 0:
        raise OSError(status & 0xFFFFFFFF, "NtResumeProcess failed")


def terminate_process(process: int, code: int) -> None:
    """``TerminateProcess``."""
    if not _kernel32().TerminateProcess(process, code):
        raise _failed()


@final
class Job:
    """A Job Object handle with ``JOB_LIMITS``; closing it ends every process in it."""

    __slots__ = ("_handle",)

    def __init__(self, handle: int) -> None:
        self._handle: int | None = handle

    @classmethod
    def create(cls, limits: int = JOB_LIMITS) -> Job:
        """A new anonymous job with ``limits`` (``OSError`` when it cannot be made)."""
        kernel32 = _kernel32()
        handle = kernel32.CreateJobObjectW(None, None)
        if not handle:
            raise _failed()
        job = cls(int(handle))
        information = ExtendedLimits()
        information.BasicLimitInformation.LimitFlags = limits
        if not kernel32.SetInformationJobObject(
            handle, _EXTENDED_LIMITS, ctypes.byref(information), ctypes.sizeof(information)
        ):
            error = _failed()
            job.close()
            raise error
        return job

    def _open(self) -> int:
        if self._handle is None:
            raise OSError(6, "the job is closed")  # ERROR_INVALID_HANDLE
        return self._handle

    def assign(self, process: int) -> None:
        """``AssignProcessToJobObject``."""
        if not _kernel32().AssignProcessToJobObject(self._open(), process):
            raise _failed()

    def terminate(self, code: int) -> None:
        """``TerminateJobObject``: end every process in the job."""
        if not _kernel32().TerminateJobObject(self._open(), code):
            raise _failed()

    def limits(self) -> int:
        """The job's ``LimitFlags``."""
        information = ExtendedLimits()
        self._query(_EXTENDED_LIMITS, information)
        return int(information.BasicLimitInformation.LimitFlags)

    def active_processes(self) -> int:
        """How many processes the job holds now."""
        information = BasicAccounting()
        self._query(_BASIC_ACCOUNTING, information)
        return int(information.ActiveProcesses)

    def _query(self, kind: int, information: ctypes.Structure) -> None:
        if not _kernel32().QueryInformationJobObject(
            self._open(), kind, ctypes.byref(information), ctypes.sizeof(information), None
        ):
            raise _failed()

    @property
    def closed(self) -> bool:
        """Whether ``close`` ran."""
        return self._handle is None

    def close(self) -> None:
        """Close the handle (kill-on-close: what is left in the job ends). Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _kernel32().CloseHandle(handle)


_SE_FILE_OBJECT: Final = 1
_OWNER_SECURITY_INFORMATION: Final = 0x1
_DACL_SECURITY_INFORMATION: Final = 0x4
_TOKEN_QUERY: Final = 0x0008
_TOKEN_USER: Final = 1
_TOKEN_USER_BYTES: Final = 256
"""Room for ``TOKEN_USER``: a pointer and attributes, then a SID of at most 68 bytes."""
_GENERIC_READ: Final = 0x8000_0000
_GENERIC_WRITE: Final = 0x4000_0000
_FILE_SHARE_READ_WRITE: Final = 0x1 | 0x2
_CREATE_NEW: Final = 1
_FILE_ATTRIBUTE_NORMAL: Final = 0x80
_ERROR_FILE_EXISTS: Final = 80
_ERROR_ALREADY_EXISTS: Final = 183
_INVALID_HANDLE: Final = ctypes.c_void_p(-1).value


class _SecurityAttributes(ctypes.Structure):
    _fields_ = (
        ("nLength", wintypes.DWORD),
        ("lpSecurityDescriptor", ctypes.c_void_p),
        ("bInheritHandle", wintypes.BOOL),
    )


def _sid_at(address: int) -> bytes:
    return ctypes.string_at(address, int(_advapi32().GetLengthSid(address)))


def current_user_sid() -> bytes:
    """The bytes of the SID this process runs as (its token's user)."""
    advapi32, kernel32 = _advapi32(), _kernel32()
    token = wintypes.HANDLE()
    if not advapi32.OpenProcessToken(
        kernel32.GetCurrentProcess(), _TOKEN_QUERY, ctypes.byref(token)
    ):
        raise _failed()
    try:
        buffer = ctypes.create_string_buffer(_TOKEN_USER_BYTES)
        size = wintypes.DWORD()
        if not advapi32.GetTokenInformation(
            token, _TOKEN_USER, buffer, _TOKEN_USER_BYTES, ctypes.byref(size)
        ):
            raise _failed()
        address = ctypes.c_void_p.from_buffer(buffer).value  # TOKEN_USER.User.Sid
        if not address:
            raise OSError(1336, "the token names no user")  # ERROR_INVALID_SID
        return _sid_at(address)
    finally:
        kernel32.CloseHandle(token)


def file_security(handle: int) -> tuple[bytes | None, bytes | None]:
    """The owner SID's bytes and the DACL's bytes of an open file (``None`` where absent)."""
    owner, dacl, descriptor = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    status = _advapi32().GetSecurityInfo(
        handle,
        _SE_FILE_OBJECT,
        _OWNER_SECURITY_INFORMATION | _DACL_SECURITY_INFORMATION,
        ctypes.byref(owner),
        None,
        ctypes.byref(dacl),
        None,
        ctypes.byref(descriptor),
    )
    if status:
        raise OSError(int(status), "GetSecurityInfo failed")
    try:
        owned = _sid_at(owner.value) if owner.value else None
        listed = None
        if dacl.value:
            size = ctypes.c_ushort.from_address(dacl.value + 2).value  # ACL.AclSize
            listed = ctypes.string_at(dacl.value, size)
        return owned, listed
    finally:
        _kernel32().LocalFree(descriptor)


def create_private(path: str, descriptor: bytes) -> int:
    """``CreateFileW(CREATE_NEW)`` with ``descriptor`` (self-relative) as its security.

    The file exists only with that access list: nobody can open it in between. Returns the
    handle (read and write); ``FileExistsError`` when the name is taken.
    """
    buffer = ctypes.create_string_buffer(descriptor, len(descriptor))
    attributes = _SecurityAttributes()
    attributes.nLength = ctypes.sizeof(_SecurityAttributes)
    attributes.lpSecurityDescriptor = ctypes.addressof(buffer)
    attributes.bInheritHandle = 0
    handle = _kernel32().CreateFileW(
        path,
        _GENERIC_READ | _GENERIC_WRITE,
        _FILE_SHARE_READ_WRITE,
        ctypes.byref(attributes),
        _CREATE_NEW,
        _FILE_ATTRIBUTE_NORMAL,
        None,
    )
    if handle is None or handle == _INVALID_HANDLE:
        error = _failed()
        if error.errno in (_ERROR_FILE_EXISTS, _ERROR_ALREADY_EXISTS):
            raise FileExistsError(error.errno, "the file exists")
        raise error
    return int(handle)


def close_handle(handle: int) -> None:
    """``CloseHandle`` (a handle no descriptor took over)."""
    _kernel32().CloseHandle(handle)
