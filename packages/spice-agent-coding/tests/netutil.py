"""Loopback servers that stand in for registries in the network tests (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class Loopback:
    """A TCP server on 127.0.0.1 that counts its connections and their ends."""

    port: int = 0
    opened: int = 0
    closed: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    first: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0


Handler = Callable[[Loopback, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def loopback(handler: Handler) -> AsyncIterator[Loopback]:
    state = Loopback()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.opened += 1
        state.first.set()
        try:
            await handler(state, reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()
            state.closed += 1
            state.ended.set()

    tasks: set[asyncio.Future[None]] = set()

    def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(serve(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await server.wait_closed()


async def echo(_: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


async def http_host(
    _: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answers one request with the Host header it got and the request line."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    host = next(line for line in lines if line.lower().startswith("host:"))
    body = f"{lines[0]}|{host}".encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()


async def endless(state: Loopback, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Writes until the other side stops taking it (counting what it took)."""
    chunk = b"x" * 65536
    while True:
        writer.write(chunk)
        await writer.drain()
        state.sent += len(chunk)
