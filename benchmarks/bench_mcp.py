"""Sections 2 and 3b: the MCP stdio server beside the reference filesystem server.

Both servers are driven by the same ``mcp`` client (``ClientSession`` over
``stdio_client``), each over its own temporary root, with batches alternating
between them. ``read`` is compared with the peer's ``read_text_file`` and
``replace`` (digest-checked, fsynced) with the peer's ``write_file`` (temporary
file + rename, no fsync): the replace ratio includes the price of durability.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO, final

import anyio
from _harness import (
    KIB,
    PEER_ENTRY,
    Figure,
    Settings,
    Summary,
    Unavailable,
    milliseconds,
    pending_reason,
    spice_coding,
    summarize,
    write_text,
)
from bench_inprocess import size_label
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

SECTION: Final = "mcp"
STARTUP_SECTION: Final = "startup"
SIZES: Final = (4 * KIB, 256 * KIB)
CONCURRENCY: Final = (1, 4)
CONNECT_TIMEOUT: Final = 30.0
CALL_TIMEOUT: Final = 30.0
PEER_NAME: Final = "@modelcontextprotocol/server-filesystem"

Arguments = dict[str, Any]


@final
@dataclass(slots=True)
class Side:
    """One server under test: how to start it and how to phrase its two operations."""

    label: str
    root: Path
    command: str
    arguments: list[str]
    read_tool: str
    write_tool: str
    absolute_paths: bool
    digests: dict[str, str] = field(default_factory=dict)
    session: ClientSession | None = None
    error: str | None = None

    def parameters(self) -> StdioServerParameters:
        """How ``stdio_client`` starts this server."""
        return StdioServerParameters(
            command=self.command,
            args=self.arguments,
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            cwd=str(self.root),
        )

    def path(self, relative: str) -> str:
        """The path argument this server wants for ``relative``."""
        return str(self.root / relative) if self.absolute_paths else relative

    def read_arguments(self, relative: str) -> Arguments:
        """Arguments of a read of the whole file ``relative``."""
        return {"path": self.path(relative)}

    def write_arguments(self, relative: str, text: str) -> Arguments:
        """Arguments of a replace of ``relative`` with ``text``."""
        if self.absolute_paths:
            return {"path": self.path(relative), "content": text}
        return {"path": relative, "content": text, "expected_sha256": self.digests[relative]}

    def remember(self, relative: str, structured: object) -> None:
        """Keep the digest our replace answered, for the next call's ``expected_sha256``."""
        if self.absolute_paths:
            return
        if not isinstance(structured, dict) or not isinstance(structured.get("sha256"), str):
            raise Unavailable("failed: replace answered no sha256")
        self.digests[relative] = structured["sha256"]


def ours(root: Path) -> Side:
    """``spice-coding --root ROOT serve``."""
    return Side(
        label="spice-coding serve",
        root=root,
        command=str(spice_coding()),
        arguments=["--root", str(root), "serve"],
        read_tool="read",
        write_tool="replace",
        absolute_paths=False,
    )


def peer(root: Path) -> Side:
    """The reference server: ``node .../server-filesystem/dist/index.js ROOT``."""
    return Side(
        label=PEER_NAME,
        root=root,
        command=shutil.which("node") or "node",
        arguments=[str(PEER_ENTRY), str(root)],
        read_tool="read_text_file",
        write_tool="write_file",
        absolute_paths=True,
    )


def peer_missing() -> str | None:
    """Why the peer cannot run, or ``None``."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not PEER_ENTRY.is_file():
        return "peer not installed: run `npm ci --prefix benchmarks`"
    return None


@asynccontextmanager
async def connected(side: Side, errlog: TextIO) -> AsyncIterator[ClientSession]:
    """A ready session (initialized, tools listed) with ``side``'s server."""
    async with (
        stdio_client(side.parameters(), errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        with anyio.fail_after(CONNECT_TIMEOUT):
            await session.initialize()
            await session.list_tools()
        yield session


async def call(side: Side, tool: str, arguments: Arguments) -> object:
    """One tool call; a failed call stops the figure with a fixed reason."""
    session = side.session
    if session is None:
        raise Unavailable(side.error or "not connected")
    with anyio.fail_after(CALL_TIMEOUT):
        result = await session.call_tool(tool, arguments)
    if result.is_error:
        code = (
            result.structured_content.get("code")
            if isinstance(result.structured_content, dict)
            else None
        )
        raise Unavailable(f"failed: {side.label} {tool} answered an error ({code})")
    return result.structured_content


@final
@dataclass(slots=True)
class Series:
    """Latencies (seconds) and batch throughputs (calls/second) of one side."""

    latencies: list[float] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)


async def batch(
    side: Side,
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
            structured = await call(side, tool, arguments)
            latencies.append((clock() - start) / 1e9)
            if operation == "replace":
                side.remember(relative, structured)

    start = clock()
    async with anyio.create_task_group() as group:
        for index in range(concurrency):
            group.start_soon(worker, index)
    wall = (clock() - start) / 1e9
    if series is not None:
        series.latencies += latencies
        series.throughputs.append(per_worker * concurrency / wall)


def prepare(side: Side) -> None:
    """The files every worker of every series uses, with their first digests."""
    for operation in ("read", "replace"):
        for size in SIZES:
            for index in range(max(CONCURRENCY)):
                relative = f"{operation}-{size}-{index}.txt"
                data = write_text(side.root / relative, size)
                side.digests[relative] = hashlib.sha256(data).hexdigest()


def series_figures(
    name: str, subject: Series | None, reference: Series | None, reason: str | None
) -> list[Figure]:
    """Latency and throughput figures of one (operation, size, concurrency)."""

    def latency(series: Series | None) -> Summary | None:
        return milliseconds(series.latencies) if series and series.latencies else None

    def throughput(series: Series | None) -> Summary | None:
        return summarize(series.throughputs, "calls/s") if series and series.throughputs else None

    return [
        Figure(
            SECTION,
            f"{name} latency",
            latency(subject),
            "peer",
            PEER_NAME,
            latency(reference),
            unavailable=reason if subject is None or reference is None else None,
        ),
        Figure(
            SECTION,
            f"{name} throughput",
            throughput(subject),
            "peer",
            PEER_NAME,
            throughput(reference),
            higher_is_better=True,
            unavailable=reason if subject is None or reference is None else None,
        ),
    ]


async def _connect(stack: AsyncExitStack, side: Side, errlog: TextIO) -> None:
    try:
        side.session = await stack.enter_async_context(connected(side, errlog))
    except Exception as error:  # noqa: BLE001 - a server that cannot start is reported
        side.error = f"{side.label} did not start: {pending_reason(error)}"


async def _run(sides: tuple[Side, Side], settings: Settings, errlog: TextIO) -> list[Figure]:
    async with AsyncExitStack() as stack:
        for side in sides:
            if side.error is None:
                await _connect(stack, side, errlog)
        return await _measure(sides, settings)


def run(settings: Settings) -> list[Figure]:
    """Every figure of section 2."""
    base = Path(tempfile.mkdtemp(prefix="spice-bench-mcp-")).resolve()
    try:
        (base / "ours").mkdir()
        (base / "peer").mkdir()
        sides = (ours(base / "ours"), peer(base / "peer"))
        sides[1].error = peer_missing()
        for side in sides:
            prepare(side)
        with open(os.devnull, "w", encoding="utf-8") as errlog:
            return anyio.run(_run, sides, settings, errlog)
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def _measure(sides: tuple[Side, Side], settings: Settings) -> list[Figure]:
    figures: list[Figure] = []
    for operation in ("read", "replace"):
        for size in SIZES:
            line = ("x" * 63 + "\n") * (size // 64)
            contents = (line, line.upper())
            for concurrency in CONCURRENCY:
                collected: list[Series | None] = [
                    None if side.session is None else Series() for side in sides
                ]
                reasons = [side.error for side in sides if side.error is not None]
                for round_index in range(settings.mcp_batches + 1):
                    order = (0, 1) if round_index % 2 == 0 else (1, 0)
                    for which in order:
                        side, series = sides[which], collected[which]
                        if series is None:
                            continue
                        try:
                            await batch(
                                side,
                                operation,
                                size,
                                concurrency,
                                settings.mcp_batch_calls,
                                series if round_index > 0 else None,
                                contents,
                            )
                        except Exception as error:  # noqa: BLE001 - reported as unavailable
                            collected[which] = None
                            reasons.append(pending_reason(error))
                figures += series_figures(
                    f"{operation} {size_label(size)} c={concurrency}",
                    collected[0],
                    collected[1],
                    "; ".join(reasons) or None,
                )
    return figures


async def time_to_tools(side: Side, errlog: TextIO) -> float:
    """Seconds from spawning ``side``'s server to its first ``tools/list`` answer."""
    start = time.perf_counter_ns()
    async with (
        stdio_client(side.parameters(), errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        with anyio.fail_after(CONNECT_TIMEOUT):
            await session.initialize()
            await session.list_tools()
        return (time.perf_counter_ns() - start) / 1e9


async def _startup(
    sides: tuple[Side, Side], settings: Settings, errlog: TextIO
) -> tuple[list[float], list[float], list[str | None]]:
    samples: tuple[list[float], list[float]] = ([], [])
    errors: list[str | None] = [None, peer_missing()]
    for index in range(settings.process_repeats + 1):
        for which in (0, 1) if index % 2 == 0 else (1, 0):
            if errors[which] is not None:
                continue
            try:
                elapsed = await time_to_tools(sides[which], errlog)
            except Exception as error:  # noqa: BLE001 - reported as unavailable
                errors[which] = f"{sides[which].label} did not start: {pending_reason(error)}"
                continue
            if index > 0:
                samples[which].append(elapsed)
    return samples[0], samples[1], errors


def startup(settings: Settings) -> list[Figure]:
    """Section 3b: ``serve`` time to the first ``tools/list`` answer beside the peer's."""
    base = Path(tempfile.mkdtemp(prefix="spice-bench-start-")).resolve()
    try:
        with open(os.devnull, "w", encoding="utf-8") as errlog:
            subject, reference, errors = anyio.run(
                _startup, (ours(base), peer(base)), settings, errlog
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return [
        Figure(
            STARTUP_SECTION,
            "serve: spawn to first tools/list answer",
            milliseconds(subject) if errors[0] is None and subject else None,
            "peer",
            PEER_NAME,
            milliseconds(reference) if errors[1] is None and reference else None,
            unavailable="; ".join(e for e in errors if e) or None,
        )
    ]


def main() -> None:
    """Run sections 2 and 3b alone: ``python benchmarks/bench_mcp.py [--quick]``."""
    from _harness import FULL, QUICK  # noqa: PLC0415

    settings = QUICK if "--quick" in sys.argv else FULL
    for figure in run(settings) + startup(settings):
        print(figure.as_json())


if __name__ == "__main__":
    main()
