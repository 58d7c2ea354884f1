"""Helpers of the Windows tests: skip reasons, links and junctions that must really exist,
a second Windows process that holds a file with share mode 0, and the handle count."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

IS_WINDOWS = sys.platform == "win32"
NOT_WINDOWS = "needs Windows (CPython on Windows, or under Wine: make test-windows)"
UNDER_WINE = False
if IS_WINDOWS:
    try:
        _ntdll: Any = getattr(ctypes, "WinDLL")("ntdll")  # noqa: B009 - Windows only
        UNDER_WINE = hasattr(_ntdll, "wine_get_version")
    except OSError:
        UNDER_WINE = False
WINE_NO_LINKS = (
    "Wine cannot make symbolic links or junctions (CreateSymbolicLinkW reports success and "
    "makes nothing; FSCTL_SET_REPARSE_POINT is unsupported): the windows-latest workflow runs it"
)
WINE_SYNTHETIC_ACLS = (
    "Wine derives a file's DACL from its Unix mode bits (owner, everyone, SYSTEM) and keeps "
    "no explicit or protected ACL: the windows-latest workflow runs it"
)
WINE_NO_POSIX_RENAME = "Wine has no FileRenameInformationEx (POSIX rename): only the fallback runs"

windows_only = pytest.mark.skipif(not IS_WINDOWS, reason=NOT_WINDOWS)

IO_REPARSE_TAG_MOUNT_POINT = 0xA0000003
IO_REPARSE_TAG_SYMLINK = 0xA000000C


def make_symlink(link: Path, target: Path | str, *, directory: bool = False) -> None:
    """Make a symbolic link and assert it exists as one; skip where it cannot be made."""
    try:
        os.symlink(target, link, target_is_directory=directory)
    except OSError:
        pytest.skip("this account may not create symbolic links (no Developer Mode)")
    if not link.is_symlink():
        pytest.skip(WINE_NO_LINKS)
    assert os.lstat(link).st_reparse_tag == IO_REPARSE_TAG_SYMLINK  # type: ignore[attr-defined,unused-ignore]


def make_junction(link: Path, target: Path) -> None:
    """Make a directory junction (``mklink /J``) and assert it exists as one; skip where it
    cannot be made."""
    completed = subprocess.run(
        ["cmd.exe", "/c", "mklink", "/J", str(link), str(target)],
        capture_output=True,
        check=False,
    )
    if completed.returncode != 0 or not os.path.lexists(link):
        pytest.skip(WINE_NO_LINKS)
    tag = os.lstat(link).st_reparse_tag  # type: ignore[attr-defined,unused-ignore]
    if tag != IO_REPARSE_TAG_MOUNT_POINT:
        pytest.skip(WINE_NO_LINKS)


HOLDER_SOURCE = r"""
import ctypes, sys
k = ctypes.WinDLL("kernel32", use_last_error=True)
k.CreateFileW.restype = ctypes.c_void_p
k.CreateFileW.argtypes = (ctypes.c_wchar_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p,
                          ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p)
k.WriteFile.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p)
k.SetEndOfFile.argtypes = (ctypes.c_void_p,)
access = int(sys.argv[3])  # GENERIC_READ, or GENERIC_READ | GENERIC_WRITE
h = k.CreateFileW(sys.argv[1], access, int(sys.argv[2]), None, 3, 0, None)
if h in (None, ctypes.c_void_p(-1).value):
    print("failed", ctypes.get_last_error(), flush=True)
    sys.exit(1)
print("held", flush=True)
line = sys.stdin.readline().strip()  # release when the test writes a line (or closes the pipe)
if line:  # the holder's own write through its handle, before it lets go
    data, done = bytes.fromhex(line), ctypes.c_ulong(0)
    assert k.WriteFile(h, data, len(data), ctypes.byref(done), None) and done.value == len(data)
    assert k.SetEndOfFile(h)
"""
GENERIC_READ = 0x80000000
GENERIC_WRITE = 0x40000000


class Holder:
    """A second Windows process holding ``path`` open (share mode 0 unless ``share``) until
    released."""

    def __init__(self, path: Path, share: int = 0, writable: bool = False) -> None:
        access = GENERIC_READ | (GENERIC_WRITE if writable else 0)
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER_SOURCE, str(path), str(share), str(access)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == b"held", line

    def release(self, write: bytes = b"") -> None:
        """Let the process close the file and exit; wait for it. With ``write`` (a holder
        made ``writable``) it first writes those bytes over the file through its handle,
        so nobody else can come between its write and its release."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write(write.hex().encode() + b"\n")
            self.process.stdin.close()
            self.process.wait(timeout=60)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def handle_count() -> int:
    """Handles this process holds (``GetProcessHandleCount``)."""
    kernel32: Any = getattr(ctypes, "WinDLL")("kernel32")  # noqa: B009 - Windows only
    count = ctypes.c_ulong(0)
    assert kernel32.GetProcessHandleCount(ctypes.c_void_p(-1), ctypes.byref(count))
    return count.value


def nobody_holds(path: Path) -> bool:
    """Whether ``path`` (file or directory) can be opened with share mode 0 right now: no
    handle to it is open anywhere (in this process or another)."""
    kernel32: Any = getattr(ctypes, "WinDLL")("kernel32", use_last_error=True)  # noqa: B009
    kernel32.CreateFileW.restype = ctypes.c_void_p
    kernel32.CreateFileW.argtypes = (
        ctypes.c_wchar_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_void_p,
    )
    kernel32.CloseHandle.argtypes = (ctypes.c_void_p,)
    # FILE_READ_ATTRIBUTES would not conflict with share mode 0; GENERIC_READ does.
    handle = kernel32.CreateFileW(str(path), 0x80000000, 0, None, 3, 0x02000000, None)
    if handle in (None, ctypes.c_void_p(-1).value):
        return False
    kernel32.CloseHandle(handle)
    return True


def settle_handles() -> None:
    """Give the runtime a moment to close what it closes lazily (thread pools)."""
    time.sleep(0.05)


DACL_SECURITY_INFORMATION = 0x4
PROTECTED_DACL_SECURITY_INFORMATION = 0x80000000


def _advapi32() -> Any:  # noqa: ANN401 - a ctypes DLL: its functions are untyped
    return getattr(ctypes, "WinDLL")("advapi32", use_last_error=True)  # noqa: B009


def set_dacl(path: Path, sddl: str) -> None:
    """Give ``path`` the DACL of an SDDL string (``D:P(...)`` is protected)."""
    advapi32 = _advapi32()
    descriptor = ctypes.c_void_p()
    assert advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW(
        ctypes.c_wchar_p(sddl), 1, ctypes.byref(descriptor), None
    )
    what = DACL_SECURITY_INFORMATION
    if sddl.startswith("D:P"):
        what |= PROTECTED_DACL_SECURITY_INFORMATION
    assert advapi32.SetFileSecurityW(ctypes.c_wchar_p(str(path)), what, descriptor)
    getattr(ctypes, "WinDLL")("kernel32").LocalFree(descriptor)  # noqa: B009


def dacl_sddl(path: Path) -> str:
    """The DACL of ``path`` as an SDDL string (``D:...``)."""
    advapi32 = _advapi32()
    needed = ctypes.c_ulong(0)
    advapi32.GetFileSecurityW(
        ctypes.c_wchar_p(str(path)), DACL_SECURITY_INFORMATION, None, 0, ctypes.byref(needed)
    )
    buffer = ctypes.create_string_buffer(max(needed.value, 1))
    assert advapi32.GetFileSecurityW(
        ctypes.c_wchar_p(str(path)),
        DACL_SECURITY_INFORMATION,
        buffer,
        needed,
        ctypes.byref(needed),
    )
    text = ctypes.c_wchar_p()
    assert advapi32.ConvertSecurityDescriptorToStringSecurityDescriptorW(
        buffer, 1, DACL_SECURITY_INFORMATION, ctypes.byref(text), None
    )
    value = str(text.value)
    getattr(ctypes, "WinDLL")("kernel32").LocalFree(text)  # noqa: B009
    return value
