"""The network of a contained call, end to end: bwrap, the bridge, the proxy, the answer.

Real ``curl`` and Python's ``urllib`` run contained and reach loopback servers that
stand in for registries, through the proxy (``--allow-private-address`` lets those
through); refusals reach the shell's answer with a hint; the call's own loopback
works and is not the host's; a call's end, also a cancelled one, leaves no tunnel.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Final

import procutil
import pytest
from netutil import Loopback, echo, http_host, loopback

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding._netpolicy._domains import DomainPolicy, parse_patterns
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._net._proxy import MAXIMUM_CALL_CONNECTIONS, Proxy
from spice.agent.coding._posix._net._stale import SOCKET_BASE
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.dispatch import Dispatcher
from spice.agent.process import Spec
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

PYTHON: Final = os.path.realpath(sys.executable)
CURL: Final = shutil.which("curl")
BOUND: Final = 120.0
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
ALLOWLIST: Final = ("HOME", "LANG", "PATH", "TMPDIR")

pytestmark = [
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
    pytest.mark.skipif(not NAMESPACES.made, reason=f"no namespaces here: {NAMESPACES.reason}"),
]
needs_curl = pytest.mark.skipif(CURL is None, reason="no curl on this machine")


def policy(*patterns: str, private: bool = True, namespaces: bool = True) -> Containment:
    made = NAMESPACES if namespaces else Namespaces(None, "simulated: no bwrap")
    domains = DomainPolicy(parse_patterns(patterns), private)
    return dataclasses.replace(resolve_containment("workspace", domains=domains), namespaces=made)


async def shell(
    containment: Containment, root: Path, argv: list[str], launcher: PosixLauncher | None = None
) -> dict[str, object]:
    """One ``shell`` call through the real tool; its answer's content."""
    used = PosixLauncher.build(containment, str(root)) if launcher is None else launcher
    tool, cleanup = new_shell(
        Config(str(root), environment_allowlist=ALLOWLIST), PosixResolver(), used
    )
    try:
        request = Call("c", "shell", json.dumps({"argv": argv, "timeout_seconds": 60}))
        async with asyncio.timeout(BOUND):
            result = await Dispatcher([tool]).dispatch(request)
    finally:
        async with asyncio.timeout(BOUND):
            await cleanup()
    content = json.loads(result.content)
    assert isinstance(content, dict)
    return content


URLLIB: Final = (
    "import os, sys, urllib.request\n"
    "for name in ('no_proxy', 'NO_PROXY'):\n"  # the call's own loopback goes through too
    "    del os.environ[name]\n"
    "opener = urllib.request.build_opener(\n"
    "    urllib.request.ProxyHandler({'http': os.environ['http_proxy']}))\n"
    "print(opener.open(sys.argv[1], timeout=30).read().decode())\n"
)

TUNNEL: Final = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', 3128))\n"
    "s.sendall(b'CONNECT ' + sys.argv[1].encode() + b' HTTP/1.1\\r\\n\\r\\n')\n"
    "head = b''\n"
    "while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "    byte = s.recv(1)\n"
    "    if not byte:\n"
    "        sys.exit('the proxy closed before its answer')\n"
    "    head += byte\n"
    "print(head.split(b'\\r\\n')[0].decode())\n"
    "s.sendall(b'echoed through the tunnel')\n"
    "print(s.recv(100).decode())\n"
)


@needs_curl
async def test_curl_and_urllib_reach_an_allowed_loopback_registry(root: Path) -> None:
    async with loopback(http_host) as registry:
        allowed = policy(f"127.0.0.1:{registry.port}")
        url = f"http://127.0.0.1:{registry.port}/simple/pkg/"
        assert CURL is not None
        # NO_PROXY names the call's own loopback; --noproxy naming another host replaces it.
        by_curl = await shell(allowed, root, [CURL, "-sSf", "--noproxy", "none.invalid", url])
        assert by_curl["ok"] is True, by_curl
        assert by_curl["stdout"] == f"GET /simple/pkg/ HTTP/1.1|Host: 127.0.0.1:{registry.port}"
        assert "network_refused" not in by_curl
        by_urllib = await shell(allowed, root, [PYTHON, "-I", "-c", URLLIB, url])
        assert by_urllib["ok"] is True, by_urllib
        assert "GET /simple/pkg/ HTTP/1.1" in str(by_urllib["stdout"])
    assert registry.opened == 2


async def test_a_tunnel_reaches_an_allowed_tcp_server(root: Path) -> None:
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        answer = await shell(
            policy(authority + "/tcp"), root, [PYTHON, "-I", "-c", TUNNEL, authority]
        )
        assert answer["ok"] is True, answer
        assert (
            answer["stdout"] == "HTTP/1.1 200 Connection established\nechoed through the tunnel\n"
        )


async def test_raw_bytes_pass_only_where_the_user_allowed_raw_tcp(root: Path) -> None:
    """R5-13 from inside the call: the same tunnel to a port allowed without ``/tcp``
    carries nothing (no echo), and the answer names it refused."""
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        answer = await shell(policy(authority), root, [PYTHON, "-I", "-c", TUNNEL, authority])
        assert answer["stdout"] == "HTTP/1.1 200 Connection established\n\n"
        assert answer["network_refused"] == [authority]


async def test_the_command_gets_the_proxy_whatever_the_allowlist(root: Path) -> None:
    code = (
        "import os\n"
        "for n in ('HTTP_PROXY', 'https_proxy', 'ALL_PROXY', 'NO_PROXY'):\n"
        "    print(os.environ[n])\n"
    )
    answer = await shell(policy(), root, [PYTHON, "-I", "-c", code])
    assert answer["ok"] is True, answer
    assert str(answer["stdout"]).split() == [
        "http://127.0.0.1:3128",
        "http://127.0.0.1:3128",
        "http://127.0.0.1:3128",
        "localhost,127.0.0.1,::1",
    ]


@needs_curl
async def test_refused_hosts_reach_the_answer_with_a_hint(root: Path) -> None:
    assert CURL is not None
    denied = await shell(
        policy("pypi.org"), root, [CURL, "-sSf", "--noproxy", "none.invalid", "http://example.com/"]
    )
    assert denied["ok"] is False
    assert denied["network_refused"] == ["example.com:80"]
    assert denied["network_refused_count"] == 1
    assert "--allow-domain example.com" in str(denied["sandbox_hint"])
    literal = await shell(
        policy("pypi.org"),
        root,
        [CURL, "-sSf", "--noproxy", "none.invalid", "-p", "http://192.0.2.1:443/"],
    )
    assert literal["network_refused"] == ["192.0.2.1:443"]
    async with loopback(echo) as server:
        private = await shell(
            policy(f"localhost:{server.port}", private=False),
            root,
            [CURL, "-sSf", "--noproxy", "none.invalid", "-p", f"http://localhost:{server.port}/"],
        )
        assert server.opened == 0
    assert private["network_refused"] == [f"localhost:{server.port}"]
    assert "--allow-private-address" in str(private["sandbox_hint"])


async def test_a_dns_failure_with_the_network_denied_gets_a_hint(root: Path) -> None:
    code = "import socket\nsocket.getaddrinfo('registry.example', 443)"
    answer = await shell(policy(), root, [PYTHON, "-I", "-c", code])
    assert answer["ok"] is False
    hint = str(answer["sandbox_hint"])
    assert "--allow-domain" in hint
    assert len(hint.encode()) <= 512
    succeeded = await shell(policy(), root, [PYTHON, "-I", "-c", "print('no network needed')"])
    assert "sandbox_hint" not in succeeded


LOOPBACK: Final = (
    "import socket\n"
    "for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
    "    with socket.socket(family) as server:\n"
    "        server.bind((host, 0))\n"
    "        server.listen()\n"
    "        with socket.create_connection(server.getsockname()[:2]) as client:\n"
    "            peer, _ = server.accept()\n"
    "            peer.sendall(b'ok')\n"
    "            print(host, client.recv(2).decode())\n"
    "            peer.close()\n"
)


async def test_the_calls_own_loopback_works_on_both_families(root: Path) -> None:
    answer = await shell(policy(), root, [PYTHON, "-I", "-c", LOOPBACK])
    assert answer["ok"] is True, answer
    assert answer["stdout"] == "127.0.0.1 ok\n::1 ok\n"


class Lines:
    """A sink that sets ``said`` when a whole line came."""

    def __init__(self) -> None:
        self.data = b""
        self.said = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.data += data
        if b"\n" in self.data:
            self.said.set()


LISTEN: Final = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "s.bind(('127.0.0.1', 0))\n"
    "s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "s.settimeout(60)\n"
    "peer, _ = s.accept()\n"
    "peer.sendall(b'INSIDE')\n"
)


async def started(launcher: PosixLauncher, root: Path, code: str, out: Lines) -> object:
    spec = Spec(PYTHON, ("-I", "-c", code), str(root), ("PATH=/usr/bin:/bin",), b"", out, Lines())
    process = await launcher.start(spec)
    async with asyncio.timeout(BOUND):
        await out.said.wait()
    return process


async def test_nothing_the_command_binds_is_reachable_from_the_host(root: Path) -> None:
    out = Lines()
    launcher = PosixLauncher.build(policy(), str(root))
    process = await started(launcher, root, LISTEN, out)
    try:
        port = int(out.data.split()[0])
        with socket.socket() as probe:
            probe.settimeout(5)
            reached = probe.connect_ex(("127.0.0.1", port))
            if reached == 0:
                assert probe.recv(6) != b"INSIDE"  # another program's port on the host
            else:
                assert reached == errno.ECONNREFUSED
    finally:
        await process.force_kill()  # type: ignore[attr-defined]
        await process.wait()  # type: ignore[attr-defined]


HOLD: Final = TUNNEL.replace(
    "print(s.recv(100).decode())\n", "print(s.recv(100).decode(), flush=True)\ntime.sleep(120)\n"
).replace("import socket, sys\n", "import socket, sys, time\n")


def descriptors() -> frozenset[tuple[int, str]]:
    """This process's descriptors but its lifetime ones (``procutil.open_descriptors``)."""
    return procutil.open_descriptors()


async def test_a_calls_end_closes_its_tunnels_and_leaves_no_descriptor(root: Path) -> None:
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        launcher = PosixLauncher.build(policy(authority + "/tcp"), str(root))
        baseline = descriptors()
        out = Lines()
        process = await started(launcher, root, HOLD.replace("sys.argv[1]", repr(authority)), out)
        assert server.opened == 1
        await process.force_kill()  # type: ignore[attr-defined]
        await process.wait()  # type: ignore[attr-defined]
        async with asyncio.timeout(BOUND):
            await server.ended.wait()
        assert server.closed == 1
        proxy = launcher._proxy
        assert proxy is not None
        assert (proxy.active, proxy.calls) == (0, set())
        assert descriptors() == baseline


async def test_a_call_cancelled_mid_transfer_leaves_nothing(root: Path) -> None:
    download = (
        "import os, urllib.request, sys\n"
        "for name in ('no_proxy', 'NO_PROXY'):\n"
        "    del os.environ[name]\n"
        "opener = urllib.request.build_opener(\n"
        "    urllib.request.ProxyHandler({'http': os.environ['http_proxy']}))\n"
        "with opener.open(sys.argv[1], timeout=60) as r:\n"
        "    while r.read(65536):\n"
        "        pass\n"
    )

    flowing = asyncio.Event()

    async def endless_http(
        state: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        chunk = b"x" * 65536
        while True:
            writer.write(chunk)
            await writer.drain()
            state.sent += len(chunk)
            if state.sent >= 4 * 1024 * 1024:
                flowing.set()  # the transfer is under way, through the proxy

    async with loopback(endless_http) as server:
        authority = f"127.0.0.1:{server.port}"
        launcher = PosixLauncher.build(policy(authority + "/tcp"), str(root))
        calling = asyncio.ensure_future(
            shell(
                policy(authority + "/tcp"),
                root,
                [PYTHON, "-I", "-c", download, f"http://{authority}/big"],
                launcher,
            )
        )
        async with asyncio.timeout(BOUND):
            await flowing.wait()
        calling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await calling
        assert calling.cancelled()
        async with asyncio.timeout(BOUND):
            await server.ended.wait()
        proxy = launcher._proxy
        assert proxy is not None
        assert (proxy.active, proxy.calls) == (0, set())


async def test_without_namespaces_the_network_stays_denied_and_tools_says_so(root: Path) -> None:
    fallback = policy("pypi.org", namespaces=False)
    assert not fallback.proxied
    report = fallback.report()["domains"]
    assert isinstance(report, dict)
    assert report["proxy"] is None
    assert "namespaces" in str(report["reason"])
    code = (
        "import os, socket\n"
        "print(os.environ.get('HTTP_PROXY'))\n"
        "try:\n"
        "    socket.socket(socket.AF_INET)\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
    )
    answer = await shell(fallback, root, [PYTHON, "-I", "-c", code])
    expected = errno.EPERM if fallback.seccomp else None
    assert str(answer["stdout"]).split()[0] == "None"
    if expected is not None:
        assert str(answer["stdout"]).split()[1] == str(expected)


BOUNDED: Final = (
    "import socket, sys\n"
    "held = []\n"
    "def tunnel():\n"
    "    s = socket.create_connection(('127.0.0.1', 3128))\n"
    "    s.sendall(b'CONNECT ' + sys.argv[1].encode() + b' HTTP/1.1\\r\\n\\r\\n')\n"
    "    head = b''\n"
    "    while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "        byte = s.recv(1)\n"
    "        if not byte:\n"
    "            sys.exit('the proxy closed before its answer')\n"
    "        head += byte\n"
    "    held.append(s)\n"
    "    return head.split(b' ')[1].decode()\n"
    "print([tunnel() for _ in range(int(sys.argv[2]) + 1)].count('200'), tunnel())\n"
)


async def test_the_calls_connection_bound_holds_inside_the_namespace(root: Path) -> None:
    """Through the bridge: the bound's connections are served, the next one gets 503."""
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        bound = str(MAXIMUM_CALL_CONNECTIONS - 1)
        answer = await shell(
            policy(authority + "/tcp"), root, [PYTHON, "-I", "-c", BOUNDED, authority, bound]
        )
        assert answer["ok"] is True, answer
        assert answer["stdout"] == f"{MAXIMUM_CALL_CONNECTIONS} 503\n"
        assert server.opened == MAXIMUM_CALL_CONNECTIONS


INTACT: Final = (
    "import hashlib, os, socket, sys, threading\n"
    "s = socket.create_connection(('127.0.0.1', 3128))\n"
    "s.sendall(b'CONNECT ' + sys.argv[1].encode() + b' HTTP/1.1\\r\\n\\r\\n')\n"
    "head = b''\n"
    "while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "    byte = s.recv(1)\n"
    "    if not byte:\n"
    "        sys.exit('the proxy closed before its answer')\n"
    "    head += byte\n"
    "data = os.urandom(int(sys.argv[2]))\n"
    "def send():\n"
    "    s.sendall(data)\n"
    "    s.shutdown(socket.SHUT_WR)\n"
    "threading.Thread(target=send).start()\n"
    "back = bytearray()\n"
    "while chunk := s.recv(1 << 16):\n"
    "    back += chunk\n"
    "print(len(back), hashlib.sha256(back).digest() == hashlib.sha256(data).digest())\n"
)


async def test_bytes_cross_the_bridge_and_the_proxy_intact_both_ways(root: Path) -> None:
    """8 MiB of random bytes up and back through the echo: every byte, in order, and the
    half-close passes (the echo ends, so does the tunnel)."""
    size = 8 * 1024 * 1024
    async with loopback(echo) as server:
        authority = f"127.0.0.1:{server.port}"
        answer = await shell(
            policy(authority + "/tcp"), root, [PYTHON, "-I", "-c", INTACT, authority, str(size)]
        )
        assert answer["ok"] is True, answer
        assert answer["stdout"] == f"{size} True\n"


async def test_allow_network_is_the_unfiltered_network_without_the_proxy(root: Path) -> None:
    unfiltered = dataclasses.replace(
        resolve_containment(
            "workspace", allow_network=True, domains=DomainPolicy(parse_patterns(["python"]))
        ),
        namespaces=NAMESPACES,
    )
    assert not unfiltered.proxied
    assert unfiltered.report()["domains"] == {
        "allowed": ["pypi.org", "files.pythonhosted.org"],
        "private_addresses": False,
        "proxy": None,
        "reason": "--allow-network: the host's network, unfiltered",
    }
    code = "import os\nprint(os.environ.get('HTTP_PROXY'), os.path.exists('/run/spice-proxy'))"
    answer = await shell(unfiltered, root, [PYTHON, "-I", "-c", code])
    assert answer["stdout"] == "None False\n"


def test_tools_reports_the_proxy_and_the_loopback_with_namespaces() -> None:
    proxied = policy("python", "*.example.com:8443")
    report = proxied.report()
    assert report["domains"] == {
        "allowed": ["pypi.org", "files.pythonhosted.org", "*.example.com:8443"],
        "private_addresses": True,
        "proxy": "http://127.0.0.1:3128 inside the call (HTTP_PROXY, HTTPS_PROXY)",
        "loopback": "the call's own (127.0.0.1 and ::1; the host's is unreachable)",
    }
    assert "sockets_unix_and_private_loopback" in str(report["seccomp"])
    assert "tcp_connect" not in str(report["enforced"])
    sentence = proxied.sentence
    assert sentence is not None
    assert "use its own loopback and, through a proxy, only the allowed domains" in sentence


async def test_a_command_sees_its_own_proxy_socket_and_no_other_calls(root: Path) -> None:
    other = await Proxy(DomainPolicy()).open_call()  # another call's, open meanwhile
    try:
        assert other.path.startswith(SOCKET_BASE + "/")
        code = (
            "import glob, os, sys\n"
            "print(sorted(glob.glob('/tmp/spice-proxy-*')), os.path.exists(sys.argv[1]))\n"
            "print(os.path.exists('/run/spice-proxy/proxy.sock'))\n"
        )
        answer = await shell(policy(), root, [PYTHON, "-I", "-c", code, other.path])
    finally:
        await other.close()
    assert answer["stdout"] == "[] False\nTrue\n"


async def test_no_descriptor_of_the_bridge_or_the_proxy_reaches_the_command(root: Path) -> None:
    """The bridge's listener (made before the fork) and pipes are close-on-exec."""
    code = (
        "import os\n"
        "for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):\n"
        "    try:\n"
        "        print(fd, os.readlink(f'/proc/self/fd/{fd}').split(':')[0])\n"
        "    except OSError:\n"
        "        pass\n"
    )
    answer = await shell(policy(), root, [PYTHON, "-I", "-c", code])
    assert answer["ok"] is True, answer
    kinds = [line.split() for line in str(answer["stdout"]).splitlines()]
    beyond = [kind for fd, kind in kinds if int(fd) > 2 and not kind.startswith("/proc")]
    assert beyond == []


FOREIGN: Final = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "s.settimeout(30)\n"
    "s.connect(sys.argv[1])\n"
    "answer = b''\n"
    "try:\n"
    "    s.sendall(sys.argv[2].encode())\n"
    "    while chunk := s.recv(4096):\n"
    "        answer += chunk\n"
    "except OSError:\n"
    "    pass\n"
    "print(repr(answer[:40]))\n"
)


async def test_r5_10_a_fallback_command_of_another_server_reaches_no_calls_proxy(
    root: Path,
) -> None:
    """Two servers: one on the namespace path with a call open (its proxy's socket in
    the host's /tmp), one on the fallback path, whose command connects to that socket
    and asks for an allowed host: the proxy closes it unanswered (it answered 200), the
    upstream never hears of it (every other test here is the positive side: each call's
    own command is served)."""
    if not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    async with loopback(http_host) as registry:
        authority = f"127.0.0.1:{registry.port}"
        first = PosixLauncher.build(policy(authority), str(root))
        out = Lines()
        holder = await started(
            first, root, "import time\nprint('ready', flush=True)\ntime.sleep(120)\n", out
        )
        try:
            assert first._proxy is not None
            (call,) = first._proxy.calls
            request = f"GET http://{authority}/x HTTP/1.1\r\n\r\n"
            answer = await shell(
                policy(namespaces=False), root, [PYTHON, "-I", "-c", FOREIGN, call.path, request]
            )
            assert answer["stdout"] == "b''\n", answer.get("stderr")
            assert call.foreign >= 1  # another start's stale sweep may probe it too
            assert registry.opened == 0
        finally:
            await holder.force_kill()  # type: ignore[attr-defined]
            async with asyncio.timeout(BOUND):
                await holder.wait()  # type: ignore[attr-defined]
