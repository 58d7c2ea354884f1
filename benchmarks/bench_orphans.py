"""Section "orphans": a call that leaves many orphans to the server (issue 28).

One call (sandbox off, so that its command may kill its own supervisor) forks
``ORPHANS`` children that each leave its session (``setsid``) and stop themselves, then
kills its supervisor: every one of them comes to the server, as the fork relays of
round 3 did. The server then ends the call as a timeout does (``force_kill``, the
join) and its reaper ends and reaps them all. The figure is the time from the timeout
to the answer, and to the last orphan reaped; the contract's bound is 10 s for 20,000.

The server runs in a child process inside a pids cgroup the benchmark makes (a bound
of ``ORPHANS`` plus a margin), so that the machine's PID table stays safe; where no
cgroup can be made the figure is unavailable (never run unbounded).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_orphans.py``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from _harness import Figure, Settings, main_of, summarize, unavailable

SECTION: Final = "orphans"
ORPHANS: Final = 20_000
QUICK_ORPHANS: Final = 2_000
MARGIN: Final = 200
"""Processes of the cgroup beyond the orphans: the server, its threads, the command."""

BOUND_SECONDS: Final = 10.0
RUN_BOUND_SECONDS: Final = 600.0

COMMAND: Final = """
import os, signal, sys
supervisor = os.getppid()
for _ in range(int(sys.argv[1])):
    try:
        if os.fork() == 0:
            os.setsid()
            os.kill(os.getpid(), signal.SIGSTOP)
            os._exit(0)
    except OSError:
        break
os.kill(supervisor, signal.SIGKILL)
print("made", flush=True)
"""

SERVER: Final = """
import asyncio, os, sys, time
from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._launcher import adopt_orphans
from spice.agent.process import ProcessFailure, Spec

class Sink:
    def __init__(self): self.data = b""
    def write(self, data): self.data += data

def children():
    me = os.getpid()
    found = 0
    for task in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{task}/children") as file:
                found += len(file.read().split())
        except OSError:
            pass
    return found

async def main():
    sys.stdin.readline()  # moved into the benchmark's pids cgroup
    assert adopt_orphans()
    out = Sink()
    spec = Spec(sys.executable, ("-I", "-c", sys.argv[1], sys.argv[2]), sys.argv[3], (), b"",
                out, Sink())
    process = await PosixLauncher().start(spec)
    while b"made" not in out.data:
        await asyncio.sleep(0.05)
    adopted = children()
    start = time.monotonic()  # the call's timeout
    await process.force_kill()
    for _ in range(20):
        try:
            await process.wait()
        except ProcessFailure:
            continue
        break
    answered = time.monotonic() - start
    while children():
        await asyncio.sleep(0.01)
    print(adopted, answered, time.monotonic() - start, flush=True)

asyncio.run(main())
"""


def _own_pids_cgroup() -> Path | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return Path("/sys/fs/cgroup/pids") / path.lstrip("/")
    return None


@contextlib.contextmanager
def _pids_cgroup(limit: int) -> Iterator[Path | None]:
    base = _own_pids_cgroup()
    made: Path | None = None
    if base is not None:
        candidate = base / f"spice-bench-orphans-{os.getpid()}"
        try:
            candidate.mkdir()
            (candidate / "pids.max").write_text(str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                candidate.rmdir()
        else:
            made = candidate
    try:
        yield made
    finally:
        if made is not None:
            deadline = time.monotonic() + 30
            while True:
                try:
                    made.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
                else:
                    break


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    count = QUICK_ORPHANS if settings.quick else ORPHANS
    name = f"{count} orphans: timeout to answer"
    if not sys.platform.startswith("linux"):
        return [unavailable(SECTION, name, "subreapers are a Linux feature", "none")]
    with _pids_cgroup(count + MARGIN) as cgroup:
        if cgroup is None:
            return [unavailable(SECTION, name, "no pids cgroup can be made here", "none")]
        root = tempfile.mkdtemp(prefix="spice-bench-orphans-")
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, COMMAND, str(count), root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            (cgroup / "cgroup.procs").write_text(str(server.pid))
            assert server.stdin is not None
            server.stdin.write("go\n")
            server.stdin.flush()
            output, _ = server.communicate(timeout=RUN_BOUND_SECONDS)
        finally:
            server.kill()
            server.wait()
            os.rmdir(root)
    fields = output.split()
    if len(fields) != 3:  # adopted, answered, reaped
        return [unavailable(SECTION, name, "the server did not report", "none")]
    adopted, answered, reaped = int(fields[0]), float(fields[1]), float(fields[2])
    notes = (
        f"{adopted} orphans adopted by the server",
        f"bound: {BOUND_SECONDS:g} s from the timeout (contract 11.1)",
    )
    return [
        Figure(SECTION, name, summarize([answered], "s"), "none", "", None, notes=notes),
        Figure(
            SECTION,
            f"{count} orphans: timeout to the last reaped",
            summarize([reaped], "s"),
            "none",
            "",
            None,
            notes=notes,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_of(run))
