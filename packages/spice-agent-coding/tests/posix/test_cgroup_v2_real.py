"""The cgroup v2 way of a call's cgroup, run on a real cgroup2 hierarchy.

This machine is hybrid: its cgroup2 hierarchy (``/sys/fs/cgroup/unified``) has no
controller (``pids`` and ``memory`` are bound to v1), so ``resolve_cgroups`` takes v1
here, and ``test_cgroup.py`` runs that way whole. The v2 way is run here on the real
cgroup2 hierarchy for everything but its bounds: the call's cgroup made beside the
server's, the supervisor's child moving itself in through the handed ``cgroup.procs``,
the end by ``cgroup.kill`` alone (the v1 rounds are faulted to fail), the removal, and
a dead server's leftover removed at start. The bounds (``pids.max``, ``memory.max``)
are the one part that needs the controllers: the ``_bound`` step is replaced, and its
v2 writes are checked against the fake v2 host of ``test_cgroup.py`` only. A host whose
cgroup2 hierarchy has the controllers takes v2 in ``test_cgroup.py``; one without a
cgroup2 hierarchy, or where the server may not make a cgroup in it, skips with why.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _cgroup
from spice.agent.coding._posix._cgroup import CallCgroup, Cgroups
from spice.agent.process import Spec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cgroups: Linux")

HANG_BOUND_SECONDS = 60.0
"""A call that has not ended within this has hung (not a slow machine)."""


def _v2_base() -> str:
    """The server's own cgroup in the cgroup2 hierarchy, or a skip saying why not."""
    try:
        own = _cgroup._own_cgroups(Path("/proc/self/cgroup").read_text())
        mounts = _cgroup._mount_points(Path("/proc/self/mountinfo").read_text())
    except OSError:
        pytest.skip("/proc/self/cgroup cannot be read here")
    if "" not in own or "" not in mounts:
        pytest.skip("no cgroup2 hierarchy is mounted here")
    base = os.path.join(mounts[""], own[""].lstrip("/"))
    probe = os.path.join(base, f"spice-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        pytest.skip("the server may not make a cgroup in the cgroup2 hierarchy here")
    try:
        killable = os.path.exists(os.path.join(probe, "cgroup.kill"))  # a child's file
    finally:
        os.rmdir(probe)
    if not killable:
        pytest.skip("this kernel's cgroup2 has no cgroup.kill (before 5.14)")
    return base


@pytest.fixture
def v2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cgroups]:
    """A v2 ``Cgroups`` on the real hierarchy, its bounds step replaced (no controllers)."""
    base = _v2_base()
    monkeypatch.setattr(Cgroups, "_bound", lambda _self, _paths: None)
    yield Cgroups(16, 64 * 1024**2, "v2", (base,), None, None)
    own = f"{_cgroup._PREFIX}{os.getpid()}-"
    left = [name for name in os.listdir(base) if name.startswith(own)]
    for name in left:
        os.rmdir(os.path.join(base, name))
    assert left == []


MEMBER = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(15, signal.SIG_IGN)\n"
    "sys.stdin.readline()\n"  # moved into the cgroup before it forks
    "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(300)\n"
)
"""Ignores SIGTERM; once told (after it was moved in), forks a child in a new session."""


def _refuse_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The v1 way's kill rounds fail the test: only ``cgroup.kill`` may end the members."""

    def refused(_self: CallCgroup, _members: object) -> None:
        raise AssertionError("the v1 rounds ran on the v2 way")

    monkeypatch.setattr(CallCgroup, "_kill_round", refused)


def test_cgroup_kill_ends_a_member_and_the_child_it_forked(
    v2: Cgroups, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member that ignores SIGTERM forks a child in a session of its own: both are in
    the call's cgroup, ``cgroup.kill`` ends both, and the cgroup is removed."""
    _refuse_rounds(monkeypatch)
    call = v2.make()
    assert call.version == "v2"
    _end_member_and_child(call)


def test_without_cgroup_kill_the_rounds_end_the_members(
    v2: Cgroups, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side: a kernel before 5.14 has no ``cgroup.kill`` (its write faulted
    here); the rounds kill every member, the forked child too."""
    real_write = _cgroup._write

    def without_kill(path: str, text: str) -> None:
        if os.path.basename(path) == "cgroup.kill":
            raise FileNotFoundError(path)
        real_write(path, text)

    monkeypatch.setattr(_cgroup, "_write", without_kill)
    _end_member_and_child(v2.make())


def _end_member_and_child(call: CallCgroup) -> None:
    """Run ``MEMBER`` in ``call``'s cgroup, end it and its child, remove the cgroup."""
    try:
        with subprocess.Popen(
            [sys.executable, "-c", MEMBER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as parent:
            _end_both(parent, call)
    finally:
        for fd in call.procs:
            os.close(fd)
        assert call.remove()
    assert not os.path.exists(call.paths[0])


def _end_both(parent: subprocess.Popen[bytes], call: CallCgroup) -> None:
    """Move ``parent`` in, let it fork, and end both by ``call.end``."""
    assert parent.stdin is not None
    assert parent.stdout is not None
    os.write(call.procs[0], str(parent.pid).encode())
    parent.stdin.write(b"go\n")
    parent.stdin.flush()
    child = int(parent.stdout.readline())
    assert sorted(call.members()) == sorted([parent.pid, child])
    assert call.end()
    parent.wait()
    assert parent.returncode == -signal.SIGKILL
    assert call.members() == []
    assert not _alive(child)


def test_an_empty_v2_cgroup_ends_at_once_and_a_removed_one_is_removed(v2: Cgroups) -> None:
    """The boundaries: no member (``end`` is true without a round); removed twice."""
    call = v2.make()
    for fd in call.procs:
        os.close(fd)
    assert call.members() == []
    assert call.end(bound=0.0)
    assert call.remove()
    assert call.remove()  # already gone: nothing left either way
    assert call.members() == []  # the directory is gone: no member, no error


async def test_a_call_in_a_v2_cgroup_enters_it_and_leaves_no_escaped_process(
    v2: Cgroups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the launcher: the command says it runs in the call's v2 cgroup (the
    supervisor's child moved itself in through the handed ``cgroup.procs``), starts a
    process in a session of its own and exits; the join ends that process by
    ``cgroup.kill`` and removes the cgroup."""
    _refuse_rounds(monkeypatch)
    out = Collect()
    script = "cat /proc/self/cgroup; setsid sleep 300 </dev/null >/dev/null 2>&1 & echo pid=$!"
    spec = Spec(
        "/bin/sh", ("-c", script), str(tmp_path), ("PATH=/usr/bin:/bin",), b"", out, Collect()
    )
    process = await PosixLauncher(cgroups=v2).start(spec)
    async with asyncio.timeout(HANG_BOUND_SECONDS):
        await process.wait_exit()
        await process.wait()
    text = out.data.decode()
    v2_line = next(line for line in text.splitlines() if line.startswith("0::"))
    assert os.path.basename(v2_line).startswith(f"{_cgroup._PREFIX}{os.getpid()}-")
    escaped = int(text.rsplit("pid=", 1)[1])
    assert not _alive(escaped)


def test_a_dead_servers_empty_v2_cgroup_is_removed_and_a_live_ones_kept(v2: Cgroups) -> None:
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    base = Path(v2.parents[0])
    stale = base / f"{_cgroup._PREFIX}{dead.pid}-1"
    live = base / f"{_cgroup._PREFIX}{os.getpid()}-999999"
    stale.mkdir()
    live.mkdir()
    try:
        _cgroup._remove_stale([str(base)])
        assert not stale.exists()
        assert live.exists()
    finally:
        for path in (stale, live):
            if path.exists():
                path.rmdir()


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it is dead, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
