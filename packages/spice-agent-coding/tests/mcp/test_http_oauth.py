"""The HTTP transport as an OAuth 2.1 resource server, end to end with real parts.

A real authorization server (oidc-provider, started on loopback by ``oauth_support``), the
``mcp`` SDK client's own OAuth flow (discovery from the 401, dynamic registration, PKCE,
RFC 8707 resource), and our server served by uvicorn on a real socket in this process (so
its key cache's clock can be moved: the refetch bound is a minute). Tokens the test signs
with the issuer's own keys check each claim: another audience, expired, another issuer,
another key, ``none`` and ``HS256`` are refused.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import hmac
import io
import json
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from http_support import ACCEPT, LIST_BODY, answer_of, call_body, http_server, names_of
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from oauth_support import (
    AuthorizationServer,
    Browser,
    MemoryStorage,
    SigningKey,
    authorization_server,
    claims_for,
    new_key,
    node_missing,
    oauth_provider,
)
from private_support import private
from test_http_serve import run_serve

from spice.agent.coding._mcp import _http, _oauth
from spice.agent.coding._mcp._audit import AuditLog
from spice.agent.coding._mcp._http_settings import DEFAULT_CALLS_PER_MINUTE, HttpSettings
from spice.agent.dispatch import Dispatcher
from spice.agent.tools.coding import Config, new_read, new_replace

pytestmark = pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))

WAIT = 30.0


class Clock:
    """``time.monotonic`` plus an offset the test moves (the key cache's clock)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@dataclass
class Resource:
    """Our server, serving in this process: its URL, resource id and key cache."""

    url: str
    resource: str
    verifier: _oauth.JwtVerifier
    audit: io.StringIO


@asynccontextmanager
async def resource_server(
    root: Path, issuer: str, clock: Clock, port: int = 0, rate: int = DEFAULT_CALLS_PER_MINUTE
) -> AsyncIterator[Resource]:
    """``serve --transport http --oauth-issuer ISSUER`` in process, on a real socket
    (``rate``: ``--max-calls-per-minute``)."""
    sock = _http.bind("127.0.0.1", port)
    settings = HttpSettings(port=sock.getsockname()[1], rate=rate)
    resource = _http.resource_of(settings, settings.port)
    async with _oauth.new_client() as client:
        verifier = await _oauth.discover(_oauth.OAuthSettings(issuer), resource, client, clock)
        config = Config(str(root))
        audit = io.StringIO()
        served = _http.Served(
            settings, None, AuditLog(stream=audit), shell_served=False, oauth=verifier
        )
        stop = asyncio.Event()
        started = asyncio.Event()
        dispatcher = Dispatcher([new_read(config), new_replace(config)])
        task = asyncio.ensure_future(
            _http.serve_http(dispatcher, served, sock, stop, lambda _: started.set(), config=config)
        )
        try:
            async with asyncio.timeout(WAIT):
                await started.wait()
            yield Resource(f"http://127.0.0.1:{settings.port}/mcp", resource, verifier, audit)
        finally:
            stop.set()
            async with asyncio.timeout(WAIT):
                await task


@pytest.fixture
def root(tmp_path: Path) -> Path:
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / "hello.txt").write_text("hello\n")
    return worktree


def _port() -> int:
    sock = _http.bind("127.0.0.1", 0)
    try:
        return int(sock.getsockname()[1])
    finally:
        sock.close()


@asynccontextmanager
async def both(
    tmp_path: Path,
    root: Path,
    keys: list[SigningKey],
    alg: str = "RS256",
    rate: int = DEFAULT_CALLS_PER_MINUTE,
) -> AsyncIterator[tuple[AuthorizationServer, Resource, Clock]]:
    """The authorization server (issuing for our URL) and our server trusting it."""
    port = _port()
    url = f"http://127.0.0.1:{port}/mcp"
    clock = Clock()
    async with (
        authorization_server(tmp_path, [url], keys, alg) as issuer,
        resource_server(root, issuer.issuer, clock, port, rate) as resource,
    ):
        yield issuer, resource, clock


async def _read(
    url: str, auth: httpx2.Auth | None = None, token: str | None = None
) -> CallToolResult:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(auth=auth, headers=headers, timeout=WAIT) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await client.call_tool("read", {"path": "hello.txt"})


async def _post(url: str, token: str | None, body: dict[str, Any]) -> httpx2.Response:
    headers = {"content-type": "application/json", "accept": ACCEPT}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        return await http.post(url, json=body, headers=headers)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(claims: dict[str, Any]) -> str:
    """``alg: none``: no signature at all."""
    head = _b64(json.dumps({"alg": "none", "kid": "k1", "typ": "JWT"}).encode())
    return f"{head}.{_b64(json.dumps(claims).encode())}."


def _hs256(claims: dict[str, Any], key: SigningKey) -> str:
    """The classic confusion: HS256 keyed with the issuer's public JWK (PyJWT will not)."""
    secret = json.dumps(key.jwk, sort_keys=True).encode()
    head = _b64(json.dumps({"alg": "HS256", "kid": key.kid, "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


async def test_the_sdk_clients_oauth_flow_reads_through_a_real_authorization_server(
    tmp_path: Path, root: Path
) -> None:
    """401 with resource_metadata → RFC 9728 metadata → the issuer's metadata → dynamic
    registration → authorize with PKCE and resource → token → the call answers."""
    async with both(tmp_path, root, [new_key("k1")]) as (issuer, resource, _):
        browser, storage = Browser(), MemoryStorage()
        result = await _read(resource.url, oauth_provider(resource.url, browser, storage))
        assert not result.is_error
        assert "hello" in str(result.structured_content)
        assert 1 == len(browser.visits)
        assert "code_challenge_method=S256" in browser.visits[0]
        assert storage.tokens is not None
        claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
        assert resource.resource == claims["aud"]
        assert issuer.issuer == claims["iss"]
        assert '"token":"oauth:' in resource.audit.getvalue()


@pytest.mark.parametrize("algorithm", ["ES256", "EdDSA"])
async def test_tokens_signed_with_es256_and_eddsa_keys_are_accepted(
    tmp_path: Path, root: Path, algorithm: str
) -> None:
    """The provider signs with an EC P-256 or Ed25519 key: the flow ends in an answer."""
    async with both(tmp_path, root, [new_key("k-" + algorithm, algorithm)], algorithm) as (
        _,
        resource,
        _,
    ):
        browser, storage = Browser(), MemoryStorage()
        result = await _read(resource.url, oauth_provider(resource.url, browser, storage))
        assert not result.is_error
        assert storage.tokens is not None
        assert algorithm == jwt.get_unverified_header(storage.tokens.access_token)["alg"]


async def test_the_metadata_and_the_401_name_the_issuer_and_the_resource(
    tmp_path: Path, root: Path
) -> None:
    """RFC 9728 metadata at the well-known path (bare and with the MCP path); a request
    without a token is 401 with resource_metadata; the metadata takes GET only."""
    async with both(tmp_path, root, [new_key("k1")]) as (issuer, resource, _):
        origin = resource.url.removesuffix("/mcp")
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            for path in (
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp",
            ):
                found = await http.get(origin + path)
                assert 200 == found.status_code
                assert {
                    "resource": resource.resource,
                    "authorization_servers": [issuer.issuer],
                    "scopes_supported": ["read", "write", "shell"],
                    "bearer_methods_supported": ["header"],
                } == found.json()
            assert (
                405
                == (await http.post(origin + "/.well-known/oauth-protected-resource")).status_code
            )
            assert (
                404
                == (await http.get(origin + "/.well-known/oauth-protected-resourcex")).status_code
            )
            head = await http.head(origin + "/.well-known/oauth-protected-resource")
            assert (200, b"") == (head.status_code, head.content)
        refused = await _post(resource.url, None, LIST_BODY)
        assert 401 == refused.status_code
        challenge = refused.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert f'resource_metadata="{origin}/.well-known/oauth-protected-resource/mcp"' in challenge


async def test_tokens_the_issuer_did_not_mean_for_us_are_refused(
    tmp_path: Path, root: Path
) -> None:
    """Signed with the issuer's own key, each with one thing wrong: refused (401), while the
    same claims done right are served; expiry within the 60 s leeway is still served."""
    key = new_key("k1")
    async with both(tmp_path, root, [key]) as (issuer, resource, _):
        good = claims_for(issuer.issuer, resource.resource)
        now = int(time.time())
        other_key = new_key("k1")
        refused = {
            "another audience": key.sign({**good, "aud": "http://127.0.0.1:1/mcp"}),
            "expired": key.sign({**good, "exp": now - _oauth.LEEWAY_SECONDS - 5}),
            "not yet valid": key.sign({**good, "nbf": now + _oauth.LEEWAY_SECONDS + 30}),
            "another issuer": key.sign({**good, "iss": "http://127.0.0.1:1"}),
            "no exp": key.sign({k: v for k, v in good.items() if k != "exp"}),
            "another key": other_key.sign(good),
            "alg none": _unsigned(good),
            "HS256 with the public key": _hs256(good, key),
            "over the bound": key.sign({**good, "pad": "x" * _oauth.MAXIMUM_TOKEN_CHARS}),
            "not a JWT": "a.b.c",
        }
        for reason, token in refused.items():
            answer = await _post(resource.url, token, LIST_BODY)
            assert 401 == answer.status_code, reason
        served = {
            "right": key.sign(good),
            "audience in a list": key.sign({**good, "aud": ["urn:other", resource.resource]}),
            "expired within the leeway": key.sign({**good, "exp": now - 5}),
        }
        for reason, token in served.items():
            answer = await _post(resource.url, token, LIST_BODY)
            assert 200 == answer.status_code, reason
            assert ["read"] == names_of(answer_of(answer)), reason


async def test_a_call_beyond_the_scopes_gets_insufficient_scope_with_the_scope_needed(
    tmp_path: Path, root: Path
) -> None:
    """A read token calling replace: 403, ``insufficient_scope``, ``scope="write"`` and the
    metadata URL; the listing shows what the scope allows; a write token is served."""
    key = new_key("k1")
    async with both(tmp_path, root, [key]) as (issuer, resource, _):
        reader = key.sign(claims_for(issuer.issuer, resource.resource, "read"))
        writer = key.sign(claims_for(issuer.issuer, resource.resource, "openid write"))
        nothing = key.sign(claims_for(issuer.issuer, resource.resource, "openid profile"))
        replace = call_body("replace", {"path": "new.txt", "content": "howdy\n", "create": True})
        answer = await _post(resource.url, reader, replace)
        assert 403 == answer.status_code
        challenge = answer.headers["www-authenticate"]
        assert 'error="insufficient_scope"' in challenge
        assert 'scope="write"' in challenge
        assert "resource_metadata=" in challenge
        assert (
            'scope="read"'
            in (
                await _post(resource.url, nothing, call_body("read", {"path": "hello.txt"}))
            ).headers["www-authenticate"]
        )
        assert [] == names_of(answer_of(await _post(resource.url, nothing, LIST_BODY)))
        assert ["read", "replace"] == names_of(
            answer_of(await _post(resource.url, writer, LIST_BODY))
        )
        served = await _post(resource.url, writer, replace)
        assert 200 == served.status_code
        assert "howdy\n" == (root / "new.txt").read_text()


async def test_keys_rotated_during_a_run(tmp_path: Path, root: Path) -> None:
    """The provider restarts signing with a new key: an unknown kid is fetched at most once a
    minute (refused until then), the old key's tokens hold while it is published, and are
    refused once a refresh no longer finds it; the SDK flow then gets a new key's token."""
    k1, k2 = new_key("k1"), new_key("k2")
    async with both(tmp_path, root, [k1]) as (issuer, resource, clock):
        storage = MemoryStorage()
        result = await _read(resource.url, oauth_provider(resource.url, Browser(), storage))
        assert not result.is_error
        assert storage.tokens is not None
        old = storage.tokens.access_token
        assert "k1" == jwt.get_unverified_header(old)["kid"]
        await issuer.restart([k2, k1])
        new = k2.sign(claims_for(issuer.issuer, resource.resource))
        assert 401 == (await _post(resource.url, new, LIST_BODY)).status_code
        clock.offset += _oauth.REFETCH_SECONDS
        assert 200 == (await _post(resource.url, new, LIST_BODY)).status_code
        assert 200 == (await _post(resource.url, old, LIST_BODY)).status_code
        fresh = MemoryStorage()
        result = await _read(resource.url, oauth_provider(resource.url, Browser(), fresh))
        assert not result.is_error
        assert fresh.tokens is not None
        assert "k2" == jwt.get_unverified_header(fresh.tokens.access_token)["kid"]
        await issuer.restart([k2])
        assert 200 == (await _post(resource.url, old, LIST_BODY)).status_code
        clock.offset += _oauth.REFRESH_SECONDS
        assert 401 == (await _post(resource.url, old, LIST_BODY)).status_code
        assert 200 == (await _post(resource.url, new, LIST_BODY)).status_code
        assert 1 == len(resource.verifier._keys)


async def test_keys_that_cannot_be_fetched_again_serve_until_they_expire_then_503(
    tmp_path: Path, root: Path
) -> None:
    """The issuer gone: the last good keys serve until ``KEYS_TTL_SECONDS`` after their
    fetch, then every token is 503 with the reason (never accepted unverified)."""
    key = new_key("k1")
    async with both(tmp_path, root, [key]) as (issuer, resource, clock):
        token = key.sign(claims_for(issuer.issuer, resource.resource))
        await issuer.stop()
        clock.offset += _oauth.REFRESH_SECONDS
        assert 200 == (await _post(resource.url, token, LIST_BODY)).status_code
        clock.offset += _oauth.KEYS_TTL_SECONDS - _oauth.REFRESH_SECONDS - 1
        assert 200 == (await _post(resource.url, token, LIST_BODY)).status_code
        clock.offset += 1
        for presented in (token, new_key("k9").sign(claims_for(issuer.issuer, resource.resource))):
            gone = await _post(resource.url, presented, LIST_BODY)
            assert 503 == gone.status_code
            assert _oauth.KEYS_EXPIRED == gone.json()["error"]["message"]
        assert 401 == (await _post(resource.url, "not-a-token", LIST_BODY)).status_code


async def test_memory_stays_bounded_under_a_thousand_distinct_valid_tokens(
    tmp_path: Path, root: Path
) -> None:
    """Verified tokens are remembered at most ``MAXIMUM_VERIFIED`` at once: 1,000 distinct
    valid tokens, then 1,100 more, leave the cache at its bound and memory where the first
    thousand left it (the oldest go out as new ones come in); a remembered token is served
    without its signature checked again, and refused again once its key is withdrawn."""
    key = new_key("k1")
    async with both(tmp_path, root, [key]) as (issuer, resource, clock):

        def minted(first: int, count: int) -> list[str]:
            return [
                key.sign(claims_for(issuer.issuer, resource.resource, jti=str(n)))
                for n in range(first, first + count)
            ]

        verifier = resource.verifier
        first, second = minted(0, 1100), minted(1100, 1100)
        gc.collect()
        tracemalloc.start()
        try:
            empty = tracemalloc.get_traced_memory()[0]
            for token in first[:1000]:
                assert await verifier.verify_token(token) is not None
            assert 1000 == len(verifier)
            for token in first[1000:]:
                assert await verifier.verify_token(token) is not None
            gc.collect()
            full = tracemalloc.get_traced_memory()[0]
            for token in second:
                assert await verifier.verify_token(token) is not None
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert _oauth.MAXIMUM_VERIFIED == len(verifier)
        assert full - empty < _oauth.MAXIMUM_VERIFIED * 4096  # a few KiB an entry at most
        assert after - full < 64 * 1024  # 1,100 more distinct tokens: no growth
        more = second
        last = more[-1]
        assert await verifier.verify_token(last) is not None
        await issuer.restart([new_key("k2")])
        clock.offset += _oauth.REFRESH_SECONDS
        assert await verifier.verify_token(last) is None


# --- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize("with_token_file", [True, False])
async def test_serve_with_oauth_issuer_serves_the_sdk_flow_beside_the_token_file(
    tmp_path: Path, root: Path, with_token_file: bool
) -> None:
    """``serve --transport http --oauth-issuer URL``, with and without ``--token-file``: the
    SDK's OAuth flow reads; the token file's tokens still work beside it."""
    port = _port()
    url = f"http://127.0.0.1:{port}/mcp"
    async with (
        authorization_server(tmp_path, [url], [new_key("k1")]) as issuer,
        http_server(
            tmp_path,
            root,
            "--port",
            str(port),
            auth=with_token_file,
            oauth=("--oauth-issuer", issuer.issuer),
        ) as server,
    ):
        assert url == server.url
        result = await _read(url, oauth_provider(url, Browser(), MemoryStorage()))
        assert not result.is_error
        if with_token_file:
            assert not (await _read(url, token=server.tokens["reader"])).is_error
        refused = await _post(url, None, LIST_BODY)
        assert 401 == refused.status_code
        assert "resource_metadata=" in refused.headers["www-authenticate"]


async def test_serve_with_an_oauth_audience_checks_it_and_publishes_it(
    tmp_path: Path, root: Path
) -> None:
    """``--oauth-audience urn:...``: what ``aud`` must hold; the metadata's ``resource`` is
    the server's URL (RFC 9728 §3.3: a client refuses a resource that is not the URL it
    asked about, R6-B5), while a URL audience is published as it is."""
    key = new_key("k1")
    audience = "urn:spice:coding:test"
    async with (
        authorization_server(tmp_path, [audience], [key]) as issuer,
        http_server(
            tmp_path,
            root,
            auth=False,
            oauth=("--oauth-issuer", issuer.issuer, "--oauth-audience", audience),
        ) as server,
    ):
        origin = server.url.removesuffix("/mcp")
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            found = await http.get(origin + "/.well-known/oauth-protected-resource/mcp")
        assert server.url == found.json()["resource"]
        good = key.sign(claims_for(issuer.issuer, audience))
        assert 200 == (await _post(server.url, good, LIST_BODY)).status_code
        other = key.sign(claims_for(issuer.issuer, server.url))
        assert 401 == (await _post(server.url, other, LIST_BODY)).status_code


async def test_serve_refuses_an_issuer_it_cannot_use_at_start(tmp_path: Path, root: Path) -> None:
    """Exit 2 with one line, never a listening server: plain http off loopback, an issuer
    that does not answer, an audience without an issuer, insecure-no-auth beside it."""
    closed = f"http://127.0.0.1:{_port()}"
    cases = [
        (("--oauth-issuer", "http://auth.example"), _oauth.NOT_SECURE),
        (("--oauth-issuer", closed), _oauth.NO_METADATA),
        (("--oauth-audience", "urn:x", "--insecure-no-auth"), "need --oauth-issuer"),
        (
            ("--oauth-issuer", closed, "--oauth-introspection-url", closed),
            "go together",
        ),
        (("--oauth-issuer", closed, "--insecure-no-auth"), "--insecure-no-auth alone"),
    ]
    open_file = private(tmp_path / "client-open", "id secret\n")
    open_file.chmod(0o644)
    inside_root = private(root / "client", "id secret\n")
    malformed = private(tmp_path / "client-bad", "id secret extra\n")
    for path, reason in (
        (open_file, _oauth.CLIENT_FILE_UNUSABLE),
        (inside_root, _oauth.CLIENT_FILE_PLACE),
        (malformed, _oauth.CLIENT_FILE_UNUSABLE),
        (tmp_path / "missing", _oauth.CLIENT_FILE_UNUSABLE),
    ):
        introspection = ("--oauth-introspection-url", closed + "/introspect")
        cases.append(
            (("--oauth-issuer", closed, *introspection, "--oauth-client-file", str(path)), reason)
        )
    for flags, reason in cases:
        code, err = await run_serve(tmp_path, "--root", str(root), *flags)
        assert 2 == code, flags
        lines = err.decode().strip().splitlines()
        assert 1 == len(lines), lines
        assert reason in lines[0]


async def test_opaque_tokens_are_introspected_with_the_servers_own_credentials(
    tmp_path: Path, root: Path
) -> None:
    """``--oauth-introspection-url`` with ``--oauth-client-file``: the SDK flow gets an opaque
    token from the provider, the server introspects it (its own client, basic auth) and
    serves; an unknown opaque token is 401; the issuer gone, a token not seen yet is 503."""
    port = _port()
    url = f"http://127.0.0.1:{port}/mcp"
    secret = "s3cret-" + "x" * 32
    client_file = tmp_path / "client"
    private(client_file, f"spice-rs {secret}\n")
    async with (
        authorization_server(
            tmp_path, [url], [new_key("k1")], opaque=True, introspector=f"spice-rs:{secret}"
        ) as issuer,
        http_server(
            tmp_path,
            root,
            "--port",
            str(port),
            auth=False,
            oauth=(
                "--oauth-issuer",
                issuer.issuer,
                "--oauth-introspection-url",
                issuer.issuer + "/token/introspection",
                "--oauth-client-file",
                str(client_file),
            ),
        ) as server,
    ):
        storage = MemoryStorage()
        result = await _read(url, oauth_provider(url, Browser(), storage))
        assert not result.is_error
        assert storage.tokens is not None
        assert 2 != storage.tokens.access_token.count(".")  # opaque, not a JWT
        assert 401 == (await _post(url, "opaque-" + "y" * 40, LIST_BODY)).status_code
        await issuer.stop()
        gone = await _post(url, "opaque-" + "z" * 40, LIST_BODY)
        assert 503 == gone.status_code
        assert _oauth.NO_INTROSPECTION == gone.json()["error"]["message"]
        assert secret.encode() not in server.stderr


async def test_the_introspection_answer_is_judged_and_its_memory_bounded(
    tmp_path: Path, root: Path
) -> None:
    """The answer must be active, of the issuer, for this audience, not expired; answers are
    remembered (by digest) at most ``MAXIMUM_INTROSPECTED`` at once."""
    introspector = _oauth.Introspector(
        "http://127.0.0.1:1/i", ("a", "b"), "http://issuer", "urn:me", httpx2.AsyncClient()
    )
    now = int(time.time())
    good = {"active": True, "iss": "http://issuer", "aud": "urn:me", "exp": now + 60}
    assert introspector._judge(good) is not None
    assert introspector._judge({**good, "scope": "write"}).scopes == ["read", "write"]  # type: ignore[union-attr]
    for wrong in (
        {**good, "active": False},
        {**good, "active": "true"},
        {**good, "iss": "http://other"},
        {**good, "aud": "urn:other"},
        {k: v for k, v in good.items() if k != "aud"},
        {**good, "exp": now - _oauth.LEEWAY_SECONDS - 5},
        {k: v for k, v in good.items() if k != "exp"},
        {**good, "nbf": now + _oauth.LEEWAY_SECONDS + 30},
    ):
        assert introspector._judge(wrong) is None, wrong
    for n in range(_oauth.MAXIMUM_INTROSPECTED + 5):
        introspector._seen[str(n).encode()] = (0.0, None)
        while len(introspector._seen) > _oauth.MAXIMUM_INTROSPECTED:
            introspector._seen.popitem(last=False)
    assert _oauth.MAXIMUM_INTROSPECTED == len(introspector)
    await introspector._client.aclose()
