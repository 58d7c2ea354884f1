"""Helpers of the Windows tests: ask Windows itself whether a process still runs."""

from __future__ import annotations

import ctypes
import time
from typing import Final

GONE_BOUND_SECONDS: Final = 5.0
"""How long a process may take to go once its job was terminated or closed."""
SYNCHRONIZE: Final = 0x00100000
PROCESS_TERMINATE: Final = 0x0001
WAIT_OBJECT_0: Final = 0


def under_wine() -> bool:
    """Whether this Windows is Wine (its ntdll exports ``wine_get_version``)."""
    ntdll = ctypes.WinDLL("ntdll")  # type: ignore[attr-defined,unused-ignore]
    return hasattr(ntdll, "wine_get_version")


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (asked of Windows, not of our own records)."""
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    kernel32.OpenProcess.restype = ctypes.c_void_p
    handle = kernel32.OpenProcess(SYNCHRONIZE, 0, pid)
    if not handle:
        return False
    try:
        return int(kernel32.WaitForSingleObject(ctypes.c_void_p(handle), 0)) != WAIT_OBJECT_0
    finally:
        kernel32.CloseHandle(ctypes.c_void_p(handle))


def kill(pid: int) -> None:
    """End ``pid`` (a process that escaped a test's job must not outlive the test)."""
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    kernel32.OpenProcess.restype = ctypes.c_void_p
    handle = kernel32.OpenProcess(PROCESS_TERMINATE, 0, pid)
    if handle:
        kernel32.TerminateProcess(ctypes.c_void_p(handle), 1)
        kernel32.CloseHandle(ctypes.c_void_p(handle))


def gone(pid: int) -> bool:
    """Whether ``pid`` ends within ``GONE_BOUND_SECONDS`` (polled; Windows is asked)."""
    deadline = time.monotonic() + GONE_BOUND_SECONDS
    while running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
