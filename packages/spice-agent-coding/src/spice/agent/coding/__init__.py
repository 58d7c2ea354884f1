"""The Spice Agent coding application: POSIX platform, composition, CLI and MCP server."""

from __future__ import annotations

from ._posix import PosixLauncher as PosixLauncher
from ._posix import PosixResolver as PosixResolver

__all__ = ["PosixLauncher", "PosixResolver"]
