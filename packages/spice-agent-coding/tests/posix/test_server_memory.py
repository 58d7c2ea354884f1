"""The server-wide memory bound (contract 13.3, R6-13): every call's memory together.

Its figure (default half the host's memory), its cgroup above every call's memory cgroup
(this host: v1 ``memory``; v2: the server's one cgroup), what ``tools`` says, the start's
refusal of bounds that do not fit (one line naming both numbers), the server's cgroups
removed when it exits (R6-14), and two real concurrent calls that together ask for more
than the server-wide bound: the kernel ends one of them, never the server.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from procutil import Collect
from test_sandbox_attacks import BOUND, PYTHON, policy, root

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._cgroup import (
    SERVER_MEMORY_DIVISOR,
    Cgroups,
    default_max_memory,
    default_server_memory,
    resolve_cgroups,
)
from spice.agent.coding._posix._containment import Containment
from spice.agent.coding._settings._resolve import Flags, resolve_settings
from spice.agent.coding._settings._values import SettingsError, host_memory, server_memory_problem
from spice.agent.process import OutcomeKind, Spec

__all__ = ["policy", "root"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux cgroups")

MIB: Final = 1024**2
PER_CALL: Final = 128 * MIB
SERVER: Final = 160 * MIB
ASKED: Final = 100
"""MiB each of two calls writes and holds: 200 MiB together, past ``SERVER``."""
HOLDER: Final = (
    "import sys, time\n"
    "held = b'x' * (int(sys.argv[1]) * 1024 * 1024)\n"
    "print('held', flush=True)\n"
    "time.sleep(60)\n"
)


def test_the_default_is_half_the_hosts_memory_and_never_below_a_calls() -> None:
    host = host_memory()
    assert host is not None
    assert default_server_memory() == host // SERVER_MEMORY_DIVISOR
    assert default_max_memory() <= default_server_memory()


@given(st.integers(1, 2**50), st.integers(1, 2**50), st.integers(1, 2**50))
def test_the_bounds_fit_exactly_when_call_le_server_le_host(
    call: int, server: int, host: int
) -> None:
    problem = server_memory_problem((call, "--max-memory"), (server, "--max-server-memory"), host)
    assert (problem is None) == (call <= server <= host)
    if server > host:
        assert f"({server} bytes)" in str(problem)
        assert f"({host} bytes)" in str(problem)
    elif call > server:
        assert f"({call} bytes)" in str(problem)
        assert f"({server} bytes)" in str(problem)


def test_the_start_refuses_bounds_that_do_not_fit_naming_both_numbers(tmp_path: Path) -> None:
    host = host_memory()
    assert host is not None
    environ = {"HOME": str(tmp_path)}
    at = Flags(root=str(tmp_path), max_memory="64M", max_server_memory="64M")
    assert resolve_settings(at, environ).max_server_memory == 64 * MIB  # equal: taken
    over = Flags(root=str(tmp_path), max_memory="65M", max_server_memory="64M")
    with pytest.raises(SettingsError) as caught:
        resolve_settings(over, environ)
    assert f"({65 * MIB} bytes)" in str(caught.value)
    assert f"({64 * MIB} bytes)" in str(caught.value)
    assert "\n" not in str(caught.value)
    above = Flags(root=str(tmp_path), max_server_memory=str(host + 4096))
    with pytest.raises(SettingsError, match=rf"\({host} bytes\)"):
        resolve_settings(above, environ)
    half = host // SERVER_MEMORY_DIVISOR
    default_over = Flags(root=str(tmp_path), max_memory=str(half + 4096))
    with pytest.raises(SettingsError, match=rf"default server-wide bound.*\({half} bytes\)"):
        resolve_settings(default_over, environ)
    from_variable = {**environ, "SPICE_AGENT_MAX_SERVER_MEMORY": "1G"}
    assert resolve_settings(Flags(root=str(tmp_path)), from_variable).max_server_memory == 1024**3


@pytest.fixture
def pooled() -> Cgroups:
    made = resolve_cgroups(24, PER_CALL, server_memory=SERVER)
    if not made.made:
        pytest.skip(f"no cgroup can be made here: {made.reason}")
    return made


def test_every_calls_memory_is_charged_to_the_servers_bounded_cgroup(pooled: Cgroups) -> None:
    server = Path(pooled.parents[-1])
    assert server.name.startswith(f"spice-server-{os.getpid()}-")
    name = "memory.max" if pooled.version == "v2" else "memory.limit_in_bytes"
    assert int((server / name).read_text()) == SERVER
    call = pooled.make()
    try:
        assert Path(call.paths[-1]).parent == server
        assert int((Path(call.paths[-1]) / name).read_text()) == PER_CALL
    finally:
        for fd in call.procs:
            os.close(fd)
        assert call.remove()
    assert pooled.report()["server_memory_bytes"] == SERVER


def test_a_calls_default_bound_is_never_above_the_servers() -> None:
    made = resolve_cgroups(24, None, server_memory=64 * MIB)
    assert made.max_memory == 64 * MIB


def test_the_servers_cgroups_are_removed_when_it_exits(pooled: Cgroups) -> None:
    """R6-14: a server (here a child process) that made its cgroups and exits leaves none."""
    script = (
        "import os, sys\n"
        "from spice.agent.coding._posix._cgroup import resolve_cgroups\n"
        "made = resolve_cgroups(24, 64 * 1024**2, server_memory=96 * 1024**2)\n"
        "print(os.getpid(), *made.parents, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, check=True, timeout=BOUND
    )
    pid, *parents = done.stdout.decode().split()
    assert parents
    assert all(f"spice-server-{pid}-" in parent for parent in parents)
    assert not any(os.path.exists(parent) for parent in parents)


async def _settled(process: object, out: Collect) -> None:
    """Until the command holds its memory or has ended (bounded)."""
    async with asyncio.timeout(BOUND):
        while not process.done() and b"held" not in out.data:  # type: ignore[attr-defined]  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_concurrent_calls_that_ask_for_more_than_the_server_bound_cannot_all_hold_it(
    policy: Containment, root: Path, pooled: Cgroups
) -> None:
    """Two calls, each bounded at 128 MiB, each writing 100 MiB: together past the server's
    160 MiB. The kernel ends one of the commands (the larger: the first, or the one that
    asks), never the server; the other holds its memory."""
    launcher = PosixLauncher.build(policy, str(root), pooled)
    outs = [Collect() for _ in range(2)]
    processes = []
    try:
        for out in outs:
            spec = Spec(
                PYTHON, ("-I", "-c", HOLDER, str(ASKED)), str(root), (), b"", out, Collect()
            )
            processes.append(await launcher.start(spec))
            await _settled(processes[-1], out)
        for process, out in zip(processes, outs, strict=True):
            await _settled(process, out)
        async with asyncio.timeout(BOUND):
            while not any(process.done() for process in processes):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        ended = [process for process in processes if process.done()]
        assert len(ended) == 1
        async with asyncio.timeout(BOUND):
            await ended[0].wait()
        assert ended[0].result().kind is OutcomeKind.SIGNALED, ended[0].result()
        survivor = next(p for p in processes if p is not ended[0])
        assert b"held" in outs[processes.index(survivor)].data
    finally:
        for process in processes:
            await process.force_kill()
            async with asyncio.timeout(BOUND):
                await process.wait()
