"""A fair share of the proxy's connections across calls (contract 12.1, R5-11).

Real ``CallProxy`` listeners of one ``Proxy``: calls that hold their connections
half-open (a head without its blank line, re-opened in R5-11 as the head bound closed
them) or as tunnels fill the server's bound; a call below its fair share still gets a
connection, taken from the call that holds the most above its own share.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest
from netutil import echo, http_host, loopback
from test_proxy import ask, call_policy, tunnel

from spice.agent.coding._posix._net import _proxy as proxy_module
from spice.agent.coding._posix._net import _stale
from spice.agent.coding._posix._net._proxy import (
    MAXIMUM_CALL_CONNECTIONS,
    MAXIMUM_SERVER_CONNECTIONS,
    CallProxy,
    Proxy,
    fair_share,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")


@pytest.fixture(autouse=True)
def private_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The calls' sockets in a directory of this test's own: another process's start
    (other test runs on this machine) probes the host's /tmp ones, and each probe would
    count as one more connection of a call here."""
    base = tempfile.mkdtemp(prefix="spf-", dir="/tmp")
    monkeypatch.setattr(_stale, "SOCKET_BASE", base)
    yield
    shutil.rmtree(base, ignore_errors=True)


Held = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def hold(call: CallProxy, count: int) -> Held:
    """``count`` connections that send a head without its end (they wait for it)."""
    held: Held = []
    for _ in range(count):
        reader, writer = await asyncio.open_unix_connection(call.path)
        writer.write(b"CONNECT localhost:1 HTTP/1.1\r\n")
        await writer.drain()
        held.append((reader, writer))
    return held


async def settled(proxy: Proxy, active: int) -> None:
    """Poll (bounded) until the proxy counts ``active`` connections."""
    async with asyncio.timeout(30):
        while proxy.active != active:  # noqa: ASYNC110 - a count, no event to wait on
            await asyncio.sleep(0.01)


def closed_by_the_proxy(held: Held) -> int:
    """How many of ``held`` the proxy closed (their reader saw its end)."""
    return sum(reader.at_eof() for reader, _ in held)


def test_the_fair_share_on_both_sides_of_its_bounds() -> None:
    assert fair_share(0) == fair_share(1) == MAXIMUM_CALL_CONNECTIONS
    assert fair_share(MAXIMUM_SERVER_CONNECTIONS // MAXIMUM_CALL_CONNECTIONS) == 64
    assert fair_share(MAXIMUM_SERVER_CONNECTIONS // MAXIMUM_CALL_CONNECTIONS + 1) == 51
    assert fair_share(MAXIMUM_SERVER_CONNECTIONS) == 1
    assert fair_share(MAXIMUM_SERVER_CONNECTIONS + 1) == 1


async def test_r5_11_four_calls_holding_64_half_open_heads_leave_a_fifth_served() -> None:
    """R5-11: four calls each hold 64 unfinished heads (the server's 256); a fifth call's
    five requests are served (they were 503 before), each taken from a call above its
    share, and every holder keeps at least its share."""
    async with loopback(http_host) as server:
        proxy = call_policy(f"127.0.0.1:{server.port}")
        hogs = [await proxy.open_call() for _ in range(4)]
        fifth = await proxy.open_call()
        held: list[Held] = []
        try:
            held.extend([await hold(hog, MAXIMUM_CALL_CONNECTIONS) for hog in hogs])
            await settled(proxy, MAXIMUM_SERVER_CONNECTIONS)
            head = f"GET http://127.0.0.1:{server.port}/x HTTP/1.1\r\n\r\n".encode()
            answers = await asyncio.gather(*(ask(fifth, head) for _ in range(5)))
            for reader, writer, status in answers:
                assert status == b"HTTP/1.1 200 OK\r\n"
                async with asyncio.timeout(30):
                    assert (await reader.read()).endswith(
                        b"GET /x HTTP/1.1|Host: 127.0.0.1:%d" % server.port
                    )
                writer.close()
            given_up = sum(hog.given_up for hog in hogs)
            assert 1 <= given_up <= 5
            share = fair_share(len(proxy.calls))
            assert all(hog.active >= share for hog in hogs)
            assert fifth.given_up == 0
            await asyncio.sleep(0.1)
            assert sum(closed_by_the_proxy(h) for h in held) == given_up
        finally:
            for writers in held:
                for _, writer in writers:
                    writer.close()
            for call in (*hogs, fifth):
                await call.close()
        assert proxy.active == 0


async def test_a_call_at_its_share_takes_nothing_and_gives_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bounds 8 for the server and 6 per call, two calls (share 4): the one below its
    share takes from the other up to 4 each, then both get 503 while the server is full;
    a call that holds its share is never taken from."""
    monkeypatch.setattr(proxy_module, "MAXIMUM_SERVER_CONNECTIONS", 8)
    monkeypatch.setattr(proxy_module, "MAXIMUM_CALL_CONNECTIONS", 6)
    proxy = call_policy("localhost:1")
    first, second = await proxy.open_call(), await proxy.open_call()
    held: Held = []
    try:
        held += await hold(first, 6)
        held += await hold(second, 2)
        await settled(proxy, 8)
        held += await hold(second, 2)  # below its share of 4: each takes one of first's
        await settled(proxy, 8)
        assert (first.active, second.active, first.given_up) == (4, 4, 2)
        for call in (second, first):  # at its share, the server full: 503
            _, writer, status = await ask(call, b"CONNECT localhost:1 HTTP/1.1\r\n\r\n")
            assert status == b"HTTP/1.1 503 Service Unavailable\r\n"
            writer.close()
        assert (first.active, second.active, first.given_up, second.given_up) == (4, 4, 2, 0)
        assert closed_by_the_proxy(held[:6]) == 2  # the two oldest of first's
        assert closed_by_the_proxy(held[:2]) == 2
    finally:
        for _, writer in held:
            writer.close()
        await first.close()
        await second.close()
    assert proxy.active == 0


async def test_a_tunnel_is_given_up_only_when_nothing_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call whose connections all relay gives up its newest tunnel (closed both ways:
    the client reads its end) and keeps the rest working."""
    monkeypatch.setattr(proxy_module, "MAXIMUM_SERVER_CONNECTIONS", 4)
    async with loopback(echo) as server:
        proxy = call_policy(f"localhost:{server.port}/tcp")
        first, second = await proxy.open_call(), await proxy.open_call()
        tunnels = [await tunnel(first, f"localhost:{server.port}") for _ in range(4)]
        try:
            await settled(proxy, 4)
            for old_reader, old_writer in tunnels:  # each relays (its bytes came back)
                old_writer.write(b"warm")
                async with asyncio.timeout(30):
                    assert await old_reader.readexactly(4) == b"warm"
            reader, writer = await tunnel(second, f"localhost:{server.port}")
            writer.write(b"mine")
            async with asyncio.timeout(30):
                assert await reader.readexactly(4) == b"mine"
                assert await tunnels[-1][0].read() == b""  # the newest was given up
            for old_reader, old_writer in tunnels[:-1]:
                old_writer.write(b"kept")
                async with asyncio.timeout(30):
                    assert await old_reader.readexactly(4) == b"kept"
            assert (first.given_up, first.active, second.active) == (1, 3, 1)
            writer.close()
        finally:
            for _, old_writer in tunnels:
                old_writer.close()
            await first.close()
            await second.close()
        assert proxy.active == 0
