"""A corporate proxy upstream of each call's proxy (contract 12.2).

Round 4: where egress goes only through the host's ``HTTPS_PROXY``, ``--allow-domain``
could not work (the call's proxy dialled directly). Here the heads and the variables are
checked as values, then a forwarding proxy the test runs on ``127.0.0.3`` stands in for
the company's: it alone knows the name ``mirror.corp.example`` (it maps it to a loopback
server on ``127.0.0.2``), so a contained command reaches that name only if the call's
proxy leaves the name to it; a refused host never reaches it.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import select
import socket
import socketserver
import ssl
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st
from test_proxy_contained import PYTHON, policy, shell

from spice.agent.coding import PosixLauncher
from spice.agent.coding._netpolicy._head import Request
from spice.agent.coding._netpolicy._upstream import (
    MAXIMUM_NO_PROXY,
    Upstream,
    UpstreamProxies,
    absolute_head,
    connect_head,
    reply_status,
    upstream_of,
)
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._supervisor._landlock import landlock_abi

UPSTREAM_HOST: Final = "127.0.0.3"
TARGET_HOST: Final = "127.0.0.2"
MIRROR: Final = "mirror.corp.example"
"""A name only the upstream proxy knows (the host has no DNS for it)."""
MARKER: Final = "through-the-corporate-proxy"
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
BOUND: Final = 30.0


# -- values ------------------------------------------------------------------------------


def test_the_variables_name_the_upstreams_and_lower_case_wins() -> None:
    found = upstream_of(
        {
            "HTTPS_PROXY": "http://upper.example:1",
            "https_proxy": "http://user:p%40ss@proxy.example:8080",
            "HTTP_PROXY": "proxy.example:3129",
            "NO_PROXY": "localhost, .internal.example,10.0.0.7,*.svc:8443",
        }
    )
    assert found.https == Upstream("proxy.example", 8080, b"Basic dXNlcjpwQHNz")
    assert found.http == Upstream("proxy.example", 3129)
    assert "p@ss" not in repr(found)
    assert "dXNl" not in repr(found)
    assert "dXNl" not in str(found.report())
    assert ("localhost", ".internal.example", "10.0.0.7", "*.svc:8443") == found.no_proxy


@pytest.mark.parametrize(
    "text", ["", "https://proxy.example:8443", "socks5://p:1", "http://", "http://x:0"]
)
def test_what_is_no_http_proxy_url_names_no_upstream(text: str) -> None:
    assert upstream_of({"HTTPS_PROXY": text}).https is None


def test_no_proxy_sends_its_hosts_direct_and_everything_else_through() -> None:
    up = Upstream("proxy.example", 8080)
    proxies = UpstreamProxies(up, None, ("internal.example", "10.0.0.7", "*.svc:8443"))
    assert proxies.for_request("pypi.org", 443, tunnel=True) is up
    assert proxies.for_request("a.internal.example", 443, tunnel=True) is None
    assert proxies.for_request("internal.example", 443, tunnel=True) is None
    assert proxies.for_request("xinternal.example", 443, tunnel=True) is up
    assert proxies.for_request("10.0.0.7", 443, tunnel=True) is None
    assert proxies.for_request("a.svc", 8443, tunnel=True) is None
    assert proxies.for_request("a.svc", 443, tunnel=True) is up
    assert proxies.for_request("pypi.org", 80, tunnel=False) is None  # no HTTP_PROXY
    assert UpstreamProxies(up, None, ("*",)).for_request("pypi.org", 443, tunnel=True) is None


def test_the_no_proxy_list_is_bounded() -> None:
    many = ",".join(f"h{n}.example" for n in range(MAXIMUM_NO_PROXY + 3))
    assert MAXIMUM_NO_PROXY == len(upstream_of({"NO_PROXY": many}).no_proxy)


def test_the_heads_sent_upstream_name_the_checked_host() -> None:
    secret = Upstream("p", 1, b"Basic eDp5")
    tunnel = Request("pypi.org", 443, tunnel=True)
    assert (
        b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n"
        b"Proxy-Authorization: Basic eDp5\r\n\r\n"
    ) == connect_head(tunnel, secret)
    plain = Request(
        "mirror.example", 8080, tunnel=False, method=b"GET", path=b"/simple/",
        headers=((b"Host", b"evil.example"), (b"Accept", b"*/*")),
    )  # fmt: skip
    head = absolute_head(plain, Upstream("p", 1))
    assert head.startswith(b"GET http://mirror.example:8080/simple/ HTTP/1.1\r\n")
    assert b"Host: mirror.example:8080\r\n" in head
    assert b"evil.example" not in head
    assert b"Proxy-Authorization" not in head


@given(st.binary(max_size=40))
def test_any_reply_head_has_a_status_or_none(head: bytes) -> None:
    status = reply_status(head)
    assert status is None or 100 <= status <= 999


def test_a_reply_status_is_read_from_the_status_line() -> None:
    assert 200 == reply_status(b"HTTP/1.1 200 Connection established\r\n\r\n")
    assert 407 == reply_status(b"HTTP/1.0 407 Proxy Authentication Required\r\n\r\n")
    assert reply_status(b"SSH-2.0-x\r\n") is None


# -- through a real upstream ---------------------------------------------------------------


@dataclasses.dataclass
class Forwarder:
    """The upstream proxy's record: each request's method and authority, and its port."""

    port: int
    seen: list[tuple[str, str]]


def _pipe(one: socket.socket, other: socket.socket) -> None:
    sockets = [one, other]
    while True:
        ready, _, _ = select.select(sockets, [], [], BOUND)
        if not ready:
            return
        for sock in ready:
            data = sock.recv(65536)
            if not data:
                return
            (other if sock is one else one).sendall(data)


@pytest.fixture
def forwarder() -> Iterator[Forwarder]:
    """A forwarding proxy on ``UPSTREAM_HOST``: ``CONNECT`` and absolute-form requests,
    ``MIRROR`` resolved to ``TARGET_HOST`` by it alone."""
    seen: list[tuple[str, str]] = []

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            client: socket.socket = self.request
            client.settimeout(BOUND)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode()
            method, target, _ = line.split(" ", 2)
            authority = target if method == "CONNECT" else target.split("/", 3)[2]
            seen.append((method, authority))
            host, _, port = authority.rpartition(":")
            address = TARGET_HOST if host == MIRROR else host
            with socket.create_connection((address, int(port)), timeout=BOUND) as server:
                if method == "CONNECT":
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    path = "/" + target.split("/", 3)[3]
                    rest = head.split(b"\r\n", 1)[1]
                    server.sendall(f"{method} {path} HTTP/1.1\r\n".encode() + rest)
                _pipe(client, server)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    try:
        server = Server((UPSTREAM_HOST, 0), Handler)
    except OSError as error:
        pytest.skip(f"cannot listen on {UPSTREAM_HOST} here ({error.strerror})")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Forwarder(server.server_address[1], seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(BOUND)


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``MIRROR`` (the command does not verify it: what is
    checked is the path of its bytes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, MIRROR)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(MIRROR), x509.IPAddress(ipaddress.ip_address(TARGET_HOST))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    chain, secret = directory / "chain.pem", directory / "key.pem"
    chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    secret.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return chain, secret


@dataclasses.dataclass
class Target:
    plain: int
    tls: int


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    """An HTTP and an HTTPS server on ``TARGET_HOST`` answering ``MARKER``."""
    chain, key = _certificate(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key)
    body = MARKER.encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
        len(body),
        body,
    )

    class Plain(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            if self.server is servers[1]:
                with context.wrap_socket(sock, server_side=True) as wrapped:
                    self.answer(wrapped)
            else:
                self.answer(sock)

        def answer(self, sock: socket.socket) -> None:
            sock.settimeout(BOUND)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                head += chunk
            sock.sendall(answer)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    try:
        servers = [Server((TARGET_HOST, 0), Plain), Server((TARGET_HOST, 0), Plain)]
    except OSError as error:
        pytest.skip(f"cannot listen on {TARGET_HOST} here ({error.strerror})")
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield Target(servers[0].server_address[1], servers[1].server_address[1])
    finally:
        for server, thread in zip(servers, threads, strict=True):
            server.shutdown()
            server.server_close()
            thread.join(BOUND)


PLAIN: Final = (
    "import os, sys, urllib.request\n"
    "opener = urllib.request.build_opener(\n"
    "    urllib.request.ProxyHandler({'http': os.environ['http_proxy']}))\n"
    "try:\n"
    "    print(opener.open(sys.argv[1], timeout=20).read().decode())\n"
    "except Exception as error:\n"
    "    print('FAILED', error)\n"
)

TLS: Final = (
    "import os, ssl, sys, urllib.request\n"
    "context = ssl.create_default_context()\n"
    "context.check_hostname = False\n"
    "context.verify_mode = ssl.CERT_NONE\n"
    "opener = urllib.request.build_opener(\n"
    "    urllib.request.ProxyHandler({'https': os.environ['https_proxy']}),\n"
    "    urllib.request.HTTPSHandler(context=context))\n"
    "try:\n"
    "    print(opener.open(sys.argv[1], timeout=20).read().decode())\n"
    "except Exception as error:\n"
    "    print('FAILED', error)\n"
)


@pytest.mark.usefixtures("visible_path")
@pytest.mark.skipif(landlock_abi() < 1 or not NAMESPACES.made, reason="needs namespaces")
async def test_allowed_hosts_go_through_the_upstream_which_resolves_their_names(
    forwarder: Forwarder, target: Target, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain HTTP in absolute form, a tunnel by ``CONNECT``; the name is the upstream's
    (this host cannot resolve it); no ``--allow-private-address`` is needed."""
    upstream = f"http://{UPSTREAM_HOST}:{forwarder.port}"
    monkeypatch.setenv("HTTPS_PROXY", upstream)
    monkeypatch.setenv("HTTP_PROXY", upstream)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    allowed = policy(f"{MIRROR}:{target.plain}", f"{MIRROR}:{target.tls}", private=False)
    launcher = PosixLauncher.build(allowed, str(root))
    plain = await shell(
        allowed, root, [PYTHON, "-I", "-c", PLAIN, f"http://{MIRROR}:{target.plain}/x"], launcher
    )
    assert MARKER in str(plain["stdout"]), plain
    tls = await shell(
        allowed, root, [PYTHON, "-I", "-c", TLS, f"https://{MIRROR}:{target.tls}/x"], launcher
    )
    assert MARKER in str(tls["stdout"]), tls
    assert [
        ("GET", f"{MIRROR}:{target.plain}"),
        ("CONNECT", f"{MIRROR}:{target.tls}"),
    ] == forwarder.seen
    assert "upstream" in launcher.report()["domains"]  # type: ignore[operator]


@pytest.mark.usefixtures("visible_path")
@pytest.mark.skipif(landlock_abi() < 1 or not NAMESPACES.made, reason="needs namespaces")
async def test_a_refused_host_never_reaches_the_upstream_and_no_proxy_goes_direct(
    forwarder: Forwarder, target: Target, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = f"http://{UPSTREAM_HOST}:{forwarder.port}"
    monkeypatch.setenv("HTTPS_PROXY", upstream)
    monkeypatch.setenv("HTTP_PROXY", upstream)
    monkeypatch.setenv("NO_PROXY", TARGET_HOST)
    allowed = policy(f"{TARGET_HOST}:{target.plain}", private=True)
    launcher = PosixLauncher.build(allowed, str(root))
    refused = await shell(
        allowed, root, [PYTHON, "-I", "-c", PLAIN, f"http://{MIRROR}:{target.plain}/x"], launcher
    )
    assert "FAILED" in str(refused["stdout"])
    tunnel = await shell(
        allowed, root, [PYTHON, "-I", "-c", TLS, f"https://{MIRROR}:{target.tls}/x"], launcher
    )
    assert "FAILED" in str(tunnel["stdout"])
    direct = await shell(
        allowed,
        root,
        [PYTHON, "-I", "-c", PLAIN, f"http://{TARGET_HOST}:{target.plain}/x"],
        launcher,
    )
    assert MARKER in str(direct["stdout"]), direct
    assert [] == forwarder.seen  # refused ones never left; NO_PROXY's went direct


def test_without_the_variables_there_is_no_upstream() -> None:
    assert not upstream_of({}).active
    assert not upstream_of({"ALL_PROXY": "http://p:1"}).active
