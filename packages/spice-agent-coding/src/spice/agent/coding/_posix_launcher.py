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
- On Linux the leader is a per-call supervisor (``_posix_sandbox``, run as
  ``python -I -S``) and the command is its child in the same group: it owns the whole
  tree (a child subreaper), ends it on the join's request, on the force kill and when
  the server dies, applies the Landlock policy of ``_containment`` before ``exec``, and
  reports on a pipe whether the command started and how it ended. ``force_kill`` and
  the join ask it to end the tree first (``END_BOUND_SECONDS``), then SIGKILL the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, final

from spice.agent.process import LaunchError, Operation, Outcome, ProcessFailure, Sink, Spec

from . import _posix_sandbox as sandbox
from ._containment import OFF, Containment

READ_CHUNK_BYTES: Final = 64 * 1024
"""Bytes read from a child's stdout or stderr per readiness event (and handed to the sink)."""

STDIN_CHUNK_BYTES: Final = 64 * 1024
"""Bytes of ``spec.stdin`` written per writability event."""

EXIT_BOUND_SECONDS: Final = 5.0
"""How long the join waits for the leader to exit after SIGKILL to its group."""

DRAIN_BOUND_SECONDS: Final = 1.0
"""How long the join waits for both pipes to reach EOF before it closes them."""

EXIT_POLL_SECONDS: Final = 0.02
"""Exit polling interval where the kernel has no pidfd (macOS, Linux < 5.3)."""

START_BOUND_SECONDS: Final = 10.0
"""How long a start waits for the supervisor to report that the command started (or not)."""

END_BOUND_SECONDS: Final = 2.0
"""How long a force kill or join waits for the supervisor to end its tree before SIGKILL."""

ORPHAN_SWEEP_SECONDS: Final = 1.0
"""How long a join spends ending orphans adopted by the server (``adopt_orphans``)."""

SERVER_DEATH_BOUND_SECONDS: Final = 2.0
"""When the server dies, even by SIGKILL, every command and descendant ends within this."""

TMPDIR_PREFIX: Final = "spice-call-"
"""Name prefix of the private temporary directory a contained call gets as ``TMPDIR``."""

SUPERVISOR_PATH: Final = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "_posix_sandbox.py"
)
_SUPERVISOR_FLAGS: tuple[str, ...] = ("-I", "-S")
"""Isolated (no PYTHON* variables, no user site) and without ``site``: fast and hermetic."""

_SUPERVISOR_ENVIRONMENT: dict[str, str] = {}
"""The supervisor's own environment (the command's comes through the spec file)."""

_ORPHAN_POLL_SECONDS: Final = 0.01
_TEMPORARY_VARIABLES: Final = ("TMPDIR", "TMP", "TEMP")

_LEADERS: set[int] = set()
"""Pids of leaders this process started and has not reaped (never swept as orphans)."""

_adopting = False


def adopt_orphans() -> bool:
    """Make this process the subreaper of last resort for every command's tree.

    For a process that starts no children but through ``PosixLauncher`` (the CLI's
    ``serve`` and ``call``): descendants orphaned by a supervisor that was killed come
    back here, and the join of a call whose supervisor did not end its tree cleanly
    ends every child of this process that is not a live leader. Returns whether the
    kernel made this process a subreaper (Linux).
    """
    global _adopting  # noqa: PLW0603 - a process-wide choice made once at start
    _adopting = sandbox.become_subreaper()
    return _adopting


def _supervisor_available() -> bool:
    """Whether commands run under the per-call supervisor (Linux with an interpreter)."""
    return (
        sys.platform.startswith("linux")
        and bool(sys.executable)
        and hasattr(os, "memfd_create")
        and os.path.isfile(SUPERVISOR_PATH)
    )


def _server_children() -> list[int]:
    """Direct children of this (possibly threaded) process."""
    me = os.getpid()
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return sandbox.children(me)
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children", "rb") as file:
                found.extend(int(field) for field in file.read().split())
        except FileNotFoundError:
            return sandbox.children(me)
        except OSError:
            continue
    return found


async def _sweep_orphans() -> None:
    """End (SIGKILL) and reap every child of ours that is not a live leader (bounded)."""
    if not _adopting:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ORPHAN_SWEEP_SECONDS
    while True:
        orphans = [pid for pid in _server_children() if pid not in _LEADERS]
        if not orphans:
            return
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
        if loop.time() >= deadline:
            return
        await asyncio.sleep(_ORPHAN_POLL_SECONDS)


# ``os.waitid`` is missing on macOS (CPython leaves it out there), so these are looked
# up defensively; they are only used where ``waitid`` exists.
# (``WNOHANG`` too, so that the module imports on Windows, which never runs it.)
_PEEK_FLAGS: Final = (
    getattr(os, "WEXITED", 0) | getattr(os, "WNOHANG", 0) | getattr(os, "WNOWAIT", 0)
)
_REAP_FLAGS: Final = getattr(os, "WEXITED", 0) | getattr(os, "WNOHANG", 0)


def _has_waitid() -> bool:
    """Whether exits can be observed without reaping (``waitid`` with ``WNOWAIT``)."""
    return hasattr(os, "waitid")


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` where the platform has one, else ``None`` (then we poll)."""
    pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    if pidfd_open is None or not hasattr(os, "P_PIDFD"):
        return None
    try:
        return pidfd_open(pid)
    except OSError:
        # ENOSYS (old kernel, seccomp), EMFILE: polling works without it.
        return None


def _outcome_of_waitid(status: os.waitid_result) -> Outcome:
    if status.si_code == os.CLD_EXITED:
        return Outcome.exited(status.si_status)
    if status.si_code in {os.CLD_KILLED, os.CLD_DUMPED}:
        return Outcome.signaled()
    return Outcome.unknown()


def _outcome_of_wait_status(status: int) -> Outcome:
    if os.WIFEXITED(status):
        return Outcome.exited(os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status):
        return Outcome.signaled()
    return Outcome.unknown()


_O_PATH: Final = getattr(os, "O_PATH", 0)
# O_PATH (Linux) needs only search permission, like the kernel's own path walk.
# POSIX-only flags with a default: the module imports on Windows, which never runs it.
_STEP_FLAGS: Final = (
    getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | (_O_PATH or os.O_RDONLY)
)
_FD_DIRECTORY: Final = "/proc/self/fd"
_ENTER_BY_DESCRIPTOR: Final = sys.platform.startswith("linux") and os.path.isdir(_FD_DIRECTORY)


def _open_no_follow(path: str) -> int:
    """Open the absolute directory ``path`` from ``/``, one component at a time, no symlink.

    Raises ``OSError`` when a component is a symlink (``ELOOP``), not a directory or
    missing; the caller turns that into a ``LaunchError`` with no OS text.
    """
    fd = os.open("/", _STEP_FLAGS)
    try:
        for name in path.split("/"):
            if name:
                step = os.open(name, _STEP_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = step
    except BaseException:
        _close_quietly(fd)
        raise
    return fd


def _entry(directory: int, path: str) -> str:
    """The ``cwd`` the child enters: the held descriptor on Linux, else the checked path."""
    return f"{_FD_DIRECTORY}/{directory}" if _ENTER_BY_DESCRIPTOR else path


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        # Linux releases the descriptor even when close reports an error.
        return


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
            except Exception:  # noqa: BLE001 - a failing sink is dropped; the pipe keeps draining
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
class PosixProcess:
    """A child started by ``PosixLauncher``; use it only from the loop that started it.

    The leader stays unreaped (a zombie once it exits) until ``wait`` joins it: while it
    is unreaped its pid, and so its process-group id, cannot be reused, which makes
    every group signal safe. Once the join has reaped it, no signal is sent any more.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        popen: subprocess.Popen[bytes],
        outputs: tuple[_OutputPump, _OutputPump],
        stdin: _InputPump | None,
        report: int | None = None,
        temporary: str | None = None,
    ) -> None:
        self._loop = loop
        # Kept alive on purpose: a collected Popen with no return code would be polled
        # (and so reaped) by subprocess's own clean-up behind our back.
        self._popen = popen
        self._pid = popen.pid
        self._outputs = outputs
        self._stdin = stdin
        self._pidfd: int | None = None
        self._watching = False
        self._poll: asyncio.TimerHandle | None = None
        self._outcome: Outcome | None = None
        self._exited = asyncio.Event()
        self._pinned = True
        self._reaped = False
        self._joined = False
        self._lost = False
        self._join_lock = asyncio.Lock()
        # The supervisor (when there is one) is the leader; the command is its child.
        self._supervisor = report is not None
        self._report = report
        self._report_bytes = b""
        self._report_watched = False
        self._started: bool | None = None
        self._start_known = asyncio.Event()
        self._clean = False
        self._leader_gone = asyncio.Event()
        self._temporary = temporary

    @property
    def supervised(self) -> bool:
        """Whether a per-call supervisor leads the group (and owns the command's tree)."""
        return self._supervisor

    def _attach(self) -> None:
        """Start the pumps and the exit watch (the part of a start that can fail late)."""
        for pump in self._outputs:
            pump.start()
        if self._stdin is not None:
            self._stdin.start()
        if self._report is not None:
            # The exit watch starts once the supervisor says the command started
            # (``_watch_exit``): until then its report, or its EOF, says all.
            self._loop.add_reader(self._report, self._read_report)
            self._report_watched = True
            return
        self._watch_exit()

    def _watch_exit(self) -> None:
        self._pidfd = _open_pidfd(self._pid)
        self._watch()

    # -- the supervisor's report ----------------------------------------------------------

    def _read_report(self) -> None:
        """Take what the supervisor reported (two bytes a record), without blocking."""
        while self._report is not None:
            try:
                data = os.read(self._report, 256)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._close_report()
                break
            self._report_bytes += data
            while len(self._report_bytes) >= 2:
                kind, value = self._report_bytes[0], self._report_bytes[1]
                self._report_bytes = self._report_bytes[2:]
                self._take(kind, value)
        if self._started is None:
            # The supervisor closed its report without a word: it could not start.
            self._started = False
        self._start_known.set()

    def _take(self, kind: int, value: int) -> None:
        if kind == sandbox.REPORT_STARTED and self._started is None:
            self._started = True
            self._start_known.set()
        elif kind == sandbox.REPORT_FAILED and self._started is None:
            self._started = False
            self._start_known.set()
        elif kind == sandbox.REPORT_EXITED:
            self._record_command(Outcome.exited(value))
        elif kind == sandbox.REPORT_KILLED:
            self._record_command(Outcome.signaled())
        elif kind == sandbox.REPORT_DONE:
            self._clean = True

    def _record_command(self, outcome: Outcome) -> None:
        if self._outcome is None:
            self._outcome = outcome
        self._exited.set()

    def _close_report(self) -> None:
        if self._report is None:
            return
        if self._report_watched:
            self._loop.remove_reader(self._report)
            self._report_watched = False
        _close_quietly(self._report)
        self._report = None

    async def _until_started(self) -> bool:
        """Wait (bounded) for the supervisor's word; ``False`` if the command did not start."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_BOUND_SECONDS):
                await self._start_known.wait()
        return self._started is True

    def _ask_to_end(self) -> None:
        """Ask the supervisor to kill its whole tree and exit (it may be stopped: CONT)."""
        for number in (sandbox.END_SIGNAL, signal.SIGCONT):
            with contextlib.suppress(OSError):
                os.kill(self._pid, number)

    async def _let_the_supervisor_end(self, bound: float = END_BOUND_SECONDS) -> None:
        """While the supervisor pins the group: ask it to end its tree, wait (bounded)."""
        if not self._supervisor or self._reaped or self._leader_gone.is_set():
            return
        self._observe()
        if not self._pinned or self._leader_gone.is_set():
            return
        self._ask_to_end()
        self._watch()
        if bound <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self._leader_gone.wait()

    # -- exit observation -------------------------------------------------------------

    def _watch(self) -> None:
        if self._watching or self._outcome is not None:
            return
        self._watching = True
        if self._pidfd is not None:
            try:
                self._loop.add_reader(self._pidfd, self._observe)
            except Exception:  # noqa: BLE001 - any registration failure falls back to polling
                self._close_pidfd()
            else:
                return
        self._poll = self._loop.call_later(EXIT_POLL_SECONDS, self._poll_exit)

    def _poll_exit(self) -> None:
        self._poll = None
        self._observe()
        if self._outcome is None:
            self._poll = self._loop.call_later(EXIT_POLL_SECONDS, self._poll_exit)

    def _unwatch(self) -> None:
        if not self._watching:
            return
        self._watching = False
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            _close_quietly(self._pidfd)
            self._pidfd = None

    def _waitid(self, flags: int) -> os.waitid_result | None:
        if self._pidfd is not None:
            return os.waitid(os.P_PIDFD, self._pidfd, flags)
        return os.waitid(os.P_PID, self._pid, flags)

    def _observe(self) -> None:
        """Look at the leader without reaping it; record its outcome once it has exited."""
        self._read_report()
        if self._reaped or not self._pinned:
            return
        if self._pidfd is None and not _has_waitid():
            self._observe_by_reaping()
            return
        try:
            status = self._waitid(_PEEK_FLAGS)
        except ChildProcessError:
            # Someone else reaped our child (a SIGCHLD handler, a waitpid(-1) watcher,
            # SIGCHLD ignored): its pid no longer pins the group id.
            self._pinned = False
            self._record(Outcome.unknown())
            return
        except OSError:
            if self._pidfd is not None:
                # A kernel with pidfd_open but without waitid(P_PIDFD) (Linux 5.3):
                # the pid still pins the group (we have not reaped), so poll by pid.
                self._unwatch()
                self._close_pidfd()
                self._watch()
            return
        if status is not None and status.si_pid != 0:
            self._record(_outcome_of_waitid(status))

    def _observe_by_reaping(self) -> None:
        """Without ``waitid`` (macOS) an exit can only be seen by reaping the leader.

        Right after the reap, what is left of the group is killed: while any member
        lives, POSIX keeps the group id from being reused, so this one signal is safe;
        later it might not be, so the join's kill happens here, once.
        """
        try:
            pid, status = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            self._pinned = False
            self._record(Outcome.unknown())
            return
        except OSError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):  # ESRCH: nothing is left of the group
            os.killpg(self._pid, signal.SIGKILL)
        self._record(_outcome_of_wait_status(status))
        self._mark_reaped()

    def _record(self, outcome: Outcome) -> None:
        """The leader has exited (a supervisor reports before it exits: read that first)."""
        self._read_report()
        if self._outcome is None:
            self._outcome = outcome
        self._unwatch()
        self._leader_gone.set()
        self._exited.set()

    # -- the Process protocol ---------------------------------------------------------

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the id of its process group and session."""
        return self._pid

    def done(self) -> bool:
        """True once the process has exited and its outcome is known."""
        if self._outcome is None:
            self._observe()
        return self._outcome is not None

    async def wait_exit(self) -> None:
        """Wait until the leader has exited (its descendants may still run)."""
        await self._exited.wait()

    def result(self) -> Outcome:
        """The outcome; raises ``ProcessFailure(RESULT)`` before the process is done."""
        if not self.done() or self._outcome is None:
            raise ProcessFailure(Operation.RESULT, retryable=True)
        return self._outcome

    async def request_stop(self) -> None:
        """SIGTERM to the whole group (a no-op once the join has finished)."""
        self._signal_group(signal.SIGTERM, Operation.REQUEST_STOP)

    async def force_kill(self) -> None:
        """SIGKILL to the whole tree (a no-op once the join has finished).

        A supervisor is first asked to kill every descendant, including those that left
        the group, and given ``END_BOUND_SECONDS``; then the group gets SIGKILL anyway.
        """
        await self._let_the_supervisor_end()
        self._signal_group(signal.SIGKILL, Operation.FORCE_KILL)

    def _signal_group(self, signum: signal.Signals, operation: Operation) -> None:
        if self._reaped:
            return
        self._observe()
        if not self._pinned:
            # The group id may belong to someone else by now: signalling it is unsafe.
            raise ProcessFailure(operation, retryable=False)
        try:
            os.killpg(self._pid, signum)
        except ProcessLookupError:
            return
        except OSError:
            raise ProcessFailure(operation, retryable=True) from None

    async def wait(self) -> None:
        """The join: group killed, leader reaped, pipes drained or closed, all bounded.

        Idempotent; concurrent calls wait for the first. ``ProcessFailure(WAIT,
        retryable=True)`` when the leader does not exit within ``EXIT_BOUND_SECONDS``
        of SIGKILL (a retry starts over); ``retryable=False`` when the leader was reaped
        by someone else, so what is left of its group can no longer be killed safely.
        """
        async with self._join_lock:
            if self._joined:
                return
            if not self._reaped:
                await self._end_group()
            if self._supervisor and not self._clean:
                # The supervisor died before it ended its tree: its orphans came here.
                await _sweep_orphans()
            await self._remove_temporary()
            await self._drain()
            self._close_report()
            if self._lost:
                raise ProcessFailure(Operation.WAIT, retryable=False)
            self._joined = True

    async def _end_group(self) -> None:
        self._observe()
        if self._reaped:
            # Without waitid the exit is seen by reaping, which kills the group at once.
            return
        gone_before = self._leader_gone.is_set()
        if self._pinned:
            # The leader's exit is bounded by EXIT_BOUND_SECONDS in each phase of the join.
            await self._let_the_supervisor_end(min(END_BOUND_SECONDS, EXIT_BOUND_SECONDS))
            self._observe()
        if self._reaped:
            return
        if not self._pinned:
            # Terminal: the pipes are still drained and closed, but what is left of the
            # group can never be killed safely, so release cannot be proven.
            self._lost = True
            self._mark_reaped()
            return
        try:
            os.killpg(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except OSError:
            raise ProcessFailure(Operation.WAIT, retryable=True) from None
        self._watch()
        bound = EXIT_BOUND_SECONDS
        if bound <= 0 and not gone_before:
            # No time at all: a leader that had not exited when the join began has not
            # exited within the bound (decided here, not by how fast it died meanwhile).
            raise ProcessFailure(Operation.WAIT, retryable=True)
        try:
            async with asyncio.timeout(bound):
                await self._leader_gone.wait()
        except TimeoutError:
            raise ProcessFailure(Operation.WAIT, retryable=True) from None
        self._reap()

    def _reap(self) -> None:
        if self._reaped:
            return
        if not self._pinned:
            # Reaped by someone else while we waited for the exit.
            self._lost = True
            self._mark_reaped()
            return
        try:
            self._waitid(_REAP_FLAGS)
        except ChildProcessError:
            self._record(Outcome.unknown())
        except OSError:
            # Not reaped, so still pinned: a retry of the join starts over safely.
            raise ProcessFailure(Operation.WAIT, retryable=True) from None
        self._mark_reaped()

    def _mark_reaped(self) -> None:
        self._reaped = True
        self._pinned = False
        self._leader_gone.set()
        _LEADERS.discard(self._pid)
        self._close_pidfd()
        outcome = self._outcome
        code = outcome.exit_code if outcome is not None and outcome.exit_code is not None else -1
        # Tell Popen the child is gone so it never polls (or warns about) it again.
        self._popen.returncode = code

    async def _remove_temporary(self) -> None:
        """Remove the call's private ``TMPDIR`` (its tree is gone by now)."""
        if self._temporary is None:
            return
        await asyncio.to_thread(shutil.rmtree, self._temporary, ignore_errors=True)
        self._temporary = None

    async def _drain(self) -> None:
        for pump in self._outputs:
            if not pump.started:
                pump.close()
        try:
            async with asyncio.timeout(DRAIN_BOUND_SECONDS):
                for pump in self._outputs:
                    if pump.closed:
                        continue
                    await pump.finished.wait()
        except TimeoutError:
            # A descendant outside the group still holds a write end: stop listening.
            pass
        for pump in self._outputs:
            pump.close()
        if self._stdin is not None:
            self._stdin.close()


def _environment(entries: Iterable[str]) -> dict[str, str]:
    environment: dict[str, str] = {}
    for entry in entries:
        name, _, value = entry.partition("=")
        environment[name] = value
    return environment


def _with_temporary(entries: tuple[str, ...], temporary: str) -> list[str]:
    """The spec's environment with ``TMPDIR`` (and ``TMP``/``TEMP`` if set) on ``temporary``."""
    kept = [e for e in entries if e.partition("=")[0] not in _TEMPORARY_VARIABLES]
    present = {e.partition("=")[0] for e in entries}
    return [
        *kept,
        *(
            f"{name}={temporary}"
            for name in _TEMPORARY_VARIABLES
            if name == "TMPDIR" or name in present
        ),
    ]


def _attach(process: PosixProcess) -> None:
    """The late part of a start (a seam the tests replace to cause a partial start)."""
    process._attach()


async def _settle(work: Awaitable[None]) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile (then re-raise)."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.cancelled():
                raise
            cancelled = exc
        except Exception:  # noqa: BLE001, S110 - the join's failure is reported by the caller
            pass
    if cancelled is not None:
        raise cancelled


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


@final
class _Ends:
    """The descriptors of one start.

    The child's ends are closed after the fork whatever happens; the parent's are kept
    for the process, or closed when the start fails.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()  # before anything is created
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
        directory = _open_no_follow(spec.working_directory)
        self.parent.append(directory)
        return _Standard(
            stdin, stdout_write, stderr_write, directory, stdin_write, stdout_read, stderr_read
        )

    def close_parent(self) -> None:
        for fd in self.parent:
            _close_quietly(fd)

    def close_child(self) -> None:
        for fd in self.child:
            _close_quietly(fd)

    def process(
        self,
        popen: subprocess.Popen[bytes],
        spec: Spec,
        standard: _Standard,
        *,
        report: int | None = None,
        temporary: str | None = None,
    ) -> PosixProcess:
        """The started child as a ``PosixProcess``; the workdir it entered is let go."""
        _close_quietly(standard.directory)
        _LEADERS.add(popen.pid)
        loop = self.loop
        return PosixProcess(
            loop,
            popen,
            (
                _OutputPump(loop, standard.stdout_read, spec.stdout),
                _OutputPump(loop, standard.stderr_read, spec.stderr),
            ),
            None
            if standard.stdin_write is None
            else _InputPump(loop, standard.stdin_write, spec.stdin),
            report=report,
            temporary=temporary,
        )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@final
class PosixLauncher:
    """Starts each child in its own session and process group.

    On Linux each command runs under a small per-call supervisor (``_posix_sandbox``)
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

    __slots__ = ("_containment", "_root", "_supervised")

    def __init__(self, containment: Containment = OFF, root: str | None = None) -> None:
        if not isinstance(containment, Containment):
            raise TypeError("containment must be a Containment")
        if containment.contained and (root is None or not os.path.isabs(root)):
            raise ValueError("a contained launcher needs the absolute worktree root")
        self._containment = containment
        self._root = root
        self._supervised = _supervisor_available()
        if containment.contained and not self._supervised:
            raise ValueError("containment needs the supervisor, which is unavailable here")

    @property
    def contained(self) -> bool:
        """True when every command runs under the Landlock policy (``workspace`` mode)."""
        return self._containment.contained

    @property
    def containment(self) -> str | None:
        """What the sandbox confines, for the shell's description; ``None`` when off."""
        return self._containment.sentence

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
        return report

    async def start(self, spec: Spec) -> PosixProcess:
        """Start ``spec``; raise ``LaunchError`` (carrying the process if one was created).

        ``Popen`` runs on the loop thread, as in ``asyncio.create_subprocess_exec``: it
        returns once the child has exec'd or failed, and since nothing awaits before
        the process object exists, a cancellation can never fall between the fork and
        the ownership of the child. With a supervisor, the start then waits (bounded)
        for its word that the command itself started; a cancellation meanwhile joins
        the supervisor (shielded, bounded) before it propagates.
        """
        if not self._supervised:
            return self._start_direct(spec)
        process = self._spawn_supervisor(spec)
        try:
            _attach(process)
        except Exception:  # noqa: BLE001 - the child exists: hand it over with the error
            raise LaunchError(process) from None
        try:
            started = await process._until_started()
        except asyncio.CancelledError:
            await _settle(process.wait())
            raise
        if started:
            process._watch_exit()
            return process
        try:
            await process.wait()
        except ProcessFailure:
            raise LaunchError(process) from None
        raise LaunchError from None

    def _spawn_supervisor(self, spec: Spec) -> PosixProcess:
        ends = _Ends()
        temporary: str | None = None
        try:
            standard = ends.standard(spec)
            report_read, report_write = ends.pipe(parent_reads=True)
            os.set_blocking(report_read, False)
            environment: Iterable[str] = spec.environment
            writable: list[bytes] = []
            if self._containment.contained and self._root is not None:
                temporary = tempfile.mkdtemp(prefix=TMPDIR_PREFIX)
                environment = _with_temporary(spec.environment, temporary)
                writable = [os.fsencode(self._root), os.fsencode(temporary)]
            blob = sandbox.encode_spec(
                os.getpid(),
                self._containment.abi if self._containment.contained else 0,
                writable,
                self._containment.allow_network,
                os.fsencode(spec.executable),
                [os.fsencode(argument) for argument in spec.arguments],
                [os.fsencode(entry) for entry in environment],
                b"" if temporary is None else os.fsencode(temporary),
            )
            memory = os.memfd_create("spice-command", os.MFD_CLOEXEC)
            ends.child.append(memory)
            _write_all(memory, blob)
            os.lseek(memory, 0, os.SEEK_SET)
            python = sys.executable
            popen = subprocess.Popen(  # noqa: S603 - argv list, no shell; see start
                [python, *_SUPERVISOR_FLAGS, SUPERVISOR_PATH, str(memory), str(report_write)],
                executable=python,
                stdin=standard.stdin,
                stdout=standard.stdout,
                stderr=standard.stderr,
                cwd=_entry(standard.directory, spec.working_directory),
                env=_SUPERVISOR_ENVIRONMENT,
                close_fds=True,
                pass_fds=(memory, report_write),
                start_new_session=True,
                restore_signals=True,
            )
        except Exception:  # noqa: BLE001 - every start failure is one LaunchError, no OS text
            ends.close_parent()
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
            raise LaunchError from None
        finally:
            ends.close_child()
        return ends.process(popen, spec, standard, report=report_read, temporary=temporary)

    def _start_direct(self, spec: Spec) -> PosixProcess:
        """Without a supervisor (not Linux): the command itself leads its group."""
        ends = _Ends()
        try:
            standard = ends.standard(spec)
            # Inline on purpose (see start): fork/exec is short and must not be cut.
            popen = subprocess.Popen(  # noqa: S603 - argv list, no shell; see start
                [spec.executable, *spec.arguments],
                executable=spec.executable,
                stdin=standard.stdin,
                stdout=standard.stdout,
                stderr=standard.stderr,
                cwd=_entry(standard.directory, spec.working_directory),
                env=_environment(spec.environment),
                close_fds=True,
                start_new_session=True,
                restore_signals=True,
            )
        except Exception:  # noqa: BLE001 - every start failure is one LaunchError, no OS text
            ends.close_parent()
            raise LaunchError from None
        finally:
            ends.close_child()
        process = ends.process(popen, spec, standard)
        try:
            _attach(process)
        except Exception:  # noqa: BLE001 - the child exists: hand it over with the error
            raise LaunchError(process) from None
        return process
