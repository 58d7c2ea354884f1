"""The two servers under test and the two clients that drive them.

Servers: ours (``spice-coding --root ROOT serve``) and the reference MCP
filesystem server (``node .../server-filesystem/dist/index.js ROOT``), each a
``Side`` that knows how to start it and how to phrase a read and a write.

Clients, one interface (``Client``):

- ``raw``: our own minimal JSON-RPC client over the child's pipes (spawn,
  ``initialize``, write one JSON line per request, read lines, match answers by
  id). It does almost nothing, so what it measures is the server's own cost.
- ``mcp``: the Python ``mcp`` SDK's ``ClientSession`` over ``stdio_client``:
  what a Python host feels, its own cost included.

Every bench module that talks MCP builds on ``open_client(side, kind)`` so all
figures use the same spawning, environment and framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TextIO, final

from _harness import PEER_ENTRY, Unavailable, pending_reason, spice_coding

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

ClientKind = Literal["raw", "mcp"]
CLIENT_KINDS: Final[tuple[ClientKind, ...]] = ("raw", "mcp")
CLIENT_LABELS: Final[dict[ClientKind, str]] = {
    "raw": "raw JSON-RPC client",
    "mcp": "mcp client",
}
PEER_NAME: Final = "@modelcontextprotocol/server-filesystem"
CONNECT_TIMEOUT: Final = 30.0
CALL_TIMEOUT: Final = 60.0
CLOSE_TIMEOUT: Final = 10.0
LINE_LIMIT: Final = 64 << 20
"""Longest answer line the raw client accepts (a 1 MiB payload escaped, with room)."""
PROTOCOL_VERSION: Final = "2025-06-18"
"""What the raw client asks for; both servers answer with one they speak."""
CHILD_ENVIRONMENT: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What a child inherits (the ``mcp`` client's default set), for both clients alike."""

Arguments = dict[str, Any]


def child_environment() -> dict[str, str]:
    """The environment of every server child: the usual few variables, no bytecode writes.

    ``PYTHONDONTWRITEBYTECODE`` keeps a run from leaving caches that a later run would
    find: our server starts with exactly the bytecode ``make bootstrap`` installed.
    """
    inherited = {name: os.environ[name] for name in CHILD_ENVIRONMENT if name in os.environ}
    return {**inherited, "PYTHONDONTWRITEBYTECODE": "1"}


@final
@dataclass(slots=True)
class Side:
    """One server under test: how to start it and how to phrase its operations."""

    label: str
    root: Path
    command: str
    arguments: list[str]
    read_tool: str
    write_tool: str
    absolute_paths: bool
    digests: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def path(self, relative: str) -> str:
        """The path argument this server wants for ``relative``."""
        return str(self.root / relative) if self.absolute_paths else relative

    def read_arguments(self, relative: str) -> Arguments:
        """Arguments of a read of the whole file ``relative``."""
        return {"path": self.path(relative)}

    def write_arguments(self, relative: str, text: str) -> Arguments:
        """Arguments of a replace of ``relative`` with ``text`` (ours: digest-checked)."""
        if self.absolute_paths:
            return {"path": self.path(relative), "content": text}
        return {"path": relative, "content": text, "expected_sha256": self.digests[relative]}

    def remember(self, relative: str, structured: object) -> None:
        """Keep the digest our replace answered, for the next call's ``expected_sha256``."""
        if self.absolute_paths:
            return
        if not isinstance(structured, dict) or not isinstance(structured.get("sha256"), str):
            raise Unavailable("failed: replace answered no sha256")
        self.digests[relative] = structured["sha256"]


def ours(root: Path, *extra: str) -> Side:
    """``spice-coding --root ROOT serve [EXTRA...]``."""
    return Side(
        label="spice-coding serve",
        root=root,
        command=str(spice_coding()),
        arguments=["--root", str(root), "serve", *extra],
        read_tool="read",
        write_tool="replace",
        absolute_paths=False,
    )


def peer(root: Path) -> Side:
    """The reference server: ``node .../server-filesystem/dist/index.js ROOT``."""
    return Side(
        label=PEER_NAME,
        root=root,
        command=shutil.which("node") or "node",
        arguments=[str(PEER_ENTRY), str(root)],
        read_tool="read_text_file",
        write_tool="write_file",
        absolute_paths=True,
        error=peer_missing(),
    )


def peer_missing() -> str | None:
    """Why the peer cannot run, or ``None``."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not PEER_ENTRY.is_file():
        return "peer not installed: run `npm ci --prefix benchmarks`"
    return None


class Client(Protocol):
    """A ready MCP session (initialized) with one server."""

    @property
    def kind(self) -> ClientKind: ...

    async def list_tools(self) -> list[str]:
        """The names of the server's tools."""
        ...

    async def call_tool(self, name: str, arguments: Arguments) -> object:
        """The structured content of a successful call; an error answer raises."""
        ...


def _failed_call(label: str, tool: str, structured: object) -> Unavailable:
    code = structured.get("code") if isinstance(structured, dict) else None
    return Unavailable(f"failed: {label} {tool} answered an error ({code})")


@final
class RawClient:
    """A minimal JSON-RPC 2.0 client over a child's stdin/stdout, one JSON text a line."""

    __slots__ = ("_label", "_next_id", "_pending", "_process", "_reader", "last_line_bytes")

    def __init__(self, label: str, process: asyncio.subprocess.Process) -> None:
        self.last_line_bytes = 0
        """Bytes of the last answer line read (its newline included): what a client buffers."""
        self._label = label
        self._process = process
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.ensure_future(self._read())

    @property
    def kind(self) -> ClientKind:
        return "raw"

    @classmethod
    async def spawn(cls, side: Side) -> RawClient:
        """Start ``side``'s server; the caller initializes and closes it."""
        process = await asyncio.create_subprocess_exec(
            side.command,
            *side.arguments,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=side.root,
            env=child_environment(),
            limit=LINE_LIMIT,
        )
        return cls(side.label, process)

    async def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                self.last_line_bytes = len(line)
                message = json.loads(line)
                ident = message.get("id") if isinstance(message, dict) else None
                waiter = self._pending.pop(ident, None) if isinstance(ident, int) else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
        finally:
            for waiter in self._pending.values():
                if not waiter.done():
                    waiter.set_exception(Unavailable(f"{self._label} closed its output"))
            self._pending.clear()

    async def _send(self, message: dict[str, Any]) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await stdin.drain()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its ``result``; an error answer raises."""
        if self._reader.done():
            raise Unavailable(f"{self._label} closed its output")
        self._next_id += 1
        ident = self._next_id
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = waiter
        await self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        answer = await waiter
        result = answer.get("result")
        if not isinstance(result, dict):
            raise Unavailable(f"failed: {self._label} answered {method} with an error")
        return result

    async def initialize(self) -> None:
        """The MCP handshake: ``initialize``, then ``notifications/initialized``."""
        await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "spice-bench-raw", "version": "0"},
            },
        )
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def list_tools(self) -> list[str]:
        result = await self.request("tools/list", {})
        return [str(tool.get("name")) for tool in result.get("tools", [])]

    async def call_tool(self, name: str, arguments: Arguments) -> object:
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        structured = result.get("structuredContent")
        if result.get("isError"):
            raise _failed_call(self._label, name, structured)
        return structured

    async def call_tool_text(self, name: str, arguments: Arguments) -> tuple[str, object]:
        """The answer's text content (what a model reads) and its structured content."""
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        structured = result.get("structuredContent")
        if result.get("isError"):
            raise _failed_call(self._label, name, structured)
        texts = [
            str(item.get("text", ""))
            for item in result.get("content", [])
            if isinstance(item, dict) and item.get("type") == "text"
        ]
        return "".join(texts), structured

    async def close(self) -> None:
        """Close stdin (a clean stop for both servers), wait bounded, then kill."""
        process = self._process
        if process.stdin is not None:
            process.stdin.close()
            with contextlib.suppress(OSError):
                await process.stdin.wait_closed()
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        finally:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


@final
class SdkClient:
    """The ``mcp`` SDK's ``ClientSession`` over ``stdio_client``."""

    __slots__ = ("_label", "_session")

    def __init__(self, label: str, session: ClientSession) -> None:
        self._label = label
        self._session = session

    @property
    def kind(self) -> ClientKind:
        return "mcp"

    async def list_tools(self) -> list[str]:
        listed = await self._session.list_tools()
        return [tool.name for tool in listed.tools]

    async def call_tool(self, name: str, arguments: Arguments) -> object:
        result = await self._session.call_tool(name, arguments)
        if result.is_error:
            raise _failed_call(self._label, name, result.structured_content)
        return result.structured_content


@asynccontextmanager
async def _raw(side: Side) -> AsyncIterator[RawClient]:
    client = await RawClient.spawn(side)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            await client.initialize()
        yield client
    finally:
        await client.close()


@asynccontextmanager
async def _sdk(side: Side, errlog: TextIO) -> AsyncIterator[SdkClient]:
    from mcp.client.session import ClientSession  # noqa: PLC0415 - only the mcp kind needs it
    from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: PLC0415

    parameters = StdioServerParameters(
        command=side.command, args=side.arguments, env=child_environment(), cwd=str(side.root)
    )
    async with (
        stdio_client(parameters, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        async with asyncio.timeout(CONNECT_TIMEOUT):
            await session.initialize()
        yield SdkClient(side.label, session)


@asynccontextmanager
async def open_client(side: Side, kind: ClientKind) -> AsyncIterator[Client]:
    """A ready, initialized session of ``kind`` with ``side``'s server; closed on exit."""
    if side.error is not None:
        raise Unavailable(side.error)
    if kind == "raw":
        async with _raw(side) as raw:
            yield raw
        return
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - never blocks
        async with _sdk(side, errlog) as sdk:
            yield sdk


async def connect_all(
    stack: AsyncExitStack, sides: tuple[Side, ...], kinds: tuple[ClientKind, ...]
) -> dict[tuple[int, ClientKind], Client | str]:
    """A client of each kind for each side, held open by ``stack``; a reason where none starts.

    Keys are (index of the side, kind); a value that is a ``str`` says why that
    session could not start (the other sessions still run).
    """
    sessions: dict[tuple[int, ClientKind], Client | str] = {}
    for kind in kinds:
        for index, side in enumerate(sides):
            if side.error is not None:
                sessions[index, kind] = side.error
                continue
            try:
                client = await stack.enter_async_context(open_client(side, kind))
                await client.list_tools()
            except Exception as error:  # noqa: BLE001 - a server that cannot start is reported
                sessions[index, kind] = f"{side.label} did not start: {pending_reason(error)}"
                continue
            sessions[index, kind] = client
    return sessions
