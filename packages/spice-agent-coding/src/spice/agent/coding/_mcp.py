"""The MCP server: each definition of a ``Dispatcher`` becomes one MCP tool.

Built on the low-level ``mcp.server.Server`` (``mcp>=2.3,<3``). Every call goes
through the dispatcher. A ``Result`` becomes a ``CallToolResult`` with the
content object as ``structuredContent``, the same JSON as text, and ``isError``;
an ``ExecutionError`` becomes a JSON-RPC error carrying its bounded message
(``MCPError``), never a raw exception. Cancellation of the request (MCP
``notifications/cancelled``, or the connection closing) cancels the call's task.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
from collections.abc import Iterable
from typing import Any, Final, final

from mcp.server import Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp.types import Tool as McpTool

from spice.agent.dispatch import Dispatcher
from spice.agent.tool import (
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    Progress,
    ReplaySafety,
    Result,
)

from ._json import arguments_text

SERVER_NAME: Final = "spice-coding"
INSTRUCTIONS: Final = (
    "Coding tools for one worktree: read a file page, replace a file atomically "
    "(pass the sha256 from a complete read, or create=true), and run one discrete "
    "argv without a shell. Paths are relative to the worktree root, or absolute beneath it."
)
META_PREFIX: Final = "spice.agent/"
"""Prefix of the ``_meta`` keys that carry a definition's fingerprint and declarations."""

_REJECTED_PROBLEM: Final = "the call could not be formed from these arguments"
_UNKNOWN_PROBLEM: Final = "no tool of that name is available"


def _version() -> str:
    try:
        return importlib.metadata.version("spice-agent-coding")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def annotations_of(definition: Definition) -> ToolAnnotations:
    """The MCP hints a definition honestly supports."""
    return ToolAnnotations(
        read_only_hint=definition.effect is Effect.READ_ONLY,
        destructive_hint=definition.effect is Effect.MUTATING,
        idempotent_hint=definition.replay_safety in {ReplaySafety.SAFE, ReplaySafety.IDEMPOTENT},
        open_world_hint=Capability.NETWORK_ACCESS in definition.capabilities,
    )


def tool_of(definition: Definition) -> McpTool:
    """One MCP tool for one definition: name, description, input schema, hints, fingerprint."""
    return McpTool(
        name=definition.name,
        description=definition.description,
        input_schema=json.loads(definition.input_schema),
        annotations=annotations_of(definition),
        _meta={
            f"{META_PREFIX}fingerprint": definition.fingerprint,
            f"{META_PREFIX}effect": definition.effect.value,
            f"{META_PREFIX}replay_safety": definition.replay_safety.value,
            f"{META_PREFIX}capabilities": [c.value for c in definition.capabilities],
        },
    )


def result_of(result: Result) -> CallToolResult:
    """A dispatched ``Result`` as an MCP result: structured, as text, and ``isError``.

    The text is the result's own encoding and the structured content its decoded object
    (``Result.content_object``): nothing is encoded or parsed again here.
    """
    return CallToolResult(
        content=[TextContent(type="text", text=result.content)],
        structured_content=dict(result.content_object),
        is_error=result.is_error,
    )


def _refusal(code: str, problem: str) -> CallToolResult:
    content: dict[str, object] = {"ok": False, "code": code, "message": problem}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(content, separators=(",", ":")))],
        structured_content=content,
        is_error=True,
    )


def protocol_error(error: ExecutionError) -> MCPError:
    """The JSON-RPC error for an ``ExecutionError``: its bounded message, state and retry."""
    return MCPError(
        code=INTERNAL_ERROR,
        message=error.message,
        data={"call_id": error.call_id, "state": error.state.value, "retry": error.retry.value},
    )


@final
class _SessionReporter:
    """Turns a call's progress into MCP progress notifications (when a token was sent)."""

    __slots__ = ("_count", "_session")

    def __init__(self, session: ServerSession) -> None:
        self._session = session
        self._count = 0

    async def report(self, progress: Progress) -> None:
        self._count += 1
        await self._session.report_progress(float(self._count), None, progress.message)


def mcp_server(dispatcher: Dispatcher, *, name: str = SERVER_NAME) -> Server[Any]:
    """A low-level MCP ``Server`` that lists and calls the dispatcher's tools.

    Run it over any transport, e.g. in process with ``mcp.Client(mcp_server(d))``
    or over stdio with ``serve_stdio``.
    """
    if not isinstance(dispatcher, Dispatcher):
        raise TypeError("mcp_server takes a Dispatcher")
    listing = ListToolsResult(tools=[tool_of(d) for d in dispatcher.definitions])
    ids: Iterable[int] = itertools.count(1)
    counter = iter(ids)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        call_id = f"mcp-{next(counter)}"
        try:
            call = Call(call_id, params.name, arguments_text(params.arguments))
        except ValueError:
            if params.name not in {d.name for d in dispatcher.definitions}:
                return _refusal("unknown_tool", _UNKNOWN_PROBLEM)
            return _refusal("invalid_arguments", _REJECTED_PROBLEM)
        try:
            result = await dispatcher.dispatch(call, _SessionReporter(ctx.session))
        except ExecutionError as error:
            raise protocol_error(error) from None
        return result_of(result)

    return Server(
        name,
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
