"""Moving a tunnel's bytes between two non-blocking sockets in the event loop, bounded.

The proxy's hot path (``_posix._proxy``): once a connection is admitted, its bytes are
only copied, both ways, until both sides ended. On Linux they never enter Python: each
direction ``splice``\\s from one socket into a pipe of its own and from the pipe into
the other socket (``SPLICE_F_NONBLOCK``), waiting in the event loop for the side that
holds it back; at most the pipe's capacity (``PIPE_BYTES``) is held per direction, so
a side that stops reading stops the other side's reads (nothing is held whole).
Elsewhere (or where ``splice`` is refused) a buffer of ``CHUNK_BYTES`` per direction
is copied with the loop's socket calls.

A direction ends when its source says end of file and what it held is written, or when
either of its sockets fails: the destination is then half-closed (and the source's
reading side shut). The other direction goes on to its own end (a reply may still be on
its way); ``relay`` returns when both ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Final

__all__ = ["CHUNK_BYTES", "PIPE_BYTES", "relay"]

CHUNK_BYTES: Final = 256 * 1024
"""Bytes moved per step of one direction (and the copying fallback's buffer)."""

PIPE_BYTES: Final = 256 * 1024
"""The capacity asked for each direction's pipe (the kernel may give less)."""

YIELD_STEPS: Final = 16
"""A direction that keeps moving lets the loop run others after this many steps."""

_SPLICE: Final = hasattr(os, "splice") and hasattr(os, "SPLICE_F_NONBLOCK")
_FLAGS: Final = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)


async def _ready(fd: int, *, write: bool) -> None:
    """Wait until ``fd`` is readable (or writable); the watch is removed however it ends."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    if write:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await future
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError, AttributeError):
        import fcntl  # noqa: PLC0415 - POSIX only, beside the splice path

        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_end, write_end


async def _splice(source: socket.socket, destination: socket.socket) -> None:
    """One direction through a pipe of its own, until ``source``'s end is written."""
    read_end, write_end = _pipe()
    held = 0
    ended = False
    steps = 0
    try:
        while True:
            moved = False
            if held:
                try:
                    written = os.splice(read_end, destination.fileno(), held, flags=_FLAGS)
                except BlockingIOError:
                    written = 0
                held -= written
                moved = written > 0
            if not ended:
                try:
                    taken = os.splice(source.fileno(), write_end, CHUNK_BYTES, flags=_FLAGS)
                except BlockingIOError:
                    taken = -1  # nothing to take now, or the pipe has no room
                if taken == 0:
                    ended = moved = True
                elif taken > 0:
                    held += taken
                    moved = True
            if ended and not held:
                return
            if moved:
                steps += 1
                if steps % YIELD_STEPS == 0:
                    await asyncio.sleep(0)
                continue
            if held:
                await _ready(destination.fileno(), write=True)  # it holds the pipe back
            else:
                await _ready(source.fileno(), write=False)
    finally:
        os.close(read_end)
        os.close(write_end)


async def _copy(source: socket.socket, destination: socket.socket) -> None:
    """One direction through a buffer, with the loop's socket calls."""
    loop = asyncio.get_running_loop()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while count := await loop.sock_recv_into(source, buffer):
        await loop.sock_sendall(destination, view[:count])


async def _direction(source: socket.socket, destination: socket.socket) -> None:
    """One direction to its end; an error ends it alone (the other may still carry a
    reply: a server that answers and closes while the client still sends)."""
    with contextlib.suppress(OSError):
        await (_splice if _SPLICE else _copy)(source, destination)
    with contextlib.suppress(OSError):
        destination.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        source.shutdown(socket.SHUT_RD)


async def relay(first: socket.socket, second: socket.socket) -> None:
    """Both directions between two connected non-blocking sockets, until both ended.

    A cancellation of the caller cancels both directions (awaited), then propagates.
    The sockets are the caller's to close.
    """
    forth = asyncio.ensure_future(_direction(first, second))
    back = asyncio.ensure_future(_direction(second, first))
    try:
        await asyncio.gather(forth, back)
    finally:
        for task in (forth, back):
            task.cancel()
        await asyncio.wait({forth, back})
        for task in (forth, back):
            if not task.cancelled():
                task.exception()  # retrieved: the connection is over either way
