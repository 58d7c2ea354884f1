"""What the HTTP transport puts around every call: scopes, concurrency caps and the audit.

The caller is the authenticated user the transport attached to the request
(``ctx.request.user``: the token's name and scopes). The listing shows only the tools its
scopes allow, and every call is judged again when it arrives, whatever the listing said: a
served tool outside the scopes answers ``forbidden``. Past ``--max-concurrent-calls`` calls
in flight (``shell``: at most ``SHELL_CALLS_CAP``) a call answers ``busy`` at once. Each
call, refused or run, writes one audit line (``_audit``). When the server stops and its
grace has passed, ``stop`` ends every running call: each is cancelled (its processes
ended, as for a client that left) and its client answered with a JSON-RPC error saying
the server stopped, instead of a cut stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, final

from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent

from ._audit import UNKNOWN_TOOL, AuditLog, AuditRecord, now_text
from ._json import arguments_text
from ._server import refusal
from ._tokens import tools_for

SHELL_CALLS_CAP: Final = 4
"""At most this many ``shell`` calls in flight at once over HTTP (fewer if the cap is lower)."""

STOPPED_CODE: Final = -32000
"""The JSON-RPC error code of a call ended by the server stopping."""
STOPPED_MESSAGE: Final = (
    "the server stopped before the call finished: the call was cancelled "
    "(a replace may or may not have been committed: read the file again)"
)
FORBIDDEN: Final = "forbidden"
STOPPED: Final = "stopped"
BUSY: Final = "busy"
CANCELLED: Final = "cancelled"
EXECUTION_ERROR: Final = "execution_error"
INTERNAL: Final = "internal_error"
OK: Final = "ok"

_FORBIDDEN_PROBLEM: Final = "this token's scopes do not allow that tool"
_BUSY_PROBLEM: Final = "too many calls are running; try again when one has finished"
_NO_PEER: Final = "-"
_NO_PRINCIPAL: Final = "-"


def _principal(ctx: ServerRequestContext[Any]) -> tuple[str, frozenset[str], str]:
    """The caller's token name, the tools its scopes allow, and its peer (fail closed)."""
    request = ctx.request
    scope: dict[str, Any] = getattr(request, "scope", None) or {}
    user = scope.get("user")
    client = scope.get("client")
    peer = _NO_PEER if not client else f"{client[0]}:{client[1]}"[:64]
    if not isinstance(user, AuthenticatedUser):
        return _NO_PRINCIPAL, frozenset(), peer
    return user.access_token.client_id, tools_for(user.scopes), peer


def _digest(params: CallToolRequestParams) -> str:
    try:
        text = arguments_text(params.arguments)
    except (TypeError, ValueError):
        return "-"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _outcome_of(result: CallToolResult) -> str:
    content = result.structured_content or {}
    code = content.get("code")
    if content.get("ok") is False and isinstance(code, str) and len(code) <= 64:
        return code
    return OK


def _bytes_of(result: CallToolResult) -> int:
    return sum(len(c.text.encode("utf-8")) for c in result.content if isinstance(c, TextContent))


@final
class _Stopped(MCPError):
    """A call ended by ``HttpGate.stop``."""


@final
class HttpGate:
    """Scopes, caps and the audit around the MCP handlers (``_server.Gate``)."""

    __slots__ = (
        "_audit",
        "_deadlines",
        "_known",
        "_max_calls",
        "_max_shell",
        "_running",
        "_served",
        "_shell",
        "_stopped",
    )

    def __init__(
        self, served: frozenset[str], known: frozenset[str], audit: AuditLog, max_calls: int
    ) -> None:
        self._served = served
        self._known = known
        self._audit = audit
        self._max_calls = max_calls
        self._max_shell = min(SHELL_CALLS_CAP, max_calls)
        self._running = 0
        self._shell = 0
        self._deadlines: set[asyncio.Timeout] = set()
        self._stopped = False

    def stop(self) -> None:
        """End every running call now (and any that starts later) with the stopped error."""
        self._stopped = True
        now = asyncio.get_running_loop().time()
        for deadline in self._deadlines:
            deadline.reschedule(now)

    @property
    def running(self) -> int:
        """How many calls are in flight."""
        return self._running

    def listing(self, ctx: ServerRequestContext[Any], tools: ListToolsResult) -> ListToolsResult:
        allowed = _principal(ctx)[1] & self._served
        return ListToolsResult(tools=[tool for tool in tools.tools if tool.name in allowed])

    async def call(
        self,
        ctx: ServerRequestContext[Any],
        params: CallToolRequestParams,
        call_id: str,
        run: Callable[[], Awaitable[CallToolResult]],
    ) -> CallToolResult:
        started = time.monotonic()
        name, allowed, peer = _principal(ctx)
        tool = params.name if params.name in self._known else UNKNOWN_TOOL
        outcome, size = INTERNAL, 0
        try:
            if params.name in self._known and params.name not in (allowed & self._served):
                result = refusal(FORBIDDEN, _FORBIDDEN_PROBLEM)
            elif self._running >= self._max_calls or (
                params.name == "shell" and self._shell >= self._max_shell
            ):
                result = refusal(BUSY, _BUSY_PROBLEM)
            else:
                result = await self._stoppable(params.name == "shell", run)
            outcome, size = _outcome_of(result), _bytes_of(result)
            return result
        except _Stopped:
            outcome = STOPPED
            raise
        except MCPError:
            outcome = EXECUTION_ERROR
            raise
        except asyncio.CancelledError:
            outcome = CANCELLED
            raise
        finally:
            self._audit.write(
                AuditRecord(
                    time=now_text(),
                    token=name,
                    peer=peer,
                    tool=tool,
                    call_id=call_id,
                    arguments_sha256=_digest(params),
                    outcome=outcome,
                    ms=int((time.monotonic() - started) * 1000),
                    bytes_out=size,
                )
            )

    async def _stoppable(
        self, shell: bool, run: Callable[[], Awaitable[CallToolResult]]
    ) -> CallToolResult:
        """The call, unless ``stop`` ends it first: then the ``_Stopped`` error (the call's
        own cancellation settled first, by ``_server``)."""
        deadline = asyncio.timeout(0 if self._stopped else None)
        try:
            async with deadline:
                self._deadlines.add(deadline)
                try:
                    return await self._counted(shell, run)
                finally:
                    self._deadlines.discard(deadline)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise _Stopped(STOPPED_CODE, STOPPED_MESSAGE) from None

    async def _counted(
        self, shell: bool, run: Callable[[], Awaitable[CallToolResult]]
    ) -> CallToolResult:
        self._running += 1
        self._shell += shell
        try:
            return await run()
        finally:
            self._running -= 1
            self._shell -= shell
