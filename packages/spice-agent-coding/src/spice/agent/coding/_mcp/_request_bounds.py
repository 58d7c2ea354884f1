"""Slow clients cannot lock others out: a deadline per request and a bound per peer.

uvicorn (h11) closes a connection that stays idle *after* a response (its keep-alive
timeout), but nothing bounds how long a request's head may take to arrive, so a few
hundred connections that each send one byte hold every connection slot for as long as
they like (round 5's R5-6). ``guarded_h11`` makes uvicorn's own h11 protocol class with
two more rules, at the socket level (before any ASGI code runs):

- A request's head and body must arrive within ``request_seconds`` (``REQUEST_SECONDS``)
  of its first byte (or of the connection, for its first request); past it the
  connection is closed. The wait for the *next* request stays uvicorn's keep-alive
  timeout, and a response being sent has no deadline (a long call streams).
- At most ``MAXIMUM_CONNECTIONS_PER_PEER`` connections from one address at once; one
  more is closed as it is accepted, so one address cannot take every slot
  (``_http.MAXIMUM_CONNECTIONS``) of the server.
"""

from __future__ import annotations

import asyncio
from typing import Final, final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_SECONDS: Final = 10.0
"""A request's head and body must arrive within this many seconds of its first byte."""
MAXIMUM_CONNECTIONS_PER_PEER: Final = 64
"""Connections one address may hold at once (behind a proxy: the proxy's connections)."""

_RECEIVING: Final = (h11.IDLE, h11.SEND_BODY)
"""The client's h11 states in which its request is still arriving."""


@final
class Peers:
    """How many connections each address holds (an entry only while it holds one)."""

    __slots__ = ("_counts", "_limit")

    def __init__(self, limit: int = MAXIMUM_CONNECTIONS_PER_PEER) -> None:
        self._limit = limit
        self._counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def held(self, peer: str) -> int:
        """The connections ``peer`` holds now."""
        return self._counts.get(peer, 0)

    def admit(self, peer: str) -> bool:
        """Count one more connection of ``peer``, unless it holds the bound already."""
        held = self._counts.get(peer, 0)
        if held >= self._limit:
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


def guarded_h11(peers: Peers, request_seconds: float = REQUEST_SECONDS) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the request deadline and the per-peer bound."""

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

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(request_seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
                self.transport.close()

    return Guarded
