"""A tunnel's first record against its CONNECT host, with real sockets (R5-5, R5-13).

A tunnel carries bytes only after a TLS ClientHello that is its first record and asks
for the CONNECT host or another name allowed on that port; anything else (another name,
a record before the hello, no name in a tunnel to a name, plain HTTP, an SSH banner's
answer) is closed before a byte reaches the upstream and recorded. Where the user
allowed ``HOST:PORT/tcp``, raw bytes pass unread. Real TLS: an OpenSSL server (``ssl``,
a certificate made by the ``openssl`` command) and OpenSSL clients through the tunnel.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from netutil import Loopback, echo, loopback
from test_proxy import call_policy, tunnel
from tlsutil import hello_message, real_hello, records, self_signed

from spice.agent.coding._posix._hints import RefusalScanner, sandbox_hint
from spice.agent.coding._posix._net import _proxy as proxy_module
from spice.agent.coding._posix._net._proxy import CallProxy

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")


async def through(call: CallProxy, port: int, first: bytes) -> bytes:
    """Open a tunnel to ``localhost:port`` (an echo), send ``first``, half-close, and
    read what comes back to the end."""
    reader, writer = await tunnel(call, f"localhost:{port}")
    writer.write(first)
    writer.write_eof()
    try:
        async with asyncio.timeout(30):
            return await reader.read()
    finally:
        writer.close()


async def test_a_hello_for_the_connect_host_goes_through() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            hello = real_hello("LocalHost.")
            assert await through(call, server.port, hello) == hello
        finally:
            await call.close()
        assert call.refused_count == 0


async def test_a_hello_without_a_name_goes_through_only_to_an_address() -> None:
    """TLS names no address: a tunnel to an allowed address takes a hello without a
    name; a tunnel to a name needs the name (else the upstream picks the site)."""
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}", f"127.0.0.1:{server.port}").open_call()
        try:
            hello = real_hello(None)
            reader, writer = await tunnel(call, f"127.0.0.1:{server.port}")
            writer.write(hello)
            writer.write_eof()
            async with asyncio.timeout(30):
                assert await reader.read() == hello
            writer.close()
            assert await through(call, server.port, hello) == b""
        finally:
            await call.close()
        assert (call.refused, call.refused_count) == ([f"localhost:{server.port}"], 1)


async def keeper(
    received: list[bytes],
) -> Callable[[Loopback, asyncio.StreamReader, object], Awaitable[None]]:
    async def keep(_: Loopback, reader: asyncio.StreamReader, __: object) -> None:
        received.append(await reader.read())

    return keep


@pytest.mark.parametrize(
    ("first", "refused"),
    [
        pytest.param(
            b"\x15\x03\x01\x00\x02\x01\x5a" + real_hello("evil.example"),
            "localhost",
            id="R5-5 a warning alert, then a hello for a refused name",
        ),
        pytest.param(
            b"\x14\x03\x03\x00\x01\x01" + real_hello("localhost"),
            "localhost",
            id="a change cipher spec, then a hello for the connect host",
        ),
        pytest.param(
            b"\x17\x03\x03\x00\x00" + real_hello("localhost"),
            "localhost",
            id="an empty application data record, then a hello",
        ),
        pytest.param(
            b"GET /x HTTP/1.1\r\nHost: evil.example\r\n\r\n",
            "raw",
            id="R5-13 plain HTTP with another Host",
        ),
        pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n", "raw", id="ssh"),
    ],
)
async def test_a_tunnel_whose_first_record_is_not_an_allowed_hello_reaches_nothing(
    first: bytes, refused: str
) -> None:
    """Nothing reaches the upstream (it reads its end at once); the refusal is in the
    call's answer. For bytes that are not TLS at all the hint names ``host:port/tcp``,
    the pattern that would carry them."""
    received: list[bytes] = []
    async with loopback(await keeper(received)) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            assert await through(call, server.port, first) == b""
            async with asyncio.timeout(30):
                await server.ended.wait()
        finally:
            await call.close()
    assert received == [b""]
    authority = f"localhost:{server.port}"
    assert (call.refused, call.refused_count) == ([authority], 1)
    assert call.raw == ({authority} if refused == "raw" else set())
    hint = sandbox_hint(
        RefusalScanner(),
        (),
        (),
        network_denied=False,
        refused_hosts=call.refused,
        raw_hosts=call.raw,
    )
    assert hint is not None
    pattern = f"{authority}/tcp" if refused == "raw" else "localhost:" + str(server.port)
    assert f"--allow-domain {pattern}." in hint


async def test_a_tcp_pattern_carries_raw_bytes_both_ways_unread() -> None:
    """``HOST:PORT/tcp`` (git over ssh): whatever the client sends first, and a server
    that speaks first, pass unread."""
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}/tcp").open_call()
        try:
            for first in (b"SSH-2.0-OpenSSH_9.6\r\n", b"GET / HTTP/1.1\r\n\r\n"):
                assert await through(call, server.port, first) == first
        finally:
            await call.close()
        assert call.refused_count == 0


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(real_hello("evil.example"), id="another name"),
        pytest.param(records(hello_message(None)[:-2] + b"\x00\x05"), id="malformed"),
        pytest.param(
            records(hello_message(b"localhost")[:40]) + b"\x17\x03\x03\x00\x01x",
            id="a record that is not the rest of the hello",
        ),
    ],
)
async def test_a_hello_for_another_host_or_a_malformed_one_is_refused(first: bytes) -> None:
    """The tunnel is closed before a byte reaches the server, and the refusal is
    recorded for the call's answer."""
    received: list[bytes] = []

    async def keep(_: Loopback, reader: asyncio.StreamReader, __: object) -> None:
        received.append(await reader.read())

    async with loopback(keep) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            assert await through(call, server.port, first) == b""
            await server.ended.wait()
        finally:
            await call.close()
    assert received == [b""]
    refused = "evil.example" if b"evil.example" in first else "localhost"
    assert call.refused == [f"{refused}:{server.port}"]  # the name the hint should name
    assert call.refused_count == 1


async def test_a_hello_for_another_allowed_host_goes_through() -> None:
    """Two names the operator allowed behind one address (a CDN's): either may be asked
    for in a tunnel opened to the other."""
    async with loopback(echo) as server:
        policy = call_policy(f"localhost:{server.port}", f"mirror.example:{server.port}")
        call = await policy.open_call()
        try:
            hello = real_hello("mirror.example")
            assert await through(call, server.port, hello) == hello
        finally:
            await call.close()
        assert call.refused_count == 0


async def test_a_hello_sent_with_the_connect_head_is_checked_too() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            reader, writer = await asyncio.open_unix_connection(call.path)
            head = f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode()
            writer.write(head + real_hello("evil.example"))
            writer.write_eof()
            status = await reader.readline()
            assert status.startswith(b"HTTP/1.1 200 ")
            assert await reader.readline() == b"\r\n"
            assert await reader.read() == b""
            writer.close()
        finally:
            await call.close()
    assert call.refused_count == 1


async def banner(_: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"220 ready\r\n")
    await writer.drain()
    writer.write(await reader.read())
    await writer.drain()


async def test_a_server_that_speaks_first_is_heard_only_through_a_tcp_pattern() -> None:
    """Without ``/tcp`` the server's banner waits for a hello that never comes (the
    client's answer to it is refused, the server gets none of it); with ``/tcp`` the
    banner comes at once and the answer goes on."""
    async with loopback(banner) as server:
        for pattern, heard in (("", b""), ("/tcp", b"220 ready\r\n")):
            call = await call_policy(f"localhost:{server.port}{pattern}").open_call()
            try:
                reader, writer = await tunnel(call, f"localhost:{server.port}")
                if heard:
                    async with asyncio.timeout(30):
                        assert await reader.readline() == heard
                writer.write(b"EHLO me\r\n")
                writer.write_eof()
                async with asyncio.timeout(30):
                    assert await reader.read() == (b"EHLO me\r\n" if heard else b"")
                writer.close()
            finally:
                await call.close()
            assert call.refused_count == (0 if heard else 1)


async def test_a_tunnel_where_nobody_speaks_is_closed_at_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(proxy_module, "HELLO_BOUND_SECONDS", 0.2)

    async def silent(_: Loopback, reader: asyncio.StreamReader, __: object) -> None:
        await reader.read()

    async with loopback(silent) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            reader, writer = await tunnel(call, f"localhost:{server.port}")
            async with asyncio.timeout(30):
                assert await reader.read() == b""  # closed by the proxy, not by the test
            writer.close()
        finally:
            await call.close()
        assert call.refused_count == 0


async def test_a_client_that_ends_inside_its_hello_is_closed_and_not_refused() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            half = real_hello("localhost")[:20]
            assert await through(call, server.port, half) == b""
        finally:
            await call.close()
        assert call.refused_count == 0


async def test_a_call_that_ends_while_a_tunnel_waits_for_its_hello_leaves_nothing() -> None:
    """The cancellation side: the call ends while its tunnel waits for either side's
    first bytes; the wait is cancelled, the tunnel is closed, no task is left."""

    async def silent(_: Loopback, reader: asyncio.StreamReader, __: object) -> None:
        await reader.read()

    async with loopback(silent) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        reader, writer = await tunnel(call, f"localhost:{server.port}")
        assert call.active == 1
        await call.close()
        assert call.active == 0
        async with asyncio.timeout(30):
            assert await reader.read() == b""
        writer.close()
        async with asyncio.timeout(30):
            await server.ended.wait()
        assert call.refused_count == 0


# -- real TLS: an OpenSSL server and OpenSSL clients --------------------------------------


def _tls_client(path: str, authority: str, name: str, cafile: str, first: bytes) -> bytes:
    """Through the call's socket: CONNECT, then a real TLS handshake asking for
    ``name`` (``first`` sent before the hello, raw), one line sent and its echo read."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(30)
        raw.connect(path)
        raw.sendall(f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += raw.recv(1)
        assert head.startswith(b"HTTP/1.1 200 ")
        if first:
            raw.sendall(first)
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = False
        with context.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"hello over tls\n")
            return tls.recv(100)


async def test_a_real_tls_client_reaches_a_real_tls_server_for_the_connect_host(
    tmp_path: Path,
) -> None:
    """The positive side, end to end: OpenSSL on both ends, the server sees the
    CONNECT host in SNI, the bytes come back encrypted both ways; a client asking for
    another name, or putting an alert before its hello, reaches no handshake."""
    cert, key = self_signed(str(tmp_path))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda _, name, __: names.append(name)

    async def echo_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await reader.readline())
            await writer.drain()
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo_line, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    call = await call_policy(f"localhost:{port}").open_call()
    try:
        authority = f"localhost:{port}"
        answer = await asyncio.to_thread(_tls_client, call.path, authority, "localhost", cert, b"")
        assert answer == b"hello over tls\n"
        assert names == ["localhost"]
        alert = b"\x15\x03\x01\x00\x02\x01\x5a"
        for name, first in (("evil.example", b""), ("evil.example", alert), ("localhost", alert)):
            with pytest.raises((ssl.SSLError, OSError)):
                await asyncio.to_thread(_tls_client, call.path, authority, name, cert, first)
        assert names == ["localhost"]  # the server never read another hello
    finally:
        await call.close()
        server.close()
        await server.wait_closed()
    assert call.refused == [f"evil.example:{port}", f"localhost:{port}"]
    assert call.refused_count == 3
