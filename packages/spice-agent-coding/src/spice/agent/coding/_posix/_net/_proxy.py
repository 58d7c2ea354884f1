"""The server's HTTP proxy: the one way out of a contained call's network (contract 11.1).

With namespaces and without ``--allow-network`` a contained command has only its own
loopback. Each call gets a ``CallProxy``: a UNIX socket (mode 0600, in a directory of
its own, mode 0700) that ``bwrap`` binds into the call's namespace, where the supervisor
bridges ``127.0.0.1:3128`` to it (``_bridge``); no host port is ever opened. The
command gets ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY``.

One connection is one request (``_netpolicy._head``): ``CONNECT host:port`` opens a tunnel
(TLS goes through it untouched), an absolute ``http://`` request is sent on in origin
form with ``Connection: close``, its body framed by the proxy (what the client sends
after it, a pipelined request, never reaches the upstream). For each, in order:

1. the name (or address) and port must match a pattern of the ``DomainPolicy``
   (ports 80 and 443 unless a pattern names one; an IP literal only when a pattern
   names that address);
2. the proxy resolves the name itself (bounded), and every address it gets must be
   global unless ``--allow-private-address`` (no way to the host's own services, the
   local network or the cloud metadata address);
3. it connects to those very addresses (never resolving again: what was checked is
   what is reached) and then only moves bytes (``_relay``: a thread per direction,
   blocking ``splice`` through a pipe of its own; a side that does not read holds the
   other back, nothing is held whole);
4. in a tunnel, before that: the client's first record must be a TLS ClientHello
   that asks for the CONNECT host or another host allowed on that port (no name only
   in a tunnel to an address; ``_netpolicy._tlshello``), else the tunnel is closed before a byte
   reaches the upstream and the refusal recorded (TLS is never intercepted); only
   where a ``HOST:PORT/tcp`` pattern allows raw TCP are the bytes not read.

Connections are plain sockets: the event loop accepts them (a reader callback), reads
their heads and answers (``sock_recv``, ``sock_sendall``), and hands an admitted one to
the relay's two threads (so at most ``2 * MAXIMUM_SERVER_CONNECTIONS`` relay threads).

A refusal answers 403 and is recorded for the call (``refused``: the first
``MAXIMUM_REFUSED_REPORTED`` distinct ``host:port``, and ``refused_count``) and logged
(host and port only). At most ``MAXIMUM_CALL_CONNECTIONS`` connections of one call and
``MAXIMUM_SERVER_CONNECTIONS`` of all calls at once; past that 503, with one exception
that keeps the share fair (contract 12.1): when the server is full, a call holding fewer
than its fair share (``fair_share``: the server's bound over the calls open now) takes a
connection from the call that holds the most above its own share (the oldest of that
call's connections still waiting for a head or a hello, else its newest tunnel: it is
closed). So however calls hold their connections (half-open heads included), every
call can hold ``fair_share`` of them. When the call ends,
``CallProxy.close`` stops its listener and cancels and closes every connection of it
(bounded; nothing of it is left).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import stat
from collections.abc import Sequence
from typing import Final, final

from spice.agent.process import LaunchError

from ..._netpolicy import _upstream
from ..._netpolicy._domains import DomainPolicy
from ..._netpolicy._head import (
    MAXIMUM_HEAD_BYTES,
    BadRequest,
    Body,
    HeadReader,
    Request,
    origin_head,
    parse_head,
)
from ..._netpolicy._upstream import (
    Upstream,
    UpstreamProxies,
    absolute_head,
    connect_head,
    upstream_of,
)
from .._supervisor import _bridge as bridge
from ._admission import (
    MAXIMUM_ADDRESSES,
    MAXIMUM_REFUSED_REPORTED,
    Refusals,
    Refused,
    Resolved,
    Resolver,
    admit,
    opening,
    record,
)
from ._peer import from_tree
from ._relay import CHUNK_BYTES, relay
from ._stale import (
    _SOCKET_NAME,
    _release,
    _socket_directory,
    remove_stale,
)

__all__ = [
    "CLOSE_BOUND_SECONDS",
    "CONNECT_BOUND_SECONDS",
    "HEAD_BOUND_SECONDS",
    "HELLO_BOUND_SECONDS",
    "MAXIMUM_CALL_CONNECTIONS",
    "MAXIMUM_REFUSED_REPORTED",
    "MAXIMUM_SERVER_CONNECTIONS",
    "PROXY_URL",
    "RELAY_CHUNK_BYTES",
    "RESOLVE_BOUND_SECONDS",
    "CallProxy",
    "Proxy",
    "Resolved",
    "Resolver",
    "close_call",
    "fair_share",
    "open_for_call",
    "proxy_environment",
    "refused_of",
    "remove_stale",
]

MAXIMUM_CALL_CONNECTIONS: Final = 64
"""Connections of one call through the proxy at once (uv and npm open dozens)."""

MAXIMUM_SERVER_CONNECTIONS: Final = 256
"""Connections of all calls through the proxy at once."""


def fair_share(calls: int) -> int:
    """The connections each of ``calls`` open calls can always hold: the server's bound
    shared out (at least one), never above a call's own bound."""
    return min(MAXIMUM_CALL_CONNECTIONS, max(1, MAXIMUM_SERVER_CONNECTIONS // max(1, calls)))


HEAD_BOUND_SECONDS: Final = 10.0
"""Longest wait for a client's request head."""

HELLO_BOUND_SECONDS: Final = 10.0
"""Longest wait, once a tunnel is open, for the client's whole TLS ClientHello (a
``/tcp`` tunnel waits for nothing)."""

RESOLVE_BOUND_SECONDS: Final = 5.0
"""Longest wait for a name's addresses."""

CONNECT_BOUND_SECONDS: Final = 10.0
"""Longest wait for one upstream connection (each address in turn, within this in all)."""

CLOSE_BOUND_SECONDS: Final = 2.0
"""Longest wait, when a call ends, for its connections' tasks to end once cancelled."""

RELAY_CHUNK_BYTES: Final = CHUNK_BYTES
"""Bytes moved from one side per step (``_relay``)."""

ACCEPT_RETRY_SECONDS: Final = 0.05
"""Pause after a failed ``accept`` (out of descriptors) before the next try."""
ACCEPT_BATCH: Final = 64
"""Connections accepted per readiness event (the rest wait for the next one)."""

PROXY_URL: Final = f"http://{bridge.ADDRESS}:{bridge.PORT}"
NO_PROXY: Final = "localhost,127.0.0.1,::1"
"""The call's own loopback is reached directly (a test suite's local servers)."""

PROXY_VARIABLES: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")

_log = logging.getLogger("spice.agent.coding.proxy")


async def open_for_call(proxy: Proxy | None) -> CallProxy | None:
    """A new call's listener of ``proxy`` (``None`` without a proxy); ``LaunchError``
    (nothing started) when it cannot be opened."""
    if proxy is None:
        return None
    try:
        return await proxy.open_call()
    except OSError:
        raise LaunchError from None


async def close_call(call: CallProxy | None) -> None:
    """End a call's proxy, if it has one (``CallProxy.close``)."""
    if call is not None:
        await call.close()


def refused_of(call: CallProxy | None) -> tuple[tuple[str, ...], int]:
    """A call's refused ``host:port`` (at most ``MAXIMUM_REFUSED_REPORTED``) and their count."""
    return ((), 0) if call is None else (tuple(call.refused), call.refused_count)


def proxy_environment() -> list[str]:
    """The entries every proxied command gets, whatever the environment allow-list says."""
    entries: list[str] = []
    for name in PROXY_VARIABLES:
        entries += [f"{name}={PROXY_URL}", f"{name.lower()}={PROXY_URL}"]
    entries += [f"NO_PROXY={NO_PROXY}", f"no_proxy={NO_PROXY}"]
    return entries


async def _system_resolve(host: str, port: int) -> Resolved:
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(int(family), tuple(address)) for family, _, _, _, address in found]


def _answer(status: int, reason: str, text: str) -> bytes:
    body = f"spice-coding sandbox proxy: {text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}

_CONNECTED: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"
_BAD: Final = "the request is not one this proxy serves"


@final
class Proxy:
    """The server's proxy: its policy, its bounds, the calls' listeners.

    ``resolver`` is the tests' seam for a resolver that fails or stalls; by default the
    system's (``getaddrinfo`` in the loop's executor). ``upstream``: the host's corporate
    proxy (``_netpolicy._upstream``; by default what the server's environment names), through which
    allowed hosts are reached, their names resolved by it.
    """

    def __init__(
        self,
        policy: DomainPolicy,
        resolver: Resolver | None = None,
        upstream: UpstreamProxies | None = None,
        *,
        check_peers: bool = False,
    ) -> None:
        remove_stale()  # what killed servers left (each call removes its own)
        self.policy = policy
        self.check_peers = check_peers
        """Serve only the processes of each call's own tree (``_peer``; the launcher's
        proxy does; a test that connects from its own process does not)."""
        self.upstream = upstream_of(os.environ) if upstream is None else upstream
        self.resolver: Resolver = _system_resolve if resolver is None else resolver
        self.active = 0
        self.calls: set[CallProxy] = set()

    async def open_call(self) -> CallProxy:
        """A new call's listener, ready to accept (its socket file is ``path``)."""
        call = CallProxy(self)
        try:
            await call.open()
        except BaseException:
            await call.close()
            raise
        self.calls.add(call)
        return call

    def reclaim(self, share: int) -> bool:
        """Close one connection of the call that holds the most above ``share`` (the
        server is full and a call below its share asks); whether one was."""
        victim = max(self.calls, key=lambda call: call.active, default=None)
        if victim is None or victim.active <= share:
            return False
        # The victim's oldest connection still waiting (a head, a hello, an upstream),
        # else its newest tunnel: it stops counting at once; its task is cancelled (and
        # awaited by the victim's ``close``).
        tasks = victim._tasks
        waiting = [task for task, relaying in tasks.items() if not relaying]
        chosen = waiting[0] if waiting else next(reversed(tasks))
        del tasks[chosen]
        self.active -= 1
        victim.given_up += 1
        victim._busy.add(chosen)
        chosen.add_done_callback(victim._busy.discard)
        chosen.cancel()
        return True

    def foreign(self, call: CallProxy, connection: socket.socket) -> bool:
        """Whether ``connection`` to ``call`` must be refused: with ``check_peers``, made
        by no process of the call's tree (``_peer``; none before its leader is known)."""
        if not self.check_peers or (call.leader is not None and from_tree(connection, call.leader)):
            return False
        call.foreign += 1
        _log.warning("proxy: a connection from outside the call's processes was refused")
        return True


@final
class CallProxy(Refusals):
    """One call's listener and connections; ``close`` when the call ends."""

    def __init__(self, proxy: Proxy) -> None:
        super().__init__()
        self._proxy = proxy
        self._listener: socket.socket | None = None
        self._lock: int | None = None  # the directory's lock, held while the call runs
        self._retry: asyncio.TimerHandle | None = None
        self._tasks: dict[asyncio.Future[None], bool] = {}
        """Each connection's task (in the order they came) and whether it relays yet."""
        self._busy: set[asyncio.Future[None]] = set()
        """Tasks that answer 503, and those of connections given up (ending)."""
        self._closed = False
        self.directory: str | None = None
        self.connections = 0
        """Connections accepted over the call's life (for tests and the log)."""
        self.given_up = 0
        self.leader: int | None = None
        """The pid leading the call's tree (the launcher sets it once it started it); with
        ``Proxy.check_peers`` only that tree is served (nothing before it is set)."""
        self.foreign = 0
        """Connections refused because no process of the call's tree made them."""
        """Connections closed for other calls' fair share over the call's life."""

    @property
    def path(self) -> str:
        """The listener's socket file on the host (``bwrap`` binds it at ``_bridge.SOCKET``)."""
        if self.directory is None:
            raise RuntimeError("the call's proxy is not open")
        return os.path.join(self.directory, _SOCKET_NAME)

    @property
    def active(self) -> int:
        """Connections of this call being served now."""
        return len(self._tasks)

    async def open(self) -> None:
        """Listen, then put the socket in place: another server's ``remove_stale`` never
        finds it bound but not yet listening (refused: taken for a dead server's)."""
        self.directory, self._lock = _socket_directory()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path + ".new")
            os.chmod(self.path + ".new", 0o600)
            listener.listen(bridge.BACKLOG)
            listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
            os.rename(self.path + ".new", self.path)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        asyncio.get_running_loop().add_reader(listener.fileno(), self._accept, listener)

    async def close(self) -> None:
        """Stop listening, end every connection of the call, remove the socket (bounded).

        Idempotent. Runs to its end when cancelled (shielded, bounded), then re-raises.
        """
        if self._closed:
            return
        self._closed = True
        self._proxy.calls.discard(self)
        closing = asyncio.ensure_future(self._close())
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(CLOSE_BOUND_SECONDS):
                    await asyncio.shield(closing)
            raise

    async def _close(self) -> None:
        self._stop_accepting()
        tasks = [*self._tasks, *self._busy]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_BOUND_SECONDS)
        if self._listener is not None:
            self._listener.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        _release(self._lock)
        if self.refused_count > len(self.refused):
            _log.warning(
                "proxy: one call's connections were refused %d times in all", self.refused_count
            )

    # -- one connection ----------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        """The listener is readable: accept what waits (at most ``ACCEPT_BATCH``) and hand
        each connection to its task at once.

        A reader callback, not ``loop.sock_accept``: a future between the accept and its
        owner could be cancelled (the call ending) after the kernel gave the connection,
        which would then be left open. Here no connection exists outside a task that
        closes it. Out of descriptors (say), the listener is left alone for
        ``ACCEPT_RETRY_SECONDS`` (the connection waits in the backlog) rather than spin.
        """
        for _ in range(ACCEPT_BATCH):
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                loop = asyncio.get_running_loop()
                loop.remove_reader(listener.fileno())
                self._retry = loop.call_later(ACCEPT_RETRY_SECONDS, self._resume)
                return
            connection.setblocking(False)  # noqa: FBT003 - socket's positional flag
            self._accepted(connection)

    def _resume(self) -> None:
        self._retry = None
        listener = self._listener
        if not self._closed and listener is not None:
            asyncio.get_running_loop().add_reader(listener.fileno(), self._accept, listener)

    def _stop_accepting(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._listener is not None and self._listener.fileno() >= 0:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())

    def _accepted(self, connection: socket.socket) -> None:
        """A new connection: served by a task of the call's own (``close`` cancels it),
        when a process of the call's own tree made it (``Proxy.check_peers``)."""
        proxy = self._proxy
        if proxy.foreign(self, connection):
            connection.close()
            return
        share = fair_share(len(proxy.calls))
        if len(self._tasks) >= MAXIMUM_CALL_CONNECTIONS or (
            proxy.active >= MAXIMUM_SERVER_CONNECTIONS
            and not (len(self._tasks) < share and proxy.reclaim(share))
        ):
            busy = asyncio.ensure_future(_busy(connection))
            self._busy.add(busy)
            busy.add_done_callback(self._busy.discard)
            # Closed however the task ends: one cancelled before its first step never
            # runs its own ``finally``.
            busy.add_done_callback(lambda _: connection.close())
            return
        self.connections += 1
        proxy.active += 1
        task = asyncio.ensure_future(self._serve(connection))
        self._tasks[task] = False
        task.add_done_callback(self._served)
        task.add_done_callback(lambda _: connection.close())

    def _served(self, task: asyncio.Future[None]) -> None:
        if self._tasks.pop(task, None) is not None:
            self._proxy.active -= 1  # one given up was counted off already
        if not task.cancelled():
            task.exception()  # retrieved; _serve raises nothing but its cancellation

    def _relaying(self) -> None:
        """The current connection's task now only moves bytes (given up last)."""
        task = asyncio.current_task()
        if task in self._tasks:
            self._tasks[task] = True

    async def _serve(self, accepted: socket.socket) -> None:
        client = None
        try:
            async with asyncio.timeout(HEAD_BOUND_SECONDS):
                client, first = await _client_of(accepted)
            if client is not None:
                await self._request(client, first)
        except (OSError, EOFError, TimeoutError):
            pass  # a side went away, or said nothing in time: nothing to say to anyone
        finally:
            accepted.close()
            if client is not None:
                client.close()

    async def _request(self, connection: socket.socket, first: bytes) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(HEAD_BOUND_SECONDS):
                head, rest = await _read_head(connection, first)
            request = parse_head(head)
        except TimeoutError:
            return
        except BadRequest as bad:
            _log.warning("proxy: a malformed request was refused (%d)", bad.status)
            await _send_bounded(connection, _answer(bad.status, _REASONS[bad.status], _BAD))
            return
        via = self._proxy.upstream.for_request(request.host, request.port, request.tunnel)
        try:
            addresses = await admit(
                self._proxy.policy,
                self._proxy.resolver,
                request,
                resolve=via is None,
                bound=RESOLVE_BOUND_SECONDS,
            )
        except Refused as refused:
            record(self, request.authority, refused)
            text = (
                f"{request.authority} is not allowed ({refused}); the server's "
                "--allow-domain names the hosts a command may reach"
            )
            await _send_bounded(connection, _answer(403, _REASONS[403], text))
            return
        except TimeoutError:
            text = f"{request.authority} could not be resolved in time"
            await _send_bounded(connection, _answer(504, _REASONS[504], text))
            return
        except OSError:
            text = f"{request.authority} could not be resolved"
            await _send_bounded(connection, _answer(502, _REASONS[502], text))
            return
        upstream = await (
            _connect(addresses) if via is None else _through(self._proxy.resolver, via, request)
        )
        if upstream is None:
            text = f"{request.authority} could not be reached"
            await _send_bounded(connection, _answer(502, _REASONS[502], text))
            return
        try:
            body: Body | None = None
            if request.tunnel:
                await loop.sock_sendall(connection, _CONNECTED)
                opened = await opening(
                    self._proxy.policy, request, connection, rest, HELLO_BOUND_SECONDS
                )
                if isinstance(opened, Refused):
                    record(self, opened.authority or request.authority, opened)
                if not isinstance(opened, bytes):
                    return
                rest = opened
            else:
                body = Body(request.length)
                try:
                    rest = rest[: body.take(rest)]
                except BadRequest:
                    return  # a malformed chunked body: the upstream gets nothing
                head = origin_head(request) if via is None else absolute_head(request, via)
                rest = head + rest
            if rest:
                await loop.sock_sendall(upstream, rest)
            self._relaying()
            await relay(connection, upstream, request=body)
        finally:
            upstream.close()


async def _busy(accepted: socket.socket) -> None:
    """Past a connection bound: a 503 to the client (the one the bridge handed over, or
    the accepted one itself), bounded; a client that never says anything gets nothing."""
    with contextlib.suppress(OSError, EOFError, TimeoutError):
        async with asyncio.timeout(HEAD_BOUND_SECONDS):
            client, _ = await _client_of(accepted)
        if client is None:
            return
        try:
            await _reply(client, 503, "too many connections at once (a bound of the sandbox)")
        finally:
            if client is not accepted:
                client.close()


async def _readable(sock: socket.socket) -> None:
    """Until ``sock`` is readable (the caller bounds the wait)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def _client_of(accepted: socket.socket) -> tuple[socket.socket | None, bytes]:
    """The client to serve and the first bytes it sent.

    The bridge sends ``bridge.HANDOFF`` with the command's own connection (one
    descriptor): that socket is served, and the accepted one is done with. Any other
    first message is the start of a request on ``accepted`` itself; descriptors sent with
    it are closed, and more than one sent ends the connection (at most one is ever taken
    in: the kernel closes the rest and says so, ``MSG_CTRUNC``). A handed
    descriptor that is not a connected stream socket ends the connection (``None``).
    """
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(accepted, MAXIMUM_HEAD_BYTES, 1)
        except (BlockingIOError, InterruptedError):
            await _readable(accepted)
            continue
        break
    truncated = bool(flags & getattr(socket, "MSG_CTRUNC", 0))  # more than one was sent
    if data != bridge.HANDOFF or len(fds) != 1 or truncated:
        for fd in fds:
            os.close(fd)
        if data[:1] == bridge.HANDOFF or truncated or (fds and not data):
            return None, b""
        if not data:
            raise EOFError
        return accepted, data
    return _handed(fds[0]), b""


def _handed(fd: int) -> socket.socket | None:
    """The socket ``fd`` when it is a connected stream socket (else closed: ``None``)."""
    try:
        client = socket.socket(fileno=fd) if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
    except OSError:
        client = None
    if client is None:
        os.close(fd)
        return None
    try:
        listening = client.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        client.getpeername()
    except OSError:
        client.close()
        return None
    if client.type != socket.SOCK_STREAM or listening:
        client.close()
        return None
    client.setblocking(False)  # noqa: FBT003 - socket's positional flag
    return client


async def _through(resolver: Resolver, via: Upstream, request: Request) -> socket.socket | None:
    """A connection to ``request``'s host through the upstream proxy ``via`` (for a
    tunnel, once it answered 200 to ``CONNECT``), else ``None``."""
    try:
        async with asyncio.timeout(RESOLVE_BOUND_SECONDS):
            found = await resolver(via.host, via.port)
    except (OSError, TimeoutError):
        return None
    sock = await _connect(found[:MAXIMUM_ADDRESSES])
    if sock is None or not request.tunnel:
        return sock
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(CONNECT_BOUND_SECONDS):
            await loop.sock_sendall(sock, connect_head(request, via))
            head, rest = await _read_head(sock)
    except (OSError, EOFError, TimeoutError):
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    if _upstream.reply_status(head) != 200 or rest:
        sock.close()
        return None
    return sock


async def _read_head(connection: socket.socket, first: bytes = b"") -> tuple[bytes, bytes]:
    """The head (through its blank line) and what came after it; at most the head bound."""
    loop = asyncio.get_running_loop()
    reader = HeadReader()
    if first:  # what came with the first message (at most the bound: the reader takes it)
        answered = reader.feed(first)
        if answered is not None:
            return answered
    while True:
        chunk = await loop.sock_recv(connection, reader.wanted)
        if not chunk:
            raise EOFError
        answered = reader.feed(chunk)
        if answered is not None:
            return answered  # over the bound: parse_head says 431


async def _send_bounded(connection: socket.socket, data: bytes) -> None:
    """Send an answer, waiting at most ``CLOSE_BOUND_SECONDS`` for the peer to take it."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(CLOSE_BOUND_SECONDS):
            await loop.sock_sendall(connection, data)


async def _reply(connection: socket.socket, status: int, text: str) -> None:
    """Answer ``status`` and close the connection (the busy path's whole service)."""
    try:
        await _send_bounded(connection, _answer(status, _REASONS[status], text))
    finally:
        connection.close()


async def _connect(addresses: Sequence[tuple[int, tuple[object, ...]]]) -> socket.socket | None:
    """A connection to the first of ``addresses`` that accepts (all within the bound)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(CONNECT_BOUND_SECONDS):
            for family, sockaddr in addresses:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setblocking(False)  # noqa: FBT003 - socket's positional flag
                try:
                    await loop.sock_connect(sock, sockaddr)
                except OSError:
                    sock.close()
                    continue
                except BaseException:
                    sock.close()
                    raise
                return sock
    except TimeoutError:
        return None
    return None
