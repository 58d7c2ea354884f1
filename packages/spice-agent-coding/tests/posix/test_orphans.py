"""The server's orphans (``_posix._orphans``): reaped as they come, in time proportional to
their number, off the event loop, and an idle server does no work for them.

Round 3's measured failure: fork relays that escaped the supervisor's sweep came to the
server (a subreaper) and stayed there as zombies, since nothing reaped them outside a
join, and the join's sweep walked all of ``/proc`` once per orphan on the event loop.
Here a helper process adopts a few hundred orphans at once (inside a pids cgroup the
test makes where it can, so the host's PID table is never at risk) while its main
thread runs no event loop at all: the reaper alone must end and reap them, in a number
of ``/proc`` walks that does not grow with their number.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from pidscgroup import current, enter, pids_cgroup
from procutil import read_stat

from spice.agent.coding._posix import _orphans as orphans

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="subreapers and /proc are Linux features"
)

ORPHANS: Final = 300
"""Orphans the helper adopts at once, each with a child of its own (600 processes)."""

PIDS_LIMIT: Final = 2 * ORPHANS + 64
"""The helper's pids cgroup bound: the family, the helper, and room for its threads."""

WALK_BOUND: Final = 8
"""``/proc`` walks the reaper may take for the whole family: a constant, not per orphan
(the old sweep took one per orphan, 300 here)."""

BOUND: Final = 60.0

HELPER: Final = """
import os, signal, struct, sys
from spice.agent.coding._posix import _orphans as orphans

assert orphans.adopt()
count = int(sys.argv[1])
pids_read, pids_write = os.pipe()
go_read, go_write = os.pipe()
middle = orphans.started(os.fork, int)
if middle == 0:
    os.close(pids_read)
    os.close(go_write)
    for _ in range(count):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(pids_write, struct.pack("i", os.getpid()))
                signal.pause()
                os._exit(0)
            os.write(pids_write, struct.pack("i", os.getpid()))
            signal.pause()
            os._exit(0)
    os.read(go_read, 1)  # the whole family is made and its pids are told
    os._exit(0)
os.close(pids_write)
os.close(go_read)
data = b""
while len(data) < 8 * count:
    chunk = os.read(pids_read, 65536)
    if not chunk:
        break
    data += chunk
os.write(go_write, b"g")
os.waitpid(middle, 0)  # the middle is gone: its children come here, all at once
orphans.forget(middle)
orphans.wake()  # what a join does when a call's tree was not reported gone
print(" ".join(str(p) for (p,) in struct.iter_unpack("i", data)), flush=True)
# From here no event loop runs and no join: only the reaper thread can end and reap them.
for line in sys.stdin:
    s = orphans.stats()
    print(s.rounds, s.walks, s.reaped, s.idle, int(s.active), flush=True)
"""


def _helper(cgroup: Path | None) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HELPER, str(ORPHANS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if cgroup is not None:
        enter(cgroup, child.pid)
    return child


def _end(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def _stats(child: subprocess.Popen[str]) -> tuple[int, int, int, int, int]:
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write("stats\n")
    child.stdin.flush()
    rounds, walks, reaped, idle, active = (int(f) for f in child.stdout.readline().split())
    return rounds, walks, reaped, idle, active


def _left(family: list[int], helper: int) -> list[int]:
    """Members of the family that still exist (alive or an unreaped zombie)."""
    return [pid for pid in family if read_stat(pid) is not None] + _children(helper)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as file:
                found.extend(int(f) for f in file.read().split())
        except OSError:
            continue
    return found


def _until(condition: Callable[[], bool], bound: float = BOUND) -> bool:
    deadline = time.monotonic() + bound
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_adopted_orphans_are_reaped_without_a_join_in_a_constant_number_of_walks() -> None:
    """600 processes come back at once; no loop runs, no join: none is left, and the
    reaper walked ``/proc`` a constant number of times (not once per orphan)."""
    with pids_cgroup(PIDS_LIMIT, "spice-orphans") as cgroup:
        child = _helper(cgroup)
        try:
            assert child.stdout is not None
            family = [int(p) for p in child.stdout.readline().split()]
            assert len(family) == 2 * ORPHANS
            assert _until(lambda: not _left(family, child.pid))
            rounds, walks, reaped, _, _ = _stats(child)
            assert reaped >= ORPHANS  # the orphans themselves were reaped by the server
            assert 1 <= walks <= WALK_BOUND
            assert walks <= rounds
            if cgroup is not None:
                # The helper's threads alone (a pids cgroup counts tasks).
                assert current(cgroup) == len(os.listdir(f"/proc/{child.pid}/task"))
        finally:
            _end(child)


def test_once_none_is_left_the_reaper_parks() -> None:
    """Once the orphans are gone the reaper's last round found none and it waits on its
    event, doing nothing until the next join wakes it: the server never spins on them."""
    with pids_cgroup(PIDS_LIMIT, "spice-orphans") as cgroup:
        child = _helper(cgroup)
        try:
            assert child.stdout is not None
            family = [int(p) for p in child.stdout.readline().split()]
            assert _until(lambda: not _left(family, child.pid))
            assert _until(lambda: _stats(child)[4] == 0)
            rounds, walks, _, idle, _ = _stats(child)
            assert idle >= 1
            assert _stats(child)[:2] == (rounds, walks)
        finally:
            _end(child)


def test_without_adopt_a_sweep_is_done_at_once() -> None:
    """A process that never adopted has no orphans to sweep (a fresh interpreter: another
    test may have made this one adopt, through the CLI's ``main``)."""
    code = (
        "import asyncio\n"
        "from spice.agent.coding._posix import _orphans as orphans\n"
        "assert not orphans.adopting()\n"
        "assert asyncio.run(orphans.sweep(0.0)) is True\n"
        "print('swept')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, check=False
    )
    assert (done.returncode, done.stdout) == (0, "swept\n"), done.stderr


VERDICT: Final = """
import os, sys, time
from spice.agent.coding._posix import _orphans as orphans
program = sys.argv[1]
pid = os.posix_spawn(program, [program, "60"], {})
if program == "/bin/true":
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:  # exited, unreaped: a zombie of this process
        with open(f"/proc/{pid}/stat", "rb") as stat:
            if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.01)
orphans._round = lambda: 1  # every round found it still dying: the deadline decides
swept = orphans._sweep_until(time.monotonic() - 1.0)
print(swept, os.path.exists(f"/proc/{pid}"))
if not swept:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""


@pytest.mark.parametrize(
    ("program", "verdict"),
    [("/bin/true", "True False\n"), ("/bin/sleep", "False True\n")],
    ids=["died-after-the-round", "still-alive"],
)
def test_at_the_deadline_a_dead_orphan_is_reaped_and_a_live_one_is_left(
    program: str, verdict: str
) -> None:
    """The sweep's verdict reaps what died since its last round (a zombie is not left);
    one still alive is left, and the join is tried again (in a fresh interpreter: a sweep
    ends every unregistered child of its process)."""
    done = subprocess.run(
        [sys.executable, "-c", VERDICT, program],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, verdict), done.stderr


def test_a_registered_leader_is_never_taken_for_an_orphan() -> None:
    """``started`` registers a child in the step that makes it; ``forget`` lets it go."""
    made = orphans.started(lambda: 4242424, int)
    try:
        assert orphans.is_leader(made)
        assert made in orphans.leaders()
    finally:
        orphans.forget(made)
    assert not orphans.is_leader(made)


RELAY_CHAINS: Final = 8
RELAY_PIDS_LIMIT: Final = 400
"""The relay server's pids cgroup: 8 chains hold a few processes each at any time; a
server that does not reap fills it with zombies (as R4-2 filled the host)."""

RELAY: Final = """
import os, signal, sys, time
end = time.monotonic() + 20
supervisor = os.getppid()
for chain in range(int(sys.argv[1])):
    if os.fork() == 0:
        break
else:
    os._exit(0)  # the command (whose death signal is its supervisor's death) is done
if chain == 0:
    # Kill the supervisor: every chain comes to the server (its pid is the server's
    # unreaped leader's, so it names no other process).
    os.kill(supervisor, signal.SIGKILL)
    print("relaying", flush=True)
while time.monotonic() < end:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid:
        os._exit(0)
    os.setsid()
"""

RELAY_SERVER: Final = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from procutil import Collect
from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _orphans as orphans
from spice.agent.coding._posix._launcher import adopt_orphans
from spice.agent.process import ProcessFailure, Spec

assert adopt_orphans()

async def main():
    await asyncio.to_thread(sys.stdin.readline)  # in the test's pids cgroup now
    out = Collect()
    spec = Spec(sys.argv[2], ("-I", "-c", sys.argv[3], sys.argv[4], sys.argv[5]), sys.argv[6],
                (), b"", out, Collect())
    process = await PosixLauncher().start(spec)
    await out.contains(b"relaying", 30)
    await process.force_kill()
    for _ in range(10):
        try:
            await process.wait()
        except ProcessFailure:
            continue
        break
    print("joined", flush=True)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        s = orphans.stats()
        print(s.rounds, s.walks, s.reaped, s.idle, int(s.active), flush=True)

asyncio.run(main())
"""


def test_fork_relays_whose_supervisor_died_are_all_reaped_by_the_server(tmp_path: Path) -> None:
    """R4-2 made deterministic: 8 setsid fork relays whose supervisor is gone come to the
    server, which ends and reaps them all (after the join too) and keeps answering."""
    mark = f"MARK-RELAY-{os.getpid()}-{time.monotonic_ns()}"
    with pids_cgroup(RELAY_PIDS_LIMIT, "spice-relays") as cgroup:
        if cgroup is None:
            pytest.skip("no pids cgroup can be made here: fork relays would be unbounded")
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                RELAY_SERVER,
                str(Path(__file__).parents[1]),
                sys.executable,
                RELAY,
                str(RELAY_CHAINS),
                mark,
                str(tmp_path),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            enter(cgroup, server.pid)
            assert server.stdin is not None
            server.stdin.write("go\n")
            server.stdin.flush()
            assert server.stdout is not None
            said = server.stdout.readline()
            if said != "joined\n":
                server.kill()
                _, problem = server.communicate()
                pytest.fail(f"the server did not join: {problem[-2000:]}")
            assert _until(lambda: _marked(mark) == 0)
            assert _until(lambda: not _children(server.pid))
            rounds, walks, _, _, _ = _stats(server)  # the server answers
            assert walks <= rounds
        finally:
            _end(server)


def _marked(mark: str) -> int:
    """Live or unreaped relays: processes whose last argument is ``mark`` (the server's
    own argv has the mark too, but not last)."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
        except OSError:
            continue
        count += argv[-2:-1] == [mark.encode()]
    return count
