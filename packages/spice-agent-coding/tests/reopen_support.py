"""Slow clients that reconnect (round 5's R6-B1): one-byte connections, reopened when closed.

Each runs on its own thread with blocking sockets (the server's event loop is the test's,
so the attackers must not share it): it connects from its source address, sends one byte,
waits for the server to close, and connects again, until ``stop``. ``ready`` is set once
every one of them has connected at least once.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

POLL_SECONDS: Final = 0.2
"""How often a held connection looks at ``stop`` (a bound for the end of the test only)."""


@dataclass
class Reopening:
    """The attackers' shared state: how often they connected, and the stop signal."""

    count: int
    stop: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    connects: int = 0
    _first: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def connected(self, index: int) -> None:
        with self._lock:
            self.connects += 1
            self._first.add(index)
            if len(self._first) >= self.count:
                self.ready.set()


def _hold(port: int, source: str, index: int, state: Reopening) -> None:
    while not state.stop.is_set():
        try:
            with socket.create_connection(
                ("127.0.0.1", port), timeout=5, source_address=(source, 0)
            ) as sock:
                sock.sendall(b"P")
                state.connected(index)
                sock.settimeout(POLL_SECONDS)
                while not state.stop.is_set():
                    try:
                        if not sock.recv(100):
                            break
                    except TimeoutError:
                        continue
        except OSError:
            state.stop.wait(0.05)


@contextmanager
def reopening(port: int, sources: Sequence[str]) -> Iterator[Reopening]:
    """One reconnecting one-byte connection per entry of ``sources``, until the block ends."""
    state = Reopening(len(sources))
    threads = [
        threading.Thread(target=_hold, args=(port, source, n, state), daemon=True)
        for n, source in enumerate(sources)
    ]
    for thread in threads:
        thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        for thread in threads:
            thread.join(timeout=10)
