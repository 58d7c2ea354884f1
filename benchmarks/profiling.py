"""Profile one figure with ``cProfile`` (stdlib; no profiler dependency).

Usage: ``python benchmarks/profiling.py FIGURE [--calls N] [--sort cumulative|tottime]
[--serve [--concurrency C]]`` where FIGURE is one of ``read-4k``, ``read-256k``,
``replace-4k``, ``replace-256k``, ``shell-true``, ``shell-1m``. It warms up, then profiles
N dispatched calls and prints the functions that cost most. With ``--serve`` the calls go
over MCP stdio (the raw JSON-RPC client of ``_clients``, C in flight, each on its own
file) to ``spice-coding serve`` under cProfile (``_profiled_serve.py``: imports are done
before the profiler starts), and the server's profile is printed, first summed by where
the time goes (the SDK and its stack, ours, the event loop, JSON, waits), then by function
(``read`` and ``replace`` figures only; the main thread only). ``start-serve`` and
``start-call`` print what the start-up imports cost, by top-level package
(``python -X importtime``); ``serve-timeline`` prints when a ``serve`` start finished
its imports and wrote its first two answers (3 starts, or ``--calls N``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from _harness import KIB, MIB, Probe, Unavailable, write_text
from bench_inprocess import Chain, Workbench, content_of

FIGURES: Final = ("read-4k", "read-256k", "replace-4k", "replace-256k", "shell-true", "shell-1m")
WARMUP: Final = 5
DEFAULT_CALLS: Final = 200
TOP: Final = 30
PROFILED_SERVE: Final = Path(__file__).resolve().parent / "_profiled_serve.py"


def _size(figure: str) -> int:
    return 256 * KIB if figure.endswith("256k") else 4 * KIB


def probe(bench: Workbench, figure: str) -> Probe:
    """The dispatched call that ``figure`` measures, ready to repeat."""
    if figure.startswith("read"):
        write_text(bench.root / "page.txt", _size(figure))
        reader = bench.dispatcher(("read",))

        async def read() -> None:
            # As in the harness: the content is parsed only to name a failure.
            result = await reader.dispatch(bench.calls.call("read", {"path": "page.txt"}))
            if result.is_error:
                content_of(result)

        return read
    if figure.startswith("replace"):
        first = write_text(bench.root / "target.txt", _size(figure))
        texts = (first.upper().decode("ascii"), first.decode("ascii"))
        chain = Chain(hashlib.sha256(first).hexdigest())
        replacer = bench.dispatcher(("replace",))

        async def replace() -> None:
            arguments: dict[str, object] = {
                "path": "target.txt",
                "content": texts[chain.turn % 2],
                "expected_sha256": chain.digest,
            }
            chain.turn += 1
            answer = content_of(await replacer.dispatch(bench.calls.call("replace", arguments)))
            digest = answer.get("sha256")
            if not isinstance(digest, str):
                raise Unavailable("failed: replace answered no sha256")
            chain.digest = digest

        return replace
    write_text(bench.root / "out.txt", MIB)
    argv = ["true"] if figure == "shell-true" else ["cat", "out.txt"]
    shell = bench.dispatcher(("shell",))

    async def run_shell() -> None:
        content_of(await shell.dispatch(bench.calls.call("shell", {"argv": argv})))

    return run_shell


async def _profile(bench: Workbench, figure: str, calls: int) -> cProfile.Profile:
    call = probe(bench, figure)
    for _ in range(WARMUP):
        await call()
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for _ in range(calls):
            await call()
        profiler.disable()
    finally:
        await bench.close()
    return profiler


async def _drive_server(
    root: Path, figure: str, calls: int, output: Path, concurrency: int = 1
) -> None:
    """Run ``spice-coding serve`` under cProfile and send it ``calls`` calls of ``figure``.

    The calls go through the raw JSON-RPC client (``_clients``), so the client costs
    the server nothing but the bytes it writes; ``concurrency`` workers, one file each.
    """
    from _clients import Client, open_client, ours  # noqa: PLC0415

    side = ours(root)
    side.arguments = [str(PROFILED_SERVE), str(output), *side.arguments]
    side.command = sys.executable
    size = _size(figure)
    texts: list[tuple[str, str]] = []
    chains: list[Chain] = []
    for index in range(concurrency):
        first = write_text(root / f"target-{index}.txt", size)
        texts.append((first.upper().decode("ascii"), first.decode("ascii")))
        chains.append(Chain(hashlib.sha256(first).hexdigest()))

    async def worker(client: Client, index: int, count: int) -> None:
        relative = f"target-{index}.txt"
        chain = chains[index]
        for _ in range(count):
            if figure.startswith("read"):
                await client.call_tool("read", {"path": relative})
                continue
            arguments: dict[str, object] = {
                "path": relative,
                "content": texts[index][chain.turn % 2],
                "expected_sha256": chain.digest,
            }
            chain.turn += 1
            structured = await client.call_tool("replace", arguments)
            if not isinstance(structured, dict) or not isinstance(structured.get("sha256"), str):
                raise Unavailable("failed: replace answered no sha256")
            chain.digest = structured["sha256"]

    async with open_client(side, "raw") as client:
        await client.list_tools()
        per_worker = max(1, (WARMUP + calls) // concurrency)
        async with asyncio.TaskGroup() as group:
            for index in range(concurrency):
                group.create_task(worker(client, index, per_worker))


WAITS: Final = ("poll", "posix.write", "posix.read", "SimpleQueue", "recv", "acquire")
"""Built-ins whose own time is mostly waiting: for I/O, or for another thread or process."""
BUILTIN_GROUPS: Final = (
    ("waits and system calls (epoll, pipe writes, thread wake-ups)", WAITS),
    ("pydantic", ("pydantic_core",)),
    ("json (stdlib, orjson)", ("orjson", "_json")),
)
FILE_GROUPS: Final = (
    ("mcp SDK", ("/mcp/", "/mcp_types/")),
    ("anyio", ("/anyio/",)),
    ("pydantic", ("/pydantic/", "/pydantic_core/")),
    ("opentelemetry (SDK hooks)", ("/opentelemetry/",)),
    ("ours: application (spice.agent.coding)", ("/spice/agent/coding/",)),
    ("ours: contract and tools", ("/spice/agent/",)),
    ("json (stdlib, orjson)", ("/json/",)),
    ("asyncio event loop", ("/asyncio/", "selectors.py", "threading.py", "/concurrent/")),
)
"""Where a function's own time is counted: the first group with a marker in its file (or,
for a built-in, in its name)."""


def _group_of(filename: str, function: str) -> str:
    builtin = filename == "~"
    for group, markers in BUILTIN_GROUPS if builtin else FILE_GROUPS:
        if any(marker in (function if builtin else filename) for marker in markers):
            return group
    return "other built-ins" if builtin else "other"


def grouped(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Own time (seconds) summed by group, largest first."""
    totals: dict[str, float] = {}
    table: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    table = stats.stats  # type: ignore[attr-defined]
    for (filename, _, function), (_, _, own, _, _) in table.items():
        name = _group_of(filename, function)
        totals[name] = totals.get(name, 0.0) + own
    return sorted(totals.items(), key=lambda item: -item[1])


STARTUP_IMPORTS: Final = {
    "serve": "import spice.agent.coding._cli, spice.agent.coding._mcp._stdio",
    "call": "import spice.agent.coding._cli",
}
"""What each start imports before it can answer (``serve``: the CLI and the MCP transport)."""


def import_profile(command: str) -> list[tuple[str, float]]:
    """Self time (ms) of every import ``command`` makes, summed by top-level package.

    Measured in a fresh child with ``python -X importtime`` (which itself adds some
    overhead); the total is what the imports cost before the first line of ours runs.
    """
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", STARTUP_IMPORTS[command]],
        capture_output=True,
        timeout=120,
        check=True,
    )
    totals: dict[str, float] = {}
    for line in done.stderr.decode().splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        top = name.strip().partition(".")[0]
        group = top if top not in sys.stdlib_module_names else "(standard library)"
        if top == "spice":
            group = "spice (ours)"
        totals[group] = totals.get(group, 0.0) + int(own) / 1000
    return sorted(totals.items(), key=lambda item: -item[1])


TIMELINE: Final = """
import sys, time
start = time.perf_counter()
marks = []
import spice.agent.coding._cli as cli
import spice.agent.coding._mcp._stdio as stdio
marks.append(("imports done", time.perf_counter()))
encode = stdio.frame
def frame(message):
    data = encode(message)
    marks.append((f"answer {len(marks)} written", time.perf_counter()))
    if len(marks) == 3:
        line = " | ".join(f"{name} at {(t - start) * 1e3:.1f} ms" for name, t in marks)
        sys.stderr.write("timeline: " + line + "\\n")
    return data
stdio.frame = frame
sys.exit(cli.main(sys.argv[1:]))
"""
"""``serve`` with a clock: when its imports are done and when its first two answers
(``initialize``, ``tools/list``) are written, from the interpreter's first line."""

HANDSHAKE: Final = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
    b'"2025-06-18","capabilities":{},"clientInfo":{"name":"timeline","version":"0"}}}\n'
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}\n'
)


def serve_timeline(root: Path) -> str:
    """One ``serve`` start: its timeline line (imports, then the two answers)."""
    done = subprocess.run(
        [sys.executable, "-c", TIMELINE, "--root", str(root), "serve"],
        input=HANDSHAKE,
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    for line in done.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("timeline: "):
            return line.removeprefix("timeline: ")
    return "no timeline (the server did not answer twice)"


def main(argv: list[str] | None = None) -> int:
    """Profile the chosen figure and print the top functions."""
    parser = argparse.ArgumentParser(description="profile one in-process figure")
    parser.add_argument(
        "figure",
        choices=(*FIGURES, *(f"start-{c}" for c in STARTUP_IMPORTS), "serve-timeline"),
    )
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--sort", choices=("cumulative", "tottime"), default="tottime")
    parser.add_argument("--serve", action="store_true", help="profile the MCP server side")
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight (--serve)")
    options = parser.parse_args(argv)
    if options.figure == "serve-timeline":
        with tempfile.TemporaryDirectory(prefix="spice-timeline-") as scratch:
            for _ in range(options.calls if options.calls != DEFAULT_CALLS else 3):
                print(serve_timeline(Path(scratch)))
        return 0
    if options.figure.startswith("start-"):
        rows = import_profile(options.figure.removeprefix("start-"))
        total = sum(ms for _, ms in rows)
        print(f"imports of `{options.figure}`: {total:.0f} ms (python -X importtime, self time)")
        for name, ms in rows[:TOP]:
            print(f"  {ms / total:6.1%}  {ms:8.1f} ms  {name}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="spice-profile-")).resolve()
    out = io.StringIO()
    try:
        if options.serve:
            if options.figure.startswith("shell"):
                parser.error("--serve profiles read and replace figures only")
            output = root.parent / f"{root.name}.prof"
            asyncio.run(
                _drive_server(root, options.figure, options.calls, output, options.concurrency)
            )
            stats = pstats.Stats(str(output), stream=out)
            output.unlink()
            total = sum(seconds for _, seconds in grouped(stats)) or 1.0
            print(f"server main thread, own time by group ({options.calls} calls):")
            for name, seconds in grouped(stats):
                per_call = seconds / options.calls * 1e6
                print(f"  {seconds / total:6.1%}  {per_call:8.1f} us/call  {name}")
        else:
            profiler = asyncio.run(_profile(Workbench(root), options.figure, options.calls))
            stats = pstats.Stats(profiler, stream=out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    stats.strip_dirs().sort_stats(options.sort).print_stats(TOP)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
