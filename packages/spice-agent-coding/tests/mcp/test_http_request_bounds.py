"""Slow clients cannot lock others out (R5-6): the request deadline and the per-peer bound.

Real sockets against a real server: the console script for the 256-connection case (the
default 10 s deadline), the transport in process for the rest (a 1 s deadline). Counts are
asserted, never times: every wait has a bound only so a failure cannot hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from http_support import LIST_BODY, WAIT, answer_of, http_server, names_of, write_tokens
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from spice.agent.coding._mcp import _http, _request_bounds
from spice.agent.coding._mcp._audit import AuditLog
from spice.agent.coding._mcp._http_settings import DEFAULT_REQUEST_SECONDS, HttpSettings
from spice.agent.coding._mcp._tokens import TokenStore
from spice.agent.dispatch import Dispatcher
from spice.agent.tools.coding import Config, new_read

STALLED = 256
CLOSE_BOUND = 60.0
"""The contract: the stalled connections are closed within this many seconds."""


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    return root


@asynccontextmanager
async def stalled_from(
    port: int, source: str, count: int
) -> AsyncIterator[list[asyncio.StreamReader]]:
    """``count`` connections from ``source`` that each sent one byte, then nothing."""
    writers: list[asyncio.StreamWriter] = []
    readers = []
    try:
        for _ in range(count):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0)
            )
            writers.append(writer)
            writer.write(b"P")
            await writer.drain()
            readers.append(reader)
        yield readers
    finally:
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _closed(reader: asyncio.StreamReader, bound: float) -> bool:
    """Whether the server closed the connection within ``bound`` (it sends nothing else)."""
    try:
        async with asyncio.timeout(bound):
            return b"" == await reader.read(1)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def _read_from(url: str, token: str, source: str) -> bool:
    transport = httpx2.AsyncHTTPTransport(local_address=source)
    headers = {"authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(transport=transport, headers=headers, timeout=WAIT) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("read", {"path": "hello.txt"})
    return not result.is_error


async def test_256_stalled_connections_neither_lock_others_out_nor_stay(
    tmp_path: Path, worktree: Path
) -> None:
    """256 connections that each sent one byte: a client from another address is served
    while they stall; every one of them is closed (the per-peer bound at once, the rest at
    the request deadline); then a client from their own address is served too."""
    async with http_server(tmp_path, worktree) as server:
        async with stalled_from(server.port, "127.0.0.1", STALLED) as stalled:
            assert await _read_from(server.url, server.tokens["reader"], "127.0.0.2")
            results = await asyncio.gather(*(_closed(r, CLOSE_BOUND) for r in stalled))
            assert STALLED == sum(results)
            assert await _read_from(server.url, server.tokens["reader"], "127.0.0.1")
        assert DEFAULT_REQUEST_SECONDS <= 10.0


@asynccontextmanager
async def guarded(tmp_path: Path, worktree: Path, seconds: float) -> AsyncIterator[tuple[str, str]]:
    """The transport in process with a ``seconds`` request deadline: its URL and a token."""
    tokens = write_tokens(tmp_path / "tokens", {"reader": "read"})
    sock = _http.bind("127.0.0.1", 0)
    settings = HttpSettings(port=sock.getsockname()[1], request_seconds=seconds)
    config = Config(str(worktree))
    served = _http.Served(
        settings,
        TokenStore(str(tmp_path / "tokens"), str(worktree)),
        AuditLog(stream=io.StringIO()),
        shell_served=False,
    )
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.ensure_future(
        _http.serve_http(
            Dispatcher([new_read(config)]),
            served,
            sock,
            stop,
            lambda _: started.set(),
            config=config,
        )
    )
    try:
        async with asyncio.timeout(WAIT):
            await started.wait()
        yield f"http://127.0.0.1:{settings.port}/mcp", tokens["reader"]
    finally:
        stop.set()
        async with asyncio.timeout(WAIT):
            await task


async def test_one_more_waiting_connection_closes_the_oldest_of_its_address(
    tmp_path: Path, worktree: Path
) -> None:
    """``MAXIMUM_WAITING_PER_PEER`` connections from one address wait for their request; the
    next one is kept and the *oldest* is closed (R6-B1: the newcomer may be a whole request);
    another address is served meanwhile."""
    bound = _request_bounds.MAXIMUM_WAITING_PER_PEER
    async with guarded(tmp_path, worktree, 300.0) as (url, token):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        async with (
            stalled_from(port, "127.0.0.3", bound) as held,
            stalled_from(port, "127.0.0.3", 1) as over,
        ):
            assert await _closed(held[0], WAIT)
            assert not await _closed(over[0], 0.5)
            assert 0 == sum(await asyncio.gather(*(_closed(r, 0.5) for r in held[1:])))
            assert await _read_from(url, token, "127.0.0.4")


async def test_a_body_that_does_not_arrive_in_time_is_never_served(
    tmp_path: Path, worktree: Path
) -> None:
    """A head in time but a body that trickles past the deadline: the connection is closed
    and nothing is answered; a request sent in time on the same server is served."""
    async with guarded(tmp_path, worktree, 1.0) as (url, token):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 200\r\n\r\n{".encode()
        )
        await writer.drain()
        try:
            assert await _closed(reader, WAIT)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            answer = await http.post(
                url,
                json=LIST_BODY,
                headers={
                    "authorization": f"Bearer {token}",
                    "accept": "application/json, text/event-stream",
                },
            )
        assert ["read"] == names_of(answer_of(answer))


async def test_a_head_over_the_bound_is_refused_and_a_kept_alive_client_is_served_again(
    tmp_path: Path, worktree: Path
) -> None:
    """A 1 MiB header is refused (h11's head bound, never buffered without end); a client
    that keeps its connection is served across requests (the deadline starts again)."""
    async with guarded(tmp_path, worktree, 1.0) as (url, token):
        headers = {
            "authorization": f"Bearer {token}",
            "accept": "application/json, text/event-stream",
        }
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            try:
                big = await http.post(
                    url, json=LIST_BODY, headers={**headers, "x-pad": "x" * (1 << 20)}
                )
                assert 400 <= big.status_code < 500
            except httpx2.TransportError:
                pass
            for _ in range(3):
                answer = await http.post(url, json=LIST_BODY, headers=headers)
                assert ["read"] == names_of(answer_of(answer))
                await asyncio.sleep(0.6)


class _Connection:
    """A waiting connection for ``Peers``: records that it was evicted."""

    def __init__(self) -> None:
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


def test_past_a_bound_the_oldest_waiting_connection_makes_room() -> None:
    """Per address and in all, the oldest waiting one is evicted (never the newcomer); past
    the connection bound, an address's oldest waiting connection makes room, and with none
    waiting the newcomer is refused; a connection that stopped waiting is never evicted."""
    peers = _request_bounds.Peers(limit=3, waiting_per_peer=2, waiting=3)
    a = [_Connection() for _ in range(3)]
    for connection in a:
        assert peers.admit("a")
        peers.wait("a", connection)
    assert [True, False, False] == [c.evicted for c in a]
    assert 2 == peers.waiting("a")
    b = [_Connection() for _ in range(2)]
    for connection in b:
        assert peers.admit("b")
        peers.wait("b", connection)
    assert a[1].evicted  # the oldest of all, for the whole bound
    assert not any(c.evicted for c in b)
    assert 3 == peers.waiting()
    peers.done(b[0])
    peers.done(b[1])
    peers.release("a")  # a[0] and a[1] ended
    peers.release("a")
    assert 1 == peers.held("a")
    assert peers.admit("b")  # b holds 3 now, none waiting
    assert not peers.admit("b")
    assert [False, False] == [c.evicted for c in b]
    newest = _Connection()
    peers.wait("b", newest)
    assert peers.admit("b")  # its waiting connection makes room
    assert newest.evicted
    assert 0 == peers.waiting("b")


@pytest.mark.parametrize("extra", [0, 1])
def test_the_waiting_bounds_on_both_sides(extra: int) -> None:
    """At the per-address bound nothing is evicted; one more evicts exactly one."""
    bound = _request_bounds.MAXIMUM_WAITING_PER_PEER
    peers = _request_bounds.Peers()
    connections = [_Connection() for _ in range(bound + extra)]
    for connection in connections:
        assert peers.admit("p")
        peers.wait("p", connection)
    assert extra == sum(c.evicted for c in connections)
    assert min(bound, len(connections)) == peers.waiting("p")
    assert _request_bounds.MAXIMUM_WAITING < _http.MAXIMUM_CONNECTIONS


def test_the_peer_count_is_bounded_and_forgets_an_address_that_holds_none() -> None:
    peers = _request_bounds.Peers(2)
    assert [True, True, False] == [peers.admit("a") for _ in range(3)]
    assert peers.admit("b")
    peers.release("a")
    assert 1 == peers.held("a")
    assert peers.admit("a")
    peers.release("a")
    peers.release("a")
    peers.release("b")
    assert 0 == len(peers)
