"""A tunnel's TLS server name against its CONNECT host, with real sockets.

A client that CONNECTs to an allowed name and then asks TLS for another one (a site
behind the same CDN address: domain fronting's first form) is refused; a hello that
asks for the CONNECT host, or for no name, and any other protocol go through; so does a
tunnel whose server speaks first (TLS is the client's to begin: documented). A tunnel
where nobody speaks is closed at ``HELLO_BOUND_SECONDS``.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from netutil import Loopback, echo, loopback
from test_proxy import call_policy, tunnel
from tlsutil import hello_message, real_hello, records

from spice.agent.coding._posix import _proxy as proxy_module
from spice.agent.coding._posix._proxy import CallProxy

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


async def test_a_hello_without_a_name_and_other_protocols_go_through() -> None:
    async with loopback(echo) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            for first in (real_hello(None), b"GET / HTTP/1.1\r\nHost: elsewhere\r\n\r\n"):
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


async def test_a_server_that_speaks_first_is_not_held_for_a_hello() -> None:
    """The other side of the rule: the server's banner comes at once, and what the
    client sends after it goes on unread (documented: TLS never starts this way)."""

    async def banner(
        _: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        writer.write(b"220 ready\r\n")
        await writer.drain()
        writer.write(await reader.read())
        await writer.drain()

    async with loopback(banner) as server:
        call = await call_policy(f"localhost:{server.port}").open_call()
        try:
            reader, writer = await tunnel(call, f"localhost:{server.port}")
            async with asyncio.timeout(30):
                assert await reader.readline() == b"220 ready\r\n"
            later = real_hello("evil.example")
            writer.write(later)
            writer.write_eof()
            async with asyncio.timeout(30):
                assert await reader.read() == later
            writer.close()
        finally:
            await call.close()
        assert call.refused_count == 0


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
