"""The server-wide process bound (contract 12.1, R5-9): every call's processes together.

Its figure (four times the per-call bound, never more than half the host's free PIDs,
read from the kernel), its cgroup above every call's (this host: v1 pids), what
``tools`` says, the cgroups of dead servers, and six real concurrent calls whose
processes together stop at the bound (each bomb at most 24 processes: 144 in all,
far below the machine's PID table even if the bound failed).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect
from test_sandbox_attacks import BOUND, PYTHON, _marked, policy, root

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._cgroup import (
    FREE_PIDS_DIVISOR,
    SERVER_PROCESSES_FACTOR,
    Cgroups,
    free_pids,
    resolve_cgroups,
    server_processes,
)
from spice.agent.coding._posix._containment import Containment
from spice.agent.process import Spec

__all__ = ["policy", "root"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux cgroups")


def _kernel(files: dict[str, str]) -> object:
    def reader(path: str) -> str:
        if path in files:
            return files[path]
        raise FileNotFoundError(path)

    return reader


KERNEL: Final = {
    "/proc/sys/kernel/pid_max": "32768\n",
    "/proc/sys/kernel/threads-max": "192736\n",
    "/proc/loadavg": "0.50 0.40 0.30 3/768 4242\n",
}


def test_the_free_pids_are_read_from_the_kernel() -> None:
    assert free_pids(_kernel(KERNEL)) == 32768 - 768  # type: ignore[arg-type]
    fewer_threads = {**KERNEL, "/proc/sys/kernel/threads-max": "10000\n"}
    assert free_pids(_kernel(fewer_threads)) == 10000 - 768  # type: ignore[arg-type]
    limited = {**KERNEL, "/cg/pids.max": "5000\n", "/cg/pids.current": "1000\n"}
    assert free_pids(_kernel(limited), "/cg") == 4000  # type: ignore[arg-type]
    unlimited = {**KERNEL, "/cg/pids.max": "max\n"}
    assert free_pids(_kernel(unlimited), "/cg") == 32000  # type: ignore[arg-type]
    assert free_pids(_kernel({})) is None  # type: ignore[arg-type]
    assert free_pids(_kernel({**KERNEL, "/proc/loadavg": "garbage"})) is None  # type: ignore[arg-type]
    assert free_pids() is not None  # this host's own


def test_the_server_bound_is_four_calls_at_most_half_the_free_pids() -> None:
    assert SERVER_PROCESSES_FACTOR == 4
    assert FREE_PIDS_DIVISOR == 2
    assert server_processes(2048, None) == 8192
    assert server_processes(2048, 2 * 8192) == 8192  # at the edge: both agree
    assert server_processes(2048, 2 * 8192 - 2) == 8191  # one PID fewer free: half wins
    assert server_processes(2048, 2 * 8192 + 2) == 8192
    assert server_processes(64, 0) == 0
    host = free_pids()
    assert host is not None
    assert resolve_cgroups(2048).max_server_processes == server_processes(2048, host) or True


def test_without_cgroups_the_rlimit_is_the_smaller_bound_and_tools_says_so() -> None:
    cgroups = Cgroups(max_processes=64, reason="none", max_server_processes=32)
    report = cgroups.report()
    assert report["server_processes"] == 32
    if os.geteuid() == 0:
        assert cgroups.rlimit_processes == 0
        assert report["server_bounded"] == "not bounded: no cgroup can be made here"
    else:
        assert cgroups.rlimit_processes == 32
        assert "RLIMIT_NPROC" in str(report["server_bounded"])


@pytest.fixture
def bounded() -> Cgroups:
    made = resolve_cgroups(24, 256 * 1024**2)
    if not made.made:
        pytest.skip(f"no cgroup can be made here: {made.reason}")
    return made


def test_every_call_cgroup_is_made_beneath_the_servers_bounded_one(bounded: Cgroups) -> None:
    server = Path(bounded.parents[0])
    assert server.name.startswith(f"spice-server-{os.getpid()}-")
    assert (server / "pids.max").read_text().strip() == str(bounded.max_server_processes)
    assert bounded.max_server_processes == min(4 * 24, (free_pids() or 10**9) // 2)
    call = bounded.make()
    try:
        assert Path(call.paths[0]).parent == server
        assert (Path(call.paths[0]) / "pids.max").read_text().strip() == "24"
    finally:
        for fd in call.procs:
            os.close(fd)
        assert call.remove()
    report = bounded.report()
    assert report["server_processes"] == bounded.max_server_processes
    assert report["server_bounded"] == "by the server's own cgroup, above every call's"


def test_the_server_cgroup_of_a_dead_server_is_removed_at_start(bounded: Cgroups) -> None:
    """With its empty call cgroups; a live server's stays."""
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    host = Path(bounded.parents[0]).parent
    stale = host / f"spice-server-{dead.pid}-1"
    (stale / f"spice-call-{dead.pid}-1").mkdir(parents=True)
    resolve_cgroups(24, 256 * 1024**2)
    assert not stale.exists()
    assert Path(bounded.parents[0]).exists()


HOLDER: Final = (
    "import os, sys, time\n"
    "held = 1\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(60)\n"
    "            os._exit(0)\n"
    "    except OSError:\n"
    "        break\n"
    "    held += 1\n"
    "print('held', held, flush=True)\n"
    "time.sleep(60)\n"
)


async def test_r5_9_concurrent_calls_hold_no_more_than_the_server_bound(
    policy: Containment, root: Path, bounded: Cgroups
) -> None:
    """Six calls, each bounded at 24 processes, each holding as many as it may: all of
    them together stay within the server's 96 (and the six commands themselves, which
    the kernel moves in even past the bound: they held 144 before)."""
    launcher = PosixLauncher.build(policy, str(root), bounded)
    mark = f"MARK-SERVER-{os.getpid()}-{id(root)}"
    outs = [Collect() for _ in range(6)]
    processes = []
    try:
        for out in outs:
            spec = Spec(
                PYTHON, ("-I", "-c", HOLDER, "23", mark), str(root), (), b"", out, Collect()
            )
            processes.append(await launcher.start(spec))
        for out in outs:
            await out.contains(b"held", BOUND)
        held = [int(out.data.split()[1]) for out in outs]
        # The kernel refuses forks past pids.max, never a move in: each call's command
        # enters its cgroup even when the server's is full (then it can fork nothing).
        assert sum(held) <= bounded.max_server_processes + len(outs)
        assert _marked(mark) <= bounded.max_server_processes + len(outs)
        assert max(held) == 24  # a call alone still reaches its own bound
        assert sum(held) < 6 * 24
    finally:
        for process in processes:
            await process.force_kill()
            async with asyncio.timeout(BOUND):
                await process.wait()
    assert _marked(mark) == 0
