"""Round 4's process attacks (``sandbox-attacks-round3.md``) against the real kernel, on
both paths: what a command can reach of its own call's machinery, and the bounds on its
processes and memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Final

import pytest
from mcp import Client, StdioServerParameters, stdio_client
from procutil import Collect
from test_mcp_stdio import SCRIPT
from test_sandbox_attacks import BOUND, PYTHON, _marked, policy, root, run_python

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._cgroup import Cgroups, resolve_cgroups
from spice.agent.coding._posix._containment import Containment
from spice.agent.coding._posix._supervisor._landlock import SECURE_BITS, can_empty_bounding_set
from spice.agent.process import OutcomeKind, Spec

__all__ = ["policy", "root"]

DESCRIPTORS: Final = (
    "import json, os\n"
    "found = {}\n"
    "for name in os.listdir('/proc/self/fd'):\n"
    "    try:\n"
    "        found[name] = os.readlink('/proc/self/fd/' + name)\n"
    "    except OSError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


# -- R4-7: the call's spec never reaches the command -------------------------------------


async def test_r4_7_no_descriptor_of_the_spec_survives_execve(
    policy: Containment, root: Path
) -> None:
    """The command's open descriptors are its three streams (the listing's own is closed
    by the time it is read): no memory file of the spec (the server's pid, the writable
    paths), no pipe of the supervisor's."""
    outcome, output = await run_python(policy, root, DESCRIPTORS)
    assert outcome.exit_code == 0, output
    found: dict[str, str] = json.loads(output)
    assert not [target for target in found.values() if "memfd:" in target]
    assert set(found) == {"0", "1", "2"}, found


async def test_r4_7_no_descriptor_of_the_calls_cgroup_survives_execve(
    policy: Containment, root: Path
) -> None:
    """With a cgroup per call the command moved itself in through descriptors of its
    ``cgroup.procs`` files: none of them is left in the command."""
    launcher = PosixLauncher.build(policy, str(root), _bounded(BOMB_PROCESSES, 1024**3))
    out = await _run(launcher, root, DESCRIPTORS)
    found: dict[str, str] = json.loads(out.data)
    assert set(found) == {"0", "1", "2"}, found


# -- R4-4 and R4-3: a cgroup per call bounds its processes and its memory -----------------

BOMB_PROCESSES: Final = 64
"""The fork bomb's ``--max-processes``."""

BOMB_FORKS: Final = 10
"""Forks per bomb process: without any bound the bomb makes at most 2**10 processes, far
below the machine's PID table, so even a failing bound cannot exhaust it."""

BOMB: Final = (
    "import os, sys, time\n"
    "refused = False\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        os.fork()\n"
    "    except OSError:\n"
    "        refused = True\n"
    "if refused:\n"
    "    print('refused', flush=True)\n"
    "time.sleep(60)\n"
)

HOG_MEMORY: Final = 64 * 1024**2
"""The memory hog's ``--max-memory`` (it tries four times as much)."""


def _bounded(processes: int, memory: int) -> Cgroups:
    cgroups = resolve_cgroups(processes, memory)
    if not cgroups.made:
        pytest.skip(f"no cgroup can be made here: {cgroups.reason}")
    return cgroups


async def _run(launcher: PosixLauncher, root: Path, code: str, *arguments: str) -> Collect:
    out = Collect()
    spec = Spec(PYTHON, ("-I", "-c", code, *arguments), str(root), (), b"", out, Collect())
    process = await launcher.start(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    return out


async def test_r4_4_a_fork_bomb_is_held_to_its_process_bound(
    policy: Containment, root: Path
) -> None:
    """A fork bomb under ``--max-processes 64``: its forks are refused at the bound, another
    call starts and answers meanwhile, and nothing of it is left after its call."""
    cgroups = _bounded(BOMB_PROCESSES, 1024**3)
    launcher = PosixLauncher.build(policy, str(root), cgroups)
    mark = f"MARK-BOMB-{os.getpid()}-{id(root)}"
    out = Collect()
    spec = Spec(
        PYTHON, ("-I", "-c", BOMB, str(BOMB_FORKS), mark), str(root), (), b"", out, Collect()
    )
    process = await launcher.start(spec)
    try:
        await out.contains(b"refused", BOUND)
        assert _marked(mark) <= BOMB_PROCESSES
        # The host is not full: another call starts and answers during the bomb.
        other = await _run(launcher, root, "print('answered')")
        assert b"answered" in other.data
    finally:
        await process.force_kill()
        async with asyncio.timeout(BOUND):
            await process.wait()
    assert _marked(mark) == 0
    own = f"spice-call-{os.getpid()}-"
    assert not [p for p in os.listdir(cgroups.parents[0]) if p.startswith(own)]


async def test_r4_3_a_memory_hog_is_killed_as_the_command_and_the_server_lives(
    policy: Containment, root: Path
) -> None:
    """Four times ``--max-memory`` asked for: the command is what the kernel kills (an
    ended command is ``signaled``), and this process, the server, lives on."""
    launcher = PosixLauncher.build(policy, str(root), _bounded(BOMB_PROCESSES, HOG_MEMORY))
    code = f"data = bytearray({4 * HOG_MEMORY})\nprint('kept', flush=True)\n"
    out, err = Collect(), Collect()
    spec = Spec(PYTHON, ("-I", "-c", code), str(root), (), b"", out, err)
    process = await launcher.start(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    assert b"kept" not in out.data
    assert process.result().kind is OutcomeKind.SIGNALED


async def test_r4_3_the_private_shared_memory_is_charged_to_the_call(
    policy: Containment, root: Path
) -> None:
    """With namespaces, pages written to the call's private ``/dev/shm`` count against its
    memory bound: a writer of four times the bound is killed (or refused), never the
    server."""
    if not policy.namespaces.made:
        pytest.skip("without namespaces /dev/shm is the host's (not the call's)")
    launcher = PosixLauncher.build(policy, str(root), _bounded(BOMB_PROCESSES, HOG_MEMORY))
    code = (
        "import os\n"
        "chunk = b'x' * (1 << 20)\n"
        "with open('/dev/shm/hog', 'wb') as file:\n"
        f"    for _ in range({4 * HOG_MEMORY} >> 20):\n"
        "        file.write(chunk)\n"
        "print('kept', flush=True)\n"
    )
    out, err = Collect(), Collect()
    spec = Spec(PYTHON, ("-I", "-c", code), str(root), (), b"", out, err)
    process = await launcher.start(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    assert b"kept" not in out.data
    assert not process.result().successful
    os.kill(os.getpid(), 0)  # this process (the server) lives


# -- SECBIT_NOROOT set and locked on both paths (contract 11.1) ---------------------------

SECUREBITS: Final = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.prctl(27, 0, 0, 0, 0))\n"  # PR_GET_SECUREBITS
    "print(open('/proc/self/status').read().split('CapBnd:')[1].split()[0])\n"
)


async def test_the_securebits_are_set_and_locked_and_no_capability_is_bounded(
    policy: Containment, root: Path
) -> None:
    """``SECBIT_NOROOT`` and the rest of ``SECURE_BITS``, locked, on both paths (the
    namespace path set none before: bwrap had dropped ``CAP_SETPCAP``)."""
    if not policy.namespaces.made and not can_empty_bounding_set():
        pytest.skip("without namespaces only a root server may lock the securebits")
    outcome, output = await run_python(policy, root, SECUREBITS)
    assert outcome.exit_code == 0, output
    bits, bounding = output.split()
    assert int(bits) == SECURE_BITS
    assert int(bounding, 16) == 0
    assert "securebits_locked" in policy.capabilities


BOMB_WITH_A_MARK: Final = (
    "import os, sys, time\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        os.fork()\n"
    "    except OSError:\n"
    "        open('refused', 'a').close()\n"
    "time.sleep(60)\n"
)


async def test_r4_4_over_mcp_a_read_is_answered_while_a_fork_bomb_is_at_its_bound(
    tmp_path: Path,
) -> None:
    """A real server (``serve --max-processes 64``): while one call's fork bomb is held at
    its bound, a ``read`` is answered; the bomb's call times out and leaves nothing."""
    _bounded(BOMB_PROCESSES, 1024**3)
    root = (tmp_path / "root").resolve()
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    # The bomb's word goes to an --allow-write directory: a staged worktree shows nothing a
    # call writes before it ends (contract 13.1).
    signals = root / "signals"
    signals.mkdir()
    mark = f"MARK-MCP-BOMB-{os.getpid()}"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            str(SCRIPT),
            "serve",
            "--root",
            str(root),
            "--max-processes",
            str(BOMB_PROCESSES),
            "--allow-write",
            str(signals),
        ],
        cwd=str(tmp_path),
    )
    bomb = {
        "argv": [PYTHON, "-I", "-c", BOMB_WITH_A_MARK, str(BOMB_FORKS), mark],
        "workdir": "signals",
        "timeout_seconds": 30,
    }
    async with Client(stdio_client(params)) as client:
        call = asyncio.ensure_future(client.call_tool("shell", bomb))
        try:
            async with asyncio.timeout(BOUND):
                while not (signals / "refused").exists():  # noqa: ASYNC110 - the bomb's file
                    await asyncio.sleep(0.05)
                assert 0 < _marked(mark) <= BOMB_PROCESSES
                answer = await client.call_tool("read", {"path": "a.txt"})
                assert 0 < _marked(mark)  # answered while the bomb was still there
                assert json.loads(answer.content[0].text)["content"] == "a\n"  # type: ignore[union-attr]
        finally:
            async with asyncio.timeout(BOUND):
                await call
    assert _marked(mark) == 0
