"""Process lifetime in every sandbox mode (contract 9.4), with real servers and processes.

- A ``spice-coding serve`` killed with SIGKILL mid-call leaves no process behind within
  ``SERVER_DEATH_BOUND_SECONDS``.
- Descendants that leave the group (``setsid``, a double fork) end when their call does.
- Orphans of a supervisor that was itself killed come back to the server (a subreaper)
  and are ended at the call's join.
- The server is non-dumpable: a child running as the same non-root user cannot read
  the server's ``/proc/PID/environ``.
- ``--sandbox workspace`` on a kernel without Landlock refuses to start; ``auto`` warns.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import procutil
import pytest
from raw_peer import SERVER, RawPeer, tool_call
from reachable import sources_for_others

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding import _cli as cli
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix import _containment as containment_module
from spice.agent.coding._posix._containment import Containment, describe, resolve_containment
from spice.agent.coding._posix._launcher import SERVER_DEATH_BOUND_SECONDS
from spice.agent.coding._posix._supervisor import _landlock as landlock
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.coding._sandbox import AUTO_WITHOUT_LANDLOCK, NO_LANDLOCK, ContainmentUnavailable
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

BOUND: Final = 60.0
"""Hang guard (never a timing assertion)."""

ABI: Final = landlock_abi()
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
MODES: Final = [
    "off",
    pytest.param("workspace", marks=pytest.mark.skipif(ABI < 1, reason="no Landlock")),
]

# Children, a grandchild in a new session and a double-forked daemon, each writing its pid.
FAMILY: Final = (
    "sleep 60 & echo $! >> pids; "
    "(sleep 60 & echo $! >> pids; wait) & "
    "setsid sh -c 'echo $$ >> pids; exec sleep 60' & "
    "(setsid sh -c 'sleep 60 & echo $! >> pids' &) ; "
    "echo $$ >> pids; "
    "while [ $(wc -l < pids) -lt 5 ]; do sleep 0.01; done; echo ready; sleep 60"
)


def pids_in(path: Path) -> list[int]:
    """The pids a command wrote, one a line."""
    try:
        return [int(line) for line in path.read_text().split()]
    except FileNotFoundError:
        return []


def none_alive(pids: list[int]) -> bool:
    """True when none of ``pids`` runs any more (zombies count as gone)."""
    return not any(procutil.is_alive(pid) for pid in pids)


async def collect(pids: list[int]) -> None:
    """End whatever a failed test left running (the leak guard would name it otherwise)."""
    for pid in pids:
        if procutil.is_alive(pid):
            await procutil.kill_escapee(pid)


def supervisors_of(server: int) -> list[int]:
    """The live children of ``server`` (its per-call supervisors, or bwrap's monitors)."""
    return [p.pid for p in procutil.all_processes() if p.ppid == server and p.alive]


# -- the server dies -------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The worktree root, resolved."""
    return tmp_path.resolve()


@pytest.mark.parametrize("mode", MODES)
async def test_a_sigkilled_server_leaves_no_process_behind(root: Path, mode: str) -> None:
    """SIGKILL of ``serve`` mid-call: command, children, setsid'd and daemonised ones all end."""
    # The pids go to an --allow-write directory: a staged worktree shows nothing of a call
    # before it ends (contract 13.1), and this server is killed before that.
    signals = root / "signals"
    signals.mkdir()
    pidfile = signals / "pids"
    temporaries = root / "system-tmp"
    temporaries.mkdir()
    environment = {**os.environ, "TMPDIR": str(temporaries)}
    with RawPeer(root, "--sandbox", mode, "--allow-write", str(signals), env=environment) as peer:
        peer.initialize()
        script = FAMILY.replace("pids", str(pidfile))
        arguments = {"argv": ["sh", "-c", script], "timeout_seconds": 120}
        peer.send(tool_call(1, "shell", arguments))
        assert await procutil.until(lambda: len(pids_in(pidfile)) >= 5, BOUND)
        family = pids_in(pidfile)
        supervisors = supervisors_of(peer.pid)
        if mode != "off" and NAMESPACES.made:
            # In a PID namespace the pids it wrote are its own: take the host's view, the
            # processes seen in two looks 0.3 s apart (not the polling loop's short ones).
            first = {pid for s in supervisors for pid in landlock.descendants(s)}
            await asyncio.sleep(0.3)
            second = {pid for s in supervisors for pid in landlock.descendants(s)}
            family = sorted(first & second)
        try:
            assert family
            assert all(procutil.is_alive(pid) for pid in family)
            assert len(supervisors) == 1
            # Without namespaces workspace mode makes a TMPDIR on the host; with them the
            # call's TMPDIR is its mount namespace's private /tmp.
            assert (mode == "workspace" and not NAMESPACES.made) == any(temporaries.iterdir())
            os.kill(peer.pid, signal.SIGKILL)
            peer.process.wait(BOUND)
            # The bound of the contract, polled (no sleep): everything is gone by then.
            assert await procutil.until(
                lambda: none_alive(family + supervisors), SERVER_DEATH_BOUND_SECONDS
            )
            # The supervisor removed the call's TMPDIR itself (workspace mode makes one).
            assert await procutil.until(lambda: not any(temporaries.iterdir()))
        finally:
            await collect(family + supervisors)


def zombies_of(server: int) -> list[int]:
    """The children of ``server`` that exited and were not reaped."""
    return [p.pid for p in procutil.all_processes() if p.ppid == server and p.state == "Z"]


@pytest.mark.parametrize("mode", MODES)
async def test_calls_that_end_descendants_leave_the_server_no_zombie(root: Path, mode: str) -> None:
    """A call whose background descendant is ended at its join, and a call stopped at its
    timeout: nothing of them stays the server's child, not even unreaped. With namespaces
    the supervisor outlives bwrap's monitor there and comes to the server (a subreaper)."""
    with RawPeer(root, "--sandbox", mode) as peer:
        peer.initialize()
        background = {"argv": ["sh", "-c", "sleep 60 & echo started"], "timeout_seconds": 60}
        peer.send(tool_call(1, "shell", background))
        first = json.loads(peer.answer(1)["result"]["content"][0]["text"])
        stopped = {"argv": ["sleep", "60"], "timeout_seconds": 1}
        peer.send(tool_call(2, "shell", stopped))
        second = json.loads(peer.answer(2)["result"]["content"][0]["text"])
        assert (True, True) == (first["ok"], first["managed_cleanup_completed"])
        assert (False, True) == (second["ok"], second["managed_cleanup_completed"])
        assert await procutil.until(lambda: not zombies_of(peer.pid), BOUND)
        assert [] == supervisors_of(peer.pid)


# -- descendants that leave the group ---------------------------------------------------------


@pytest.fixture(params=MODES)
async def shell(request: pytest.FixtureRequest, root: Path) -> AsyncIterator[Dispatcher]:
    """The product's shell over the launcher in each mode."""
    mode = str(request.param)
    policy = resolve_containment(mode)
    tool, cleanup = new_shell(Config(root), PosixResolver(), PosixLauncher.build(policy, str(root)))
    yield Dispatcher([tool])
    async with asyncio.timeout(BOUND):
        await cleanup()


async def test_setsid_and_double_fork_descendants_end_with_their_call(
    shell: Dispatcher, root: Path
) -> None:
    """After the call answers, no process the command started is alive."""
    pidfile = root / "pids"
    script = FAMILY.replace("; echo ready; sleep 60", "")
    call = Call("c", "shell", json.dumps({"argv": ["sh", "-c", script]}))
    try:
        async with asyncio.timeout(BOUND):
            result = await shell.dispatch(call)
        content = json.loads(result.content)
        assert (True, 0) == (content["ok"], content["exit_code"])
        family = pids_in(pidfile)
        assert len(family) == 5
        assert none_alive(family)
    finally:
        await collect(pids_in(pidfile))


async def test_a_timed_out_call_ends_descendants_that_left_the_group(
    shell: Dispatcher, root: Path
) -> None:
    """Stop, grace, force, join: the setsid'd grandchild goes with the rest."""
    pidfile = root / "pids"
    arguments = {"argv": ["sh", "-c", FAMILY], "timeout_seconds": 5}
    call = Call("c", "shell", json.dumps(arguments))
    try:
        async with asyncio.timeout(BOUND):
            result = await shell.dispatch(call)
        content = json.loads(result.content)
        assert (False, "timed_out") == (content["ok"], content["code"])
        assert none_alive(pids_in(pidfile))
    finally:
        await collect(pids_in(pidfile))


def test_orphans_of_a_killed_supervisor_are_ended_by_the_servers_join(root: Path) -> None:
    """The command kills its own supervisor (sandbox off); its setsid'd child still ends."""
    pidfile = root / "pids"
    script = "setsid sleep 60 & echo $! >> pids; sleep 0.2; kill -KILL $PPID; sleep 60"
    arguments = json.dumps({"argv": ["sh", "-c", script]})
    completed = subprocess.run(
        [str(SERVER), "--root", str(root), "call", "--sandbox", "off", "shell", arguments],
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    family = pids_in(pidfile)
    try:
        assert 1 == completed.returncode
        assert json.loads(completed.stdout)["ok"] is False
        assert len(family) == 1
        assert none_alive(family)
    finally:
        asyncio.run(collect(family))


# -- dumpability -------------------------------------------------------------------------------

NOBODY: Final = 65534
ENVIRON_PROBE: Final = (
    "import os\n"
    "supervisor = os.getppid()\n"
    "raw = open(f'/proc/{supervisor}/stat', 'rb').read()\n"
    "server = int(raw[raw.rindex(b')') + 2 :].split()[1])\n"
    "open('/proc/self/environ', 'rb').read()\n"
    "print('own environ readable')\n"
    "for pid in (server, supervisor):\n"
    "    try:\n"
    "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
    "    except (PermissionError, FileNotFoundError):  # a PID namespace hides it\n"
    "        print('denied')\n"
    "    else:\n"
    "        print('read', b'SPICE_PLANTED' in data)\n"
)


def interpreter_for(uid: int) -> str | None:
    """An interpreter of our Python version whose path ``uid`` may traverse, or None."""
    for candidate in (
        sys.executable,
        f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}",
    ):
        path = Path(candidate).resolve()
        if not path.exists():
            continue
        reachable = all(os.stat(parent).st_mode & 0o001 for parent in path.parents)
        if reachable:
            return candidate
    del uid
    return None


@pytest.fixture
def nobody_root() -> Iterator[Path]:
    """A worktree the unprivileged user owns (outside pytest's root-only temp tree)."""
    if os.getuid() != 0:
        pytest.skip("needs root to run the server as another user")
    path = Path(tempfile.mkdtemp(prefix="spice-nobody-"))
    os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nobody_spare() -> Iterator[Path]:
    """A directory beside the worktree that every user may enter, for what the unprivileged
    server needs of this checkout (``reachable.sources_for_others``)."""
    path = Path(tempfile.mkdtemp(prefix="spice-nobody-spare-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_a_same_user_child_cannot_read_the_servers_environment(
    nobody_root: Path, nobody_spare: Path, mode: str
) -> None:
    """Server and command both run as uid 65534; the server's environ is denied to it."""
    python = interpreter_for(NOBODY)
    if python is None:
        pytest.skip("no interpreter reachable by the unprivileged user")
    sources = sources_for_others(nobody_spare)
    bootstrap = (
        "import sys\n"
        f"sys.path[:0] = {sources!r}\n"
        "from spice.agent.coding._cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    arguments = json.dumps({"argv": [python, "-c", ENVIRON_PROBE]})
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(nobody_root), "SPICE_PLANTED": "secret"}
    completed = subprocess.run(
        [
            python,
            "-c",
            bootstrap,
            "--root",
            str(nobody_root),
            "call",
            "--sandbox",
            mode,
            "shell",
            arguments,
        ],
        capture_output=True,
        timeout=BOUND,
        check=False,
        env=environment,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd=nobody_root,
    )
    assert 0 == completed.returncode, completed.stderr
    lines = json.loads(completed.stdout)["stdout"].splitlines()
    assert ["own environ readable", "denied", "denied"] == lines


# -- the settings: workspace without Landlock, auto's fallback ---------------------------------


def no_landlock() -> int:
    """A kernel without Landlock, as the probe would answer it."""
    return 0


@pytest.mark.parametrize("command", [["call", "read", '{"path": "x"}'], ["serve"]])
def test_workspace_without_landlock_refuses_to_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    """One line on stderr, exit 2, nothing served or run."""
    monkeypatch.setattr(landlock, "landlock_abi", no_landlock)
    code = cli.main(["--root", str(tmp_path), command[0], "--sandbox", "workspace", *command[1:]])
    captured = capsys.readouterr()
    assert (2, "") == (code, captured.out)
    assert [f"spice-coding: {NO_LANDLOCK}"] == captured.err.splitlines()


def test_workspace_from_the_environment_is_refused_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SPICE_AGENT_SANDBOX=workspace without Landlock: the same refusal."""
    monkeypatch.setattr(landlock, "landlock_abi", no_landlock)
    monkeypatch.setenv("SPICE_AGENT_SANDBOX", "workspace")
    assert 2 == cli.main(["--root", str(tmp_path), "serve"])
    assert [f"spice-coding: {NO_LANDLOCK}"] == capsys.readouterr().err.splitlines()


def test_auto_without_landlock_warns_and_runs_uncontained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """auto falls back to off with a warning; the tools output says contained false."""
    monkeypatch.setattr(landlock, "landlock_abi", no_landlock)
    assert 0 == cli.main(["--root", str(tmp_path), "tools"])
    captured = capsys.readouterr()
    assert f"spice-coding: {AUTO_WITHOUT_LANDLOCK}" in captured.err.splitlines()
    sandbox = json.loads(captured.out)["sandbox"]
    assert ("off", "auto", False, 0) == (
        sandbox["mode"],
        sandbox["requested"],
        sandbox["contained"],
        sandbox["abi"],
    )
    assert [] == sandbox["enforced"]
    assert sandbox["process_lifetime"].startswith("commands and their descendants end")


def test_the_report_says_when_the_lifetime_is_not_guaranteed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the supervisor (macOS) the tools report does not promise it."""
    from spice.agent.coding._posix import _launcher as launcher_module  # noqa: PLC0415

    monkeypatch.setattr(launcher_module, "_supervisor_available", lambda: False)
    report = PosixLauncher().report()
    assert str(report["process_lifetime"]).startswith("not guaranteed here")
    assert (False, "off") == (report["contained"], report["mode"])


@pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")
def test_the_tools_output_reports_the_rules_the_kernel_offers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside the definitions: mode, contained, ABI, and the rules enforced and missing."""
    assert 0 == cli.main(["--root", str(tmp_path), "tools"])
    document = json.loads(capsys.readouterr().out)
    sandbox = document["sandbox"]
    expected = resolve_containment("auto", root=str(tmp_path))
    assert ("workspace", expected.contained, ABI) == (
        sandbox["mode"],
        sandbox["contained"],
        sandbox["abi"],
    )
    assert list(expected.enforced) == sandbox["enforced"]
    assert list(expected.missing) == sandbox["missing"]
    assert (list(expected.filtered) or None) == sandbox["seccomp"]
    assert list(expected.capabilities) == sandbox["capabilities"]
    assert "none_held" in sandbox["capabilities"]
    shell = next(t for t in document["tools"] if t["name"] == "shell")
    staged = document["sandbox"].get("stage", {}).get("staged") is True
    sentence = describe(expected, protected=True, staged=staged)
    assert sentence is not None
    assert sentence in shell["description"]


def test_a_contained_policy_needs_an_abi() -> None:
    """The value refuses workspace without Landlock, unknown modes, and the resolver too."""
    with pytest.raises(ValueError, match="Landlock"):
        Containment("workspace", "workspace", 0)
    with pytest.raises(ValueError, match="mode"):
        Containment("strict")
    with pytest.raises(ContainmentUnavailable):
        resolve_containment("workspace", probe=no_landlock)
    with pytest.raises(ValueError, match="mode"):
        resolve_containment("strict", probe=no_landlock)
    assert Containment("off", "off", 0) == resolve_containment("off", probe=no_landlock)


@pytest.mark.parametrize("abi", range(8))
def test_each_abi_reports_every_rule_once_as_enforced_or_missing(abi: int) -> None:
    """What is enforced plus what is missing is every rule; the network flag waives TCP."""
    from spice.agent.coding._posix._supervisor._landlock import RULES  # noqa: PLC0415

    names = [name for name, _ in RULES]
    if abi == 0:
        policy = resolve_containment("auto", probe=lambda: abi)
        assert ((), tuple(names)) == (policy.enforced, policy.missing)
        assert policy.sentence is None
        return
    strict = resolve_containment("workspace", probe=lambda: abi, seccomp_probe=lambda: False)
    assert sorted(names) == sorted(strict.enforced + strict.missing)
    sentence = strict.sentence
    assert sentence is not None
    assert len(sentence.encode()) <= containment_module.MAXIMUM_SENTENCE_BYTES
    assert ("TCP" in sentence) == (abi >= 4)
    assert ("signal" in sentence) == (abi >= 6)
    networked = resolve_containment("workspace", allow_network=True, probe=lambda: abi)
    assert not {"tcp_bind", "tcp_connect"} & set(networked.enforced)
    filtered = resolve_containment("workspace", probe=lambda: abi, seccomp_probe=lambda: True)
    sentence = filtered.sentence
    assert sentence is not None
    assert len(sentence.encode()) <= containment_module.MAXIMUM_SENTENCE_BYTES
    assert "only UNIX sockets" in sentence
    assert "TCP" not in sentence


def test_a_launcher_refuses_a_contained_policy_without_a_root() -> None:
    """workspace needs the absolute root; a non-policy is a TypeError."""
    policy = Containment("workspace", "workspace", 1)
    with pytest.raises(ValueError, match="root"):
        PosixLauncher(policy)
    with pytest.raises(ValueError, match="root"):
        PosixLauncher(policy, "relative")
    with pytest.raises(TypeError):
        PosixLauncher("workspace")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="root"):
        PosixLauncher.build(policy)
    with pytest.raises(TypeError):
        PosixLauncher.build("workspace")  # type: ignore[arg-type]


def test_the_constructor_holds_what_it_is_given_and_the_builder_reads(tmp_path: Path) -> None:
    """A contained launcher's facts and guard come from ``build`` (which reads the worktree):
    the constructor refuses to stand without them rather than read anything itself."""
    policy = Containment("workspace", "workspace", 1)
    with pytest.raises(ValueError, match="facts and guard"):
        PosixLauncher(policy, str(tmp_path))
    built = PosixLauncher.build(policy, str(tmp_path))
    assert "plan" in built.report()  # its facts, read by the builder


def test_the_server_death_bound_is_the_contracts() -> None:
    """Two seconds, as contract 9.4 says."""
    assert 2.0 == SERVER_DEATH_BOUND_SECONDS
