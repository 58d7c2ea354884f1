"""Section 2: the MCP stdio server beside the reference filesystem server, twice.

Each figure is measured through two clients (see ``_clients``): the raw JSON-RPC
client (the server's own cost, no client library hiding it) and the ``mcp`` client
(what a Python host feels). All four sessions (two servers x two clients) stay open
for the whole section; each round runs one batch on every session, the order
rotating from round to round, so drift on the shared machine lands on all of them.
``read`` is compared with the peer's ``read_text_file`` and ``replace``
(digest-checked, fsynced) with the peer's ``write_file`` (temporary file + rename,
no fsync): the replace ratio includes the price of durability.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

from _clients import (
    CALL_TIMEOUT,
    CLIENT_KINDS,
    CLIENT_LABELS,
    PEER_NAME,
    Client,
    ClientKind,
    Side,
    connect_all,
    ours,
    peer,
)
from _harness import (
    KIB,
    Figure,
    Settings,
    Summary,
    Target,
    milliseconds,
    pending_reason,
    size_label,
    summarize,
    write_text,
)

SECTION: Final = "mcp"
SIZES: Final = (4 * KIB, 256 * KIB)
CONCURRENCY: Final = (1, 4)
OPERATIONS: Final = ("read", "replace")


def _target(name: str, *, most: float | None = None, least: float | None = None) -> Target:
    return Target(SECTION, name, most=most, least=least, source="issue 15")


TARGETS: Final = tuple(
    target
    for kind in CLIENT_KINDS
    for target in (
        _target(f"read 4 KiB c=1 latency ({CLIENT_LABELS[kind]})", most=1.3),
        _target(f"read 4 KiB c=4 throughput ({CLIENT_LABELS[kind]})", least=0.8),
        _target(f"read 256 KiB c=1 latency ({CLIENT_LABELS[kind]})", most=1.2),
    )
)
"""Issue 15's bounds, through each client (the raw client's figure is the server's own)."""


@final
@dataclass(slots=True)
class Series:
    """Latencies (seconds) and batch throughputs (calls/second) of one session."""

    latencies: list[float] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)


async def _timed_call(client: Client, tool: str, arguments: dict[str, object]) -> object:
    async with asyncio.timeout(CALL_TIMEOUT):
        return await client.call_tool(tool, arguments)


async def batch(
    side: Side,
    client: Client,
    operation: str,
    size: int,
    concurrency: int,
    calls: int,
    series: Series | None,
    contents: tuple[str, str],
) -> None:
    """``calls`` operations spread over ``concurrency`` workers, each on its own file."""
    per_worker = max(1, calls // concurrency)
    clock = time.perf_counter_ns
    latencies: list[float] = []

    async def worker(index: int) -> None:
        relative = f"{operation}-{size}-{index}.txt"
        for turn in range(per_worker):
            if operation == "read":
                tool, arguments = side.read_tool, side.read_arguments(relative)
            else:
                tool = side.write_tool
                arguments = side.write_arguments(relative, contents[turn % 2])
            start = clock()
            structured = await _timed_call(client, tool, arguments)
            latencies.append((clock() - start) / 1e9)
            if operation == "replace":
                side.remember(relative, structured)

    start = clock()
    async with asyncio.TaskGroup() as group:
        for index in range(concurrency):
            group.create_task(worker(index))
    wall = (clock() - start) / 1e9
    if series is not None:
        series.latencies += latencies
        series.throughputs.append(per_worker * concurrency / wall)


def prepare(side: Side) -> None:
    """The files every worker of every series uses, with their first digests."""
    for operation in OPERATIONS:
        for size in SIZES:
            for index in range(max(CONCURRENCY)):
                relative = f"{operation}-{size}-{index}.txt"
                data = write_text(side.root / relative, size)
                side.digests[relative] = hashlib.sha256(data).hexdigest()


def series_figures(
    name: str, subject: Series | None, reference: Series | None, reason: str | None
) -> list[Figure]:
    """Latency and throughput figures of one (operation, size, concurrency, client)."""

    def latency(series: Series | None) -> Summary | None:
        return milliseconds(series.latencies) if series and series.latencies else None

    def throughput(series: Series | None) -> Summary | None:
        return summarize(series.throughputs, "calls/s") if series and series.throughputs else None

    missing = reason if subject is None or reference is None else None
    return [
        Figure(
            SECTION,
            name.format(what="latency"),
            latency(subject),
            "peer",
            PEER_NAME,
            latency(reference),
            unavailable=missing,
        ),
        Figure(
            SECTION,
            name.format(what="throughput"),
            throughput(subject),
            "peer",
            PEER_NAME,
            throughput(reference),
            higher_is_better=True,
            unavailable=missing,
        ),
    ]


def figure_name(operation: str, size: int, concurrency: int, kind: ClientKind) -> str:
    """``read 4 KiB c=1 {what} (raw JSON-RPC client)``; ``{what}`` is latency or throughput."""
    return f"{operation} {size_label(size)} c={concurrency} {{what}} ({CLIENT_LABELS[kind]})"


async def _measure(
    sides: tuple[Side, Side],
    sessions: dict[tuple[int, ClientKind], Client | str],
    settings: Settings,
) -> list[Figure]:
    figures: list[Figure] = []
    slots = [(index, kind) for kind in CLIENT_KINDS for index in range(len(sides))]
    for operation in OPERATIONS:
        for size in SIZES:
            line = ("x" * 63 + "\n") * (size // 64)
            contents = (line, line.upper())
            for concurrency in CONCURRENCY:
                collected: dict[tuple[int, ClientKind], Series | None] = {}
                reasons: dict[ClientKind, list[str]] = {kind: [] for kind in CLIENT_KINDS}
                for slot in slots:
                    state = sessions[slot]
                    collected[slot] = None if isinstance(state, str) else Series()
                    if isinstance(state, str):
                        reasons[slot[1]].append(state)
                for round_index in range(settings.mcp_batches + 1):
                    shift = round_index % len(slots)
                    for slot in slots[shift:] + slots[:shift]:
                        series, client = collected[slot], sessions[slot]
                        if series is None or isinstance(client, str):
                            continue
                        try:
                            await batch(
                                sides[slot[0]],
                                client,
                                operation,
                                size,
                                concurrency,
                                settings.mcp_batch_calls,
                                series if round_index > 0 else None,
                                contents,
                            )
                        except Exception as error:  # noqa: BLE001 - reported as unavailable
                            collected[slot] = None
                            reasons[slot[1]].append(pending_reason(error))
                for kind in CLIENT_KINDS:
                    figures += series_figures(
                        figure_name(operation, size, concurrency, kind),
                        collected[0, kind],
                        collected[1, kind],
                        "; ".join(reasons[kind]) or None,
                    )
    return figures


async def _run(sides: tuple[Side, Side], settings: Settings) -> list[Figure]:
    async with AsyncExitStack() as stack:
        sessions = await connect_all(stack, sides, CLIENT_KINDS)
        return await _measure(sides, sessions, settings)


def run(settings: Settings) -> list[Figure]:
    """Every figure of section 2."""
    base = Path(tempfile.mkdtemp(prefix="spice-bench-mcp-")).resolve()
    try:
        (base / "ours").mkdir()
        (base / "peer").mkdir()
        sides = (ours(base / "ours"), peer(base / "peer"))
        for side in sides:
            prepare(side)
        return asyncio.run(_run(sides, settings))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    from _harness import main_of

    sys.exit(main_of(run))
