"""``PosixLauncher`` and its process: one session and process group per child.

This module (with its ``_posix*`` siblings) is the only place in the application that
starts processes. Design, bounds and what escapes are in ``docs/platform.md``;
in short:

- The child starts with ``subprocess.Popen`` (``start_new_session=True``,
  ``close_fds=True``, no ``preexec_fn``), its environment exactly the spec's, its
  ``argv[0]`` the resolved absolute path, stdin at EOF after ``spec.stdin``, stdout and
  stderr on pipes that the event loop reads in ``READ_CHUNK_BYTES`` chunks and hands to
  the sinks at once (nothing is buffered here).
- The leader's exit is observed without reaping it (``waitid(WNOWAIT)``, woken by a
  pidfd where the kernel has one, else polled). The unreaped leader pins its pid, and
  with it the process-group id, so a group signal can never reach a recycled group.
  Without ``os.waitid`` (macOS) the exit is seen by reaping, and the rest of the group
  is killed right then, while its id is still certainly ours.
- The working directory is entered without following a symlink: it is opened one
  component at a time from ``/`` with ``O_NOFOLLOW`` (a symlink component is a
  ``LaunchError``), and on Linux the child enters the held descriptor through
  ``/proc/self/fd/N`` (``chdir`` runs in the child before ``exec`` closes it), so a
  directory swapped for a symlink after the shell's last check never hosts the child.
  Elsewhere the checked path itself is used.
- ``wait`` (the join) kills what is left of the group while the leader still pins it,
  reaps the leader, drains the pipes for at most ``DRAIN_BOUND_SECONDS`` and closes
  them. Nothing in it waits on a pipe held open by a descendant.
- On Linux the leader is a per-call supervisor (``_posix._supervisor``, run as
  ``python -I -S -c``, its code compiled once at start) and the command is its child:
  it owns the whole tree (a child subreaper), ends it on the join's request, on the
  force kill and when the server dies, applies the Landlock policy of ``_containment``
  before ``exec``, and reports on a pipe whether the command started and how it ended.
  Where namespaces are made, ``bwrap``'s monitor leads the group instead and runs the
  supervisor inside them, as the init of the call's PID namespace; the server signals
  it by a pidfd (its pid from bwrap's ``--info-fd``), and SIGKILL to it ends the whole
  namespace. ``force_kill`` and the join have the tree ended first and wait for it
  (``END_BOUND_SECONDS``), then SIGKILL the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, final

from spice.agent.process import LaunchError, Spec

from . import _bwrap, _facts, _hints, _plan
from . import _orphans as orphans
from . import _supervisor as supervisor
from ._cgroup import CallCgroup, Cgroups
from ._containment import OFF, Containment, describe
from ._guard import ender, server_guard
from ._leader import _close_quietly
from ._process import (
    DRAIN_BOUND_SECONDS,
    END_BOUND_SECONDS,
    EXIT_BOUND_SECONDS,
    ORPHAN_SWEEP_SECONDS,
    CallStart,
    PosixProcess,
    Started,
    _Bounds,
    _remove_tree,
    take_over,
)
from ._proxy import CallProxy, Proxy, close_call, open_for_call

SERVER_DEATH_BOUND_SECONDS: Final = 2.0
"""When the server dies, even by SIGKILL, every command and descendant ends within this."""

CANCELLED_START_SECONDS: Final = (
    END_BOUND_SECONDS + EXIT_BOUND_SECONDS + 2 * (DRAIN_BOUND_SECONDS + ORPHAN_SWEEP_SECONDS)
)
"""How long a start cancelled while waiting for its word waits for the join of what it made.

The join is bounded by its own phases (end, exit, sweep, drain); this bound is theirs,
with room for the TMPDIR's removal.
"""

TMPDIR_PREFIX: Final = "spice-call-"
"""Name prefix of the private temporary directory a contained call gets as ``TMPDIR``."""

_HERE: Final = os.path.dirname(os.path.abspath(__file__))
SUPERVISOR_MODULES: Final = ("_seccomp", "_landlock", "_tmpdir", "_bridge", "_supervisor")
"""The modules a supervisor runs, in import order: its helpers, then itself (``__main__``)."""


def _read_source(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


SUPERVISOR_SOURCES: Final = {
    name: _read_source(os.path.join(_HERE, name + ".py")) for name in SUPERVISOR_MODULES
}
"""The supervisor's code, read once when the server starts (contract 10.1): every call
runs it compiled from a sealed memory file, never again from a path a command could write."""

_code: list[int] = []
"""The sealed memory file with the supervisor's compiled code (made once, on first use)."""


def _code_fd() -> int:
    """The sealed, close-on-exec memory file holding the supervisor's compiled code."""
    if not _code:
        import fcntl  # noqa: PLC0415 - POSIX only, and only where a supervisor runs

        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        compiled = []
        for name in SUPERVISOR_MODULES:
            source = SUPERVISOR_SOURCES[name]
            if source is None:
                raise OSError("the supervisor's code is unavailable")
            code = compile(source, os.path.join(_HERE, name + ".py"), "exec")
            compiled.append(("__main__" if name == SUPERVISOR_MODULES[-1] else name, code))
        data = marshal.dumps(tuple(compiled))
        fd = os.memfd_create("spice-supervisor", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        _write_all(fd, data)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        _code.append(fd)
    return _code[0]


INTERPRETER: Final = os.path.realpath(sys.executable) if sys.executable else ""
"""The interpreter the supervisor runs on, resolved once at start (not a venv's symlink)."""

_KEPT_VISIBLE: Final = tuple(
    _bwrap.under_private_tmp([sys.prefix, sys.base_prefix, sys.exec_prefix, INTERPRETER])
)
"""The server's own environment and interpreter where they lie beneath ``/tmp`` (a
checkout or a venv there): kept visible, read-only, on each call's private ``/tmp``."""

_SUPERVISOR_FLAGS: tuple[str, ...] = ("-I", "-S", "-c", supervisor.BOOTSTRAP)
"""Isolated (no PYTHON* variables, no user site), without ``site``, the bootstrap."""

_SUPERVISOR_ENVIRONMENT: dict[str, str] = {}
"""The supervisor's own environment (the command's comes through the spec file)."""


def adopt_orphans() -> bool:
    """Make this process the subreaper of last resort for every command's tree.

    For a process that starts no children but through ``PosixLauncher`` (the CLI's
    ``serve`` and ``call``): descendants orphaned by a supervisor that was killed, or
    that outran its sweep, come back here and are ended and reaped as they come, off
    the event loop (``_posix._orphans``); a join also sweeps them. Returns whether the
    kernel made this process a subreaper (Linux).
    """
    return orphans.adopt()


def _supervisor_available() -> bool:
    """Whether commands run under the per-call supervisor (Linux with an interpreter)."""
    return (
        sys.platform.startswith("linux")
        and bool(INTERPRETER)
        and hasattr(os, "memfd_create")
        and None not in SUPERVISOR_SOURCES.values()
    )


_FD_DIRECTORY: Final = "/proc/self/fd"
_ENTER_BY_DESCRIPTOR: Final = sys.platform.startswith("linux") and os.path.isdir(_FD_DIRECTORY)


def _environment(entries: Iterable[str]) -> dict[str, str]:
    environment: dict[str, str] = {}
    for entry in entries:
        name, _, value = entry.partition("=")
        environment[name] = value
    return environment


@final
@dataclass(frozen=True, slots=True)
class _Standard:
    """A child's standard streams and held workdir: the child's ends and the parent's."""

    stdin: int
    stdout: int
    stderr: int
    directory: int
    stdin_write: int | None
    stdout_read: int
    stderr_read: int
    cwd: str


@final
class _Ends:
    """The descriptors of one start.

    The child's ends are closed after the fork whatever happens; the parent's are kept
    for the process, or closed when the start fails.
    """

    def __init__(self) -> None:
        asyncio.get_running_loop()  # a start needs its loop: checked before anything is made
        self.parent: list[int] = []
        self.child: list[int] = []

    def pipe(self, *, parent_reads: bool) -> tuple[int, int]:
        """A pipe whose read end (or, for the child's input, write end) is the parent's."""
        read, write = os.pipe()
        self.parent.append(read if parent_reads else write)
        self.child.append(write if parent_reads else read)
        return read, write

    def standard(self, spec: Spec) -> _Standard:
        """Output pipes, an input pipe when ``spec`` has input, and the held workdir."""
        stdout_read, stdout_write = self.pipe(parent_reads=True)
        stderr_read, stderr_write = self.pipe(parent_reads=True)
        stdin: int = subprocess.DEVNULL
        stdin_write: int | None = None
        if spec.stdin:
            stdin, stdin_write = self.pipe(parent_reads=False)
        directory = _facts.open_no_follow(spec.working_directory)
        self.parent.append(directory)
        # The child enters the held descriptor on Linux, else the checked path.
        cwd = f"{_FD_DIRECTORY}/{directory}" if _ENTER_BY_DESCRIPTOR else spec.working_directory
        return _Standard(
            stdin, stdout_write, stderr_write, directory, stdin_write, stdout_read, stderr_read, cwd
        )

    def close_parent(self) -> None:
        for fd in self.parent:
            _close_quietly(fd)

    def close_child(self) -> None:
        for fd in self.child:
            _close_quietly(fd)


def _popen_supervisor(
    standard: _Standard, descriptors: tuple[int, ...], wrapper: list[str]
) -> subprocess.Popen[bytes]:
    """Start the per-call supervisor: its argv, its environment, the descriptors it gets.

    The one place that says how the supervisor is run. It reads the command from
    ``descriptors[0]`` and reports on ``descriptors[1]`` (see ``_posix._supervisor``); the
    rest (the lifeline, with namespaces) are passed on as they are. It leads a new
    session and process group, with the child's standard streams and workdir. With
    namespaces, ``wrapper`` (the ``bwrap`` argv) leads the group instead and runs the
    supervisor inside the namespaces, with the same descriptors.
    """
    code = _code_fd()
    spec_fd, report_fd = descriptors[:2]
    argv = [*wrapper, INTERPRETER, *_SUPERVISOR_FLAGS, str(code), str(spec_fd), str(report_fd)]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # noqa: S603 - argv list, no shell; see PosixLauncher.start
            argv,
            executable=argv[0],
            stdin=standard.stdin,
            stdout=standard.stdout,
            stderr=standard.stderr,
            cwd=standard.cwd,
            env=_SUPERVISOR_ENVIRONMENT,
            close_fds=True,
            pass_fds=(code, *descriptors),
            start_new_session=True,
            restore_signals=True,
        )

    return orphans.started(spawn, _pid_of)


def _pid_of(popen: subprocess.Popen[bytes]) -> int:
    return popen.pid


LINK_GAINED: Final = (
    "a module the server runs ({path}) has gained a hard link in a writable place ({link}) "
    "since the server started: nothing was started; remove that link (or restart the "
    "server, which then refuses to contain)"
)
LINKS_UNSEARCHED: Final = (
    "a module the server runs ({path}) has gained a hard link since the server started, "
    "and the writable places could not be searched whole: nothing was started; restart "
    "the server"
)
PLACE_CHANGED: Final = (
    "a writable place (the worktree or an --allow-write directory) is no longer the "
    "directory the server started with (replaced, or a symbolic link now): nothing was "
    "started; restart the server after checking it"
)
"""Why a call is refused when a writable place changed since the start (contract 11.1)."""


_MOUNT_POINTS: dict[str, int] = {}
"""Mount points ``bwrap`` makes for absent protected paths, with the calls that use them.

The last call to end removes one (if it is still empty); while a call uses one, a later
call's plan counts it as absent too, so that it never binds the mount point itself."""


def _planned_kind(path: str) -> _plan.Kind:
    """``_plan.kind_of``, with this server's live mount points counted as absent."""
    return _plan.Kind.ABSENT if path in _MOUNT_POINTS else _plan.kind_of(path)


def _sample_rules(facts: _plan.StartFacts, containment: Containment) -> dict[str, object]:
    """The rules of a call's plan as ``tools`` prints them."""
    namespaces = containment.namespaces.made
    sample = _plan.plan_call(
        facts,
        namespaces=namespaces,
        allow_network=containment.allow_network,
        environment=(),
        temporary=_bwrap.PRIVATE_TMP if namespaces else "a fresh directory per call",
        kind=_planned_kind,
        visible=_KEPT_VISIBLE,
    )
    return sample.rules()


def _take_mount_points(plan: _plan.CallPlan) -> tuple[str, ...]:
    taken = tuple(mask.path for mask in plan.mount_points)
    for path in taken:
        _MOUNT_POINTS[path] = _MOUNT_POINTS.get(path, 0) + 1
    return taken


def _release_mount_points(taken: Iterable[str]) -> None:
    """Drop this call's use of its mount points; remove each the last user leaves empty."""
    for path in taken:
        left = _MOUNT_POINTS.get(path, 1) - 1
        if left > 0:
            _MOUNT_POINTS[path] = left
            continue
        _MOUNT_POINTS.pop(path, None)
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(path)  # only an empty one
            elif stat.S_ISREG(info.st_mode) and info.st_size == 0:
                os.unlink(path)


def _hinter(
    scanner: _hints.RefusalScanner,
    plan: _plan.CallPlan,
    proxy: CallProxy | None = None,
    server: Proxy | None = None,
) -> Callable[[], str | None]:
    def hint() -> str | None:
        return _hints.sandbox_hint(
            scanner,
            plan.landlock_writable(),
            plan.hidden,
            network_denied=not plan.allow_network,
            refused_hosts=() if proxy is None else tuple(proxy.refused),
            private_hosts=() if proxy is None else tuple(proxy.private),
            preset_of=None if server is None else server.policy.preset_of,
            raw_hosts=() if proxy is None else tuple(proxy.raw),
        )

    return hint


def _scanned(spec: Spec, scanner: _hints.RefusalScanner) -> Spec:
    """``spec`` whose output also feeds ``scanner`` (for the call's ``sandbox_hint``)."""
    return Spec(
        spec.executable,
        spec.arguments,
        spec.working_directory,
        spec.environment,
        spec.stdin,
        _hints.Scanned(spec.stdout, scanner, 1),
        _hints.Scanned(spec.stderr, scanner, 2),
        spec.capabilities,
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _link_watch(facts: _plan.StartFacts) -> _facts.LinkWatch:
    """The start's linked modules, watched over the writable places and the cache."""
    places = [place.path for place in facts.places]
    return _facts.LinkWatch([*places, *([facts.cache] if facts.cache else [])])


def _refuse_changed_start(facts: _plan.StartFacts | None, links: _facts.LinkWatch | None) -> None:
    """Before each call, ``LaunchError`` when what the start settled no longer holds: a
    writable place is not the directory it was, or a module of the server gained a link a
    call could write."""
    if facts is not None and _facts.changed_place(facts.places) is not None:
        raise LaunchError(reason=PLACE_CHANGED)
    gained = None if links is None else links.gained()
    if gained is not None:
        raise LaunchError(
            reason=LINKS_UNSEARCHED.format(path=gained.module)
            if gained.link is None
            else LINK_GAINED.format(path=gained.module, link=gained.link)
        )


_SLOTS: Final = (
    "_bounds",
    "_cgroups",
    "_containment",
    "_facts",
    "_guard",
    "_links",
    "_proxy",
    "_root",
    "_supervised",
)
"""``PosixLauncher``'s fields."""


@final
class PosixLauncher:
    """Starts each child in its own session and process group.

    On Linux each command runs under a small per-call supervisor (``_posix._supervisor``)
    that leads the group, owns the command's whole tree (a child subreaper), ends it
    when the server dies, and, when ``containment`` says so, applies the Landlock
    policy between ``fork`` and ``exec`` of the command (writes only beneath ``root``
    and a private ``TMPDIR``).

    >>> import asyncio
    >>> class Discard:
    ...     def write(self, data: bytes) -> None:
    ...         pass
    >>> async def run() -> bool:
    ...     spec = Spec("/bin/true", (), "/", (), b"", Discard(), Discard())
    ...     process = await PosixLauncher().start(spec)
    ...     await process.wait_exit()
    ...     await process.wait()
    ...     return process.result().successful
    >>> asyncio.run(run())
    True
    """

    __slots__ = _SLOTS

    def __init__(
        self,
        containment: Containment = OFF,
        root: str | None = None,
        cgroups: Cgroups | None = None,
        facts: _plan.StartFacts | None = None,
    ) -> None:
        if not isinstance(containment, Containment):
            raise TypeError("containment must be a Containment")
        if containment.confined and (root is None or not os.path.isabs(root)):
            raise ValueError("a contained launcher needs the absolute worktree root")
        self._containment = containment
        self._root = root
        self._cgroups = cgroups
        self._supervised = _supervisor_available()
        self._bounds = _Bounds()
        if containment.confined and not self._supervised:
            raise ValueError("containment needs the supervisor, which is unavailable here")
        if containment.confined and facts is None and root is not None:
            # Without the CLI's facts: no private caches, the rest as the CLI's.
            facts = _facts.start_facts(
                root, containment.allow_write, bwrap=containment.namespaces.bwrap
            )
        self._facts = facts if containment.confined else None
        self._links = None if self._facts is None else _link_watch(self._facts)
        self._guard = server_guard(self._facts, lambda: tuple(_MOUNT_POINTS))
        proxied = self._facts is not None and containment.proxied  # the call's own network
        self._proxy = Proxy(containment.domains, check_peers=True) if proxied else None

    @property
    def contained(self) -> bool:
        """True when every command runs under the Landlock policy (``workspace`` mode)."""
        return self._containment.contained

    @property
    def containment(self) -> str | None:
        """What the sandbox confines, for the shell's description; ``None`` when off."""
        return describe(self._containment, protected=self._guard.active)

    @property
    def sandbox(self) -> Containment:
        """The policy this launcher applies."""
        return self._containment

    def report(self) -> dict[str, object]:
        """The ``tools`` output's ``sandbox`` object: the policy and the lifetime guarantee."""
        report = self._containment.report()
        report["process_lifetime"] = (
            "commands and their descendants end with their call and within "
            f"{SERVER_DEATH_BOUND_SECONDS:g} s of the server's death"
            if self._supervised
            else "not guaranteed here: a descendant that leaves the process group, or "
            "any command when the server is killed, may outlive its call"
        )
        if self._cgroups is not None and self._supervised:
            report["bounds"] = self._cgroups.report()
        if self._facts is not None:
            report["plan"] = _sample_rules(self._facts, self._containment)
        if self._guard.active:
            report["protected"] = self._guard.report()
        return report

    async def start(self, spec: Spec) -> PosixProcess:
        """Start ``spec``; raise ``LaunchError`` (carrying the process if one was created).

        ``Popen`` runs on the loop thread, as in ``asyncio.create_subprocess_exec``: it
        returns once the child has exec'd or failed, and since nothing awaits before
        the process object exists, a cancellation can never fall between the fork and
        the ownership of the child. With a supervisor, the start then waits (bounded)
        for its word that the command itself started; a cancellation meanwhile joins
        the supervisor (shielded, bounded) before it propagates. Only its ``F`` makes a
        bare ``LaunchError`` (nothing was created); no word within the bound, or its
        report closing without one, is ``LaunchError(process)``: the command may have
        started, and the caller stops and joins it.
        """
        if not self._supervised:
            started = _start_direct(spec)
        else:
            proxy = await open_for_call(self._proxy)  # with namespaces, no --allow-network
            try:
                started = self._spawn_supervisor(spec, proxy)
            except BaseException:
                await close_call(proxy)
                raise
        return await take_over(started, self._bounds)  # the process owns the call

    def _spawn_supervisor(self, spec: Spec, proxy: CallProxy | None = None) -> Started:
        """Spawn the supervisor (in ``bwrap`` with namespaces) for the call's plan;
        ``proxy``: the call's own proxy (its socket bound in, its variables set)."""
        _refuse_changed_start(self._facts, self._links)
        scanner = None if self._facts is None else _hints.RefusalScanner()
        if scanner is not None:
            spec = _scanned(spec, scanner)
        ends = _Ends()
        temporary: str | None = None
        cgroup: CallCgroup | None = None
        plan: _plan.CallPlan | None = None
        taken: tuple[str, ...] = ()
        guard, began = self._guard, False
        try:
            if self._cgroups is not None and self._cgroups.made:
                cgroup = self._cgroups.make()  # the bounds are promised: none, no start
                ends.child.extend(cgroup.procs)
            standard = ends.standard(spec)
            report_read, report_write = ends.pipe(parent_reads=True)
            os.set_blocking(report_read, False)
            wrapper: list[str] = []
            workdir = b""
            lifeline: tuple[int, int] | None = None
            info: tuple[int, int] | None = None
            facts = self._facts
            bwrap = self._containment.namespaces.bwrap if facts is not None else None
            if facts is not None:
                protected, began = guard.begin(), True  # the baseline and its record
                if bwrap is None:
                    temporary = tempfile.mkdtemp(prefix=TMPDIR_PREFIX)
                plan = _plan.plan_call(
                    facts,
                    namespaces=bwrap is not None,
                    allow_network=self._containment.allow_network,
                    environment=spec.environment,
                    temporary=_bwrap.PRIVATE_TMP if temporary is None else temporary,
                    kind=_planned_kind,
                    visible=_KEPT_VISIBLE,
                    proxy=None if proxy is None or bwrap is None else proxy.path,
                    protected=protected if bwrap is not None else (),
                )
            if plan is not None and bwrap is not None:
                # bwrap's status pipe: the supervisor reads, only bwrap's monitor writes.
                lifeline = os.pipe()
                ends.parent.append(lifeline[0])
                ends.child.append(lifeline[1])
                info = ends.pipe(parent_reads=True)  # bwrap's --info-fd: the supervisor's pid
                os.set_blocking(info[0], False)
                taken = _take_mount_points(plan)
                wrapper = plan.bwrap_argv(
                    bwrap, lifeline[1], info[1], self._containment.namespaces.sized
                )
                held = os.fstat(standard.directory)
                workdir = f"{held.st_dev}:{held.st_ino}".encode()
            procs = () if cgroup is None else cgroup.procs
            rlimit = 0 if self._cgroups is None else self._cgroups.rlimit_processes
            if plan is not None:
                told = plan.spec(
                    server=0 if wrapper else os.getpid(),
                    abi=self._containment.abi,
                    layers=self._containment.layers,
                    executable=spec.executable,
                    arguments=spec.arguments,
                    workdir=workdir,
                    lifeline=None if lifeline is None else lifeline[0],
                    temporary=temporary,
                    cgroups=procs,
                    processes=rlimit,
                )
            else:
                told = _plan.uncontained_spec(
                    spec.executable,
                    spec.arguments,
                    spec.environment,
                    allow_network=self._containment.allow_network,
                    cgroups=procs,
                    processes=rlimit,
                )
            memory = told.to_memory_file()
            ends.child.append(memory)
            popen = _popen_supervisor(
                standard,
                (memory, report_write, *(lifeline or ()), *(info or ())[1:], *procs),
                wrapper,
            )
        except Exception:  # noqa: BLE001 - every start failure is one LaunchError, no OS text
            ends.close_parent()
            if temporary is not None:
                _remove_tree(temporary)
            if cgroup is not None:
                cgroup.remove()
            _release_mount_points(taken)
            if began:
                guard.end()
            raise LaunchError from None
        finally:
            ends.close_child()
        with contextlib.suppress(OSError):  # entered by the child: let go
            os.close(standard.directory)
        start = CallStart(
            report=report_read,
            temporary=temporary,
            lifeline=None if lifeline is None else lifeline[0],
            info=None if info is None else info[0],
            cgroup=cgroup,
            proxy=proxy,
            # The plan's mount points released, then the guard puts back what was changed.
            after_join=(lambda: _release_mount_points(taken)) if taken else None,
            hint=None
            if scanner is None or plan is None
            else _hinter(scanner, plan, proxy, self._proxy),
            guard=ender(guard, facts.root)
            if began and guard.active and facts is not None
            else None,
        )
        return Started(
            popen, spec, standard.stdout_read, standard.stderr_read, standard.stdin_write, start
        )


def _start_direct(spec: Spec) -> Started:
    """Without a supervisor (not Linux): the command itself leads its group."""
    argv = [spec.executable, *spec.arguments]
    environment = _environment(spec.environment)
    ends = _Ends()
    try:
        standard = ends.standard(spec)
        # Inline on purpose (see start): fork/exec is short and must not be cut.
        popen = orphans.started(
            lambda: subprocess.Popen(  # noqa: S603 - argv list, no shell; see start
                argv,
                executable=argv[0],
                stdin=standard.stdin,
                stdout=standard.stdout,
                stderr=standard.stderr,
                cwd=standard.cwd,
                env=environment,
                close_fds=True,
                start_new_session=True,
                restore_signals=True,
            ),
            _pid_of,
        )
    except Exception:  # noqa: BLE001 - every start failure is one LaunchError, no OS text
        ends.close_parent()
        raise LaunchError from None
    finally:
        ends.close_child()
    with contextlib.suppress(OSError):  # entered by the child: let go
        os.close(standard.directory)
    return Started(popen, spec, standard.stdout_read, standard.stderr_read, standard.stdin_write)
