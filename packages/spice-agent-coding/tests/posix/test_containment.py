"""The contained shell (contract 9.4) with the real kernel's Landlock: files, TCP, signals.

Every test here runs real commands under ``PosixLauncher`` in ``workspace`` mode and
looks at the disk, a real listening socket or a real signal afterwards. On a kernel
without Landlock they are skipped with the reason (never passed vacuously); the
process-lifetime tests, which hold in every mode, are in ``test_lifetime.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import procutil
import pytest
from procutil import Collect
from reachable import sources_for_others

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix import _containment as containment_module
from spice.agent.coding._posix import _launcher as launcher_module
from spice.agent.coding._posix import _orphans as orphans
from spice.agent.coding._posix import _prepare as prepare_module
from spice.agent.coding._posix import _process as process_module
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._prepare import TMPDIR_PREFIX
from spice.agent.coding._posix._process import PosixProcess
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.dispatch import Dispatcher
from spice.agent.process import LaunchError, Outcome, Spec
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

PYTHON: Final = os.path.normpath(sys.executable)
BOUND: Final = 60.0
"""Hang guard for one command (never a timing assertion)."""

ABI: Final = landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")
needs_abi4 = pytest.mark.skipif(ABI < 4, reason="Landlock ABI < 4: no TCP rules")
needs_abi6 = pytest.mark.skipif(ABI < 6, reason="Landlock ABI < 6: no signal scoping")
pytestmark = needs_landlock

ERRNO_OF: Final = (
    "import errno, sys\n"
    "def attempt(action):\n"
    "    try:\n"
    "        action()\n"
    "    except OSError as error:\n"
    "        print(errno.errorcode[error.errno])\n"
    "    else:\n"
    "        print('ok')\n"
)


NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
PATHS: Final = ("namespaces", "fallback")
"""Every test here runs twice: through bwrap's namespaces, and without them (the seam:
``Containment.namespaces`` as a host without bwrap or user namespaces would give it)."""

_path = {"current": "namespaces"}


@pytest.fixture(autouse=True, params=PATHS)
def sandbox_path(request: pytest.FixtureRequest) -> str:
    """Which path ``contained()`` builds; the namespace path is skipped where it cannot be."""
    chosen = str(request.param)
    if chosen == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    _path["current"] = chosen
    return chosen


def contained(allow_network: bool = False) -> Containment:
    """The real kernel's ``workspace`` policy, on the path of the running test."""
    policy = resolve_containment("workspace", allow_network)
    made = NAMESPACES if _path["current"] == "namespaces" else Namespaces(None, SIMULATED)
    return dataclasses.replace(policy, namespaces=made)


SIMULATED: Final = "simulated: no bwrap on this host"


@pytest.fixture
def layout(visible_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A worktree root, a sibling directory outside it, and a private system temp dir.

    In a directory a contained command sees (``visible_path``). The launcher makes each
    call's TMPDIR in ``tempfile.gettempdir()`` (without namespaces); here that is
    ``BASE/tmp``, so a test sees exactly the temporaries its own calls left.
    """
    root, outside, temporaries = (visible_path / name for name in ("root", "outside", "tmp"))
    for path in (root, outside, temporaries):
        path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporaries))
    return root, outside


async def run(
    launcher: PosixLauncher, root: Path, *argv: str, workdir: Path | None = None
) -> tuple[Outcome, str, str, PosixProcess]:
    """Run ``argv`` to its end under ``launcher``; outcome, stdout, stderr, the process."""
    out, err = Collect(), Collect()
    spec = Spec(
        argv[0],
        argv[1:],
        str(workdir or root),
        ("PATH=/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=/tmp"),
        b"",
        out,
        err,
    )
    process = await launcher.start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return process.result(), out.data.decode(), err.data.decode(), process


async def python(launcher: PosixLauncher, root: Path, code: str) -> list[str]:
    """Run a Python snippet (with ``attempt``) in ``root``; its printed lines."""
    outcome, out, err, _ = await run(launcher, root, PYTHON, "-I", "-c", ERRNO_OF + code)
    assert Outcome.exited(0) == outcome, err
    return out.split()


def tree(path: Path) -> list[str]:
    """Every name beneath ``path``, sorted."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# -- the policy and its attributes ---------------------------------------------------------


def test_a_contained_launcher_says_so_and_what_it_confines(
    tmp_path: Path, sandbox_path: str
) -> None:
    """``contained`` only with namespaces (or seccomp); the sentence names what stays open."""
    launcher = PosixLauncher.build(contained(), str(tmp_path))
    sentence = launcher.containment
    expected = sandbox_path == "namespaces" or launcher.sandbox.seccomp
    assert launcher.contained is expected
    assert sentence is not None
    assert 0 < len(sentence.encode()) <= containment_module.MAXIMUM_SENTENCE_BYTES
    for named in ("reads", "hard-linked", "build files", "do not retry"):
        assert named in sentence
    # The protected paths are held on both paths (contract 12.1): read-only or undone.
    assert containment_module.PROTECTED_SENTENCE in sentence
    assert ".git/config" not in sentence
    assert ("NOT fully isolated" in sentence) is not expected
    layers = launcher.report()["layers"]
    assert isinstance(layers, dict)
    assert layers["namespaces"]["made"] is (sandbox_path == "namespaces")
    if sandbox_path == "fallback":
        assert layers["namespaces"]["reason"] == SIMULATED


def test_an_uncontained_launcher_says_nothing_is_confined() -> None:
    """The default launcher is not contained and offers no containment sentence."""
    launcher = PosixLauncher()
    assert (False, None) == (launcher.contained, launcher.containment)


# -- writes --------------------------------------------------------------------------------


async def test_writes_inside_the_root_and_in_tmpdir_work(
    layout: tuple[Path, Path], sandbox_path: str
) -> None:
    """Create, append, truncate, mkdir, rename and remove beneath the root and in TMPDIR.

    With namespaces the root and TMPDIR are two bind mounts: a rename between them is
    ``EXDEV`` (``mv`` copies then), as between any two file systems.
    """
    root, _ = layout
    (root / "sub").mkdir()
    code = (
        "import os\n"
        "t = os.environ['TMPDIR']\n"
        "attempt(lambda: open('new.txt', 'w').write('x'))\n"
        "attempt(lambda: open('sub/../sub/inner.txt', 'a').write('y'))\n"
        "attempt(lambda: os.truncate('new.txt', 0))\n"
        "attempt(lambda: os.mkdir('made'))\n"
        "attempt(lambda: os.rename('sub/inner.txt', 'made/moved.txt'))\n"
        "attempt(lambda: os.symlink('made', 'link'))\n"
        "attempt(lambda: open(os.path.join(t, 'scratch'), 'w').write('z'))\n"
        "attempt(lambda: os.rename(os.path.join(t, 'scratch'), 'from-tmp.txt'))\n"
        "attempt(lambda: open('/dev/null', 'w').write('gone'))\n"
        "attempt(lambda: open('/dev/stdout', 'w').write(''))\n"
    )
    lines = await python(PosixLauncher.build(contained(), str(root)), root, code)
    across = "EXDEV" if sandbox_path == "namespaces" else "ok"
    assert [*["ok"] * 7, across, "ok", "ok"] == lines
    moved = ["from-tmp.txt"] if across == "ok" else []
    assert [*moved, "link", "made", "made/moved.txt", "new.txt", "sub"] == tree(root)


async def test_each_way_of_writing_outside_the_root_fails_and_leaves_nothing(
    layout: tuple[Path, Path],
) -> None:
    """Absolute, ``..``, a symlink out, hard link out, rename out, mkdir out: all refused."""
    root, outside = layout
    (outside / "existing.txt").write_text("keep")
    (root / "mine.txt").write_text("mine")
    (root / "out-link").symlink_to(outside)
    code = (
        "import os\n"
        f"o = {str(outside)!r}\n"
        "attempt(lambda: open(os.path.join(o, 'abs.txt'), 'w'))\n"
        "attempt(lambda: open('../outside/dotdot.txt', 'w'))\n"
        "attempt(lambda: open('out-link/through-link.txt', 'w'))\n"
        "attempt(lambda: os.link('mine.txt', os.path.join(o, 'hard.txt')))\n"
        "attempt(lambda: os.rename('mine.txt', os.path.join(o, 'renamed.txt')))\n"
        "attempt(lambda: os.mkdir(os.path.join(o, 'made')))\n"
        "attempt(lambda: open(os.path.join(o, 'existing.txt'), 'a').write('x'))\n"
        "attempt(lambda: open(os.path.join(o, 'existing.txt'), 'w'))\n"
        "attempt(lambda: os.truncate(os.path.join(o, 'existing.txt'), 0))\n"
        "attempt(lambda: os.remove(os.path.join(o, 'existing.txt')))\n"
        "attempt(lambda: os.symlink('x', os.path.join(o, 'sym')))\n"
    )
    lines = await python(PosixLauncher.build(contained(), str(root)), root, code)
    assert len(lines) == 11
    assert "ok" not in lines
    assert set(lines) <= {"EACCES", "EPERM", "EXDEV", "EROFS"}
    assert ["existing.txt"] == tree(outside)
    assert "keep" == (outside / "existing.txt").read_text()
    assert "mine" == (root / "mine.txt").read_text()


async def test_an_outside_file_hard_linked_in_cannot_be_written_through_the_link(
    layout: tuple[Path, Path],
) -> None:
    """Linking a file from outside into the root is refused (it would gain write access)."""
    root, outside = layout
    (outside / "victim.txt").write_text("keep")
    code = f"import os\nattempt(lambda: os.link({str(outside / 'victim.txt')!r}, 'in.txt'))\n"
    lines = await python(PosixLauncher.build(contained(), str(root)), root, code)
    assert lines[0] in {"EXDEV", "EACCES", "EPERM"}
    assert [] == tree(root)
    assert "keep" == (outside / "victim.txt").read_text()


async def test_the_same_writes_outside_work_when_the_sandbox_is_off(
    layout: tuple[Path, Path],
) -> None:
    """The refusals above are the sandbox's: with it off the same write succeeds."""
    root, outside = layout
    code = f"attempt(lambda: open({str(outside / 'abs.txt')!r}, 'w'))\n"
    assert ["ok"] == await python(PosixLauncher(), root, code)
    assert ["abs.txt"] == tree(outside)


async def test_the_calls_tmpdir_is_private_and_gone_after_the_join(
    layout: tuple[Path, Path], sandbox_path: str
) -> None:
    """TMPDIR is fresh per call, private, and gone with what was written in it.

    Without namespaces it is a new 0700 directory in the system temp dir, removed by the
    join. With them it is the call's own ``/tmp``, a tmpfs of its mount namespace: the
    second call does not see what the first wrote, and nothing reaches the host.
    """
    root, _ = layout
    script = (
        "import os, stat\n"
        "t = os.environ['TMPDIR']\n"
        "print(t, oct(stat.S_IMODE(os.stat(t).st_mode)), sorted(os.listdir(t)))\n"
        "os.makedirs(os.path.join(t, 'a', 'b'))\n"
        "open(os.path.join(t, 'a', 'b', 'f'), 'w').write('x' * 1000)\n"
    )
    launcher = PosixLauncher.build(contained(), str(root))
    first = (await run(launcher, root, PYTHON, "-c", script))[1].strip().split(maxsplit=2)
    second = (await run(launcher, root, PYTHON, "-c", script))[1].strip().split(maxsplit=2)
    assert [] == os.listdir(tempfile.gettempdir())
    if sandbox_path == "namespaces":
        # Empty but for the mount points of what is bound on it (the server's own
        # environment where it lies beneath /tmp): nothing of the first call is left.
        tops = {Path(path).relative_to("/tmp").parts[0] for path in launcher_module._KEPT_VISIBLE}
        kept = sorted(tops)
        assert (first[2], second[2]) == (str(kept), str(kept))
        assert (first[0], second[0]) == (_bwrap.PRIVATE_TMP, _bwrap.PRIVATE_TMP)
        assert not (Path(_bwrap.PRIVATE_TMP) / "a" / "b" / "f").exists()
        return
    assert (first[2], second[2]) == ("[]", "[]")
    assert (first[1], second[1]) == ("0o700", "0o700")
    assert first[0] != second[0]
    assert all(name.startswith(TMPDIR_PREFIX) for name in map(_base, (first[0], second[0])))
    assert (False, False) == (_exists(first[0]), _exists(second[0]))


def _base(path: str) -> str:
    return os.path.basename(path)


def _exists(path: str) -> bool:
    return os.path.exists(path)


async def test_a_root_that_vanished_is_a_launch_error_and_nothing_runs(
    layout: tuple[Path, Path],
) -> None:
    """The ruleset cannot name a missing root: the command is never started uncontained."""
    root, outside = layout
    launcher = PosixLauncher.build(contained(), str(root))
    shutil.rmtree(root)
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await launcher.start(
            Spec("/bin/sh", ("-c", "touch ran"), str(outside), (), b"", Collect(), Collect())
        )
    assert caught.value.process is None
    assert [] == tree(outside)
    assert before == procutil.open_descriptors()
    assert [] == _temporaries()


async def test_a_spawn_that_fails_after_the_start_was_prepared_undoes_all_of_it(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault (the system refuses the fork after ``_prepare`` made the call's parts): a
    bare ``LaunchError``; its TMPDIR, descriptors, mount points and the guard's baseline are
    released, and the next call starts as usual."""
    root, _ = layout
    (root / ".git").mkdir()  # an absent protected path's mount point, with namespaces
    launcher = PosixLauncher.build(contained(), str(root))
    spec = Spec("/bin/sh", ("-c", "echo ran > ran"), str(root), (), b"", Collect(), Collect())
    before = procutil.open_descriptors()
    real = orphans.spawn

    def refused(*_args: object, **_kwargs: object) -> object:
        raise OSError(errno.EAGAIN, "no fork")

    monkeypatch.setattr(orphans, "spawn", refused)
    with pytest.raises(LaunchError) as caught:
        await launcher.start(spec)
    assert caught.value.process is None
    assert not (root / "ran").exists()
    assert [] == _temporaries()
    assert before == procutil.open_descriptors()
    assert () == prepare_module.mount_points()
    assert 0 == launcher._guard._users  # the baseline let go
    monkeypatch.setattr(orphans, "spawn", real)
    outcome, _, _, _ = await run(launcher, root, "/bin/sh", "-c", "echo ran > ran")
    assert Outcome.exited(0) == outcome
    assert "ran\n" == (root / "ran").read_text()


def _temporaries() -> list[str]:
    return os.listdir(tempfile.gettempdir())


# -- a TMPDIR its command made hard to remove (non-root) ------------------------------------

NOBODY: Final = 65534
LOCK_THE_TMPDIR: Final = (
    'mkdir -p "$TMPDIR/keep/deeper" && head -c 1048576 /dev/zero > "$TMPDIR/keep/deeper/blob"'
    ' && ln -s "$1" "$TMPDIR/keep/file" && ln -s "$2" "$TMPDIR/keep/directory"'
    ' && chmod 000 "$TMPDIR/keep/deeper" && chmod 000 "$TMPDIR/keep" && echo "$TMPDIR"'
)
"""A command that leaves 1 MiB behind two ``chmod 000`` directories, and two symlinks out."""
AS_NOBODY: Final = (
    shutil.which("setpriv") or "setpriv",
    f"--reuid={NOBODY}",
    f"--regid={NOBODY}",
    "--clear-groups",
)
CLI: Final = "import sys\nfrom spice.agent.coding._cli import main\nsys.exit(main(sys.argv[1:]))\n"


@pytest.fixture
def nobody_layout() -> Iterator[Path]:
    """Root, system temp and an outside directory the unprivileged user owns."""
    if os.getuid() != 0:
        pytest.skip("needs root to run the server as another user")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run the server as another user")
    if _nobody_python() is None:
        pytest.skip("no interpreter of this version is reachable by the unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="spice-nobody-"))
    base.chmod(0o755)
    for name in ("root", "tmp", "outside"):
        (base / name).mkdir()
        os.chown(base / name, NOBODY, NOBODY)
    (base / "outside" / "secret").write_text("kept\n")
    os.chown(base / "outside" / "secret", NOBODY, NOBODY)
    (base / "outside" / "secret").chmod(0o600)
    (base / "outside").chmod(0o500)
    try:
        yield base
    finally:
        (base / "outside").chmod(0o700)
        shutil.rmtree(base)


def _nobody_makes_namespaces() -> bool:
    """Whether ``bwrap`` makes every namespace for the unprivileged user here."""
    bwrap = NAMESPACES.bwrap
    if bwrap is None:
        return False
    argv = [*AS_NOBODY, *_bwrap.wrapper(bwrap, (), allow_network=False), "/bin/true"]
    return subprocess.run(argv, capture_output=True, timeout=BOUND, check=False).returncode == 0


def _tools_without_bwrap(base: Path) -> str:
    """A ``PATH`` with the script's tools and no ``bwrap``: the server takes the fallback."""
    tools = base / "bin"
    tools.mkdir()
    for name in ("mkdir", "head", "ln", "chmod"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    return str(tools)


def _nobody_python() -> str | None:
    """An interpreter of this Python version whose path every user may traverse."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (sys.executable, f"/usr/bin/python{version}"):
        path = Path(candidate).resolve()
        if path.exists() and all(os.stat(p).st_mode & 0o001 for p in path.parents):
            return candidate
    return None


def _nobody_cli(base: Path) -> str:
    """The CLI's entry, with this checkout's sources first on the path (a copy in ``base``
    where the unprivileged user cannot reach the checkout, as in a ``mktemp -d`` clone)."""
    sources = sources_for_others(base)
    return f"import sys\nsys.path[:0] = {sources!r}\n{CLI}"


def test_a_tmpdir_with_unreadable_directories_is_removed_by_an_unprivileged_server(
    nobody_layout: Path, sandbox_path: str
) -> None:
    """Server and command as uid 65534: ``chmod 000`` inside TMPDIR still leaves nothing.

    The answer says the cleanup completed, the call's TMPDIR is gone, and neither the
    file nor the directory its symlinks named changed mode (nothing is followed). The
    server is a process of its own: for the fallback path it finds no ``bwrap`` on its
    ``PATH`` (an empty directory); with namespaces its TMPDIR is the call's private
    ``/tmp`` and nothing is made on the host.
    """
    base = nobody_layout
    outside = base / "outside"
    if sandbox_path == "namespaces" and not _nobody_makes_namespaces():
        pytest.skip("the unprivileged user cannot make namespaces here")
    search = "/usr/bin:/bin" if sandbox_path == "namespaces" else _tools_without_bwrap(base)
    arguments = json.dumps(
        {"argv": ["/bin/sh", "-c", LOCK_THE_TMPDIR, "sh", str(outside / "secret"), str(outside)]}
    )
    server = [_nobody_python() or "", "-c", _nobody_cli(base), "--root", str(base / "root")]
    completed = subprocess.run(
        [*AS_NOBODY, *server, "call", "--sandbox", "workspace", "shell", arguments],
        capture_output=True,
        timeout=BOUND,
        check=False,
        env={"PATH": search, "HOME": str(base / "root"), "TMPDIR": str(base / "tmp")},
        cwd=base / "root",
    )
    assert 0 == completed.returncode, completed.stderr
    content = json.loads(completed.stdout)
    assert (True, True) == (content["ok"], content["managed_cleanup_completed"])
    tmpdir = content["stdout"].strip()
    if sandbox_path == "namespaces":
        assert tmpdir == _bwrap.PRIVATE_TMP
    else:
        assert tmpdir.startswith(str(base / "tmp" / TMPDIR_PREFIX))
    assert [] == os.listdir(base / "tmp")
    assert (0o500, 0o600) == (
        stat.S_IMODE(outside.stat().st_mode),
        stat.S_IMODE((outside / "secret").stat().st_mode),
    )


async def test_a_tmpdir_that_cannot_be_removed_makes_the_cleanup_incomplete(
    shell: tuple[Dispatcher, Path], monkeypatch: pytest.MonkeyPatch, sandbox_path: str
) -> None:
    """When the removal fails (the fault), the answer says ``managed_cleanup_completed: false``."""
    if sandbox_path == "namespaces":
        pytest.skip("with namespaces TMPDIR is a tmpfs of the call's mount namespace: no removal")
    dispatcher, _ = shell
    monkeypatch.setattr(process_module, "_remove_tree", lambda _path: False)
    content = await shell_call(dispatcher, ["/bin/true"])
    assert (True, False) == (content["ok"], content["managed_cleanup_completed"])
    monkeypatch.undo()
    content = await shell_call(dispatcher, ["/bin/true"])
    assert (True, True) == (content["ok"], content["managed_cleanup_completed"])


# -- network -------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 that this test process owns (loopback up, or skip)."""
    reason = procutil.loopback_reason()
    if reason is not None:
        pytest.skip(reason)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0)
    yield server
    server.close()


def connect_code(port: int) -> str:
    """Connect to ``port`` and bind a port: print each errno name (or ok)."""
    return (
        "import socket\n"
        "def connect():\n"
        f"    with socket.create_connection(('127.0.0.1', {port}), timeout=10):\n"
        "        pass\n"
        "def bind():\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('127.0.0.1', 0))\n"
        "        s.listen(1)\n"
        "attempt(connect)\n"
        "attempt(bind)\n"
    )


@needs_abi4
async def test_loopback_tcp_connect_and_bind_are_refused_by_landlock_alone(
    layout: tuple[Path, Path], listener: socket.socket
) -> None:
    """Without the seccomp filter, Landlock refuses the connect and the bind (EACCES)."""
    root, _ = layout
    port = listener.getsockname()[1]
    landlock_only = resolve_containment("workspace", seccomp_probe=lambda: False)
    lines = await python(PosixLauncher.build(landlock_only, str(root)), root, connect_code(port))
    assert ["EACCES", "EACCES"] == lines
    with pytest.raises(BlockingIOError):
        listener.accept()


@needs_abi4
async def test_the_hosts_loopback_is_out_of_reach_and_a_bind_is_private(
    layout: tuple[Path, Path], listener: socket.socket
) -> None:
    """The host's listener is never reached. With namespaces (contract 11.1) the command
    has a loopback of its own: the connect finds nobody there (ECONNREFUSED) and its bind
    works; without them both fail (EPERM from the filter's socket rule, else EACCES)."""
    root, _ = layout
    port = listener.getsockname()[1]
    policy = contained()
    lines = await python(PosixLauncher.build(policy, str(root)), root, connect_code(port))
    if policy.namespaces.made:
        assert ["ECONNREFUSED", "ok"] == lines
    else:
        refusal = "EPERM" if policy.seccomp else "EACCES"
        assert [refusal, refusal] == lines
    with pytest.raises(BlockingIOError):
        listener.accept()


@needs_abi4
async def test_allow_network_lets_tcp_through(
    layout: tuple[Path, Path], listener: socket.socket
) -> None:
    """With ``--allow-network`` the same connect and bind succeed (files stay confined)."""
    root, outside = layout
    port = listener.getsockname()[1]
    code = connect_code(port) + f"attempt(lambda: open({str(outside / 'x')!r}, 'w'))\n"
    launcher = PosixLauncher.build(contained(allow_network=True), str(root))
    assert await python(launcher, root, code) in (["ok", "ok", "EACCES"], ["ok", "ok", "EROFS"])
    accepted, _ = listener.accept()
    accepted.close()


# -- signals and abstract sockets ------------------------------------------------------------


@needs_abi6
async def test_the_command_cannot_signal_the_server_or_its_supervisor(
    layout: tuple[Path, Path],
) -> None:
    """kill(server) and kill(supervisor) are refused from inside; the command's own work."""
    root, _ = layout
    code = (
        "import os, signal\n"
        f"attempt(lambda: os.kill({os.getpid()}, signal.SIGCONT))\n"
        "attempt(lambda: os.kill(os.getppid(), signal.SIGCONT))\n"
        "attempt(lambda: os.kill(os.getpid(), 0))\n"
    )
    lines = await python(PosixLauncher.build(contained(), str(root)), root, code)
    # In a PID namespace the server's pid names nothing (ESRCH); the parent is bwrap's init.
    assert lines in (["EPERM", "EPERM", "ok"], ["ESRCH", "EPERM", "ok"])
    assert ["ok", "ok", "ok"] == await python(PosixLauncher(), root, code)


@needs_abi6
async def test_abstract_unix_sockets_outside_the_call_are_unreachable(
    layout: tuple[Path, Path],
) -> None:
    """An abstract-namespace listener of the test cannot be connected to from inside."""
    root, _ = layout
    name = f"\0spice-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)
    try:
        code = (
            "import socket\n"
            "def connect():\n"
            "    with socket.socket(socket.AF_UNIX) as s:\n"
            f"        s.connect({name!r})\n"
            "attempt(connect)\n"
        )
        # A network namespace has its own abstract socket names: nothing listens there.
        lines = await python(PosixLauncher.build(contained(), str(root)), root, code)
        assert lines in (["EPERM"], ["ECONNREFUSED"])
    finally:
        server.close()


# -- cancellation and bounds of the contained start -----------------------------------------


async def test_a_cancelled_contained_start_leaves_no_process_and_no_tmpdir(
    layout: tuple[Path, Path],
) -> None:
    """Cancelled while the supervisor starts: CancelledError, nothing left behind."""
    root, _ = layout
    launcher = PosixLauncher.build(contained(), str(root))
    spec = Spec("/bin/sleep", ("60",), str(root), (), b"", Collect(), Collect())
    starting = asyncio.ensure_future(launcher.start(spec))
    await asyncio.sleep(0)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert [] == _temporaries()
    assert await procutil.children_gone(), procutil.live_children()


async def test_a_stop_request_reaches_the_command_as_sigterm(layout: tuple[Path, Path]) -> None:
    """``request_stop`` lets the command end itself (its TERM trap runs), on both paths:
    with namespaces the server signals the supervisor (by its pidfd), which passes the
    stop on; without them the group gets it."""
    root, _ = layout
    out = Collect()
    script = 'trap "echo stopped; exit 7" TERM; echo ready; sleep 60 & wait'
    spec = Spec("/bin/sh", ("-c", script), str(root), ("PATH=/usr/bin:/bin",), b"", out, Collect())
    process = await PosixLauncher.build(contained(), str(root)).start(spec)
    try:
        assert await procutil.until(lambda: b"ready" in out.data, BOUND)
        await process.request_stop()
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    assert (Outcome.exited(7), ["ready", "stopped"]) == (
        process.result(),
        out.data.decode().split(),
    )


async def test_a_stop_request_reaches_the_commands_whole_group(layout: tuple[Path, Path]) -> None:
    """The stop is SIGTERM to the command's group (contract 7), not to the command alone,
    on both paths: a descendant in the group runs its own TERM trap, and the command's
    trap, waiting for it, sees it end before the force that would follow."""
    root, _ = layout
    out = Collect()
    script = (
        '(trap "echo descendant; exit 3" TERM; echo sub-ready; sleep 60 & wait) & '
        'trap "wait; echo stopped; exit 7" TERM; echo ready; wait'
    )
    spec = Spec("/bin/sh", ("-c", script), str(root), ("PATH=/usr/bin:/bin",), b"", out, Collect())
    process = await PosixLauncher.build(contained(), str(root)).start(spec)
    try:
        assert await procutil.until(
            lambda: {"ready", "sub-ready"} <= set(out.data.decode().split()), BOUND
        )
        await process.request_stop()
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        await process.force_kill()
        async with asyncio.timeout(BOUND):
            await process.wait()
    assert (Outcome.exited(7), ["descendant", "ready", "stopped", "sub-ready"]) == (
        process.result(),
        sorted(out.data.decode().split()),
    )


CANCEL_MOMENTS: Final = 12
"""How many moments of the start a cancellation is tried at (loop turns after the spawn)."""


async def test_starts_cancelled_at_every_moment_leave_no_process(
    layout: tuple[Path, Path],
) -> None:
    """The cancellation's "end now" can reach bwrap's monitor while bwrap still sets up
    the namespaces (before the supervisor's death signal exists): whatever the moment,
    the join leaves no process of the call (the supervisor sees its lifeline end)."""
    root, _ = layout
    launcher = PosixLauncher.build(contained(), str(root))
    spec = Spec("/bin/sleep", ("60",), str(root), (), b"", Collect(), Collect())
    for turns in range(CANCEL_MOMENTS):
        starting = asyncio.ensure_future(launcher.start(spec))
        for _ in range(turns):
            await asyncio.sleep(0)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            process = await starting
            await process.force_kill()
            await process.wait()
        assert await procutil.children_gone(), procutil.live_children()
    assert [] == _temporaries()


async def test_a_start_word_that_comes_after_the_bound_is_never_not_started(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The word came after the bound: the call is stopped, joined, and says it may have run.

    The command has really run when the launcher gives up on its word; the answer is
    ``launch_failed`` with "may have started", never "could not be started", and
    nothing of the call is left (no process, no TMPDIR).
    """
    root, _ = layout
    on_time = PosixProcess._until_started

    async def just_late(process: PosixProcess) -> process_module._Start:
        await on_time(process)
        await process.wait_exit()  # the command has run
        return process_module._Start.UNKNOWN  # but its word came after the bound

    monkeypatch.setattr(PosixProcess, "_until_started", just_late)
    config = Config(root)
    tool, cleanup = new_shell(config, PosixResolver(), PosixLauncher.build(contained(), str(root)))
    content = await shell_call(Dispatcher([tool]), ["/usr/bin/touch", "ran"])
    async with asyncio.timeout(BOUND):
        await cleanup()
    expected = ("launch_failed", "the command may have started; it was stopped", True)
    assert expected == (content["code"], content["message"], (root / "ran").exists())
    assert [] == _temporaries()
    assert await procutil.children_gone(), procutil.live_children()


# -- what must keep working, contained -------------------------------------------------------


@pytest.fixture
async def shell(layout: tuple[Path, Path]) -> AsyncIterator[tuple[Dispatcher, Path]]:
    """The product's shell tool over the contained launcher."""
    root, _ = layout
    config = Config(root, environment_allowlist=("HOME", "LANG", "PATH", "TMPDIR"))
    tool, cleanup = new_shell(config, PosixResolver(), PosixLauncher.build(contained(), str(root)))
    yield Dispatcher([tool]), root
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


def succeeded(content: dict[str, object]) -> bool:
    """A call that exited 0, and said ``contained`` exactly when this path is contained."""
    expected = contained().contained
    return (True, 0, expected) == (content["ok"], content["exit_code"], content["contained"])


async def test_git_works_contained(shell: tuple[Dispatcher, Path]) -> None:
    """git init, add and commit inside the worktree."""
    dispatcher, root = shell
    (root / "a.txt").write_text("a\n")
    steps = [
        ["git", "init", "-q", "."],
        ["git", "add", "a.txt"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"],
    ]
    for argv in steps:
        content = await shell_call(dispatcher, argv)
        assert succeeded(content), content["stderr"]
    log = await shell_call(dispatcher, ["git", "log", "--format=%s"])
    assert "one\n" == log["stdout"]


async def test_python_m_pytest_works_contained(shell: tuple[Dispatcher, Path]) -> None:
    """A worktree's test suite runs, with its cache written beneath the root."""
    dispatcher, root = shell
    (root / "test_sample.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    content = await shell_call(dispatcher, [PYTHON, "-m", "pytest", "-q", "test_sample.py"])
    assert succeeded(content), content["stdout"]
    assert "1 passed" in str(content["stdout"])


def wheel(directory: Path) -> Path:
    """A minimal pure-Python wheel built by hand (no network, no build backend)."""
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415

    files = {
        "demo_pkg/__init__.py": b"VALUE = 42\n",
        "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        "demo_pkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append("demo_pkg-1.0.dist-info/RECORD,,")
    files["demo_pkg-1.0.dist-info/RECORD"] = ("\n".join(lines) + "\n").encode()
    path = directory / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def pip_python() -> str | None:
    """An interpreter that has pip (the locked environment has none)."""
    for candidate in (PYTHON, "/usr/bin/python3"):
        if os.path.exists(candidate) and os.path.isdir(
            os.path.join(os.path.dirname(os.__file__), "..", "dist-packages", "pip")
        ):
            return candidate
    return "/usr/bin/python3" if os.path.exists("/usr/lib/python3/dist-packages/pip") else None


async def test_pip_install_target_works_contained(shell: tuple[Dispatcher, Path]) -> None:
    """pip installs a local wheel into a directory of the worktree."""
    dispatcher, root = shell
    interpreter = pip_python()
    if interpreter is None:
        pytest.skip("no interpreter with pip here")
    built = wheel(root)
    argv = [interpreter, "-m", "pip", "install", "--no-index", "--target", "vendor", built.name]
    content = await shell_call(dispatcher, argv)
    assert succeeded(content), content["stderr"]
    assert (root / "vendor" / "demo_pkg" / "__init__.py").is_file()


async def test_npm_test_of_a_local_project_works_contained(shell: tuple[Dispatcher, Path]) -> None:
    """npm runs a local package's test script (node) from the worktree."""
    dispatcher, root = shell
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    (root / "package.json").write_text(
        json.dumps({"name": "local", "version": "1.0.0", "scripts": {"test": "node t.js"}})
    )
    (root / "t.js").write_text("require('fs').writeFileSync('ran.txt', 'yes'); console.log('ok')\n")
    content = await shell_call(dispatcher, ["npm", "test"])
    assert succeeded(content), content["stderr"]
    assert "yes" == (root / "ran.txt").read_text()


async def test_a_compiler_writes_into_the_worktree_contained(
    shell: tuple[Dispatcher, Path],
) -> None:
    """gcc compiles (temporaries in the call's TMPDIR) and the program runs."""
    dispatcher, root = shell
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    (root / "main.c").write_text('#include <stdio.h>\nint main(void){puts("built");return 0;}\n')
    content = await shell_call(dispatcher, ["gcc", "-o", "main", "main.c"])
    assert succeeded(content), content["stderr"]
    assert os.stat(root / "main").st_mode & stat.S_IXUSR
    ran = await shell_call(dispatcher, ["./main"])
    assert "built\n" == ran["stdout"]


async def test_a_shell_result_says_contained(shell: tuple[Dispatcher, Path]) -> None:
    """Every shell result says ``contained`` as the policy is: true only with every layer."""
    dispatcher, _ = shell
    expected = contained().contained
    failed = await shell_call(dispatcher, ["sh", "-c", "exit 3"])
    assert (False, expected) == (failed["ok"], failed["contained"])
    refused = await shell_call(dispatcher, ["spice-no-such-program"])
    assert (False, expected) == (refused["ok"], refused["contained"])


def test_errno_names_used_here_exist() -> None:
    """The errno names the assertions compare with are the platform's."""
    assert {"EACCES", "EPERM", "EXDEV"} <= set(errno.errorcode.values())


async def test_no_new_privs_is_set_only_in_the_contained_mode(layout: tuple[Path, Path]) -> None:
    """Landlock needs no_new_privs (setuid programs gain nothing); off keeps the server's."""
    root, _ = layout
    argv = ("/bin/grep", "NoNewPrivs", "/proc/self/status")
    contained_out = (await run(PosixLauncher.build(contained(), str(root)), root, *argv))[1]
    off_out = (await run(PosixLauncher(), root, *argv))[1]
    ours = _no_new_privs()
    assert (["NoNewPrivs:", "1"], ["NoNewPrivs:", ours]) == (
        contained_out.split(),
        off_out.split(),
    )


def _no_new_privs() -> str:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("NoNewPrivs:"))
    return line.split()[1]


async def test_dev_shm_is_private_and_writable_only_with_namespaces(
    layout: tuple[Path, Path], sandbox_path: str
) -> None:
    """With namespaces /dev/shm is a private tmpfs: writable, and nothing reaches the host's.

    Without them /dev/shm is the machine's, shared: a write there fails.
    """
    root, _ = layout
    name = f"/dev/shm/spice-test-{os.getpid()}"
    code = f"attempt(lambda: open('{name}', 'w').write('x'))\n"
    expected = ["ok"] if sandbox_path == "namespaces" else ["EACCES"]
    assert expected == await python(PosixLauncher.build(contained(), str(root)), root, code)
    assert not os.path.exists(name)  # noqa: ASYNC240 - one stat after the command


def test_an_unprivileged_server_without_a_cgroup_bounds_processes_by_rlimit(
    nobody_layout: Path, sandbox_path: str
) -> None:
    """Server and command as uid 65534, who may make no cgroup here: the command runs
    with ``RLIMIT_NPROC`` at ``--max-processes``, and ``tools`` says that this is the only
    bound (memory none)."""
    base = nobody_layout
    if sandbox_path == "namespaces" and not _nobody_makes_namespaces():
        pytest.skip("the unprivileged user cannot make namespaces here")
    search = "/usr/bin:/bin" if sandbox_path == "namespaces" else _tools_without_bwrap(base)
    server = [_nobody_python() or "", "-c", _nobody_cli(base), "--root", str(base / "root")]
    environment = {"PATH": search, "HOME": str(base / "root"), "TMPDIR": str(base / "tmp")}

    def run(*words: str) -> dict[str, Any]:
        completed = subprocess.run(
            [*AS_NOBODY, *server, "--max-processes", "300", *words],
            capture_output=True,
            timeout=BOUND,
            check=False,
            env=environment,
            cwd=base / "root",
        )
        assert 0 == completed.returncode, completed.stderr
        answer: dict[str, Any] = json.loads(completed.stdout)
        return answer

    bounds = run("tools")["sandbox"]["bounds"]
    if bounds["cgroup"] is not None:
        pytest.skip("the unprivileged user may make cgroups here (a delegated subtree)")
    assert "RLIMIT_NPROC" in bounds["bounded"]
    assert "memory is not bounded" in bounds["bounded"]
    limit = "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[0])"
    shell = json.dumps({"argv": [_nobody_python() or "", "-I", "-c", limit]})
    content = run("call", "--sandbox", "workspace", "shell", shell)
    assert (True, "300") == (content["ok"], content["stdout"].strip())
