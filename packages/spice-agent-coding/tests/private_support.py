"""Files private to their user, or opened up to others, on either platform (for the tests
of the token file and the audit log). POSIX: mode 0600, and group's or others' bits added.
Windows: a protected access list naming the user alone (the server's own
``_mcp._private.create_private``), and one that also lets Everyone read.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path
from typing import Final

from spice.agent.coding._mcp._private import create_private
from spice.agent.coding._windows import _dacl as dacl

WINDOWS: Final = sys.platform == "win32"
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
_FILE_READ_DATA: Final = 0x1


def private(path: Path, text: str) -> Path:
    """Write ``text`` (LF line ends) to ``path``, a file only its user may open."""
    if WINDOWS:
        path.unlink(missing_ok=True)
        fd = create_private(str(path), _CREATE)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    else:
        path.write_bytes(text.encode())
        path.chmod(0o600)
    return path


def _descriptor_with_everyone() -> bytes:
    from spice.agent.coding._windows import _api  # noqa: PLC0415 - Windows only

    user, everyone = _api.current_user_sid(), dacl.sid_bytes(dacl.EVERYONE)
    entries = b""
    for mask, sid in ((dacl.FILE_ALL_ACCESS, user), (_FILE_READ_DATA, everyone)):
        body = struct.pack("<I", mask) + sid
        entries += struct.pack("<BBH", 0, 0, 4 + len(body)) + body
    listing = struct.pack("<BBHHH", 2, 0, 8 + len(entries), 2, 0) + entries
    head = struct.Struct("<BBHIIII")
    return head.pack(1, 0, 0x8000 | 0x1000 | 0x0004, 0, 0, 0, head.size) + listing


def open_up(path: Path, mode: int = 0o604) -> Path:
    """Let others open ``path`` (its content kept): ``mode`` on POSIX, Everyone's read on
    Windows (the file made anew with that list)."""
    if not WINDOWS:
        if not path.exists():
            path.write_bytes(b"")
        path.chmod(mode)
        return path
    from spice.agent.coding._windows import _api  # noqa: PLC0415 - Windows only

    kept = path.read_bytes() if path.exists() else b""
    path.unlink(missing_ok=True)
    handle = _api.create_private(str(path), _descriptor_with_everyone())
    _api.close_handle(handle)
    path.write_bytes(kept)
    return path


def security_of(path: Path) -> tuple[bytes | None, bytes | None]:
    """The owner SID's and the DACL's bytes of ``path`` as the system gives them (Windows)."""
    if sys.platform != "win32":
        raise AssertionError("Windows only")
    import msvcrt  # noqa: PLC0415 - Windows only

    from spice.agent.coding._windows import _api  # noqa: PLC0415 - Windows only

    fd = os.open(path, os.O_RDONLY)
    try:
        return _api.file_security(msvcrt.get_osfhandle(fd))
    finally:
        os.close(fd)


def is_private(path: Path) -> bool:
    """Whether ``path`` is its user's alone (mode 0600, or no account beside the user,
    ``SYSTEM`` and ``Administrators`` in its access list)."""
    if sys.platform != "win32":
        return path.stat().st_mode & 0o777 == 0o600
    from spice.agent.coding._windows import _api  # noqa: PLC0415 - Windows only

    user = dacl.sid_text(_api.current_user_sid())
    trusted = frozenset({user, dacl.SYSTEM, dacl.ADMINISTRATORS})
    return not dacl.others_with_access(security_of(path)[1], trusted)
