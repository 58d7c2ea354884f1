"""Inside the call's network namespace: ``127.0.0.1:PORT`` bridged to the proxy's socket.

Standard library only and free of package imports, like the supervisor that runs it
(``_posix._supervisor`` compiles it into its sealed code file, contract 10.1). With
namespaces and without ``--allow-network`` the command has a network namespace of its
own, where only its loopback exists. The server's proxy (``_posix._proxy``) listens on
a UNIX socket that ``bwrap`` binds into the namespace at ``SOCKET``; the supervisor,
the init of the call's PID namespace, binds ``ADDRESS:PORT`` there before it forks the
command (so the port is taken and ready when the command starts) and, after the fork,
relays each connection to that socket in one thread (``start``). No host port is
opened: the listener lives in the call's namespace and dies with it; the thread dies
with the supervisor, and every relayed connection with it.

The relay is a byte pump and judges nothing (the proxy does): at most
``MAXIMUM_CONNECTIONS`` at once (more are closed at once), at most ``CHUNK_BYTES``
pending per direction (a slow side stops the other one's reads).
"""

from __future__ import annotations

import _thread
import selectors
import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

ADDRESS: Final = "127.0.0.1"
PORT: Final = 3128
"""The proxy's port on the call's own loopback (``HTTP_PROXY=http://127.0.0.1:3128``)."""

SOCKET: Final = "/run/spice-proxy/proxy.sock"
"""Where ``bwrap`` binds the proxy's UNIX socket inside the call's mount namespace."""

MAXIMUM_CONNECTIONS: Final = 80
"""Relayed connections at once (above the proxy's own per-call bound, which answers)."""

CHUNK_BYTES: Final = 256 * 1024
"""Bytes read per readiness event, and the most pending per direction."""

CONNECT_BOUND_SECONDS: Final = 2.0
"""Longest wait for the proxy's socket to accept one connection."""

BACKLOG: Final = 128

_GONE: Final = (OSError,)


def listen() -> socket.socket:
    """The listening socket on ``ADDRESS:PORT`` (before the command exists)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ADDRESS, PORT))
        listener.listen(BACKLOG)
        listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
    except BaseException:
        listener.close()
        raise
    return listener


class _Pair:
    """One relayed connection: ``ends[0]`` the command's, ``ends[1]`` the proxy's."""

    __slots__ = ("ends", "finished", "pending")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.ends = (client, upstream)
        self.pending = [b"", b""]  # bytes still to be written to ends[i]
        self.finished = [False, False]  # ends[i] said end of file

    def interest(self, index: int) -> int:
        events = 0
        if not self.finished[index] and not self.pending[1 - index]:
            events |= selectors.EVENT_READ
        if self.pending[index]:
            events |= selectors.EVENT_WRITE
        return events

    @property
    def done(self) -> bool:
        return all(self.finished) and not any(self.pending)


class _Relay:
    def __init__(self, listener: socket.socket, path: str) -> None:
        self.listener = listener
        self.path = path
        self.selector = selectors.DefaultSelector()
        self.pairs: dict[socket.socket, tuple[_Pair, int]] = {}
        self.masks: dict[socket.socket, int] = {}

    def run(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ)
        while True:
            for key, events in self.selector.select():
                sock = key.fileobj
                if sock is self.listener:
                    self.accept()
                    continue
                found = self.pairs.get(sock)  # type: ignore[call-overload]
                if found is not None:
                    self.pump(found[0], found[1], events)

    def accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except _GONE:
            return
        if len(self.pairs) // 2 >= MAXIMUM_CONNECTIONS:
            client.close()
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.settimeout(CONNECT_BOUND_SECONDS)
            upstream.connect(self.path)
        except _GONE:
            upstream.close()
            client.close()
            return
        pair = _Pair(client, upstream)
        for index, end in enumerate(pair.ends):
            end.setblocking(False)  # noqa: FBT003 - socket's positional flag
            self.pairs[end] = (pair, index)
            self.watch(end, pair.interest(index))

    def pump(self, pair: _Pair, index: int, events: int) -> None:
        if events & selectors.EVENT_WRITE:
            self.flush(pair, index)
        if events & selectors.EVENT_READ:
            self.read(pair, index)
        if pair.done:
            self.close(pair)
            return
        for side, end in enumerate(pair.ends):
            self.watch(end, pair.interest(side))

    def watch(self, end: socket.socket, events: int) -> None:
        """Watch ``end`` for ``events`` (none: not at all), with as few changes as may be."""
        before = self.masks.get(end, 0)
        if events == before:
            return
        if not events:
            self.selector.unregister(end)
            del self.masks[end]
        elif before:
            self.selector.modify(end, events)
            self.masks[end] = events
        else:
            self.selector.register(end, events)
            self.masks[end] = events

    def read(self, pair: _Pair, index: int) -> None:
        other = 1 - index
        try:
            data = pair.ends[index].recv(CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except _GONE:
            data = b""  # reset: the same as its end, for this direction
        if not data:
            pair.finished[index] = True
            if not pair.pending[other]:
                self.shut(pair.ends[other])
            return
        pair.pending[other] = data
        self.flush(pair, other)

    def flush(self, pair: _Pair, index: int) -> None:
        data = pair.pending[index]
        if not data:
            return
        try:
            sent = pair.ends[index].send(data)
        except (BlockingIOError, InterruptedError):
            return
        except _GONE:
            # This end takes nothing more: what was for it is dropped and its source is
            # read no more; the other direction goes on (a reply may still be on its way).
            pair.pending[index] = b""
            pair.finished[1 - index] = True
            return
        pair.pending[index] = data[sent:]
        if not pair.pending[index] and pair.finished[1 - index]:
            self.shut(pair.ends[index])

    @staticmethod
    def shut(end: socket.socket) -> None:
        try:  # noqa: SIM105 - no contextlib import in the supervisor's start
            end.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already gone: nothing more to say to it

    def close(self, pair: _Pair) -> None:
        for end in pair.ends:
            self.pairs.pop(end, None)
            if self.masks.pop(end, 0):
                self.selector.unregister(end)
            end.close()


def start(listener: socket.socket, path: str = SOCKET) -> None:
    """Relay every connection to ``listener`` to the UNIX socket ``path``, in a new thread.

    The thread lives as long as the process (the supervisor's exit ends it); it is
    started after the fork of the command, so the command's fork copied one thread.
    """
    _thread.start_new_thread(_Relay(listener, path).run, ())
