"""The in-namespace bridge, run here in a thread between real sockets (contract 12.2).

Inside a call the supervisor runs it (``test_proxy_contained.py`` covers that path end
to end); here the same ``_Relay`` hands each loopback connection to a UNIX server that
takes it as the proxy does (``SCM_RIGHTS``) and echoes on it, so its every branch is
measured: the handed connection itself carries the bytes (half-close included), the
bridge keeps no copy, many connections at once, an upstream that is missing or that
takes nothing, and its stop.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spice.agent.coding._posix._supervisor import _bridge as bridge

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")

BOUND = 30.0


class Taker:
    """A UNIX server that takes each handed connection and echoes on it (a thread each)."""

    def __init__(self, path: str, *, take: bool = True) -> None:
        self.path = path
        self.take = take
        self.messages: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(128)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                peer, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self.serve_one, args=(peer,), daemon=True).start()

    def serve_one(self, peer: socket.socket) -> None:
        with peer:
            if not self.take:
                return  # closes without reading: the handed connection is dropped
            data, fds, _, _ = socket.recv_fds(peer, 16, 4)
        self.messages.append(data)
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return
        with socket.socket(fileno=fds[0]) as handed:
            handed.settimeout(BOUND)
            while chunk := handed.recv(65536):
                handed.sendall(chunk)
            handed.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        os.unlink(self.path)


@pytest.fixture
def taker_path() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="spice-bridge-test-")
    taker = Taker(os.path.join(directory, "proxy.sock"))
    yield taker.path
    taker.close()
    os.rmdir(directory)


def running(path: str) -> tuple[bridge._Relay, threading.Thread, socket.socket]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(bridge.BACKLOG)
    listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
    relay = bridge._Relay(listener, path)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    return relay, thread, listener


def stop(relay: bridge._Relay, thread: threading.Thread, listener: socket.socket) -> None:
    relay.stopped = True
    with connect(listener.getsockname()[1]):
        pass  # wakes its select
    thread.join(BOUND)
    assert not thread.is_alive()
    listener.close()


@pytest.fixture
def handed(taker_path: str) -> Iterator[int]:
    """A bridge from 127.0.0.1:PORT to the taker, in its thread; stopped afterwards."""
    relay, thread, listener = running(taker_path)
    yield listener.getsockname()[1]
    stop(relay, thread, listener)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def test_the_handed_connection_carries_the_bytes_both_ways_and_a_half_close(
    handed: int,
) -> None:
    data = os.urandom(2 * 1024 * 1024 + 3)
    with connect(handed) as client:

        def send() -> None:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        back = bytearray()
        while chunk := client.recv(1 << 16):
            back += chunk
        sender.join(BOUND)
    assert bytes(back) == data


def test_the_bridge_sends_its_one_byte_and_keeps_no_copy(tmp_path: Path) -> None:
    """Once handed over, the connection lives only where the taker holds it: when the
    taker ends it, the client sees the end (the bridge's copy would keep it open)."""
    taker = Taker(str(tmp_path / "proxy.sock"))
    relay, thread, listener = running(taker.path)
    try:
        with connect(listener.getsockname()[1]) as client:
            client.sendall(b"ping")
            assert client.recv(4) == b"ping"
            client.shutdown(socket.SHUT_WR)
            assert client.recv(1) == b""
    finally:
        stop(relay, thread, listener)
        taker.close()
    assert [bridge.HANDOFF] == taker.messages


def test_many_connections_at_once_are_each_handed(handed: int) -> None:
    """No bound of the bridge's own (the proxy bounds them and answers 503)."""
    clients = [connect(handed) for _ in range(100)]
    try:
        for index, client in enumerate(clients):
            client.sendall(str(index).encode())
        for index, client in enumerate(clients):
            assert client.recv(8) == str(index).encode()
    finally:
        for client in clients:
            client.close()


def test_a_missing_upstream_closes_the_client(tmp_path: Path) -> None:
    relay, thread, listener = running(str(tmp_path / "nobody.sock"))
    try:
        with connect(listener.getsockname()[1]) as client:
            assert client.recv(1) == b""
    finally:
        stop(relay, thread, listener)


def test_an_upstream_that_takes_nothing_leaves_the_client_closed(tmp_path: Path) -> None:
    taker = Taker(str(tmp_path / "proxy.sock"), take=False)
    relay, thread, listener = running(taker.path)
    try:
        with connect(listener.getsockname()[1]) as client:
            assert client.recv(1) == b""
    finally:
        stop(relay, thread, listener)
        taker.close()


def test_stopping_ends_the_thread_and_drops_what_comes_after(taker_path: str) -> None:
    relay, thread, listener = running(taker_path)
    port = listener.getsockname()[1]
    stop(relay, thread, listener)
    with pytest.raises(ConnectionRefusedError):
        connect(port).close()
