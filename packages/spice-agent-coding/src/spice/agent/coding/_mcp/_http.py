"""MCP over streamable HTTP: the SDK's session manager behind our checks, served by uvicorn.

The request passes, in order (each refusal is a small JSON body, never an echo of the
request):

1. ``_Front``: the path (404), no query string (400: a token in a URL would be logged by
   every proxy on the way), the ``Host`` (403) and a present ``Origin`` (403) against the
   allowed sets (DNS rebinding), and no new request while draining (503).
2. The SDK's ``AuthenticationMiddleware`` + ``BearerAuthBackend`` with our token verifier,
   then ``RequireAuthMiddleware``: no or a wrong token is 401 with ``WWW-Authenticate:
   Bearer`` and a JSON body.
3. ``_Body``: only POST (405: stateless, there is no GET stream or session to end); a POST
   must be JSON (400), at most ``MAXIMUM_BODY_BYTES`` (413), one JSON
   object (a parse error or a batch: 400 with a JSON-RPC error); the bodies in flight hold
   at most ``MAXIMUM_BODY_BYTES_IN_FLIGHT`` in all (503 past it); a ``tools/call`` counts
   against its token's ``--max-calls-per-minute`` (429 with ``Retry-After``).
4. The SDK's ``StreamableHTTPSessionManager`` (stateless, answers as SSE) with explicit
   ``TransportSecuritySettings`` (the same sets: never the SDK's "off" default), serving
   the one ``Server`` that stdio serves, with ``_gate.HttpGate`` around its handlers.

uvicorn serves it on a socket bound here (so ``--port 0`` knows its port before the
``listening on`` line), with its signal capture replaced (the CLI owns SIGTERM/SIGINT),
no access log, no proxy headers and a bounded graceful shutdown.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, final
from urllib.parse import urlsplit

import orjson
import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    BaseUser,
)
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spice.agent.dispatch import Dispatcher
from spice.agent.tools.coding import Config

from .._netpolicy._loopback import is_loopback
from ._audit import AuditLog
from ._challenge import RequireToken
from ._clients import CLIENT_SCOPE_KEY, KnownClients, initialize_name
from ._framing import MAXIMUM_FRAME_BYTES
from ._gate import HttpGate
from ._http_settings import HttpSettings
from ._oauth import (
    IntrospectionBusy,
    JwtVerifier,
    KeysUnavailable,
    metadata_document,
    metadata_url,
    published_resource,
)
from ._request_bounds import Peers, guarded_h11
from ._server import serving
from ._tokens import ANONYMOUS, SCOPES, TOOL_SCOPES, TokenStore

MAXIMUM_BODY_BYTES: Final = MAXIMUM_FRAME_BYTES
"""Largest request body (8 MiB, stdio's frame bound); a larger one is answered 413."""
MAXIMUM_BODY_BYTES_IN_FLIGHT: Final = 128 * MAXIMUM_BODY_BYTES // 8
"""Bytes of request bodies held at once (128 MiB); past it a request is answered 503 with
``Retry-After``, so many large requests at once cannot grow memory past a bound."""
MAXIMUM_CONNECTIONS: Final = 512
"""Open connections uvicorn serves at once; past it a new request is answered 503. One
address holds at most ``_request_bounds.MAXIMUM_CONNECTIONS_PER_PEER`` of them, at most
``_request_bounds.MAXIMUM_WAITING`` (half) wait for their request (the oldest is closed
past it), and a request's head and body must arrive within ``HttpSettings.request_seconds``."""
KEEP_ALIVE_SECONDS: Final = 5
STOP_ANSWER_SECONDS: Final = 10
"""After the shutdown grace, the calls still running are cancelled and answered "the server
stopped" (``HttpGate.stop``); uvicorn gives them this long more to settle and send it."""
RATE_WINDOW_SECONDS: Final = 60.0
"""``--max-calls-per-minute`` counts the ``tools/call`` requests of this last window."""
MAXIMUM_RATE_KEYS: Final = 4096
"""Tokens whose recent calls are remembered; past it, idle ones are forgotten first."""
LISTENING: Final = "listening on {url}"

_JSON_RPC_INVALID_REQUEST: Final = -32600
_JSON_RPC_PARSE_ERROR: Final = -32700
_JSON_RPC_SERVER_ERROR: Final = -32000


def _error_body(code: int, message: str) -> bytes:
    """A JSON-RPC error without an id: what every refusal here answers with."""
    return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})


async def _answer(
    send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


_NOT_FOUND: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "no MCP endpoint at this path")
_QUERY: Final = _error_body(
    _JSON_RPC_INVALID_REQUEST,
    "the endpoint takes no query string; send the token in the Authorization header",
)
_BAD_HOST: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "the Host header is not allowed")
_BAD_ORIGIN: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "the Origin header is not allowed")
_DRAINING: Final = _error_body(_JSON_RPC_SERVER_ERROR, "the server is shutting down")
_METHOD: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "this endpoint takes POST only")
_NOT_JSON: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "the body must be application/json")
_TOO_LARGE: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "the body is larger than the bound")
_PARSE: Final = _error_body(_JSON_RPC_PARSE_ERROR, "the body is not valid JSON")
_BATCH: Final = _error_body(
    _JSON_RPC_INVALID_REQUEST, "the body must be one JSON-RPC message object (no batches)"
)
_BODIES: Final = _error_body(_JSON_RPC_SERVER_ERROR, "too many large requests at once; retry")
_RATE: Final = _error_body(_JSON_RPC_SERVER_ERROR, "too many calls for this token; retry later")
_SCOPE: Final = _error_body(
    _JSON_RPC_INVALID_REQUEST, "this token's scopes do not allow that tool (insufficient_scope)"
)
_METADATA_METHOD: Final = _error_body(_JSON_RPC_INVALID_REQUEST, "the metadata takes GET only")


@final
class _State:
    """What the front checks share with the shutdown: whether the server is draining."""

    __slots__ = ("draining",)

    def __init__(self) -> None:
        self.draining = False


@final
class _Front:
    """Path, query string, Host, Origin and draining, before anything else looks."""

    def __init__(
        self,
        app: ASGIApp,
        path: str,
        hosts: frozenset[str],
        origins: frozenset[str],
        state: _State,
        metadata: tuple[frozenset[str], bytes] | None = None,
    ) -> None:
        self.app, self.path, self.hosts, self.origins, self.state = (
            app,
            path,
            hosts,
            origins,
            state,
        )
        self.metadata = metadata
        """OAuth: the paths of the RFC 9728 metadata and its JSON."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        origin = headers.get("origin")
        if self.metadata is not None and scope["path"] in self.metadata[0]:
            await self._metadata(scope, send, host, self.metadata[1])
        elif scope["path"] != self.path:
            await _answer(send, 404, _NOT_FOUND)
        elif scope.get("query_string"):
            await _answer(send, 400, _QUERY)
        elif host is None or host.lower() not in self.hosts:
            await _answer(send, 403, _BAD_HOST)
        elif origin is not None and origin.lower() not in self.origins:
            await _answer(send, 403, _BAD_ORIGIN)
        elif self.state.draining:
            await _answer(send, 503, _DRAINING, ((b"retry-after", b"5"),))
        else:
            await self.app(scope, receive, send)

    async def _metadata(self, scope: Scope, send: Send, host: str | None, body: bytes) -> None:
        """The protected resource metadata: public, GET only, any Origin, the Host checked."""
        if host is None or host.lower() not in self.hosts:
            await _answer(send, 403, _BAD_HOST)
        elif scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, _METADATA_METHOD, ((b"allow", b"GET"),))
        else:
            await _answer(send, 200, body, ((b"cache-control", b"max-age=300"),))


@final
class _Rates:
    """Each token's ``tools/call`` times of the last window; bounded per token and in all."""

    __slots__ = ("_limit", "_seen")

    def __init__(self, per_minute: int) -> None:
        self._limit = per_minute
        self._seen: dict[str, collections.deque[float]] = {}

    def admit(self, name: str, now: float) -> float | None:
        """``None`` when the call may go on (it is counted), else seconds until it may."""
        times = self._seen.get(name)
        if times is None:
            if len(self._seen) >= MAXIMUM_RATE_KEYS:
                self._forget(now)
            times = self._seen[name] = collections.deque()
        while times and times[0] <= now - RATE_WINDOW_SECONDS:
            times.popleft()
        if len(times) >= self._limit:
            return times[0] + RATE_WINDOW_SECONDS - now
        times.append(now)
        return None

    def _forget(self, now: float) -> None:
        for name in [n for n, t in self._seen.items() if not t or t[-1] <= now - 60.0]:
            del self._seen[name]
        while len(self._seen) >= MAXIMUM_RATE_KEYS:
            del self._seen[next(iter(self._seen))]


@final
class _Body:
    """POST only; its body JSON, bounded, one message; ``tools/call`` counted against the rate."""

    def __init__(self, app: ASGIApp, rates: _Rates, challenge: bytes | None = None) -> None:
        self.app, self.rates, self.challenge = app, rates, challenge
        """OAuth: the ``resource_metadata="..."`` a step-up challenge carries."""
        self.in_flight = 0
        """Bytes reserved by the bodies being read or served now."""
        self.clients = KnownClients()
        """The name each caller gave in its last ``initialize`` (``_clients``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            # Stateless: no session to end (DELETE), and a GET stream would stay open with
            # nothing ever sent on it, holding a connection and the shutdown's grace.
            await _answer(send, 405, _METHOD, ((b"allow", b"POST"),))
            return
        headers = Headers(scope=scope)
        if not headers.get("content-type", "").lower().startswith("application/json"):
            await _answer(send, 400, _NOT_JSON)
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAXIMUM_BODY_BYTES:
            await _answer(send, 413, _TOO_LARGE)
            return
        # The bytes of bodies in flight are bounded in all: a body reserves its declared
        # length (or the whole bound, when it is sent in chunks) before it is read.
        reserved = int(declared) if declared.isdigit() else MAXIMUM_BODY_BYTES
        if self.in_flight + reserved > MAXIMUM_BODY_BYTES_IN_FLIGHT:
            await _answer(send, 503, _BODIES, ((b"retry-after", b"1"),))
            return
        self.in_flight += reserved
        try:
            body = await _read_body(receive)
            if body is _GONE:
                return  # the client left (or its deadline closed it) before its body was in
            if body is None:
                await _answer(send, 413, _TOO_LARGE)
                return
            self.in_flight -= reserved - len(body)
            reserved = len(body)
            refusal = self._judge(scope, body)
            if refusal is not None:
                status, answer, extra = refusal
                await _answer(send, status, answer, extra)
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.in_flight -= reserved

    def _judge(
        self, scope: Scope, body: bytes
    ) -> tuple[int, bytes, tuple[tuple[bytes, bytes], ...]] | None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return 400, _PARSE, ()
        if not isinstance(message, dict):
            return 400, _BATCH, ()
        self._know(scope, message)
        if message.get("method") != "tools/call":
            return None
        user = scope.get("user")
        needed = self._needed(user, message.get("params"))
        if needed is not None:
            challenge = f'Bearer error="insufficient_scope", scope="{needed}"'.encode()
            if self.challenge is not None:
                challenge += b", " + self.challenge
            return 403, _SCOPE, ((b"www-authenticate", challenge),)
        name = user.access_token.client_id if isinstance(user, AuthenticatedUser) else ""
        wait = self.rates.admit(name, time.monotonic())
        if wait is None:
            return None
        retry = str(max(1, math.ceil(wait))).encode()
        return 429, _RATE, ((b"retry-after", retry),)

    def _know(self, scope: Scope, message: dict[str, Any]) -> None:
        """Learn the caller's name from its ``initialize``; leave the name known for it in
        the scope (the server is stateless: ``_clients``, contract 13.4)."""
        user = scope.get("user")
        credential = user.access_token.client_id if isinstance(user, AuthenticatedUser) else ""
        caller = (credential, Headers(scope=scope).get("user-agent", "")[:256])
        name = initialize_name(message)
        if name is not None:
            self.clients.learn(caller, name)
        known = self.clients.name_of(caller)
        if known is not None:
            scope[CLIENT_SCOPE_KEY] = known

    @staticmethod
    def _needed(user: object, params: object) -> str | None:
        """The scope an OAuth token lacks for this ``tools/call``, or ``None``.

        Only for tokens of the issuer (their ``resource`` is set): its client can come back
        with a wider grant (step-up). A token file's token is judged by the gate, which
        answers ``forbidden`` in the call's result, as before.
        """
        if not isinstance(user, AuthenticatedUser) or user.access_token.resource is None:
            return None
        name = params.get("name") if isinstance(params, dict) else None
        needed = TOOL_SCOPES.get(name) if isinstance(name, str) else None
        if needed is None or needed in user.scopes:
            return None
        return needed


_GONE: Final = b"\x00gone"
"""What ``_read_body`` returns when the connection ended before the body did."""


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body, or ``None`` once it passes ``MAXIMUM_BODY_BYTES`` (read no further),
    or ``_GONE`` when the connection ended first (a part of a body is never served)."""
    chunks = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return _GONE
        chunks += message.get("body", b"")
        if len(chunks) > MAXIMUM_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            return bytes(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body once, then the connection's own messages
    (so a client that disconnects is still seen: that cancels its call)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


@final
class _FileVerifier:
    """The SDK's ``TokenVerifier`` over our ``TokenStore``; the token is never kept."""

    def __init__(self, store: TokenStore) -> None:
        self._store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self._store.verify(token)
        if principal is None:
            return None
        return AccessToken(token="", client_id=principal.name, scopes=list(principal.scopes))


@final
class _KeysGone(AuthenticationError):
    """The issuer's keys expired from the cache and cannot be fetched, or its introspection
    is busy: answered 503 with ``Retry-After: retry``."""

    def __init__(self, message: str, retry: bytes = b"60") -> None:
        super().__init__(message)
        self.retry = retry


@final
class _Bearer(AuthenticationBackend):
    """A bearer token: the token file's first (when there is one), then the issuer's JWTs."""

    def __init__(self, store: TokenStore | None, oauth: JwtVerifier | None) -> None:
        self._file = None if store is None else BearerAuthBackend(_FileVerifier(store))
        self._oauth = oauth

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        found: tuple[AuthCredentials, BaseUser] | None = None
        if self._file is not None:
            found = await self._file.authenticate(conn)
        if found is None and self._oauth is not None:
            peer = conn.client.host if conn.client else "-"
            try:
                found = await BearerAuthBackend(self._oauth.for_peer(peer)).authenticate(conn)
            except IntrospectionBusy as error:
                raise _KeysGone(str(error), retry=b"1") from None
            except KeysUnavailable as error:
                raise _KeysGone(str(error)) from None
        return found


def _keys_gone(_: HTTPConnection, error: AuthenticationError) -> Response:
    """503 with the reason when the issuer's keys are gone; any other error is a 401."""
    status = 503 if isinstance(error, _KeysGone) else 401
    message = str(error) if isinstance(error, _KeysGone) else "invalid token"
    headers = (
        {"retry-after": error.retry.decode()}
        if isinstance(error, _KeysGone)
        else {"www-authenticate": "Bearer"}
    )
    return Response(
        _error_body(_JSON_RPC_SERVER_ERROR, message),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


@final
class _Anonymous(AuthenticationBackend):
    """``--insecure-no-auth``: every request is the anonymous principal with every scope."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        token = AccessToken(token="", client_id=ANONYMOUS, scopes=list(SCOPES))
        return AuthCredentials(list(SCOPES)), AuthenticatedUser(token)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_sets(settings: HttpSettings, port: int) -> tuple[frozenset[str], frozenset[str]]:
    """The ``Host`` values and ``Origin`` values accepted, lower-cased.

    Hosts: the bound address and, always, the loopback names, each at the bound port (and
    bare, for port 80); the ``--public-url``'s host. Origins: ``http://`` of each loopback
    host at the port when bound to loopback; the ``--public-url``'s origin; each
    ``--allowed-origin``.
    """
    names = {settings.host, "127.0.0.1", "localhost", "::1"}
    hosts = {_authority(name, port) for name in names}
    if port == 80:
        hosts |= {f"[{n}]" if ":" in n else n for n in names}
    origins: set[str] = set()
    if is_loopback(settings.host):
        origins |= {f"http://{_authority(n, port)}" for n in ("127.0.0.1", "localhost", "::1")}
    if settings.public_url is not None:
        public = urlsplit(settings.public_url)
        hosts.add(public.netloc.lower())
        origins.add(f"{public.scheme}://{public.netloc}".lower())
    origins |= {origin.lower() for origin in settings.allowed_origins}
    return frozenset(h.lower() for h in hosts), frozenset(origins)


LISTEN_REASONS: Final = {
    errno.EADDRINUSE: "the port is in use (another server, or this one already running?)",
    errno.EACCES: "this user may not listen there (a port below 1024 needs privileges)",
    errno.EPERM: "this user may not listen there (a port below 1024 needs privileges)",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's",
}
"""Why a port could not be listened on, by ``errno`` (fixed words; the OS text is not shown)."""


def listen_problem(host: str, port: int, number: int | None) -> str:
    """The refusal of a ``bind`` that failed with ``number``: the address and port, why,
    and what to do (``--port 0`` lets the system pick, and the server prints it)."""
    reason = LISTEN_REASONS.get(number or 0, "the system refused it")
    return (
        f"cannot listen on {host} port {port}: {reason}; choose another --port, or give "
        "--port 0 to let the system pick a free one (the 'listening on' line names it)"
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``OSError`` when it cannot be bound).

    Made with ``IPPROTO_TCP`` named and ``TCP_NODELAY`` set: asyncio turns Nagle off only
    on sockets whose ``proto`` says TCP, and ``socket.create_server`` leaves it 0, so every
    answer after the first on a kept-alive connection waited ~40 ms for a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(MAXIMUM_CONNECTIONS)
    except BaseException:
        sock.close()
        raise
    return sock


def url_of(settings: HttpSettings, sock: socket.socket) -> str:
    """``http://HOST:PORT/PATH`` of a bound socket."""
    return f"http://{_authority(settings.host, sock.getsockname()[1])}{settings.path}"


@final
@dataclass(frozen=True, slots=True)
class Served:
    """What ``serve_http`` serves with, beside the dispatcher: decided by the CLI."""

    settings: HttpSettings
    store: TokenStore | None
    audit: AuditLog
    shell_served: bool
    oauth: JwtVerifier | None = None
    """``--oauth-issuer``: the issuer's JWTs are accepted too (``_oauth.discover``)."""


def resource_of(settings: HttpSettings, port: int, audience: str | None = None) -> str:
    """This server's resource identifier (RFC 8707): ``--oauth-audience``, else the
    ``--public-url``, else ``http://HOST:PORT/PATH``."""
    if audience is not None:
        return audience
    if settings.public_url is not None:
        return settings.public_url
    return f"http://{_authority(settings.host, port)}{settings.path}"


def build_app(
    dispatcher: Dispatcher, served: Served, config: Config | None, port: int
) -> tuple[Starlette, _State, HttpGate, Callable[[float | None], Any]]:
    """The ASGI application, its draining state, its gate, and its calls' ``settle``."""
    settings = served.settings
    known = frozenset(d.name for d in dispatcher.definitions)
    offered = frozenset(TOOL_SCOPES) - (frozenset() if served.shell_served else {"shell"})
    gate = HttpGate(offered & known, known, served.audit, settings.max_concurrent_calls)
    server, calls = serving(dispatcher, config=config, gate=gate)
    hosts, origins = allowed_sets(settings, port)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(hosts),
        allowed_origins=sorted(origins),
    )
    manager = StreamableHTTPSessionManager(
        server,
        json_response=False,
        stateless=True,
        security_settings=security,
        max_request_body_size=MAXIMUM_BODY_BYTES,
    )
    oauth = served.oauth
    metadata: tuple[frozenset[str], bytes] | None = None
    challenge: bytes | None = None
    where: str | None = None
    if oauth is not None:
        base = settings.public_url or f"http://{_authority(settings.host, port)}{settings.path}"
        where = metadata_url(base)
        paths = frozenset({"/.well-known/oauth-protected-resource", urlsplit(where).path})
        resource = published_resource(oauth.audience, base)
        metadata = (paths, orjson.dumps(metadata_document(resource, oauth.issuer)))
        challenge = f'resource_metadata="{where}"'.encode()
    endpoint = RequireToken(
        _Body(
            AuthContextMiddleware(StreamableHTTPASGIApp(manager)),
            _Rates(settings.rate),
            challenge,
        ),
        [],
        None if where is None else AnyHttpUrl(where),
    )
    backend: AuthenticationBackend = (
        _Anonymous() if served.store is None and oauth is None else _Bearer(served.store, oauth)
    )
    state = _State()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(
        routes=[Route(settings.path, endpoint=endpoint)],
        middleware=[
            Middleware(_Front, settings.path, hosts, origins, state, metadata),
            Middleware(AuthenticationMiddleware, backend=backend, on_error=_keys_gone),
        ],
        lifespan=lifespan,
    )
    return app, state, gate, calls.settle


@final
class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handlers (the CLI owns them), announcing its start."""

    def __init__(self, config: uvicorn.Config, started: Callable[[], None]) -> None:
        super().__init__(config)
        self._started = started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._started()


@final
class _NoTracebacks(logging.Filter):
    """Drops the traceback of a record (uvicorn and the SDK log request errors with one,
    and a traceback may quote what a client sent)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


def _quiet_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.addFilter(_NoTracebacks())


async def serve_http(
    dispatcher: Dispatcher,
    served: Served,
    sock: socket.socket,
    stop: asyncio.Event,
    announce: Callable[[str], None],
    *,
    config: Config | None = None,
) -> None:
    """Serve the dispatcher's tools over streamable HTTP on ``sock`` until ``stop`` is set.

    ``announce`` gets the ``listening on URL`` line once the application has started.
    On ``stop``: new requests are refused (503) and the listener closes; requests in
    flight get ``--shutdown-grace`` seconds; then each call still running is cancelled (its
    processes ended) and its client answered with an error saying the server stopped
    (``HttpGate.stop``); uvicorn cancels what is left ``STOP_ANSWER_SECONDS`` later;
    returns once every call has ended.
    """
    settings = served.settings
    _quiet_logs()
    app, state, gate, settle = build_app(dispatcher, served, config, sock.getsockname()[1])
    uv_config = uvicorn.Config(
        app,
        lifespan="on",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        log_config=None,
        http=guarded_h11(Peers(), settings.request_seconds),
        ws="none",
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace) + STOP_ANSWER_SECONDS,
        limit_concurrency=MAXIMUM_CONNECTIONS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    url = url_of(settings, sock)
    server = _Uvicorn(uv_config, lambda: announce(LISTENING.format(url=url)))
    running = asyncio.ensure_future(server.serve(sockets=[sock]))
    stopping = asyncio.ensure_future(stop.wait())
    ending: asyncio.TimerHandle | None = None
    try:
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        state.draining = True
        server.should_exit = True
        ending = asyncio.get_running_loop().call_later(settings.shutdown_grace, gate.stop)
        await running
    finally:
        stopping.cancel()
        if ending is not None:
            ending.cancel()
        if not running.done():
            server.should_exit = server.force_exit = True
            running.cancel()
        await asyncio.wait({running, stopping})
        await settle(None)
        served.audit.close()
