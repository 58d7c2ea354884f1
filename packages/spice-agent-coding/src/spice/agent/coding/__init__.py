"""The Spice Agent coding application: POSIX platform, composition, CLI and MCP server."""

from __future__ import annotations

__all__: list[str] = []
