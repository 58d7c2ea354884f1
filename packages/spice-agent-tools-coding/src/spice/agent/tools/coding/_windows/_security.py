"""What a Windows replacement keeps of the replaced file's security: its DACL, and whether
its owner stayed.

The POSIX engine gives the temporary the replaced file's mode (and owner where it can);
the Windows counterpart of the mode is the discretionary ACL. A new file inherits its
directory's ACL, so without this a file the user had restricted (an explicit, perhaps
protected, DACL) would be replaced by one readable by whoever the directory lets in.
:func:`keep_security` copies the target's DACL onto the temporary before any content is
written (``SetSecurityInfo`` recomputes the inherited entries from the parent, keeps the
explicit ones, and keeps the DACL protected when it was), and says whether the owner
differs (a user cannot give a file another owner without a privilege: the answer then
says ``owner_changed: true``).
"""

from __future__ import annotations

import ctypes
from typing import Final, final

from . import _api as w
from . import _root as rw

SE_FILE_OBJECT: Final = 1
OWNER_SECURITY_INFORMATION: Final = 0x00000001
DACL_SECURITY_INFORMATION: Final = 0x00000004
PROTECTED_DACL_SECURITY_INFORMATION: Final = 0x80000000
UNPROTECTED_DACL_SECURITY_INFORMATION: Final = 0x20000000
SE_DACL_PROTECTED: Final = 0x1000
ERROR_SUCCESS: Final = 0
ERROR_NOT_SUPPORTED: Final = 50
ERROR_INVALID_FUNCTION: Final = 1

_TARGET_ACCESS: Final = w.READ_CONTROL | w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE


@final
class _Advapi:
    __slots__ = ("equal_sid", "get_control", "get_security_info", "local_free", "set_security_info")

    def __init__(self) -> None:
        advapi32 = w.library("advapi32")
        kernel32 = w.library("kernel32")
        pointer, handle, ulong = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulong
        self.get_security_info = advapi32.GetSecurityInfo
        self.get_security_info.restype = ulong
        self.get_security_info.argtypes = (
            handle,
            ctypes.c_int,
            ulong,
            ctypes.POINTER(pointer),
            ctypes.POINTER(pointer),
            ctypes.POINTER(pointer),
            ctypes.POINTER(pointer),
            ctypes.POINTER(pointer),
        )
        self.set_security_info = advapi32.SetSecurityInfo
        self.set_security_info.restype = ulong
        self.set_security_info.argtypes = (
            handle,
            ctypes.c_int,
            ulong,
            pointer,
            pointer,
            pointer,
            pointer,
        )
        self.get_control = advapi32.GetSecurityDescriptorControl
        self.get_control.restype = ctypes.c_int
        self.get_control.argtypes = (
            pointer,
            ctypes.POINTER(ctypes.c_ushort),
            ctypes.POINTER(ulong),
        )
        self.equal_sid = advapi32.EqualSid
        self.equal_sid.restype = ctypes.c_int
        self.equal_sid.argtypes = (pointer, pointer)
        self.local_free = kernel32.LocalFree
        self.local_free.restype = pointer
        self.local_free.argtypes = (pointer,)


_api: Final = w.loaded_once(_Advapi)


@final
class _Descriptor:
    """The owner and DACL of one handle (``GetSecurityInfo``), freed by :meth:`free`."""

    __slots__ = ("dacl", "descriptor", "owner")

    def __init__(self, handle: int, what: int) -> None:
        self.owner = ctypes.c_void_p()
        self.dacl = ctypes.c_void_p()
        self.descriptor = ctypes.c_void_p()
        error = _api().get_security_info(
            handle,
            SE_FILE_OBJECT,
            what,
            ctypes.byref(self.owner),
            None,
            ctypes.byref(self.dacl),
            None,
            ctypes.byref(self.descriptor),
        )
        if error != ERROR_SUCCESS:
            raise (
                _Unsupported if error in (ERROR_NOT_SUPPORTED, ERROR_INVALID_FUNCTION) else OSError
            )

    def protected(self) -> bool:
        control = ctypes.c_ushort(0)
        revision = ctypes.c_ulong(0)
        if not _api().get_control(self.descriptor, ctypes.byref(control), ctypes.byref(revision)):
            raise OSError
        return bool(control.value & SE_DACL_PROTECTED)

    def free(self) -> None:
        if self.descriptor:
            _api().local_free(self.descriptor)
            self.descriptor = ctypes.c_void_p()


class _Unsupported(Exception):
    """The file system keeps no security descriptors (FAT): there is nothing to keep."""


def keep_security(directory: int, leaf: str, temporary: int) -> bool | None:
    """Give ``temporary`` the DACL of ``leaf`` in ``directory``.

    Returns whether the owner differs (``owner_changed``), ``False`` where the file system
    keeps no security, and ``None`` when the DACL could not be read or given (the caller
    then stops: ``temporary_failed``, nothing changed).
    """
    status, target = rw.nt_open(
        directory, leaf, _TARGET_ACCESS, w.FILE_OPEN, w.FILE_NON_DIRECTORY_FILE
    )
    if status != w.STATUS_SUCCESS:
        return None
    try:
        try:
            source = _Descriptor(target, OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION)
        except _Unsupported:
            return False
        except OSError:
            return None
        try:
            protection = (
                PROTECTED_DACL_SECURITY_INFORMATION
                if source.protected()
                else UNPROTECTED_DACL_SECURITY_INFORMATION
            )
            error = _api().set_security_info(
                temporary,
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION | protection,
                None,
                None,
                source.dacl,
                None,
            )
            if error != ERROR_SUCCESS:
                return None
            mine = _Descriptor(temporary, OWNER_SECURITY_INFORMATION)
            try:
                return not _api().equal_sid(source.owner, mine.owner)
            finally:
                mine.free()
        except OSError:
            return None
        finally:
            source.free()
    finally:
        rw.close(target)


def dacl_text(handle: int) -> tuple[bool, bytes]:
    """Whether the handle's DACL is protected, and its raw bytes (for tests)."""
    descriptor = _Descriptor(handle, DACL_SECURITY_INFORMATION)
    try:
        if not descriptor.dacl:
            return descriptor.protected(), b""
        address = int(descriptor.dacl.value or 0)
        size = ctypes.c_ushort.from_address(address + 2).value  # ACL.AclSize
        return descriptor.protected(), ctypes.string_at(descriptor.dacl, size)
    finally:
        descriptor.free()
