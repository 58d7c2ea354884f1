"""The Windows half of ``_mcp._private``: a file judged by its owner and access list, and
created with a protected access list naming the user alone.

The rules on the bytes are ``_dacl``'s (pure, tested everywhere); the calls are ``_api``'s.
Windows only: measured under Wine (``make test-windows``).
"""

from __future__ import annotations

import os
import sys
from typing import Final

from . import _api as api
from . import _dacl as dacl

__all__ = ["create_private", "judge"]

_BINARY: Final = getattr(os, "O_BINARY", 0)


def _trusted() -> frozenset[str]:
    """The user, ``SYSTEM`` and ``Administrators`` (which owns what an elevated user makes)."""
    return frozenset({dacl.sid_text(api.current_user_sid()), dacl.SYSTEM, dacl.ADMINISTRATORS})


def judge(fd: int) -> tuple[bool, bool]:
    """Whether the open file ``fd`` is owned by a trusted account, and whether its access
    list lets any other account in (``OSError`` when its security cannot be read)."""
    if sys.platform != "win32":
        raise OSError("Windows only")
    import msvcrt  # noqa: PLC0415 - Windows only

    owner, listed = api.file_security(msvcrt.get_osfhandle(fd))
    trusted = _trusted()
    try:
        owned = owner is not None and dacl.sid_text(owner) in trusted
    except ValueError:
        owned = False
    return owned, bool(dacl.others_with_access(listed, trusted))


def create_private(path: str, flags: int) -> int:
    """A descriptor of ``path``: made anew with the user's protected list when absent (no
    moment exists where the directory's list applies), else opened as it is."""
    if sys.platform != "win32":
        raise OSError("Windows only")
    import msvcrt  # noqa: PLC0415 - Windows only

    try:
        handle = api.create_private(path, dacl.private_descriptor(api.current_user_sid()))
    except FileExistsError:
        if flags & os.O_EXCL:
            raise
        return os.open(path, (flags & ~os.O_CREAT) | _BINARY)
    try:  # the handle reads and writes; the descriptor keeps only the appending
        return msvcrt.open_osfhandle(handle, flags & os.O_APPEND)
    except BaseException:
        api.close_handle(handle)
        raise
