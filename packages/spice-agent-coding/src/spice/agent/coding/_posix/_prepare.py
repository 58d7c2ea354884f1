"""What a supervised call's start makes before its leader is spawned (contract 12.5).

``prepare`` is the start's middle step, between the launcher's held workdir and its spawn:
the call's cgroup, the supervisor's report pipe, the guard's baseline, the host ``TMPDIR``
(without namespaces), the plan (``_plan``), with namespaces ``bwrap``'s status pipe, info
document and the mount points of absent protected paths, and the supervisor's spec in its
memory file. It returns them as one ``Prepared``: what the spawn needs (``bwrap``'s argv,
the descriptors) and the ``CallStart`` the process will own. Every descriptor it makes is
appended to the caller's ``parent`` or ``child`` list, which the caller closes; everything
else it made is undone by ``Prepared.undo`` (or by ``prepare`` itself when it fails).

The plan's mount points are counted here, per server: while a call uses one, a later
call's plan counts it as absent (``planned_kind``), so it never binds the mount point
itself; the last call to end removes it if it is still empty.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from spice.agent.process import LaunchError, Spec

from . import _bwrap, _hints, _plan
from ._cgroup import CallCgroup, Cgroups
from ._containment import Containment
from ._guard import Guard, ender
from ._net._proxy import CallProxy, Proxy
from ._process import CallStart, _remove_tree
from ._stage._commit import StagedCall
from ._stage._stage import NO_NAMESPACES, Stage
from ._supervisor import _landlock as landlock

__all__ = [
    "TMPDIR_PREFIX",
    "Prepared",
    "Server",
    "mount_points",
    "planned_kind",
    "prepare",
    "sample_rules",
]

TMPDIR_PREFIX: Final = "spice-call-"
"""Name prefix of the private temporary directory a contained call gets as ``TMPDIR``."""

_MOUNT_POINTS: dict[str, int] = {}
"""Mount points ``bwrap`` makes for absent protected paths, with the calls that use them."""


def mount_points() -> tuple[str, ...]:
    """The mount points live calls use (the guard never looks at them)."""
    return tuple(_MOUNT_POINTS)


def planned_kind(path: str) -> _plan.Kind:
    """``_plan.kind_of``, with this server's live mount points counted as absent."""
    return _plan.Kind.ABSENT if path in _MOUNT_POINTS else _plan.kind_of(path)


def sample_rules(
    facts: _plan.StartFacts, containment: Containment, visible: Sequence[str]
) -> dict[str, object]:
    """The rules of a call's plan as ``tools`` prints them."""
    namespaces = containment.namespaces.made
    sample = _plan.plan_call(
        facts,
        namespaces=namespaces,
        allow_network=containment.allow_network,
        environment=(),
        temporary=_bwrap.PRIVATE_TMP if namespaces else "a fresh directory per call",
        kind=planned_kind,
        visible=visible,
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
    home: str | None = None,
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
            home=home,
            hidden_home=plan.home,
            shown=plan.shown,
        )

    return hint


@final
@dataclass(frozen=True, slots=True)
class Server:
    """What the launcher holds for its calls: its policy, start facts (``None``
    uncontained), cgroups, guard, server-wide proxy, and the places kept visible (read
    when the call starts)."""

    containment: Containment
    facts: _plan.StartFacts | None
    cgroups: Cgroups | None
    guard: Guard
    proxy: Proxy | None
    visible: Sequence[str] = ()


@final
@dataclass(slots=True)
class _Made:
    """What ``prepare`` made that is not a descriptor, undone in reverse when it fails."""

    temporary: str | None = None
    cgroup: CallCgroup | None = None
    taken: tuple[str, ...] = ()
    guard: Guard | None = None
    stage: Stage | None = None

    def undo(self) -> None:
        if self.stage is not None:
            self.stage.remove()
        if self.temporary is not None:
            _remove_tree(self.temporary)
        if self.cgroup is not None:
            self.cgroup.remove()
        _release_mount_points(self.taken)
        if self.guard is not None:
            self.guard.end()


@final
@dataclass(frozen=True, slots=True)
class Prepared:
    """A supervised start, made: ``bwrap``'s argv (empty without namespaces), the
    descriptors the supervisor is handed (its spec file and report pipe first), and the
    ``CallStart`` its process will own."""

    wrapper: tuple[str, ...]
    descriptors: tuple[int, ...]
    start: CallStart
    _made: _Made = field(repr=False)

    @property
    def stage(self) -> Stage | None:
        """The call's stage (``Stage.enter`` runs in the spawned ``bwrap``), or ``None``."""
        return self._made.stage

    def undo(self) -> None:
        """The spawn failed: release what was made (the caller closes the descriptors)."""
        self._made.undo()


JOURNAL_UNUSABLE: Final = "the worktree's journal cannot be written"


def _beneath(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _staged(
    stage: Stage | None, facts: _plan.StartFacts | None, *, dry_run: bool
) -> StagedCall | None:
    """What the join commits for a staged call (``None`` when the call is not staged)."""
    if stage is None or facts is None or facts.journal is None:
        return None
    return StagedCall(stage, facts.protected, facts.journal, dry_run=dry_run)


def _unstaged(facts: _plan.StartFacts, bwrap: str | None) -> str:
    """Why a contained call is not staged (the answer's ``staged_reason``)."""
    if bwrap is None:
        return NO_NAMESPACES
    return facts.unstaged or NO_NAMESPACES


def _pipe(parent: list[int], child: list[int], *, parent_reads: bool) -> tuple[int, int]:
    read, write = os.pipe()
    parent.append(read if parent_reads else write)
    child.append(write if parent_reads else read)
    return read, write


def prepare(
    server: Server,
    spec: Spec,
    directory: int,
    proxy: CallProxy | None,
    scanner: _hints.RefusalScanner | None,
    descriptors: tuple[list[int], list[int]],
    *,
    dry_run: bool = False,
) -> Prepared:
    """Make a supervised call's start (see the module docstring) for ``spec``, whose
    workdir is held open as ``directory``; ``descriptors``: the caller's ``parent`` and
    ``child`` lists; ``dry_run``: the call's stage is listed at the join, not applied.
    Raises whatever failed, after undoing what it made (``LaunchError`` with its reason
    when the worktree's journal cannot be written)."""
    parent, child = descriptors
    made = _Made()
    try:
        return _prepare(
            server, spec, directory, proxy, scanner, parent, child, made, dry_run=dry_run
        )
    except BaseException:
        made.undo()
        raise


def _prepare(
    server: Server,
    spec: Spec,
    directory: int,
    proxy: CallProxy | None,
    scanner: _hints.RefusalScanner | None,
    parent: list[int],
    child: list[int],
    made: _Made,
    *,
    dry_run: bool,
) -> Prepared:
    containment, facts, cgroups = server.containment, server.facts, server.cgroups
    if cgroups is not None and cgroups.made:
        made.cgroup = cgroups.make()  # the bounds are promised: none, no start
        child.extend(made.cgroup.procs)
    report_read, report_write = _pipe(parent, child, parent_reads=True)
    os.set_blocking(report_read, False)
    bwrap = containment.namespaces.bwrap if facts is not None else None
    plan: _plan.CallPlan | None = None
    if facts is not None:
        protected: tuple[str, ...] = ()
        if bwrap is not None and facts.stages is not None:
            # Staged (contract 13.1): the commit judges the worktree's changes.
            if facts.journal is None:
                raise LaunchError(reason=facts.journal_refusal or JOURNAL_UNUSABLE)
            direct = [p.path for p in facts.places[1:] if _beneath(p.path, facts.root)]
            made.stage = Stage.make(facts.stages, facts.root, direct)
            made.stage.opened_ns = facts.journal.opening()
        if made.stage is None or len(facts.places) > 1:
            # Unstaged, or --allow-write places (written directly): the guard's baseline.
            protected = server.guard.begin()  # the baseline and its record
            made.guard = server.guard
            if made.stage is not None:  # the worktree's are judged at the commit
                protected = tuple(p for p in protected if not _beneath(p, facts.root))
        if bwrap is None:
            made.temporary = tempfile.mkdtemp(prefix=TMPDIR_PREFIX)
        plan = _plan.plan_call(
            facts,
            namespaces=bwrap is not None,
            allow_network=containment.allow_network,
            environment=spec.environment,
            temporary=_bwrap.PRIVATE_TMP if made.temporary is None else made.temporary,
            kind=planned_kind,
            visible=server.visible,
            proxy=None if proxy is None or bwrap is None else proxy.path,
            protected=protected if bwrap is not None else (),
            staged=made.stage is not None,
        )
    wrapper: list[str] = []
    workdir = b""
    lifeline: tuple[int, int] | None = None
    info: tuple[int, int] | None = None
    if plan is not None and bwrap is not None:
        # bwrap's status pipe: the supervisor reads, only bwrap's monitor writes.
        lifeline = _pipe(parent, child, parent_reads=True)
        info = _pipe(parent, child, parent_reads=True)  # --info-fd: the supervisor's pid
        os.set_blocking(info[0], False)
        made.taken = _take_mount_points(plan)
        wrapper = plan.bwrap_argv(bwrap, lifeline[1], info[1], containment.namespaces.sized)
        held = os.fstat(directory)
        workdir = f"{held.st_dev}:{held.st_ino}".encode()
        if made.stage is not None:
            workdir = made.stage.workdir_identity(held)
    procs = () if made.cgroup is None else made.cgroup.procs
    rlimit = 0 if cgroups is None else cgroups.rlimit_processes
    if plan is not None:
        told = plan.spec(
            server=0 if wrapper else os.getpid(),
            abi=containment.abi,
            # A stage's overlay refuses to rename a lower directory: the supervisor carries
            # such renames out for the command (``_renames``).
            layers=containment.layers | (landlock.STAGE if made.stage is not None else 0),
            executable=spec.executable,
            arguments=spec.arguments,
            workdir=workdir,
            lifeline=None if lifeline is None else lifeline[0],
            temporary=made.temporary,
            cgroups=procs,
            processes=rlimit,
        )
    else:
        told = _plan.uncontained_spec(
            spec.executable,
            spec.arguments,
            spec.environment,
            allow_network=containment.allow_network,
            cgroups=procs,
            processes=rlimit,
        )
    memory = told.to_memory_file()
    child.append(memory)
    taken = made.taken
    start = CallStart(
        report=report_read,
        temporary=made.temporary,
        lifeline=None if lifeline is None else lifeline[0],
        info=None if info is None else info[0],
        cgroup=made.cgroup,
        proxy=proxy,
        # The plan's mount points released, then the guard puts back what was changed.
        after_join=(lambda: _release_mount_points(taken)) if taken else None,
        hint=None
        if scanner is None or plan is None
        else _hinter(scanner, plan, proxy, server.proxy, None if facts is None else facts.home),
        guard=ender(server.guard, facts.root)
        if made.guard is not None and server.guard.active and facts is not None
        else None,
        stage=_staged(made.stage, facts, dry_run=dry_run),
        unstaged=None if facts is None or made.stage is not None else _unstaged(facts, bwrap),
    )
    handed = (memory, report_write, *(lifeline or ()), *(info or ())[1:], *procs)
    return Prepared(tuple(wrapper), handed, start, made)
