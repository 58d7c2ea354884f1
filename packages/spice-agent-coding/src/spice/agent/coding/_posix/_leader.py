"""The leader watch of a ``PosixProcess``: the group's leader, watched without reaping it.

``_Leader`` keeps the one lifecycle ``_State`` of a started child (as ``Popen.returncode``
is CPython's one truth): it observes the leader's exit by a pidfd (else by polling), reaps
it for the join, and signals the group only while the unreaped leader pins its id. Where
``waitid`` is missing (macOS) an exit is seen by reaping, and the group's rest is killed
at that moment, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from typing import Final, final

from spice.agent.process import Operation, Outcome, ProcessFailure

from . import _orphans as orphans

EXIT_POLL_SECONDS: Final = 0.02
"""Exit polling interval where the kernel has no pidfd (macOS, Linux < 5.3)."""

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


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        # Linux releases the descriptor even when close reports an error.
        return


@final
class _State(enum.Enum):
    """The one lifecycle of a ``PosixProcess``, kept by its leader watch.

    ``RUNNING`` → ``EXITED`` → ``REAPED`` → ``JOINED``. Without ``waitid`` (macOS) the
    exit is seen by reaping: ``RUNNING`` → ``REAPED``. Someone else reaping the leader
    makes it ``LOST`` from ``RUNNING`` or ``EXITED``, for good. While the leader is
    ``RUNNING`` or ``EXITED`` it is unreaped, so its pid pins the group id and a group
    signal is safe; in every other state no signal is sent.
    """

    RUNNING = "running"
    """The leader lives (a supervisor may still be starting the command)."""
    EXITED = "exited"
    """The leader has exited; unreaped, it still pins its group id."""
    REAPED = "reaped"
    """The leader was reaped by us: nothing is signalled any more."""
    LOST = "lost"
    """Someone else reaped the leader: its group id may be another's (terminal)."""
    JOINED = "joined"
    """The join finished: the leader reaped, the pipes closed, the TMPDIR removed."""


_PINNED: Final = frozenset({_State.RUNNING, _State.EXITED})


def _waitid(pidfd: int | None, pid: int, flags: int) -> os.waitid_result | None:
    """``waitid`` on the leader, by pidfd where there is one, else by pid."""
    if pidfd is not None:
        return os.waitid(os.P_PIDFD, pidfd, flags)
    return os.waitid(os.P_PID, pid, flags)


@final
class _Leader:
    """Watches the group's leader without reaping it, and reaps it for the join.

    Its one truth is whether the leader is gone (``gone``, ``outcome``), as
    ``Popen.returncode`` is CPython's: the watch runs while the leader is
    ``RUNNING``, whatever the supervisor reported about the command. ``on_gone``
    runs once, when the leader is seen gone.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        popen: subprocess.Popen[bytes],
        on_gone: Callable[[], None],
    ) -> None:
        self._loop = loop
        # Kept alive on purpose: a collected Popen with no return code would be polled
        # (and so reaped) by subprocess's own clean-up behind our back.
        self._popen = popen
        self.pid = popen.pid
        self.state = _State.RUNNING
        self.outcome: Outcome | None = None
        self.gone = asyncio.Event()
        self._on_gone = on_gone
        self._pidfd: int | None = None
        self._reader = False
        self._poll: asyncio.TimerHandle | None = None

    @property
    def pinned(self) -> bool:
        """Whether the unreaped leader still pins the group id (a group signal is safe)."""
        return self.state in _PINNED

    def watch(self) -> None:
        """Watch for the leader's exit (a pidfd reader, else polling); idempotent."""
        if self.state is not _State.RUNNING or self._reader or self._poll is not None:
            return
        if self._pidfd is None:
            self._pidfd = _open_pidfd(self.pid)
        if self._pidfd is not None:
            try:
                self._loop.add_reader(self._pidfd, self.observe)
            except Exception:  # noqa: BLE001 - any registration failure falls back to polling
                self._close_pidfd()
            else:
                self._reader = True
                return
        self._poll = self._loop.call_later(EXIT_POLL_SECONDS, self._poll_exit)

    def _poll_exit(self) -> None:
        self._poll = None
        self.observe()
        if self.state is _State.RUNNING:
            self._poll = self._loop.call_later(EXIT_POLL_SECONDS, self._poll_exit)

    def _unwatch(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if self._reader and self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
        self._reader = False

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            _close_quietly(self._pidfd)
            self._pidfd = None

    def observe(self) -> None:
        """Look at the leader without reaping it; note its exit once it has exited."""
        if self.state is not _State.RUNNING:
            return
        if self._pidfd is None and not _has_waitid():
            self._observe_by_reaping()
            return
        try:
            status = _waitid(self._pidfd, self.pid, _PEEK_FLAGS)
        except ChildProcessError:
            # Someone else reaped our child (a SIGCHLD handler, a waitpid(-1) watcher,
            # SIGCHLD ignored): its pid no longer pins the group id.
            self._lose()
            return
        except OSError:
            if self._pidfd is not None:
                # A kernel with pidfd_open but without waitid(P_PIDFD) (Linux 5.3):
                # the pid still pins the group (we have not reaped), so poll by pid.
                self._unwatch()
                self._close_pidfd()
                self._poll = self._loop.call_later(EXIT_POLL_SECONDS, self._poll_exit)
            return
        if status is not None and status.si_pid != 0:
            self._gone(_State.EXITED, _outcome_of_waitid(status))

    def _observe_by_reaping(self) -> None:
        """Without ``waitid`` (macOS) an exit can only be seen by reaping the leader.

        Right after the reap, what is left of the group is killed: while any member
        lives, POSIX keeps the group id from being reused, so this one signal is safe;
        later it might not be, so the join's kill happens here, once.
        """
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._lose()
            return
        except OSError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):  # ESRCH: nothing is left of the group
            os.killpg(self.pid, signal.SIGKILL)
        self._gone(_State.REAPED, _outcome_of_wait_status(status))

    def _lose(self) -> None:
        self._gone(_State.LOST, Outcome.unknown())

    def _gone(self, state: _State, outcome: Outcome) -> None:
        self.state = state
        self.outcome = outcome
        self._unwatch()
        if state is not _State.EXITED:
            self._release()
        self.gone.set()
        self._on_gone()

    def _release(self) -> None:
        """The leader's pid is no longer ours to watch: let go of what names it."""
        orphans.forget(self.pid)
        self._close_pidfd()
        outcome = self.outcome
        code = outcome.exit_code if outcome is not None and outcome.exit_code is not None else -1
        # Tell Popen the child is gone so it never polls (or warns about) it again.
        self._popen.returncode = code

    async def until_gone(self, bound: float) -> bool:
        """Wait at most ``bound`` for the leader to be gone; whether it is."""
        self.watch()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self.gone.wait()
        return self.gone.is_set()

    def signal_group(self, signum: signal.Signals, operation: Operation) -> None:
        """Signal the whole group while the leader pins it; no-op once we reaped it."""
        self.observe()
        if self.state is _State.LOST:
            # The group id may belong to someone else by now: signalling it is unsafe.
            raise ProcessFailure(operation, retryable=False)
        if not self.pinned:
            return
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            return
        except OSError:
            raise ProcessFailure(operation, retryable=True) from None

    def signal_leader(self, signums: Iterable[signal.Signals]) -> None:
        """Signal the leader alone while it pins its pid (failures are ignored)."""
        if not self.pinned:
            return
        for signum in signums:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signum)

    def reap(self) -> None:
        """Reap the exited leader (``EXITED`` → ``REAPED``); no-op in any other state."""
        if self.state is not _State.EXITED:
            return
        try:
            _waitid(self._pidfd, self.pid, _REAP_FLAGS)
        except ChildProcessError:
            # Reaped by someone else after our group kill, which it had pinned: gone.
            pass
        except OSError:
            # Not reaped, so still pinned: a retry of the join starts over safely.
            raise ProcessFailure(Operation.WAIT, retryable=True) from None
        self.state = _State.REAPED
        self._release()

    def joined(self) -> None:
        """The join finished (``REAPED`` → ``JOINED``)."""
        if self.state is _State.REAPED:
            self.state = _State.JOINED
