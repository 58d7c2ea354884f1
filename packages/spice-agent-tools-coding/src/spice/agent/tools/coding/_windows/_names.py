"""Which path names ``read`` and ``replace`` accept on Windows: a pure, portable rule.

Windows reads more into a name than POSIX does. Each of these is ``invalid_arguments``
here, before anything is opened, so that a name never means something else than the
file it spells beneath the root:

* a drive or UNC prefix that does not lie beneath the root (``D:\\x``, ``C:x``,
  ``\\\\server\\share``, the device namespaces ``\\\\?\\`` and ``\\\\.\\``), and a
  rooted name without a drive (``\\x``); an absolute ``C:\\...`` beneath the configured
  root (compared without regard to case, as Windows does) means the relative remainder;
* ``:`` anywhere (an alternate data stream, ``file.txt:hidden``), and the other
  characters Win32 forbids in names (``< > " | ? *``);
* a reserved device name as a component, with any extension and whatever its case
  (``CON``, ``nul.txt``, ``COM1.log``, ``LPT9``, ``CONIN$``, ...);
* a component ending in a dot or a space (Win32 strips them: ``a.`` would name ``a``);
* a component shaped like an 8.3 short name (``PROGRA~1``, ``AVERYL~1.TXT``,
  ``AB12~1``): it could be the generated alias of another, longer entry.

Both separators are accepted; the answer shows the cleaned path with ``/``. The rest
of the cleaning (``..`` applied lexically, empty and ``.`` components dropped, the
bounds, control characters, surrounding whitespace) is ``clean_path``'s, unchanged.
This module touches no disk and runs on every platform, so its rules are tested on
Linux too.
"""

from __future__ import annotations

import ntpath
from typing import Final

from .._root import PathError, clean_path

RESERVED_NAMES: Final = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{device}{digit}" for device in ("COM", "LPT") for digit in "123456789\u00b9\u00b2\u00b3"}
)
"""Device names Windows resolves in any directory (upper case; the base before the first dot)."""

FORBIDDEN_CHARACTERS: Final = frozenset('<>:"|?*')
"""Characters Win32 refuses in a name; ``:`` also selects an alternate data stream."""

SHORT_NAME_BASE: Final = 8
"""Longest base of an 8.3 short name."""

SHORT_NAME_EXTENSION: Final = 3
"""Longest extension of an 8.3 short name."""

_PREFIX: Final = "a drive, UNC or device prefix must name a path beneath the worktree root"
_ROOTED: Final = "a path must not start with a separator unless it names a drive beneath the root"
_STREAM: Final = "a path must not contain ':' (alternate data streams) or < > \" | ? *"
_DEVICE: Final = "a path component must not be a reserved device name (CON, NUL, COM1, ...)"
_TRAILING: Final = "a path component must not end with a dot or a space"
_SHORT: Final = "a path component must not have the shape of an 8.3 short name (NAME~1.EXT)"


def _invalid(message: str) -> PathError:
    return PathError("invalid_arguments", message)


def clean_windows_path(raw: str, *, root: str | None = None, names_root: bool = True) -> str:
    """Check and clean a Windows path; return the ``/``-separated relative display path.

    ``root`` is the configured root (absolute, as ``Config`` keeps it). Raises
    ``PathError("invalid_arguments")`` for every name in the module docstring and for
    everything ``clean_path`` refuses.

    >>> clean_windows_path("src\\\\pkg\\\\mod.py")
    'src/pkg/mod.py'
    >>> clean_windows_path("C:\\\\Work\\\\Tree\\\\a.txt", root="C:\\\\work\\\\tree")
    'a.txt'
    """
    if not isinstance(raw, str) or not raw:
        return clean_path(raw, names_root=names_root)  # its own "empty" answer
    text = raw.replace("\\", "/")
    if text.startswith("//"):
        raise _invalid(_PREFIX)  # UNC, \\?\ and \\.\ alike
    if len(text) >= 2 and text[1] == ":":
        text = _beneath_root(text, root)
    elif text.startswith("/"):
        raise _invalid(_ROOTED)
    cleaned = clean_path(text, names_root=names_root)
    if cleaned != ".":
        for component in cleaned.split("/"):
            check_component(component)
    return cleaned


def _beneath_root(text: str, root: str | None) -> str:
    """The remainder of a drive-absolute ``text`` beneath ``root``, or invalid_arguments."""
    if root is None or len(text) < 3 or text[2] != "/" or not text[0].isascii():
        raise _invalid(_PREFIX)  # "C:x" is relative to a drive's current directory
    configured = ntpath.normcase(ntpath.normpath(root.replace("/", "\\")))
    drive, _ = ntpath.splitdrive(configured)
    if len(drive) != 2:  # only a drive-letter root ("C:") compares
        raise _invalid(_PREFIX)
    # Lexical ``..`` first, as clean_path does for a relative path, without leaving the drive.
    wanted = ntpath.normpath(text.replace("/", "\\"))
    folded = ntpath.normcase(wanted)
    if folded == configured:
        return "."
    prefix = configured if configured.endswith("\\") else configured + "\\"
    if not folded.startswith(prefix):
        raise _invalid(_PREFIX)
    return wanted[len(prefix) :].replace("\\", "/")


def check_component(name: str) -> None:
    """Refuse one component Windows would read as something else (see the module docstring)."""
    if any(char in FORBIDDEN_CHARACTERS for char in name):
        raise _invalid(_STREAM)
    if name.endswith((".", " ")):
        raise _invalid(_TRAILING)
    base = name.split(".", 1)[0].rstrip(" ").upper()
    if base in RESERVED_NAMES:
        raise _invalid(_DEVICE)
    if is_short_name_shape(name):
        raise _invalid(_SHORT)


def is_short_name_shape(name: str) -> bool:
    """Whether ``name`` could be a generated 8.3 alias: ``BASE~X[.EXT]``, base <= 8, ext <= 3.

    A ``~`` followed by at least one character in a base of at most eight characters
    covers both NTFS's forms (``PROGRA~1``, ``AB12~1``) and Wine's (``AVER~DAC``).
    """
    base, dot, extension = name.partition(".")
    if "." in extension or " " in name:
        return False
    if dot and not 1 <= len(extension) <= SHORT_NAME_EXTENSION:
        return False
    tilde = base.find("~")
    return 0 <= tilde < len(base) - 1 and len(base) <= SHORT_NAME_BASE
