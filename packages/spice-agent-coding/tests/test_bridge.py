"""The in-namespace bridge's relay, run here in a thread between real sockets.

Inside a call the supervisor runs it (``test_proxy_contained.py`` covers that path end
to end); here the same ``_Relay`` relays a loopback listener to a UNIX echo server, so
its every branch is measured: both directions, half-close, its connection bound, an
upstream that is missing, and its stop.
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

from spice.agent.coding._posix import _bridge as bridge

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")

BOUND = 30.0


@pytest.fixture
def echo_path() -> Iterator[str]:
    """A UNIX echo server (a thread per connection) at the returned path."""
    directory = tempfile.mkdtemp(prefix="spice-bridge-test-")
    path = os.path.join(directory, "echo.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(128)
    stop = threading.Event()

    def serve_one(peer: socket.socket) -> None:
        with peer:
            while data := peer.recv(65536):
                peer.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                peer, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(peer,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield path
    stop.set()
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    os.unlink(path)
    os.rmdir(directory)


@pytest.fixture
def relayed(echo_path: str) -> Iterator[tuple[bridge._Relay, int]]:
    """A relay from 127.0.0.1:PORT to ``echo_path`` in its thread; stopped afterwards."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(bridge.BACKLOG)
    listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
    relay = bridge._Relay(listener, echo_path)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    yield relay, port
    relay.stopped = True
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND):
        pass  # wakes its select
    thread.join(BOUND)
    assert not thread.is_alive()
    listener.close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def test_bytes_go_both_ways_intact_and_a_half_close_passes(
    relayed: tuple[bridge._Relay, int],
) -> None:
    _, port = relayed
    data = os.urandom(4 * 1024 * 1024)
    with connect(port) as client:

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


def test_the_connection_bound_holds_on_both_sides(relayed: tuple[bridge._Relay, int]) -> None:
    relay, port = relayed
    held = [connect(port) for _ in range(bridge.MAXIMUM_CONNECTIONS)]
    try:
        for client in held:  # every one of the bound is relayed
            client.sendall(b"?")
            assert client.recv(1) == b"?"
        with connect(port) as one_more:
            assert one_more.recv(1) == b""  # closed at once
        assert len(relay.pairs) == 2 * bridge.MAXIMUM_CONNECTIONS
    finally:
        for client in held:
            client.close()


def test_a_missing_upstream_closes_the_client(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
    relay = bridge._Relay(listener, str(tmp_path / "nobody.sock"))
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        with connect(port) as client:
            assert client.recv(1) == b""
        assert relay.pairs == {}
    finally:
        relay.stopped = True
        with connect(port):
            pass
        thread.join(BOUND)
        listener.close()
    assert not thread.is_alive()


def test_stopping_closes_every_relayed_connection(relayed: tuple[bridge._Relay, int]) -> None:
    relay, port = relayed
    client = connect(port)
    client.sendall(b"x")
    assert client.recv(1) == b"x"
    relay.stopped = True
    with connect(port):
        pass
    assert client.recv(1) == b""  # the relay ended it
    client.close()
    relay.stopped = False  # the fixture stops it for good


def test_without_splice_the_bridge_copies_the_same_bytes(
    echo_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bridge, "_SPLICE", False)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)  # noqa: FBT003 - socket's positional flag
    relay = bridge._Relay(listener, echo_path)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    data = os.urandom(2 * 1024 * 1024 + 3)
    try:
        with connect(port) as client:

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
    finally:
        relay.stopped = True
        with connect(port):
            pass
        thread.join(BOUND)
        listener.close()
