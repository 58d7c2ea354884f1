"""Fidelity probes: the Windows primitives a Windows port of the coding tools would use.

Runs under Windows Python, on real Windows or under Wine, stdlib only (ctypes). Each
probe prints one line ``PROBE <id> | <observed> | <expected on real Windows>`` and the
run ends with a JSON list (``--json FILE``). ``expected`` is what the Windows
documentation (or a well-known behaviour) says; ``?`` where that is not certain. Run the
same script on windows-latest in CI and diff the observed columns: that diff is Wine's
fidelity, measured instead of assumed.

Optional fixture (Wine only): ``SPICE_PROBE_FIXTURE`` names a directory that the shell
side prepared with Unix symlinks (see run-probes.sh): ``root/file.txt``,
``root/link_in -> file.txt``, ``root/link_out -> <outside>/secret.txt``,
``root/dirlink_out -> <outside>``.

usage: python probes.py [--json FILE] [--only ID[,ID...]]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.wintypes as w
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

if sys.platform != "win32":
    sys.exit("probes.py runs under Windows Python (real Windows or Wine)")

k32 = ctypes.WinDLL("kernel32", use_last_error=True)
ntdll = ctypes.WinDLL("ntdll")

HANDLE = w.HANDLE
INVALID = HANDLE(-1).value
GENERIC_READ, GENERIC_WRITE = 0x80000000, 0x40000000
DELETE, SYNCHRONIZE, FILE_READ_ATTRIBUTES = 0x10000, 0x100000, 0x80
FILE_LIST_DIRECTORY, FILE_TRAVERSE = 0x1, 0x20
SHARE_ALL = 1 | 2 | 4
OPEN_EXISTING, CREATE_ALWAYS, CREATE_NEW = 3, 2, 1
FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT = 0x02000000, 0x00200000
FILE_ATTRIBUTE_REPARSE_POINT, FILE_ATTRIBUTE_DIRECTORY = 0x400, 0x10
IO_REPARSE_TAG_SYMLINK, IO_REPARSE_TAG_MOUNT_POINT = 0xA000000C, 0xA0000003
ERROR_NAMES = {
    0: "OK",
    2: "FILE_NOT_FOUND",
    3: "PATH_NOT_FOUND",
    5: "ACCESS_DENIED",
    6: "INVALID_HANDLE",
    32: "SHARING_VIOLATION",
    33: "LOCK_VIOLATION",
    50: "NOT_SUPPORTED",
    80: "FILE_EXISTS",
    87: "INVALID_PARAMETER",
    120: "CALL_NOT_IMPLEMENTED",
    123: "INVALID_NAME",
    145: "DIR_NOT_EMPTY",
    183: "ALREADY_EXISTS",
    1314: "PRIVILEGE_NOT_HELD",
    1176: "UNABLE_TO_MOVE_REPLACEMENT",
    1177: "UNABLE_TO_MOVE_REPLACEMENT_2",
    1175: "UNABLE_TO_REMOVE_REPLACED",
    4390: "NOT_A_REPARSE_POINT",
    1: "INVALID_FUNCTION",
    267: "DIRECTORY",
    1920: "CANT_ACCESS_FILE",
    4393: "REPARSE_TAG_INVALID",
    1005: "UNRECOGNIZED_VOLUME",
    31: "GEN_FAILURE",
}
NT_NAMES = {
    0: "SUCCESS",
    0xC0000033: "OBJECT_NAME_INVALID",
    0xC0000034: "OBJECT_NAME_NOT_FOUND",
    0xC000003A: "OBJECT_PATH_NOT_FOUND",
    0xC000003B: "OBJECT_PATH_SYNTAX_BAD",
    0xC000050B: "REPARSE_POINT_ENCOUNTERED",
    0xC0000103: "NOT_A_DIRECTORY",
    0xC00000BA: "FILE_IS_A_DIRECTORY",
    0xC0000043: "SHARING_VIOLATION",
    0xC0000022: "ACCESS_DENIED",
    0xC000000D: "INVALID_PARAMETER",
    0xC0000002: "NOT_IMPLEMENTED",
    0xC0000035: "OBJECT_NAME_COLLISION",
    0xC00000BB: "NOT_SUPPORTED",
    0x104: "REPARSE",
    0xC0000024: "OBJECT_TYPE_MISMATCH",
    0xC0000275: "NOT_A_REPARSE_POINT",
    0xC0000056: "DELETE_PENDING",
    0xC0000101: "DIRECTORY_NOT_EMPTY",
}


def err(code: int | None = None) -> str:
    code = ctypes.get_last_error() if code is None else code
    return f"{ERROR_NAMES.get(code, '?')}({code})"


def nt(status: int) -> str:
    status &= 0xFFFFFFFF
    return f"STATUS_{NT_NAMES.get(status, hex(status))}"


def proto(dll: ctypes.CDLL, name: str, res: object, *args: object) -> object:
    f = getattr(dll, name)
    f.restype, f.argtypes = res, list(args)
    return f


CreateFileW = proto(
    k32, "CreateFileW", HANDLE, w.LPCWSTR, w.DWORD, w.DWORD, w.LPVOID, w.DWORD, w.DWORD, HANDLE
)
CloseHandle = proto(k32, "CloseHandle", w.BOOL, HANDLE)
GetFileAttributesW = proto(k32, "GetFileAttributesW", w.DWORD, w.LPCWSTR)
GetFinalPathNameByHandleW = proto(
    k32, "GetFinalPathNameByHandleW", w.DWORD, HANDLE, w.LPWSTR, w.DWORD, w.DWORD
)
GetFileInformationByHandleEx = proto(
    k32, "GetFileInformationByHandleEx", w.BOOL, HANDLE, ctypes.c_int, w.LPVOID, w.DWORD
)
SetFileInformationByHandle = proto(
    k32, "SetFileInformationByHandle", w.BOOL, HANDLE, ctypes.c_int, w.LPVOID, w.DWORD
)
ReplaceFileW = proto(
    k32, "ReplaceFileW", w.BOOL, w.LPCWSTR, w.LPCWSTR, w.LPCWSTR, w.DWORD, w.LPVOID, w.LPVOID
)
MoveFileExW = proto(k32, "MoveFileExW", w.BOOL, w.LPCWSTR, w.LPCWSTR, w.DWORD)
FlushFileBuffers = proto(k32, "FlushFileBuffers", w.BOOL, HANDLE)
WriteFile = proto(k32, "WriteFile", w.BOOL, HANDLE, w.LPCVOID, w.DWORD, w.LPDWORD, w.LPVOID)
ReadFile = proto(k32, "ReadFile", w.BOOL, HANDLE, w.LPVOID, w.DWORD, w.LPDWORD, w.LPVOID)
CreateSymbolicLinkW = proto(k32, "CreateSymbolicLinkW", w.BOOLEAN, w.LPCWSTR, w.LPCWSTR, w.DWORD)
DeviceIoControl = proto(
    k32,
    "DeviceIoControl",
    w.BOOL,
    HANDLE,
    w.DWORD,
    w.LPVOID,
    w.DWORD,
    w.LPVOID,
    w.DWORD,
    w.LPDWORD,
    w.LPVOID,
)
LockFileEx = proto(k32, "LockFileEx", w.BOOL, HANDLE, w.DWORD, w.DWORD, w.DWORD, w.DWORD, w.LPVOID)
GetShortPathNameW = proto(k32, "GetShortPathNameW", w.DWORD, w.LPCWSTR, w.LPWSTR, w.DWORD)
CreateJobObjectW = proto(k32, "CreateJobObjectW", HANDLE, w.LPVOID, w.LPCWSTR)
SetInformationJobObject = proto(
    k32, "SetInformationJobObject", w.BOOL, HANDLE, ctypes.c_int, w.LPVOID, w.DWORD
)
QueryInformationJobObject = proto(
    k32, "QueryInformationJobObject", w.BOOL, HANDLE, ctypes.c_int, w.LPVOID, w.DWORD, w.LPDWORD
)
AssignProcessToJobObject = proto(k32, "AssignProcessToJobObject", w.BOOL, HANDLE, HANDLE)
TerminateJobObject = proto(k32, "TerminateJobObject", w.BOOL, HANDLE, w.UINT)
IsProcessInJob = proto(k32, "IsProcessInJob", w.BOOL, HANDLE, HANDLE, ctypes.POINTER(w.BOOL))
OpenProcess = proto(k32, "OpenProcess", HANDLE, w.DWORD, w.BOOL, w.DWORD)
WaitForSingleObject = proto(k32, "WaitForSingleObject", w.DWORD, HANDLE, w.DWORD)
GetExitCodeProcess = proto(k32, "GetExitCodeProcess", w.BOOL, HANDLE, w.LPDWORD)
TerminateProcess = proto(k32, "TerminateProcess", w.BOOL, HANDLE, w.UINT)
CreateIoCompletionPort = proto(
    k32, "CreateIoCompletionPort", HANDLE, HANDLE, HANDLE, ctypes.c_size_t, w.DWORD
)
GetQueuedCompletionStatus = proto(
    k32,
    "GetQueuedCompletionStatus",
    w.BOOL,
    HANDLE,
    w.LPDWORD,
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_void_p),
    w.DWORD,
)
GetCurrentProcess = proto(k32, "GetCurrentProcess", HANDLE)
NtResumeProcess = proto(ntdll, "NtResumeProcess", ctypes.c_long, HANDLE)
NtSuspendProcess = proto(ntdll, "NtSuspendProcess", ctypes.c_long, HANDLE)


class UNICODE_STRING(ctypes.Structure):
    _fields_ = [("Length", w.USHORT), ("MaximumLength", w.USHORT), ("Buffer", w.LPWSTR)]


class OBJECT_ATTRIBUTES(ctypes.Structure):
    _fields_ = [
        ("Length", w.ULONG),
        ("RootDirectory", HANDLE),
        ("ObjectName", ctypes.POINTER(UNICODE_STRING)),
        ("Attributes", w.ULONG),
        ("SecurityDescriptor", w.LPVOID),
        ("SecurityQualityOfService", w.LPVOID),
    ]


class IO_STATUS_BLOCK(ctypes.Structure):
    _fields_ = [("Status", ctypes.c_void_p), ("Information", ctypes.c_size_t)]


NtSetInformationFile = None  # bound below, after IO_STATUS_BLOCK
NtCreateFile = proto(
    ntdll,
    "NtCreateFile",
    ctypes.c_long,
    ctypes.POINTER(HANDLE),
    w.DWORD,
    ctypes.POINTER(OBJECT_ATTRIBUTES),
    ctypes.POINTER(IO_STATUS_BLOCK),
    w.LPVOID,
    w.ULONG,
    w.ULONG,
    w.ULONG,
    w.ULONG,
    w.LPVOID,
    w.ULONG,
)
NtSetInformationFile = proto(
    ntdll,
    "NtSetInformationFile",
    ctypes.c_long,
    HANDLE,
    ctypes.POINTER(IO_STATUS_BLOCK),
    ctypes.c_void_p,
    w.ULONG,
    ctypes.c_int,
)
FILE_OPEN, FILE_CREATE = 1, 2
FILE_DIRECTORY_FILE, FILE_NON_DIRECTORY_FILE = 0x1, 0x40
FILE_SYNCHRONOUS_IO_NONALERT, FILE_OPEN_REPARSE_POINT = 0x20, 0x00200000
OBJ_CASE_INSENSITIVE, OBJ_DONT_REPARSE = 0x40, 0x1000


def nt_open(
    root: int | None,
    name: str,
    access: int = GENERIC_READ | SYNCHRONIZE,
    options: int = FILE_SYNCHRONOUS_IO_NONALERT,
    attributes: int = OBJ_CASE_INSENSITIVE,
    disposition: int = FILE_OPEN,
) -> tuple[int, int]:
    """NtCreateFile relative to ``root`` (an open directory handle). Returns (status, handle)."""
    us = UNICODE_STRING(len(name) * 2, len(name) * 2 + 2, name)
    oa = OBJECT_ATTRIBUTES(
        ctypes.sizeof(OBJECT_ATTRIBUTES), root, ctypes.pointer(us), attributes, None, None
    )
    iosb, h = IO_STATUS_BLOCK(), HANDLE()
    status = NtCreateFile(
        ctypes.byref(h),
        access,
        ctypes.byref(oa),
        ctypes.byref(iosb),
        None,
        0x80,
        SHARE_ALL,
        disposition,
        options,
        None,
        0,
    )
    return status & 0xFFFFFFFF, h.value or 0


def open_path(
    path: str,
    access: int = GENERIC_READ,
    flags: int = 0,
    share: int = SHARE_ALL,
    disposition: int = OPEN_EXISTING,
) -> int:
    return CreateFileW(path, access, share, None, disposition, flags, None)


def open_dir(path: str, access: int = GENERIC_READ, extra: int = 0) -> int:
    return open_path(path, access, FILE_FLAG_BACKUP_SEMANTICS | extra)


def final_path(h: int, flags: int = 0) -> str:
    buf = ctypes.create_unicode_buffer(1024)
    n = GetFinalPathNameByHandleW(h, buf, 1024, flags)
    return buf.value if n else f"<fail {err()}>"


class FILE_ATTRIBUTE_TAG_INFO(ctypes.Structure):
    _fields_ = [("FileAttributes", w.DWORD), ("ReparseTag", w.DWORD)]


class FILE_ID_INFO(ctypes.Structure):
    _fields_ = [("VolumeSerialNumber", ctypes.c_ulonglong), ("FileId", ctypes.c_ubyte * 16)]


class FILE_STANDARD_INFO(ctypes.Structure):
    _fields_ = [
        ("AllocationSize", ctypes.c_longlong),
        ("EndOfFile", ctypes.c_longlong),
        ("NumberOfLinks", w.DWORD),
        ("DeletePending", w.BOOLEAN),
        ("Directory", w.BOOLEAN),
    ]


def tag_info(h: int) -> str:
    info = FILE_ATTRIBUTE_TAG_INFO()
    if not GetFileInformationByHandleEx(h, 9, ctypes.byref(info), ctypes.sizeof(info)):
        return f"<fail {err()}>"
    rp = "reparse" if info.FileAttributes & FILE_ATTRIBUTE_REPARSE_POINT else "plain"
    return f"{rp} tag={info.ReparseTag:#x}"


def write_all(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def read_all(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def rename_info(new_name: str, flags: int, root: int = 0) -> ctypes.Array[ctypes.c_char]:
    """FILE_RENAME_INFO(_EX): union{BOOLEAN/DWORD flags}; HANDLE root; DWORD len; WCHAR[]."""
    encoded = new_name.encode("utf-16-le")
    size = 20 + len(encoded) + 2
    buf = ctypes.create_string_buffer(size)
    ctypes.memmove(ctypes.addressof(buf), ctypes.byref(w.DWORD(flags)), 4)
    ctypes.memmove(ctypes.addressof(buf) + 8, ctypes.byref(ctypes.c_void_p(root)), 8)
    ctypes.memmove(ctypes.addressof(buf) + 16, ctypes.byref(w.DWORD(len(encoded))), 4)
    ctypes.memmove(ctypes.addressof(buf) + 20, encoded, len(encoded))
    return buf


CHILD = [sys.executable, "-c"]
RESULTS: list[dict[str, str]] = []


def record(pid: str, observed: str, expected: str, area: str) -> None:
    RESULTS.append({"id": pid, "area": area, "observed": observed, "expected": expected})
    print(f"PROBE {pid} | {observed} | {expected}", flush=True)


def kill_pid(pid: int) -> None:
    h = OpenProcess(0x1, False, pid) if pid else 0  # PROCESS_TERMINATE
    if h:
        TerminateProcess(h, 1)
        CloseHandle(h)


def alive(pid: int, wait_ms: int = 0) -> bool:
    h = OpenProcess(SYNCHRONIZE | 0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not h:
        return False
    try:
        return WaitForSingleObject(h, wait_ms) != 0  # WAIT_OBJECT_0: it has exited
    finally:
        CloseHandle(h)


# ------------------------------------------------------------------ file system probes


def probe_nt_relative(base: str) -> None:
    root = os.path.join(base, "root")
    os.makedirs(os.path.join(root, "sub"))
    write_all(os.path.join(root, "sub", "f.txt"), b"inside")
    write_all(os.path.join(base, "outside.txt"), b"outside")
    hroot = open_dir(root)
    try:
        st, h = nt_open(hroot, "sub\\f.txt")
        got = read_handle(h) if h else b""
        record("nt.relative_open", f"{nt(st)} read={got!r}", "STATUS_SUCCESS read=b'inside'", "fs")
        if h:
            CloseHandle(h)
        st, h = nt_open(hroot, "..\\outside.txt")
        record(
            "nt.relative_dotdot",
            f"{nt(st)}",
            "STATUS_OBJECT_NAME_INVALID (NT never resolves '..')",
            "fs",
        )
        if h:
            CloseHandle(h)
        st, h = nt_open(hroot, "sub\\..\\sub\\f.txt")
        record("nt.relative_inner_dotdot", f"{nt(st)}", "STATUS_OBJECT_NAME_INVALID", "fs")
        if h:
            CloseHandle(h)
        st, h = nt_open(hroot, "\\outside.txt")
        record(
            "nt.relative_leading_backslash",
            f"{nt(st)}",
            "STATUS_INVALID_PARAMETER or OBJECT_NAME_INVALID (absolute name with a root handle)",
            "fs",
        )
        if h:
            CloseHandle(h)
        st, h = nt_open(hroot, "SUB\\F.TXT")
        record(
            "nt.relative_case_insensitive",
            f"{nt(st)}",
            "STATUS_SUCCESS (OBJ_CASE_INSENSITIVE)",
            "fs",
        )
        if h:
            CloseHandle(h)
        st, h = nt_open(hroot, "sub\\f.txt.")
        record(
            "nt.relative_trailing_dot",
            f"{nt(st)}",
            "STATUS_OBJECT_NAME_NOT_FOUND (NT keeps the dot; Win32 strips it)",
            "fs",
        )
        if h:
            CloseHandle(h)
        st, h = nt_open(
            hroot, "sub", options=FILE_SYNCHRONOUS_IO_NONALERT | FILE_NON_DIRECTORY_FILE
        )
        record("nt.non_directory_on_dir", f"{nt(st)}", "STATUS_FILE_IS_A_DIRECTORY", "fs")
        if h:
            CloseHandle(h)
        st, h = nt_open(
            hroot, "sub\\f.txt", options=FILE_SYNCHRONOUS_IO_NONALERT | FILE_DIRECTORY_FILE
        )
        record("nt.directory_on_file", f"{nt(st)}", "STATUS_NOT_A_DIRECTORY", "fs")
        if h:
            CloseHandle(h)
        st, h = nt_open(
            hroot, "new.txt", access=GENERIC_WRITE | SYNCHRONIZE, disposition=FILE_CREATE
        )
        if h:
            CloseHandle(h)
        st2, h2 = nt_open(
            hroot, "new.txt", access=GENERIC_WRITE | SYNCHRONIZE, disposition=FILE_CREATE
        )
        if h2:
            CloseHandle(h2)
        record(
            "nt.relative_create_excl",
            f"{nt(st)} then {nt(st2)}",
            "STATUS_SUCCESS then STATUS_OBJECT_NAME_COLLISION",
            "fs",
        )
        # The root directory is renamed while its handle is open: the handle must keep
        # naming the same directory (the whole point of handle-relative opens).
        moved = root + "-moved"
        renamed = MoveFileExW(root, moved, 0)
        rename_err = "" if renamed else err()
        st, h = nt_open(hroot, "sub\\f.txt")
        record(
            "nt.root_handle_survives_rename",
            f"rename={'ok' if renamed else rename_err} open={nt(st)}",
            "rename=ok (the handle shares delete) open=STATUS_SUCCESS",
            "fs",
        )
        if h:
            CloseHandle(h)
        # Renaming a directory while a file inside it is open (shared fully).
        inner = open_path(os.path.join(moved, "sub", "f.txt"))
        back = MoveFileExW(moved, root, 0)
        record(
            "nt.rename_dir_with_open_child",
            "ok" if back else err(),
            "? ACCESS_DENIED on NTFS (an open file pins its directory's name)",
            "fs",
        )
        CloseHandle(inner)
    finally:
        CloseHandle(hroot)


def read_handle(h: int, n: int = 4096) -> bytes:
    buf = ctypes.create_string_buffer(n)
    got = w.DWORD()
    if not ReadFile(h, buf, n, ctypes.byref(got), None):
        return f"<fail {err()}>".encode()
    return buf.raw[: got.value]


def probe_symlinks(base: str) -> None:
    d = os.path.join(base, "links")
    os.makedirs(os.path.join(d, "targetdir"))
    write_all(os.path.join(d, "target.txt"), b"t")
    link = os.path.join(d, "flink")
    ok = CreateSymbolicLinkW(link, "target.txt", 0x2)  # ALLOW_UNPRIVILEGED_CREATE
    e = err() if not ok else "ok"
    detail = e
    if ok:
        attrs = GetFileAttributesW(link)
        h = open_path(link, FILE_READ_ATTRIBUTES, FILE_FLAG_OPEN_REPARSE_POINT)
        detail = (
            f"ok exists={attrs != 0xFFFFFFFF} "
            f"attrs_reparse={attrs != 0xFFFFFFFF and bool(attrs & FILE_ATTRIBUTE_REPARSE_POINT)} "
            f"open_reparse={tag_info(h) if h != INVALID else err()} "
            f"islink={os.path.islink(link)} readlink={safe(lambda: os.readlink(link))}"
        )
        if h != INVALID:
            CloseHandle(h)
    record(
        "symlink.create_file",
        detail,
        "ok (Developer Mode or admin; else PRIVILEGE_NOT_HELD) exists=True attrs_reparse=True "
        f"tag={IO_REPARSE_TAG_SYMLINK:#x}",
        "links",
    )
    dlink = os.path.join(d, "dlink")
    ok = CreateSymbolicLinkW(dlink, "targetdir", 0x3)
    detail = "ok" if ok else err()
    if ok:
        h = open_dir(dlink, FILE_READ_ATTRIBUTES, FILE_FLAG_OPEN_REPARSE_POINT)
        detail += (
            f" exists={os.path.lexists(dlink)} {tag_info(h) if h != INVALID else err()} "
            f"isdir={os.path.isdir(dlink)}"
        )
        if h != INVALID:
            CloseHandle(h)
    record(
        "symlink.create_dir", detail, "ok exists=True reparse tag=0xa000000c isdir=True", "links"
    )
    # Junction: FSCTL_SET_REPARSE_POINT with IO_REPARSE_TAG_MOUNT_POINT on an empty dir.
    j = os.path.join(d, "junction")
    os.mkdir(j)
    target = "\\??\\" + os.path.join(d, "targetdir")
    printable = os.path.join(d, "targetdir")
    sub = target.encode("utf-16-le") + b"\0\0"
    prn = printable.encode("utf-16-le") + b"\0\0"
    data = (
        ctypes.c_uint16(0).value.to_bytes(2, "little")  # SubstituteNameOffset
        + (len(sub) - 2).to_bytes(2, "little")
        + len(sub).to_bytes(2, "little")
        + (len(prn) - 2).to_bytes(2, "little")
        + sub
        + prn
    )
    header = IO_REPARSE_TAG_MOUNT_POINT.to_bytes(4, "little") + len(data).to_bytes(2, "little")
    blob = header + b"\0\0" + data
    h = open_dir(j, GENERIC_WRITE, FILE_FLAG_OPEN_REPARSE_POINT)
    got = w.DWORD()
    ok = DeviceIoControl(h, 0x900A4, blob, len(blob), None, 0, ctypes.byref(got), None)
    e = "ok" if ok else err()
    CloseHandle(h)
    detail = e
    if ok:
        h = open_dir(j, FILE_READ_ATTRIBUTES, FILE_FLAG_OPEN_REPARSE_POINT)
        detail += f" {tag_info(h)} isjunction={safe(lambda: os.path.isjunction(j))}"
        CloseHandle(h)
        write_all(os.path.join(d, "targetdir", "x"), b"x")
        detail += f" listed={safe(lambda: os.listdir(j))}"
    record(
        "junction.create", detail, "ok reparse tag=0xa0000003 isjunction=True listed=['x']", "links"
    )
    # A symlink the way Go's Symlinkat makes one: create, then FSCTL_SET_REPARSE_POINT.
    f = os.path.join(d, "fsctl-link")
    h = open_path(f, GENERIC_WRITE | DELETE, FILE_FLAG_OPEN_REPARSE_POINT, 0, CREATE_NEW)
    name = "target.txt".encode("utf-16-le")
    body = (
        b"\0\0"
        + len(name).to_bytes(2, "little")
        + b"\0\0"
        + len(name).to_bytes(2, "little")
        + (1).to_bytes(4, "little")
        + name
    )  # offsets/lengths, SYMLINK_FLAG_RELATIVE
    blob = (
        IO_REPARSE_TAG_SYMLINK.to_bytes(4, "little")
        + len(body).to_bytes(2, "little")
        + b"\0\0"
        + body
    )
    ok = DeviceIoControl(h, 0x900A4, blob, len(blob), None, 0, ctypes.byref(w.DWORD()), None)
    e = "ok" if ok else err()
    CloseHandle(h)
    record(
        "symlink.fsctl_set_reparse_point",
        f"{e} islink={os.path.islink(f)} reads={safe(lambda: read_all(f))}",
        "ok islink=True reads=b't' (privilege as above)",
        "links",
    )
    # os.symlink (what CPython uses) and os.lstat's view of it.
    s = os.path.join(d, "pylink")
    detail = safe(lambda: os.symlink("target.txt", s)) + f" exists={os.path.lexists(s)}"
    if os.path.lexists(s):
        st = os.lstat(s)
        detail = (
            f"created lstat.reparse_tag={getattr(st, 'st_reparse_tag', 0):#x} "
            f"attrs={getattr(st, 'st_file_attributes', 0):#x}"
        )
    record(
        "symlink.os_symlink",
        detail,
        "created lstat.reparse_tag=0xa000000c (privilege as above; else OSError 1314)",
        "links",
    )


def probe_unix_links() -> None:
    fixture = os.environ.get("SPICE_PROBE_FIXTURE")
    if not fixture:
        record(
            "unixlink.*",
            "skipped (no SPICE_PROBE_FIXTURE: real Windows has no Unix links)",
            "n/a",
            "links",
        )
        return
    root = os.path.join(fixture, "root")
    for name in ("link_in", "link_out", "dirlink_out"):
        p = os.path.join(root, name)
        attrs = GetFileAttributesW(p)
        flags = FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS
        h = open_path(p, FILE_READ_ATTRIBUTES, flags)
        tag = tag_info(h) if h != INVALID else err()
        if h != INVALID:
            CloseHandle(h)
        st = safe(lambda p=p: f"{os.lstat(p).st_reparse_tag:#x}")
        record(
            f"unixlink.{name}",
            f"attrs={'reparse' if attrs != 0xFFFFFFFF and attrs & 0x400 else hex(attrs)} "
            f"open_reparse={tag} islink={os.path.islink(p)} lstat.tag={st} "
            f"readlink={safe(lambda p=p: os.readlink(p))}",
            "n/a (Wine only): a faithful model shows it as a reparse point (tag 0xa000000c)",
            "links",
        )
    hroot = open_dir(root)
    try:
        st, h = nt_open(hroot, "link_out")
        data = read_handle(h) if h else b""
        record(
            "unixlink.nt_open_follows_outside",
            f"{nt(st)} read={data!r}",
            "n/a (Wine only); a root confinement must not read the outside file",
            "links",
        )
        if h:
            CloseHandle(h)
        st, h = nt_open(
            hroot, "link_out", options=FILE_SYNCHRONOUS_IO_NONALERT | FILE_OPEN_REPARSE_POINT
        )
        info = tag_info(h) if h else ""
        record(
            "unixlink.nt_open_reparse_point_flag",
            f"{nt(st)} {info}",
            "n/a; on Windows FILE_OPEN_REPARSE_POINT opens the link itself",
            "links",
        )
        if h:
            CloseHandle(h)
        st, h = nt_open(
            hroot, "dirlink_out\\secret.txt", attributes=OBJ_CASE_INSENSITIVE | OBJ_DONT_REPARSE
        )
        data = read_handle(h) if h else b""
        record(
            "unixlink.obj_dont_reparse",
            f"{nt(st)} read={data!r}",
            "STATUS_REPARSE_POINT_ENCOUNTERED (Windows 10 1607+)",
            "links",
        )
        if h:
            CloseHandle(h)
    finally:
        CloseHandle(hroot)


def safe(fn: object) -> str:
    try:
        return repr(fn())  # type: ignore[operator,unused-ignore]
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}({getattr(e, 'winerror', None) or getattr(e, 'errno', '')})"


def probe_identity(base: str) -> None:
    p = os.path.join(base, "id.txt")
    write_all(p, b"x")
    h = open_path(p)
    fid = FILE_ID_INFO()
    ok = GetFileInformationByHandleEx(h, 18, ctypes.byref(fid), ctypes.sizeof(fid))
    record(
        "identity.file_id_info",
        f"ok vol={fid.VolumeSerialNumber:#x} id={bytes(fid.FileId).hex()}" if ok else err(),
        "ok (NTFS/ReFS: nonzero 64/128-bit id)",
        "identity",
    )
    std = FILE_STANDARD_INFO()
    os.link(p, p + ".hard")
    ok = GetFileInformationByHandleEx(h, 1, ctypes.byref(std), ctypes.sizeof(std))
    record(
        "identity.hardlink_count",
        f"links={std.NumberOfLinks}" if ok else err(),
        "links=2",
        "identity",
    )
    record(
        "identity.os_stat_ino",
        f"same_ino={os.stat(p).st_ino == os.stat(p + '.hard').st_ino} "
        f"nonzero={os.stat(p).st_ino != 0} dev={os.stat(p).st_dev:#x}",
        "same_ino=True nonzero=True",
        "identity",
    )
    record(
        "identity.final_path",
        f"dos={final_path(h)} nt={final_path(h, 0x2)} guid={final_path(h, 0x1)}",
        "\\\\?\\C:\\... / \\Device\\HarddiskVolumeN\\... / \\\\?\\Volume{guid}\\...",
        "identity",
    )
    CloseHandle(h)
    fixture = os.environ.get("SPICE_PROBE_FIXTURE")
    if fixture:
        h = open_path(os.path.join(fixture, "root", "link_in"))
        record(
            "identity.final_path_through_unix_link",
            final_path(h),
            "n/a (Wine only): resolved target, like Windows for a symlink",
            "identity",
        )
        CloseHandle(h)
        h = open_path(os.path.join(fixture, "root", "link_out"))
        record(
            "identity.final_path_outside_every_drive",
            f"dos={final_path(h)} nt={final_path(h, 0x2)}",
            "n/a (Wine only)",
            "identity",
        )
        CloseHandle(h)


def probe_replace(base: str) -> None:
    d = os.path.join(base, "rep")
    os.mkdir(d)
    tgt, tmp = os.path.join(d, "t.txt"), os.path.join(d, "t.tmp")
    write_all(tgt, b"old")
    write_all(tmp, b"new")
    ok = ReplaceFileW(tgt, tmp, None, 0, None, None)
    record(
        "replace.ReplaceFileW",
        f"{'ok' if ok else err()} content={read_all(tgt)!r} tmp_gone={not os.path.exists(tmp)}",
        "ok content=b'new' tmp_gone=True",
        "replace",
    )
    write_all(tmp, b"new2")
    ok = MoveFileExW(tmp, tgt, 0x1 | 0x8)
    record(
        "replace.MoveFileExW_replace_writethrough",
        f"{'ok' if ok else err()} content={read_all(tgt)!r}",
        "ok content=b'new2'",
        "replace",
    )
    # Rename by handle, relative to a directory handle, POSIX semantics (Windows 10 1709+).
    write_all(tmp, b"new3")
    h = open_path(tmp, DELETE | SYNCHRONIZE)
    hdir = open_dir(d)
    info = rename_info("t.txt", 0x1 | 0x2, hdir)  # REPLACE_IF_EXISTS | POSIX_SEMANTICS
    ok = SetFileInformationByHandle(h, 22, info, len(info))
    e1 = "ok" if ok else err()
    CloseHandle(h)
    record(
        "replace.FileRenameInfoEx_posix_rootdir",
        f"{e1} content={read_all(tgt)!r}",
        "ok content=b'new3' (NTFS, Windows 10 1709+)",
        "replace",
    )
    write_all(tmp, b"new4")
    h = open_path(tmp, DELETE | SYNCHRONIZE)
    info = rename_info("t.txt", 1, hdir)  # classic FileRenameInfo, ReplaceIfExists, RootDirectory
    ok = SetFileInformationByHandle(h, 3, info, len(info))
    e2 = "ok" if ok else err()
    CloseHandle(h)
    record(
        "replace.FileRenameInfo_rootdir",
        f"{e2} content={read_all(tgt)!r}",
        "ok content=b'new4'",
        "replace",
    )
    # The same through ntdll, as Go's Renameat does: class 65 (Ex, POSIX), fallback class 10.
    for klass, flags, label in (
        (65, 0x1 | 0x2, "nt.rename_ex_posix_rootdir"),
        (10, 1, "nt.rename_rootdir"),
    ):
        write_all(tmp, label.encode())
        h = open_path(tmp, DELETE | SYNCHRONIZE)
        info = rename_info("t.txt", flags, hdir)
        st = NtSetInformationFile(
            h, ctypes.byref(IO_STATUS_BLOCK()), ctypes.addressof(info), len(info), klass
        )
        CloseHandle(h)
        record(
            label,
            f"{nt(st)} content={read_all(tgt)!r}",
            f"STATUS_SUCCESS content={label.encode()!r}",
            "replace",
        )
    # Link by handle relative to a directory handle (FileLinkInformation, class 11).
    h = open_path(tgt, FILE_READ_ATTRIBUTES | SYNCHRONIZE)
    info = rename_info("t-link.txt", 0, hdir)
    st = NtSetInformationFile(
        h, ctypes.byref(IO_STATUS_BLOCK()), ctypes.addressof(info), len(info), 11
    )
    CloseHandle(h)
    record(
        "nt.link_rootdir",
        f"{nt(st)} exists={os.path.exists(os.path.join(d, 't-link.txt'))}",
        "STATUS_SUCCESS exists=True",
        "replace",
    )
    # Delete while another handle is open: POSIX disposition (64), fallback classic (13).
    for klass, value, label in (
        (64, 0x1 | 0x2 | 0x10, "nt.delete_ex_posix_while_open"),
        (13, 1, "nt.delete_classic_while_open"),
    ):
        victim = os.path.join(d, label)
        write_all(victim, b"v")
        other = open_path(victim)
        h = open_path(victim, DELETE | SYNCHRONIZE)
        flag = w.DWORD(value)
        st = NtSetInformationFile(
            h,
            ctypes.byref(IO_STATUS_BLOCK()),
            ctypes.addressof(flag),
            4 if klass == 64 else 1,
            klass,
        )
        CloseHandle(h)
        name_free = not os.path.exists(victim)
        CloseHandle(other)
        record(
            label,
            f"{nt(st)} name_gone_while_other_handle_open={name_free}",
            "STATUS_SUCCESS name_gone_while_other_handle_open=True"
            if klass == 64
            else "STATUS_SUCCESS name_gone_while_other_handle_open=False (delete pending)",
            "replace",
        )
    CloseHandle(hdir)
    # os.replace while the target is open elsewhere with Python's default share mode.
    write_all(tmp, b"new5")
    holder = subprocess.Popen(
        [
            *CHILD,
            "import sys,time; f=open(sys.argv[1],'rb'); print('open', flush=True); time.sleep(30)",
            tgt,
        ],
        stdout=subprocess.PIPE,
    )
    holder.stdout.readline()
    r = safe(lambda: os.replace(tmp, tgt))
    record(
        "share.replace_target_open_by_python_reader",
        r,
        "PermissionError(5): ACCESS_DENIED (open() shares read|write, not delete)",
        "share",
    )
    holder.kill()
    holder.wait()
    holder.stdout.close()
    # Share mode 0 in another process: a second open and a replace both fail.
    holder = subprocess.Popen(
        [
            *CHILD,
            (
                "import ctypes,sys,time; k=ctypes.WinDLL('kernel32'); "
                "k.CreateFileW.restype=ctypes.c_void_p; "
                "h=k.CreateFileW(sys.argv[1],0x80000000,0,None,3,0,None); print('open', h, flush=True); "
                "time.sleep(30)"
            ),
            tgt,
        ],
        stdout=subprocess.PIPE,
    )
    holder.stdout.readline()
    h = open_path(tgt)
    e_open = "opened" if h != INVALID else err()
    if h != INVALID:
        CloseHandle(h)
    e_move = "ok" if MoveFileExW(tmp, tgt, 0x1) else err()
    record(
        "share.open_with_share_0_elsewhere",
        f"open={e_open} MoveFileEx={e_move}",
        "open=SHARING_VIOLATION(32) MoveFileEx=SHARING_VIOLATION(32) or ACCESS_DENIED(5)",
        "share",
    )
    holder.kill()
    holder.wait()
    holder.stdout.close()
    # A byte-range lock held by another process.
    holder = subprocess.Popen(
        [
            *CHILD,
            (
                "import ctypes,sys,time,msvcrt; f=open(sys.argv[1],'r+b'); "
                "msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1); print('locked', flush=True); "
                "time.sleep(30)"
            ),
            tgt,
        ],
        stdout=subprocess.PIPE,
    )
    holder.stdout.readline()
    h = open_path(tgt, GENERIC_READ | GENERIC_WRITE)
    data = read_handle(h)
    wrote = WriteFile(h, b"w", 1, ctypes.byref(w.DWORD()), None)
    w_err = "ok" if wrote else err()
    overlapped = (ctypes.c_byte * 32)()
    locked = LockFileEx(h, 3, 0, 1, 0, overlapped)  # EXCLUSIVE | FAIL_IMMEDIATELY
    l_err = "ok" if locked else err()
    CloseHandle(h)
    record(
        "share.locked_range_other_process",
        f"read={'ok' if not data.startswith(b'<fail') else data.decode()} write={w_err} "
        f"lock={l_err}",
        "read=<fail LOCK_VIOLATION(33)> write=LOCK_VIOLATION(33) lock=LOCK_VIOLATION(33)",
        "share",
    )
    holder.kill()
    holder.wait()
    holder.stdout.close()
    # Read-only attribute on the target.
    write_all(tmp, b"new6")
    os.chmod(tgt, 0o444)
    r = safe(lambda: os.replace(tmp, tgt))
    record(
        "replace.readonly_target",
        r,
        "PermissionError(5) (MoveFileEx will not replace a read-only file)",
        "replace",
    )
    os.chmod(tgt, 0o644)


def probe_flush(base: str) -> None:
    p = os.path.join(base, "flush.txt")
    h = open_path(p, GENERIC_WRITE, 0, SHARE_ALL, CREATE_ALWAYS)
    got = w.DWORD()
    WriteFile(h, b"x" * 4096, 4096, ctypes.byref(got), None)
    t = time.perf_counter()
    ok = FlushFileBuffers(h)
    ms = (time.perf_counter() - t) * 1000
    record(
        "durability.FlushFileBuffers_file",
        f"{'ok' if ok else err()} ({ms:.1f} ms)",
        "ok (real flush: ms, not us)",
        "durability",
    )
    CloseHandle(h)
    h = open_dir(base, GENERIC_READ)
    ok = FlushFileBuffers(h)
    e1 = "ok" if ok else err()
    CloseHandle(h)
    h = open_dir(base, GENERIC_READ | GENERIC_WRITE)
    ok = FlushFileBuffers(h) if h != INVALID else False
    e2 = "ok" if ok else err()
    if h != INVALID:
        CloseHandle(h)
    record(
        "durability.FlushFileBuffers_directory",
        f"read-handle={e1} write-handle={e2}",
        "read-handle=ACCESS_DENIED write-handle=ok (NTFS)",
        "durability",
    )
    fd = os.open(p, os.O_RDWR)
    record("durability.os_fsync", safe(lambda: os.fsync(fd)), "None", "durability")
    os.close(fd)


def probe_acl(base: str) -> None:
    advapi = ctypes.WinDLL("advapi32", use_last_error=True)
    conv = proto(
        advapi,
        "ConvertStringSecurityDescriptorToSecurityDescriptorW",
        w.BOOL,
        w.LPCWSTR,
        w.DWORD,
        ctypes.POINTER(ctypes.c_void_p),
        w.LPDWORD,
    )
    setsec = proto(advapi, "SetFileSecurityW", w.BOOL, w.LPCWSTR, w.DWORD, ctypes.c_void_p)
    p = os.path.join(base, "acl.txt")
    write_all(p, b"a")
    sd = ctypes.c_void_p()
    conv("D:P(D;;FW;;;WD)(A;;FA;;;WD)", 1, ctypes.byref(sd), None)  # deny write to Everyone
    ok = setsec(p, 4, sd)  # DACL_SECURITY_INFORMATION
    e = "ok" if ok else err()
    h = open_path(p, GENERIC_WRITE)
    opened = "opened" if h != INVALID else err()
    if h != INVALID:
        CloseHandle(h)
    record(
        "acl.deny_write_ace",
        f"SetFileSecurity={e} open_for_write={opened}",
        "SetFileSecurity=ok open_for_write=ACCESS_DENIED(5)",
        "acl",
    )
    conv("D:(A;;FA;;;WD)", 1, ctypes.byref(sd), None)
    setsec(p, 4, sd)


def probe_names(base: str) -> None:
    d = os.path.join(base, "names")
    os.mkdir(d)
    write_all(os.path.join(d, "Foo.txt"), b"f")
    record(
        "names.case_insensitive",
        safe(lambda: read_all(os.path.join(d, "FOO.TXT"))),
        "b'f'",
        "names",
    )
    record(
        "names.trailing_dot_win32",
        safe(lambda: read_all(os.path.join(d, "Foo.txt."))),
        "b'f' (Win32 strips trailing dots and spaces)",
        "names",
    )
    record(
        "names.ads",
        safe(lambda: write_all(os.path.join(d, "Foo.txt:stream"), b"s"))
        + " list="
        + safe(lambda: sorted(os.listdir(d))),
        "None list=['Foo.txt'] (NTFS stream, invisible)",
        "names",
    )
    record(
        "names.reserved_nul",
        safe(lambda: write_all(os.path.join(d, "nul"), b"x"))
        + " list="
        + safe(lambda: sorted(os.listdir(d))),
        "None list unchanged (writes to the NUL device)",
        "names",
    )
    record(
        "names.reserved_con_txt",
        safe(lambda: os.path.exists(os.path.join(d, "con.txt"))),
        "? (device on Windows 10; a plain name on Windows 11)",
        "names",
    )
    long = os.path.join(d, "AVeryLongFileName1234.txt")
    write_all(long, b"l")
    buf = ctypes.create_unicode_buffer(520)
    n = GetShortPathNameW(long, buf, 520)
    short = buf.value if n else err()
    opened = safe(lambda: read_all(short)) if n else "-"
    record(
        "names.short_8dot3",
        f"short={os.path.basename(short)} opens={opened}",
        "? short=AVERYL~1.TXT opens=b'l' where 8.3 generation is on (often on C:)",
        "names",
    )
    deep = d + "\\" + "\\".join(["d" * 50] * 6)
    r = safe(lambda: os.makedirs(deep))
    record(
        "names.long_path_over_260",
        f"makedirs={r} len={len(deep)}",
        "FileNotFoundError(3)/(206) unless LongPathsEnabled; \\\\?\\ prefix works",
        "names",
    )
    fd = os.open(os.path.join(d, "crlf.txt"), os.O_WRONLY | os.O_CREAT | os.O_BINARY)
    os.write(fd, b"a\r\nb\x1ac")
    os.close(fd)
    fd = os.open(os.path.join(d, "crlf.txt"), os.O_RDONLY)  # no O_BINARY: CRT text mode
    text = os.read(fd, 100)
    os.close(fd)
    record(
        "names.os_open_text_mode",
        f"{text!r}",
        "b'a\\nb' (os.open without O_BINARY translates CRLF and stops at Ctrl-Z)",
        "names",
    )


# ------------------------------------------------------------------ process probes


class JOBOBJECT_BASIC_LIMIT_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", w.DWORD),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", w.DWORD),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", w.DWORD),
        ("SchedulingClass", w.DWORD),
    ]


class JOBOBJECT_EXTENDED_LIMIT_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("Basic", JOBOBJECT_BASIC_LIMIT_INFORMATION),
        ("IoInfo", ctypes.c_uint64 * 6),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class JOBOBJECT_BASIC_ACCOUNTING_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("TotalUserTime", ctypes.c_int64),
        ("TotalKernelTime", ctypes.c_int64),
        ("ThisPeriodTotalUserTime", ctypes.c_int64),
        ("ThisPeriodTotalKernelTime", ctypes.c_int64),
        ("TotalPageFaultCount", w.DWORD),
        ("TotalProcesses", w.DWORD),
        ("ActiveProcesses", w.DWORD),
        ("TotalTerminatedProcesses", w.DWORD),
    ]


KILL_ON_CLOSE, BREAKAWAY_OK, SILENT_BREAKAWAY_OK = 0x2000, 0x800, 0x1000
CREATE_SUSPENDED, CREATE_NEW_PROCESS_GROUP, CREATE_BREAKAWAY_FROM_JOB = 0x4, 0x200, 0x01000000


def make_job(flags: int = KILL_ON_CLOSE) -> int:
    job = CreateJobObjectW(None, None)
    info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
    info.Basic.LimitFlags = flags
    if not SetInformationJobObject(job, 9, ctypes.byref(info), ctypes.sizeof(info)):
        raise OSError(f"SetInformationJobObject {err()}")
    return job


def active(job: int) -> str:
    acct = JOBOBJECT_BASIC_ACCOUNTING_INFORMATION()
    if not QueryInformationJobObject(job, 1, ctypes.byref(acct), ctypes.sizeof(acct), None):
        return err()
    return f"{acct.ActiveProcesses}/{acct.TotalProcesses}"


SPAWNER = (
    "import subprocess,sys,time; "
    "flags=int(sys.argv[1]); "
    "g=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'],creationflags=flags); "
    "print(g.pid, flush=True); time.sleep(60)"
)


def probe_jobs() -> None:
    me_in_job = w.BOOL()
    IsProcessInJob(GetCurrentProcess(), None, ctypes.byref(me_in_job))
    record(
        "job.self_in_job",
        f"{bool(me_in_job.value)}",
        "True under GitHub Actions, a terminal or IDE that uses jobs; often False",
        "job",
    )
    # Suspended start, assign, resume (NtResumeProcess: subprocess closes the thread handle).
    job = make_job()
    child = subprocess.Popen(
        [*CHILD, SPAWNER, "0"], creationflags=CREATE_SUSPENDED, stdout=subprocess.PIPE
    )
    hproc = child._handle
    assigned = AssignProcessToJobObject(job, hproc)
    a_err = "ok" if assigned else err()
    in_job = w.BOOL()
    IsProcessInJob(hproc, job, ctypes.byref(in_job))
    st = NtResumeProcess(hproc)
    line = child.stdout.readline()
    grandchild = int(line) if line.strip() else 0
    g_in_job = w.BOOL()
    hg = (
        OpenProcess(0x400 | SYNCHRONIZE, False, grandchild) if grandchild else 0
    )  # QUERY_INFORMATION
    if hg:
        IsProcessInJob(hg, job, ctypes.byref(g_in_job))
    hl = OpenProcess(0x1000, False, grandchild) if grandchild else 0  # QUERY_LIMITED_INFORMATION
    limited = w.BOOL()
    ok = IsProcessInJob(hl, job, ctypes.byref(limited)) if hl else False
    record(
        "job.is_process_in_job_limited_access",
        f"{'ok' if ok else err()} in_job={bool(limited.value)}",
        "ok in_job=True (QUERY_LIMITED_INFORMATION suffices on Windows)",
        "job",
    )
    if hl:
        CloseHandle(hl)
    record(
        "job.suspended_assign_resume",
        f"assign={a_err} in_job={bool(in_job.value)} NtResumeProcess={nt(st)} "
        f"grandchild_in_job={bool(g_in_job.value)} active={active(job)}",
        "assign=ok in_job=True NtResumeProcess=STATUS_SUCCESS grandchild_in_job=True active=2/2",
        "job",
    )
    t = time.perf_counter()
    CloseHandle(job)
    gone_child = not alive(child.pid, 5000)
    gone_grand = not alive(grandchild, 5000) if grandchild else False
    record(
        "job.kill_on_close",
        f"child_gone={gone_child} grandchild_gone={gone_grand} "
        f"in {1000 * (time.perf_counter() - t):.0f} ms",
        "child_gone=True grandchild_gone=True",
        "job",
    )
    for pid in (child.pid, grandchild):
        kill_pid(pid)
    child.wait()
    child.stdout.close()
    if hg:
        CloseHandle(hg)
    # The owner dies: the kernel closes its job handle, which kills the job.
    owner_code = (
        "import ctypes,subprocess,sys,time; sys.path.insert(0, sys.argv[1]); import probes as p; "
        "job=p.make_job(); c=subprocess.Popen([sys.executable,'-c',p.SPAWNER,'0'],"
        "creationflags=p.CREATE_SUSPENDED,stdout=subprocess.PIPE); "
        "p.AssignProcessToJobObject(job,c._handle); p.NtResumeProcess(c._handle); "
        "g=c.stdout.readline().strip().decode(); print(c.pid, g, flush=True); time.sleep(60)"
    )
    owner = subprocess.Popen(
        [*CHILD, owner_code, os.path.dirname(os.path.abspath(__file__))], stdout=subprocess.PIPE
    )
    pids = [int(x) for x in owner.stdout.readline().split()]
    owner.kill()
    owner.wait()
    owner.stdout.close()
    gone = [not alive(pid, 5000) for pid in pids]
    for pid in pids:
        kill_pid(pid)
    record("job.owner_killed", f"descendants_gone={gone}", "descendants_gone=[True, True]", "job")
    # Nested: a process already in job A is assigned to job B.
    job_a, job_b = make_job(), make_job()
    c = subprocess.Popen([*CHILD, "import time; time.sleep(60)"], creationflags=CREATE_SUSPENDED)
    a = AssignProcessToJobObject(job_a, c._handle)
    b = AssignProcessToJobObject(job_b, c._handle)
    record(
        "job.nested",
        f"first={'ok' if a else err()} second={'ok' if b else err()}",
        "first=ok second=ok (nested jobs, Windows 8+)",
        "job",
    )
    CloseHandle(job_b)
    CloseHandle(job_a)
    c.kill()
    c.wait(10)
    # Breakaway: refused without BREAKAWAY_OK, allowed with it.
    for flags, label in (
        (KILL_ON_CLOSE, "no_breakaway_ok"),
        (KILL_ON_CLOSE | BREAKAWAY_OK, "breakaway_ok"),
    ):
        job = make_job(flags)
        child = subprocess.Popen(
            [*CHILD, SPAWNER, str(CREATE_BREAKAWAY_FROM_JOB)],
            creationflags=CREATE_SUSPENDED,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        AssignProcessToJobObject(job, child._handle)
        NtResumeProcess(child._handle)
        line = child.stdout.readline().strip()
        grand = int(line) if line else 0
        tail = (
            child.stderr.read().decode(errors="replace").strip().splitlines()[-1:]
            if not grand
            else []
        )
        CloseHandle(job)
        survived = alive(grand, 1000) if grand else False
        record(
            f"job.breakaway_{label}",
            f"spawned={bool(grand)} {tail} survives_close={survived}",
            "spawned=False [PermissionError ACCESS_DENIED]"
            if label == "no_breakaway_ok"
            else "spawned=True survives_close=True",
            "job",
        )
        kill_pid(grand)
        child.kill()
        child.wait(10)
        child.stdout.close()
        child.stderr.close()
    # Completion port: ACTIVE_PROCESS_ZERO tells when every process in the job has ended.
    job = make_job()
    port = CreateIoCompletionPort(INVALID, None, 0, 1)

    class PORT(ctypes.Structure):
        _fields_ = [("CompletionKey", ctypes.c_void_p), ("CompletionPort", HANDLE)]

    assoc = PORT(None, port)
    ok = SetInformationJobObject(job, 7, ctypes.byref(assoc), ctypes.sizeof(assoc))
    c = subprocess.Popen([*CHILD, "import time; time.sleep(0.3)"], creationflags=CREATE_SUSPENDED)
    AssignProcessToJobObject(job, c._handle)
    NtResumeProcess(c._handle)
    msgs = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        code, key, ov = w.DWORD(), ctypes.c_size_t(), ctypes.c_void_p()
        if not GetQueuedCompletionStatus(
            port, ctypes.byref(code), ctypes.byref(key), ctypes.byref(ov), 500
        ):
            continue
        msgs.append(code.value)
        if code.value == 4:
            break
    record(
        "job.completion_port",
        f"associate={'ok' if ok else err()} messages={msgs}",
        "associate=ok messages=[6, 7, 4] (NEW_PROCESS, EXIT_PROCESS, ACTIVE_PROCESS_ZERO)",
        "job",
    )
    c.kill()
    c.wait(10)
    CloseHandle(job)
    CloseHandle(port)
    # TerminateJobObject with an exit code.
    job = make_job()
    c = subprocess.Popen([*CHILD, "import time; time.sleep(60)"], creationflags=CREATE_SUSPENDED)
    AssignProcessToJobObject(job, c._handle)
    NtResumeProcess(c._handle)
    ok = TerminateJobObject(job, 137)
    record(
        "job.terminate_exit_code",
        f"{'ok' if ok else err()} exit={c.wait(10)}",
        "ok exit=137",
        "job",
    )
    CloseHandle(job)
    # PROC_THREAD_ATTRIBUTE_JOB_LIST: the job is set at creation, no suspended window.
    record(
        "job.attribute_job_list_suspended_resumethread",
        attribute_job_list(),
        "ok in_job=True held_while_suspended=True ResumeThread=1 ran_to_exit=True (Windows 10+)",
        "job",
    )


def attribute_job_list() -> str:
    class STARTUPINFOEXW(ctypes.Structure):
        _fields_ = [("cb", w.DWORD), ("_pad", ctypes.c_byte * 100), ("lpAttributeList", w.LPVOID)]

    class PROCESS_INFORMATION(ctypes.Structure):
        _fields_ = [
            ("hProcess", HANDLE),
            ("hThread", HANDLE),
            ("dwProcessId", w.DWORD),
            ("dwThreadId", w.DWORD),
        ]

    init = proto(
        k32,
        "InitializeProcThreadAttributeList",
        w.BOOL,
        w.LPVOID,
        w.DWORD,
        w.DWORD,
        ctypes.POINTER(ctypes.c_size_t),
    )
    update = proto(
        k32,
        "UpdateProcThreadAttribute",
        w.BOOL,
        w.LPVOID,
        w.DWORD,
        ctypes.c_size_t,
        w.LPVOID,
        ctypes.c_size_t,
        w.LPVOID,
        w.LPVOID,
    )
    create = proto(
        k32,
        "CreateProcessW",
        w.BOOL,
        w.LPCWSTR,
        w.LPWSTR,
        w.LPVOID,
        w.LPVOID,
        w.BOOL,
        w.DWORD,
        w.LPVOID,
        w.LPCWSTR,
        w.LPVOID,
        ctypes.POINTER(PROCESS_INFORMATION),
    )
    size = ctypes.c_size_t()
    init(None, 1, 0, ctypes.byref(size))
    attrs = ctypes.create_string_buffer(size.value)
    if not init(attrs, 1, 0, ctypes.byref(size)):
        return f"init {err()}"
    job = make_job()
    jobs = (HANDLE * 1)(job)
    if not update(attrs, 0, 0x2000D, jobs, ctypes.sizeof(jobs), None, None):
        return f"update {err()}"
    si = STARTUPINFOEXW()
    ctypes.memset(ctypes.byref(si), 0, ctypes.sizeof(si))
    si.cb = 112  # sizeof(STARTUPINFOEXW) on x64
    ctypes.memmove(
        ctypes.addressof(si) + 104, ctypes.byref(ctypes.c_void_p(ctypes.addressof(attrs))), 8
    )
    pi = PROCESS_INFORMATION()
    cmd = ctypes.create_unicode_buffer(subprocess.list2cmdline([sys.executable, "-c", "pass"]))
    # EXTENDED_STARTUPINFO_PRESENT | CREATE_SUSPENDED, then ResumeThread on the thread handle.
    ok = create(
        None,
        cmd,
        None,
        None,
        False,
        0x00080000 | CREATE_SUSPENDED,
        None,
        None,
        ctypes.byref(si),
        ctypes.byref(pi),
    )
    if not ok:
        return f"CreateProcess {err()}"
    in_job = w.BOOL()
    IsProcessInJob(pi.hProcess, job, ctypes.byref(in_job))
    suspended = WaitForSingleObject(pi.hProcess, 300) != 0
    previous = k32.ResumeThread(pi.hThread)
    exited = WaitForSingleObject(pi.hProcess, 10000) == 0
    CloseHandle(job)
    CloseHandle(pi.hThread)
    CloseHandle(pi.hProcess)
    return (
        f"ok in_job={bool(in_job.value)} held_while_suspended={suspended} "
        f"ResumeThread={previous} ran_to_exit={exited}"
    )


def probe_ctrl_break() -> None:
    code = (
        "import signal,sys,time; signal.signal(signal.SIGBREAK, lambda *a: (print('break', "
        "flush=True), sys.exit(3))); print('ready', flush=True); time.sleep(10); print('timeout')"
    )
    c = subprocess.Popen(
        [*CHILD, code],
        creationflags=CREATE_NEW_PROCESS_GROUP,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    c.stdout.readline()
    try:
        os.kill(c.pid, signal.CTRL_BREAK_EVENT)
        sent = "None"
    except OSError as e:
        sent = f"OSError(winerror={e.winerror})"
    except Exception as e:  # noqa: BLE001 - CPython 3.11 raises SystemError here under Wine
        sent = f"{type(e).__name__}({str(e)[:60]})"
    try:
        out, _ = c.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        c.kill()
        out, _ = c.communicate()
    record(
        "process.ctrl_break_group",
        f"kill={sent} child_said={out.decode().split()} exit={c.returncode}",
        "kill=None child_said=['break'] exit=3 (only when parent and child share a console)",
        "process",
    )


def probe_suspend_resume() -> None:
    c = subprocess.Popen(
        [*CHILD, "print('ran', flush=True)"], creationflags=CREATE_SUSPENDED, stdout=subprocess.PIPE
    )
    time.sleep(0.5)
    early = c.poll()
    st = NtResumeProcess(c._handle)
    out = c.stdout.read()
    c.wait()
    c.stdout.close()
    record(
        "process.create_suspended_ntresume",
        f"ran_before_resume={early is not None} NtResumeProcess={nt(st)} out={out.strip()!r}",
        "ran_before_resume=False NtResumeProcess=STATUS_SUCCESS out=b'ran'",
        "process",
    )


async def _big_output(total: int) -> tuple[int, int, float]:
    code = (
        "import sys; b=b'x'*65536; n=int(sys.argv[1]); "
        "[sys.stdout.buffer.write(b) for _ in range(n//65536)]; "
        "[sys.stderr.buffer.write(b) for _ in range(n//65536//4)]"
    )
    t = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *CHILD, code, str(total), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )

    async def drain(stream: asyncio.StreamReader) -> int:
        n = 0
        while chunk := await stream.read(1 << 16):
            n += len(chunk)
        return n

    out, errn = await asyncio.gather(drain(proc.stdout), drain(proc.stderr))
    await proc.wait()
    return out, errn, time.perf_counter() - t


async def _kill_waits() -> str:
    proc = await asyncio.create_subprocess_exec(
        *CHILD, "import time; time.sleep(60)", stdout=asyncio.subprocess.PIPE
    )
    await asyncio.sleep(0.2)
    proc.kill()
    code = await asyncio.wait_for(proc.wait(), 10)
    return f"exit={code}"


def probe_asyncio_pipes() -> None:
    loop_name = type(asyncio.new_event_loop()).__name__
    total = 64 << 20
    out, errn, secs = asyncio.run(_big_output(total))
    record(
        "process.asyncio_pipes_large",
        f"loop={loop_name} stdout={out} stderr={errn} {out / secs / 1e6:.0f} MB/s",
        f"loop=ProactorEventLoop stdout={total} stderr={total // 4}",
        "process",
    )
    record(
        "process.asyncio_kill", asyncio.run(_kill_waits()), "exit=1 (TerminateProcess)", "process"
    )


def probe_cmdline() -> None:
    args = [
        "",
        "a b",
        'a"b',
        "a\\b",
        'a\\"b',
        "trail\\",
        "trail\\\\",
        '"',
        '\\"',
        "ünïcødé",
        "%PATH%",
        "^&|<>",
        "tab\there",
        "*?",
        "a\\\\b c",
        'x"y z"w',
    ]
    out = subprocess.run(
        [*CHILD, "import json,sys; print(json.dumps(sys.argv[1:]))", *args],
        capture_output=True,
        check=False,
    )
    got = json.loads(out.stdout) if out.returncode == 0 else out.stderr.decode()[-200:]
    record(
        "process.list2cmdline_roundtrip",
        "same" if got == args else f"differs: {got!r}",
        "same",
        "process",
    )
    bat = os.path.join(tempfile.gettempdir(), "spice-probe.bat")
    with open(bat, "w") as f:
        f.write("@echo off\r\necho ARG=%1\r\n")
    r = subprocess.run([bat, '"&echo INJECTED'], capture_output=True, check=False)
    text = r.stdout.decode(errors="replace").replace("\r", "").strip().splitlines()
    record(
        "process.bat_argument_injection",
        f"lines={text}",
        "lines include 'INJECTED' (cmd.exe re-parses .bat arguments: BatBadBut)",
        "process",
    )
    os.unlink(bat)


def probe_environment() -> None:
    check = (
        "import asyncio, os, socket\n"
        "asyncio.run(asyncio.sleep(0))\n"
        "a, b = socket.socketpair(); a.close(); b.close()\n"
        "print(sorted(os.environ))"
    )
    for label, env in (
        ("empty", {}),
        ("path_only", {"PATH": os.environ.get("PATH", "")}),
        (
            "with_systemroot",
            {"SYSTEMROOT": os.environ.get("SYSTEMROOT", ""), "PATH": os.environ.get("PATH", "")},
        ),
    ):
        r = subprocess.run([*CHILD, check], env=env, capture_output=True, check=False)
        tail = r.stderr.decode(errors="replace").strip().splitlines()[-1:] if r.returncode else []
        seen = json.loads(r.stdout.decode().strip().replace("'", '"')) if r.returncode == 0 else []
        extra = sorted(set(seen) - {k.upper() for k in env})
        record(
            f"env.child_{label}",
            f"exit={r.returncode} {tail} added_names={extra}",
            "exit!=0 (WSAStartup/asyncio fail without SYSTEMROOT) added_names=[]"
            if label != "with_systemroot"
            else "exit=0 added_names=[]",
            "env",
        )
    record(
        "env.names_case_insensitive",
        f"Path_in_environ={'Path' in os.environ} keys_upper={all(k == k.upper() for k in os.environ)}",
        "Path_in_environ=True keys_upper=True (os.environ upper-cases on Windows)",
        "env",
    )
    record(
        "env.pathext",
        os.environ.get("PATHEXT", "<unset>"),
        ".COM;.EXE;.BAT;.CMD;.VBS;.VBE;.JS;.JSE;.WSF;.WSH;.MSC(;.CPL)",
        "env",
    )
    record(
        "env.comspec_systemroot",
        f"COMSPEC={os.environ.get('COMSPEC')} SYSTEMROOT={os.environ.get('SYSTEMROOT')}",
        "C:\\WINDOWS\\system32\\cmd.exe C:\\WINDOWS",
        "env",
    )


def probe_lookup(base: str) -> None:
    d = os.path.join(base, "bin")
    os.mkdir(d)
    for name in ("tool.exe", "tool.cmd", "script.bat", "plain"):
        write_all(os.path.join(d, name), b"")
    path = d + os.pathsep + os.environ.get("PATH", "")
    got = {q: shutil.which(q, path=path) for q in ("tool", "script", "plain", "cmd", "TOOL.EXE")}
    shown = {k: (os.path.basename(v) if v else None) for k, v in got.items()}
    record(
        "lookup.shutil_which_pathext",
        f"{shown}",
        "{'tool': 'tool.exe', 'script': 'script.bat', 'plain': None, 'cmd': 'cmd.exe', "
        "'TOOL.EXE': 'TOOL.EXE'} (case of the query kept)",
        "lookup",
    )
    old = os.getcwd()
    os.chdir(d)
    try:
        cwd_hit = shutil.which("tool", path=os.environ.get("PATH", ""))
    finally:
        os.chdir(old)
    record(
        "lookup.which_searches_cwd_first",
        f"{os.path.basename(cwd_hit) if cwd_hit else None}",
        "tool.exe (Windows searches the current directory unless "
        "NoDefaultCurrentDirectoryInExePath is set)",
        "lookup",
    )


def probe_handle_inheritance(base: str) -> None:
    p = os.path.join(base, "inherit.txt")
    write_all(p, b"i")
    sa = (ctypes.c_byte * 24)()
    ctypes.memmove(sa, ctypes.byref(w.DWORD(24)), 4)
    ctypes.memmove(ctypes.addressof(sa) + 16, ctypes.byref(w.BOOL(True)), 4)  # bInheritHandle
    h = CreateFileW(p, GENERIC_READ, SHARE_ALL, ctypes.addressof(sa), OPEN_EXISTING, 0, None)
    code = (
        "import ctypes,sys; k=ctypes.WinDLL('kernel32'); b=ctypes.create_unicode_buffer(600); "
        "n=k.GetFinalPathNameByHandleW(ctypes.c_void_p(int(sys.argv[1])),b,600,0); "
        "print(b.value if n else 'not-inherited')"
    )
    r = subprocess.run([*CHILD, code, str(h)], capture_output=True, close_fds=True, check=False)
    CloseHandle(h)
    seen = r.stdout.decode().strip()
    record(
        "process.handle_list_close_fds",
        "not inherited" if seen == "not-inherited" or "inherit.txt" not in seen else "LEAKED",
        "not inherited (subprocess passes PROC_THREAD_ATTRIBUTE_HANDLE_LIST)",
        "process",
    )


PROBES = {
    "fs": lambda b: probe_nt_relative(b),
    "links": lambda b: (probe_symlinks(b), probe_unix_links()),
    "identity": probe_identity,
    "replace": probe_replace,
    "durability": probe_flush,
    "names": probe_names,
    "acl": probe_acl,
    "job": lambda b: probe_jobs(),
    "process": lambda b: (
        probe_suspend_resume(),
        probe_ctrl_break(),
        probe_asyncio_pipes(),
        probe_cmdline(),
        probe_handle_inheritance(b),
    ),
    "env": lambda b: probe_environment(),
    "lookup": probe_lookup,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    wanted = [x for x in args.only.split(",") if x] or list(PROBES)
    print(
        f"python {sys.version.split()[0]} windows {sys.getwindowsversion()[:3]} "
        f"wine={hasattr(ntdll, 'wine_get_version')}",
        flush=True,
    )
    for name in wanted:
        base = tempfile.mkdtemp(prefix=f"spice-probe-{name}-")
        t = time.perf_counter()
        try:
            PROBES[name](base)
        except Exception:  # noqa: BLE001
            record(f"{name}.crashed", traceback.format_exc().strip().splitlines()[-1], "-", name)
        print(f"# {name}: {time.perf_counter() - t:.1f} s", flush=True)
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(RESULTS, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
