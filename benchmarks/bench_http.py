"""Contract 11.2: the MCP server over streamable HTTP against the same server over stdio.

Both servers run side by side for the whole section, driven by the ``mcp`` SDK's own
client (``Client`` over ``stdio_client`` and over ``streamable_http_client`` with a
bearer token), so the ratio is what a Python host feels: JSON-RPC over HTTP (one POST a
call in the 2026-07-28 era the client picks), the token check, the body check, the SSE
answer. Rounds alternate which transport goes first. Figures:

- ``read`` of a 4 KiB file, 1 call in flight: latency, HTTP / stdio (lower is better);
- the same with 8 calls in flight: throughput, HTTP / stdio (higher is better);
- 64 concurrent 1 MiB ``replace`` creates (raw ``httpx2``, one connection each): the HTTP
  server's peak RSS growth over its idle RSS (no reference: a bound, ``GROWTH_BOUND_MIB``).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from _harness import (
    KIB,
    MIB,
    Figure,
    Settings,
    Unavailable,
    main_of,
    milliseconds,
    pending_reason,
    spice_coding,
    summarize,
    write_text,
)

if TYPE_CHECKING:
    from mcp import Client

SECTION: Final = "http"
READ_BYTES: Final = 4 * KIB
IN_FLIGHT: Final = 8
LOAD_REQUESTS: Final = 64
LOAD_BYTES: Final = 1 * MIB
GROWTH_BOUND_MIB: Final = 512
"""The HTTP server's peak RSS growth over idle under 64 concurrent 1 MiB requests is
bounded by the body bound and the connection cap; this is the figure's bound."""
START_SECONDS: Final = 60.0
_DRAINS: set[asyncio.Future[bytes]] = set()
LISTENING: Final = b"listening on "


def _token_file(directory: Path) -> tuple[Path, str]:
    import hashlib  # noqa: PLC0415

    token = secrets.token_urlsafe(32)
    path = directory / "tokens"
    path.write_text(f"bench shell {hashlib.sha256(token.encode()).hexdigest()}\n")
    path.chmod(0o600)
    return path, token


async def _start_http(root: Path, tokens: Path) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        str(spice_coding()), "serve", "--transport", "http", "--port", "0",
        "--root", str(root), "--token-file", str(tokens),
        "--max-calls-per-minute", "1000000", "--max-concurrent-calls", "1024",
        "--audit-log", str(tokens.parent / "audit.jsonl"),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    async with asyncio.timeout(START_SECONDS):
        while line := await process.stderr.readline():
            if LISTENING in line:
                url = line.split(LISTENING, 1)[1].strip().decode()
                _DRAINS.add(asyncio.ensure_future(process.stderr.read()))  # keep the pipe drained
                return process, url
    raise Unavailable("the HTTP server did not start")


def _vm(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / KIB
    raise Unavailable(f"/proc/PID/status has no {field}")


async def _latencies(client: Client, calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        result = await client.call_tool("read", {"path": "page.txt"})
        samples.append(time.perf_counter() - started)
        if result.is_error:
            raise Unavailable("a read failed")
    return samples


async def _throughput(client: Client, calls: int) -> float:
    async def worker(count: int) -> None:
        for _ in range(count):
            await client.call_tool("read", {"path": "page.txt"})

    started = time.perf_counter()
    await asyncio.gather(*(worker(calls // IN_FLIGHT) for _ in range(IN_FLIGHT)))
    return (calls // IN_FLIGHT * IN_FLIGHT) / (time.perf_counter() - started)


async def _load(url: str, token: str, pid: int) -> tuple[float, float]:
    """Idle RSS and peak RSS growth (MiB) under 64 concurrent 1 MiB replace creates."""
    import httpx2  # noqa: PLC0415

    headers = {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    content = "x" * LOAD_BYTES
    idle = _vm(pid, "VmRSS")
    peak_before = _vm(pid, "VmHWM")

    async def one(index: int) -> int:
        body = {
            "jsonrpc": "2.0",
            "id": index,
            "method": "tools/call",
            "params": {
                "name": "replace",
                "arguments": {"path": f"load/{index}.txt", "content": content, "create": True},
            },
        }
        async with httpx2.AsyncClient(timeout=300) as http:
            response = await http.post(url, content=json.dumps(body), headers=headers)
        return response.status_code

    statuses = await asyncio.gather(*(one(i) for i in range(LOAD_REQUESTS)))
    if any(status != 200 for status in statuses):
        raise Unavailable("a load request was refused")
    return idle, max(0.0, _vm(pid, "VmHWM") - max(idle, peak_before))


async def measure(settings: Settings) -> dict[str, Any]:
    import httpx2  # noqa: PLC0415
    from mcp import Client, StdioServerParameters, stdio_client  # noqa: PLC0415
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

    base = Path(tempfile.mkdtemp(prefix="spice-bench-http-"))
    try:
        root = base / "tree"
        (root / "load").mkdir(parents=True)
        write_text(root / "page.txt", READ_BYTES)
        tokens, token = _token_file(base)
        process, url = await _start_http(root, tokens)
        try:
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=httpx2.Timeout(60, read=300),
                        limits=httpx2.Limits(max_connections=IN_FLIGHT * 2),
                    )
                )
                over_http = await stack.enter_async_context(
                    Client(streamable_http_client(url, http_client=http))
                )
                errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115, ASYNC230 - /dev/null
                params = StdioServerParameters(
                    command=str(spice_coding()), args=["serve", "--root", str(root)]
                )
                over_stdio = await stack.enter_async_context(
                    Client(stdio_client(params, errlog=errlog))
                )
                clients = {"http": over_http, "stdio": over_stdio}
                for client in clients.values():
                    await _latencies(client, settings.warmup)
                latency: dict[str, list[float]] = {"http": [], "stdio": []}
                rate: dict[str, list[float]] = {"http": [], "stdio": []}
                calls = settings.mcp_batch_calls
                for round_number in range(settings.mcp_batches):
                    order = ["http", "stdio"] if round_number % 2 == 0 else ["stdio", "http"]
                    for name in order:
                        latency[name] += await _latencies(clients[name], calls)
                        rate[name].append(await _throughput(clients[name], calls))
            idle, growth = await _load(url, token, process.pid)
        finally:
            process.terminate()
            async with asyncio.timeout(START_SECONDS):
                await process.wait()
        return {"latency": latency, "rate": rate, "idle": idle, "growth": growth}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(settings: Settings) -> list[Figure]:
    """HTTP / stdio for read latency and throughput; RSS growth under 64 x 1 MiB."""
    try:
        measured = asyncio.run(measure(settings))
    except (Unavailable, OSError, TimeoutError) as failure:
        reason = pending_reason(failure)
        names = (
            f"read {READ_BYTES // KIB} KiB, 1 in flight: latency",
            f"read {READ_BYTES // KIB} KiB, {IN_FLIGHT} in flight: calls/s",
            f"{LOAD_REQUESTS} concurrent 1 MiB replace over HTTP: peak RSS growth",
        )
        return [
            Figure(SECTION, name, None, "none", "", None, unavailable=reason, ratio_applies=False)
            for name in names
        ]
    latency, rate = measured["latency"], measured["rate"]
    return [
        Figure(
            SECTION,
            f"read {READ_BYTES // KIB} KiB, 1 in flight: latency, HTTP beside stdio",
            milliseconds(latency["http"]),
            "peer",
            "the same server over stdio",
            milliseconds(latency["stdio"]),
            notes=("the mcp SDK's client on both; HTTP is 2026-07-28, one POST a call",),
        ),
        Figure(
            SECTION,
            f"read {READ_BYTES // KIB} KiB, {IN_FLIGHT} in flight: throughput, HTTP beside stdio",
            summarize(rate["http"], "calls/s"),
            "peer",
            "the same server over stdio",
            summarize(rate["stdio"], "calls/s"),
            higher_is_better=True,
        ),
        Figure(
            SECTION,
            f"{LOAD_REQUESTS} concurrent 1 MiB replace over HTTP: peak RSS growth over idle",
            summarize([measured["growth"]], "MiB"),
            "none",
            "the server's bound",
            None,
            ratio_applies=False,
            notes=(f"idle RSS {measured['idle']:.0f} MiB; bound {GROWTH_BOUND_MIB} MiB",),
        ),
    ]


if __name__ == "__main__":
    sys.exit(main_of(run))
