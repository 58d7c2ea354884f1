"""Parts of the HTTP transport checked in process: the bound socket, the allowed Host and
Origin sets, the per-token rate window on both sides of its bound."""

from __future__ import annotations

import socket

import pytest

from spice.agent.coding._mcp import _http
from spice.agent.coding._mcp._http_settings import HttpSettings
from spice.agent.coding._netpolicy._loopback import is_loopback


def test_the_listening_socket_is_tcp_with_nagle_off() -> None:
    """asyncio turns Nagle off only for sockets whose proto is TCP (40 ms per answer else)."""
    sock = _http.bind("127.0.0.1", 0)
    try:
        assert socket.IPPROTO_TCP == sock.proto
        assert 0 != sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert 0 < sock.getsockname()[1]
        assert _http.url_of(HttpSettings(port=0), sock).startswith("http://127.0.0.1:")
    finally:
        sock.close()


def test_a_port_in_use_cannot_be_bound() -> None:
    """Binding a port another socket listens on raises ``OSError`` (the CLI exits 2)."""
    first = _http.bind("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):  # noqa: PT011 - the OS's own error
            _http.bind("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()


def test_the_allowed_sets_name_loopback_the_public_url_and_the_flags() -> None:
    """Hosts: loopback names at the port and the public host; origins: loopback at the port
    (loopback bind only), the public origin, each --allowed-origin; all lower-cased."""
    settings = HttpSettings(
        public_url="https://MCP.Example.net/mcp", allowed_origins=("https://Agent.example",)
    )
    hosts, origins = _http.allowed_sets(settings, 8765)
    assert {"127.0.0.1:8765", "localhost:8765", "[::1]:8765", "mcp.example.net"} == hosts
    assert {
        "http://127.0.0.1:8765",
        "http://localhost:8765",
        "http://[::1]:8765",
        "https://mcp.example.net",
        "https://agent.example",
    } == origins
    remote_hosts, remote_origins = _http.allowed_sets(
        HttpSettings(host="10.0.0.1", allow_remote=True), 80
    )
    assert {"10.0.0.1:80", "10.0.0.1", "127.0.0.1", "localhost", "[::1]"} <= remote_hosts
    assert frozenset() == remote_origins


def test_the_rate_window_admits_up_to_its_bound_then_says_when() -> None:
    """Exactly N calls in 60 s pass; the next waits until the oldest leaves the window;
    tokens are counted apart."""
    rates = _http._Rates(3)
    assert [None, None, None] == [rates.admit("a", t) for t in (0.0, 10.0, 20.0)]
    assert 30.0 == rates.admit("a", 30.0)
    assert None is rates.admit("b", 30.0)
    assert None is rates.admit("a", 60.0)
    assert rates.admit("a", 60.5) == pytest.approx(9.5)


def test_the_rate_remembers_a_bounded_number_of_tokens() -> None:
    """Past ``MAXIMUM_RATE_KEYS`` names, idle ones are forgotten first; never more kept."""
    rates = _http._Rates(1)
    for index in range(_http.MAXIMUM_RATE_KEYS + 10):
        rates.admit(f"t{index}", float(index))
    assert len(rates._seen) <= _http.MAXIMUM_RATE_KEYS


ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - a text judged here, never bound


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("localhost", True),
        ("10.0.0.1", False),
        (ANY_ADDRESS, False),
        ("::", False),
        ("example.com", False),
    ],
)
def test_loopback_is_judged_by_address(host: str, loopback: bool) -> None:
    """Only loopback addresses (and the name localhost) count as loopback."""
    assert loopback == is_loopback(host)


async def _post(guard: _http._Body, body: bytes, declared: bool = True) -> int:
    """One POST through ``guard`` as ASGI messages; its status (200: passed to the app)."""
    headers = [(b"content-type", b"application/json")]
    if declared:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "method": "POST", "headers": headers, "path": "/mcp"}
    given = [{"type": "http.request", "body": body, "more_body": False}]
    statuses: list[int] = []

    async def receive() -> dict[str, object]:
        return given.pop() if given else {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(int(message["status"]))  # type: ignore[call-overload]

    await guard(scope, receive, send)  # type: ignore[arg-type]
    return (statuses or [200])[0]


reached: list[bytes] = []
"""The bodies that reached ``_app``."""


async def _app(scope: object, receive: object, send: object) -> None:
    message = await receive()  # type: ignore[operator]
    reached.append(message["body"])


async def test_the_bodies_in_flight_are_bounded_in_all_and_released_after() -> None:
    """A body whose declared length would pass the total in flight is 503; one that fits is
    served; a chunked body reserves the whole body bound; every reservation is released."""
    reached.clear()
    guard = _http._Body(_app, _http._Rates(100))
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    at_bound = _http.MAXIMUM_BODY_BYTES_IN_FLIGHT - len(body)
    guard.in_flight = at_bound
    assert 200 == await _post(guard, body)
    assert at_bound == guard.in_flight
    guard.in_flight = at_bound + 1
    assert 503 == await _post(guard, body)
    guard.in_flight = _http.MAXIMUM_BODY_BYTES_IN_FLIGHT - _http.MAXIMUM_BODY_BYTES + 1
    assert 503 == await _post(guard, body, declared=False)
    guard.in_flight = 0
    assert 200 == await _post(guard, body, declared=False)
    assert 400 == await _post(guard, b"not json")
    assert [body, body] == reached
    assert 0 == guard.in_flight
