"""Section "seccomp": what the seccomp filter and the capability drop cost a command.

Two ``workspace`` launchers sampled in rotation: Landlock alone (the round-2 layers) and
Landlock with the seccomp filter and no capabilities (round 3). Commands: ``/bin/true``
(the fixed cost: building and installing the filter, dropping the capabilities, in the
supervisor's child) and a Python loop of 200,000 ``stat`` calls (the filter's cost per
system call: every call runs the BPF program). Without Landlock or a filter here the
figures say "unavailable" and why.

Run alone: ``uv run --locked --no-sync python benchmarks/bench_seccomp.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from _harness import Figure, Settings, main_of, milliseconds, rotate, unavailable

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._containment import resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.coding._posix._supervisor._seccomp import available
from spice.agent.process import Spec

SECTION: Final = "seccomp"
ENVIRONMENT: Final = ("PATH=/usr/bin:/bin", "LANG=C.UTF-8")
TIMEOUT_SECONDS: Final = 120.0
STAT_LOOP: Final = "import os\nfor _ in range(200_000):\n    os.stat('.')\n"


class _Discard:
    def write(self, data: bytes) -> None:
        del data


def _launched(launcher: PosixLauncher, argv: list[str], cwd: Path) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        spec = Spec(argv[0], argv[1:], str(cwd), ENVIRONMENT, b"", _Discard(), _Discard())
        process = await launcher.start(spec)
        async with asyncio.timeout(TIMEOUT_SECONDS):
            await process.wait_exit()
            await process.wait()
        if not process.result().successful:
            raise RuntimeError("the benchmarked command failed")

    return probe


async def _measure(settings: Settings, name: str, argv: list[str], cwd: Path) -> Figure:
    subject = f"{name}: Landlock, seccomp, no capabilities"
    if landlock_abi() < 1:
        return unavailable(SECTION, subject, "the kernel has no Landlock")
    if not available():
        return unavailable(SECTION, subject, "no seccomp filter on this machine")
    alone = PosixLauncher.build(
        resolve_containment("workspace", seccomp_probe=lambda: False), str(cwd)
    )
    layered = PosixLauncher.build(resolve_containment("workspace"), str(cwd))
    repeats = settings.repeats if name == "true" else settings.slow_repeats
    alone_s, layered_s = await rotate(
        [_launched(alone, argv, cwd), _launched(layered, argv, cwd)], settings.warmup, repeats
    )
    return Figure(
        SECTION,
        subject,
        milliseconds(layered_s),
        "peer",
        "Landlock alone",
        milliseconds(alone_s),
        notes=("the cost of the filter and the capability drop",),
    )


async def _run(settings: Settings, scratch: Path) -> list[Figure]:
    python = shutil.which("python3") or sys.executable
    return [
        await _measure(settings, "true", ["/bin/true"], scratch),
        await _measure(settings, "200k stat calls", [python, "-I", "-c", STAT_LOOP], scratch),
    ]


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    scratch = Path(os.path.realpath(tempfile.mkdtemp(prefix="spice-bench-seccomp-")))
    try:
        return asyncio.run(_run(settings, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main_of(run))
