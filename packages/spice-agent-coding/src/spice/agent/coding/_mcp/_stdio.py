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
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final, final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import jsonrpc_message_adapter
from mcp.types.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)

from spice.agent.dispatch import Dispatcher
from spice.agent.tools.coding import Config

from ._framing import MAXIMUM_FRAME_BYTES, LineFramer
from ._json import frame
from ._server import serving
from ._threaded_io import BlockingChannel

MAXIMUM_REQUESTS_IN_FLIGHT: Final = 64
"""Requests handed to the server and not yet answered, per session.

At the cap the transport stops reading stdin until one is answered, so memory stays
bounded however many requests a client pipelines.
"""

EOF_GRACE_SECONDS: Final = 5.0
"""After stdin's EOF, how long calls already received may run to be answered.

Past it the server's stream closes, which stops the rest as on cancellation.
"""

THREADED: Final = sys.platform == "win32"
"""Whether stdin and stdout are read and written in threads (``_mcp._threaded_io``): on Windows,
whose event loop cannot wait on the pipes a client hands the server."""

READ_CHUNK_BYTES: Final = 65_536
FLUSH_TIMEOUT_SECONDS: Final = 2.0
"""How long queued answers may take to leave once the server stops."""

_FRAME_TOO_LARGE: Final = "a JSON-RPC frame exceeded the frame bound"
_NOT_A_MESSAGE: Final = "a frame is not a JSON-RPC message"
_PARSE_ERROR: Final = "the frame is not valid JSON"
_INVALID_REQUEST: Final = "the frame is not a valid JSON-RPC request"
_INVALID_PARAMS: Final = "the request's params are not valid for its method"


def _get_blocking(fd: int) -> bool:
    """``os.get_blocking`` (missing on Windows before 3.12, and never needed there)."""
    if sys.platform == "win32":
        return True
    return os.get_blocking(fd)


def _set_blocking(fd: int, blocking: bool) -> None:
    if sys.platform != "win32":
        os.set_blocking(fd, blocking)


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

    __slots__ = ("_blocking", "_channel", "_fd", "_reader", "_transport")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._blocking = _get_blocking(fd)
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._channel: BlockingChannel | None = None

    @property
    def reading(self) -> bool:
        """Whether a read is blocked in the reading thread (Windows)."""
        return self._channel is not None and self._channel.busy

    async def open(self) -> None:
        if THREADED:
            self._channel = BlockingChannel("spice-stdin")
            return
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
            _set_blocking(self._fd, self._blocking)
            return
        self._reader, self._transport = reader, transport

    async def read(self) -> bytes:
        if self._channel is not None:
            fd = self._fd
            return await self._channel.run(lambda: os.read(fd, READ_CHUNK_BYTES))
        if self._reader is None:
            # A regular file or the null device never blocks; yield to the loop between reads.
            await asyncio.sleep(0)
            return os.read(self._fd, READ_CHUNK_BYTES)
        return await self._reader.read(READ_CHUNK_BYTES)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._transport is not None:
            with contextlib.suppress(OSError):
                _set_blocking(self._fd, self._blocking)
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

    __slots__ = ("_blocking", "_channel", "_fd", "_protocol", "_transport")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._blocking = _get_blocking(fd)
        self._protocol: _WriteProtocol | None = None
        self._transport: asyncio.WriteTransport | None = None
        self._channel: BlockingChannel | None = None

    async def open(self) -> None:
        if THREADED:
            self._channel = BlockingChannel("spice-stdout")
            return
        if not _pollable(self._fd, selectors.EVENT_WRITE):
            return
        loop = asyncio.get_running_loop()
        protocol = _WriteProtocol()
        try:
            transport, _ = await loop.connect_write_pipe(
                lambda: protocol, os.fdopen(self._fd, "wb", buffering=0, closefd=False)
            )
        except (OSError, ValueError):
            _set_blocking(self._fd, self._blocking)
            return
        self._protocol, self._transport = protocol, transport

    async def write(self, data: bytes) -> None:
        if self._channel is not None:
            fd = self._fd
            await self._channel.run(lambda: _write_all(fd, data))
            return
        if self._transport is None or self._protocol is None:
            _write_all(self._fd, data)
            return
        if self._protocol.lost or self._transport.is_closing():
            raise BrokenPipeError
        self._transport.write(data)
        await self._protocol.writable.wait()
        if self._protocol.lost:
            raise BrokenPipeError

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._transport is not None:
            with contextlib.suppress(OSError):
                _set_blocking(self._fd, self._blocking)
            self._transport.close()
            self._transport = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _usable_id(ident: object) -> bool:
    """Whether ``ident`` is an id JSON-RPC and MCP allow: a string or an integer (not a bool)."""
    return isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))


def _error_for(line: bytes) -> JSONRPCError | None:
    """The JSON-RPC error answer to a frame the server cannot take, or None for no answer.

    Not JSON: a parse error (id null). Not an object, an object without a ``method``,
    or a request whose ``id`` is not a string or an integer (``true``, ``1.5``, an
    object, an array, ``null``): an invalid request (id null). A request with a
    usable id: invalid params (or request) with that id, so the client never waits
    for an answer that cannot come. Only notifications (a ``method`` and no ``id``)
    get no answer, as JSON-RPC says. Texts are fixed; nothing of the frame is quoted.
    """
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, _PARSE_ERROR)
    if not isinstance(value, dict):
        return _error(None, INVALID_REQUEST, _INVALID_REQUEST)
    if "method" in value and "id" not in value:
        return None
    ident = value.get("id")
    if "method" not in value or not _usable_id(ident):
        return _error(None, INVALID_REQUEST, _INVALID_REQUEST)
    if isinstance(value["method"], str) and "params" in value:
        return _error(ident, INVALID_PARAMS, _INVALID_PARAMS)
    return _error(ident, INVALID_REQUEST, _INVALID_REQUEST)


def _has_id(line: bytes) -> bool:
    """Whether a frame that validated as a notification carries an ``id`` member after all.

    The SDK's message model ignores an ``id`` it cannot use (``true``, ``1.5``...), so
    such a request would pass as a notification and never be answered.
    """
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # pragma: no cover - it validated as JSON
        return False
    return isinstance(value, dict) and "id" in value


def _error(ident: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))


_OWN_ANSWER: Final = ServerMessageMetadata()
"""Marks the transport's own error answers, which answer no request in flight."""


@final
class _InFlight:
    """Requests handed to the server and not yet answered; the reader waits while it is full.

    A request is done when its answer reaches the writer, or, for a request the client
    cancelled (never answered), when the SDK reports it ended unanswered.
    """

    __slots__ = ("_changed", "_count", "_limit", "_open")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: dict[RequestId, int] = {}
        self._count = 0
        self._changed = asyncio.Event()

    def admit(self, ident: RequestId) -> Callable[[], Awaitable[None]]:
        """Count ``ident`` in flight; returns the SDK's hook for ending it unanswered."""
        self._open[ident] = self._open.get(ident, 0) + 1
        self._count += 1

        async def unanswered() -> None:
            self.answered(ident)

        return unanswered

    def answered(self, ident: RequestId) -> None:
        """One request with this id is done (a no-op for an id not in flight)."""
        left = self._open.get(ident, 0) - 1
        if left < 0:
            return
        if left:
            self._open[ident] = left
        else:
            del self._open[ident]
        self._count -= 1
        self._changed.set()

    async def below(self, count: int) -> None:
        """Wait until fewer than ``count`` requests are in flight."""
        while self._count >= count:
            self._changed.clear()
            await self._changed.wait()

    async def room(self) -> None:
        """Wait until a request may be admitted (fewer than the limit in flight)."""
        await self.below(self._limit)

    async def drained(self) -> None:
        """Wait until no request is in flight."""
        await self.below(1)


@final
@dataclass(slots=True)
class _Wire:
    """What the reader hands frames through: the server's stream, the replies, the gate."""

    send: MemoryObjectSendStream[SessionMessage | Exception]
    reply: MemoryObjectSendStream[SessionMessage]
    in_flight: _InFlight


async def _deliver(line: bytes, wire: _Wire) -> None:
    """Hand one frame to the server, or answer it here when the server could not take it.

    A request waits for room below the in-flight cap first (the reader stops reading).
    """
    if not line.strip():
        return
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # A fixed text: the parser's own message would quote the client's bytes.
        await wire.send.send(ValueError(_NOT_A_MESSAGE))
        answer = _error_for(line)
        if answer is not None:
            await wire.reply.send(SessionMessage(answer, metadata=_OWN_ANSWER))
        return
    if isinstance(message, JSONRPCNotification) and _has_id(line):
        await wire.reply.send(
            SessionMessage(_error(None, INVALID_REQUEST, _INVALID_REQUEST), metadata=_OWN_ANSWER)
        )
        return
    if not isinstance(message, JSONRPCRequest):
        await wire.send.send(SessionMessage(message))
        return
    await wire.in_flight.room()
    hook = wire.in_flight.admit(message.id)
    metadata = ServerMessageMetadata(on_request_unanswered=hook)
    await wire.send.send(SessionMessage(message, metadata=metadata))


async def _read_frames(source: _Source, wire: _Wire) -> None:
    """Split stdin into lines, bounded; hand each message to the server; close on EOF.

    Frames that are not valid messages are answered on ``wire.reply`` (see
    ``_error_for``). At EOF nothing new is admitted; the calls in flight get up to
    ``EOF_GRACE_SECONDS`` to finish (and be answered) before the server's stream
    closes, which stops the rest as on cancellation.
    """
    framer = LineFramer(MAXIMUM_FRAME_BYTES)
    async with wire.send, wire.reply:
        while chunk := await source.read():
            frames = framer.feed(chunk)
            del chunk
            for line in frames:
                if isinstance(line, bytes):
                    await _deliver(line, wire)
                else:
                    await wire.send.send(ValueError(_FRAME_TOO_LARGE))
            del frames
        for line in framer.eof():
            if isinstance(line, bytes):
                await _deliver(line, wire)
        with anyio.move_on_after(EOF_GRACE_SECONDS):
            await wire.in_flight.drained()


async def _write_frames(
    sink: _Sink, receive: MemoryObjectReceiveStream[SessionMessage], in_flight: _InFlight
) -> None:
    """Write each outgoing message as one line; stop quietly when the client is gone.

    An answer to a request in flight is counted as it is taken, so the reader may
    admit the next request.
    """
    async with receive:
        async for message in receive:
            answer = message.message
            if (
                isinstance(answer, JSONRPCResponse | JSONRPCError)
                and answer.id is not None
                and message.metadata is not _OWN_ANSWER
            ):
                in_flight.answered(answer.id)
            data = frame(answer)
            del message, answer
            try:
                await sink.write(data)
            except OSError:
                return


def _divert(stdin_fd: int, stdout_fd: int) -> tuple[int, int, list[tuple[int, int]]]:
    """Move the wire to private duplicates; point ``stdout_fd`` at stderr, ``stdin_fd`` at null.

    Returns the wire's two duplicates and, per diverted descriptor, a copy to restore it
    from. All or nothing: when any step fails, every descriptor made here is closed, both
    descriptors are restored, and the error propagates (fd 0 is never left on the null
    device).
    """
    made: list[int] = []
    saved: list[tuple[int, int]] = []
    try:
        # os.dup gives non-inheritable descriptors: no child ever holds the wire.
        made.append(os.dup(stdin_fd))
        made.append(os.dup(stdout_fd))
        for fd in (stdin_fd, stdout_fd):
            copy = os.dup(fd)
            made.append(copy)
            saved.append((fd, copy))
        null = os.open(os.devnull, os.O_RDONLY)
        made.append(null)
        os.dup2(null, stdin_fd)
        os.dup2(2, stdout_fd)
    except BaseException:
        _restore(saved)
        for fd in made:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    os.close(made.pop())
    return made[0], made[1], saved


def _restore(saved: list[tuple[int, int]]) -> None:
    """Put each diverted descriptor back from its copy (the copies stay open)."""
    for fd, copy in saved:
        with contextlib.suppress(OSError):
            os.dup2(copy, fd)


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
        wire_in, wire_out, saved = _divert(stdin_fd, stdout_fd)
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

            in_flight = _InFlight(MAXIMUM_REQUESTS_IN_FLIGHT)

            async def read() -> None:
                with reading:
                    await _read_frames(source, _Wire(in_send, replies, in_flight))

            async def write() -> None:
                try:
                    with writing:
                        await _write_frames(sink, out_receive, in_flight)
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
        _restore(saved)
        for _, copy in saved:
            os.close(copy)
        if divert:
            # A read still blocked in the reading thread keeps its descriptor: closing
            # it under the read may block on Windows; the process is about to exit.
            for fd in (wire_out,) if source.reading else (wire_in, wire_out):
                with contextlib.suppress(OSError):
                    os.close(fd)


async def serve_stdio(dispatcher: Dispatcher, *, config: Config | None = None) -> None:
    """Serve the dispatcher's tools over MCP on this process's stdin and stdout.

    Returns when the client closes stdin: nothing new is admitted, calls already
    received get ``EOF_GRACE_SECONDS`` to finish and be answered, the rest are
    stopped as on cancellation. Cancel the awaiting task to stop early. Either way
    it returns only once every call has ended (bounded by ``CANCELLED_CALL_SECONDS``).
    The caller owns the ``Cleanup`` (``compose`` runs it). With the tools' ``config``
    the server's instructions name the root and each tool declares its largest answer.
    """
    server, calls = serving(dispatcher, config=config)
    try:
        async with open_stdio() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await calls.settle()
