"""The layers the supervisor puts a contained command under: capabilities and seccomp.

Capabilities are dropped for real in forked children of the test (as root, and as an
unprivileged user, with a setuid-root program); the whole path (supervisor, its child,
``execve``) is then checked through ``PosixLauncher`` and the product's shell tool in
``workspace`` mode, where each attack of ``sandbox-attacks.md`` N1, N3, N6 and N8 is
tried from inside a command and must fail with ``EPERM``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding._posix import _launcher as launcher_module
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._supervisor import _landlock as landlock
from spice.agent.coding._posix._supervisor import _main as supervisor
from spice.agent.coding._posix._supervisor._seccomp import available as seccomp_available
from spice.agent.dispatch import Dispatcher
from spice.agent.process import LaunchError, Outcome, Spec
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

PYTHON: Final = os.path.normpath(sys.executable)
BOUND: Final = 60.0
"""Hang guard for one command (never a timing assertion)."""
NOBODY: Final = 65534
CAPABILITY_LINES: Final = ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:")

ABI: Final = landlock.landlock_abi()
SECCOMP: Final = seccomp_available()
ROOT: Final = os.geteuid() == 0
needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
needs_root = pytest.mark.skipif(not ROOT, reason="needs root")
needs_landlock = pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")
needs_seccomp = pytest.mark.skipif(not SECCOMP, reason="no seccomp filter on this machine")


def own_status() -> str:
    """This process's ``/proc/self/status``."""
    with open("/proc/self/status", encoding="ascii") as file:
        return file.read()


def status_fields(text: str, names: tuple[str, ...] = CAPABILITY_LINES) -> dict[str, str]:
    """The named lines of a ``/proc/PID/status`` text, name to first value."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if name in names:
            found[name] = value.split()[0]
    return found


def in_child(body: Callable[[], object]) -> object:
    """Run ``body`` in a forked child; its JSON-able answer (or what it raised)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(read)
            os.write(write, json.dumps(body()).encode())
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            os.write(write, json.dumps({"raised": f"{type(error).__name__} {error}"}).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def read_status_after_exec(*argv: str) -> str:
    """``argv`` run to its end (it prints a status file); its output."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        os.dup2(write, 1)
        os.execv(argv[0], list(argv))  # noqa: S606 - a fixed program, the point
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


ZERO: Final = dict.fromkeys(CAPABILITY_LINES, "0000000000000000")


# -- capabilities, in forked children ----------------------------------------------------------


@needs_linux
@needs_root
def test_root_ends_with_no_capability_and_locked_securebits_also_after_exec() -> None:
    """As root: every set empty (bounding too), SECURE_BITS locked; an exec regains none."""

    def drop() -> dict[str, object]:
        landlock.prctl(landlock.PR_SET_NO_NEW_PRIVS, 1)
        achieved = landlock.drop_capabilities()
        return {
            "achieved": achieved,
            "securebits": landlock.prctl(landlock.PR_GET_SECUREBITS, 0),
            "status": status_fields(Path("/proc/self/status").read_text()),
            "after_exec": status_fields(read_status_after_exec("/bin/cat", "/proc/self/status")),
        }

    before = status_fields(Path("/proc/self/status").read_text())
    assert ZERO["CapEff:"] != before["CapEff:"]  # root holds capabilities to start with
    answer = in_child(drop)
    assert {
        "achieved": landlock.LAYER_CAPABILITIES | landlock.LAYER_BOUNDING,
        "securebits": landlock.SECURE_BITS,
        "status": ZERO,
        "after_exec": ZERO,
    } == answer


@needs_linux
@needs_root
def test_root_without_the_drop_regains_capabilities_at_exec() -> None:
    """The control: root's exec gives full sets back when nothing is dropped."""
    fields = status_fields(read_status_after_exec("/bin/cat", "/proc/self/status"))
    assert ZERO["CapEff:"] != fields["CapEff:"]


def _setuid_cat() -> Path:
    """A setuid-root copy of ``cat`` that any user can run (in a fresh /tmp directory)."""
    directory = Path(tempfile.mkdtemp(prefix="spice-setuid-", dir="/tmp"))
    directory.chmod(0o755)
    copy = directory / "cat"
    shutil.copy2("/bin/cat", copy)
    os.chown(copy, 0, 0)
    copy.chmod(0o4755)
    return copy


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@needs_linux
@needs_root
def test_a_setuid_root_program_gives_an_unprivileged_command_nothing() -> None:
    """As nobody after the drop: the setuid-root copy runs as nobody with no capability."""
    copy = _setuid_cat()
    try:
        uid_lines = ("Uid:", *CAPABILITY_LINES[:3])

        def control() -> dict[str, str]:
            _as_nobody()
            return status_fields(read_status_after_exec(str(copy), "/proc/self/status"), uid_lines)

        def dropped() -> dict[str, object]:
            _as_nobody()
            landlock.prctl(landlock.PR_SET_NO_NEW_PRIVS, 1)
            achieved = landlock.drop_capabilities()
            text = read_status_after_exec(str(copy), "/proc/self/status")
            return {"achieved": achieved, "status": status_fields(text, uid_lines)}

        gained = in_child(control)
        assert isinstance(gained, dict)
        assert ZERO["CapEff:"] != gained["CapEff:"]  # the setuid bit works without the drop
        assert (
            {
                "achieved": landlock.LAYER_CAPABILITIES,  # no CAP_SETPCAP: the bounding set stays
                "status": {"Uid:": str(NOBODY), **{n: ZERO[n] for n in CAPABILITY_LINES[:3]}},
            }
            == in_child(dropped)
        )
    finally:
        shutil.rmtree(copy.parent)


@needs_linux
def test_the_reported_capability_state_matches_the_process() -> None:
    """``capabilities`` of a contained policy names the bounding set only with CAP_SETPCAP."""
    policy = Containment("workspace", "workspace", 1)
    expected = (
        ("none_held", "bounding_set_empty", "securebits_locked")
        if landlock.can_empty_bounding_set()
        else ("none_held", "no_new_privs")
    )
    assert expected == policy.capabilities
    assert () == Containment("off").capabilities


def test_the_layers_follow_the_policy() -> None:
    """Contained: capabilities always, seccomp where available; off: no layer at all."""
    with_filter = Containment("workspace", "workspace", 1, seccomp=True)
    without = Containment("workspace", "workspace", 1, seccomp=False)
    assert landlock.LAYER_CAPABILITIES | landlock.LAYER_SECCOMP == with_filter.layers
    assert landlock.LAYER_CAPABILITIES == without.layers
    assert 0 == Containment("off", seccomp=True).layers
    assert () == without.filtered
    assert "system calls (no seccomp)" in without.not_confined
    assert "system calls (no seccomp)" not in with_filter.not_confined
    assert "UDP and other non-TCP sockets" not in with_filter.not_confined


def test_the_spec_carries_the_layers() -> None:
    """The spec's layers reach the supervisor's reading of the spec."""
    for layers in (0, landlock.LAYER_SECCOMP | landlock.LAYER_CAPABILITIES | landlock.PRIVATE_IPC):
        blob = supervisor.SupervisorSpec(
            server=1,
            abi=3,
            writable=[b"/w"],
            executable=b"/bin/true",
            arguments=[b"a"],
            environment=[b"K=V"],
            layers=layers,
        ).encode()
        spec = supervisor.SupervisorSpec.decode(blob)
        assert (layers, (b"/w",), [b"/bin/true", b"a"]) == (
            spec.layers,
            spec.writable,
            spec.argv,
        )


# -- the whole path: the launcher in workspace mode ----------------------------------------------


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A worktree root, and the system temp dir inside the test's own directory."""
    root = (tmp_path / "root").resolve()
    temporaries = (tmp_path / "tmp").resolve()
    root.mkdir()
    temporaries.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporaries))
    return root


async def run(launcher: PosixLauncher, root: Path, *argv: str) -> tuple[Outcome, str, int]:
    """Run ``argv`` to its end; outcome, stdout and the layers the start reported."""
    out, err = Collect(), Collect()
    environment = ("PATH=/usr/bin:/bin", "HOME=/nonexistent")
    spec = Spec(argv[0], argv[1:], str(root), environment, b"", out, err)
    process = await launcher.start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return process.result(), out.data.decode(), process.layers


@needs_landlock
async def test_a_contained_command_holds_nothing_and_runs_filtered(layout: Path) -> None:
    """Through the supervisor: sets empty, Seccomp 2, NoNewPrivs 1; the start says so."""
    policy = resolve_containment("workspace")
    outcome, out, layers = await run(
        PosixLauncher.build(policy, str(layout)), layout, "/bin/cat", "/proc/self/status"
    )
    assert Outcome.exited(0) == outcome
    fields = status_fields(out, (*CAPABILITY_LINES, "Seccomp:", "NoNewPrivs:"))
    want = dict(ZERO)
    if not landlock.can_empty_bounding_set():
        want["CapBnd:"] = status_fields(own_status())["CapBnd:"]
    want |= {"Seccomp:": "2" if policy.seccomp else "0", "NoNewPrivs:": "1"}
    assert want == fields
    expected_layers = landlock.LAYER_LANDLOCK | policy.layers
    if landlock.can_empty_bounding_set():
        expected_layers |= landlock.LAYER_BOUNDING
    assert expected_layers == layers


async def test_an_uncontained_command_keeps_the_servers_capabilities(layout: Path) -> None:
    """--sandbox off: no layer is applied and the start reports none."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    outcome, out, layers = await run(PosixLauncher(), layout, "/bin/cat", "/proc/self/status")
    assert (Outcome.exited(0), 0) == (outcome, layers)
    ours = status_fields(own_status(), ("CapEff:", "Seccomp:"))
    assert ours == status_fields(out, ("CapEff:", "Seccomp:"))


FAILING_FILTER: Final = (
    "-I",
    "-S",
    "-c",
    "def _refuse(program):\n    raise OSError(1, 'refused')\n"
    + supervisor.BOOTSTRAP.replace(
        "exec(main[1], ", "sys.modules['_seccomp'].install = _refuse\nexec(main[1], "
    ),
)
"""The supervisor with a kernel that refuses the filter (the fault cannot be made for real)."""


@needs_landlock
async def test_a_filter_the_kernel_refuses_fails_the_start_and_nothing_runs(
    layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promised layer that cannot be applied: LaunchError, and the command never ran."""
    monkeypatch.setattr(launcher_module, "_SUPERVISOR_FLAGS", FAILING_FILTER)
    policy = Containment("workspace", "workspace", ABI, seccomp=True)
    marker = layout / "ran"
    with pytest.raises(LaunchError):
        await run(PosixLauncher.build(policy, str(layout)), layout, "/usr/bin/touch", str(marker))
    assert not marker.exists()
    landlock_only = Containment("workspace", "workspace", ABI, seccomp=False)
    outcome, _, _ = await run(
        PosixLauncher.build(landlock_only, str(layout)), layout, "/usr/bin/touch", str(marker)
    )
    assert Outcome.exited(0) == outcome  # the same supervisor without the layer starts it
    assert marker.exists()


@needs_landlock
@needs_root
async def test_landlock_alone_no_longer_lets_root_make_a_device(layout: Path) -> None:
    """MAKE_CHAR/MAKE_BLOCK are granted nowhere: root's mknod in the root fails (EACCES)."""
    landlock_only = resolve_containment("workspace", seccomp_probe=lambda: False)
    code = (
        "import os\n"
        "for name, mode in (('c', 0o20600), ('b', 0o60600), ('f', 0o10600)):\n"
        "    try:\n"
        "        os.mknod(name, mode, os.makedev(1, 3))\n"
        "        print('ok')\n"
        "    except OSError as error:\n"
        "        print(error.errno)\n"
    )
    outcome, out, _ = await run(
        PosixLauncher.build(landlock_only, str(layout)), layout, PYTHON, "-I", "-c", code
    )
    assert Outcome.exited(0) == outcome
    assert ["13", "13", "ok"] == out.split()  # EACCES, EACCES, a FIFO is made
    assert ["f"] == sorted(os.listdir(layout))


# -- the attacks, through the shell tool ----------------------------------------------------------


@pytest.fixture
async def shell(layout: Path) -> AsyncIterator[tuple[Dispatcher, Path]]:
    """The product's shell tool over the contained launcher (the real kernel's policy)."""
    config = Config(layout, environment_allowlist=("HOME", "LANG", "PATH", "TMPDIR"))
    launcher = PosixLauncher.build(resolve_containment("workspace"), str(layout))
    tool, cleanup = new_shell(config, PosixResolver(), launcher)
    yield Dispatcher([tool]), layout
    async with asyncio.timeout(BOUND):
        await cleanup()


async def shell_call(dispatcher: Dispatcher, argv: list[str]) -> dict[str, object]:
    """One shell call; its content object."""
    call = Call("c", "shell", json.dumps({"argv": argv, "timeout_seconds": 120}))
    async with asyncio.timeout(BOUND * 2):
        result = await dispatcher.dispatch(call)
    content = json.loads(result.content)
    assert isinstance(content, dict)
    return content


ATTACKS: Final = """
import ctypes, errno, fcntl, json, os, resource, socket, termios
libc = ctypes.CDLL(None, use_errno=True)
def attempt(action):
    try:
        action()
    except OSError as error:
        return errno.errorcode[error.errno]
    return "ok"
def syscall(number, *arguments):
    converted = [
        ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in arguments
    ]
    if libc.syscall(ctypes.c_long(number), *converted) == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
def fast_open():
    with socket.socket() as s:
        s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", 9))
def listen():
    with socket.socket() as s:
        s.listen()
def tiocsti():
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSTI, b"x")
stat = open(f"/proc/{os.getppid()}/stat").read()
server = int(stat[stat.rindex(")") + 2:].split()[1])   # the supervisor's parent
limits = resource.getrlimit(resource.RLIMIT_NOFILE)
answers = {
    "mptcp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)),
    "udp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
    "fast_open": attempt(fast_open),
    "listen_without_bind": attempt(listen),
    # The server's own values (inherited): harmless to the test run if the filter let
    # them through, where N3's RLIMIT_CPU (0, 0) would kill it instead of failing.
    "prlimit_server": attempt(lambda: resource.prlimit(server, resource.RLIMIT_NOFILE, limits)),
    "setpriority_server": attempt(
        lambda: os.setpriority(os.PRIO_PROCESS, server, os.getpriority(os.PRIO_PROCESS, server))
    ),
    "shmget": attempt(lambda: syscall(SHMGET, 0x5EC0DE, 4096, 0o1000 | 0o600)),
    "add_key": attempt(lambda: syscall(ADD_KEY, b"user", b"planted", b"x", 1, -4)),
    "mknod_char": attempt(lambda: os.mknod("dev", 0o20600, os.makedev(1, 3))),
    "tiocsti": attempt(tiocsti),
    "unix": attempt(lambda: socket.socketpair()),
    "prlimit_self": attempt(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, limits)),
}
print(json.dumps(answers))
"""


@needs_landlock
@needs_seccomp
async def test_the_attacks_fail_with_eperm_through_the_shell_tool(
    shell: tuple[Dispatcher, Path],
) -> None:
    """MPTCP, UDP, Fast Open, listen, prlimit/setpriority on the server, shm, keyring,
    mknod, TIOCSTI: each EPERM from inside a contained call; UNIX sockets and a
    prlimit on itself still work, and the server lives on.
    """
    from spice.agent.coding._posix._supervisor._seccomp import architecture  # noqa: PLC0415

    dispatcher, root = shell
    table = architecture()
    assert table is not None
    code = ATTACKS.replace("SHMGET", str(table.numbers["shmget"])).replace(
        "ADD_KEY", str(table.numbers["add_key"])
    )
    content = await shell_call(dispatcher, [PYTHON, "-I", "-c", code])
    assert content["ok"], content["stderr"]
    stdout = content["stdout"]
    assert isinstance(stdout, str)
    answers = json.loads(stdout)
    refused = {name: "EPERM" for name in answers if name not in {"unix", "prlimit_self"}}
    if not ROOT:  # mknod and TIOCSTI fail for everyone but root anyway
        refused.pop("mknod_char")
        refused.pop("tiocsti")
        answers.pop("mknod_char")
        answers.pop("tiocsti")
    assert {**refused, "unix": "ok", "prlimit_self": "ok"} == answers
    assert not (root / "dev").exists()


@needs_landlock
@needs_seccomp
async def test_allow_network_lets_a_contained_command_make_inet_sockets(layout: Path) -> None:
    """With --allow-network the filter lets every family through (files stay confined)."""
    policy = resolve_containment("workspace", allow_network=True)
    code = "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()\nprint('ok')"
    outcome, out, _ = await run(
        PosixLauncher.build(policy, str(layout)), layout, PYTHON, "-c", code
    )
    assert (Outcome.exited(0), "ok\n") == (outcome, out)


def test_errno_and_stat_values_used_here() -> None:
    """The numbers the attack script uses are this platform's."""
    assert (0o20000, 0o60000, 0o10000) == (stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO)
    assert int(socket.AF_UNIX) == 1


@needs_landlock
async def test_a_contained_command_cannot_read_the_servers_environment(layout: Path) -> None:
    """N6: /proc/SERVER/environ (and maps) are refused, also as root (no CAP_PERFMON)."""
    code = (
        "import os, sys\n"
        "for name in ('environ', 'maps'):\n"
        "    try:\n"
        "        open(f'/proc/{sys.argv[1]}/{name}', 'rb').read()\n"
        "        print('ok')\n"
        "    except OSError as error:\n"
        "        print(error.errno)\n"
    )
    policy = resolve_containment("workspace")
    outcome, out, _ = await run(
        PosixLauncher.build(policy, str(layout)), layout, PYTHON, "-I", "-c", code, str(os.getpid())
    )
    assert Outcome.exited(0) == outcome
    assert ["13", "13"] == out.split()  # EACCES, EACCES
