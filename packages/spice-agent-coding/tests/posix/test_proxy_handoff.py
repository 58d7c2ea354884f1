"""The proxy serves a connection the bridge hands over (``SCM_RIGHTS``), contract 12.2.

The bridge in a call's namespace no longer pumps a tunnel's bytes: it sends
``_bridge.HANDOFF`` with the command's own socket, and the proxy serves that socket.
Here a test hands over real sockets as the bridge does (a loopback TCP connection, the
kind the command makes), and what is not a connected stream socket, or not sent the
bridge's way, is refused without a byte relayed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from netutil import echo, loopback

from spice.agent.coding._netpolicy._domains import DomainPolicy, parse_patterns
from spice.agent.coding._posix._net._proxy import MAXIMUM_CALL_CONNECTIONS, CallProxy, Proxy
from spice.agent.coding._posix._supervisor import _bridge as bridge

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")

BOUND = 30.0


@asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[socket.socket, socket.socket]]:
    """A loopback TCP connection: (the command's end, the end the bridge accepted)."""
    listener = socket.create_server(("127.0.0.1", 0))
    command = socket.create_connection(listener.getsockname(), timeout=BOUND)
    accepted, _ = listener.accept()
    listener.close()
    try:
        yield command, accepted
    finally:
        command.close()
        accepted.close()


def hand_over(call: CallProxy, data: bytes, fds: list[int]) -> None:
    """What the bridge does: connect to the call's socket, send ``data`` with ``fds``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
        upstream.settimeout(BOUND)
        upstream.connect(call.path)
        socket.send_fds(upstream, [data], fds)


def status_of(command: socket.socket) -> bytes:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = command.recv(1)
        if not byte:
            break
        head += byte
    return head.split(b"\r\n", 1)[0]


async def test_a_handed_connection_is_served_and_carries_bytes_both_ways() -> None:
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        call = await Proxy(  # raw bytes, not TLS: allowed as raw TCP (contract 12.1)
            DomainPolicy(parse_patterns([authority + "/tcp"]), allow_private=True)
        ).open_call()
        try:
            async with tcp_pair() as (command, accepted):
                hand_over(call, bridge.HANDOFF, [accepted.fileno()])
                accepted.close()  # the bridge keeps no copy
                command.sendall(f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
                status = await asyncio.to_thread(status_of, command)
                assert b"HTTP/1.1 200 Connection established" == status
                command.sendall(b"x" * 100_000)
                command.shutdown(socket.SHUT_WR)
                got = b""
                while chunk := await asyncio.to_thread(command.recv, 65536):
                    got += chunk
                assert b"x" * 100_000 == got
            assert 1 == call.connections
        finally:
            await call.close()


async def test_a_refused_host_is_answered_on_the_handed_connection() -> None:
    call = await Proxy(
        DomainPolicy(parse_patterns(["example.invalid"]), allow_private=False)
    ).open_call()
    try:
        async with tcp_pair() as (command, accepted):
            hand_over(call, bridge.HANDOFF, [accepted.fileno()])
            accepted.close()
            command.sendall(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
            assert (await asyncio.to_thread(status_of, command)).startswith(b"HTTP/1.1 403")
        assert ["127.0.0.1:9"] == call.refused
    finally:
        await call.close()


async def test_a_plain_client_on_the_unix_socket_is_still_served() -> None:
    """No descriptor: the first bytes are the request's own (the fallback's clients)."""
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        call = await Proxy(
            DomainPolicy(parse_patterns([authority]), allow_private=True)
        ).open_call()
        try:
            reader, writer = await asyncio.open_unix_connection(call.path)
            writer.write(f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            writer.close()
        finally:
            await call.close()


def other_end_sees_the_close(fd: int, ask: bool) -> bool:
    """Whether every copy of the peer of ``fd`` is closed: a read gives end of file, and
    (``ask``: a socket) a request sent first is never answered."""
    os.set_blocking(fd, True)
    if ask:
        try:
            os.write(fd, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
        except BrokenPipeError:
            return True
    try:
        return os.read(fd, 1) == b""
    except ConnectionResetError:
        return True  # closed with our request unread: closed all the same


@pytest.mark.parametrize("kind", ["file", "pipe", "listening", "datagram", "two", "no-marker"])
async def test_what_is_not_a_connected_stream_socket_sent_the_bridges_way_is_closed(
    kind: str,
) -> None:
    """A file, a pipe, a listening or datagram socket, two descriptors, or a descriptor
    with other bytes than the bridge's: nothing served, and the proxy keeps no copy (the
    pipe's and the socket pair's other ends see end of file; the listener refuses)."""
    call = await Proxy(
        DomainPolicy(parse_patterns(["127.0.0.1:9"]), allow_private=True)
    ).open_call()
    watch: int | None = None
    port = 0
    try:
        data = bridge.HANDOFF
        if kind == "file":
            sent = [os.open("/dev/null", os.O_RDONLY)]
        elif kind == "pipe":
            watch, write_end = os.pipe()
            sent = [write_end]
        elif kind == "listening":
            listener = socket.create_server(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            sent = [listener.detach()]
        elif kind == "datagram":
            sent = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM).detach()]
        else:
            pairs = [socket.socketpair() for _ in range(2)]
            watch = pairs[0][1].detach()
            sent = [pairs[0][0].detach(), pairs[1][0].detach()]
            pairs[1][1].close()
            if kind == "no-marker":
                data, sent = b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n", sent[:1]
        hand_over(call, data, sent)
        for fd in sent:
            os.close(fd)  # only the proxy's copies are left
        if watch is not None:
            assert await asyncio.to_thread(other_end_sees_the_close, watch, kind != "pipe")
        if port:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=BOUND).close()
                except ConnectionRefusedError:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the handed listener was kept open")
        async with asyncio.timeout(BOUND):  # the connection's task ends after its close
            while call.active:  # noqa: ASYNC110 - a count, no event to wait on
                await asyncio.sleep(0.01)
        assert (0, []) == (call.active, call.refused)
    finally:
        if watch is not None:
            os.close(watch)
        await call.close()


async def test_past_the_calls_bound_a_handed_connection_gets_the_503() -> None:
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        call = await Proxy(
            DomainPolicy(parse_patterns([authority]), allow_private=True)
        ).open_call()
        held = []
        try:
            for _ in range(MAXIMUM_CALL_CONNECTIONS):
                reader, writer = await asyncio.open_unix_connection(call.path)
                writer.write(f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
                assert (await reader.readline()).startswith(b"HTTP/1.1 200")
                held.append(writer)
            async with tcp_pair() as (command, accepted):
                hand_over(call, bridge.HANDOFF, [accepted.fileno()])
                accepted.close()
                assert (await asyncio.to_thread(status_of, command)).startswith(b"HTTP/1.1 503")
        finally:
            for writer in held:
                writer.close()
            await call.close()


async def test_the_calls_end_closes_a_handed_connection() -> None:
    """Cancellation: the call ends while a handed tunnel is open; its client sees the end."""
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        call = await Proxy(
            DomainPolicy(parse_patterns([authority]), allow_private=True)
        ).open_call()
        async with tcp_pair() as (command, accepted):
            hand_over(call, bridge.HANDOFF, [accepted.fileno()])
            accepted.close()
            command.sendall(f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
            assert (await asyncio.to_thread(status_of, command)).startswith(b"HTTP/1.1 200")
            await call.close()
            assert b"" == await asyncio.to_thread(command.recv, 10)
        assert 0 == call.active
