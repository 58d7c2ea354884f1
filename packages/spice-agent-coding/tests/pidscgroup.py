"""A pids cgroup (v1 or v2) a test makes for the processes it starts, where it can.

A test that makes many processes bounds them far below the machine's PID table: it
puts its helper into a fresh cgroup with a small ``pids.max``, so that a failure of the
code under test cannot exhaust the host's PIDs. Where no cgroup can be made here (not
root, no writable ``pids`` hierarchy), ``make`` answers ``None``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

_V1: Final = Path("/sys/fs/cgroup/pids")
_V2: Final = Path("/sys/fs/cgroup")
_REMOVE_BOUND_SECONDS: Final = 10.0


def _own(hierarchy: Path, controller: str | None) -> Path | None:
    """This process's cgroup in ``hierarchy`` (v1 names the controller, v2 has ``0::``)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if (controller is None and number == "0") or (
            controller is not None and controller in controllers.split(",")
        ):
            return hierarchy / path.lstrip("/")
    return None


def _base() -> Path | None:
    if (_V1 / "pids.max").exists() or (_V1 / "cgroup.procs").exists():
        return _own(_V1, "pids")
    controllers = _V2 / "cgroup.controllers"
    if controllers.exists() and "pids" in controllers.read_text().split():
        return _own(_V2, None)
    return None


@contextlib.contextmanager
def pids_cgroup(limit: int, name: str) -> Iterator[Path | None]:
    """A fresh pids cgroup with ``pids.max`` = ``limit``, removed after; ``None`` where
    none can be made. Put a process in with ``enter``."""
    base = _base()
    made: Path | None = None
    if base is not None:
        candidate = base / f"{name}-{os.getpid()}-{time.monotonic_ns()}"
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
            deadline = time.monotonic() + _REMOVE_BOUND_SECONDS
            while True:
                try:
                    made.rmdir()
                except OSError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.05)
                else:
                    break


def enter(cgroup: Path, pid: int) -> None:
    """Move ``pid`` into ``cgroup`` (its children are made there)."""
    (cgroup / "cgroup.procs").write_text(str(pid))


def current(cgroup: Path) -> int:
    """How many processes the cgroup holds now."""
    return int((cgroup / "pids.current").read_text())
