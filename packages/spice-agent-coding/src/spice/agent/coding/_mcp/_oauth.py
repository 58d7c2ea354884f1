"""The HTTP transport as an OAuth 2.1 resource server: JWT access tokens from one issuer.

``serve --transport http --oauth-issuer URL [--oauth-audience URI]`` accepts access tokens
that the issuer signed for this server, beside (or instead of) a ``--token-file``:

- The issuer is ``https://``, or ``http://`` on a loopback address. Its metadata is found
  at start (RFC 8414 ``/.well-known/oauth-authorization-server``, else OpenID discovery
  ``/.well-known/openid-configuration``), must name the same issuer and a ``jwks_uri``
  (https or loopback too); the keys are fetched at start. Any of that failing is a start
  error (``OAuthStartError``: one fixed line, exit 2).
- A token is a JWT whose header names ``RS256``, ``ES256`` or ``EdDSA`` (never ``none``,
  never a shared secret: an ``oct`` key is never loaded) and a key the issuer publishes;
  its ``iss`` is the issuer, its ``aud`` holds this resource (RFC 8707: a token meant for
  another server is refused), ``exp`` is required, and ``exp``/``nbf``/``iat`` are judged
  with at most ``LEEWAY_SECONDS``. Its ``scope`` maps to tools as a token file's scopes do
  (the highest of ``read`` < ``write`` < ``shell`` named, and every one below it).
- The keys (at most ``MAXIMUM_KEYS``) are refreshed after ``REFRESH_SECONDS``; an unknown
  ``kid`` makes a refetch at most once per ``REFETCH_SECONDS``. A failing refresh keeps
  the last good keys for ``KEYS_TTL_SECONDS`` after they were fetched; past that every
  token is answered 503 with the reason (``KeysUnavailable``), never accepted unverified.
- A verified JWT is remembered (by its SHA-256, never the token) for at most
  ``VERIFIED_SECONDS`` and its ``exp``, at most ``MAXIMUM_VERIFIED`` at once (the oldest
  out first), with the key that verified it: a hit is served only while that same key is
  still one the issuer publishes and the keys have not expired, so a rotation or an
  outage judges a remembered token as it would a new one. Memory is bounded whatever the
  number of distinct tokens.
- Opaque tokens (not JWTs), with ``--oauth-introspection-url`` and the server's own client
  credentials (``--oauth-client-file``: ``CLIENT_ID CLIENT_SECRET``, a private file outside
  every writable place), are introspected (RFC 7662, ``client_secret_basic``): ``active``,
  the same ``iss`` when named, ``aud`` holding this resource, ``exp`` within the leeway.
  An answer is remembered for at most ``INTROSPECTION_CACHE_SECONDS`` (by the token's
  digest, at most ``MAXIMUM_INTROSPECTED`` of them); an endpoint that does not answer is
  503 with the reason.

The transport publishes RFC 9728 metadata (``metadata_document``) and answers 401 with
``resource_metadata`` and 403 ``insufficient_scope`` with the scope a call needs.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import math
import os
import socket
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final
from urllib.parse import urlsplit

import httpx2
import jwt
import orjson
from mcp.server.auth.provider import AccessToken

from .._netpolicy._loopback import is_loopback
from ._private import access_problem, inside
from ._tokens import SCOPES, scopes_of

ALGORITHMS: Final = ("RS256", "ES256", "EdDSA")
"""The only signature algorithms accepted (asymmetric: never ``none``, never ``HS*``)."""
LEEWAY_SECONDS: Final = 60
"""Clock skew allowed when judging ``exp``, ``nbf`` and ``iat``."""
MAXIMUM_TOKEN_CHARS: Final = 8192
"""A presented token longer than this is refused without being parsed."""
MAXIMUM_KEYS: Final = 64
"""At most this many keys of a JWKS are kept (the rest ignored)."""
MAXIMUM_DOCUMENT_BYTES: Final = 256 * 1024
"""Largest metadata or JWKS document read from the issuer."""
FETCH_TIMEOUT_SECONDS: Final = 10.0
"""Bound on each fetch from the issuer (connect, each read, the whole)."""
REFRESH_SECONDS: Final = 300.0
"""Keys older than this are fetched again at the next token."""
REFETCH_SECONDS: Final = 60.0
"""An unknown ``kid`` (or a failed fetch) is retried at most once in this many seconds."""
KEYS_TTL_SECONDS: Final = 3600.0
"""The last good keys are used this long after they were fetched, then never again."""
MAXIMUM_VERIFIED: Final = 1024
"""Verified JWTs remembered at once (by SHA-256); the oldest go first."""
VERIFIED_SECONDS: Final = 60.0
"""A verified JWT is served from memory for at most this long (then verified again)."""
MAXIMUM_INTROSPECTED: Final = 1024
"""Introspection answers remembered at once (by the token's SHA-256); the oldest go first."""
INTROSPECTION_CACHE_SECONDS: Final = 30.0
"""An introspection answer is used again for at most this long (a revocation shows then)."""
FAILED_INTROSPECTION_SECONDS: Final = 10.0
"""A token the endpoint did not answer for is answered 503 again for this long without
asking (a flood of one junk token costs one request, not one per try)."""
MAXIMUM_INTROSPECTIONS: Final = 16
"""Introspection requests in flight at once (they come before authentication); one more
token is answered 503 at once, so a flood cannot queue on the issuer or its pool."""
MAXIMUM_INTROSPECTIONS_PER_PEER: Final = 4
"""Of those, in flight at once for one address: one address cannot take them all."""
MAXIMUM_CLIENT_FILE_BYTES: Final = 4096
MAXIMUM_URL_CHARS: Final = 2048
"""An issuer or audience longer than this is refused at start."""
MAXIMUM_PRINCIPAL_CHARS: Final = 64
"""The principal's name (``client_id``, else ``sub``) is cut to this many characters."""

_METADATA_PATHS: Final = (
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
)

NOT_SECURE: Final = "the OAuth issuer must be an https:// URL (or http:// on a loopback address)"
BAD_AUDIENCE: Final = "the OAuth audience must be an absolute URI without a fragment"
NO_METADATA: Final = "the OAuth issuer's metadata cannot be fetched"
OTHER_ISSUER: Final = "the OAuth issuer's metadata names another issuer"
NO_JWKS_URI: Final = "the OAuth issuer's metadata has no jwks_uri"
JWKS_NOT_SECURE: Final = "the OAuth issuer's jwks_uri is not https:// (or loopback)"
NO_KEYS: Final = "the OAuth issuer's keys cannot be fetched"
NO_USABLE_KEYS: Final = "the OAuth issuer publishes no RS256, ES256 or EdDSA signing key"
INTROSPECTION_NOT_SECURE: Final = (
    "the OAuth introspection URL must be https:// (or http:// on a loopback address)"
)
NO_INTROSPECTION: Final = "the authorization server's introspection endpoint did not answer"
INTROSPECTION_BUSY: Final = "too many tokens are being checked with the authorization server; retry"
CLIENT_FILE_UNUSABLE: Final = (
    "the OAuth client file must be the user's own regular file, private (chmod 600), "
    "holding one line CLIENT_ID CLIENT_SECRET"
)
CLIENT_FILE_PLACE: Final = (
    "the OAuth client file lies beneath the worktree root or inside an --allow-write directory"
)
KEYS_EXPIRED: Final = (
    "the authorization server's keys could not be fetched again and the last ones expired"
)

_logger = logging.getLogger("spice.agent.coding")


class OAuthStartError(ValueError):
    """The OAuth settings cannot be used; one fixed line without content (the CLI exits 2)."""


class KeysUnavailable(Exception):
    """No keys may be used now (the last good ones expired): the request is answered 503."""


class IntrospectionBusy(KeysUnavailable):
    """The introspection bounds are full: the request is answered 503, to retry soon."""


def secure_url(url: str) -> bool:
    """Whether ``url`` is ``https://HOST...``, or ``http://`` on a loopback address, with no
    user, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    if not host or parts.username is not None or parts.query or parts.fragment:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(host))


def check_audience(uri: str) -> None:
    """``OAuthStartError`` unless ``uri`` is an absolute URI without a fragment."""
    if len(uri) > MAXIMUM_URL_CHARS:
        raise OAuthStartError(BAD_AUDIENCE)
    try:
        parts = urlsplit(uri)
    except ValueError:
        raise OAuthStartError(BAD_AUDIENCE) from None
    if not parts.scheme or "#" in uri or any(c.isspace() for c in uri):
        raise OAuthStartError(BAD_AUDIENCE)


def metadata_urls(issuer: str) -> tuple[str, ...]:
    """Where the issuer's metadata may be: RFC 8414 (the well-known path before the
    issuer's path), then OpenID discovery (after it)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    return (f"{origin}{_METADATA_PATHS[0]}{path}", f"{origin}{path}{_METADATA_PATHS[1]}")


def _failure_word(error: BaseException) -> str:
    """A fixed cause word for a failed fetch (never the OS's own text)."""
    if isinstance(error, (TimeoutError, httpx2.TimeoutException)):
        return "timed out"
    seen: BaseException | None = error
    for _ in range(8):  # the chain of causes, bounded
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "name not resolved"
        seen = seen.__cause__ or seen.__context__
    return "connection failed"


async def _fetch_json(
    client: httpx2.AsyncClient, url: str, causes: list[str] | None = None
) -> object:
    """The JSON document at ``url`` (200, at most ``MAXIMUM_DOCUMENT_BYTES``), else ``None``;
    ``causes`` gets why not, in fixed words (``timed out``, ``connection refused``, ``HTTP
    404``, ``not JSON`` ...)."""
    why = [] if causes is None else causes
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_SECONDS):
            async with client.stream("GET", url, headers={"accept": "application/json"}) as r:
                if r.status_code != 200:
                    why.append(f"HTTP {r.status_code}")
                    return None
                body = bytearray()
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > MAXIMUM_DOCUMENT_BYTES:
                        why.append(f"larger than {MAXIMUM_DOCUMENT_BYTES} bytes")
                        return None
    except (httpx2.HTTPError, TimeoutError, OSError) as error:
        why.append(_failure_word(error))
        return None
    try:
        return orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        why.append("not JSON")
        return None


def parse_keys(document: object) -> dict[str, jwt.PyJWK]:
    """The usable signing keys of a JWKS by ``kid`` (a key without one is named by its
    position): only ``RSA``, ``EC`` P-256 and ``OKP`` Ed25519 keys for the allowed
    algorithms, none marked for encryption; at most ``MAXIMUM_KEYS``."""
    keys: dict[str, jwt.PyJWK] = {}
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return keys
    for index, entry in enumerate(entries):
        if len(keys) >= MAXIMUM_KEYS:
            break
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("kty") not in ("RSA", "EC", "OKP") or "d" in entry:
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
            continue
        if key.algorithm_name not in ALGORITHMS:
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else f"#{index}"] = key
    return keys


@final
@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """``--oauth-issuer``; ``--oauth-introspection-url`` and the credentials it is asked with."""

    issuer: str
    introspection_url: str | None = None
    credentials: tuple[str, str] | None = None

    def __repr__(self) -> str:
        return f"OAuthSettings(issuer={self.issuer!r})"


@final
class Keys:
    """The issuer's signing keys, fetched from ``jwks_uri``: bounded, refreshed, expiring."""

    __slots__ = ("_client", "_clock", "_fetched", "_keys", "_lock", "_tried", "_uri")

    def __init__(
        self, uri: str, client: httpx2.AsyncClient, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._uri, self._client, self._clock = uri, client, clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched = -float("inf")
        self._tried = -float("inf")
        self._lock = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def now(self) -> float:
        """The cache's clock."""
        return self._clock()

    async def load(self) -> None:
        """The first fetch (at start): ``OAuthStartError`` when it fails."""
        document = await _fetch_json(self._client, self._uri)
        if document is None:
            raise OAuthStartError(NO_KEYS)
        keys = parse_keys(document)
        if not keys:
            raise OAuthStartError(NO_USABLE_KEYS)
        self._keys, self._fetched = keys, self._clock()
        self._tried = self._fetched

    async def _refetch(self) -> None:
        async with self._lock:
            if self._clock() - self._tried < REFETCH_SECONDS:
                return  # another token fetched (or failed) just now
            self._tried = self._clock()
            document = await _fetch_json(self._client, self._uri)
            keys = parse_keys(document) if document is not None else {}
            if keys:
                self._keys, self._fetched = keys, self._clock()
            else:
                _logger.warning("%s; the last good keys are used until they expire", NO_KEYS)

    async def candidates(self, kid: str | None, algorithm: str) -> list[jwt.PyJWK]:
        """The keys that may have signed a token with this header (``KeysUnavailable``
        when the last good keys expired and cannot be fetched again)."""
        now = self._clock()
        stale = now - self._fetched >= REFRESH_SECONDS
        unknown = kid is not None and kid not in self._keys
        if (stale or unknown) and now - self._tried >= REFETCH_SECONDS:
            await self._refetch()
        if self._clock() - self._fetched >= KEYS_TTL_SECONDS:
            raise KeysUnavailable(KEYS_EXPIRED)
        if kid is not None:
            found = self._keys.get(kid)
            keys = [] if found is None else [found]
        else:
            keys = list(self._keys.values())
        return [key for key in keys if key.algorithm_name == algorithm]


def _scopes_of(claim: object) -> tuple[str, ...]:
    """The scopes held for a ``scope`` claim: the highest named and every one below it."""
    if isinstance(claim, str):
        names = claim.split()
    elif isinstance(claim, list):
        names = [name for name in claim if isinstance(name, str)]
    else:
        return ()
    known = [name for name in names if name in SCOPES]
    return scopes_of(max(known, key=SCOPES.index)) if known else ()


def _shown(value: str) -> str:
    """``value`` printable, without spaces, at most ``MAXIMUM_PRINCIPAL_CHARS``: a longer one
    keeps a digest of the whole in its tail, so two long names stay apart."""
    text = "".join(c if c.isprintable() and not c.isspace() else "?" for c in value)
    if len(text) <= MAXIMUM_PRINCIPAL_CHARS:
        return text
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{text[: MAXIMUM_PRINCIPAL_CHARS - 9]}~{digest}"


def _text(claims: Mapping[str, Any], field: str) -> str | None:
    value = claims.get(field)
    return value if isinstance(value, str) and value else None


def _principal(claims: Mapping[str, Any]) -> str:
    """The token's user and client: ``CLIENT;sub=SUB`` (the client is ``client_id``, else
    ``azp``), ``CLIENT`` or ``sub=SUB`` when one is missing, ``-`` when both are. The rate
    is counted per principal, so two users of one client are counted apart (R6-B2)."""
    client = _text(claims, "client_id") or _text(claims, "azp")
    subject = _text(claims, "sub")
    parts = [_shown(client)] if client is not None else []
    if subject is not None and subject != client:
        parts.append("sub=" + _shown(subject))
    return ";".join(parts) or "-"


def numeric_date(value: object) -> float | None:
    """A NumericDate claim's value: a JSON number (RFC 7519 §2), finite; else ``None`` (a
    string, even of digits, or a boolean is no date)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _dates_are_numbers(claims: Mapping[str, Any]) -> bool:
    """Whether ``exp`` is a number and ``nbf``/``iat``, when present, are too."""
    if numeric_date(claims.get("exp")) is None:
        return False
    return all(numeric_date(claims[f]) is not None for f in ("nbf", "iat") if f in claims)


@final
class JwtVerifier:
    """The SDK's ``TokenVerifier`` for the issuer's JWT access tokens (nothing kept per token)."""

    __slots__ = ("_audience", "_introspector", "_issuer", "_keys", "_verified")

    def __init__(
        self, issuer: str, audience: str, keys: Keys, introspector: Introspector | None = None
    ) -> None:
        self._issuer, self._audience, self._keys = issuer, audience, keys
        self._introspector = introspector
        self._verified: collections.OrderedDict[bytes, _Verified] = collections.OrderedDict()

    def __len__(self) -> int:
        """How many verified tokens are remembered."""
        return len(self._verified)

    @property
    def audience(self) -> str:
        """What a token's ``aud`` must hold: this resource."""
        return self._audience

    @property
    def issuer(self) -> str:
        """The one issuer whose tokens are accepted."""
        return self._issuer

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's principal and scopes, or ``None``; ``KeysUnavailable`` past the keys'
        life."""
        return await self.verify(token, "-")

    def for_peer(self, peer: str) -> _PeerVerifier:
        """The SDK's ``TokenVerifier`` for one request from ``peer`` (its address bounds
        the introspections it may start)."""
        return _PeerVerifier(self, peer)

    async def verify(self, token: str, peer: str) -> AccessToken | None:
        """``verify_token`` for a request from ``peer``."""
        if not isinstance(token, str) or not 0 < len(token) <= MAXIMUM_TOKEN_CHARS:
            return None
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        remembered = self._verified.get(digest)
        if remembered is not None:
            if await self._still(remembered):
                return remembered.access
            del self._verified[digest]
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            # Not a JWT: an opaque token, which only the issuer can judge.
            if self._introspector is None or token.count(".") == 2:
                return None
            return await self._introspector.verify_token(token, peer)
        algorithm = header.get("alg")
        kid = header.get("kid")
        if algorithm not in ALGORITHMS or not (kid is None or isinstance(kid, str)):
            return None
        for key in await self._keys.candidates(kid, algorithm):
            try:
                claims = jwt.decode(
                    token,
                    key=key,
                    algorithms=[algorithm],
                    audience=self._audience,
                    issuer=self._issuer,
                    leeway=LEEWAY_SECONDS,
                    options={"require": ["exp", "iss", "aud"]},
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError:
                return None
            if not _dates_are_numbers(claims):
                return None  # PyJWT takes "exp": "1700000000"; RFC 7519 does not
            access = _access(claims, self._audience)
            self._remember(digest, _Verified(self._keys.now(), kid, algorithm, key, access))
            return access
        return None

    async def _still(self, remembered: _Verified) -> bool:
        """Whether a remembered token may be served: young enough, not expired, and the key
        that verified it still published (``KeysUnavailable`` as for a new token)."""
        if self._keys.now() - remembered.at >= VERIFIED_SECONDS:
            return False
        expires = remembered.access.expires_at
        if expires is None or time.time() > expires:
            return False
        keys = await self._keys.candidates(remembered.kid, remembered.algorithm)
        return any(key is remembered.key for key in keys)

    def _remember(self, digest: bytes, verified: _Verified) -> None:
        self._verified[digest] = verified
        self._verified.move_to_end(digest)
        while len(self._verified) > MAXIMUM_VERIFIED:
            self._verified.popitem(last=False)


@final
@dataclass(frozen=True, slots=True)
class _PeerVerifier:
    """A ``JwtVerifier`` for one request's address."""

    verifier: JwtVerifier
    peer: str

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.verifier.verify(token, self.peer)


@final
@dataclass(frozen=True, slots=True)
class _Verified:
    """A verified JWT, remembered: when, by which key, what it allows."""

    at: float
    kid: str | None
    algorithm: str
    key: jwt.PyJWK
    access: AccessToken


def _access(claims: Mapping[str, Any], audience: str) -> AccessToken:
    """What a verified token's claims (or introspection answer) allow, never the token."""
    exp = numeric_date(claims.get("exp"))
    return AccessToken(
        token="",
        client_id="oauth:" + _principal(claims),
        scopes=list(_scopes_of(claims.get("scope", claims.get("scp")))),
        # Judged by its value, a fraction rounded down: never served past ``exp`` + leeway.
        expires_at=None if exp is None else math.floor(exp) + LEEWAY_SECONDS,
        resource=audience,
        subject=_text(claims, "sub"),
    )


_FAILED: Final = object()
"""What ``Introspector._seen`` holds for a token the endpoint did not answer for."""


@final
class Introspector:
    """RFC 7662 introspection of opaque tokens at the issuer, remembered briefly (bounded),
    at most ``MAXIMUM_INTROSPECTIONS`` requests in flight (``..._PER_PEER`` per address)."""

    __slots__ = (
        "_audience",
        "_client",
        "_clock",
        "_credentials",
        "_flying",
        "_issuer",
        "_seen",
        "_url",
    )

    def __init__(
        self,
        url: str,
        credentials: tuple[str, str],
        issuer: str,
        audience: str,
        client: httpx2.AsyncClient,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url, self._credentials, self._client, self._clock = url, credentials, client, clock
        self._issuer, self._audience = issuer, audience
        self._seen: collections.OrderedDict[bytes, tuple[float, object]] = collections.OrderedDict()
        self._flying: collections.Counter[str] = collections.Counter()

    def __len__(self) -> int:
        return len(self._seen)

    def in_flight(self) -> int:
        """Introspection requests being made now."""
        return self._flying.total()

    async def verify_token(self, token: str, peer: str = "-") -> AccessToken | None:
        """The token's principal and scopes, or ``None``; ``KeysUnavailable`` when the
        endpoint does not answer (remembered ``FAILED_INTROSPECTION_SECONDS``), and
        ``IntrospectionBusy`` when the bounds are full."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        known = self._seen.get(digest)
        if known is not None and known[0] > self._clock():
            if known[1] is _FAILED:
                raise KeysUnavailable(NO_INTROSPECTION)
            return known[1] if isinstance(known[1], AccessToken) else None
        if (
            self._flying.total() >= MAXIMUM_INTROSPECTIONS
            or self._flying[peer] >= MAXIMUM_INTROSPECTIONS_PER_PEER
        ):
            raise IntrospectionBusy(INTROSPECTION_BUSY)
        self._flying[peer] += 1
        try:
            answer = await self._ask(token)
        except KeysUnavailable:
            self._remember(digest, FAILED_INTROSPECTION_SECONDS, _FAILED)
            raise
        finally:
            self._flying[peer] -= 1
            if self._flying[peer] <= 0:
                del self._flying[peer]
        found = self._judge(answer)
        self._remember(digest, INTROSPECTION_CACHE_SECONDS, found)
        return found

    def _remember(self, digest: bytes, seconds: float, what: object) -> None:
        self._seen[digest] = (self._clock() + seconds, what)
        self._seen.move_to_end(digest)
        while len(self._seen) > MAXIMUM_INTROSPECTED:
            self._seen.popitem(last=False)

    async def _ask(self, token: str) -> Mapping[str, Any]:
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_SECONDS):
                response = await self._client.post(
                    self._url,
                    data={"token": token, "token_type_hint": "access_token"},
                    auth=self._credentials,
                    headers={"accept": "application/json"},
                )
            if response.status_code != 200 or len(response.content) > MAXIMUM_DOCUMENT_BYTES:
                raise KeysUnavailable(NO_INTROSPECTION)
            answer = orjson.loads(response.content)
        except (httpx2.HTTPError, TimeoutError, OSError, orjson.JSONDecodeError):
            raise KeysUnavailable(NO_INTROSPECTION) from None
        if not isinstance(answer, dict):
            raise KeysUnavailable(NO_INTROSPECTION)
        return answer

    def _judge(self, answer: Mapping[str, Any]) -> AccessToken | None:
        if answer.get("active") is not True:
            return None
        if "iss" in answer and answer["iss"] != self._issuer:
            return None
        audience = answer.get("aud")
        held = audience if isinstance(audience, list) else [audience]
        if self._audience not in held:
            return None
        now = time.time()
        exp, nbf = numeric_date(answer.get("exp")), answer.get("nbf")
        if exp is None or exp < now - LEEWAY_SECONDS:
            return None
        if nbf is not None and (numeric_date(nbf) or math.inf) > now + LEEWAY_SECONDS:
            return None
        return _access(answer, self._audience)


def read_client_file(path: str, root: str, writable: tuple[str, ...]) -> tuple[str, str]:
    """``CLIENT_ID CLIENT_SECRET`` from a private file outside every writable place."""
    if inside(path, (root, *writable)):
        raise OAuthStartError(CLIENT_FILE_PLACE)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except OSError:
        raise OAuthStartError(CLIENT_FILE_UNUSABLE) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or access_problem(fd, info) is not None:
            raise OAuthStartError(CLIENT_FILE_UNUSABLE)
        data = os.read(fd, MAXIMUM_CLIENT_FILE_BYTES + 1)
    except OSError:
        raise OAuthStartError(CLIENT_FILE_UNUSABLE) from None
    finally:
        os.close(fd)
    try:
        fields = data.decode("utf-8").split()
    except UnicodeDecodeError:
        raise OAuthStartError(CLIENT_FILE_UNUSABLE) from None
    if len(data) > MAXIMUM_CLIENT_FILE_BYTES or len(fields) != 2:
        raise OAuthStartError(CLIENT_FILE_UNUSABLE)
    return fields[0], fields[1]


async def discover(
    settings: OAuthSettings,
    audience: str,
    client: httpx2.AsyncClient,
    clock: Callable[[], float] = time.monotonic,
) -> JwtVerifier:
    """The verifier for ``settings``, its metadata and keys fetched now (``OAuthStartError``
    with one fixed line when any of it cannot be used)."""
    issuer = settings.issuer
    if len(issuer) > MAXIMUM_URL_CHARS or not secure_url(issuer):
        raise OAuthStartError(NOT_SECURE)
    check_audience(audience)
    metadata: object = None
    tried: list[str] = []
    for url in metadata_urls(issuer):
        causes: list[str] = []
        metadata = await _fetch_json(client, url, causes)
        if isinstance(metadata, dict):
            break
        tried.append(f"{url}: {causes[0] if causes else 'not a JSON object'}")
    if not isinstance(metadata, dict):
        raise OAuthStartError(f"{NO_METADATA} ({'; '.join(tried)})")
    if metadata.get("issuer") != issuer:
        raise OAuthStartError(OTHER_ISSUER)
    jwks_uri = metadata.get("jwks_uri")
    if not isinstance(jwks_uri, str) or not jwks_uri:
        raise OAuthStartError(NO_JWKS_URI)
    if not secure_url(jwks_uri):
        raise OAuthStartError(JWKS_NOT_SECURE)
    introspector = None
    if settings.introspection_url is not None and settings.credentials is not None:
        if not secure_url(settings.introspection_url):
            raise OAuthStartError(INTROSPECTION_NOT_SECURE)
        introspector = Introspector(
            settings.introspection_url, settings.credentials, issuer, audience, client, clock
        )
    keys = Keys(jwks_uri, client, clock)
    await keys.load()
    return JwtVerifier(issuer, audience, keys, introspector)


def new_client() -> httpx2.AsyncClient:
    """The client the issuer is fetched with: no redirects followed, bounded time."""
    return httpx2.AsyncClient(follow_redirects=False, timeout=httpx2.Timeout(FETCH_TIMEOUT_SECONDS))


def metadata_url(base: str) -> str:
    """The RFC 9728 metadata URL of the resource at ``base``: the well-known path between
    its authority and its path."""
    parts = urlsplit(base)
    path = parts.path if parts.path != "/" else ""
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{path}"


def published_resource(audience: str, url: str) -> str:
    """The RFC 9728 ``resource`` to publish: the ``--oauth-audience`` when it is an
    ``http(s)`` URL, else (a URN) the resource's own ``url`` (RFC 9728 §3.3: a client
    refuses metadata whose ``resource`` is not the URL it asked about)."""
    return audience if urlsplit(audience).scheme in ("http", "https") else url


def metadata_document(resource: str, issuer: str) -> dict[str, Any]:
    """The RFC 9728 protected resource metadata this server publishes."""
    return {
        "resource": resource,
        "authorization_servers": [issuer],
        "scopes_supported": list(SCOPES),
        "bearer_methods_supported": ["header"],
    }
