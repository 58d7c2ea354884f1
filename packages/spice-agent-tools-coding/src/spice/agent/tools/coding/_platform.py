"""The one place that picks the platform's file-system implementation (contract 10.4).

- POSIX: ``_root`` (``openat2``, else a no-follow walk beneath a held descriptor) for
  ``read``, ``replace`` and the shell's workdir; ``clean_path`` for names.
- Windows: ``read`` and ``replace`` open every name beneath a held NT directory handle
  (``_windows._root``: ``NtCreateFile`` with ``RootDirectory``, no reparse point followed),
  names are checked by ``_windows._names``; ``replace``'s worker is ``_windows._replace``
  (picked by ``ReplaceTool``); the shell's workdir check is ``_windows._workdir``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Final

from ._root import PathError
from ._windows import _api as _winapi

__all__ = [
    "BATCH_EXTENSIONS",
    "WINDOWS",
    "PathError",
    "batch_file",
    "clean_path",
    "is_windows",
    "open_regular",
    "pread",
    "root_supported",
    "workdir_check",
]

Identity = tuple[int, int]
WorkdirCheck = Callable[[str, str], tuple[Identity, str]]

WINDOWS: Final = sys.platform == "win32"
"""Whether ``read`` and ``replace`` take the Windows route in this process."""

if sys.platform == "win32":
    from ._windows._names import clean_windows_path as clean_path
    from ._windows._root import open_regular, pread
else:
    from ._root import clean_path, open_beneath, open_root

    def pread(fd: int, count: int, offset: int) -> bytes:
        """``os.pread`` (looked up at the call: a POSIX-only name)."""
        return os.pread(fd, count, offset)

    def open_regular(root: str, cleaned: str) -> int:
        """Open the regular file ``cleaned`` beneath ``root`` for reading (the caller's fd)."""
        root_fd = open_root(root)
        try:
            return open_beneath(root_fd, cleaned, os.O_RDONLY, follow_final=True, regular=True)
        finally:
            os.close(root_fd)


def is_windows(platform: str | None = None) -> bool:
    """Whether ``platform`` (``sys.platform`` by default; ``os.name`` is asked too) is Windows."""
    return (sys.platform if platform is None else platform) == "win32" or os.name == "nt"


def root_supported(platform: str | None = None) -> bool:
    """Whether ``read`` and ``replace`` have a root implementation on ``platform``: POSIX
    always; Windows where the Windows API is there (a faked platform off Windows is not)."""
    return not is_windows(platform) or _winapi.available()


BATCH_EXTENSIONS = frozenset({".bat", ".cmd"})
"""What Windows runs through ``cmd.exe``: refused as a shell ``argv[0]`` there."""


def batch_file(name: str) -> bool:
    """Whether ``name`` ends in ``.bat`` or ``.cmd`` (any case; trailing dots and spaces,
    which Windows strips, do not hide it)."""
    stripped = name.rstrip(". ")
    return any(stripped.lower().endswith(extension) for extension in BATCH_EXTENSIONS)


def workdir_check(posix: WorkdirCheck) -> WorkdirCheck:
    """The shell's workdir check for this platform (``posix`` is the POSIX one)."""
    if is_windows():
        from ._windows._workdir import inspect_workdir  # noqa: PLC0415 - Windows only

        return inspect_workdir
    return posix
