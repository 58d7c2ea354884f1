"""Junk opaque tokens against a slow introspection endpoint (round 5's R6-B4).

A stand-in authorization server on loopback (metadata, JWKS, RFC 7662 introspection) holds
every introspection of a junk token until the test lets it go, and answers the legitimate
token at once. Our server runs in process on a real socket. Junk comes from three loopback
addresses, the legitimate client from a fourth; every wait is for an event, bounded.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

import httpx2
import pytest
from http_support import ACCEPT, LIST_BODY
from oauth_support import new_key

from spice.agent.coding._mcp import _http, _oauth
from spice.agent.coding._mcp._audit import AuditLog
from spice.agent.coding._mcp._http_settings import HttpSettings
from spice.agent.dispatch import Dispatcher
from spice.agent.tools.coding import Config, new_read

WAIT = 30.0
SERVED_WITHIN = 5.0
"""The contract (13.3): the legitimate client is answered within this many seconds."""
JUNK = 150
JUNK_SOURCES = ("127.0.0.20", "127.0.0.21", "127.0.0.22")
LEGIT = "legit-opaque-token"


@dataclass
class StandIn:
    """The stand-in issuer: its URL, what it was asked, and the junk it holds."""

    url: str = ""
    introspections: int = 0
    held: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    fail: bool = True
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    audience: str = ""


async def _handle(
    stand_in: StandIn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        line, *lines = head.decode().split("\r\n")
        method, path, _ = line.split(" ", 2)
        length = 0
        for text in lines:
            if text.lower().startswith("content-length:"):
                length = int(text.split(":", 1)[1])
        body = await reader.readexactly(length)
        status, answer = 200, b"{}"
        if method == "GET" and path == "/.well-known/oauth-authorization-server":
            answer = json.dumps(
                {"issuer": stand_in.url, "jwks_uri": stand_in.url + "/jwks"}
            ).encode()
        elif method == "GET" and path == "/jwks":
            answer = json.dumps({"keys": [new_key("k1").jwk]}).encode()
        elif method == "POST" and path == "/introspect":
            token = parse_qs(body.decode())["token"][0]
            async with stand_in.changed:
                stand_in.introspections += 1
                stand_in.changed.notify_all()
            if token == LEGIT:
                answer = json.dumps(
                    {"active": True, "aud": stand_in.audience, "exp": 2**40, "scope": "read"}
                ).encode()
            else:
                async with stand_in.changed:
                    stand_in.held += 1
                    stand_in.changed.notify_all()
                await stand_in.release.wait()
                status = 500 if stand_in.fail else 200
                answer = b'{"active": false}'
        else:
            status = 404
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, len(answer), answer)
        )
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def stand_in_issuer() -> AsyncIterator[StandIn]:
    stand_in = StandIn()
    server = await asyncio.start_server(lambda r, w: _handle(stand_in, r, w), "127.0.0.1", 0)
    stand_in.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield stand_in
    finally:
        stand_in.release.set()
        server.close()
        async with asyncio.timeout(WAIT):
            await server.wait_closed()


@asynccontextmanager
async def introspecting_server(root: Path, stand_in: StandIn) -> AsyncIterator[str]:
    sock = _http.bind("127.0.0.1", 0)
    settings = HttpSettings(port=sock.getsockname()[1])
    resource = _http.resource_of(settings, settings.port)
    stand_in.audience = resource
    async with _oauth.new_client() as client:
        oauth = _oauth.OAuthSettings(stand_in.url, stand_in.url + "/introspect", ("me", "s"))
        verifier = await _oauth.discover(oauth, resource, client)
        config = Config(str(root))
        served = _http.Served(
            settings, None, AuditLog(stream=io.StringIO()), shell_served=False, oauth=verifier
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
            yield resource
        finally:
            stop.set()
            async with asyncio.timeout(WAIT):
                await task


async def _post(http: httpx2.AsyncClient, url: str, token: str) -> int:
    headers = {
        "content-type": "application/json",
        "accept": ACCEPT,
        "authorization": f"Bearer {token}",
    }
    return (await http.post(url, json=LIST_BODY, headers=headers)).status_code


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "hello.txt").write_text("hello\n")
    return tmp_path


async def test_junk_tokens_against_a_slow_endpoint_leave_a_real_client_served(
    root: Path,
) -> None:
    """150 distinct junk tokens from three addresses while the endpoint holds them: at most
    ``MAXIMUM_INTROSPECTIONS_PER_PEER`` per address reach the issuer (the rest are 503 at
    once), a legitimate opaque token from another address is served within 5 s, and once the
    endpoint fails them, the same junk again costs no request (remembered)."""
    async with AsyncExitStack() as stack:
        stand_in = await stack.enter_async_context(stand_in_issuer())
        url = await stack.enter_async_context(introspecting_server(root, stand_in))
        clients = [
            await stack.enter_async_context(
                httpx2.AsyncClient(
                    timeout=WAIT,
                    transport=httpx2.AsyncHTTPTransport(
                        local_address=source, limits=httpx2.Limits(max_connections=JUNK)
                    ),
                )
            )
            for source in JUNK_SOURCES
        ]
        tokens = [f"junk-{n}" for n in range(JUNK)]
        junk = [
            asyncio.ensure_future(_post(clients[n % len(clients)], url, token))
            for n, token in enumerate(tokens)
        ]
        bound = _oauth.MAXIMUM_INTROSPECTIONS_PER_PEER * len(JUNK_SOURCES)
        async with asyncio.timeout(WAIT), stand_in.changed:
            await stand_in.changed.wait_for(lambda: stand_in.held >= bound)
        async with asyncio.timeout(WAIT):
            while sum(task.done() for task in junk) < JUNK - bound:
                waiting = [task for task in junk if not task.done()]
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        refused = [task for task in junk if task.done()]
        # The tokens the issuer holds: the ones not answered at once (any of them, not the
        # first by name: which ones reach it first is the scheduler's choice).
        held = [token for token, task in zip(tokens, junk, strict=True) if not task.done()]
        # Everything beyond the held ones was answered at once, without reaching the issuer.
        assert JUNK - bound == len(refused)
        assert all(task.result() == 503 for task in refused)
        assert bound == stand_in.introspections
        async with httpx2.AsyncClient(timeout=WAIT) as legit:
            async with asyncio.timeout(SERVED_WITHIN):
                assert 200 == await _post(legit, url, LEGIT)
        stand_in.release.set()
        async with asyncio.timeout(WAIT):
            answers = await asyncio.gather(*junk)
        assert [503] * JUNK == answers
        asked = stand_in.introspections
        assert bound == len(held)
        again = [await _post(clients[0], url, token) for token in held]
        assert [503] * bound == again
        assert asked == stand_in.introspections


async def test_the_bounds_hold_per_address_and_in_all_and_free_on_failure() -> None:
    """The per-address bound, the whole bound (many addresses), and the counts back to zero
    once the held requests fail; a failed token is then answered without a request."""
    async with stand_in_issuer() as stand_in, httpx2.AsyncClient() as client:
        introspector = _oauth.Introspector(
            stand_in.url + "/introspect", ("a", "b"), stand_in.url, "urn:me", client
        )
        per = _oauth.MAXIMUM_INTROSPECTIONS_PER_PEER
        first = [
            asyncio.ensure_future(introspector.verify_token(f"t{n}", "10.0.0.1"))
            for n in range(per)
        ]
        async with asyncio.timeout(WAIT), stand_in.changed:
            await stand_in.changed.wait_for(lambda: stand_in.held >= per)
        assert per == introspector.in_flight()
        with pytest.raises(_oauth.IntrospectionBusy):
            await introspector.verify_token("one-more", "10.0.0.1")
        others = [
            asyncio.ensure_future(introspector.verify_token(f"u{n}", f"10.0.1.{n}"))
            for n in range(_oauth.MAXIMUM_INTROSPECTIONS - per)
        ]
        async with asyncio.timeout(WAIT), stand_in.changed:
            await stand_in.changed.wait_for(lambda: stand_in.held >= _oauth.MAXIMUM_INTROSPECTIONS)
        assert _oauth.MAXIMUM_INTROSPECTIONS == introspector.in_flight()
        with pytest.raises(_oauth.IntrospectionBusy):
            await introspector.verify_token("a-new-address", "10.0.2.1")
        stand_in.release.set()
        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(*first, *others, return_exceptions=True)
        assert all(type(r) is _oauth.KeysUnavailable for r in results)
        assert 0 == introspector.in_flight()
        asked = stand_in.introspections
        with pytest.raises(_oauth.KeysUnavailable):
            await introspector.verify_token("t0", "10.0.0.1")
        assert asked == stand_in.introspections
