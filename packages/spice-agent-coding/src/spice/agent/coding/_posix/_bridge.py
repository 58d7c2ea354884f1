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
``MAXIMUM_CONNECTIONS`` at once (more are closed at once). On Linux each direction
splices through a pipe of its own (the bytes never enter Python), elsewhere through
a buffer; at most ``CHUNK_BYTES`` (and a pipe's capacity) wait per direction, and a
side that waits stops the other one's reads.
"""

from __future__ import annotations

import _thread
import os

# ``socket`` and ``selectors`` cost every supervisor's start a few milliseconds: only a
# proxied call imports them (``listen``, ``_Relay``); the annotations are strings.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
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
_READ: Final = 1
"""``selectors.EVENT_READ``."""
_WRITE: Final = 2
"""``selectors.EVENT_WRITE``."""
_SHUT_WR: Final = 1
"""``socket.SHUT_WR`` (1 on every POSIX system Python runs on)."""

_SPLICE: Final = hasattr(os, "splice") and hasattr(os, "SPLICE_F_NONBLOCK")
_FLAGS: Final = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
PIPE_BYTES: Final = 256 * 1024
"""The capacity asked for each direction's pipe (the kernel may give less)."""


def _pipe() -> tuple[int, int]:
    """A non-blocking pipe for one direction (its capacity raised where the kernel lets)."""
    import fcntl  # noqa: PLC0415 - only in the bridge's thread, and only on Linux

    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:  # noqa: SIM105 - no contextlib import in the supervisor's start
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass  # the default capacity (64 KiB): slower, as bounded
    return read_end, write_end


def listen() -> socket.socket:
    """The listening socket on ``ADDRESS:PORT`` (before the command exists)."""
    import socket  # noqa: PLC0415 - see the imports

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
    """One relayed connection: ``ends[0]`` the command's, ``ends[1]`` the proxy's.

    What is on its way to ``ends[i]`` waits in ``pipes[i]`` (``held[i]`` bytes: the
    ``splice`` path) or in ``pending[i]`` (the copying path, without ``splice``).
    """

    __slots__ = ("ends", "finished", "held", "pending", "pipes")

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        pipes: list[tuple[int, int]] | None,
    ) -> None:
        self.ends = (client, upstream)
        self.pipes = pipes
        self.held = [0, 0]
        self.pending = [b"", b""]
        self.finished = [False, False]  # ends[i] said end of file

    def waiting(self, index: int) -> bool:
        """Whether bytes wait to be written to ``ends[index]``."""
        return self.held[index] > 0 or bool(self.pending[index])

    def interest(self, index: int) -> int:
        events = 0
        if not self.finished[index] and not self.waiting(1 - index):
            events |= _READ
        if self.waiting(index):
            events |= _WRITE
        return events

    @property
    def done(self) -> bool:
        return all(self.finished) and not self.waiting(0) and not self.waiting(1)


class _Relay:
    def __init__(self, listener: socket.socket, path: str) -> None:
        self.listener = listener
        self.path = path
        import selectors  # noqa: PLC0415 - see the imports

        self.selector = selectors.DefaultSelector()
        self.pairs: dict[socket.socket, tuple[_Pair, int]] = {}
        self.masks: dict[socket.socket, int] = {}
        self.stopped = False

    def run(self) -> None:
        """Relay until ``stopped`` (the supervisor never stops it: its exit ends the thread;
        a test stops it, then wakes it with a connection)."""
        self.selector.register(self.listener, _READ)
        while not self.stopped:
            for key, events in self.selector.select():
                sock = key.fileobj
                if sock is self.listener:
                    self.accept()
                    continue
                found = self.pairs.get(sock)  # type: ignore[call-overload]
                if found is not None:
                    self.pump(found[0], found[1], events)
        for pair, _ in list(self.pairs.values()):
            self.close(pair)
        self.selector.close()

    def accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except _GONE:
            return
        if self.stopped or len(self.pairs) // 2 >= MAXIMUM_CONNECTIONS:
            client.close()
            return
        import socket  # noqa: PLC0415 - imported by listen() already

        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.settimeout(CONNECT_BOUND_SECONDS)
            upstream.connect(self.path)
        except _GONE:
            upstream.close()
            client.close()
            return
        pipes: list[tuple[int, int]] | None = None
        if _SPLICE:
            try:
                pipes = [_pipe(), _pipe()]
            except _GONE:
                upstream.close()
                client.close()
                return
        pair = _Pair(client, upstream, pipes)
        for index, end in enumerate(pair.ends):
            end.setblocking(False)  # noqa: FBT003 - socket's positional flag
            self.pairs[end] = (pair, index)
            self.watch(end, pair.interest(index))

    def pump(self, pair: _Pair, index: int, events: int) -> None:
        if events & _WRITE:
            self.flush(pair, index)
        if events & _READ:
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
        if pair.pipes is not None:
            try:
                taken = os.splice(
                    pair.ends[index].fileno(), pair.pipes[other][1], CHUNK_BYTES, flags=_FLAGS
                )
            except (BlockingIOError, InterruptedError):
                return
            except _GONE:
                taken = 0  # reset: the same as its end, for this direction
            if taken:
                pair.held[other] += taken
                self.flush(pair, other)
                return
            data = b""
        else:
            try:
                data = pair.ends[index].recv(CHUNK_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except _GONE:
                data = b""  # reset: the same as its end, for this direction
        if not data:
            pair.finished[index] = True
            if not pair.waiting(other):
                self.shut(pair.ends[other])
            return
        pair.pending[other] = data
        self.flush(pair, other)

    def flush(self, pair: _Pair, index: int) -> None:
        if not pair.waiting(index):
            return
        try:
            if pair.pipes is not None:
                pair.held[index] -= os.splice(
                    pair.pipes[index][0], pair.ends[index].fileno(), pair.held[index], flags=_FLAGS
                )
            else:
                sent = pair.ends[index].send(pair.pending[index])
                pair.pending[index] = pair.pending[index][sent:]
        except (BlockingIOError, InterruptedError):
            return
        except _GONE:
            # This end takes nothing more: what was for it is dropped (its pipe is closed
            # with the pair) and its source is read no more; the other direction goes on
            # (a reply may still be on its way).
            pair.held[index] = 0
            pair.pending[index] = b""
            pair.finished[1 - index] = True
            return
        if not pair.waiting(index) and pair.finished[1 - index]:
            self.shut(pair.ends[index])

    @staticmethod
    def shut(end: socket.socket) -> None:
        try:  # noqa: SIM105 - no contextlib import in the supervisor's start
            end.shutdown(_SHUT_WR)
        except OSError:
            pass  # already gone: nothing more to say to it

    def close(self, pair: _Pair) -> None:
        for end in pair.ends:
            self.pairs.pop(end, None)
            if self.masks.pop(end, 0):
                self.selector.unregister(end)
            end.close()
        for read_end, write_end in pair.pipes or ():
            os.close(read_end)
            os.close(write_end)
        pair.pipes = None


def start(listener: socket.socket, path: str = SOCKET) -> None:
    """Relay every connection to ``listener`` to the UNIX socket ``path``, in a new thread.

    The thread lives as long as the process (the supervisor's exit ends it); it is
    started after the fork of the command, so the command's fork copied one thread.
    """
    _thread.start_new_thread(_Relay(listener, path).run, ())
