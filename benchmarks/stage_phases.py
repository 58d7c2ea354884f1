"""Where a staged call's time goes, by phase (issues 44 and 45; docs/performance.md).

Usage: ``uv run --locked --no-sync python benchmarks/stage_phases.py [--calls N]``. Runs
``bench_stage``'s two staged figures (the rewrite of 1,000 files; ``uv sync`` of 10 local
wheels into a fresh ``.venv``) beside the same sandbox unstaged, N calls each after one
warm-up, alternating, and prints one JSON object: for each, the median milliseconds of the
spawn (``start``), the command (``command``: until its last process is gone) and the join
(``join``: for a staged call, the commit) and their sum (``total``). Run it on two
checkouts (``PYTHONPATH`` on the other's ``packages/*/src``) to compare a change's join.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import bench_stage

from spice.agent.coding import PosixLauncher
from spice.agent.process import Spec

PHASES: Final = ("start", "command", "join", "total")
REWRITE: Final = ("/bin/sh", "-c", 'for f in pkg*/*.py; do echo x >> "$f"; done')
TIMEOUT_SECONDS: Final = 300.0
Sample = tuple[float, float, float, float]
"""Milliseconds of one call's phases, in the order of ``PHASES``."""


async def _timed(
    launcher: PosixLauncher,
    root: Path,
    argv: tuple[str, ...],
    environment: tuple[str, ...],
    before: Callable[[], None] | None = None,
) -> Sample:
    if before is not None:
        before()
    discard = bench_stage._Discard()
    spec = Spec(argv[0], argv[1:], str(root), environment, b"", discard, discard)
    clock = time.perf_counter_ns
    began = clock()
    process = await launcher.start(spec)
    started = clock()
    async with asyncio.timeout(TIMEOUT_SECONDS):
        await process.wait_exit()
        exited = clock()
        await process.wait()
    joined = clock()
    if not process.result().successful:
        raise RuntimeError("the measured command failed")
    return (
        (started - began) / 1e6,
        (exited - started) / 1e6,
        (joined - exited) / 1e6,
        (joined - began) / 1e6,
    )


def _mover(root: Path, trash: Path) -> Callable[[], None]:
    def move() -> None:
        venv = root / ".venv"
        if venv.exists():
            venv.rename(trash / f"venv{len(os.listdir(trash))}")

    return move


async def _run(calls: int) -> dict[str, dict[str, float]]:
    tools = bench_stage._sync_tools()
    if tools is None:
        raise SystemExit("no uv binary on PATH")
    uv, python = tools
    base = Path(tempfile.mkdtemp(prefix="spice-stage-phases-", dir=bench_stage.VISIBLE))
    try:
        home = base / "home"
        home.mkdir()
        rewrite = base / "rewrite"
        rewrite.mkdir()
        bench_stage._files(rewrite, bench_stage.REWRITTEN)
        sync_environment = (
            f"PATH={os.path.dirname(uv)}:/usr/bin:/bin",
            "LANG=C.UTF-8",
            "UV_OFFLINE=1",
            "UV_PYTHON_DOWNLOADS=never",
        )
        sync_argv = (uv, "sync", "--quiet", "--python", python)
        probes: dict[str, Callable[[], Awaitable[Sample]]] = {}
        for staged in (True, False):
            name = "staged" if staged else "unstaged"
            launcher = bench_stage._launcher(rewrite, home, staged=staged)
            probes[f"rewrite {name}"] = functools.partial(
                _timed, launcher, rewrite, REWRITE, bench_stage.ENVIRONMENT
            )
            root, trash = base / f"sync-{name}", base / f"sync-{name}-trash"
            root.mkdir()
            trash.mkdir()
            bench_stage._sync_project(root, base / f"sync-{name}-wheels")
            synced = bench_stage._launcher(root, home, staged=staged)
            probes[f"uv sync {name}"] = functools.partial(
                _timed, synced, root, sync_argv, sync_environment, _mover(root, trash)
            )
        samples: dict[str, list[Sample]] = {name: [] for name in probes}
        for round_index in range(calls + 1):
            for name, probe in probes.items():
                sample = await probe()
                if round_index:
                    samples[name].append(sample)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        name: {
            phase: round(statistics.median(s[index] for s in taken), 1)
            for index, phase in enumerate(PHASES)
        }
        for name, taken in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    arguments = parser.parse_args()
    print(json.dumps(asyncio.run(_run(arguments.calls))))


if __name__ == "__main__":
    main()
