"""``_oauth.discover`` and the key parsing on bad input: each refusal a fixed start error.

The issuer here is a small loopback HTTP server that answers what each test says (the
metadata without ``jwks_uri``, naming another issuer, a JWKS that cannot be fetched, one
with only a shared secret); the real authorization server's flow is in test_http_oauth.py.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oauth_support import new_key

from spice.agent.coding._mcp import _oauth

RESOURCE = "http://127.0.0.1:1/mcp"


@contextmanager
def issuer_serving(documents: dict[str, Any]) -> Iterator[str]:
    """A loopback issuer answering ``documents[path]`` as JSON (``{ISSUER}`` replaced),
    404 for any other path."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = documents.get(self.path)
            if found is None:
                self.send_response(404)
                self.end_headers()
                return
            raw = isinstance(found, str) and found.startswith("raw:")
            text = found[4:] if raw else json.dumps(found)
            body = text.replace("{ISSUER}", issuer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def _discover(issuer: str) -> _oauth.JwtVerifier:
    async with _oauth.new_client() as client:
        return await _oauth.discover(_oauth.OAuthSettings(issuer), RESOURCE, client)


RFC8414 = "/.well-known/oauth-authorization-server"
OPENID = "/.well-known/openid-configuration"
GOOD_KEYS = {"keys": [new_key("k1").jwk]}


async def test_rfc_8414_metadata_is_used_first_and_openid_discovery_after_it() -> None:
    for path in (RFC8414, OPENID):
        documents = {path: {"issuer": "{ISSUER}", "jwks_uri": "{ISSUER}/jwks"}, "/jwks": GOOD_KEYS}
        with issuer_serving(documents) as issuer:
            verifier = await _discover(issuer)
            assert issuer == verifier.issuer
            assert RESOURCE == verifier.audience


@pytest.mark.parametrize(
    ("documents", "problem"),
    [
        ({}, _oauth.NO_METADATA),
        ({RFC8414: ["not", "an", "object"]}, _oauth.NO_METADATA),
        ({RFC8414: {"issuer": "{ISSUER}"}}, _oauth.NO_JWKS_URI),
        ({RFC8414: {"issuer": "{ISSUER}", "jwks_uri": ""}}, _oauth.NO_JWKS_URI),
        (
            {RFC8414: {"issuer": "http://127.0.0.1:1", "jwks_uri": "{ISSUER}/jwks"}},
            _oauth.OTHER_ISSUER,
        ),
        (
            {RFC8414: {"issuer": "{ISSUER}", "jwks_uri": "http://keys.example/jwks"}},
            _oauth.JWKS_NOT_SECURE,
        ),
        ({RFC8414: {"issuer": "{ISSUER}", "jwks_uri": "{ISSUER}/jwks"}}, _oauth.NO_KEYS),
        (
            {
                RFC8414: {"issuer": "{ISSUER}", "jwks_uri": "{ISSUER}/jwks"},
                "/jwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0", "alg": "HS256", "kid": "s"}]},
            },
            _oauth.NO_USABLE_KEYS,
        ),
        (
            {
                RFC8414: {"issuer": "{ISSUER}", "jwks_uri": "{ISSUER}/jwks"},
                "/jwks": {"keys": [{**new_key("k").jwk, "use": "enc"}]},
            },
            _oauth.NO_USABLE_KEYS,
        ),
        (
            {
                RFC8414: {"issuer": "{ISSUER}", "jwks_uri": "{ISSUER}/jwks"},
                "/jwks": {"keys": [{**new_key("k").jwk, "alg": "PS256"}]},
            },
            _oauth.NO_USABLE_KEYS,
        ),
        (
            {
                RFC8414: {"issuer": "{ISSUER}", "jwks_uri": "{ISSUER}/jwks"},
                "/jwks": {"pad": "x" * _oauth.MAXIMUM_DOCUMENT_BYTES, **GOOD_KEYS},
            },
            _oauth.NO_KEYS,
        ),
    ],
)
async def test_an_issuer_that_cannot_be_used_is_a_start_error(
    documents: dict[str, Any], problem: str
) -> None:
    with issuer_serving(documents) as issuer, pytest.raises(_oauth.OAuthStartError) as raised:
        await _discover(issuer)
    if problem == _oauth.NO_METADATA:  # it names each URL tried and why (the test below)
        assert str(raised.value).startswith(problem + " (")
    else:
        assert problem == str(raised.value)


@pytest.mark.parametrize(
    ("documents", "cause"),
    [
        ({}, "HTTP 404"),
        ({RFC8414: ["not", "an", "object"]}, "not a JSON object"),
        ({RFC8414: "raw:not json"}, "not JSON"),
        ({RFC8414: {"pad": "x" * _oauth.MAXIMUM_DOCUMENT_BYTES}}, "larger than 262144 bytes"),
    ],
)
async def test_metadata_that_cannot_be_fetched_names_the_url_and_the_cause(
    documents: dict[str, Any], cause: str
) -> None:
    """Issue 47: "the OAuth issuer's metadata cannot be fetched" said neither where nor why;
    it names each URL tried and a fixed cause word (never the OS's own text)."""
    with issuer_serving(documents) as issuer, pytest.raises(_oauth.OAuthStartError) as raised:
        await _discover(issuer)
    first = f"{issuer}{RFC8414}: {cause}"
    assert str(raised.value) == (f"{_oauth.NO_METADATA} ({first}; {issuer}{OPENID}: HTTP 404)")


async def test_an_issuer_that_refuses_or_never_answers_is_named_with_the_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: refused
        with pytest.raises(_oauth.OAuthStartError) as raised:
            await _discover(f"http://127.0.0.1:{port}")
    message = str(raised.value)
    assert f"http://127.0.0.1:{port}{RFC8414}: connection refused" in message
    assert "Errno" not in message
    monkeypatch.setattr(_oauth, "FETCH_TIMEOUT_SECONDS", 0.2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts (the kernel's backlog), never answers
        port = silent.getsockname()[1]
        with pytest.raises(_oauth.OAuthStartError) as raised:
            await _discover(f"http://127.0.0.1:{port}")
    assert f"http://127.0.0.1:{port}{RFC8414}: timed out" in str(raised.value)


@pytest.mark.parametrize(
    "issuer",
    [
        "http://auth.example",
        "http://10.0.0.1:8080",
        "ftp://127.0.0.1",
        "https://user@auth.example",
        "https://auth.example/?q=1",
        "https://auth.example/#x",
        "not a url",
        "https://",
    ],
)
async def test_an_issuer_neither_https_nor_loopback_is_refused_before_any_fetch(
    issuer: str,
) -> None:
    with pytest.raises(_oauth.OAuthStartError) as raised:
        await _discover(issuer)
    assert _oauth.NOT_SECURE == str(raised.value)


@given(
    st.ip_addresses(v=4).filter(lambda a: not a.is_loopback),
    st.integers(min_value=1, max_value=65535),
)
def test_plain_http_is_secure_only_on_loopback(address: ipaddress.IPv4Address, port: int) -> None:
    assert not _oauth.secure_url(f"http://{address}:{port}/")
    assert _oauth.secure_url(f"https://{address}:{port}/")
    assert _oauth.secure_url(f"http://127.{port % 256}.0.1:{port}/")


def test_the_metadata_urls_follow_rfc_8414_then_openid_for_an_issuer_with_a_path() -> None:
    assert (
        "https://a.example/.well-known/oauth-authorization-server/tenant",
        "https://a.example/tenant/.well-known/openid-configuration",
    ) == _oauth.metadata_urls("https://a.example/tenant/")
    assert "https://a.example/.well-known/oauth-protected-resource/mcp" == _oauth.metadata_url(
        "https://a.example/mcp"
    )


def test_a_jwks_is_bounded_and_keeps_only_asymmetric_signing_keys() -> None:
    """At most ``MAXIMUM_KEYS`` keys (one over is cut); private members, ``oct`` and
    encryption keys are never loaded; a key without a kid is named by its place."""
    many = [new_key(f"k{n}", "ES256").jwk for n in range(_oauth.MAXIMUM_KEYS + 1)]
    assert _oauth.MAXIMUM_KEYS == len(_oauth.parse_keys({"keys": many}))
    assert _oauth.MAXIMUM_KEYS - 1 == len(
        _oauth.parse_keys({"keys": many[: _oauth.MAXIMUM_KEYS - 1]})
    )
    private = {**new_key("p").jwk, "d": "AAAA"}
    unnamed = {k: v for k, v in new_key("x", "EdDSA").jwk.items() if k != "kid"}
    assert ["#1"] == list(_oauth.parse_keys({"keys": [private, unnamed]}))
    assert {} == _oauth.parse_keys({"keys": "nope"})
    assert {} == _oauth.parse_keys(["keys"])


@pytest.mark.parametrize("audience", ["", "no-scheme", "https://a.example/mcp#frag", "urn:a b"])
async def test_a_bad_audience_is_a_start_error(audience: str) -> None:
    with pytest.raises(_oauth.OAuthStartError):
        _oauth.check_audience(audience)
    _oauth.check_audience("urn:spice:coding")


async def test_an_issuer_or_audience_over_the_bound_is_refused() -> None:
    at_bound = "https://a.example/" + "x" * (_oauth.MAXIMUM_URL_CHARS - len("https://a.example/"))
    _oauth.check_audience(at_bound)
    with pytest.raises(_oauth.OAuthStartError):
        _oauth.check_audience(at_bound + "x")
    with pytest.raises(_oauth.OAuthStartError) as raised:
        await _discover("http://127.0.0.1/" + "x" * _oauth.MAXIMUM_URL_CHARS)
    assert _oauth.NOT_SECURE == str(raised.value)
