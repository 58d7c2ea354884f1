"""The one seam that picks this platform's path rules and file opening for ``read`` and
``replace``: ``_root`` (POSIX descriptors) or ``_root_windows`` (NT handles beneath a
held directory handle, ``_winnames``' rules).
"""

from __future__ import annotations

import os
import sys
from typing import Final

from ._root import PathError

__all__ = ["WINDOWS", "PathError", "clean_path", "open_regular", "pread"]

WINDOWS: Final = sys.platform == "win32"
"""Whether ``read`` and ``replace`` take the Windows route."""

if sys.platform == "win32":
    from ._root_windows import open_regular, pread
    from ._winnames import clean_windows_path as clean_path
else:
    from ._root import clean_path, open_beneath, open_root

    pread = os.pread

    def open_regular(root: str, cleaned: str) -> int:
        """Open the regular file ``cleaned`` beneath ``root`` for reading (the caller's fd)."""
        root_fd = open_root(root)
        try:
            return open_beneath(root_fd, cleaned, os.O_RDONLY, follow_final=True, regular=True)
        finally:
            os.close(root_fd)
