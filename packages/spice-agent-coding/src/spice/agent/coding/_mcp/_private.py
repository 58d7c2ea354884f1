"""Files only their user may open: the token file and the audit log (contract 11.2).

Created private and checked private, on both platforms:

- POSIX: created with mode 0600; refused when another user owns it or when group or
  others have any mode bit.
- Windows (``_windows._private``): created by ``CreateFileW`` with a protected access list
  that names the user alone (nothing inherited, so no moment exists where the directory's
  list applies); refused when its owner is not the user, ``SYSTEM`` or ``Administrators``,
  or when its access list lets any other account read, write or re-permission it
  (``_windows._dacl``). A file made with the system's defaults in a user's profile passes
  (the user, ``SYSTEM`` and ``Administrators``); one beneath ``C:\\`` or a shared folder,
  where ``Users`` or ``Everyone`` may read, is refused.

An open file is judged through its descriptor (``fstat``, or its handle's security), never
by its name again. Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Final

__all__ = ["NOT_OWNED", "OPEN_TO_OTHERS", "access_problem", "create_private", "inside"]

NOT_OWNED: Final = "owner"
"""``access_problem``'s word for a file owned by another account."""
OPEN_TO_OTHERS: Final = "open"
"""``access_problem``'s word for a file others may open."""

_POSIX_OPEN_TO_OTHERS: Final = 0o077


def inside(path: str, places: Iterable[str]) -> bool:
    """Whether ``path`` (links resolved, existing or not) is one of ``places`` or lies
    beneath one (each resolved too): where a contained command could change it."""
    real = os.path.realpath(path)
    for place in places:
        top = os.path.realpath(place)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False


def access_problem(fd: int, info: os.stat_result) -> str | None:
    """``NOT_OWNED``, ``OPEN_TO_OTHERS`` or ``None`` for the open file ``fd`` (its ``fstat``
    is ``info``); ``OSError`` when its security cannot be read (Windows)."""
    if sys.platform == "win32":
        from .._platform import judge_private  # noqa: PLC0415 - Windows only

        owned, opened = judge_private(fd)
    else:
        owned, opened = info.st_uid == os.geteuid(), bool(info.st_mode & _POSIX_OPEN_TO_OTHERS)
    if not owned:
        return NOT_OWNED
    return OPEN_TO_OTHERS if opened else None


def create_private(path: str, flags: int) -> int:
    """Open ``path`` with ``flags`` (``O_CREAT`` among them), created private when absent.

    POSIX: ``os.open`` with mode 0600 (the caller's flags decide about links and
    existence). Windows: a new file is made with the user's protected access list; an
    existing one is opened as it is (``access_problem`` then judges it).
    """
    if sys.platform == "win32":
        from .._platform import create_private as create_private_windows  # noqa: PLC0415

        return create_private_windows(path, flags)
    return os.open(path, flags, 0o600)
