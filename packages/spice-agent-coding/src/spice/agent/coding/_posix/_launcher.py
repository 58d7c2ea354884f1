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
- On Linux the leader is a per-call supervisor (``_posix._supervisor._main``, run as
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

import contextlib
import marshal
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from spice.agent.process import LaunchError, Spec
from spice.agent.tools.coding import ProtectedPaths

from . import _bwrap, _facts, _hints, _plan
from . import _orphans as orphans
from ._cgroup import Cgroups
from ._containment import OFF, Containment, describe
from ._guard import Guard, server_guard
from ._leader import _close_quietly
from ._net._proxy import CallProxy, Proxy, close_call, open_for_call
from ._prepare import Prepared, Server, mount_points, prepare, sample_rules
from ._process import (
    DRAIN_BOUND_SECONDS,
    END_BOUND_SECONDS,
    EXIT_BOUND_SECONDS,
    ORPHAN_SWEEP_SECONDS,
    UNCONTAINED_START,
    PosixProcess,
    Started,
    _Bounds,
    take_over,
)
from ._stage._stage import stage_report
from ._supervisor import _main as supervisor

SERVER_DEATH_BOUND_SECONDS: Final = 2.0
"""When the server dies, even by SIGKILL, every command and descendant ends within this."""

CANCELLED_START_SECONDS: Final = (
    END_BOUND_SECONDS + EXIT_BOUND_SECONDS + 2 * (DRAIN_BOUND_SECONDS + ORPHAN_SWEEP_SECONDS)
)
"""How long a start cancelled while waiting for its word waits for the join of what it made.

The join is bounded by its own phases (end, exit, sweep, drain); this bound is theirs,
with room for the TMPDIR's removal.
"""

_HERE: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervisor")
SUPERVISOR_MODULES: Final = ("_seccomp", "_landlock", "_renames", "_tmpdir", "_bridge", "_main")
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

DRY_RUN_UNSTAGED: Final = (
    "dry_run needs a staged worktree, and this server runs commands unstaged (see tools)"
)

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


_NO_GUARD: Final = server_guard(None, tuple)
"""The guard of an uncontained launcher: it guards nothing (and holds nothing)."""

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

    On Linux each command runs under a small per-call supervisor (``_posix._supervisor._main``)
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
        *,
        facts: _plan.StartFacts | None = None,
        links: _facts.LinkWatch | None = None,
        guard: Guard | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        """Hold what it is given (nothing is read or scanned here): a contained launcher's
        facts, link watch, guard and proxy come from ``PosixLauncher.build``."""
        if not isinstance(containment, Containment):
            raise TypeError("containment must be a Containment")
        if containment.confined and (root is None or not os.path.isabs(root)):
            raise ValueError("a contained launcher needs the absolute worktree root")
        self._supervised = _supervisor_available()
        if containment.confined and not self._supervised:
            raise ValueError("containment needs the supervisor, which is unavailable here")
        if containment.confined and (facts is None or guard is None):
            raise ValueError("a contained launcher needs its facts and guard (build it)")
        self._containment = containment
        self._root = root
        self._cgroups = cgroups
        self._bounds = _Bounds()
        self._facts = facts if containment.confined else None
        self._links = links if containment.confined else None
        self._guard = guard if guard is not None and containment.confined else _NO_GUARD
        self._proxy = proxy if containment.confined else None

    @classmethod
    def build(
        cls,
        containment: Containment = OFF,
        root: str | None = None,
        cgroups: Cgroups | None = None,
        facts: _plan.StartFacts | None = None,
        *,
        deny_read: Sequence[str] = (),
        allow_read: Sequence[str] = (),
        cache: bool = False,
        environ: Mapping[str, str] | None = None,
        protected: ProtectedPaths | None = None,
        ca_files: Sequence[str] = (),
    ) -> PosixLauncher:
        """The one builder of a launcher: for a contained one, its start facts (unless
        given; the keywords are ``_facts.start_facts``'s: without ``cache`` no private cache),
        the watch of the server's linked modules (a walk of the writable places), the
        process's guard of the root (its repair of a dead server's record and its scan)
        and the calls' proxy. Blocking (a large worktree takes its time): a running
        server calls it off the event loop (``_settings._reload``).

        Raises what ``start_facts`` raises (``OSError``, ``CacheUnavailable``).
        """
        if not isinstance(containment, Containment):
            raise TypeError("containment must be a Containment")
        if not containment.confined or root is None or not _supervisor_available():
            return cls(containment, root, cgroups)  # the constructor says what is wrong
        if facts is None:
            facts = _facts.start_facts(
                root,
                containment.allow_write,
                bwrap=containment.namespaces.bwrap,
                deny_read=deny_read,
                allow_read=allow_read,
                cache=cache,
                environ=environ,
                protected=protected,
                ca_files=ca_files,
            )
        proxy = Proxy(containment.domains, check_peers=True) if containment.proxied else None
        return cls(
            containment,
            root,
            cgroups,
            facts=facts,
            links=_link_watch(facts),
            guard=server_guard(facts, mount_points),
            proxy=proxy,  # the call's own network
        )

    @property
    def contained(self) -> bool:
        """True when every command runs under the Landlock policy (``workspace`` mode)."""
        return self._containment.contained

    @property
    def containment(self) -> str | None:
        """What the sandbox confines, for the shell's description; ``None`` when off."""
        staged = self._facts is not None and self._facts.stages is not None
        return describe(self._containment, protected=self._guard.active, staged=staged)

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
            report["plan"] = sample_rules(self._facts, self._containment, _KEPT_VISIBLE)
        if self._guard.active:
            report["protected"] = self._guard.report()
        if self._facts is not None:
            report["stage"] = stage_report(self._facts.stages, self._facts.unstaged)
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
        return await self._start(spec, dry_run=False)

    @property
    def staged(self) -> bool:
        """Whether every contained call writes the worktree through a stage (13.1)."""
        return self._facts is not None and self._facts.stages is not None

    async def start_dry_run(self, spec: Spec) -> PosixProcess:
        """``start`` on a stage whose changes the join lists and never applies (contract
        13.2's ``dry_run``); ``LaunchError`` with the reason where calls are not staged."""
        if not self.staged:
            raise LaunchError(reason=DRY_RUN_UNSTAGED)
        return await self._start(spec, dry_run=True)

    async def _start(self, spec: Spec, *, dry_run: bool) -> PosixProcess:
        proxy = await open_for_call(self._proxy)  # with namespaces, no --allow-network
        try:
            started = self._spawn(spec, proxy, dry_run=dry_run)
        except BaseException:
            await close_call(proxy)
            raise
        return await take_over(started, self._bounds)  # the process owns the call

    def _spawn(self, spec: Spec, proxy: CallProxy | None, *, dry_run: bool = False) -> Started:
        """Spawn the call's leader: the per-call supervisor for what ``_prepare`` made (in
        ``bwrap`` with namespaces), or without a supervisor (not Linux) the command itself;
        ``proxy``: the call's own proxy (its socket bound in, its variables set)."""
        _refuse_changed_start(self._facts, self._links)
        scanner = None if self._facts is None else _hints.RefusalScanner()
        if scanner is not None:
            spec = _scanned(spec, scanner)
        own = None if self._supervised else _environment(spec.environment)
        ends = _Ends()
        prepared: Prepared | None = None
        handed: tuple[int, ...] = ()
        try:
            standard = ends.standard(spec)
            if own is not None:  # the command leads its group
                argv, environment = [spec.executable, *spec.arguments], own
            else:
                server = Server(
                    self._containment,
                    self._facts,
                    self._cgroups,
                    self._guard,
                    self._proxy,
                    _KEPT_VISIBLE,
                )
                prepared = prepare(
                    server,
                    spec,
                    standard.directory,
                    proxy,
                    scanner,
                    (ends.parent, ends.child),
                    dry_run=dry_run,
                )
                # How the supervisor runs: isolated, from the sealed code, reading its spec
                # from the first descriptor handed and reporting on the second.
                code = _code_fd()
                spec_fd, report_fd = prepared.descriptors[:2]
                argv = [
                    *prepared.wrapper,
                    INTERPRETER,
                    *_SUPERVISOR_FLAGS,
                    str(code),
                    str(spec_fd),
                    str(report_fd),
                ]
                environment, handed = _SUPERVISOR_ENVIRONMENT, (code, *prepared.descriptors)
            stage = None if prepared is None else prepared.stage
            popen = orphans.spawn(
                argv,
                streams=(standard.stdin, standard.stdout, standard.stderr),
                cwd=standard.cwd,
                env=environment,
                pass_fds=handed,
                enter=None if stage is None else stage.enter,
            )
        except Exception as error:  # noqa: BLE001 - every start failure is one LaunchError
            ends.close_parent()
            if prepared is not None:
                prepared.undo()
            # The launcher's own refusal keeps its reason (a fixed line); no OS text.
            reason = error.reason if isinstance(error, LaunchError) else None
            raise LaunchError(reason=reason) from None
        finally:
            ends.close_child()
        with contextlib.suppress(OSError):  # entered by the child: let go
            os.close(standard.directory)
        return Started(
            popen,
            spec,
            standard.stdout_read,
            standard.stderr_read,
            standard.stdin_write,
            UNCONTAINED_START if prepared is None else prepared.start,
        )
