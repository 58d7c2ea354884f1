"""Moving a tunnel's bytes between two connected sockets on two threads, bounded.

The proxy's hot path (``_posix._net._proxy``): once a connection is admitted, its bytes are
only copied, both ways, until both sides ended. Each direction runs on a thread of its
own with blocking calls: the event loop is not woken per chunk, and no watch is added
and removed each time a side has nothing to give or no room to take (that churn made
the proxy 1.7x to 1.9x slower than a direct connection; blocking calls are what any
relay's floor costs). On Linux the bytes never enter Python: a direction ``splice``\\s
from its source into a pipe of its own and from the pipe into its destination; at
most the pipe's capacity (``PIPE_BYTES``) is held per direction, and the pipe is
emptied before the source is read again, so a side that stops reading stops the other
side's reads (nothing is held whole). Elsewhere (or where ``splice`` is refused) a
buffer of ``CHUNK_BYTES`` per direction is copied with ``recv_into`` and ``send``.

A direction ends when its source says end of file and what it held is written, or when
either of its sockets fails: the destination is then half-closed (and the source's
reading side shut). The other direction goes on to its own end (a reply may still be
on its way); ``relay`` returns when both ended.

A plain HTTP request (``relay(..., request=body)``) is not a tunnel: the client's side
carries its body alone (``Framing``: copied through a buffer, each read cut where the
body ends), then stops reading, without half-closing the upstream (a server may take
that for a client gone); what the client sends after the body never reaches the
upstream. The answer comes back as in a tunnel, and when it ended the relay stops.

Stopping (the caller cancelled): both sockets are shut down, which wakes a blocked
read and a blocked write to a UNIX socket at once; a send blocked on a full TCP buffer
is not woken by a shutdown, so every blocking call gives up after ``WAKE_SECONDS``
(``SO_RCVTIMEO``, ``SO_SNDTIMEO``) and looks whether the relay was stopped. Each thread
owns duplicates of the two descriptors and closes them itself: the caller may close
its sockets at any time without a thread ever touching a number the process reuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

__all__ = [
    "CHUNK_BYTES",
    "PIPE_BYTES",
    "STOP_BOUND_SECONDS",
    "UNIX_SEND_BYTES",
    "WAKE_SECONDS",
    "Framing",
    "relay",
]

CHUNK_BYTES: Final = 256 * 1024
"""Bytes taken from a source per call (and the copying fallback's buffer)."""

PIPE_BYTES: Final = 64 * 1024
"""The capacity asked for each direction's pipe (the kernel may give less): Linux's
default. Measured on 2 cores, a 128 KiB or 256 KiB pipe was slower (1.1x to 1.8x the
direct transfer, against 1.0x to 1.3x), the bytes in flight no longer fitting a core's
cache."""

UNIX_SEND_BYTES: Final = 512 * 1024
"""The send buffer asked for a UNIX-domain side (the kernel doubles it, capped by
``net.core.wmem_max``): Linux's default (about 208 KiB) holds three of a direction's
64 KiB chunks in flight, and the relay then waits on its reader far more often than a
TCP connection's autotuned buffer makes a direct sender wait. Measured on 2 cores, 100
paired transfers: 1.25x to 1.32x the direct transfer with the default, 1.10x to 1.18x
with this (a larger one did no better). A TCP side keeps its autotuning (setting its
buffer would turn that off)."""

WAKE_SECONDS: Final = 0.5
"""Longest a direction's blocking call sleeps before it looks whether it was stopped."""

STOP_BOUND_SECONDS: Final = 2.0
"""Longest a stopped relay waits for its threads (each wakes within ``WAKE_SECONDS``)."""

_SPLICE: Final = hasattr(os, "splice")
_MOVE: Final = getattr(os, "SPLICE_F_MOVE", 0)


_T = TypeVar("_T")


class Framing(Protocol):
    """Where a request's body ends (``_netpolicy._head.Body``)."""

    @property
    def done(self) -> bool: ...

    def take(self, data: bytes | memoryview) -> int: ...


class _Stopped(Exception):
    """The relay was stopped while a direction waited."""


def _until_done(call: Callable[[], _T], stop: threading.Event) -> _T:
    """``call()`` again each time its wait ran out (``EAGAIN`` after ``WAKE_SECONDS``),
    until it gives a result; ``_Stopped`` once the relay is stopped."""
    while True:
        if stop.is_set():
            raise _Stopped
        with contextlib.suppress(BlockingIOError):
            return call()


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError, AttributeError):
        import fcntl  # noqa: PLC0415 - POSIX only, beside the splice path

        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_end, write_end


def _splice(source: socket.socket, destination: socket.socket, stop: threading.Event) -> None:
    """One direction through a pipe of its own, until ``source``'s end is written.

    The pipe is blocking (a non-blocking pipe makes the kernel give up at once on the
    socket's side too: the thread would spin), and it never waits: it is empty
    whenever the source is read, and only what it holds is written on.
    """
    read_end, write_end = _pipe()
    source_fd, destination_fd = source.fileno(), destination.fileno()
    splice = os.splice
    try:  # the hot loop: no call but the kernel's while bytes flow
        while True:
            try:
                taken = splice(source_fd, write_end, CHUNK_BYTES, flags=_MOVE)
            except BlockingIOError:  # the wake bound ran out
                if stop.is_set():
                    raise _Stopped from None
                continue
            if not taken:
                return
            while taken:
                try:
                    taken -= splice(read_end, destination_fd, taken, flags=_MOVE)
                except BlockingIOError:
                    if stop.is_set():
                        raise _Stopped from None
    finally:
        os.close(read_end)
        os.close(write_end)


def _copy(source: socket.socket, destination: socket.socket, stop: threading.Event) -> None:
    """One direction through a buffer, with blocking socket calls."""
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while count := _until_done(lambda: source.recv_into(buffer), stop):
        sent = 0
        while sent < count:
            sent += _until_done(functools.partial(destination.send, view[sent:count]), stop)


def _framed(
    source: socket.socket, destination: socket.socket, stop: threading.Event, body: Framing
) -> None:
    """A request's body, through a buffer, up to its end by ``body`` (a malformed
    chunked framing ends it: the upstream never sees what follows)."""
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while not body.done:
        count = _until_done(lambda: source.recv_into(buffer), stop)
        if not count:
            return
        try:
            count = body.take(view[:count])
        except ValueError:
            return
        sent = 0
        while sent < count:
            sent += _until_done(functools.partial(destination.send, view[sent:count]), stop)


def _direction(
    source: socket.socket,
    destination: socket.socket,
    stop: threading.Event,
    finished: Callable[[], None],
    body: Framing | None = None,
) -> None:
    """A thread's whole work: one direction to its end, then its descriptors closed.

    An error ends it alone (the other may still carry a reply: a server that answers
    and closes while the client still sends). ``source`` and ``destination`` are this
    thread's own duplicates. With ``body`` (a request's), only the body is carried and
    neither socket is shut.
    """
    try:
        with contextlib.suppress(OSError, _Stopped):
            if body is not None:
                _framed(source, destination, stop, body)
                return
            (_splice if _SPLICE else _copy)(source, destination, stop)
        with contextlib.suppress(OSError):
            destination.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            source.shutdown(socket.SHUT_RD)
    finally:
        source.close()
        destination.close()
        finished()


def _prepare(sock: socket.socket) -> None:
    """Blocking calls that wake after ``WAKE_SECONDS`` (``EAGAIN``) at the latest, and a
    UNIX-domain side's send buffer at ``UNIX_SEND_BYTES``."""
    sock.setblocking(True)  # noqa: FBT003 - socket's positional flag
    if sock.family == getattr(socket, "AF_UNIX", None):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SEND_BYTES)
    seconds = int(WAKE_SECONDS)
    wake = struct.pack("@ll", seconds, int((WAKE_SECONDS - seconds) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, wake)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, wake)


def _halt(stop: threading.Event, sockets: tuple[socket.socket, socket.socket]) -> None:
    stop.set()
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


async def relay(
    first: socket.socket, second: socket.socket, *, request: Framing | None = None
) -> None:
    """Both directions between two connected sockets, until both ended.

    The sockets are made blocking (with the wake bound) for the threads' calls; the
    caller must not use them in the loop afterwards, and closes them when this
    returns. A cancellation stops both directions (awaited, shielded, at most
    ``STOP_BOUND_SECONDS``), then propagates. ``OSError`` when a thread cannot start
    (the direction that started is stopped first). With ``request`` (a plain HTTP
    request's body, ``first`` the client): ``first`` to ``second`` carries that body
    alone (no thread when it is already whole), and the relay ends with the answer.
    """
    loop = asyncio.get_running_loop()
    sockets = (first, second)
    for sock in sockets:
        _prepare(sock)
    stop = threading.Event()
    ended = loop.create_future()
    running = [0]

    def one_ended(answer: bool) -> None:  # in the loop
        running[0] -= 1
        if answer and request is not None:
            _halt(stop, sockets)  # the answer is whole: the request's side is done too
        if running[0] == 0 and not ended.done():
            ended.set_result(None)

    def finisher(answer: bool) -> Callable[[], None]:
        def finished() -> None:  # in a direction's thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(one_ended, answer)

        return finished

    directions: list[tuple[socket.socket, socket.socket, bool, Framing | None]] = [
        (second, first, True, None)
    ]
    if request is None or not request.done:
        directions.insert(0, (first, second, False, request))
    try:
        for source, destination, answer, body in directions:
            _start(source, destination, stop, finisher(answer), body)
            running[0] += 1
    except (OSError, RuntimeError):
        _halt(stop, sockets)
        await _stopped(ended, running)
        raise OSError("the relay could not start") from None
    try:
        await asyncio.shield(ended)
    except asyncio.CancelledError:
        _halt(stop, sockets)
        with contextlib.suppress(asyncio.CancelledError):
            await _stopped(ended, running)
        raise


def _start(
    source: socket.socket,
    destination: socket.socket,
    stop: threading.Event,
    finished: Callable[[], None],
    body: Framing | None = None,
) -> None:
    """One direction's thread, on duplicates of the two sockets (closed if it fails)."""
    ends: list[socket.socket] = []
    try:
        ends += [source.dup(), destination.dup()]
        thread = threading.Thread(
            target=_direction,
            args=(*ends, stop, finished, body),
            name="spice-proxy-relay",
            daemon=True,
        )
        thread.start()
    except BaseException:
        for end in ends:
            end.close()
        raise


async def _stopped(ended: asyncio.Future[None], running: list[int]) -> None:
    """Wait (shielded, bounded) for the directions that run to end once stopped."""
    if not running[0]:
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(STOP_BOUND_SECONDS):
            await asyncio.shield(ended)
