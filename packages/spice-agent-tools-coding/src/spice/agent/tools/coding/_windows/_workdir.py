"""The shell's workdir check on Windows: plain names, no reparse point, a directory.

Windows has no ``openat``: the workdir is checked component by component from the root
with ``lstat`` (which does not follow a reparse point), twice, like the POSIX check
(before the lookup and immediately before the launch). A component is refused when it is
a symbolic link, a junction or any other reparse point (``path_escape``), or when it is
not a directory (``workdir_unavailable``). Names Windows would read otherwise are
``invalid_arguments``: a separator or ``:`` (drive, stream), a reserved device name
(``CON``, ``NUL``, ``COM1``, ... with any extension), a trailing dot or space, and a
``~`` followed by a digit (an 8.3 alias may name another entry).

This is the shell's check only; ``read`` and ``replace`` open every name beneath a held
directory handle (``_windows._root``, contract 10.4).
"""

from __future__ import annotations

import os
import re
import stat
from typing import Final

from .._root import PathError

FILE_ATTRIBUTE_REPARSE_POINT: Final = 0x400

RESERVED_NAMES: Final = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{prefix}{digit}" for prefix in ("COM", "LPT") for digit in "123456789\u00b9\u00b2\u00b3"}
)
"""Device names Windows resolves in any directory, whatever the extension."""

_SHORT_ALIAS: Final = re.compile(r"~[0-9]")
_INVALID_NAME: Final = (
    "the workdir has a name Windows reads differently (a device, stream or alias)"
)
_REPARSE: Final = "a component of the workdir is a symbolic link or junction"
_NOT_DIRECTORY: Final = "the workdir is not an existing directory"
_ROOT: Final = "the worktree root is not available"


def check_name(name: str) -> None:
    """Refuse a path component Windows would read as something else (``invalid_arguments``)."""
    stem = name.split(".", 1)[0].rstrip(" ").upper()
    if (
        not name
        or any(c in name for c in '\\/:*?"<>|')
        or name.endswith((".", " "))
        or stem in RESERVED_NAMES
        or _SHORT_ALIAS.search(name) is not None
    ):
        raise PathError("invalid_arguments", _INVALID_NAME)


def _is_reparse_point(status: os.stat_result) -> bool:
    attributes = getattr(status, "st_file_attributes", 0)
    return stat.S_ISLNK(status.st_mode) or bool(attributes & FILE_ATTRIBUTE_REPARSE_POINT)


def inspect_workdir(root: str, cleaned: str) -> tuple[tuple[int, int], str]:
    """The workdir's identity and absolute path, checked component by component."""
    try:
        status = os.stat(root)
    except (OSError, ValueError):
        raise PathError("root_unavailable", _ROOT) from None
    if not stat.S_ISDIR(status.st_mode):
        raise PathError("root_unavailable", _ROOT)
    path = root
    names = [] if cleaned == "." else cleaned.split("/")
    for name in names:
        check_name(name)
    for name in names:
        path = os.path.join(path, name)
        try:
            status = os.lstat(path)
        except (OSError, ValueError):
            raise PathError("workdir_unavailable", _NOT_DIRECTORY) from None
        if _is_reparse_point(status):
            raise PathError("path_escape", _REPARSE)
        if not stat.S_ISDIR(status.st_mode):
            raise PathError("workdir_unavailable", _NOT_DIRECTORY)
    return (status.st_dev, status.st_ino), os.path.normpath(path)
