"""Contract 13.3: authenticated clients while slow clients reconnect (round 5's R6-B1).

One ``serve --transport http`` on loopback (the console script). Authenticated clients
(``IN_FLIGHT`` at once, raw ``httpx2`` with kept-alive connections) send ``tools/list``
POSTs from 127.0.0.1; the figure is their requests per second while ``SLOW`` one-byte
connections from the same address are open and reopened as soon as the server closes
them (threads of their own, blocking sockets), beside the same without them. Rounds
alternate which goes first. The contract asks for at least ``FLOOR`` of the rate without.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

from _harness import Figure, Settings, Unavailable, main_of, pending_reason, summarize
from bench_http import START_SECONDS, _start_http, _token_file

SECTION: Final = "slow-clients"
SLOW: Final = 64
"""One-byte connections that reconnect when closed, all from 127.0.0.1."""
IN_FLIGHT: Final = 8
REQUESTS: Final = 400
"""Requests of one round (the full run); ``--quick`` makes a quarter."""
FLOOR: Final = 0.8
"""The rate with the slow clients, at least this share of the rate without (the issue)."""
BODY: Final = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})


class _Slow:
    """``SLOW`` reconnecting one-byte connections until ``stop``."""

    def __init__(self, port: int) -> None:
        self.port, self.stop = port, threading.Event()
        self.connects = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._hold, daemon=True) for _ in range(SLOW)]

    def _hold(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    sock.sendall(b"P")
                    with self._lock:
                        self.connects += 1
                    sock.settimeout(0.2)
                    while not self.stop.is_set():
                        try:
                            if not sock.recv(100):
                                break
                        except TimeoutError:
                            continue
            except OSError:
                self.stop.wait(0.05)

    def __enter__(self) -> _Slow:
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + START_SECONDS
        while self.connects < SLOW and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


async def _rate(url: str, token: str, requests: int) -> float:
    import httpx2  # noqa: PLC0415

    headers = {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    refused = 0
    async with httpx2.AsyncClient(
        timeout=60, limits=httpx2.Limits(max_connections=IN_FLIGHT), headers=headers
    ) as http:

        async def worker(count: int) -> None:
            nonlocal refused
            for _ in range(count):
                answer = await http.post(url, content=BODY)
                refused += answer.status_code != 200

        started = time.perf_counter()
        await asyncio.gather(*(worker(requests // IN_FLIGHT) for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - started
    if refused:
        raise Unavailable(f"{refused} authenticated requests were refused")
    return requests // IN_FLIGHT * IN_FLIGHT / elapsed


async def measure(settings: Settings) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="spice-bench-slow-"))
    requests = REQUESTS // 4 if settings.quick else REQUESTS
    try:
        root = base / "tree"
        root.mkdir()
        tokens, token = _token_file(base)
        process, url = await _start_http(root, tokens)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        rates: dict[str, list[float]] = {"with": [], "without": []}
        try:
            await _rate(url, token, IN_FLIGHT * settings.warmup)
            for round_number in range(max(2, settings.mcp_batches)):
                order = ["without", "with"] if round_number % 2 == 0 else ["with", "without"]
                for name in order:
                    if name == "with":
                        with _Slow(port) as slow:
                            rates[name].append(await _rate(url, token, requests))
                            if slow.connects < SLOW:
                                raise Unavailable("the slow clients did not connect")
                    else:
                        rates[name].append(await _rate(url, token, requests))
        finally:
            process.terminate()
            async with asyncio.timeout(START_SECONDS):
                await process.wait()
        return rates
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(settings: Settings) -> list[Figure]:
    """Requests per second with the slow clients, beside the same without them."""
    name = f"tools/list, {IN_FLIGHT} in flight, while {SLOW} slow clients reconnect: requests/s"
    try:
        rates = asyncio.run(measure(settings))
    except (Unavailable, OSError, TimeoutError) as failure:
        return [Figure(SECTION, name, None, "none", "", None, unavailable=pending_reason(failure))]
    return [
        Figure(
            SECTION,
            name,
            summarize(rates["with"], "requests/s"),
            "peer",
            "the same server without them",
            summarize(rates["without"], "requests/s"),
            higher_is_better=True,
            notes=(f"the issue asks for at least {FLOOR}x; all from 127.0.0.1",),
        )
    ]


if __name__ == "__main__":
    sys.exit(main_of(run))
