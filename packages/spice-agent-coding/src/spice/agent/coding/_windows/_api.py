"""The Windows calls the launcher makes, through ``ctypes`` (standard library only).

Job Objects (``CreateJobObjectW``, ``SetInformationJobObject``,
``AssignProcessToJobObject``, ``TerminateJobObject``, ``QueryInformationJobObject``) and
``NtResumeProcess``. The libraries are loaded on first use, so this module imports on every
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
