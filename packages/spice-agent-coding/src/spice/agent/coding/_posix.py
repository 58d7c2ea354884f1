"""The POSIX process platform: ``PosixResolver`` and ``PosixLauncher``.

The implementation lives in ``_posix_resolver`` and ``_posix_launcher``; only the
``_posix*`` modules of the application start processes (see ``docs/platform.md``).
"""

from __future__ import annotations

from ._posix_launcher import PosixLauncher, PosixProcess
from ._posix_resolver import PosixResolver

__all__ = ["PosixLauncher", "PosixProcess", "PosixResolver"]
