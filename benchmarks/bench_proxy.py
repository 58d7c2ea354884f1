r"""Section "proxy": the sandbox proxy's throughput against a direct connection (contract 11.1).

A source process sends ``TRANSFER_BYTES`` (100 MiB) on each connection to 127.0.0.1; a
client process reads it all, either straight from the source (the floor) or through a
call's proxy (its UNIX socket, ``CONNECT``, the tunnel), in rotation within one run.
The proxy runs in this process's event loop, as in the server; the source and the
client are processes of their own, so that none of them shares the proxy's interpreter.
The target: at most 1.2x the direct transfer's time.

A third probe in the same rotation is the floor of any relay on this machine: a bare
thread that ``splice``\s the same bytes from the source into the client's UNIX socket
with blocking calls, the proxy's send buffer on that socket, and no policy (its own
figure): what the proxy costs above it is its own (the ``CONNECT``, the policy, the
second direction's thread).

The tunnel is allowed as raw TCP (``127.0.0.1:PORT/tcp``): the source sends no TLS. A
TLS tunnel costs the same once its ClientHello is checked (the relay is the same).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_proxy.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import threading
from typing import Final

from _harness import Figure, Settings, Target, main_of, milliseconds, rotate, unavailable

from spice.agent.coding import PosixLauncher
from spice.agent.coding._netpolicy._domains import DomainPolicy, parse_patterns
from spice.agent.coding._posix._containment import resolve_containment
from spice.agent.coding._posix._net._proxy import Proxy
from spice.agent.coding._posix._net._relay import UNIX_SEND_BYTES
from spice.agent.process import Spec

SECTION: Final = "proxy"
TRANSFER_BYTES: Final = 100 * 1024 * 1024
NAME: Final = "100 MiB over loopback through the proxy"
BARE: Final = "100 MiB over loopback through a bare splice relay (any relay's floor)"
BARE_TCP: Final = "100 MiB through a bare splice relay with TCP on both sides"
CONTAINED_NAME: Final = "100 MiB from inside a contained call, through the bridge and the proxy"
TARGETS: Final = (
    Target(SECTION, NAME, most=1.2, source="issue 28"),
    Target(SECTION, CONTAINED_NAME, most=1.2, source="issue 37"),
)
REPEAT_FACTOR: Final = 3
"""The loopback transfers take ``slow_repeats`` times this many samples each: one takes
about 70 ms, and with 15 samples two runs of the same code differed by 0.4x (two shared
cores); 45 take about 10 s in all."""

SOURCE: Final = (
    "import socket, sys\n"
    "total = int(sys.argv[1])\n"
    "chunk = b'x' * (1 << 20)\n"
    "server = socket.create_server(('127.0.0.1', 0))\n"
    "print(server.getsockname()[1], flush=True)\n"
    "while True:\n"
    "    peer, _ = server.accept()\n"
    "    with peer:\n"
    "        sent = 0\n"
    "        while sent < total:\n"
    "            peer.sendall(chunk)\n"
    "            sent += len(chunk)\n"
)
"""Sends ``total`` bytes on each connection, then closes it."""

CLIENT: Final = (
    "import socket, sys\n"
    "total = int(sys.argv[1])\n"
    "buffer = bytearray(1 << 20)\n"
    "for line in sys.stdin:\n"
    "    kind, where, port = line.split()\n"
    "    if kind == 'direct':\n"
    "        s = socket.create_connection(('127.0.0.1', int(port)))\n"
    "    else:\n"
    "        s = socket.socket(socket.AF_UNIX)\n"
    "        s.connect(where)\n"
    "        s.sendall(f'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'.encode())\n"
    "        head = b''\n"
    "        while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "            byte = s.recv(1)\n"
    "            if not byte:\n"
    "                raise SystemExit('the proxy closed before its answer')\n"
    "            head += byte\n"
    "    got = 0\n"
    "    while got < total:\n"
    "        n = s.recv_into(buffer)\n"
    "        if not n:\n"
    "            break\n"
    "        got += n\n"
    "    s.close()\n"
    "    print(got, flush=True)\n"
)
"""Reads one whole transfer per line of input (``direct - PORT`` or ``proxy PATH PORT``)."""


def _bare_relay(path: str | None, port: int) -> socket.socket:
    """A thread that serves ``CONNECT`` on ``path`` with blocking ``splice`` and no checks
    (the client's side gets the proxy's send buffer, so that only the policy differs).
    ``path`` ``None``: a TCP port on the loopback instead, serving without ``CONNECT``
    (the client's side a TCP socket, as a contained command's is)."""
    if path is None:
        listener = socket.create_server(("127.0.0.1", 0))
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                with client, socket.create_connection(("127.0.0.1", port)) as upstream:
                    if path is not None:
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SEND_BYTES)
                        _answer_connect(client)
                    read_end, write_end = os.pipe()
                    try:
                        while taken := os.splice(upstream.fileno(), write_end, 1 << 18):
                            while taken:
                                taken -= os.splice(read_end, client.fileno(), taken)
                    finally:
                        os.close(read_end)
                        os.close(write_end)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def _answer_connect(client: socket.socket) -> None:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = client.recv(1)
        if not byte:
            return
        head += byte
    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")


TIMED: Final = (
    "import socket, sys, time\n"
    "total, port = int(sys.argv[1]), int(sys.argv[2])\n"
    "buffer = bytearray(1 << 20)\n"
    "start = time.perf_counter()\n"
    "if sys.argv[3] == 'direct':\n"
    "    s = socket.create_connection(('127.0.0.1', port))\n"
    "else:\n"
    "    s = socket.create_connection(('127.0.0.1', 3128))\n"
    "    s.sendall(f'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'.encode())\n"
    "    head = b''\n"
    "    while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "        byte = s.recv(1)\n"
    "        if not byte:\n"
    "            raise SystemExit('the proxy closed before its answer')\n"
    "        head += byte\n"
    "got = 0\n"
    "while got < total:\n"
    "    n = s.recv_into(buffer)\n"
    "    if not n:\n"
    "        break\n"
    "    got += n\n"
    "print(time.perf_counter() - start if got == total else -1)\n"
)
"""One timed transfer (its own clock: a contained start is not counted)."""
PYTHON: Final = os.path.realpath(sys.executable)
CONTAINED: Final = CONTAINED_NAME


def _made(path: str) -> str:
    os.mkdir(path)
    return path


class _Collect:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


async def _contained(settings: Settings, port: int, scratch: str) -> Figure:
    """The whole path a contained command's transfer takes, beside the same client direct."""
    root = _made(os.path.join(scratch, "root"))
    domains = DomainPolicy(parse_patterns([f"127.0.0.1:{port}/tcp"]), allow_private=True)
    containment = resolve_containment("workspace", root=root, domains=domains)
    if not containment.proxied:
        return unavailable(SECTION, CONTAINED, "no namespaces here (the proxy needs them)")
    launcher = PosixLauncher.build(containment, root)
    python = PYTHON

    async def contained() -> float:
        out = _Collect()
        argv = ("-I", "-c", TIMED, str(TRANSFER_BYTES), str(port), "proxy")
        spec = Spec(python, argv, root, ("PATH=/usr/bin:/bin",), b"", out, _Collect())
        process = await launcher.start(spec)
        await process.wait_exit()
        await process.wait()
        return float(out.data)

    async def direct() -> float:
        child = await asyncio.create_subprocess_exec(
            python,
            "-I",
            "-c",
            TIMED,
            str(TRANSFER_BYTES),
            str(port),
            "direct",
            stdout=asyncio.subprocess.PIPE,
        )
        said, _ = await child.communicate()
        return float(said)

    inside: list[float] = []
    straight: list[float] = []
    for round_index in range(settings.warmup + settings.slow_repeats):
        if round_index % 2:  # which goes first alternates
            seconds_inside = await contained()
            seconds_straight = await direct()
        else:
            seconds_straight = await direct()
            seconds_inside = await contained()
        if min(seconds_inside, seconds_straight) < 0:
            raise RuntimeError("a transfer ended early")
        if round_index >= settings.warmup:
            inside.append(seconds_inside)
            straight.append(seconds_straight)
    return Figure(
        SECTION,
        CONTAINED,
        milliseconds(inside),
        "floor",
        "the same client, uncontained, direct",
        milliseconds(straight),
        notes=("each transfer timed by its client (a contained start is not counted)",),
    )


async def _measure(settings: Settings) -> tuple[Figure, ...]:
    if not sys.platform.startswith("linux"):
        reason = "the proxy runs on the namespace path (Linux)"
        return tuple(
            unavailable(SECTION, name, reason) for name in (NAME, BARE, BARE_TCP, CONTAINED)
        )
    source = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", SOURCE, str(TRANSFER_BYTES), stdout=asyncio.subprocess.PIPE
    )
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        CLIENT,
        str(TRANSFER_BYTES),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert source.stdout is not None
    assert client.stdin is not None
    assert client.stdout is not None
    port = int(await source.stdout.readline())
    proxy = Proxy(DomainPolicy(parse_patterns([f"127.0.0.1:{port}/tcp"]), allow_private=True))
    call = await proxy.open_call()
    stdin, stdout = client.stdin, client.stdout
    scratch = tempfile.mkdtemp(prefix="spice-bench-proxy-")
    bare_path = os.path.join(scratch, "bare.sock")
    bare = _bare_relay(bare_path, port)
    bare_tcp = _bare_relay(None, port)
    tcp_port = bare_tcp.getsockname()[1]

    def transfer(line: str) -> object:
        async def probe() -> None:
            stdin.write(line.encode())
            await stdin.drain()
            if int(await stdout.readline()) != TRANSFER_BYTES:
                raise RuntimeError("a transfer ended early")

        return probe

    try:
        direct, proxied, bare_relay, tcp_relay = await rotate(
            [
                transfer(f"direct - {port}\n"),  # type: ignore[list-item]
                transfer(f"proxy {call.path} {port}\n"),  # type: ignore[list-item]
                transfer(f"proxy {bare_path} {port}\n"),  # type: ignore[list-item]
                transfer(f"direct - {tcp_port}\n"),  # type: ignore[list-item]
            ],
            settings.warmup,
            settings.slow_repeats * REPEAT_FACTOR,
        )
        whole = await _contained(settings, port, scratch)
    finally:
        await call.close()
        bare.close()
        bare_tcp.close()
        with contextlib.suppress(OSError):
            os.unlink(bare_path)
        shutil.rmtree(scratch, ignore_errors=True)
        for process in (client, source):
            process.kill()
            await process.wait()
    return (
        Figure(
            SECTION,
            NAME,
            milliseconds(proxied),
            "floor",
            "direct loopback connection",
            milliseconds(direct),
            notes=(
                "client and source in processes of their own; the proxy in this event loop",
                "the in-namespace bridge (the supervisor's relay thread) is not in this path",
            ),
        ),
        Figure(
            SECTION,
            BARE,
            milliseconds(bare_relay),
            "floor",
            "direct loopback connection",
            milliseconds(direct),
            notes=("a thread of blocking splice calls, no policy: what any relay costs here",),
        ),
        Figure(
            SECTION,
            BARE_TCP,
            milliseconds(tcp_relay),
            "floor",
            "direct loopback connection",
            milliseconds(direct),
            notes=(
                "the same relay, the client connected over TCP as a contained command is:",
                "the floor of the whole path, whatever relays it",
            ),
        ),
        whole,
    )


def run(settings: Settings) -> list[Figure]:
    """The section's figure."""
    return list(asyncio.run(_measure(settings)))


if __name__ == "__main__":
    raise SystemExit(main_of(run))
