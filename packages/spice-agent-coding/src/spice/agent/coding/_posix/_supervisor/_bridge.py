"""Inside the call's network namespace: ``127.0.0.1:PORT`` bridged to the proxy's socket.

Standard library only and free of package imports, like the supervisor that runs it
(``_posix._supervisor._main`` compiles it into its sealed code file, contract 10.1). With
namespaces and without ``--allow-network`` the command has a network namespace of its
own, where only its loopback exists. The server's proxy (``_posix._net._proxy``) listens on
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

import _socket
import _thread
import os
import select
import sys

# Only the C modules: ``socket`` imports ``enum`` (and ``selectors`` more), which cost a
# proxied call's start about 7 ms before its command could fork (measured: ``python -I -S
# -c "import socket"`` 13.4 ms against 6.5 ms for ``pass``; ``_socket`` 6.7 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
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


def listen() -> _socket.socket:
    """The listening socket on ``ADDRESS:PORT`` (before the command exists)."""
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind((ADDRESS, PORT))
        listener.listen(BACKLOG)
        listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
    except BaseException:
        listener.close()
        raise
    return listener


class _Relay:
    def __init__(self, listener: _socket.socket, path: str) -> None:
        self.listener = listener
        self.path = path
        self.poller = select.poll()
        self.stopped = False

    def run(self) -> None:
        """Hand connections over until ``stopped`` (the supervisor never stops it: its exit
        ends the thread; a test stops it, then wakes it with a connection)."""
        self.poller.register(self.listener.fileno(), select.POLLIN)
        while not self.stopped:
            for _ in self.poller.poll():
                self.accept()

    def accept(self) -> None:
        """Hand one waiting connection to the proxy (closed when that cannot be done)."""
        try:
            # The C socket's accept (typeshed omits it): a bare descriptor and the peer.
            client, _ = self.listener._accept()  # type: ignore[attr-defined]
        except _GONE:
            return
        try:
            if not self.stopped:
                self.hand_over(client)
        finally:
            os.close(client)

    def hand_over(self, client: int) -> None:
        """Send ``HANDOFF`` with the descriptor ``client`` to the proxy (``SCM_RIGHTS``)."""
        upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            upstream.settimeout(CONNECT_BOUND_SECONDS)
            upstream.connect(self.path)
            rights = client.to_bytes(4, sys.byteorder, signed=True)  # one C int
            upstream.sendmsg([HANDOFF], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        except _GONE:
            pass  # no proxy to take it: the command sees its connection closed
        finally:
            upstream.close()


def start(listener: _socket.socket, path: str = SOCKET) -> None:
    """Hand every connection to ``listener`` to the UNIX socket ``path``, in a new thread.

    The thread lives as long as the process (the supervisor's exit ends it); it is
    started after the fork of the command, so the command's fork copied one thread.
    """
    _thread.start_new_thread(_Relay(listener, path).run, ())
