"""OAuth tokens judged by who and until when (round 5's R6-B2, R6-B3, R6-B5).

A real authorization server (oidc-provider, ``oauth_support``) publishes the keys; the test
signs tokens with them, so each claim can be set exactly: two users of one OAuth client
(the rate is per user and client, and the audit tells them apart), an ``exp`` that is a
fraction just inside the leeway (never served past it from the cache), an ``exp`` that is a
string of digits (refused: RFC 7519 NumericDate is a JSON number), and a request without a
token (RFC 6750 §3.1: a challenge without an ``error`` code).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import pytest
from http_support import LIST_BODY, call_body
from hypothesis import given
from hypothesis import strategies as st
from oauth_support import claims_for, new_key, node_missing
from test_http_oauth import _post, both

from spice.agent.coding._mcp import _oauth

pytestmark = pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))

READ = call_body("read", {"path": "hello.txt"})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / "hello.txt").write_text("hello\n")
    return worktree


async def test_two_users_of_one_client_are_counted_apart_and_named_apart(
    tmp_path: Path, root: Path
) -> None:
    """``--max-calls-per-minute 3``: alice's three calls use her bucket; bob's first call,
    with the same ``client_id``, is served (R6-B2); alice's fourth is 429; the audit lines
    name ``oauth:CLIENT;sub=USER``."""
    key = new_key("k1")
    client = "https://client.example/metadata.json"
    async with both(tmp_path, root, [key], rate=3) as (issuer, resource, _):
        good = claims_for(issuer.issuer, resource.resource, client_id=client)
        alice = key.sign({**good, "sub": "alice"})
        bob = key.sign({**good, "sub": "bob"})
        assert [200, 200, 200] == [
            (await _post(resource.url, alice, READ)).status_code for _ in range(3)
        ]
        assert 200 == (await _post(resource.url, bob, READ)).status_code
        assert 429 == (await _post(resource.url, alice, READ)).status_code
        names = [json.loads(line.split("audit ", 1)[1])["token"] for line in _lines(resource)]
        assert [f"oauth:{client};sub=alice"] * 3 + [f"oauth:{client};sub=bob"] == names


def _lines(resource: object) -> list[str]:
    text = resource.audit.getvalue()  # type: ignore[attr-defined]
    return [line for line in text.splitlines() if line]


async def test_a_fractional_exp_inside_the_leeway_is_not_served_past_it(
    tmp_path: Path, root: Path
) -> None:
    """``exp`` = now - leeway + 1.5: served now; once the wall clock passes ``exp`` + leeway
    (waited for by polling the clock, not a fixed sleep), the same token — remembered in
    the verified-token cache — is 401, as its integer twin is (R6-B3)."""
    key = new_key("k1")
    async with both(tmp_path, root, [key]) as (issuer, resource, _):
        exp = time.time() - _oauth.LEEWAY_SECONDS + 1.5
        fraction = key.sign(claims_for(issuer.issuer, resource.resource, exp=exp))
        assert 200 == (await _post(resource.url, fraction, LIST_BODY)).status_code
        assert 1 == len(resource.verifier)
        limit = math.floor(exp) + _oauth.LEEWAY_SECONDS
        while time.time() <= limit + 0.01:
            await _sleep_until(limit + 0.02)
        assert 401 == (await _post(resource.url, fraction, LIST_BODY)).status_code


async def _sleep_until(when: float) -> None:
    await asyncio.sleep(max(0.0, min(1.0, when - time.time())))


async def test_an_exp_that_is_a_string_or_a_boolean_is_refused(tmp_path: Path, root: Path) -> None:
    """RFC 7519 §2: a NumericDate is a JSON number. ``"exp": "<digits>"`` (PyJWT calls
    ``int()`` on it) and ``"exp": true`` are 401; so are such ``nbf``/``iat``; the same
    claims as numbers are served, a float too."""
    key = new_key("k1")
    async with both(tmp_path, root, [key]) as (issuer, resource, _):
        good = claims_for(issuer.issuer, resource.resource)
        now = int(time.time())
        for claims in (
            {**good, "exp": str(now + 300)},
            {**good, "iat": str(now)},
            {**good, "nbf": str(now - 5)},
        ):
            assert 401 == (await _post(resource.url, key.sign(claims), LIST_BODY)).status_code
        for claims in (good, {**good, "exp": now + 300.25}, {**good, "nbf": now - 5.5}):
            assert 200 == (await _post(resource.url, key.sign(claims), LIST_BODY)).status_code


@given(st.one_of(st.integers(-(2**62), 2**62), st.floats(allow_nan=False, allow_infinity=False)))
def test_a_number_is_a_numeric_date(value: float) -> None:
    assert float(value) == _oauth.numeric_date(value)


@given(
    st.one_of(
        st.text(), st.booleans(), st.none(), st.lists(st.integers()), st.sampled_from([math.nan])
    )
)
def test_anything_else_is_no_numeric_date(value: object) -> None:
    assert _oauth.numeric_date(value) is None
    assert _oauth.numeric_date(math.inf) is None


async def test_a_request_without_a_token_gets_a_challenge_without_an_error_code(
    tmp_path: Path, root: Path
) -> None:
    """RFC 6750 §3.1: no ``Authorization`` at all is 401 ``Bearer resource_metadata=...``
    without ``error=``; a wrong token still says ``error="invalid_token"``."""
    async with both(tmp_path, root, [new_key("k1")]) as (_, resource, _):
        bare = await _post(resource.url, None, LIST_BODY)
        assert 401 == bare.status_code
        challenge = bare.headers["www-authenticate"]
        assert challenge.startswith("Bearer resource_metadata=")
        assert "error" not in challenge
        wrong = await _post(resource.url, "not-a-token", LIST_BODY)
        assert 401 == wrong.status_code
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]


def test_the_published_resource_is_a_url() -> None:
    """An http(s) audience is published as it is; a URN is replaced by the URL."""
    url = "https://mcp.example/mcp"
    assert "https://other.example/x" == _oauth.published_resource("https://other.example/x", url)
    assert url == _oauth.published_resource("urn:spice:coding", url)
    assert url == _oauth.published_resource("api://spice", url)


def test_a_long_principal_keeps_two_users_apart() -> None:
    """Names are cut to ``MAXIMUM_PRINCIPAL_CHARS`` with a digest of the whole, so two
    subjects that share the first characters stay two principals."""
    long = "u" * (2 * _oauth.MAXIMUM_PRINCIPAL_CHARS)
    one = _oauth._principal({"client_id": "c", "sub": long + "1"})
    two = _oauth._principal({"client_id": "c", "sub": long + "2"})
    assert one != two
    assert len(one) <= 2 * _oauth.MAXIMUM_PRINCIPAL_CHARS + len("c;sub=")
    exact = "v" * _oauth.MAXIMUM_PRINCIPAL_CHARS
    assert f"c;sub={exact}" == _oauth._principal({"client_id": "c", "sub": exact})
    assert "c" == _oauth._principal({"azp": "c", "sub": "c"})
    assert "sub=alice" == _oauth._principal({"sub": "alice"})
    assert "-" == _oauth._principal({})
