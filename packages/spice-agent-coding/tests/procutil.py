"""Read-only views of ``/proc`` for the process tests (Linux), and bounded waits on them.

A process counts as alive unless it is gone or a zombie: a zombie runs no code and holds
no pipe, it only waits for its parent (or the session's subreaper) to collect it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

PROC: Final = "/proc"
CONDITION_BOUND_SECONDS: Final = 10.0
"""How long a test waits for a process condition (dying after SIGKILL) to hold."""

_POLL_SECONDS: Final = 0.01
_DEAD_STATES: Final = frozenset({"Z", "X", "x"})


@final
@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` the tests look at."""

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int

    @property
    def alive(self) -> bool:
        """True unless the process is a zombie (or being torn down)."""
        return self.state not in _DEAD_STATES


def read_stat(pid: int) -> ProcStat | None:
    """The stat of ``pid``, or ``None`` when it is gone."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as file:
            raw = file.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces and ")".
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]))


def all_processes() -> list[ProcStat]:
    """Every process visible in ``/proc``."""
    found: list[ProcStat] = []
    for name in os.listdir(PROC):
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                found.append(stat)
    return found


def alive_in_group(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) members of process group ``pgid``."""
    return sorted(p.pid for p in all_processes() if p.pgid == pgid and p.alive)


def is_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    stat = read_stat(pid)
    return stat is not None and stat.alive


LIFETIME_RESOURCES: Final = ("/memfd:spice-supervisor",)
"""What a process opens once for its whole life (the supervisor's sealed code, made at the
first contained start): never counted as a test's leak (review-round4 D2)."""


def open_descriptors() -> frozenset[tuple[int, str]]:
    """The descriptors this process has open, as ``(fd, what it names)``.

    Compared before and after a test's subject ran, a difference names the descriptor the
    subject left open (or closed), not a count of the whole process; what a process opens
    for its life (``LIFETIME_RESOURCES``) is left out, so the answer does not depend on
    which test ran first. A descriptor closed while it is read (the listing's own) is left
    out too.
    """
    found: set[tuple[int, str]] = set()
    for name in os.listdir(f"{PROC}/self/fd"):
        try:
            target = os.readlink(f"{PROC}/self/fd/{name}")
        except OSError:
            continue
        if not target.startswith(LIFETIME_RESOURCES):
            found.add((int(name), target))
    return frozenset(found)


async def until(condition: Callable[[], bool], bound: float = CONDITION_BOUND_SECONDS) -> bool:
    """Wait (bounded) until ``condition()`` is true; return its final value.

    The kernel offers no event for "this other process has died" outside our own
    children, so this polls ``/proc`` at a short interval up to ``bound``.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(bound):
            while not condition():  # noqa: ASYNC110 - /proc offers no event to wait on
                await asyncio.sleep(_POLL_SECONDS)
    return bool(condition())


def live_children() -> list[ProcStat]:
    """This process's children that are alive (not gone, not zombies)."""
    return [p for p in all_processes() if p.ppid == os.getpid() and p.alive]


async def children_gone() -> bool:
    """Wait (bounded) until this process has no live child: a tree the join killed may
    still be on its way out of the kernel (state ``R``, already ours) when it returns."""
    return await until(lambda: not live_children())


async def group_gone(pgid: int) -> bool:
    """Wait (bounded) until no live process is left in group ``pgid``."""
    return await until(lambda: not alive_in_group(pgid))


async def kill_escapee(pid: int) -> None:
    """End a process a test let escape on purpose, and collect it if it became ours."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    await until(lambda: not is_alive(pid))
    stat = read_stat(pid)
    if stat is not None and stat.ppid == os.getpid():
        # Adopted by this process (the session guard makes pytest a subreaper).
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - a zombie by now; never blocks


# -- sinks for the launcher tests ----------------------------------------------------------


@final
class Collect:
    """A sink that keeps what it gets (up to ``limit`` bytes) and can wait for a marker."""

    def __init__(self, limit: int = 1 << 20) -> None:
        self.data = bytearray()
        self.observed = 0
        self.largest_chunk = 0
        self._limit = limit
        self._waiters: list[tuple[bytes, asyncio.Future[None]]] = []

    def write(self, data: bytes) -> None:
        """Take one chunk."""
        self.observed += len(data)
        self.largest_chunk = max(self.largest_chunk, len(data))
        self.data += data[: max(0, self._limit - len(self.data))]
        for marker, waiter in self._waiters:
            if marker in self.data and not waiter.done():
                waiter.set_result(None)

    async def contains(self, marker: bytes, bound: float = CONDITION_BOUND_SECONDS) -> None:
        """Wait (bounded) until ``marker`` has arrived."""
        if marker in self.data:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((marker, waiter))
        async with asyncio.timeout(bound):
            await waiter


@final
class Failing:
    """A sink that raises on every chunk (a fault of the tool's side)."""

    def __init__(self) -> None:
        self.calls = 0

    def write(self, data: bytes) -> None:
        """Refuse the chunk."""
        self.calls += 1
        raise RuntimeError("sink refuses data")


_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_IFF_UP: Final = 0x1
_IFREQ_BYTES: Final = 40


def loopback_reason() -> str | None:
    """``None`` once 127.0.0.1 works here; it brings ``lo`` up when it may; else why not.

    ``make verify-offline`` runs the suite in a fresh network namespace whose ``lo`` is
    down: as root there the interface is brought up (``SIOCSIFFLAGS``), as anyone else a
    test that needs loopback skips with this reason.
    """
    import fcntl  # noqa: PLC0415 - only the network tests need these
    import socket  # noqa: PLC0415
    import struct  # noqa: PLC0415

    def works() -> bool:
        with socket.socket() as server, socket.socket() as client:
            try:
                server.bind(("127.0.0.1", 0))
                server.listen(1)
                client.settimeout(2)
                client.connect(server.getsockname())
            except OSError:
                return False
        return True

    if works():
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        request = struct.pack("16sH", b"lo", 0).ljust(_IFREQ_BYTES, b"\0")
        try:
            flags = struct.unpack_from("16sH", fcntl.ioctl(control, _SIOCGIFFLAGS, request))[1]
            wanted = struct.pack("16sH", b"lo", flags | _IFF_UP).ljust(_IFREQ_BYTES, b"\0")
            fcntl.ioctl(control, _SIOCSIFFLAGS, wanted)
        except OSError:
            return "loopback is down in this network namespace and cannot be brought up"
    return None if works() else "loopback does not work in this network namespace"


def descendants_named(pid: int, name: str) -> list[int]:
    """Live descendants of ``pid`` whose ``comm`` is ``name``, as the host sees them.

    A command in a PID namespace writes its own pids (``$$``), which name other processes
    here; the tests that watch a command's processes from outside find them this way.
    """
    below: dict[int, list[int]] = {}
    for stat in all_processes():
        below.setdefault(stat.ppid, []).append(stat.pid)
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in below.get(pending.pop(), ()):
            pending.append(child)
            try:
                with open(f"{PROC}/{child}/comm", encoding="utf-8") as comm:
                    if comm.read().strip() == name and is_alive(child):
                        found.append(child)
            except OSError:
                continue
    return found
