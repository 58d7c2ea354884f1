"""Slow clients cannot lock others out: a deadline per request, room kept for whole requests.

uvicorn (h11) closes a connection that stays idle *after* a response (its keep-alive
timeout), but nothing bounds how long a request's head may take to arrive, so a few
hundred connections that each send one byte hold every connection slot for as long as
they like (round 5's R5-6), and once closed they come back (R6-B1). ``guarded_h11`` makes
uvicorn's own h11 protocol class with these rules, at the socket level (before any ASGI
code runs):

- A request's head and body must arrive within ``request_seconds`` (``REQUEST_SECONDS``)
  of its first byte (or of the connection, for its first request); past it the
  connection is closed. The wait for the *next* request stays uvicorn's keep-alive
  timeout, and a response being sent has no deadline (a long call streams).
- A connection whose request is still arriving is *waiting*. At most
  ``MAXIMUM_WAITING_PER_PEER`` wait from one address and ``MAXIMUM_WAITING`` in all; a
  new one past either bound closes the *oldest* waiting one (of that address, or of all)
  instead of being refused. A client that sends its whole request at once stops waiting
  at once, so connections that send one byte and reconnect when closed only ever evict
  each other: they cannot keep a whole request out, whether they come from the client's
  own address (a loopback bind: every local client is 127.0.0.1) or from many.
- At most ``MAXIMUM_CONNECTIONS_PER_PEER`` connections from one address at once; one more
  closes that address's oldest waiting connection, or is closed itself when none waits,
  so one address cannot take every slot (``_http.MAXIMUM_CONNECTIONS``) of the server.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol, final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_SECONDS: Final = 10.0
"""A request's head and body must arrive within this many seconds of its first byte."""
MAXIMUM_CONNECTIONS_PER_PEER: Final = 128
"""Connections one address may hold at once (behind a proxy: the proxy's connections)."""
MAXIMUM_WAITING_PER_PEER: Final = 64
"""Connections of one address whose request is still arriving; one more closes the oldest."""
MAXIMUM_WAITING: Final = 256
"""Connections whose request is still arriving, in all; one more closes the oldest. Below
``_http.MAXIMUM_CONNECTIONS``, so waiting connections alone never reach uvicorn's 503."""

_RECEIVING: Final = (h11.IDLE, h11.SEND_BODY)
"""The client's h11 states in which its request is still arriving."""

__all__ = [
    "MAXIMUM_CONNECTIONS_PER_PEER",
    "MAXIMUM_WAITING",
    "MAXIMUM_WAITING_PER_PEER",
    "REQUEST_SECONDS",
    "Peers",
    "Waiting",
    "guarded_h11",
]


class Waiting(Protocol):
    """A connection whose request is still arriving: it can be closed to make room."""

    def evict(self) -> None:
        """Close the connection (its ``connection_lost`` follows)."""


@final
class Peers:
    """How many connections each address holds, and which wait, oldest first (an entry
    only while there is one)."""

    __slots__ = ("_counts", "_limit", "_waiting", "_waiting_limit", "_waiting_of", "_waiting_peer")

    def __init__(
        self,
        limit: int = MAXIMUM_CONNECTIONS_PER_PEER,
        waiting_per_peer: int = MAXIMUM_WAITING_PER_PEER,
        waiting: int = MAXIMUM_WAITING,
    ) -> None:
        self._limit, self._waiting_peer, self._waiting_limit = limit, waiting_per_peer, waiting
        self._counts: dict[str, int] = {}
        self._waiting: dict[Waiting, str] = {}
        """Every waiting connection and its address, oldest first."""
        self._waiting_of: dict[str, dict[Waiting, None]] = {}
        """Each address's waiting connections, oldest first."""

    def __len__(self) -> int:
        return len(self._counts)

    def held(self, peer: str) -> int:
        """The connections ``peer`` holds now."""
        return self._counts.get(peer, 0)

    def waiting(self, peer: str | None = None) -> int:
        """The connections waiting now (of ``peer``, or in all)."""
        if peer is None:
            return len(self._waiting)
        return len(self._waiting_of.get(peer, ()))

    def admit(self, peer: str) -> bool:
        """Count one more connection of ``peer``: at its bound, its oldest waiting one is
        closed to make room; ``False`` (not counted) when none waits."""
        held = self._counts.get(peer, 0)
        if held >= self._limit and not self._evict(peer):
            return False
        self._counts[peer] = held + 1
        return True

    def release(self, peer: str) -> None:
        """One connection of ``peer`` ended."""
        held = self._counts.get(peer, 0) - 1
        if held > 0:
            self._counts[peer] = held
        else:
            self._counts.pop(peer, None)

    def wait(self, peer: str, connection: Waiting) -> None:
        """``connection``'s request starts arriving: past a bound, the oldest waiting
        connection (of ``peer``, then of all) is closed first."""
        self.done(connection)
        if self.waiting(peer) >= self._waiting_peer:
            self._evict(peer)
        if len(self._waiting) >= self._waiting_limit:
            self._evict(None)
        self._waiting[connection] = peer
        self._waiting_of.setdefault(peer, {})[connection] = None

    def done(self, connection: Waiting) -> None:
        """``connection``'s request arrived (or it ended): it waits no more."""
        peer = self._waiting.pop(connection, None)
        if peer is None:
            return
        mine = self._waiting_of[peer]
        del mine[connection]
        if not mine:
            del self._waiting_of[peer]

    def _evict(self, peer: str | None) -> bool:
        """Close the oldest waiting connection (of ``peer``, or of all); ``False`` when none."""
        source = self._waiting if peer is None else self._waiting_of.get(peer, {})
        oldest = next(iter(source), None)
        if oldest is None:
            return False
        self.done(oldest)
        oldest.evict()
        return True


def guarded_h11(peers: Peers, request_seconds: float = REQUEST_SECONDS) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the request deadline and the bounds of ``peers``."""

    class Guarded(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _peer: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            peer = self.client[0] if self.client else "-"
            if not peers.admit(peer):
                transport.abort()
                return
            self._peer = peer
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._peer is not None:
                peers.release(self._peer)
                self._peer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self.conn.their_state in _RECEIVING:
                self._arm()
            super().data_received(data)
            if self.conn.their_state not in _RECEIVING:
                self._disarm()

        def evict(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self.transport.close()

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(request_seconds, self._expired)
            if self._peer is not None:
                peers.wait(self._peer, self)

        def _disarm(self) -> None:
            peers.done(self)
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            peers.done(self)
            if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
                self.transport.close()

    return Guarded
