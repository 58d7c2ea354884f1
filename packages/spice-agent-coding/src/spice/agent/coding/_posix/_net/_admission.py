"""What a call's proxy admits: a request's host and addresses, a tunnel's first record.

The checks of ``_posix._net._proxy`` that need no socket of the proxy's own: ``admit`` (the
policy, then the addresses a name resolves to), ``opening`` (a tunnel's first record must
be a TLS ClientHello for an allowed name, unless a ``HOST:PORT/tcp`` pattern allows raw
bytes), and ``record`` (a refusal kept for the call's answer, bounded).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Final

from spice.agent.process import MAXIMUM_REFUSED_HOSTS

from ..._netpolicy._domains import DomainPolicy, address_of
from ..._netpolicy._head import Request
from ..._netpolicy._tlshello import MAXIMUM_HELLO_BYTES, NEED_MORE, NOT_TLS, Hello, read_hello

__all__ = [
    "MAXIMUM_ADDRESSES",
    "MAXIMUM_REFUSED_REPORTED",
    "Refusals",
    "Refused",
    "Resolved",
    "Resolver",
    "admit",
    "opening",
    "record",
]

MAXIMUM_REFUSED_REPORTED: Final = MAXIMUM_REFUSED_HOSTS
"""Distinct refused ``host:port`` kept per call for the answer (the count goes on)."""

MAXIMUM_ADDRESSES: Final = 16
"""At most this many addresses of one name are checked and tried."""

_log = logging.getLogger("spice.agent.coding.proxy")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolved = list[tuple[int, tuple[object, ...]]]
Resolver = Callable[[str, int], Awaitable[Resolved]]
"""``(host, port)`` to ``[(family, sockaddr)]``; the seam for a resolver that fails."""


class Refused(Exception):
    """The policy refuses this request: answered 403, recorded, logged."""

    def __init__(
        self,
        reason: str,
        *,
        private: bool = False,
        authority: str | None = None,
        raw: bool = False,
    ) -> None:
        super().__init__(reason)
        self.private = private
        self.raw = raw
        """Refused for carrying no TLS where no ``/tcp`` pattern allows raw bytes."""
        self.authority = authority
        """What is reported as refused, when not the request's own ``host:port``."""


class Refusals:
    """A call's refusals for its answer: the first ``MAXIMUM_REFUSED_REPORTED`` distinct
    ``host:port`` (``refused``), their count, and which were for a private address or
    for a tunnel that carried no TLS."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        self.refused_count = 0
        self.private: set[str] = set()
        """Those of ``refused`` refused for a private address (not for their name)."""
        self.raw: set[str] = set()
        """Those of ``refused`` refused for a tunnel that carried no TLS (the hint names
        ``host:port/tcp``)."""


def record(call: Refusals, authority: str, refused: Refused) -> None:
    """Count a refusal of ``call``; keep and log its first ``MAXIMUM_REFUSED_REPORTED``."""
    call.refused_count += 1
    if authority in call.refused or len(call.refused) >= MAXIMUM_REFUSED_REPORTED:
        return
    call.refused.append(authority)
    if refused.private:
        call.private.add(authority)
    if refused.raw:
        call.raw.add(authority)
    _log.warning("proxy refused %s: %s", authority, refused)


async def admit(
    policy: DomainPolicy,
    resolver: Resolver,
    request: Request,
    *,
    resolve: bool = True,
    bound: float = 5.0,
) -> Resolved:
    """The checked addresses to connect to (none unless ``resolve``: the upstream's, which
    resolves), each name resolved within ``bound``; ``Refused`` by the policy."""
    if not policy.permits(request.host, request.port):
        raise Refused("not an allowed host and port")
    if not resolve:
        return []
    literal = address_of(request.host)
    if literal is not None:
        family = int(socket.AF_INET6 if literal.version == 6 else socket.AF_INET)
        found: Resolved = [(family, (literal.compressed, request.port))]
    else:
        async with asyncio.timeout(bound):
            found = await resolver(request.host, request.port)
    chosen: Resolved = []
    seen: list[Address] = []
    for family, sockaddr in found[:MAXIMUM_ADDRESSES]:
        if family not in {socket.AF_INET, socket.AF_INET6}:
            continue
        address = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
        seen.append(address)
        chosen.append((family, sockaddr))
    if not seen:
        raise OSError("no address")
    if not policy.reachable(seen, request.host, request.port):
        raise Refused("it resolves to a loopback, private or link-local address", private=True)
    return chosen


async def opening(
    policy: DomainPolicy, request: Request, connection: socket.socket, rest: bytes, bound: float
) -> bytes | Refused | None:
    """A tunnel's first bytes from its client, checked: what to send on, ``Refused``
    (the tunnel is closed before a byte reaches the upstream, the refusal recorded),
    or ``None`` (closed: the client said nothing in time, or ended inside its hello).

    Where a ``HOST:PORT/tcp`` pattern allows raw bytes, nothing is read. Elsewhere the
    tunnel's first record must be a TLS ClientHello (nothing before it: an alert, a
    change cipher spec or another record would let the upstream read a hello the
    proxy did not check), and it must ask for the CONNECT host or for another host
    the policy allows on that port (a client may not reach another site behind an
    allowed name's address, a CDN's, by naming it in TLS: refused as that name, so
    the hint names the flag that would allow it); a hello without a name only in a
    tunnel to an address (TLS names no address). Bytes that are not TLS at all are
    refused as raw (the hint names ``host:port/tcp``, which would carry them). The
    upstream's bytes wait until the hello is checked (TLS is the client's to begin). What TLS
    carries inside (an HTTP ``Host``) is not seen: the proxy does not intercept TLS.
    """
    if policy.raw(request.host, request.port):
        return rest
    loop = asyncio.get_running_loop()
    data = rest
    try:
        async with asyncio.timeout(bound):
            while (hello := read_hello(data)) == NEED_MORE:
                chunk = await loop.sock_recv(connection, MAXIMUM_HELLO_BYTES - len(data) + 1)
                if not chunk:
                    return None  # the client ended inside its ClientHello
                data += chunk
    except TimeoutError:
        return None
    if hello == NOT_TLS:
        return Refused("a tunnel's first bytes are not TLS", raw=True)
    if isinstance(hello, Hello):
        name = hello.server_name
        if name is None:
            if address_of(request.host) is not None:
                return data
            return Refused("a tunnel's TLS ClientHello names no server")
        if name == request.host or policy.permits(name, request.port):
            return data
        authority = Request(name, request.port, tunnel=True).authority
        return Refused("a tunnel's TLS server name is not allowed", authority=authority)
    return Refused("its first record is not a well-formed TLS ClientHello")
