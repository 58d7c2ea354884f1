"""Profile one figure with ``cProfile`` (stdlib; no profiler dependency).

Usage: ``python benchmarks/profiling.py FIGURE [--calls N] [--sort cumulative|tottime]
[--serve]`` where FIGURE is one of ``read-4k``, ``read-256k``, ``replace-4k``,
``replace-256k``, ``shell-true``, ``shell-1m``. It warms up, then profiles N
dispatched calls and prints the functions that cost most. With ``--serve`` the
calls go over MCP stdio (the raw JSON-RPC client of ``_clients``) to ``spice-coding serve`` running
under ``python -m cProfile``, and the server's profile is printed (``read`` and
``replace`` figures only).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import pstats
import shutil
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


async def _drive_server(root: Path, figure: str, calls: int, output: Path) -> None:
    """Run ``spice-coding serve`` under cProfile and send it ``calls`` calls of ``figure``.

    The calls go through the raw JSON-RPC client (``_clients``), so the client costs
    the server nothing but the bytes it writes.
    """
    from _clients import open_client, ours  # noqa: PLC0415

    side = ours(root)
    side.arguments = ["-m", "cProfile", "-o", str(output), side.command, *side.arguments]
    side.command = sys.executable
    size = _size(figure)
    first = write_text(root / "target.txt", size)
    texts = (first.upper().decode("ascii"), first.decode("ascii"))
    chain = Chain(hashlib.sha256(first).hexdigest())
    async with open_client(side, "raw") as client:
        await client.list_tools()
        for _ in range(WARMUP + calls):
            if figure.startswith("read"):
                await client.call_tool("read", {"path": "target.txt"})
                continue
            arguments: dict[str, object] = {
                "path": "target.txt",
                "content": texts[chain.turn % 2],
                "expected_sha256": chain.digest,
            }
            chain.turn += 1
            structured = await client.call_tool("replace", arguments)
            if not isinstance(structured, dict) or not isinstance(structured.get("sha256"), str):
                raise Unavailable("failed: replace answered no sha256")
            chain.digest = structured["sha256"]


def main(argv: list[str] | None = None) -> int:
    """Profile the chosen figure and print the top functions."""
    parser = argparse.ArgumentParser(description="profile one in-process figure")
    parser.add_argument("figure", choices=FIGURES)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--sort", choices=("cumulative", "tottime"), default="tottime")
    parser.add_argument("--serve", action="store_true", help="profile the MCP server side")
    options = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="spice-profile-")).resolve()
    out = io.StringIO()
    try:
        if options.serve:
            if options.figure.startswith("shell"):
                parser.error("--serve profiles read and replace figures only")
            output = root.parent / f"{root.name}.prof"
            asyncio.run(_drive_server(root, options.figure, options.calls, output))
            stats = pstats.Stats(str(output), stream=out)
            output.unlink()
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
