"""The Spice Agent coding application: POSIX platform, composition, CLI and MCP server.

Compose the tools for one worktree and reach them through one dispatcher::

    async with compose(resolve_config("/abs/worktree")) as dispatcher:
        result = await dispatcher.dispatch(Call("1", "read", '{"path": "README.md"}'))

``mcp_server(dispatcher)`` builds the MCP server for it, and ``serve_stdio``
serves it on stdin/stdout. Those two load the MCP SDK on first use only, so
importing this package (and the CLI's ``tools`` and ``call``) never does. The
optional ``dishka`` integration lives in ``spice.agent.coding.dishka``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._compose import compose as compose
from ._compose import resolve_config as resolve_config
from ._platform import PosixLauncher as PosixLauncher
from ._platform import PosixResolver as PosixResolver

if TYPE_CHECKING:
    from ._mcp._server import mcp_server as mcp_server
    from ._mcp._stdio import serve_stdio as serve_stdio

__all__ = [
    "PosixLauncher",
    "PosixResolver",
    "compose",
    "mcp_server",
    "resolve_config",
    "serve_stdio",
]


def __getattr__(name: str) -> object:
    if name == "mcp_server":
        from ._mcp._server import mcp_server  # noqa: PLC0415 - the MCP SDK loads on first use only

        return mcp_server
    if name == "serve_stdio":
        from ._mcp._stdio import serve_stdio  # noqa: PLC0415 - the MCP SDK loads on first use only

        return serve_stdio
    raise AttributeError(name)
