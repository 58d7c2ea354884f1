"""Inside the call's network namespace: ``127.0.0.1:PORT`` bridged to the proxy's socket.

Standard library only and free of package imports, like the supervisor that runs it
(``_posix._supervisor`` compiles it into its sealed code file, contract 10.1). With
namespaces and without ``--allow-network`` the command has a network namespace of its
own, where only its loopback exists. The server's proxy (``_posix._proxy``) listens on
a UNIX socket that ``bwrap`` binds into the namespace at ``SOCKET``; the supervisor,
the init of the call's PID namespace, binds ``ADDRESS:PORT`` there before it forks the
command (so the port is taken and ready when the command starts) and, after the fork,
hands each connection to that socket in one thread (``start``). No host port is
opened: the listener lives in the call's namespace and dies with it; the thread dies
with the supervisor; the connections handed over are the proxy's, which ends them when
the call ends.

The bridge moves no bytes: for each connection it connects to the proxy's socket and
hands the command's connection over (``HANDOFF`` with the descriptor, ``SCM_RIGHTS``),
then closes its own copies; the proxy serves that socket itself, so a tunnel's bytes
pass one relay, not two (contract 12.2: 100 MiB through the whole path measured 3.0x to
3.9x a direct transfer with the bridge pumping them, the proxy alone 1.9x to 2.1x in the
same runs). It judges nothing (the proxy does, and bounds the connections).
"""

from __future__ import annotations

import _thread

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

CONNECT_BOUND_SECONDS: Final = 2.0
"""Longest wait for the proxy's socket to accept one connection."""

BACKLOG: Final = 128

HANDOFF: Final = b"\0"
"""The one byte the bridge sends with the command's connection (``SCM_RIGHTS``): the
proxy then serves that socket itself (no HTTP head starts with a NUL byte)."""

_GONE: Final = (OSError,)
_READ: Final = 1
"""``selectors.EVENT_READ``."""


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


class _Relay:
    def __init__(self, listener: socket.socket, path: str) -> None:
        self.listener = listener
        self.path = path
        import selectors  # noqa: PLC0415 - see the imports

        self.selector = selectors.DefaultSelector()
        self.stopped = False

    def run(self) -> None:
        """Hand connections over until ``stopped`` (the supervisor never stops it: its exit
        ends the thread; a test stops it, then wakes it with a connection)."""
        self.selector.register(self.listener, _READ)
        while not self.stopped:
            for _ in self.selector.select():
                self.accept()
        self.selector.close()

    def accept(self) -> None:
        """Hand one waiting connection to the proxy (closed when that cannot be done)."""
        try:
            client, _ = self.listener.accept()
        except _GONE:
            return
        if self.stopped:
            client.close()
            return
        import socket  # noqa: PLC0415 - imported by listen() already

        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.settimeout(CONNECT_BOUND_SECONDS)
            upstream.connect(self.path)
            socket.send_fds(upstream, [HANDOFF], [client.fileno()])
        except _GONE:
            pass  # no proxy to take it: the command sees its connection closed
        finally:
            upstream.close()
            client.close()


def start(listener: socket.socket, path: str = SOCKET) -> None:
    """Hand every connection to ``listener`` to the UNIX socket ``path``, in a new thread.

    The thread lives as long as the process (the supervisor's exit ends it); it is
    started after the fork of the command, so the command's fork copied one thread.
    """
    _thread.start_new_thread(_Relay(listener, path).run, ())
