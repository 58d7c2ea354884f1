"""The MCP server: each definition of a ``Dispatcher`` becomes one MCP tool.

Built on the low-level ``mcp.server.Server`` (``mcp>=2.3,<3``). Every call goes
through the dispatcher. A ``Result`` becomes a ``CallToolResult`` with the
content object as ``structuredContent``, the same JSON as text (shortened where both would
pass the wire's bound or the client's, ``_text_block``), and ``isError``;
an ``ExecutionError`` becomes a JSON-RPC error carrying its bounded message
(``MCPError``), never a raw exception. Each call runs in its own task; cancellation
of the request (MCP ``notifications/cancelled``, or the server stopping) cancels that
task once and waits for it (shielded, bounded), so no loop spins while a tool stops.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, final

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
    MAXIMUM_PAYLOAD_BYTES,
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    Progress,
    ReplaySafety,
    Reporter,
    Result,
)
from spice.agent.tools.coding import Config
from spice.agent.tools.coding.settling import outlast, settle

from ._answers import blocks_of, unknown_tool_problem
from ._clients import client_name
from ._dialects import Dialect, dialect_of, schema_in, text_chars_of
from ._json import arguments_text
from ._outputs import largest_answer_chars, output_schema, title_of

SERVER_NAME: Final = "spice-coding"
INSTRUCTIONS: Final = (
    "Coding tools for the worktree {root}: read a file page, replace a file atomically, "
    "and run one discrete argv without a shell. Paths are relative to the worktree root, "
    "or absolute beneath it. To change part of a file, send only the change: read it "
    "(read with limit 1 returns file_sha256 cheaply, without the file), then call replace "
    "with expected_sha256 and edits: [{{old_text, new_text}}], old_text copied exactly "
    "from the file and found there once. A successful replace answers with sha256, the "
    "file's new digest: pass it as expected_sha256 of the next replace of that file, "
    "without reading it again. For new files and whole rewrites, pass content (with "
    "create: true, or expected_sha256). 'stale' means the file changed: read it again."
)
"""The server's instructions (contract 10.2); ``{root}`` is the configured root."""
UNNAMED_ROOT: Final = "this server was given"
"""What the instructions say of the root when the server does not know it."""
RESULT_SIZE_META: Final = "anthropic/maxResultSizeChars"
"""The ``_meta`` key with which Claude Code lets a tool's answers through whole (up to it),
instead of saving those over 50,000 characters to a file and showing a preview."""
META_PREFIX: Final = "spice.agent/"
"""Prefix of the ``_meta`` keys that carry a definition's fingerprint and declarations."""

DATA_FAILURE_CODES: Final = frozenset({"command_failed"})
"""Failure codes answered with ``isError: false`` over MCP (contract 9.3).

A command that ran and exited non-zero (or was ended by a signal) is the answer to
"run the tests": clients that count ``isError`` as a tool failure (and retry or abort)
must not. Every other failure, ``timed_out`` included, keeps ``isError: true``.
"""

PROGRESS_HEARTBEAT_SECONDS: Final = 5.0
"""While a call runs, a client that sent a ``progressToken`` hears from it this often.

The contract asks for at least every 10 seconds, so clients that reset their request
timeout on progress never time out on a long command.
"""

HEARTBEAT_MESSAGE: Final = "the call is still running"
CANCELLED_CALL_SECONDS: Final = 60.0
"""How long a cancelled call's handler (and the server's shutdown) waits for the call to end.

The tools bound their own stopping (the shell's stop, grace, kill and join; a write's
worker), well within this; it only guards against a call that never ends.
"""

_REJECTED_PROBLEM: Final = "the call could not be formed from these arguments"


def _version() -> str:
    try:
        return importlib.metadata.version("spice-agent-coding")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def annotations_of(definition: Definition) -> ToolAnnotations:
    """The MCP hints a definition honestly supports."""
    return ToolAnnotations(
        title=title_of(definition.name),
        read_only_hint=definition.effect is Effect.READ_ONLY,
        destructive_hint=definition.effect is Effect.MUTATING,
        idempotent_hint=definition.replay_safety in {ReplaySafety.SAFE, ReplaySafety.IDEMPOTENT},
        open_world_hint=Capability.NETWORK_ACCESS in definition.capabilities,
    )


def instructions_for(config: Config | None) -> str:
    """The server's instructions, naming ``config``'s root when there is one."""
    return INSTRUCTIONS.format(root=UNNAMED_ROOT if config is None else config.root)


def tool_of(
    definition: Definition, config: Config | None = None, dialect: Dialect = Dialect.PORTABLE
) -> McpTool:
    """One MCP tool for one definition: name, title, description, input schema (in
    ``dialect``) and output schema, hints, fingerprint, and the largest answer it can give
    (under ``config``'s bounds; without a ``config``, the payload bound)."""
    largest = (
        MAXIMUM_PAYLOAD_BYTES if config is None else largest_answer_chars(definition.name, config)
    )
    return McpTool(
        name=definition.name,
        title=title_of(definition.name),
        description=definition.description,
        input_schema=schema_in(dialect, json.loads(definition.input_schema)),
        output_schema=output_schema(definition.name),
        annotations=annotations_of(definition),
        _meta={
            f"{META_PREFIX}fingerprint": definition.fingerprint,
            f"{META_PREFIX}effect": definition.effect.value,
            f"{META_PREFIX}replay_safety": definition.replay_safety.value,
            f"{META_PREFIX}capabilities": [c.value for c in definition.capabilities],
            RESULT_SIZE_META: largest,
        },
    )


def result_of(result: Result, chars: int | None = None) -> CallToolResult:
    """A dispatched ``Result`` as an MCP result: structured, as text, and ``isError``.

    The text is the result's own encoding and the structured content its decoded object
    (``Result.content_object``): nothing is encoded or parsed again here. A failure
    whose code is in ``DATA_FAILURE_CODES`` (a command that ran and failed) is data for
    the model, not a failed tool call: ``isError`` is false, the content keeps ``ok``,
    ``code`` and ``exit_code``. A whole image also comes as an image block (``_answers``).
    The text block fits beside the structured content within the wire's bound, and within
    ``chars`` characters where the client bounds them (``_text_block``).
    """
    blocks, content = blocks_of(result.content_object, result.content, chars)
    return CallToolResult(
        content=list(blocks),
        structured_content=content,
        is_error=result.is_error and content.get("code") not in DATA_FAILURE_CODES,
    )


def refusal(code: str, problem: str) -> CallToolResult:
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
    """Turns a call's progress into MCP progress notifications (when a token was sent).

    One counter for the tool's own reports and the heartbeats, so ``progress`` only grows.
    """

    __slots__ = ("_count", "_session")

    def __init__(self, session: ServerSession) -> None:
        self._session = session
        self._count = 0

    async def report(self, progress: Progress) -> None:
        self._count += 1
        await self._session.report_progress(float(self._count), None, progress.message)

    async def heartbeat(self) -> None:
        self._count += 1
        await self._session.report_progress(float(self._count), None, HEARTBEAT_MESSAGE)


@final
class CallTasks:
    """The dispatch tasks of one server.

    Each call runs in its own asyncio task, outside the SDK's cancel scope for the
    request: that scope re-delivers its cancellation on every event-loop iteration
    while the handler lives. The handler cancels the task exactly once and waits for it
    with the product's ``settling`` (idle even inside that scope: it waits shielded).
    """

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Result]] = set()

    def __len__(self) -> int:
        """How many calls are still running."""
        return sum(not task.done() for task in self._tasks)

    def start(self, dispatcher: Dispatcher, call: Call, reporter: Reporter) -> asyncio.Task[Result]:
        task = asyncio.get_running_loop().create_task(dispatcher.dispatch(call, reporter))
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Result]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            # Retrieved here too: a call that ends after its handler stopped waiting (a
            # cancel past the bound) has nobody left to look at its outcome.
            task.exception()

    async def settle(self, seconds: float | None = None) -> None:
        """Wait (at most ``seconds``, default ``CANCELLED_CALL_SECONDS``) for every call
        still running to end; a cancellation meanwhile is held back, then re-raised
        (``settling.outlast``)."""
        bound = CANCELLED_CALL_SECONDS if seconds is None else seconds
        running = {task for task in self._tasks if not task.done()}
        if running:
            await outlast(asyncio.gather(*running, return_exceptions=True), bound)


async def _outcome(
    task: asyncio.Task[Result], reporter: _SessionReporter, heartbeat_seconds: float
) -> Result:
    """The call's result; a heartbeat every ``heartbeat_seconds`` while it runs.

    On every exit before the call's end (the client's ``notifications/cancelled``, the
    server stopping, a heartbeat that fails): the call's task is cancelled once and
    waited for, shielded and bounded, then the same exception propagates.
    """
    try:
        while True:
            await asyncio.wait({task}, timeout=heartbeat_seconds)
            if task.done():
                break
            await reporter.heartbeat()
    except BaseException:
        task.cancel()
        await settle(task, CANCELLED_CALL_SECONDS)  # idle even in the SDK's cancel scope
        raise  # the same exception, even if the call ended some other way meanwhile
    try:
        return task.result()
    finally:
        # The task holds its exception, whose traceback holds this frame: without this
        # the cycle would keep the call and its arguments alive until a collection.
        del task


class Gate(Protocol):
    """What a transport may put around the handlers (the HTTP transport's scopes, limits and
    audit): the listing a request sees, and each call, given its id and the call itself."""

    def listing(self, ctx: ServerRequestContext[Any], tools: ListToolsResult) -> ListToolsResult:
        """The tools ``ctx``'s caller may see."""
        ...

    async def call(
        self,
        ctx: ServerRequestContext[Any],
        params: CallToolRequestParams,
        call_id: str,
        run: Callable[[], Awaitable[CallToolResult]],
    ) -> CallToolResult:
        """Run (or refuse) one call."""
        ...


def serving(
    dispatcher: Dispatcher,
    *,
    name: str = SERVER_NAME,
    heartbeat_seconds: float = PROGRESS_HEARTBEAT_SECONDS,
    config: Config | None = None,
    gate: Gate | None = None,
) -> tuple[Server[Any], CallTasks]:
    """``mcp_server`` and the set of its running calls, for a transport to wait on.

    A ``gate`` (the HTTP transport's) filters the listing and wraps each call."""
    if not isinstance(dispatcher, Dispatcher):
        raise TypeError("mcp_server takes a Dispatcher")
    if not heartbeat_seconds > 0:
        raise ValueError("the heartbeat interval must be positive")
    listings = {
        dialect: ListToolsResult(
            tools=[tool_of(d, config, dialect) for d in dispatcher.definitions]
        )
        for dialect in Dialect
    }
    schemas = {tool.name: tool.input_schema for tool in listings[Dialect.PORTABLE].tools}
    counter = itertools.count(1)
    calls = CallTasks()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        listing = listings[_dialect(ctx)]
        return listing if gate is None else gate.listing(ctx, listing)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        call_id = f"mcp-{next(counter)}"
        if gate is None:
            return await run_call(ctx, params, call_id)
        return await gate.call(ctx, params, call_id, lambda: run_call(ctx, params, call_id))

    async def run_call(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams, call_id: str
    ) -> CallToolResult:
        try:
            call = Call(call_id, params.name, arguments_text(params.arguments))
        except ValueError:
            names = [d.name for d in dispatcher.definitions]
            if params.name not in names:
                return refusal("unknown_tool", unknown_tool_problem(params.name, names))
            return refusal("invalid_arguments", _REJECTED_PROBLEM)
        reporter = _SessionReporter(ctx.session)
        task = calls.start(dispatcher, call, reporter)
        del call
        try:
            result = await _outcome(task, reporter, heartbeat_seconds)
        except ExecutionError as error:
            raise protocol_error(error) from None
        finally:
            # A traceback that keeps this frame would otherwise keep the task and its call.
            del task
        return result_of(result, text_chars_of(_dialect(ctx)))

    server: Server[Any] = Server(
        name,
        version=_version(),
        instructions=instructions_for(config),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=schemas.get,
    )
    return server, calls


def _dialect(ctx: ServerRequestContext[Any]) -> Dialect:
    """The dialect of ``ctx``'s client: its listing and its answers follow its name, known
    on each request (``_clients``: the session, ``_meta``, the HTTP caller)."""
    return dialect_of(client_name(ctx.session.client_params, ctx.meta, ctx.request))


def mcp_server(
    dispatcher: Dispatcher,
    *,
    name: str = SERVER_NAME,
    heartbeat_seconds: float = PROGRESS_HEARTBEAT_SECONDS,
    config: Config | None = None,
) -> Server[Any]:
    """A low-level MCP ``Server`` that lists and calls the dispatcher's tools.

    Run it over any transport, e.g. in process with ``mcp.Client(mcp_server(d))``
    or over stdio with ``serve_stdio``. While a call runs, a client that sent a
    ``progressToken`` gets a progress notification every ``heartbeat_seconds``.
    With the tools' ``config``, the instructions name its root and each tool's
    ``anthropic/maxResultSizeChars`` follows its bounds.
    """
    return serving(dispatcher, name=name, heartbeat_seconds=heartbeat_seconds, config=config)[0]
