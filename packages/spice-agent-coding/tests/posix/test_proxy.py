"""The server's proxy with real sockets: loopback servers stand in for registries.

Each test opens a real ``CallProxy`` (its UNIX socket) and real loopback servers (TCP
on 127.0.0.1); ``--allow-private-address`` lets the proxy reach them. What the proxy
refuses, what it lets through, its bounds on both sides, and that a call's end (also a
cancelled one) leaves no connection, task, socket file or descriptor behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Awaitable
from typing import Final, TypeVar

import procutil
import pytest
from netutil import Loopback, echo, endless, http_host, loopback

from spice.agent.coding._netpolicy._domains import DomainPolicy, parse_patterns
from spice.agent.coding._posix._net import _proxy as proxy_module
from spice.agent.coding._posix._net import _stale
from spice.agent.coding._posix._net._proxy import (
    MAXIMUM_CALL_CONNECTIONS,
    MAXIMUM_REFUSED_REPORTED,
    RELAY_CHUNK_BYTES,
    CallProxy,
    Proxy,
    Resolved,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")


def call_policy(*patterns: str, private: bool = True) -> Proxy:
    return Proxy(DomainPolicy(parse_patterns(patterns), private))


async def ask(
    call: CallProxy, head: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Connect to the call's socket, send ``head``, read the status line."""
    async with asyncio.timeout(WAIT_BOUND_SECONDS):
        reader, writer = await asyncio.open_unix_connection(call.path)
        writer.write(head)
        await writer.drain()
        status = await reader.readline()
    return reader, writer, status


async def tunnel(
    call: CallProxy, authority: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer, status = await ask(call, f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
    assert status == b"HTTP/1.1 200 Connection established\r\n"
    assert await bounded(reader.readline()) == b"\r\n"
    return reader, writer


T = TypeVar("T")

WAIT_BOUND_SECONDS: Final = 30.0
"""How long a test waits for an end it expects (a hang guard, never a timing assertion)."""


async def bounded(awaitable: Awaitable[T]) -> T:
    """``awaitable`` within ``WAIT_BOUND_SECONDS`` (every wait here is bounded: D13)."""
    async with asyncio.timeout(WAIT_BOUND_SECONDS):
        return await awaitable


def present(path: str) -> bool:
    return os.path.lexists(path)


def descriptors() -> frozenset[tuple[int, str]]:
    """This process's descriptors but its lifetime ones (``procutil.open_descriptors``)."""
    return procutil.open_descriptors() if os.path.isdir("/proc/self/fd") else frozenset()


# -- through ------------------------------------------------------------------------------


async def test_a_tunnel_to_an_allowed_host_carries_bytes_both_ways() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            reader, writer = await tunnel(call, f"localhost:{server.port}")
            writer.write(b"ping")
            await writer.drain()
            assert await reader.readexactly(4) == b"ping"
            writer.write_eof()  # a half-close goes through: the echo ends, so does the tunnel
            assert await bounded(reader.read()) == b""
            writer.close()
        finally:
            await call.close()
        assert (call.refused, call.refused_count) == ([], 0)


async def test_a_plain_request_goes_in_origin_form_with_the_checked_host() -> None:
    async with loopback(http_host) as server:
        call = await call_policy(f"127.0.0.1:{server.port}/tcp").open_call()
        try:
            head = (
                f"GET http://127.0.0.1:{server.port}/simple/?x=1 HTTP/1.1\r\n"
                "Host: elsewhere.example\r\n\r\n"
            ).encode()
            reader, writer, status = await ask(call, head)
            assert status == b"HTTP/1.1 200 OK\r\n"
            rest = await bounded(reader.read())
            assert rest.endswith(
                f"GET /simple/?x=1 HTTP/1.1|Host: 127.0.0.1:{server.port}".encode()
            )
            writer.close()
        finally:
            await call.close()


async def test_the_proxy_streams_and_holds_back_a_reader_that_does_not_read() -> None:
    """The upstream can push no more than the buffers along the way while the client
    reads nothing (no body is held whole), and the first bytes arrive at once."""
    async with loopback(endless) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            reader, writer = await tunnel(call, f"localhost:{server.port}")
            assert len(await reader.readexactly(65536)) == 65536
            await bounded(server.first.wait())
            before = -1
            while before != server.sent:  # until the upstream is held back
                before = server.sent
                for _ in range(50):
                    await asyncio.sleep(0)
            assert server.sent < 32 * 1024 * 1024
            assert server.sent < 4 * RELAY_CHUNK_BYTES + 16 * 1024 * 1024
            writer.close()
        finally:
            await call.close()


async def answer_and_close(
    _: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Reads a little, answers and closes while the client may still be sending."""
    await reader.readexactly(4)
    writer.write(b"REPLY")
    await writer.drain()


async def test_a_reply_reaches_the_client_when_the_server_closes_mid_upload() -> None:
    """One direction failing (the upload meets a closed socket) does not cut the other."""
    loop = asyncio.get_running_loop()
    async with loopback(answer_and_close) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.setblocking(False)  # noqa: FBT003 - socket's positional flag
        try:
            await loop.sock_connect(client, call.path)
            await loop.sock_sendall(
                client, f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode()
            )
            received = b""
            while not received.endswith(b"\r\n\r\n"):
                received += await loop.sock_recv(client, 1)
            assert received.startswith(b"HTTP/1.1 200 ")

            async def upload() -> None:
                with contextlib.suppress(OSError):  # the upload may meet the closed side
                    await loop.sock_sendall(client, b"x" * (8 * 1024 * 1024))

            uploading = asyncio.ensure_future(upload())
            reply = b""
            async with asyncio.timeout(WAIT_BOUND_SECONDS):  # bounded (D13)
                try:
                    while chunk := await loop.sock_recv(client, 65536):
                        reply += chunk
                except ConnectionResetError:
                    pass  # the proxy closed with our upload unread: the reply came first
            assert reply == b"REPLY"
            uploading.cancel()
            async with asyncio.timeout(WAIT_BOUND_SECONDS):
                await asyncio.wait({uploading})
        finally:
            client.close()
            await call.close()


# -- refused ------------------------------------------------------------------------------


async def test_a_host_not_allowed_is_refused_recorded_and_never_resolved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked: list[str] = []

    async def resolver(host: str, port: int) -> Resolved:
        asked.append(host)
        raise OSError("not here")

    call = await Proxy(DomainPolicy(parse_patterns(["pypi.org"])), resolver).open_call()
    try:
        for head in (
            b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
            b"CONNECT pypi.org:22 HTTP/1.1\r\n\r\n",
        ):
            reader, writer, status = await ask(call, head)
            assert status.startswith(b"HTTP/1.1 403 ")
            assert b"--allow-domain" in await bounded(reader.read())
            writer.close()
    finally:
        await call.close()
    assert call.refused == ["evil.example:443", "pypi.org:22"]
    assert call.refused_count == 2
    assert asked == []
    logged = [r.getMessage() for r in caplog.records if r.name == "spice.agent.coding.proxy"]
    assert logged == [
        "proxy refused evil.example:443: not an allowed host and port",
        "proxy refused pypi.org:22: not an allowed host and port",
    ]


async def test_an_ip_literal_is_refused_unless_a_pattern_names_it() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            _, writer, status = await ask(
                call, f"CONNECT 127.0.0.1:{server.port} HTTP/1.1\r\n\r\n".encode()
            )
            assert status.startswith(b"HTTP/1.1 403 ")
            writer.close()
        finally:
            await call.close()
        assert call.refused == [f"127.0.0.1:{server.port}"]
        named = await call_policy(f"127.0.0.1:{server.port}/tcp").open_call()
        try:
            _, writer = await tunnel(named, f"127.0.0.1:{server.port}")
            writer.close()
        finally:
            await named.close()


async def test_a_private_address_is_refused_without_the_flag() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp", private=False).open_call()
        try:
            _, writer, status = await ask(
                call, f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode()
            )
            assert status.startswith(b"HTTP/1.1 403 ")
            writer.close()
        finally:
            await call.close()
        assert call.refused == [f"localhost:{server.port}"]
        assert call.private == {f"localhost:{server.port}"}
        assert server.opened == 0


async def test_a_name_is_connected_to_the_address_that_was_checked() -> None:
    """DNS rebinding: the proxy resolves once and connects to what it checked."""
    answers = [[(2, ("127.0.0.1", 0))], [(2, ("10.0.0.1", 0))]]

    async def rebinding(host: str, port: int) -> Resolved:
        family, (address, _) = answers.pop(0)[0]
        return [(family, (address, port))]

    async with loopback(echo) as server:
        proxy = Proxy(
            DomainPolicy(parse_patterns([f"rebind.example:{server.port}/tcp"]), allow_private=True),
            rebinding,
        )
        call = await proxy.open_call()
        try:
            reader, writer = await tunnel(call, f"rebind.example:{server.port}")
            writer.write(b"same")
            assert await reader.readexactly(4) == b"same"
            writer.close()
        finally:
            await call.close()
        assert answers == [[(2, ("10.0.0.1", 0))]]  # asked once


async def test_refusals_are_kept_to_the_bound_and_counted_beyond_it() -> None:
    call = await call_policy("pypi.org").open_call()
    try:
        for n in range(MAXIMUM_REFUSED_REPORTED + 2):
            _, writer, status = await ask(
                call, f"CONNECT h{n}.example:443 HTTP/1.1\r\n\r\n".encode()
            )
            assert status.startswith(b"HTTP/1.1 403 ")
            writer.close()
        _, writer, _ = await ask(call, b"CONNECT h0.example:443 HTTP/1.1\r\n\r\n")
        writer.close()
    finally:
        await call.close()
    assert len(call.refused) == MAXIMUM_REFUSED_REPORTED
    assert call.refused[0] == "h0.example:443"
    assert call.refused_count == MAXIMUM_REFUSED_REPORTED + 3


async def test_a_refused_plain_request_logs_its_host_and_port_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call = await call_policy("pypi.org").open_call()
    try:
        head = (
            b"GET http://evil.example/SECRET-PATH?token=SECRET HTTP/1.1\r\nCookie: SECRET\r\n\r\n"
        )
        reader, writer, status = await ask(call, head)
        assert status.startswith(b"HTTP/1.1 403 ")
        assert b"SECRET" not in await bounded(reader.read())
        writer.close()
    finally:
        await call.close()
    assert call.refused == ["evil.example:80"]
    assert "SECRET" not in caplog.text
    assert "evil.example:80" in caplog.text


async def test_a_malformed_request_is_a_400_and_not_a_refused_host() -> None:
    call = await call_policy("pypi.org").open_call()
    try:
        _, writer, status = await ask(call, b"GET /x HTTP/1.1\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 400 ")
        writer.close()
    finally:
        await call.close()
    assert call.refused_count == 0


async def test_a_resolver_failure_or_stall_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    never = asyncio.Event()

    async def failing(host: str, port: int) -> Resolved:
        raise OSError("no such name")

    async def stalling(host: str, port: int) -> Resolved:
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(proxy_module, "RESOLVE_BOUND_SECONDS", 0.05)
    for resolver, expected in ((failing, b"502"), (stalling, b"504")):
        call = await Proxy(DomainPolicy(parse_patterns(["pypi.org"])), resolver).open_call()
        try:
            _, writer, status = await ask(call, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n")
            assert status.split()[1] == expected
            writer.close()
        finally:
            await call.close()
        assert call.refused_count == 0


# -- bounds and ends ----------------------------------------------------------------------


async def test_the_calls_connection_bound_holds_on_both_sides() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            opened = [
                await tunnel(call, f"localhost:{server.port}")
                for _ in range(MAXIMUM_CALL_CONNECTIONS)
            ]
            assert call.active == MAXIMUM_CALL_CONNECTIONS
            _, writer, status = await ask(
                call, f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode()
            )
            assert status.startswith(b"HTTP/1.1 503 ")
            writer.close()
            # One ends: the next one is served again.
            opened[0][1].close()
            assert await opened[0][0].read() == b""  # the proxy ended it
            # Its relay's threads end, then its task: poll, bounded (no time asserted).
            async with asyncio.timeout(30):
                while call.active >= MAXIMUM_CALL_CONNECTIONS:  # noqa: ASYNC110 - a count
                    await asyncio.sleep(0.01)
            assert call.active == MAXIMUM_CALL_CONNECTIONS - 1
            opened.append(await tunnel(call, f"localhost:{server.port}"))
            for _, w in opened:
                w.close()
        finally:
            await call.close()


async def test_the_servers_connection_bound_spans_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_module, "MAXIMUM_SERVER_CONNECTIONS", 3)
    async with loopback(echo) as server:
        proxy = call_policy(f"localhost:{server.port}/tcp")
        first, second = await proxy.open_call(), await proxy.open_call()
        try:
            held = [await tunnel(first, f"localhost:{server.port}") for _ in range(2)]
            held.append(await tunnel(second, f"localhost:{server.port}"))
            assert proxy.active == 3
            _, writer, status = await ask(
                second, f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode()
            )
            assert status.startswith(b"HTTP/1.1 503 ")
            writer.close()
            for _, held_writer in held:
                held_writer.close()
        finally:
            await first.close()
            await second.close()
        assert proxy.active == 0


async def test_a_calls_end_closes_every_tunnel_and_leaves_nothing() -> None:
    async with loopback(echo) as server:
        baseline = descriptors()
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        directory = call.directory
        assert directory is not None
        assert present(call.path)
        assert os.stat(directory).st_mode & 0o777 == 0o700
        assert os.stat(call.path).st_mode & 0o777 == 0o600
        opened = [await tunnel(call, f"localhost:{server.port}") for _ in range(3)]
        await call.close()
        async with asyncio.timeout(WAIT_BOUND_SECONDS):  # bounded: 107 s once under load (D13)
            for reader, writer in opened:
                assert await bounded(reader.read()) == b""  # the client's side ends
                writer.close()
                await writer.wait_closed()
            while server.closed < 3:
                await server.ended.wait()
                server.ended.clear()
        assert call.active == 0
        assert not present(directory)
        assert descriptors() == baseline
        with pytest.raises(FileNotFoundError):
            await asyncio.open_unix_connection(call.path)
        await call.close()  # idempotent


async def test_a_cancelled_end_still_ends_the_calls_transfers() -> None:
    """The call is cancelled mid-transfer: its end finishes (shielded, bounded), the
    cancellation propagates, and the transfer's both sides are closed."""
    async with loopback(endless) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        reader, writer = await tunnel(call, f"localhost:{server.port}")
        assert len(await reader.readexactly(RELAY_CHUNK_BYTES)) == RELAY_CHUNK_BYTES
        closing = asyncio.ensure_future(call.close())
        await asyncio.sleep(0)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert call.active == 0
        async with asyncio.timeout(WAIT_BOUND_SECONDS):  # bounded (D13)
            await server.ended.wait()
            with contextlib.suppress(ConnectionResetError):  # ended with bytes unread
                while await reader.read(RELAY_CHUNK_BYTES):
                    pass
        writer.close()
        assert call.directory is not None
        assert not present(call.directory)


async def test_without_splice_the_copying_relay_carries_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where ``splice`` is missing (not Linux), the buffer path moves every byte too."""
    from spice.agent.coding._posix._net import _relay as relay_module  # noqa: PLC0415

    monkeypatch.setattr(relay_module, "_SPLICE", False)
    data = os.urandom(3 * 1024 * 1024 + 17)
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            reader, writer = await tunnel(call, f"localhost:{server.port}")
            writer.write(data)
            writer.write_eof()
            assert await bounded(reader.read()) == data
            writer.close()
        finally:
            await call.close()


async def test_an_allowed_host_that_does_not_answer_is_a_502_and_not_a_refusal() -> None:
    with socket.socket() as taken:  # a port nobody listens on
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    call = await call_policy(f"localhost:{port}/tcp").open_call()
    try:
        _, writer, status = await ask(call, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
        assert status.startswith(b"HTTP/1.1 502 ")
        writer.close()
    finally:
        await call.close()
    assert call.refused_count == 0


async def test_a_client_that_says_nothing_is_dropped_at_the_head_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(proxy_module, "HEAD_BOUND_SECONDS", 0.05)
    call = await call_policy("pypi.org").open_call()
    try:
        reader, writer = await asyncio.open_unix_connection(call.path)
        writer.write(b"CONNECT pypi.org:443 HTTP/1.1\r\n")  # no blank line, ever
        assert await bounded(reader.read()) == b""  # closed without an answer
        writer.close()
        reader, writer = await asyncio.open_unix_connection(call.path)
        writer.write_eof()  # ends before a head
        assert await bounded(reader.read()) == b""
        writer.close()
    finally:
        await call.close()
    assert call.refused_count == 0
    assert call.active == 0


def test_the_socket_directories_of_dead_servers_are_removed_and_live_ones_kept() -> None:
    base = tempfile.mkdtemp(prefix="sp-", dir="/tmp")  # short enough for sun_path
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:

        def made(name: str, mode: int = 0o700) -> str:
            path = os.path.join(base, name)
            os.mkdir(path)
            os.chmod(path, mode)
            return path

        dead = made("spice-proxy-dead")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
            gone.bind(os.path.join(dead, "proxy.sock"))  # bound, never listening, closed
        live = made("spice-proxy-live")
        listening.bind(os.path.join(live, "proxy.sock"))
        listening.listen()
        old_empty = made("spice-proxy-old")
        os.utime(old_empty, (0, 0))
        fresh_empty = made("spice-proxy-fresh")
        open_mode = made("spice-proxy-open", 0o755)
        other = made("something-else")
        assert proxy_module.remove_stale(base) == 2
        assert sorted(os.listdir(base)) == sorted(
            os.path.basename(p) for p in (live, fresh_empty, open_mode, other)
        )
        assert proxy_module.remove_stale(base) == 0
    finally:
        listening.close()
        shutil.rmtree(base)


async def test_another_servers_sweep_never_connects_to_a_live_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A live call's proxy (peers checked) while another proxy is made (its sweep of dead
    servers' directories runs): the live one sees no connection, logs no "outside the
    call's processes" line, and keeps its directory; once it ends, its lock is free."""
    proxy = Proxy(DomainPolicy(parse_patterns(["pypi.org"])), check_peers=True)
    call = await proxy.open_call()
    try:
        call.leader = os.getpid()
        with caplog.at_level("WARNING"):
            Proxy(DomainPolicy(parse_patterns(["pypi.org"])))
            await asyncio.sleep(0)  # the listener's reader would run now
            await asyncio.sleep(0)
        assert 0 == call.connections
        assert 0 == call.foreign
        assert "outside the call's processes" not in caplog.text
        assert call.directory is not None
        assert os.path.exists(call.path)  # noqa: ASYNC240
        lock = os.path.join(call.directory, _stale._LOCK_NAME)
        assert _stale._lock_held(lock) is True
    finally:
        await call.close()
    assert call.directory is not None
    assert not os.path.exists(call.directory)  # noqa: ASYNC240


def test_a_lock_nobody_holds_is_a_dead_servers_and_a_held_one_is_alive() -> None:
    """With a lock file: free means dead (removed, even though a socket listens there and
    would accept), held means alive (kept, and never connected to); no lock file, a link
    in its place: judged by the probe as before."""
    base = tempfile.mkdtemp(prefix="sp-", dir="/tmp")
    sockets: list[socket.socket] = []
    held = -1
    try:

        def listening_in(name: str) -> str:
            path = os.path.join(base, name)
            os.mkdir(path, 0o700)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(os.path.join(path, "proxy.sock"))
            server.listen()
            server.setblocking(False)  # noqa: FBT003
            sockets.append(server)
            return path

        free = listening_in("spice-proxy-free")
        open(os.path.join(free, _stale._LOCK_NAME), "w").close()
        alive = listening_in("spice-proxy-alive")
        held = _stale._hold_lock(alive)
        linked = listening_in("spice-proxy-linked")
        os.symlink(os.path.join(alive, _stale._LOCK_NAME), os.path.join(linked, "alive.lock"))
        assert 1 == proxy_module.remove_stale(base)
        assert sorted(os.listdir(base)) == ["spice-proxy-alive", "spice-proxy-linked"]
        with pytest.raises(BlockingIOError):
            sockets[1].accept()  # the live one was never connected to
    finally:
        for server in sockets:
            server.close()
        if held >= 0:
            os.close(held)
        shutil.rmtree(base)


# -- accepting ------------------------------------------------------------------------------


def pending(call: CallProxy) -> bool:
    """Whether the call's listener waits for a retry (a function: no narrowing by mypy)."""
    return call._retry is not None


def _waiting_clients(call: CallProxy, count: int) -> list[socket.socket]:
    """``count`` clients connected to the call's socket, waiting in its backlog."""
    clients = []
    for _ in range(count):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(call.path)
        clients.append(client)
    return clients


async def test_connections_accepted_but_never_started_are_closed_when_the_call_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The call ends in the very step that accepted its connections: each task is
    cancelled before its first step (its own ``finally`` never runs), and still every
    accepted socket is closed (no ResourceWarning, no descriptor left)."""
    accepted: list[socket.socket] = []
    original = CallProxy._accepted

    def recording(self: CallProxy, connection: socket.socket) -> None:
        accepted.append(connection)
        original(self, connection)

    monkeypatch.setattr(CallProxy, "_accepted", recording)
    before = descriptors()
    call = await call_policy("localhost:80").open_call()
    clients = _waiting_clients(call, 5)
    assert call._listener is not None
    call._accept(call._listener)  # what the loop runs when the listener is readable
    assert (5, 5) == (len(accepted), call.active)
    await call.close()  # no step in between: every task is still unstarted
    assert all(connection.fileno() == -1 for connection in accepted)
    for client in clients:
        client.settimeout(30)  # a hang guard, never a timing assertion
        assert client.recv(16) == b""  # the proxy's side is closed
        client.close()
    assert descriptors() == before


async def test_accepting_takes_at_most_a_batch_per_readiness_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ACCEPT_BATCH`` connections per event, the rest at the next one (both sides)."""
    monkeypatch.setattr(proxy_module, "ACCEPT_BATCH", 3)
    accepted: list[socket.socket] = []
    monkeypatch.setattr(CallProxy, "_accepted", lambda _self, c: accepted.append(c))
    call = await call_policy("localhost:80").open_call()
    clients = _waiting_clients(call, 4)
    try:
        assert call._listener is not None
        call._accept(call._listener)
        assert 3 == len(accepted)
        call._accept(call._listener)
        assert 4 == len(accepted)
        call._accept(call._listener)  # nothing waits: returns at once
        assert 4 == len(accepted)
    finally:
        for connection in (*accepted, *clients):
            connection.close()
        await call.close()


async def test_an_accept_that_fails_pauses_the_listener_then_serves_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of descriptors (EMFILE) the listener is put aside for ``ACCEPT_RETRY_SECONDS``
    (the client waits in the backlog), then the same client is served; a call that ends
    during the pause cancels its retry."""
    monkeypatch.setattr(proxy_module, "ACCEPT_RETRY_SECONDS", 0)

    class Exhausted:
        def __init__(self, real: socket.socket) -> None:
            self.real = real

        def fileno(self) -> int:
            return self.real.fileno()

        def accept(self) -> tuple[socket.socket, object]:
            raise OSError(24, "EMFILE")

    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            assert call._listener is not None
            call._accept(Exhausted(call._listener))  # type: ignore[arg-type]
            assert pending(call)
            async with asyncio.timeout(30):  # a hang guard, never a timing assertion
                reader, writer = await tunnel(call, f"localhost:{server.port}")
            assert not pending(call)
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            writer.close()
            call._accept(Exhausted(call._listener))  # type: ignore[arg-type]
            assert pending(call)
        finally:
            await call.close()
        assert not pending(call)
