"""The proxy's relay between real sockets: a UNIX pair for the command's side, a TCP
connection on 127.0.0.1 for the upstream, the relay's two threads between them.

What moves, what a half-close does, that a stopped relay ends even where a shutdown
does not wake its thread (a send blocked on a full TCP buffer: the wake bound does),
and that a relay that cannot start its threads leaves none behind.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import procutil
import pytest

from spice.agent.coding._posix._net import _relay

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the proxy is POSIX only")

HANG_BOUND_SECONDS = 30.0
"""A test that waits longer than this for an end has found a hang (not a slow machine)."""


class Ends:
    """The relay's two sockets and the applications' ends of them."""

    def __init__(self) -> None:
        self.command, self.client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with socket.create_server(("127.0.0.1", 0)) as listener:
            self.upstream = socket.create_connection(listener.getsockname())
            self.server, _ = listener.accept()
        for sock in (self.client, self.upstream):
            sock.setblocking(False)  # noqa: FBT003 - as the proxy hands them over

    def close(self) -> None:
        for sock in (self.command, self.client, self.upstream, self.server):
            sock.close()


@pytest.fixture
def ends() -> Iterator[Ends]:
    made = Ends()
    try:
        yield made
    finally:
        made.close()


def relay_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spice-proxy-relay"]


def descriptors() -> int:
    """How many descriptors this process holds but its lifetime ones (the relay's own
    threads and duplicates are what a difference counts)."""
    return len(procutil.open_descriptors())


def receive_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


async def no_relay_thread_left() -> None:
    def joined() -> list[threading.Thread]:
        for thread in relay_threads():
            thread.join(HANG_BOUND_SECONDS)
        return relay_threads()

    assert await asyncio.to_thread(joined) == []


async def test_bytes_go_both_ways_and_a_half_close_goes_through(ends: Ends) -> None:
    """The command sends and half-closes; the upstream reads to the end, answers after
    it and closes: every byte arrives, and the relay returns when both sides ended."""
    request = os.urandom(3 * _relay.CHUNK_BYTES + 17)
    answer = os.urandom(5 * _relay.PIPE_BYTES + 3)

    def command() -> bytes:
        ends.command.sendall(request)
        ends.command.shutdown(socket.SHUT_WR)
        return receive_all(ends.command)

    def server() -> bytes:
        got = receive_all(ends.server)  # to the command's end of file
        ends.server.sendall(answer)
        ends.server.shutdown(socket.SHUT_WR)
        return got

    relaying = asyncio.ensure_future(_relay.relay(ends.client, ends.upstream))
    got_command, got_server = await asyncio.gather(
        asyncio.to_thread(command), asyncio.to_thread(server)
    )
    async with asyncio.timeout(HANG_BOUND_SECONDS):
        await relaying
    assert got_server == request
    assert got_command == answer
    await no_relay_thread_left()


async def test_the_copying_path_moves_the_same_bytes(
    ends: Ends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``splice`` (not Linux): a buffer per direction, the same bytes, the end."""
    monkeypatch.setattr(_relay, "_SPLICE", False)
    data = os.urandom(2 * _relay.CHUNK_BYTES + 5)

    def command() -> bytes:
        ends.command.sendall(data)
        ends.command.shutdown(socket.SHUT_WR)
        return receive_all(ends.command)

    def server() -> None:
        ends.server.sendall(receive_all(ends.server)[::-1])
        ends.server.shutdown(socket.SHUT_WR)

    relaying = asyncio.ensure_future(_relay.relay(ends.client, ends.upstream))
    got, _ = await asyncio.gather(asyncio.to_thread(command), asyncio.to_thread(server))
    async with asyncio.timeout(HANG_BOUND_SECONDS):
        await relaying
    assert got == data[::-1]


async def fill_upstream(ends: Ends) -> asyncio.Future[None]:
    """The command sends without end to an upstream that never reads, until the relay's
    send to the upstream blocks on its full buffer (the command's own send then blocks)."""
    ends.command.setblocking(False)  # noqa: FBT003 - socket's positional flag
    chunk = b"x" * (1 << 16)
    stalled = 0
    while stalled < 50:  # nothing taken for 50 tries in a row: everything is full
        try:
            ends.command.send(chunk)
            stalled = 0
        except BlockingIOError:
            stalled += 1
            await asyncio.sleep(0.01)
    return asyncio.get_running_loop().create_future()


async def test_a_cancelled_relay_ends_a_send_blocked_on_a_full_tcp_buffer(
    ends: Ends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown does not wake a send blocked on a full TCP buffer; the wake bound
    does: the cancelled relay returns, its threads end, their descriptors are closed.
    (The stop bound is out of reach: the relay returns because its threads ended.)"""
    monkeypatch.setattr(_relay, "WAKE_SECONDS", 0.05)
    monkeypatch.setattr(_relay, "STOP_BOUND_SECONDS", 3600.0)
    baseline = descriptors()
    relaying = asyncio.ensure_future(_relay.relay(ends.client, ends.upstream))
    await fill_upstream(ends)
    assert len(relay_threads()) == 2
    relaying.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(HANG_BOUND_SECONDS):
            await relaying
    assert descriptors() == baseline  # the threads' duplicates are closed
    await no_relay_thread_left()


async def test_threads_that_do_not_wake_hold_the_caller_no_longer_than_the_stop_bound(
    ends: Ends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side: threads that nothing wakes (no shutdown reaches them, no wake
    bound) outlive the stop bound, and the cancelled relay still returns at that bound
    (its caller is not held). They end, and close their duplicates, once their peers go
    away: nothing is closed under them."""
    monkeypatch.setattr(_relay, "WAKE_SECONDS", 3600.0)
    monkeypatch.setattr(_relay, "STOP_BOUND_SECONDS", 0.2)
    monkeypatch.setattr(_relay, "_halt", lambda stop, _: stop.set())
    baseline = descriptors()
    relaying = asyncio.ensure_future(_relay.relay(ends.client, ends.upstream))
    await asyncio.sleep(0)
    relaying.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(HANG_BOUND_SECONDS):
            await relaying
    assert len(relay_threads()) == 2  # each still blocked in its read
    ends.client.close()
    ends.upstream.close()
    # each thread holds two duplicates and its pipe's two ends: 8, less the two closed
    assert descriptors() == baseline + 6
    ends.command.close()  # the command's end of file, then the upstream's
    ends.server.close()
    await no_relay_thread_left()
    assert descriptors() == baseline - 4


async def test_a_thread_that_cannot_start_is_an_oserror_and_leaves_nothing(
    ends: Ends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second direction's thread cannot start (a host out of threads): the first
    one is stopped, every duplicate is closed, and the caller gets ``OSError``."""
    started: list[threading.Thread] = []

    class Refusing(threading.Thread):
        def start(self) -> None:
            if self.name == "spice-proxy-relay":  # the executor's threads start as ever
                if started:
                    raise RuntimeError("can't start new thread")
                started.append(self)
            super().start()

    monkeypatch.setattr(threading, "Thread", Refusing)
    baseline = descriptors()
    with pytest.raises(OSError, match="could not start"):
        await _relay.relay(ends.client, ends.upstream)
    assert len(started) == 1
    await no_relay_thread_left()
    assert descriptors() == baseline


async def test_a_duplicate_that_cannot_be_made_is_an_oserror_and_leaves_nothing(
    ends: Ends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of descriptors at the first ``dup``: no thread, nothing left, ``OSError``."""

    def refuse(_: socket.socket) -> socket.socket:
        raise OSError(24, "Too many open files")

    baseline = descriptors()
    monkeypatch.setattr(socket.socket, "dup", refuse)
    with pytest.raises(OSError, match="could not start"):
        await _relay.relay(ends.client, ends.upstream)
    assert relay_threads() == []
    assert descriptors() == baseline


async def test_the_wake_bound_is_set_on_both_sockets(ends: Ends) -> None:
    """Both sockets are blocking with ``WAKE_SECONDS`` as their receive and send bound."""
    relaying = asyncio.ensure_future(_relay.relay(ends.client, ends.upstream))
    try:
        await asyncio.sleep(0)
        for sock in (ends.client, ends.upstream):
            assert sock.getblocking()
            for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
                seconds, micros = _timeval(sock.getsockopt(socket.SOL_SOCKET, option, 16))
                assert seconds + micros / 1e6 == pytest.approx(_relay.WAKE_SECONDS)
    finally:
        relaying.cancel()
        with pytest.raises(asyncio.CancelledError):
            await relaying


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's buffer accounting")
async def test_the_unix_side_gets_the_larger_send_buffer_and_tcp_keeps_its_own(
    ends: Ends,
) -> None:
    """The UNIX-domain side sends with ``UNIX_SEND_BYTES`` (doubled by the kernel, capped
    by ``wmem_max``); the TCP side's buffer is left to autotuning, as it was."""
    most = _wmem_max()
    tcp_before = ends.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    unix_before = ends.client.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    relaying = asyncio.ensure_future(_relay.relay(ends.client, ends.upstream))
    try:
        await asyncio.sleep(0)
        unix_now = ends.client.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert unix_now == 2 * min(_relay.UNIX_SEND_BYTES, most)
        if most >= _relay.UNIX_SEND_BYTES:  # a host that caps lower gets less, not an error
            assert unix_now > unix_before
        assert ends.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == tcp_before
    finally:
        relaying.cancel()
        with pytest.raises(asyncio.CancelledError):
            await relaying


def _wmem_max() -> int:
    """The host's cap on a socket's send buffer (``net.core.wmem_max``)."""
    return int(Path("/proc/sys/net/core/wmem_max").read_text(encoding="ascii"))


def _timeval(raw: bytes) -> tuple[int, int]:
    import struct  # noqa: PLC0415

    return struct.unpack("@ll", raw[: struct.calcsize("@ll")])
