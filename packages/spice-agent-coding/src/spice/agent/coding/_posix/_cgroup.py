"""A cgroup per call: its processes and memory bounded, and its end made by the kernel.

Contract 11.1 ("Bounded processes and memory"). At start ``resolve_cgroups`` finds where
the server can make child cgroups of its own: cgroup v2 where the server's cgroup has
the ``pids`` and ``memory`` controllers enabled for its children, else the v1 ``pids``
and ``memory`` hierarchies (with the v1 ``freezer`` where it is mounted), each probed
once by making and removing a child. Hybrid hosts (v2 with only ``hugetlb``, v1 for the
rest) take the v1 way.

Per call ``Cgroups.make`` creates the call's cgroup in each hierarchy with the process
bound (``pids.max``) and the memory bound (``memory.max``, v1
``memory.limit_in_bytes``), and opens each ``cgroup.procs`` for writing: the supervisor's
child writes ``0`` there before ``execve`` (moving itself, so the command and every
descendant are in it, the supervisor not), then closes it. The pages of the call's
private ``/tmp`` and ``/dev/shm`` are charged to the process that writes them, so the
memory bound bounds them too; the command's ``oom_score_adj`` is raised
(``_supervisor.COMMAND_OOM_SCORE_ADJ``), so where memory runs out the kernel picks the command,
never the server. ``CallCgroup.end`` ends every process in it (v2 ``cgroup.kill``; v1
freezes, kills every member, thaws, round after round) and ``remove`` removes it.

Across calls (contract 12.1, "Bounds across calls"): every call's pids cgroup is made
beneath one cgroup of the server's own (``spice-server-PID-N``, made at start) whose
``pids.max`` is the server-wide bound: ``SERVER_PROCESSES_FACTOR`` times the per-call
bound, never more than half the host's free PIDs (``free_pids``, read from the kernel
at start). The kernel counts hierarchically, so all calls together never hold more.
The same server cgroup (v2), or a ``spice-server-PID-N`` of the v1 ``memory`` hierarchy,
bounds the memory of all calls together at ``max_server_memory`` (default half the host's
memory, ``SERVER_MEMORY_DIVISOR``): the kernel charges each call's pages to it too, so
calls in flight together cannot take more than it; past it the kernel reclaims, then
ends the command that asks (its ``oom_score_adj`` makes it the one), never the server,
and the call answers as one that ran out of memory. The server's cgroups are removed
when it exits (``atexit``; a killed server's at the next start). Where no cgroup can be
made, ``Cgroups.way`` says so and the supervisor sets
``RLIMIT_NPROC`` for the command (a non-root server only: root is not held to it) to
the smaller of the two bounds: it counts all of the user's processes, so it bounds
every call together too.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from .._sandbox import DEFAULT_MAX_PROCESSES, MIN_MEMORY_BYTES

__all__ = [
    "END_BOUND_SECONDS",
    "FREE_PIDS_DIVISOR",
    "MAX_DEFAULT_MEMORY_BYTES",
    "SERVER_MEMORY_DIVISOR",
    "SERVER_PROCESSES_FACTOR",
    "CallCgroup",
    "Cgroups",
    "default_max_memory",
    "default_server_memory",
    "free_pids",
    "resolve_cgroups",
    "server_processes",
]

SERVER_PROCESSES_FACTOR: Final = 4
"""The server-wide process bound is this many times the per-call bound (at most)."""

FREE_PIDS_DIVISOR: Final = 2
"""The server-wide process bound is at most the host's free PIDs divided by this."""

SERVER_MEMORY_DIVISOR: Final = 2
"""The default server-wide memory bound is the machine's memory divided by this (half)."""

MAX_DEFAULT_MEMORY_BYTES: Final = 16 * 1024**3
"""The default memory bound is a quarter of the machine's memory, at most this."""

END_BOUND_SECONDS: Final = 2.0
"""Longest ``CallCgroup.end`` takes to end every member before it gives up."""

_ROUND_SECONDS: Final = 0.01
_CGROUP_FILE: Final = "/proc/self/cgroup"
_MOUNTS_FILE: Final = "/proc/self/mountinfo"
_V1_CONTROLLERS: Final = ("pids", "memory")
_PREFIX: Final = "spice-call-"
_SERVER_PREFIX: Final = "spice-server-"
_PID_MAX_FILE: Final = "/proc/sys/kernel/pid_max"
_THREADS_MAX_FILE: Final = "/proc/sys/kernel/threads-max"
_LOADAVG_FILE: Final = "/proc/loadavg"
_numbers = itertools.count(1)


def default_max_memory() -> int:
    """A quarter of the machine's memory, at most ``MAX_DEFAULT_MEMORY_BYTES``."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return MAX_DEFAULT_MEMORY_BYTES
    return max(MIN_MEMORY_BYTES, min(MAX_DEFAULT_MEMORY_BYTES, total // 4))


def default_server_memory() -> int:
    """Half the machine's memory (``MAX_DEFAULT_MEMORY_BYTES`` where it cannot be read)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return MAX_DEFAULT_MEMORY_BYTES
    return max(MIN_MEMORY_BYTES, total // SERVER_MEMORY_DIVISOR)


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as file:
        return file.read()


def free_pids(reader: Callable[[str], str] = _read, parent: str | None = None) -> int | None:
    """The PIDs the kernel can still give (``None`` when it cannot be read): the smaller
    of ``kernel.pid_max`` and ``kernel.threads-max`` less the tasks that exist now (the
    total of ``/proc/loadavg``), and, where ``parent`` (the server's pids cgroup) has a
    ``pids.max``, what it leaves."""
    try:
        most = min(int(reader(_PID_MAX_FILE)), int(reader(_THREADS_MAX_FILE)))
        tasks = int(reader(_LOADAVG_FILE).split()[3].partition("/")[2])
    except (OSError, ValueError, IndexError):
        return None
    free = most - tasks
    if parent is not None:
        with contextlib.suppress(OSError, ValueError):
            limit = reader(os.path.join(parent, "pids.max")).strip()
            if limit != "max":
                current = int(reader(os.path.join(parent, "pids.current")))
                free = min(free, int(limit) - current)
    return max(0, free)


def server_processes(max_processes: int, free: int | None) -> int:
    """The server-wide process bound: ``SERVER_PROCESSES_FACTOR`` times ``max_processes``,
    never more than ``free // FREE_PIDS_DIVISOR`` (when the free PIDs are known)."""
    bound = SERVER_PROCESSES_FACTOR * max_processes
    return bound if free is None else min(bound, free // FREE_PIDS_DIVISOR)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _own_cgroups(text: str) -> dict[str, str]:
    """``controller -> path`` from ``/proc/self/cgroup`` (v2's line as ``""``)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _mount_points(text: str) -> dict[str, str]:
    """``controller -> mount point`` of the cgroup file systems (v2 as ``""``)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        point = fields[4]
        if rest[0] == "cgroup2":
            found.setdefault("", point)
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                found.setdefault(option, point)
    return found


@final
@dataclass(frozen=True, slots=True)
class CallCgroup:
    """One call's cgroup: a directory per hierarchy and each one's ``cgroup.procs``
    opened for writing (handed to the supervisor; closed here once it started)."""

    version: str
    paths: tuple[str, ...]
    procs: tuple[int, ...]
    freezer: str | None = None

    def members(self) -> list[int]:
        """The pids in the call's cgroup (its first hierarchy: v2's, or v1 ``pids``)."""
        try:
            return [int(f) for f in _read(os.path.join(self.paths[0], "cgroup.procs")).split()]
        except OSError:
            return []

    def end(self, bound: float = END_BOUND_SECONDS) -> bool:
        """End every process in the call's cgroup (blocking, at most ``bound``); whether
        none is left."""
        deadline = time.monotonic() + bound
        killed = False
        if self.version == "v2":
            try:  # the kernel kills every member, and every fork racing with it
                _write(os.path.join(self.paths[0], "cgroup.kill"), "1")
                killed = True
            except OSError:
                pass  # before Linux 5.14: the rounds below
        while True:
            members = self.members()
            if not members:
                return True
            if time.monotonic() >= deadline:
                return False
            if not killed:  # killed members stay listed until they exit: wait for them
                self._kill_round(members)
            time.sleep(_ROUND_SECONDS)

    def _kill_round(self, members: Sequence[int]) -> None:
        """v1 (and v2 without ``cgroup.kill``): freeze, kill every member, thaw."""
        frozen = self._freeze("FROZEN")
        for pid in {*members, *(self.members() if frozen else ())}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if frozen:
            self._freeze("THAWED")

    def _freeze(self, state: str) -> bool:
        if self.freezer is None:
            return False
        try:
            _write(os.path.join(self.freezer, "freezer.state"), state)
        except OSError:
            return False
        return True

    def remove(self, bound: float = END_BOUND_SECONDS) -> bool:
        """Remove the call's directories (each once empty); whether all are gone."""
        deadline = time.monotonic() + bound
        left = [*self.paths, *((self.freezer,) if self.freezer is not None else ())]
        while left:
            for path in list(left):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    left.remove(path)
                except OSError:
                    continue
                else:
                    left.remove(path)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(_ROUND_SECONDS)
        return not left


@final
@dataclass(frozen=True, slots=True)
class Cgroups:
    """Where the server makes each call's cgroup, and the bounds it sets there.

    ``version`` is ``"v2"``, ``"v1"`` or ``None`` (no cgroup can be made: ``reason``
    says why); ``parents`` are where calls' cgroups are made, one per hierarchy (v1:
    ``pids`` first, then ``memory``): the first is the server's own cgroup bounded at
    ``max_server_processes``; ``freezer`` the v1 freezer's, where mounted.
    """

    max_processes: int = DEFAULT_MAX_PROCESSES
    max_memory: int = field(default_factory=default_max_memory)
    version: str | None = None
    parents: tuple[str, ...] = ()
    freezer: str | None = None
    reason: str | None = "not resolved"
    max_server_processes: int = SERVER_PROCESSES_FACTOR * DEFAULT_MAX_PROCESSES
    max_server_memory: int = field(default_factory=default_server_memory)

    @property
    def made(self) -> bool:
        """Whether each call gets a cgroup."""
        return self.version is not None

    @property
    def rlimit_processes(self) -> int:
        """The ``RLIMIT_NPROC`` the command gets: where no cgroup is made and the server
        is not root (root is not held to it); else 0 (none)."""
        if self.made or os.geteuid() == 0:
            return 0
        return min(self.max_processes, self.max_server_processes)

    def server_way(self) -> str:
        """How the calls' processes are bounded together, in words (for ``tools``)."""
        if self.made:
            return "by the server's own cgroup, above every call's"
        if self.rlimit_processes:
            return "by RLIMIT_NPROC, counted over all of your user's processes"
        return "not bounded: no cgroup can be made here"

    def way(self) -> str:
        """How processes and memory are bounded, in words (for ``tools``)."""
        if self.version == "v2":
            return "by a cgroup (v2) per call"
        if self.version == "v1":
            return "by a cgroup per call (v1 pids and memory hierarchies)"
        if self.rlimit_processes:
            return (
                "processes only by RLIMIT_NPROC (counted over all of your user's "
                "processes); memory is not bounded"
            )
        return "not bounded: no cgroup can be made here"

    def report(self) -> dict[str, object]:
        """The ``tools`` output's ``bounds`` object."""
        return {
            "processes": self.max_processes,
            "server_processes": self.max_server_processes,
            "server_bounded": self.server_way(),
            "memory_bytes": self.max_memory,
            "server_memory_bytes": self.max_server_memory if self.made else None,
            "cgroup": self.version,
            "bounded": self.way(),
            **({"reason": self.reason} if self.reason is not None else {}),
        }

    def make(self) -> CallCgroup:
        """The call's cgroup, bounded; ``OSError`` when it cannot be made (then nothing
        of it is left), or where no cgroup is made here."""
        if self.version is None:
            raise OSError("no cgroup is made here")
        name = f"{_PREFIX}{os.getpid()}-{next(_numbers)}"
        paths = [os.path.join(parent, name) for parent in self.parents]
        freezer = None if self.freezer is None else os.path.join(self.freezer, name)
        made: list[str] = []
        procs: list[int] = []
        try:
            for path in [*paths, *((freezer,) if freezer is not None else ())]:
                os.mkdir(path, 0o755)
                made.append(path)
            self._bound(paths)
            for path in made:  # the freezer's too: the v1 end freezes the command's tree
                procs.append(  # noqa: PERF401 - each one opened is closed on a failure
                    os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
                )
        except OSError:
            for fd in procs:
                os.close(fd)
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise
        return CallCgroup(self.version, tuple(paths), tuple(procs), freezer)

    def _bound(self, paths: Sequence[str]) -> None:
        if self.version == "v2":
            _write(os.path.join(paths[0], "pids.max"), str(self.max_processes))
            _write(os.path.join(paths[0], "memory.max"), str(self.max_memory))
            with contextlib.suppress(OSError):  # no swap accounting: nothing to bound
                _write(os.path.join(paths[0], "memory.swap.max"), "0")
            return
        _write(os.path.join(paths[0], "pids.max"), str(self.max_processes))
        _write(os.path.join(paths[1], "memory.limit_in_bytes"), str(self.max_memory))


def _remove_stale(parents: Iterable[str]) -> None:
    """Remove the empty call cgroups of servers that died (by ``SIGKILL``, say) before
    their joins removed them, thawing a frozen one first, and their server cgroups
    (the calls' within first); a cgroup still holding a process is left."""
    for parent in parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            prefix = next((p for p in (_PREFIX, _SERVER_PREFIX) if name.startswith(p)), None)
            if prefix is None:
                continue
            owner = name[len(prefix) :].partition("-")[0]
            if not owner.isdigit() or _alive(int(owner)):
                continue
            if prefix == _SERVER_PREFIX:
                _remove_stale([os.path.join(parent, name)])
            with contextlib.suppress(OSError):
                # A server that died between its freeze and its thaw left its members
                # frozen with SIGKILL pending (v1): thawed, they die.
                if os.path.exists(os.path.join(parent, name, "freezer.state")):
                    _write(os.path.join(parent, name, "freezer.state"), "THAWED")
                os.rmdir(os.path.join(parent, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _server_cgroup(parent: str, bound: int | None, memory: int | None, *, v2: bool) -> str:
    """The server's own cgroup beneath ``parent``, its ``pids.max`` at ``bound`` (``None``:
    a v1 memory one) and its memory at ``memory`` (v2: its children get the pids and memory
    controllers); ``OSError``, nothing left, when it cannot be made."""
    path = os.path.join(parent, f"{_SERVER_PREFIX}{os.getpid()}-{next(_numbers)}")
    os.mkdir(path, 0o755)
    try:
        if v2:
            _write(os.path.join(path, "cgroup.subtree_control"), "+pids +memory")
        if bound is not None:
            _write(os.path.join(path, "pids.max"), str(bound))
        if memory is not None:
            name = "memory.max" if v2 else "memory.limit_in_bytes"
            _write(os.path.join(path, name), str(memory))
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        raise
    atexit.register(_remove_at_exit, path)
    return path


def _remove_at_exit(path: str) -> None:
    """The server's cgroup, removed as the server exits (left when a process holds it:
    the next start's ``_remove_stale`` takes it then)."""
    _remove_stale([path])
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _probe(parents: Iterable[str]) -> bool:
    """Whether a child cgroup can be made (and removed) beneath each of ``parents``."""
    made: list[str] = []
    try:
        for parent in parents:
            path = os.path.join(parent, f"spice-probe-{os.getpid()}")
            os.mkdir(path, 0o755)
            made.append(path)
    except OSError:
        return False
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.rmdir(path)
    return True


def resolve_cgroups(
    max_processes: int = DEFAULT_MAX_PROCESSES,
    max_memory: int | None = None,
    reader: Callable[[str], str] = _read,
    *,
    server_memory: int | None = None,
) -> Cgroups:
    """Where each call's cgroup is made here (v2, else v1), probed once at start.

    ``reader`` reads ``/proc/self/cgroup``, ``/proc/self/mountinfo`` and the kernel's
    PID figures (a seam for the tests' hosts). Where cgroups are made, the server's own
    cgroup is made beneath the first parent, bounded server-wide (``server_processes``).
    """
    whole = default_server_memory() if server_memory is None else server_memory
    memory = min(default_max_memory(), whole) if max_memory is None else max_memory
    try:
        own = _own_cgroups(reader(_CGROUP_FILE))
        mounts = _mount_points(reader(_MOUNTS_FILE))
    except OSError:
        server = server_processes(max_processes, free_pids(reader))
        return Cgroups(
            max_processes,
            memory,
            reason="/proc/self/cgroup cannot be read",
            max_server_processes=server,
        )
    if "" in own and "" in mounts:
        base = os.path.join(mounts[""], own[""].lstrip("/"))
        try:
            enabled = reader(os.path.join(base, "cgroup.subtree_control")).split()
        except OSError:
            enabled = []
        if {"pids", "memory"} <= set(enabled) and _probe([base]):
            _remove_stale([base])
            server = server_processes(max_processes, free_pids(reader, base))
            with contextlib.suppress(OSError):
                top = _server_cgroup(base, server, whole, v2=True)
                return Cgroups(max_processes, memory, "v2", (top,), None, None, server, whole)
    if all(c in own and c in mounts for c in _V1_CONTROLLERS):
        parents = tuple(os.path.join(mounts[c], own[c].lstrip("/")) for c in _V1_CONTROLLERS)
        server = server_processes(max_processes, free_pids(reader, parents[0]))
        freezer = None
        if "freezer" in own and "freezer" in mounts:
            candidate = os.path.join(mounts["freezer"], own["freezer"].lstrip("/"))
            freezer = candidate if _probe([candidate]) else None
        if _probe(parents):
            _remove_stale([*parents, *((freezer,) if freezer is not None else ())])
            with contextlib.suppress(OSError):
                top = _server_cgroup(parents[0], server, None, v2=False)
                try:
                    pool = _server_cgroup(parents[1], None, whole, v2=False)
                except OSError:
                    _remove_at_exit(top)
                    raise
                return Cgroups(
                    max_processes, memory, "v1", (top, pool), freezer, None, server, whole
                )
        return Cgroups(
            max_processes,
            memory,
            reason="the server may not make cgroups here (not delegated)",
            max_server_processes=server,
        )
    return Cgroups(
        max_processes,
        memory,
        reason="no cgroup hierarchy with the pids and memory controllers is available",
        max_server_processes=server_processes(max_processes, free_pids(reader)),
    )
