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
import enum
import marshal
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, final

from spice.agent.process import LaunchError, Operation, Outcome, ProcessFailure, Sink, Spec
from spice.agent.tools.coding.settling import settle

from .._containment import OFF, Containment
from . import _bwrap, _facts, _hints, _plan
from . import _landlock as landlock
from . import _supervisor as supervisor
from . import _tmpdir as tmpdir

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
SUPERVISOR_MODULES: Final = ("_seccomp", "_landlock", "_tmpdir", "_supervisor")
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

_KEPT_VISIBLE: Final = _facts.kept_visible()
"""The server's own environment and interpreter where they lie beneath ``/tmp`` (a
checkout or a venv there): kept visible, read-only, on each call's private ``/tmp``."""

_SUPERVISOR_FLAGS: tuple[str, ...] = ("-I", "-S", "-c", supervisor.BOOTSTRAP)
"""Isolated (no PYTHON* variables, no user site), without ``site``, the bootstrap."""

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
    _adopting = landlock.become_subreaper()
    return _adopting


def _supervisor_available() -> bool:
    """Whether commands run under the per-call supervisor (Linux with an interpreter)."""
    return (
        sys.platform.startswith("linux")
        and bool(INTERPRETER)
        and hasattr(os, "memfd_create")
        and None not in SUPERVISOR_SOURCES.values()
    )


def _server_children() -> list[int]:
    """Direct children of this (possibly threaded) process."""
    me = os.getpid()
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return landlock.children(me)
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children", "rb") as file:
                found.extend(int(field) for field in file.read().split())
        except FileNotFoundError:
            return landlock.children(me)
        except OSError:
            continue
    return found


async def _sweep_orphans() -> bool:
    """End and reap every child of ours that is not a live leader, with its whole subtree.

    Each round freezes (SIGSTOP) every orphan and its descendants, then kills them all
    (bounded). Returns whether none is left.
    """
    if not _adopting:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ORPHAN_SWEEP_SECONDS
    while True:
        orphans = [pid for pid in _server_children() if pid not in _LEADERS]
        if not orphans:
            return True
        tree = [*orphans, *(pid for orphan in orphans for pid in landlock.descendants(orphan))]
        for number in (signal.SIGSTOP, signal.SIGKILL):
            for pid in tree:
                with contextlib.suppress(OSError):
                    os.kill(pid, number)
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
        if loop.time() >= deadline:
            return not [pid for pid in _server_children() if pid not in _LEADERS]
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


@final
@dataclass(frozen=True, slots=True)
class _Bounds:
    """The bounds one launcher gives its processes (the module's constants by default)."""

    start: float = START_BOUND_SECONDS
    end: float = END_BOUND_SECONDS
    exit: float = EXIT_BOUND_SECONDS
    drain: float = DRAIN_BOUND_SECONDS


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
        _LEADERS.discard(self.pid)
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

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, on_command_exit: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._fd: int | None = fd
        self._reader = False
        self._pending = b""
        self._on_command_exit = on_command_exit
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
            self._on_command_exit()

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
class PosixProcess:
    """A child started by ``PosixLauncher``; use it only from the loop that started it.

    Three parts, each with its own state: the leader watch (``_Leader``: the one
    lifecycle ``_State``), the supervisor's report (``_Report``: the command's
    start and outcome) and the standard streams (``_Streams``). The leader stays
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
        report: int | None = None,
        temporary: str | None = None,
        lifeline: int | None = None,
        info: int | None = None,
    ) -> None:
        self._exited = asyncio.Event()
        # With namespaces: bwrap's --info-fd (the supervisor's pid), and a pidfd for it.
        self._info = info
        self._inside_pid: int | None = None
        self._inside: int | None = None
        self._loop = loop
        # With namespaces: the read end of bwrap's status pipe, kept open until the join
        # so that the monitor's last status write never meets a closed pipe (SIGPIPE).
        self._lifeline = lifeline
        self._leader = _Leader(loop, popen, self._leader_gone)
        self._report = None if report is None else _Report(loop, report, self._exited.set)
        self._streams = streams
        self._bounds = bounds
        self._temporary = temporary
        self._temporary_left = False
        self._join_lock = asyncio.Lock()
        self._after_join: Callable[[], None] | None = None
        """The launcher's release of what it made for the call besides the TMPDIR."""
        self._hint: Callable[[], str | None] | None = None
        """The call's ``sandbox_hint`` from its plan and its output (contained calls)."""

    @property
    def supervised(self) -> bool:
        """Whether a per-call supervisor leads the group (and owns the command's tree)."""
        return self._report is not None

    @property
    def layers(self) -> int:
        """The ``LAYER_*`` bits of ``_posix._supervisor`` the command was started under.

        What the supervisor's child applied before ``execve`` (Landlock, seccomp,
        capabilities), as its start report says; 0 before the start is known and
        without a supervisor.
        """
        return 0 if self._report is None else self._report.layers

    @property
    def cleanup_completed(self) -> bool:
        """After the join: whether what the launcher made for the call is gone (its TMPDIR)."""
        return self._leader.state is _State.JOINED and not self._temporary_left

    @property
    def sandbox_hint(self) -> str | None:
        """After the join: one sentence naming the flag that would allow what the sandbox
        refused, as the command's output shows it (``_posix._hints``), else ``None``."""
        if self._hint is None or self._leader.state is not _State.JOINED:
            return None
        return self._hint()

    def _attach(self) -> None:
        """Start the pumps, the report reader and the leader watch (can fail late)."""
        self._streams.start()
        if self._report is not None:
            self._report.listen()
        self._leader.watch()

    def _leader_gone(self) -> None:
        # A supervisor reports before it exits: what it said is read first.
        if self._report is not None:
            self._report.read()
        self._exited.set()

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
        if self._leader.state is _State.RUNNING:
            if await self._until_inside_known(bound):
                self._signal_inside((signal.SIGKILL,))
            else:
                # It may be stopped: CONT after the request.
                self._leader.signal_leader((supervisor.END_SIGNAL, signal.SIGCONT))
            await self._leader.until_gone(max(0.0, deadline - loop.time()))
        await report.until_closed(max(0.0, deadline - loop.time()))

    async def _until_inside_known(self, bound: float) -> bool:
        """With namespaces: wait (bounded) until bwrap has said the supervisor's pid."""
        info = self._info
        if info is None:
            return False
        if self._inside_pid is None:
            self._inside_pid = _bwrap.child_pid(info)
        if self._inside_pid is None:
            written: asyncio.Future[None] = self._loop.create_future()

            def readable() -> None:
                if not written.done():
                    written.set_result(None)

            self._loop.add_reader(info, readable)
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(bound):
                        await written
            finally:
                self._loop.remove_reader(info)
            self._inside_pid = _bwrap.child_pid(info)
        return self._inside_pid is not None

    def _signal_inside(self, signums: Iterable[signal.Signals]) -> bool:
        """With namespaces: signal the supervisor inside them; whether it could be named.

        Its pid is what bwrap wrote on its ``--info-fd``; the pidfd is opened while
        bwrap's monitor (unreaped, running) is still its parent, so it names the
        supervisor for good. Without namespaces, or before bwrap has said, ``False``.
        """
        if self._info is None:
            return False
        if self._inside is None:
            self._leader.observe()
            if self._inside_pid is None:
                self._inside_pid = _bwrap.child_pid(self._info)
            if self._inside_pid is None or self._leader.state is not _State.RUNNING:
                return False
            self._inside = _bwrap.open_child(self._inside_pid, self._leader.pid)
            if self._inside is None:
                return False
        for signum in signums:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._inside, signum)
        return True

    # -- the Process protocol ---------------------------------------------------------

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the id of its process group and session."""
        return self._leader.pid

    def done(self) -> bool:
        """True once the process has exited and its outcome is known."""
        if not self._exited.is_set():
            if self._report is not None:
                self._report.read()
            self._leader.observe()
        return self._exited.is_set()

    async def wait_exit(self) -> None:
        """Wait until the command has exited (its descendants may still run)."""
        await self._exited.wait()

    def result(self) -> Outcome:
        """The outcome; raises ``ProcessFailure(RESULT)`` before the process is done."""
        if not self.done():
            raise ProcessFailure(Operation.RESULT, retryable=True)
        command = None if self._report is None else self._report.command
        outcome = command if command is not None else self._leader.outcome
        if outcome is None:
            raise ProcessFailure(Operation.RESULT, retryable=True)
        return outcome

    async def request_stop(self) -> None:
        """SIGTERM to the whole group (a no-op once the join has finished).

        With namespaces the group is bwrap's monitor alone: the supervisor inside is told
        instead, and passes the stop on to the command.
        """
        self._leader.observe()
        if not self._signal_inside((signal.SIGTERM,)):
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
            if leader.pinned:
                await self._end_group()
            report = self._report
            if report is not None:
                report.read()
                # With namespaces the leader is bwrap's monitor: a supervisor that outlived
                # it (ended through its monitor, before bwrap said its pid) came to a
                # server that adopts orphans: swept and reaped here.
                orphans = self._lifeline is not None or not report.tree_gone
                swept = await _sweep_orphans() if orphans else True
                if not report.tree_gone and not swept:
                    # The supervisor died or ran out of time before it ended its tree, and
                    # what came here is not all gone: not clean, the join is tried again.
                    raise ProcessFailure(Operation.WAIT, retryable=True)
            await self._remove_temporary()
            after, self._after_join = self._after_join, None
            if after is not None:
                after()
            await self._streams.drain(self._bounds.drain)
            if report is not None:
                report.close()
            for fd in (self._lifeline, self._info, self._inside):
                if fd is not None:
                    _close_quietly(fd)
            self._lifeline = self._info = self._inside = None
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

    async def _remove_temporary(self) -> None:
        """Remove the call's private ``TMPDIR`` (its tree is gone by now); note a failure."""
        if self._temporary is None:
            return
        removed = await asyncio.to_thread(_remove_tree, self._temporary)
        self._temporary_left = not removed
        self._temporary = None


def _remove_tree(path: str) -> bool:
    """Remove a call's ``TMPDIR`` whatever its command did to it; whether it is gone."""
    return tmpdir.remove_tree(path)


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
        bounds: _Bounds,
        *,
        report: int | None = None,
        temporary: str | None = None,
        lifeline: int | None = None,
        info: int | None = None,
    ) -> PosixProcess:
        """The started child as a ``PosixProcess``; the workdir it entered is let go."""
        _close_quietly(standard.directory)
        _LEADERS.add(popen.pid)
        loop = self.loop
        streams = _Streams(
            (
                _OutputPump(loop, standard.stdout_read, spec.stdout),
                _OutputPump(loop, standard.stderr_read, spec.stderr),
            ),
            None
            if standard.stdin_write is None
            else _InputPump(loop, standard.stdin_write, spec.stdin),
        )
        return PosixProcess(
            loop,
            popen,
            streams,
            bounds,
            report=report,
            temporary=temporary,
            lifeline=lifeline,
            info=info,
        )


def _popen_supervisor(
    standard: _Standard, cwd: str, descriptors: tuple[int, ...], wrapper: list[str]
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
    return subprocess.Popen(  # noqa: S603 - argv list, no shell; see PosixLauncher.start
        argv,
        executable=argv[0],
        stdin=standard.stdin,
        stdout=standard.stdout,
        stderr=standard.stderr,
        cwd=cwd,
        env=_SUPERVISOR_ENVIRONMENT,
        close_fds=True,
        pass_fds=(code, *descriptors),
        start_new_session=True,
        restore_signals=True,
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


def _take_mount_points(plan: _plan.CallPlan) -> tuple[str, ...]:
    taken = tuple(mask.path for mask in plan.mount_points)
    for path in taken:
        _MOUNT_POINTS[path] = _MOUNT_POINTS.get(path, 0) + 1
    return taken


def _after_call(taken: Iterable[str], forbidden: Iterable[str]) -> None:
    """At the join: the call's mount points released, the files it must not leave removed."""
    _release_mount_points(taken)
    for path in forbidden:
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                os.unlink(path)


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


def _hinter(scanner: _hints.RefusalScanner, plan: _plan.CallPlan) -> Callable[[], str | None]:
    def hint() -> str | None:
        return _hints.sandbox_hint(
            scanner,
            plan.landlock_writable(),
            plan.hidden,
            network_denied=not plan.allow_network,
        )

    return hint


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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

    __slots__ = ("_bounds", "_containment", "_facts", "_root", "_supervised")

    def __init__(
        self,
        containment: Containment = OFF,
        root: str | None = None,
        facts: _plan.StartFacts | None = None,
    ) -> None:
        if not isinstance(containment, Containment):
            raise TypeError("containment must be a Containment")
        if containment.confined and (root is None or not os.path.isabs(root)):
            raise ValueError("a contained launcher needs the absolute worktree root")
        self._containment = containment
        self._root = root
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
        if self._facts is not None:
            namespaces = self._containment.namespaces.made
            sample = _plan.plan_call(
                self._facts,
                namespaces=namespaces,
                allow_network=self._containment.allow_network,
                environment=(),
                temporary=_bwrap.PRIVATE_TMP if namespaces else "a fresh directory per call",
                kind=_planned_kind,
            )
            report["plan"] = sample.rules()
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
            return self._start_direct(spec)
        process = self._spawn_supervisor(spec)
        try:
            _attach(process)
        except Exception:  # noqa: BLE001 - the child exists: hand it over with the error
            raise LaunchError(process) from None
        try:
            start = await process._until_started()
        except asyncio.CancelledError:
            await _join_while_cancelled(process, CANCELLED_START_SECONDS)
            raise
        if start is _Start.STARTED:
            return process
        if start is not _Start.FAILED:
            # No word within the bound, or the report closed without one: the command
            # may have started (its word can come just after the bound). Only an ``F``
            # says nothing was; the caller stops and joins this process.
            raise LaunchError(process) from None
        try:
            await process.wait()
        except ProcessFailure:
            raise LaunchError(process) from None
        raise LaunchError from None

    def _spawn_supervisor(self, spec: Spec) -> PosixProcess:
        """Spawn the supervisor (in ``bwrap`` with namespaces) for the call's plan."""
        if self._facts is not None and _facts.changed_place(self._facts.places) is not None:
            raise LaunchError(reason=PLACE_CHANGED)
        scanner: _hints.RefusalScanner | None = None
        if self._facts is not None:
            scanner = _hints.RefusalScanner()
            spec = Spec(
                spec.executable,
                spec.arguments,
                spec.working_directory,
                spec.environment,
                spec.stdin,
                _hints.Scanned(spec.stdout, scanner, 1),
                _hints.Scanned(spec.stderr, scanner, 2),
                spec.capabilities,
            )
        ends = _Ends()
        temporary: str | None = None
        plan: _plan.CallPlan | None = None
        taken: tuple[str, ...] = ()
        try:
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
                if bwrap is None:
                    temporary = tempfile.mkdtemp(prefix=TMPDIR_PREFIX)
                plan = _plan.plan_call(
                    facts,
                    namespaces=bwrap is not None,
                    allow_network=self._containment.allow_network,
                    environment=spec.environment,
                    temporary=_bwrap.PRIVATE_TMP if temporary is None else temporary,
                    kind=_planned_kind,
                )
            if plan is not None and bwrap is not None:
                # bwrap's status pipe: the supervisor reads, only bwrap's monitor writes.
                lifeline = os.pipe()
                ends.parent.append(lifeline[0])
                ends.child.append(lifeline[1])
                info = ends.pipe(parent_reads=True)  # bwrap's --info-fd: the supervisor's pid
                os.set_blocking(info[0], False)
                taken = _take_mount_points(plan)
                wrapper = plan.bwrap_argv(bwrap, lifeline[1], info[1])
                held = os.fstat(standard.directory)
                workdir = f"{held.st_dev}:{held.st_ino}".encode()
            if plan is not None:
                blob = plan.spec(
                    0 if wrapper else os.getpid(),
                    self._containment.abi,
                    self._containment.layers,
                    spec.executable,
                    spec.arguments,
                    workdir,
                    None if lifeline is None else lifeline[0],
                    temporary,
                )
            else:
                blob = supervisor.encode_spec(
                    os.getpid(),
                    0,
                    [],
                    self._containment.allow_network,
                    os.fsencode(spec.executable),
                    [os.fsencode(argument) for argument in spec.arguments],
                    [os.fsencode(entry) for entry in spec.environment],
                )
            memory = os.memfd_create("spice-command", os.MFD_CLOEXEC)
            ends.child.append(memory)
            _write_all(memory, blob)
            os.lseek(memory, 0, os.SEEK_SET)
            popen = _popen_supervisor(
                standard,
                _entry(standard.directory, spec.working_directory),
                (memory, report_write, *(lifeline or ()), *(info or ())[1:]),
                wrapper,
            )
        except Exception:  # noqa: BLE001 - every start failure is one LaunchError, no OS text
            ends.close_parent()
            if temporary is not None:
                _remove_tree(temporary)
            _release_mount_points(taken)
            raise LaunchError from None
        finally:
            ends.close_child()
        process = ends.process(
            popen,
            spec,
            standard,
            self._bounds,
            report=report_read,
            temporary=temporary,
            lifeline=None if lifeline is None else lifeline[0],
            info=None if info is None else info[0],
        )
        if taken or (plan is not None and plan.forbidden):
            forbidden = () if plan is None else plan.forbidden
            process._after_join = lambda: _after_call(taken, forbidden)
        if scanner is not None and plan is not None:
            process._hint = _hinter(scanner, plan)
        return process

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
        process = ends.process(popen, spec, standard, self._bounds)
        try:
            _attach(process)
        except Exception:  # noqa: BLE001 - the child exists: hand it over with the error
            raise LaunchError(process) from None
        return process
