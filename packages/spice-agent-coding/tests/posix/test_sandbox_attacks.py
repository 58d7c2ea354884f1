"""The attacks of ``sandbox-attacks.md`` (N1-N8) against the real kernel, on both paths.

Each test runs once through bwrap's namespaces and once without them (a host without
bwrap or user namespaces, simulated through ``Containment.namespaces``). An attack is
refused where the path is ``contained``; where it is not (no namespaces and no seccomp
filter in this build) the policy must say ``contained: false`` and name what stays open.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import procutil
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from procutil import Collect
from test_mcp_results import CORPUS, lay_out
from test_mcp_stdio import SCRIPT

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Outcome, Spec

PYTHON: Final = os.path.realpath(sys.executable)
BOUND: Final = 60.0
"""Hang guard for one command (never a timing assertion)."""
CHAIN: Final = 200
"""Depth of the fork+setsid chain of N2 (a few hundred processes at most)."""

ABI: Final = landlock_abi()
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
pytestmark = pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")


@pytest.fixture(params=("namespaces", "fallback"))
def policy(request: pytest.FixtureRequest) -> Containment:
    """The ``workspace`` policy on one path; the namespace path skips where it cannot be."""
    if request.param == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    made = NAMESPACES if request.param == "namespaces" else Namespaces(None, "simulated")
    return dataclasses.replace(resolve_containment("workspace"), namespaces=made)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = (tmp_path / "root").resolve()
    path.mkdir()
    return path


async def run_python(policy: Containment, root: Path, code: str) -> tuple[Outcome, str]:
    out, err = Collect(), Collect()
    spec = Spec(PYTHON, ("-I", "-c", code), str(root), ("PATH=/usr/bin:/bin",), b"", out, err)
    process = await PosixLauncher.build(policy, str(root)).start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return process.result(), out.data.decode() + err.data.decode()


def refused_or_reported(policy: Containment, reached: bool) -> None:
    """The attack was refused, or the path says it is not contained and why."""
    if policy.contained:
        assert not reached
    else:
        assert not policy.namespaces.made
        assert not policy.seccomp
        assert policy.report()["contained"] is False
        assert any("MPTCP" in str(item) for item in policy.report()["not_confined"])  # type: ignore[attr-defined]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    reason = procutil.loopback_reason()
    if reason is not None:
        pytest.skip(reason)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    yield server
    server.close()


def _accepted(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except OSError:
        return False
    connection.close()
    return True


# -- N1: TCP through MPTCP, Fast Open, listen() without bind --------------------------------


async def test_n1_mptcp_fast_open_and_listen_do_not_reach_the_host(
    policy: Containment, root: Path, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "hits = []\n"
        "for kind in ('mptcp', 'tfo', 'listen'):\n"
        "    try:\n"
        "        if kind == 'mptcp':\n"
        "            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)\n"
        f"            s.settimeout(2); s.connect(('127.0.0.1', {port}))\n"
        "        elif kind == 'tfo':\n"
        "            s = socket.socket(); s.settimeout(2)\n"
        f"            s.sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', {port}))\n"
        "        else:\n"
        "            s = socket.socket(); s.listen()\n"
        "        hits.append(kind)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('HITS', *hits)\n"
    )
    outcome, output = await run_python(policy, root, code)
    assert Outcome.exited(0) == outcome, output
    reached = _accepted(listener)
    refused_or_reported(policy, reached)
    if policy.namespaces.made:
        assert "mptcp" not in output.split("HITS")[1]
        assert "tfo" not in output.split("HITS")[1]


# -- N2: a fork+setsid chain outlives the call ----------------------------------------------


def _marked(mark: str) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as file:
                if mark.encode() in file.read():
                    count += 1
        except OSError:
            continue
    return count


CHAIN_CODE: Final = (
    "import os, sys, time\n"
    "end = time.time() + 30\n"
    "for i in range(int(sys.argv[1])):\n"
    "    if os.fork():\n"
    "        while time.time() < end: time.sleep(0.2)\n"
    "        os._exit(0)\n"
    "    os.setsid()\n"
    "print('deep', flush=True)\n"
    "while time.time() < end: time.sleep(0.2)\n"
)


async def test_n2_a_setsid_chain_ends_with_its_call(policy: Containment, root: Path) -> None:
    """None of a 200-deep fork+setsid chain is left after the join, on either path."""
    mark = f"MARK-N2-{os.getpid()}-{time.monotonic_ns()}"
    out, err = Collect(), Collect()
    spec = Spec(
        PYTHON,
        ("-I", "-c", CHAIN_CODE, str(CHAIN), mark),
        str(root),
        ("PATH=/usr/bin:/bin",),
        b"",
        out,
        err,
    )
    process = await PosixLauncher.build(policy, str(root)).start(spec)
    async with asyncio.timeout(BOUND):
        while b"deep" not in out.data:  # noqa: ASYNC110 - polling a sink, bounded
            await asyncio.sleep(0.05)
    assert _marked(mark) > CHAIN // 2
    await process.force_kill()
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert _marked(mark) == 0


def test_n2_a_setsid_chain_ends_when_the_server_is_killed(
    policy: Containment, root: Path, tmp_path: Path
) -> None:
    """SIGKILL of a server mid-chain: within the bound no process of the chain is left."""
    mark = f"MARK-N2K-{os.getpid()}-{time.monotonic_ns()}"
    use_namespaces = "1" if policy.namespaces.made else "0"
    server = (
        "import asyncio, dataclasses, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from procutil import Collect\n"
        "from spice.agent.coding import PosixLauncher\n"
        "from spice.agent.coding._posix import _bwrap\n"
        "from spice.agent.coding._posix._bwrap import Namespaces\n"
        "from spice.agent.coding._posix._launcher import adopt_orphans\n"
        "from spice.agent.coding._posix._containment import resolve_containment\n"
        "from spice.agent.process import Spec\n"
        "adopt_orphans()\n"
        "made = Namespaces()\n"
        "if sys.argv[3] == '1': made = _bwrap.resolve_namespaces('/nonexistent')\n"
        "policy = dataclasses.replace(resolve_containment('workspace'), namespaces=made)\n"
        "async def main():\n"
        "    out = Collect()\n"
        "    argv = ('-I', '-c', sys.argv[5], sys.argv[6], sys.argv[7])\n"
        "    spec = Spec(sys.argv[4], argv, sys.argv[2], ('PATH=/usr/bin:/bin',), b'', out,\n"
        "                Collect())\n"
        "    await PosixLauncher.build(policy, sys.argv[2]).start(spec)\n"
        "    while b'deep' not in out.data: await asyncio.sleep(0.05)\n"
        "    print('ready', flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    tests = str(Path(__file__).parents[1])
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            server,
            tests,
            str(root),
            use_namespaces,
            PYTHON,
            CHAIN_CODE,
            str(CHAIN),
            mark,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        assert _marked(mark) > CHAIN // 2
        child.kill()
        child.wait()
        deadline = time.monotonic() + BOUND
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(mark) == 0
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


# -- N3: prlimit and setpriority on the server ----------------------------------------------


def attempt(statement: str) -> str:
    """Python lines that run ``statement`` and print ``REACHED``, or ``REFUSED`` on OSError."""
    return f"try:\n    {statement}\n    print('REACHED')\nexcept OSError:\n    print('REFUSED')\n"


async def test_n3_prlimit_of_the_server_is_refused(policy: Containment, root: Path) -> None:
    code = "import resource\n" + attempt(f"resource.prlimit({os.getpid()}, resource.RLIMIT_CORE)")
    outcome, output = await run_python(policy, root, code)
    assert Outcome.exited(0) == outcome, output
    refused_or_reported(policy, "REACHED" in output)


# -- N4: a worktree holding the server's code ------------------------------------------------


async def test_n4_the_server_imports_no_module_once_a_command_could_have_written(
    tmp_path: Path,
) -> None:
    """The rest of N4: a module the server imported for the first time after a command ran
    could come from a ``.venv`` beneath the root that the command rewrote. Over stdio, with
    the real client, every outcome the schema corpus provokes (the three tools, success and
    every failure, a timed-out command) imports nothing once the first command may have
    run: ``-X importtime`` logs no import after the mark, and many before it."""
    root = lay_out(tmp_path / "root")
    log = tmp_path / "imports.log"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-X", "importtime", str(SCRIPT), "serve", "--root", str(root)],
        cwd=str(tmp_path),
    )
    with log.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await client.list_tools()
            await client.call_tool("read", {"path": "a.txt"})
            before = log.read_text(encoding="utf-8")
            for name, arguments in CORPUS:
                await client.call_tool(name, arguments)
            await client.list_tools()
            after = log.read_text(encoding="utf-8")[len(before) :]
    assert IMPORTS_BEFORE_THE_MARK <= _imports(before)
    assert 0 == _imports(after), after


IMPORTS_BEFORE_THE_MARK: Final = 100
"""The log is not vacuous: serving imports hundreds of modules before the first command."""


def _imports(log: str) -> int:
    return sum(line.startswith("import time:") for line in log.splitlines())


# -- N6: as root, mknod and capabilities -----------------------------------------------------


async def test_n6_no_capability_is_held_and_mknod_is_refused(
    policy: Containment, root: Path
) -> None:
    code = (
        "import os, stat\n"
        "lines = open('/proc/self/status').read().splitlines()\n"
        "caps = [l.split()[1] for l in lines if l.startswith(('CapEff', 'CapBnd'))]\n"
        "print('CAPS', *caps)\n"
        + attempt("os.mknod('blk', stat.S_IFBLK | 0o600, os.makedev(7, 0))")
    )
    outcome, output = await run_python(policy, root, code)
    assert Outcome.exited(0) == outcome, output
    assert "REACHED" not in output
    if policy.contained and (os.geteuid() == 0 or policy.namespaces.made):
        assert "CAPS 0000000000000000 0000000000000000" in output
    elif policy.contained:
        # An unprivileged server without namespaces cannot empty the bounding set (no
        # CAP_SETPCAP): the command holds nothing (CapEff 0) and no_new_privs keeps it so.
        assert "CAPS 0000000000000000 " in output


# -- N8: SysV shared memory and the user keyring ---------------------------------------------


async def test_n8_sysv_shared_memory_outside_the_call_is_unreachable(
    policy: Containment, root: Path
) -> None:
    import ctypes  # noqa: PLC0415 - only this test needs it

    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5EC0DE00 + (os.getpid() & 0xFF)
    segment = libc.shmget(key, 4096, 0o1000 | 0o600)
    if segment < 0:
        pytest.skip("SysV shared memory is unavailable here")
    try:
        code = (
            "import ctypes\n"
            "c = ctypes.CDLL(None)\n"
            f"print('REACHED' if c.shmget({key}, 0, 0) >= 0 else 'REFUSED')\n"
        )
        outcome, output = await run_python(policy, root, code)
        assert Outcome.exited(0) == outcome, output
        refused_or_reported(policy, "REACHED" in output)
    finally:
        libc.shmctl(segment, 0, None)


async def test_n2_the_answer_says_clean_only_when_no_process_of_the_call_is_left(
    policy: Containment, root: Path
) -> None:
    """Through the shell tool with a timeout: after the answer none of the chain is left,
    and ``managed_cleanup_completed`` is true only then (or the call is an error)."""
    from spice.agent.coding import PosixResolver  # noqa: PLC0415
    from spice.agent.dispatch import Dispatcher  # noqa: PLC0415
    from spice.agent.tool import Call  # noqa: PLC0415
    from spice.agent.tools.coding import Config, new_shell  # noqa: PLC0415

    mark = f"MARK-N2T-{os.getpid()}-{time.monotonic_ns()}"
    (root / "deep.py").write_text(CHAIN_CODE)
    config = Config(root, environment_allowlist=("PATH",))
    tool, cleanup = new_shell(config, PosixResolver(), PosixLauncher.build(policy, str(root)))
    arguments = {"argv": [PYTHON, "deep.py", str(CHAIN), mark], "timeout_seconds": 2}
    try:
        async with asyncio.timeout(BOUND):
            result = await Dispatcher([tool]).dispatch(Call("c", "shell", json.dumps(arguments)))
        left = _marked(mark)
        content = json.loads(result.content)
        if isinstance(content, dict) and "managed_cleanup_completed" in content:
            assert content["timed_out"] is True
            assert content["managed_cleanup_completed"] is (left == 0)
        assert left == 0
    finally:
        async with asyncio.timeout(BOUND):
            await cleanup()


_ADD_KEY: Final = 248
_KEYCTL: Final = 250
_KEYCTL_SEARCH: Final = 10
_KEYCTL_UNLINK: Final = 9
_KEY_SPEC_USER_KEYRING: Final = -4


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 syscall numbers")
async def test_n8_a_key_added_inside_is_not_in_the_users_keyring(
    policy: Containment, root: Path
) -> None:
    import ctypes  # noqa: PLC0415 - only this test needs it

    description = f"spice-planted-{os.getpid()}-{time.monotonic_ns()}"
    code = (
        "import ctypes\n"
        "c = ctypes.CDLL(None, use_errno=True)\n"
        f"key = c.syscall({_ADD_KEY}, b'user', {description.encode()!r}, b'x', 1, "
        f"{_KEY_SPEC_USER_KEYRING})\n"
        "print('ADDED' if key > 0 else 'REFUSED')\n"
    )
    outcome, output = await run_python(policy, root, code)
    assert Outcome.exited(0) == outcome, output
    libc = ctypes.CDLL(None, use_errno=True)
    found = libc.syscall(
        _KEYCTL, _KEYCTL_SEARCH, _KEY_SPEC_USER_KEYRING, b"user", description.encode(), 0
    )
    if found > 0:
        libc.syscall(_KEYCTL, _KEYCTL_UNLINK, found, _KEY_SPEC_USER_KEYRING)
    refused_or_reported(policy, found > 0)


async def connects_from_inside(policy: Containment, root: Path, path: str) -> bool:
    """Whether a contained command reaches the named UNIX socket ``path`` (a live listener);
    the command also writes in its worktree, which must work either way."""
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        + attempt(f"s.connect({path!r})")
        + "open('written-in-the-worktree', 'w').write('x')\n"
    )
    outcome, output = await run_python(policy, root, code)
    assert Outcome.exited(0) == outcome, output
    assert (root / "written-in-the-worktree").exists()
    return "REACHED" in output


def hidden_or_reported(policy: Containment, reached: bool) -> None:
    """With namespaces the socket is not there; without them the report names the gap."""
    if policy.namespaces.made:
        assert not reached
    else:
        assert reached
        named = [str(item) for item in policy.report()["not_confined"]]  # type: ignore[attr-defined]
        assert any("named UNIX sockets" in item for item in named)


async def test_a_daemons_socket_in_run_is_hidden_without_the_network(
    policy: Containment, root: Path
) -> None:
    """Docker's, D-Bus's or PostgreSQL's socket lives in /run: without the network the
    namespace path shows an empty /run; without namespaces it stays reachable (and the
    report names it)."""
    path = f"/run/spice-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(path)
    except OSError:
        server.close()
        pytest.skip("/run is not writable here")
    server.listen(1)
    try:
        hidden_or_reported(policy, await connects_from_inside(policy, root, path))
    finally:
        server.close()
        os.unlink(path)


async def test_an_agents_socket_in_tmp_is_hidden_by_the_private_tmp(
    policy: Containment, root: Path, tmp_path: Path
) -> None:
    """ssh-agent's socket (``/tmp/ssh-*/agent.N``) and X11's live in the host's /tmp: the
    namespace path gives each call its own /tmp, so they are not there; without
    namespaces Landlock does not confine ``connect(2)`` to a named socket, and the report
    names it. The worktree itself lies beneath /tmp here, and stays writable."""
    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    try:
        hidden_or_reported(policy, await connects_from_inside(policy, root, path))
    finally:
        server.close()
        os.unlink(path)
