"""Section "containment": what the contained shell costs a command (issue 14).

Four ways to run the same command, sampled in rotation: the floor (a direct
``subprocess.run`` of it), ``PosixLauncher`` with the sandbox off (the per-call
supervisor alone: subreaper, parent-death signal, sweep), ``workspace`` without
namespaces (the supervisor plus Landlock, the seccomp filter, the capability drop and a
private TMPDIR), and ``workspace`` with bwrap's namespaces (the supervisor runs inside
them and applies the same layers there), where the host can make them.
Commands: ``/bin/true`` (the fixed cost) and the sample worktree's own tests
(``python3 -m unittest`` in a copy of ``examples/sample-worktree``, as ``make demo``
runs them). Without Landlock the contained figures say "unavailable" and why.

Run alone: ``uv run --locked --no-sync python benchmarks/bench_containment.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from _harness import (
    REPOSITORY,
    Figure,
    Settings,
    Target,
    main_of,
    milliseconds,
    rotate,
    unavailable,
)

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._cgroup import resolve_cgroups
from spice.agent.coding._posix._containment import OFF, resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Spec

SECTION: Final = "containment"
SAMPLE: Final = REPOSITORY / "examples" / "sample-worktree"
ENVIRONMENT: Final = ("PATH=/usr/bin:/bin", "LANG=C.UTF-8")
TIMEOUT_SECONDS: Final = 120.0
BOUNDED: Final = "true: namespaces + Landlock + seccomp + cgroup beside off"
TARGETS: Final = (Target(SECTION, BOUNDED, most=1.5, source="issue 28"),)
"""A contained ``true`` with its cgroup and the extra mounts costs at most 1.5x ``off``."""


class _Discard:
    def write(self, data: bytes) -> None:
        del data


def _floor(argv: list[str], cwd: Path) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        subprocess.run(  # noqa: ASYNC221 - the floor is the blocking call itself
            argv,
            cwd=cwd,
            env=dict(entry.split("=", 1) for entry in ENVIRONMENT),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=TIMEOUT_SECONDS,
        )

    return probe


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


async def _measure(settings: Settings, name: str, argv: list[str], cwd: Path) -> list[Figure]:
    contained = None
    namespaced = None
    bounded = None
    reason = ""
    cgroups = resolve_cgroups()
    if landlock_abi() >= 1:
        contained = PosixLauncher.build(resolve_containment("workspace"), str(cwd))
        policy = resolve_containment("workspace", root=str(cwd))
        if policy.namespaces.made:
            namespaced = PosixLauncher.build(policy, str(cwd))
            if cgroups.made and name == "true":
                bounded = PosixLauncher.build(policy, str(cwd), cgroups)
    else:
        reason = "the kernel has no Landlock"
    off = PosixLauncher.build(OFF, str(cwd))
    repeats = settings.repeats if name == "true" else settings.slow_repeats
    floor_s, off_s, contained_s, namespaced_s, bounded_s = await rotate(
        [
            _floor(argv, cwd),
            _launched(off, argv, cwd),
            None if contained is None else _launched(contained, argv, cwd),
            None if namespaced is None else _launched(namespaced, argv, cwd),
            None if bounded is None else _launched(bounded, argv, cwd),
        ],
        settings.warmup,
        repeats,
    )
    floor, uncontained = milliseconds(floor_s), milliseconds(off_s)
    figures = [
        Figure(
            SECTION,
            f"{name}: sandbox off (supervisor)",
            uncontained,
            "floor",
            "subprocess.run",
            floor,
        ),
    ]
    if contained is None:
        figures.append(unavailable(SECTION, f"{name}: Landlock + seccomp", reason))
        return figures
    sandboxed = milliseconds(contained_s)
    figures.append(
        Figure(SECTION, f"{name}: Landlock + seccomp", sandboxed, "floor", "subprocess.run", floor)
    )
    figures.append(
        Figure(
            SECTION,
            f"{name}: Landlock + seccomp beside off",
            sandboxed,
            "peer",
            "sandbox off",
            uncontained,
            notes=("the cost of Landlock, seccomp and the TMPDIR",),
        )
    )
    if namespaced is None:
        figures.append(
            unavailable(SECTION, f"{name}: namespaces + Landlock + seccomp", "no namespaces")
        )
        return figures
    figures.append(
        Figure(
            SECTION,
            f"{name}: namespaces + Landlock + seccomp beside off",
            milliseconds(namespaced_s),
            "peer",
            "sandbox off",
            uncontained,
            notes=("bwrap's namespaces, the supervisor inside them",),
        )
    )
    if name == "true":
        figures.append(
            unavailable(SECTION, BOUNDED, f"no cgroup can be made here: {cgroups.reason}")
            if bounded is None
            else Figure(
                SECTION,
                BOUNDED,
                milliseconds(bounded_s),
                "peer",
                "sandbox off",
                uncontained,
                notes=(f"a cgroup per call ({cgroups.version}), bounded /tmp and /dev/shm",),
            )
        )
    figures.append(
        Figure(
            SECTION,
            f"{name}: namespaces + Landlock + seccomp",
            milliseconds(namespaced_s),
            "floor",
            "subprocess.run",
            floor,
        )
    )
    return figures


async def _run(settings: Settings) -> list[Figure]:
    figures = await _measure(settings, "true", ["/bin/true"], Path(tempfile.gettempdir()))
    scratch = Path(tempfile.mkdtemp(prefix="spice-bench-containment-"))
    try:
        worktree = scratch / "worktree"
        shutil.copytree(SAMPLE, worktree)
        # The demo's fix of the sample's typo, so its tests pass as after `make demo`.
        target = worktree / "greeting.py"
        target.write_text(target.read_text().replace("Helo, ", "Hello, "))
        python = shutil.which("python3") or sys.executable
        figures += await _measure(
            settings, "sample tests", [python, "-B", "-m", "unittest", "-q"], worktree.resolve()
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return figures


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    return asyncio.run(_run(settings))


if __name__ == "__main__":
    raise SystemExit(main_of(run))
