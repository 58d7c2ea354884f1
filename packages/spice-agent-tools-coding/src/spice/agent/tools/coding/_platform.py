"""The one place that picks the platform's file-system implementation (contract 10.4).

- POSIX: ``_root`` (``openat2``, else a no-follow walk beneath a held descriptor) for
  ``read``, ``replace`` and the shell's workdir.
- Windows: the shell's workdir check is ``_windows_workdir``; ``read`` and ``replace``
  answer ``unsupported_platform`` until the handle-relative root (``NtCreateFile`` beneath
  a held directory handle, no reparse point followed) is plugged in here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

Identity = tuple[int, int]
WorkdirCheck = Callable[[str, str], tuple[Identity, str]]


def is_windows(platform: str | None = None) -> bool:
    """Whether ``platform`` (``sys.platform`` by default; ``os.name`` is asked too) is Windows."""
    return (sys.platform if platform is None else platform) == "win32" or os.name == "nt"


def root_supported(platform: str | None = None) -> bool:
    """Whether ``read`` and ``replace`` have a root implementation on ``platform``."""
    return not is_windows(platform)


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
        from ._windows_workdir import inspect_workdir  # noqa: PLC0415 - Windows only

        return inspect_workdir
    return posix
