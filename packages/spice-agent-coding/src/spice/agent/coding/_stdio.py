"""MCP over stdio, with a transport that a signal can always stop.

The SDK's ``stdio_server`` reads stdin in a worker thread that cancellation
cannot interrupt, so a server asked to stop by a signal would wait for the
client's next line. This transport reads and writes the standard descriptors
through the event loop instead: every wait is cancellable, memory is bounded
by ``MAXIMUM_FRAME_BYTES``, and while serving, descriptor 1 points at stderr and
descriptor 0 at the null device, so nothing but protocol reaches stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import stat
from collections.abc import AsyncIterator
from typing import Final, final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter
from mcp.types.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
)

from spice.agent.dispatch import Dispatcher
from spice.agent.tool import MAXIMUM_PAYLOAD_BYTES

from ._json import frame
from ._mcp import mcp_server

MAXIMUM_FRAME_BYTES: Final = 8 * MAXIMUM_PAYLOAD_BYTES
"""Longest JSON-RPC line accepted: a maximal payload, escaped, inside its envelope.

A longer line is discarded as it streams in (memory stays bounded) and never answered.
"""

READ_CHUNK_BYTES: Final = 65_536
FLUSH_TIMEOUT_SECONDS: Final = 2.0
"""How long queued answers may take to leave once the server stops."""

_FRAME_TOO_LARGE: Final = "a JSON-RPC frame exceeded the frame bound"
_NOT_A_MESSAGE: Final = "a frame is not a JSON-RPC message"
_PARSE_ERROR: Final = "the frame is not valid JSON"
_INVALID_REQUEST: Final = "the frame is not a valid JSON-RPC request"
_INVALID_PARAMS: Final = "the request's params are not valid for its method"


def _pollable(fd: int, events: int) -> bool:
    """Whether the event loop can wait on ``fd`` (pipes, sockets, terminals; not files)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    # Some character devices (the null device) refuse a selector; ask one.
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, events)
        except (OSError, ValueError):
            return False
    return True


@final
class _Source:
    """Reads chunks from a descriptor through the event loop (or directly, for files)."""

    __slots__ = ("_blocking", "_fd", "_reader", "_transport")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._blocking = os.get_blocking(fd)
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None

    async def open(self) -> None:
        if not _pollable(self._fd, selectors.EVENT_READ):
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_CHUNK_BYTES, loop=loop)
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
                os.fdopen(self._fd, "rb", buffering=0, closefd=False),
            )
        except (OSError, ValueError):
            os.set_blocking(self._fd, self._blocking)
            return
        self._reader, self._transport = reader, transport

    async def read(self) -> bytes:
        if self._reader is None:
            # A regular file or the null device never blocks; yield to the loop between reads.
            await asyncio.sleep(0)
            return os.read(self._fd, READ_CHUNK_BYTES)
        return await self._reader.read(READ_CHUNK_BYTES)

    def close(self) -> None:
        if self._transport is not None:
            with contextlib.suppress(OSError):
                os.set_blocking(self._fd, self._blocking)
            self._transport.close()
            self._transport = None


@final
class _WriteProtocol(asyncio.Protocol):
    """Flow control for the stdout pipe: wait while the client is not reading."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()
        self.lost = False

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writable.set()


@final
class _Sink:
    """Writes whole frames to a descriptor through the event loop (or directly, for files)."""

    __slots__ = ("_blocking", "_fd", "_protocol", "_transport")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._blocking = os.get_blocking(fd)
        self._protocol: _WriteProtocol | None = None
        self._transport: asyncio.WriteTransport | None = None

    async def open(self) -> None:
        if not _pollable(self._fd, selectors.EVENT_WRITE):
            return
        loop = asyncio.get_running_loop()
        protocol = _WriteProtocol()
        try:
            transport, _ = await loop.connect_write_pipe(
                lambda: protocol, os.fdopen(self._fd, "wb", buffering=0, closefd=False)
            )
        except (OSError, ValueError):
            os.set_blocking(self._fd, self._blocking)
            return
        self._protocol, self._transport = protocol, transport

    async def write(self, data: bytes) -> None:
        if self._transport is None or self._protocol is None:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            return
        if self._protocol.lost or self._transport.is_closing():
            raise BrokenPipeError
        self._transport.write(data)
        await self._protocol.writable.wait()
        if self._protocol.lost:
            raise BrokenPipeError

    def close(self) -> None:
        if self._transport is not None:
            with contextlib.suppress(OSError):
                os.set_blocking(self._fd, self._blocking)
            self._transport.close()
            self._transport = None


def _error_for(line: bytes) -> JSONRPCError | None:
    """The JSON-RPC error answer to a frame that did not validate, or None for no answer.

    Not JSON: a parse error (id null). Not an object: an invalid request (id null). A
    request with a usable id: invalid params (or request) with that id, so the client
    never waits for an answer that cannot come. Notifications and malformed responses
    get no answer, as JSON-RPC says. Texts are fixed; nothing of the frame is quoted.
    """
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, _PARSE_ERROR)
    if not isinstance(value, dict):
        return _error(None, INVALID_REQUEST, _INVALID_REQUEST)
    ident = value.get("id")
    usable = isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))
    if "method" not in value or not usable:
        return None
    if isinstance(value["method"], str) and "params" in value:
        return _error(ident, INVALID_PARAMS, _INVALID_PARAMS)
    return _error(ident, INVALID_REQUEST, _INVALID_REQUEST)


def _error(ident: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))


async def _deliver(
    line: bytes,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    reply: MemoryObjectSendStream[SessionMessage],
) -> None:
    if not line.strip():
        return
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # A fixed text: the parser's own message would quote the client's bytes.
        await send.send(ValueError(_NOT_A_MESSAGE))
        answer = _error_for(line)
        if answer is not None:
            await reply.send(SessionMessage(answer))
        return
    await send.send(SessionMessage(message))


async def _read_frames(
    source: _Source,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    reply: MemoryObjectSendStream[SessionMessage],
) -> None:
    """Split stdin into lines, bounded; hand each message to the server; close on EOF.

    Frames that are not valid messages are answered on ``reply`` (see ``_error_for``).
    """
    buffer = bytearray()
    discarding = False
    async with send, reply:
        while chunk := await source.read():
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                if discarding:
                    discarding = False
                    await send.send(ValueError(_FRAME_TOO_LARGE))
                elif len(buffer) + newline - start > MAXIMUM_FRAME_BYTES:
                    buffer.clear()
                    await send.send(ValueError(_FRAME_TOO_LARGE))
                else:
                    buffer += chunk[start:newline]
                    line = bytes(buffer)
                    buffer.clear()
                    await _deliver(line, send, reply)
                start = newline + 1
            if not discarding:
                buffer += chunk[start:]
                if len(buffer) > MAXIMUM_FRAME_BYTES:
                    buffer.clear()
                    discarding = True
        if buffer and not discarding:
            await _deliver(bytes(buffer), send, reply)


async def _write_frames(sink: _Sink, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """Write each outgoing message as one line; stop quietly when the client is gone."""
    async with receive:
        async for message in receive:
            try:
                await sink.write(frame(message.message))
            except OSError:
                return


@contextlib.asynccontextmanager
async def open_stdio(
    stdin_fd: int = 0, stdout_fd: int = 1, *, divert: bool = True
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """Yield the server's (read, write) streams over two descriptors.

    With ``divert`` the wire moves to private duplicates and, while serving,
    ``stdout_fd`` points at stderr and ``stdin_fd`` at the null device; both
    are restored on exit.
    """
    wire_in, wire_out = stdin_fd, stdout_fd
    saved: list[tuple[int, int]] = []
    if divert:
        # os.dup gives non-inheritable descriptors: no child ever holds the wire.
        wire_in = os.dup(stdin_fd)
        wire_out = os.dup(stdout_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            saved = [(stdin_fd, os.dup(stdin_fd)), (stdout_fd, os.dup(stdout_fd))]
            os.dup2(null, stdin_fd)
            os.dup2(2, stdout_fd)
        finally:
            os.close(null)
    source, sink = _Source(wire_in), _Sink(wire_out)
    in_send, in_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_send, out_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        await source.open()
        await sink.open()
        async with anyio.create_task_group() as group:
            reading = anyio.CancelScope()
            writing = anyio.CancelScope()
            written = anyio.Event()

            replies = out_send.clone()

            async def read() -> None:
                with reading:
                    await _read_frames(source, in_send, replies)

            async def write() -> None:
                try:
                    with writing:
                        await _write_frames(sink, out_receive)
                finally:
                    written.set()

            group.start_soon(read)
            group.start_soon(write)
            try:
                yield in_receive, out_send
            finally:
                reading.cancel()
                replies.close()
                out_send.close()
                with anyio.move_on_after(FLUSH_TIMEOUT_SECONDS, shield=True):
                    await written.wait()
                writing.cancel()
    finally:
        for stream in (in_send, in_receive, out_send, out_receive):
            stream.close()
        source.close()
        sink.close()
        for fd, copy in saved:
            with contextlib.suppress(OSError):
                os.dup2(copy, fd)
            os.close(copy)
        if divert:
            for fd in (wire_in, wire_out):
                with contextlib.suppress(OSError):
                    os.close(fd)


async def serve_stdio(dispatcher: Dispatcher) -> None:
    """Serve the dispatcher's tools over MCP on this process's stdin and stdout.

    Returns when the client closes stdin (calls in flight are cancelled first);
    cancel the awaiting task to stop early. The caller owns the ``Cleanup``
    (``compose`` runs it).
    """
    server = mcp_server(dispatcher)
    async with open_stdio() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
