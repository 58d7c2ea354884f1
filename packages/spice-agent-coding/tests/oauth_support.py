"""A real authorization server (oidc-provider, ``scripts/oauth-server``) for the OAuth tests,
the SDK client's own OAuth flow driven in process, and signing keys the tests hold.

``authorization_server`` starts ``node server.mjs`` on loopback with a JWKS the test made
(so the test can also sign tokens with the issuer's own key: expired, for another audience,
from another issuer), and can restart it on the same port with other keys (rotation).
``Browser`` stands in for the user's browser: the SDK's redirect handler GETs the authorize
URL and follows the provider's redirects (its interaction answers at once) until the
redirect URI, whose ``code``, ``state`` and ``iss`` the callback handler returns.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

SERVER_DIR: Final = Path(__file__).resolve().parents[3] / "scripts" / "oauth-server"
WAIT: Final = 30.0
"""Bound on every wait for the authorization server (its start, its exit)."""
MAXIMUM_REDIRECTS: Final = 10
REDIRECT_URI: Final = "http://127.0.0.1:9/callback"
"""Never reached: the browser stand-in stops at it and reads the code off the Location."""


def node_missing() -> str | None:
    """Why the authorization server cannot run here, or ``None``."""
    if shutil.which("node") is None:
        return "node is missing: the OAuth end-to-end tests need it"
    if not (SERVER_DIR / "node_modules" / "oidc-provider").is_dir():
        return "oidc-provider is not installed: run make bootstrap (npm ci in scripts/oauth-server)"
    return None


@dataclass(frozen=True)
class SigningKey:
    """A private key and its public JWK (``kid``, ``alg`` and ``use`` set)."""

    kid: str
    algorithm: str
    private: Any
    jwk: dict[str, Any]

    def sign(self, claims: Mapping[str, Any], **header: str) -> str:
        return jwt.encode(
            dict(claims),
            self.private,
            algorithm=self.algorithm,
            headers={"kid": self.kid, **header},
        )


def new_key(kid: str, algorithm: str = "RS256") -> SigningKey:
    """A fresh key for ``algorithm`` (RS256, ES256 or EdDSA) and its public JWK."""
    private: Any
    if algorithm == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    else:
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(private.public_key()))
    jwk.update(kid=kid, alg=algorithm, use="sig")
    return SigningKey(kid, algorithm, private, jwk)


@dataclass
class AuthorizationServer:
    """A running oidc-provider: its issuer, keys file and process (restartable)."""

    issuer: str
    keys_file: Path
    resources: tuple[str, ...]
    process: asyncio.subprocess.Process
    options: tuple[str, ...]
    output: bytearray = field(default_factory=bytearray)
    drain: asyncio.Future[None] | None = None

    @property
    def port(self) -> int:
        return int(self.issuer.rsplit(":", 1)[1])

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                async with asyncio.timeout(WAIT):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self.drain is not None:
            async with asyncio.timeout(WAIT):
                await self.drain

    async def restart(self, keys: Sequence[SigningKey], alg: str = "RS256") -> None:
        """The same issuer (port) with ``keys``: the first of ``alg`` signs from now on."""
        await self.stop()
        _write_keys(self.keys_file, keys)
        self.process, self.issuer, self.drain = await _start(
            self.keys_file, self.resources, self.port, alg, self.output, self.options
        )


def _write_keys(path: Path, keys: Sequence[SigningKey]) -> None:
    private = []
    for key in keys:
        if key.algorithm == "RS256":
            text = jwt.algorithms.RSAAlgorithm.to_jwk(key.private)
        elif key.algorithm == "ES256":
            text = jwt.algorithms.ECAlgorithm.to_jwk(key.private)
        else:
            text = jwt.algorithms.OKPAlgorithm.to_jwk(key.private)
        entry = json.loads(text)
        entry.update(kid=key.kid, alg=key.algorithm, use="sig")
        private.append(entry)
    path.write_text(json.dumps({"keys": private}))


async def _start(
    keys_file: Path,
    resources: Sequence[str],
    port: int,
    alg: str,
    output: bytearray,
    options: Sequence[str] = (),
) -> tuple[asyncio.subprocess.Process, str, asyncio.Future[None]]:
    arguments = ["--keys", str(keys_file), "--port", str(port), "--alg", alg, *options]
    for resource in resources:
        arguments += ["--resource", resource]
    process = await asyncio.create_subprocess_exec(
        "node",
        str(SERVER_DIR / "server.mjs"),
        *arguments,
        cwd=SERVER_DIR,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    async with asyncio.timeout(WAIT):
        while True:
            line = await process.stdout.readline()
            if not line:
                raise AssertionError("the authorization server exited: " + output.decode())
            output += line
            if line.startswith(b"listening on "):
                issuer = line.split()[-1].decode()
                break
    return process, issuer, asyncio.ensure_future(_drain(process.stdout, output))


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    while line := await stream.readline():
        into += line


@asynccontextmanager
async def authorization_server(
    tmp_path: Path,
    resources: Sequence[str],
    keys: Sequence[SigningKey],
    alg: str = "RS256",
    *,
    opaque: bool = False,
    introspector: str | None = None,
) -> AsyncIterator[AuthorizationServer]:
    """oidc-provider on a free loopback port, issuing JWTs for ``resources`` (``opaque``:
    opaque tokens; ``introspector``: ``ID:SECRET`` of a client that may introspect them)."""
    keys_file = tmp_path / "issuer-keys.json"
    _write_keys(keys_file, keys)
    output = bytearray()
    options = (
        *(["--opaque"] if opaque else []),
        *(["--introspector", introspector] if introspector else []),
    )
    process, issuer, drain = await _start(keys_file, resources, 0, alg, output, options)
    server = AuthorizationServer(
        issuer, keys_file, tuple(resources), process, options, output, drain
    )
    try:
        yield server
    finally:
        await server.stop()


@dataclass
class MemoryStorage:
    """The SDK's ``TokenStorage`` in memory."""

    tokens: OAuthToken | None = None
    client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@dataclass
class Browser:
    """The user's browser: follows the authorize URL to the redirect URI (auto-consent)."""

    visits: list[str] = field(default_factory=list)
    result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        self.visits.append(url)
        async with httpx2.AsyncClient(follow_redirects=False, timeout=WAIT) as http:
            for _ in range(MAXIMUM_REDIRECTS):
                response = await http.get(url)
                if response.status_code not in (302, 303):
                    raise AssertionError(
                        f"the authorization server answered {response.status_code}"
                    )
                url = urljoin(url, response.headers["location"])
                if url.startswith(REDIRECT_URI):
                    query = parse_qs(urlsplit(url).query)
                    if "code" not in query:
                        raise AssertionError(f"no code in the redirect: {query}")
                    self.result = AuthorizationCodeResult(
                        code=query["code"][0],
                        state=query.get("state", [None])[0],
                        iss=query.get("iss", [None])[0],
                    )
                    return
        raise AssertionError("too many redirects")

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        result, self.result = self.result, None
        return result


def oauth_provider(url: str, browser: Browser, storage: MemoryStorage) -> OAuthClientProvider:
    """The SDK client's OAuth flow (discovery from the 401, registration, PKCE) for ``url``."""
    metadata = OAuthClientMetadata(
        client_name="spice-coding tests",
        redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",  # noqa: S106 - a method, no secret
    )
    return OAuthClientProvider(
        server_url=url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )


def claims_for(
    issuer: str, audience: str | list[str], scope: str = "read", **extra: object
) -> dict[str, Any]:
    """Claims of an access token valid now for five minutes."""
    now = int(time.time())
    return {
        "iss": issuer,
        "aud": audience,
        "sub": "tester",
        "client_id": "minted",
        "scope": scope,
        "iat": now,
        "exp": now + 300,
        **extra,
    }
