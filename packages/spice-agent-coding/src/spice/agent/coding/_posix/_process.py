"""``PosixProcess``: one started child, composed of four parts, each with its own state.

- ``_Leader`` (``_leader``) watches the group's leader without reaping it and reaps it
  for the join (the one lifecycle ``_State``);
- ``_Report`` is the supervisor's report channel: the command's start and its outcome
  (only the supervisor speaks for the command);
- ``_Streams`` are the standard streams: two output pumps and an input pump;
- ``_namespace.Namespace`` (with namespaces) is bwrap's info document, the supervisor's pidfd
  and the lifeline.

``_launcher.PosixLauncher`` starts the child and hands these parts over; see its docstring
and ``docs/platform.md`` for the design.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from spice.agent.process import LaunchError, Operation, Outcome, ProcessFailure, Sink, Spec
from spice.agent.tools.coding.settling import settle

from . import _orphans as orphans
from ._cgroup import CallCgroup
from ._guard import MAXIMUM_RESTORED
from ._leader import _close_quietly, _Leader, _State
from ._namespace import Namespace
from ._net._proxy import CallProxy, close_call, refused_of
from ._stage._commit import StagedCall, StageResult
from ._stage._commit import commit as commit_stage
from ._supervisor import _main as supervisor
from ._supervisor import _tmpdir as tmpdir

READ_CHUNK_BYTES: Final = 64 * 1024
"""Bytes read from a child's stdout or stderr per readiness event (and handed to the sink)."""

STDIN_CHUNK_BYTES: Final = 64 * 1024
"""Bytes of ``spec.stdin`` written per writability event."""

EXIT_BOUND_SECONDS: Final = 5.0
"""How long the join waits for the leader to exit after SIGKILL to its group."""

DRAIN_BOUND_SECONDS: Final = 1.0
"""How long the join waits for both pipes to reach EOF before it closes them."""

START_BOUND_SECONDS: Final = 10.0
"""How long a start waits for the supervisor to report that the command started (or not)."""

END_BOUND_SECONDS: Final = 2.0
"""How long a force kill or join waits for the supervisor to end its tree before SIGKILL."""

ORPHAN_SWEEP_SECONDS: Final = 1.0
"""How long a join spends ending orphans adopted by the server (``adopt_orphans``)."""


@final
class _OutputPump:
    """Reads one pipe into one sink, a bounded chunk per readiness event."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, sink: Sink) -> None:
        self._loop = loop
        self._fd = fd
        self._sink: Sink | None = sink
        self.started = False
        self.closed = False
        self.finished = asyncio.Event()

    def start(self) -> None:
        os.set_blocking(self._fd, False)
        self._loop.add_reader(self._fd, self._on_readable)
        self.started = True

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, READ_CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        if self._sink is not None:
            try:
                self._sink.write(data)
            except Exception:  # noqa: BLE001 - the Sink's rule: this stream is cut, the pipe drains
                self._sink = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.started:
            self._loop.remove_reader(self._fd)
        _close_quietly(self._fd)
        self.finished.set()


@final
class _InputPump:
    """Writes ``spec.stdin`` to the child, then closes the pipe (EOF)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
        self._loop = loop
        self._fd = fd
        self._data = memoryview(data)
        self._offset = 0
        self._registered = False
        self.closed = False

    def start(self) -> None:
        os.set_blocking(self._fd, False)
        self._loop.add_writer(self._fd, self._on_writable)
        self._registered = True

    def _on_writable(self) -> None:
        chunk = self._data[self._offset : self._offset + STDIN_CHUNK_BYTES]
        try:
            self._offset += os.write(self._fd, chunk)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            # EPIPE: the child does not read its input; nothing more to give it.
            self.close()
            return
        if self._offset >= len(self._data):
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._registered:
            self._loop.remove_writer(self._fd)
        _close_quietly(self._fd)
        self._data = memoryview(b"")


@final
class _Streams:
    """The child's standard streams: two output pumps, an input pump, and their drain."""

    def __init__(self, outputs: tuple[_OutputPump, _OutputPump], stdin: _InputPump | None) -> None:
        self._outputs = outputs
        self._stdin = stdin

    def start(self) -> None:
        for pump in self._outputs:
            pump.start()
        if self._stdin is not None:
            self._stdin.start()

    async def drain(self, bound: float) -> None:
        """Wait (at most ``bound``) for both outputs to reach EOF, then close everything."""
        for pump in self._outputs:
            if not pump.started:
                pump.close()
        try:
            async with asyncio.timeout(bound):
                for pump in self._outputs:
                    await pump.finished.wait()
        except TimeoutError:
            # A descendant outside the group still holds a write end: stop listening.
            pass
        for pump in self._outputs:
            pump.close()
        if self._stdin is not None:
            self._stdin.close()


@final
@dataclass(frozen=True, slots=True)
class _Bounds:
    """The bounds one launcher gives its processes (the module's constants by default)."""

    start: float = START_BOUND_SECONDS
    end: float = END_BOUND_SECONDS
    exit: float = EXIT_BOUND_SECONDS
    drain: float = DRAIN_BOUND_SECONDS


@final
class _Start(enum.Enum):
    """What the supervisor's report says about the command's start."""

    UNKNOWN = "unknown"
    """No word yet."""
    STARTED = "started"
    """``S``: the command was exec'd."""
    FAILED = "failed"
    """``F``: nothing was started."""
    SILENT = "silent"
    """The report closed without a word: the command may have started."""


@final
class _Report:
    """The supervisor's report channel: its start word, the command's outcome, ``D``.

    The command's outcome (``X``/``K``) is the report's own field, never the leader's:
    the supervisor outlives a command whose descendants remain.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd: int | None = fd
        self._reader = False
        self._pending = b""
        self.command_known = asyncio.Event()
        """Set once the supervisor said how the command ended (``command``)."""
        self.start = _Start.UNKNOWN
        self.start_known = asyncio.Event()
        self._closed = asyncio.Event()
        self.command: Outcome | None = None
        self.tree_gone = False
        self.layers = 0

    def listen(self) -> None:
        if self._fd is not None:
            self._loop.add_reader(self._fd, self.read)
            self._reader = True

    def read(self) -> None:
        """Take what the supervisor reported (two bytes a record), without blocking."""
        while self._fd is not None:
            try:
                data = os.read(self._fd, 256)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                break
            self._pending += data
            while len(self._pending) >= 2:
                kind, value = self._pending[0], self._pending[1]
                self._pending = self._pending[2:]
                self._take(kind, value)
        if self.start is _Start.UNKNOWN:
            self._heard(_Start.SILENT)

    def _heard(self, start: _Start) -> None:
        self.start = start
        self.start_known.set()

    def _take(self, kind: int, value: int) -> None:
        if kind == supervisor.REPORT_STARTED and self.start is _Start.UNKNOWN:
            self.layers = value  # the LAYER_* bits the command was started under
            self._heard(_Start.STARTED)
        elif kind == supervisor.REPORT_FAILED and self.start is _Start.UNKNOWN:
            self._heard(_Start.FAILED)
        elif kind == supervisor.REPORT_EXITED:
            self._command_exited(Outcome.exited(value))
        elif kind == supervisor.REPORT_KILLED:
            self._command_exited(Outcome.signaled())
        elif kind == supervisor.REPORT_DONE:
            self.tree_gone = True

    def _command_exited(self, outcome: Outcome) -> None:
        if self.command is None:
            self.command = outcome
            self.command_known.set()

    async def until_closed(self, bound: float) -> None:
        """Wait at most ``bound`` for the supervisor's end of the report to close."""
        self.read()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self._closed.wait()

    def close(self) -> None:
        self._closed.set()
        if self._fd is None:
            return
        if self._reader:
            self._loop.remove_reader(self._fd)
            self._reader = False
        _close_quietly(self._fd)
        self._fd = None


@final
@final
@dataclass(frozen=True, slots=True)
class CallStart:
    """What the launcher prepared for one call, handed to its process whole (contract 12.5).

    The launcher decides and makes everything here before the process exists; from then
    on the process owns it and the join releases it, and nothing goes back the other way.
    ``report``: the supervisor's report pipe (none without a supervisor); ``lifeline`` and
    ``info``: bwrap's status pipe and info document (namespaces); ``temporary``: the call's
    host ``TMPDIR`` (without namespaces); ``cgroup``: the call's cgroup; ``proxy``: the
    call's own proxy; ``after_join``: the launcher's release (the plan's mount points);
    ``hint``: the call's ``sandbox_hint``; ``guard``: the guard's end of this call (run off
    the loop at the join, before the answer: what it put back).
    """

    report: int | None = None
    temporary: str | None = None
    lifeline: int | None = None
    info: int | None = None
    cgroup: CallCgroup | None = None
    proxy: CallProxy | None = None
    after_join: Callable[[], None] | None = None
    hint: Callable[[], str | None] | None = None
    guard: Callable[[], tuple[str, ...]] | None = None
    stage: StagedCall | None = None
    """The call's stage, the policy its commit obeys and the journal (contract 13.1)."""
    unstaged: str | None = None
    """Why a contained call is not staged (its answer says ``staged: false`` and this)."""


UNCONTAINED_START: Final = CallStart()
"""A start with nothing prepared beside the child (no supervisor: not Linux)."""


@final
class PosixProcess:
    """A child started by ``PosixLauncher``; use it only from the loop that started it.

    Four parts, each with its own state: the leader watch (``_Leader``: the one
    lifecycle ``_State``), the supervisor's report (``_Report``: the command's
    start and outcome), the standard streams (``_Streams``) and, with namespaces, the
    namespace addressing (``Namespace``); beside them what the launcher made for the call
    (``_Owned``), which the join releases. The leader stays
    unreaped (a zombie once it exits) until ``wait`` joins it: while it is unreaped
    its pid, and so its process-group id, cannot be reused, which makes every group
    signal safe. Once the join has reaped it, no signal is sent any more.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        popen: subprocess.Popen[bytes],
        streams: _Streams,
        bounds: _Bounds,
        start: CallStart = UNCONTAINED_START,
    ) -> None:
        self._owned = _Owned(start)
        self._proxy = start.proxy
        self._loop = loop
        self._leader = _Leader(loop, popen, self._leader_gone)
        # With namespaces: bwrap's info document, the supervisor's pidfd, the lifeline.
        self._namespace = (
            None
            if start.info is None
            else Namespace(loop, start.info, start.lifeline, self._running_monitor)
        )
        self._report = None if start.report is None else _Report(loop, start.report)
        self._streams, self._bounds = streams, bounds
        self._join_lock = asyncio.Lock()

    @property
    def supervised(self) -> bool:
        """Whether a per-call supervisor leads the group (and owns the command's tree)."""
        return self._report is not None

    @property
    def layers(self) -> int:
        """The ``LAYER_*`` bits (``_supervisor``) the command's start report says were
        applied before ``execve``; 0 before the start is known and without a supervisor."""
        return 0 if self._report is None else self._report.layers

    @property
    def network_refused(self) -> tuple[tuple[str, ...], int]:
        """The proxy's refused ``host:port`` of this call (at most 16) and their count."""
        return refused_of(self._proxy)

    @property
    def stage_fields(self) -> dict[str, object]:
        """After the join: what the call's stage changed and what its commit did (the
        answer's ``staged``, ``changes``, ...); before it, or unstaged, nothing."""
        staged = self._owned.staged
        if staged is not None:
            return staged.fields()
        if self._owned.unstaged is not None:
            return {"staged": False, "staged_reason": self._owned.unstaged}
        return {}

    @property
    def protected_restored(self) -> tuple[tuple[str, ...], int]:
        """After the join: the protected paths put back (at most 16: ``_guard``), and how many."""
        return self._owned.restored[:MAXIMUM_RESTORED], len(self._owned.restored)

    @property
    def cleanup_completed(self) -> bool:
        """After the join: whether what the launcher made for the call is gone (its TMPDIR)."""
        return self._leader.state is _State.JOINED and not self._owned.temporary_left

    @property
    def sandbox_hint(self) -> str | None:
        """After the join: one sentence naming the flag that would allow what the sandbox
        refused, as the command's output shows it (``_posix._hints``), else ``None``."""
        hint = self._owned.hint
        return None if hint is None or self._leader.state is not _State.JOINED else hint()

    def _running_monitor(self) -> int | None:
        """bwrap's monitor's pid while it runs unreaped (its child is the supervisor)."""
        self._leader.observe()
        return self._leader.pid if self._leader.state is _State.RUNNING else None

    def _attach(self) -> None:
        """Start the pumps, the report reader and the leader watch (can fail late)."""
        if self._namespace is not None:
            self._namespace.listen()
        self._streams.start()
        if self._report is not None:
            self._report.listen()
        self._leader.watch()

    def _leader_gone(self) -> None:
        # A supervisor reports before it exits: what it said is read first.
        if self._report is not None:
            self._report.read()

    def _exited(self) -> bool:
        """Whether the command is known to have ended: the supervisor said so, or the
        leader is gone (no second truth beside the parts' own states)."""
        report = self._report
        return (report is not None and report.command is not None) or self._leader.gone.is_set()

    async def _until_started(self) -> _Start:
        """Wait (at most the start bound) for the supervisor's word about the command."""
        report = self._report
        if report is None:
            return _Start.STARTED
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._bounds.start):
                await report.start_known.wait()
        return report.start

    async def _let_the_supervisor_end(self, bound: float) -> None:
        """Have the command's whole tree ended; wait (bounded) until it is.

        Without namespaces: ask the supervisor (the leader) to end its tree, and wait for
        it to exit. With them: SIGKILL to the supervisor, the init of the call's PID
        namespace, by its pidfd; the kernel ends every process in the namespace, and
        bwrap's monitor (the leader) exits only once it is empty. When bwrap has not said
        the supervisor's pid within the bound, the monitor's own death is the request
        (the supervisor's death signal, else its lifeline). Either way the supervisor's
        report is then read to its end.
        """
        report = self._report
        if report is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        self._leader.observe()
        namespace = self._namespace
        if self._leader.state is _State.RUNNING:
            if not (
                namespace is not None
                and await namespace.until_known(bound)
                and namespace.signal(signal.SIGKILL)
            ):
                # It may be stopped: CONT after the request.
                self._leader.signal_leader((supervisor.END_SIGNAL, signal.SIGCONT))
            await self._leader.until_gone(max(0.0, deadline - loop.time()))
        await report.until_closed(max(0.0, deadline - loop.time()))

    # -- the Process protocol ---------------------------------------------------------

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the id of its process group and session."""
        return self._leader.pid

    def done(self) -> bool:
        """True once the process has exited and its outcome is known."""
        if not self._exited():
            if self._report is not None:
                self._report.read()
            self._leader.observe()
        return self._exited()

    async def wait_exit(self) -> None:
        """Wait until the command has exited (its descendants may still run)."""
        if self._exited():
            return
        events = [self._leader.gone]
        if self._report is not None:
            events.append(self._report.command_known)
        waiters = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def result(self) -> Outcome:
        """The outcome; raises ``ProcessFailure(RESULT)`` before the process is done."""
        if not self.done():
            raise ProcessFailure(Operation.RESULT, retryable=True)
        command = None if self._report is None else self._report.command
        outcome = command if command is not None else self._leader.outcome
        if command is None and self._namespace is not None and outcome is not None:
            # Only the supervisor speaks for the command: bwrap's monitor exits 128+N
            # when the namespace's init was killed, and a command whose supervisor said
            # nothing was ended with it (review C3).
            outcome = Outcome.signaled()
        if outcome is None:
            raise ProcessFailure(Operation.RESULT, retryable=True)
        return outcome

    async def request_stop(self) -> None:
        """SIGTERM to the whole group (a no-op once the join has finished).

        With namespaces the group is bwrap's monitor alone: the supervisor inside is told
        instead, and passes the stop on to the command.
        """
        self._leader.observe()
        if self._namespace is None or not self._namespace.signal(signal.SIGTERM):
            self._leader.signal_group(signal.SIGTERM, Operation.REQUEST_STOP)

    async def force_kill(self) -> None:
        """SIGKILL to the whole tree (a no-op once the join has finished).

        A supervisor is first asked to kill every descendant, including those that left
        the group, and given ``END_BOUND_SECONDS``; then the group gets SIGKILL anyway.
        """
        await self._let_the_supervisor_end(self._bounds.end)
        self._leader.signal_group(signal.SIGKILL, Operation.FORCE_KILL)

    async def wait(self) -> None:
        """The join: group killed, leader reaped, pipes drained or closed, all bounded.

        Idempotent; concurrent calls wait for the first. ``ProcessFailure(WAIT,
        retryable=True)`` when the leader does not exit within ``EXIT_BOUND_SECONDS``
        of SIGKILL (a retry starts over); ``retryable=False`` when the leader was reaped
        by someone else, so what is left of its group can no longer be killed safely.
        """
        async with self._join_lock:
            leader = self._leader
            if leader.state is _State.JOINED:
                return
            await close_call(self._proxy)  # every tunnel of the call ends with it
            if leader.pinned:
                await self._end_group()
            if not await self._owned.end_cgroup(self._bounds.end):
                raise ProcessFailure(Operation.WAIT, retryable=True)
            report = self._report
            if report is not None:
                report.read()
                # With namespaces the leader is bwrap's monitor: a supervisor that outlived
                # it (ended through its monitor, before bwrap said its pid) came to a
                # server that adopts orphans: swept and reaped here.
                adopted = self._namespace is not None or not report.tree_gone
                swept = await orphans.sweep(ORPHAN_SWEEP_SECONDS) if adopted else True
                if not report.tree_gone and not swept:
                    # The supervisor died or ran out of time before it ended its tree, and
                    # what came here is not all gone: not clean, the join is tried again.
                    raise ProcessFailure(Operation.WAIT, retryable=True)
            await self._owned.release()
            await self._streams.drain(self._bounds.drain)
            if report is not None:
                report.close()
            if self._namespace is not None:
                self._namespace.close()
            if leader.state is _State.LOST:
                raise ProcessFailure(Operation.WAIT, retryable=False)
            leader.joined()

    async def _end_group(self) -> None:
        """Ask the supervisor to end its tree, SIGKILL the group, reap the leader (bounded)."""
        leader = self._leader
        bounds = self._bounds
        # The leader's exit is bounded by the exit bound in each phase of the join.
        await self._let_the_supervisor_end(min(bounds.end, bounds.exit))
        if not leader.pinned:
            return  # reaped while watched (no waitid), or lost: the join raises later
        leader.signal_group(signal.SIGKILL, Operation.WAIT)
        if not await leader.until_gone(bounds.exit):
            raise ProcessFailure(Operation.WAIT, retryable=True)
        leader.reap()


@final
class _Owned:
    """What the launcher made for one call and the join releases: the call's cgroup, its
    private ``TMPDIR`` (without namespaces), and the launcher's own release (the plan's
    mount points and the files a call must not leave); also the call's ``sandbox_hint``."""

    def __init__(self, start: CallStart) -> None:
        self.temporary = start.temporary
        self.cgroup = start.cgroup
        self.temporary_left = False
        self.after_join = start.after_join
        self.hint = start.hint
        self.guard = start.guard
        """The guard's end of this call (``_guard.Guard.end``): run off the loop at the
        join, after the tree is gone and before the answer; what it put back is kept."""
        self.restored: tuple[str, ...] = ()
        self.stage = start.stage
        """The call's stage, committed off the loop at the join once the tree is gone."""
        self.staged: StageResult | None = None
        self.unstaged = start.unstaged

    async def end_cgroup(self, bound: float) -> bool:
        """End every process left in the call's cgroup, then remove it (bounded, off the
        loop); ``False`` (not clean: the join is tried again) when one is still there."""
        cgroup = self.cgroup
        if cgroup is None:
            return True
        if not await asyncio.to_thread(cgroup.end, bound):
            return False
        await asyncio.to_thread(cgroup.remove, bound)
        self.cgroup = None
        return True

    async def release(self) -> None:
        """Remove the ``TMPDIR`` (the tree is gone by now; a failure is noted), then run
        the launcher's release, once."""
        if self.temporary is not None:
            removed = await asyncio.to_thread(_remove_tree, self.temporary)
            self.temporary_left = not removed
            self.temporary = None
        after, self.after_join = self.after_join, None
        if after is not None:
            after()
        guard, self.guard = self.guard, None
        if guard is not None:
            self.restored = await asyncio.to_thread(guard)
        stage, self.stage = self.stage, None
        if stage is not None:
            self.staged = await asyncio.to_thread(commit_stage, stage)


def _remove_tree(path: str) -> bool:
    """Remove a call's ``TMPDIR`` whatever its command did to it; whether it is gone."""
    return tmpdir.remove_tree(path)


CANCELLED_START_SECONDS: Final = (
    END_BOUND_SECONDS + EXIT_BOUND_SECONDS + 2 * (DRAIN_BOUND_SECONDS + ORPHAN_SWEEP_SECONDS)
)
"""How long a start cancelled while waiting for its word waits for the join of what it made.

The join is bounded by its own phases (end, exit, sweep, drain); this bound is theirs,
with room for the TMPDIR's removal.
"""


def _attach(process: PosixProcess) -> None:
    """The late part of a start (a seam the tests replace to cause a partial start)."""
    process._attach()


def attach(process: PosixProcess) -> None:
    """Attach the process's watches; ``LaunchError(process)`` when that fails (the child
    exists: the caller stops and joins it)."""
    try:
        _attach(process)
    except Exception:  # noqa: BLE001 - the child exists: hand it over with the error
        raise LaunchError(process) from None


@final
@dataclass(frozen=True, slots=True)
class Started:
    """A child the launcher has just started: its ``Popen``, the spec whose sinks and input
    its streams serve (the launcher's, whose sinks may also feed the call's hint), the
    parent's ends of those streams (``stdin`` ``None`` without input) and what was
    prepared for it."""

    popen: subprocess.Popen[bytes]
    spec: Spec
    stdout: int
    stderr: int
    stdin: int | None
    start: CallStart = UNCONTAINED_START


async def take_over(started: Started, bounds: _Bounds) -> PosixProcess:
    """A start's last step, owned here: the process made from ``started``, its watches
    attached, then (bounded) the supervisor's word that
    the command started; the process, which owns the call from here on.

    The call's proxy learns the leader before the loop runs again (no peer of the call
    waits unjudged). A cancellation while waiting joins the process (held back, bounded)
    before it propagates. Only the supervisor's ``F`` makes a bare ``LaunchError``
    (nothing was created); no word within the bound, or its report closing without one,
    is ``LaunchError(process)``: the command may have started (its word can come just
    after the bound), and the caller stops and joins it. Without a supervisor the start
    is known at once.
    """
    popen, spec, start = started.popen, started.spec, started.start
    if start.proxy is not None:
        start.proxy.leader = popen.pid
    loop = asyncio.get_running_loop()
    outputs = (
        _OutputPump(loop, started.stdout, spec.stdout),
        _OutputPump(loop, started.stderr, spec.stderr),
    )
    stdin = None if started.stdin is None else _InputPump(loop, started.stdin, spec.stdin)
    process = PosixProcess(loop, popen, _Streams(outputs, stdin), bounds, start)
    attach(process)
    try:
        word = await process._until_started()
    except asyncio.CancelledError:
        await _join_while_cancelled(process, CANCELLED_START_SECONDS)
        raise
    if word is _Start.STARTED:
        return process
    if word is not _Start.FAILED:
        raise LaunchError(process) from None
    try:
        await process.wait()
    except ProcessFailure:
        raise LaunchError(process) from None
    raise LaunchError from None


_JOINS: set[asyncio.Task[None]] = set()
"""Joins of cancelled starts still running past their settle bound (kept referenced)."""


def _joined(task: asyncio.Task[None]) -> None:
    _JOINS.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a failed join of a cancelled start has no caller left


async def _join_while_cancelled(process: PosixProcess, bound: float) -> None:
    """Join ``process`` while the caller is being cancelled: held back, at most ``bound``.

    ``settle`` holds further cancellations back until the join is done or the bound
    passed (the join is bounded itself); the caller re-raises its first cancellation.
    A join still running then goes on, referenced here.
    """
    joining = asyncio.get_running_loop().create_task(process.wait())
    _JOINS.add(joining)
    joining.add_done_callback(_joined)
    await settle(joining, bound)
