"""``WindowsLauncher``: each command in a kill-on-close Job Object (contract 10.4).

The start, on the event loop's thread. The Proactor's ``subprocess_exec`` awaits the
pipes' connection after the suspended process exists, so a cancellation can fall there:
asyncio then kills the process, which never ran an instruction, and the start closes the
job it made before re-raising::

    CreateJobObject ─► limits: KILL_ON_JOB_CLOSE, no breakaway
      ─► CreateProcess(CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP), pipes on the Proactor
      ─► AssignProcessToJobObject ─► NtResumeProcess

The command runs no instruction before it is in the job, so every descendant it makes is
in the job too, and none can leave it (``CREATE_BREAKAWAY_FROM_JOB`` is refused). Stopping
terminates the job (Windows has no group signal a console-less server can send); the join
terminates it again, waits (bounded) until the job has no process left, closes it and
waits for the pipes to close. If the server dies, the system closes its handle to the job
and, kill-on-close, ends every process in it. A batch file (``.bat``/``.cmd``) is refused:
``cmd.exe`` re-parses its arguments, which cannot be quoted safely.

The shell is not contained on Windows: ``contained`` is ``False``; ``auto`` runs
uncontained with a warning, ``workspace`` refuses to start (``windows_containment``).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from typing import Final, final

from spice.agent.process import LaunchError, Operation, Outcome, ProcessFailure, Sink, Spec

from .._sandbox import (
    AUTO,
    DISABLED,
    WORKSPACE,
    ContainmentUnavailable,
    Uncontained,
    parse_mode,
)
from . import _api as api
from ._resolver import is_batch

TERMINATED_EXIT_CODE: Final = 1
"""The exit code a command ended by its job's termination gets (as ``kill()`` gives)."""

EMPTY_BOUND_SECONDS: Final = 5.0
"""Longest the join waits for a terminated job to have no process left."""

DRAIN_BOUND_SECONDS: Final = 2.0
"""Longest the join waits for the pipes to close once the job is empty."""

EMPTY_POLL_SECONDS: Final = 0.005
"""Pause between two looks at a terminated job's process count."""

CREATION_FLAGS: Final = api.CREATE_SUSPENDED | api.CREATE_NEW_PROCESS_GROUP
"""How every command is created: held before its first instruction, in its own group."""

NO_SANDBOX: Final = (
    "Windows has no shell sandbox: --sandbox workspace cannot be enforced (use --sandbox off)"
)
AUTO_ON_WINDOWS: Final = (
    "warning: Windows has no shell sandbox; shell commands run uncontained (--sandbox off)"
)


class WindowsContainmentUnavailable(ContainmentUnavailable):
    """``workspace`` was asked for on Windows, where no shell sandbox exists."""

    def __init__(self) -> None:
        Exception.__init__(self, NO_SANDBOX)


def windows_containment(mode: str = AUTO, allow_network: bool = False) -> Uncontained:
    """The sandbox for ``mode`` on Windows: always ``off`` (``Uncontained``).

    ``auto`` is ``off`` with a warning; ``workspace`` raises
    ``WindowsContainmentUnavailable``; an unknown mode is a ``ValueError``.
    """
    requested = parse_mode(mode)
    if requested == WORKSPACE:
        raise WindowsContainmentUnavailable
    warning = AUTO_ON_WINDOWS if requested == AUTO else None
    return Uncontained(requested, allow_network, warning)


@final
class _Pipes(asyncio.SubprocessProtocol):
    """Delivers the command's output to its sinks as the Proactor reads it."""

    def __init__(self, stdout: Sink, stderr: Sink) -> None:
        self._sinks = {1: stdout, 2: stderr}
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        sink = self._sinks.get(fd)
        if sink is None:
            return
        try:
            sink.write(data)
        except Exception:  # noqa: BLE001 - the Sink's rule: this stream is cut, the call goes on
            del self._sinks[fd]

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


@final
class WindowsProcess:
    """One command and its Job Object; ``wait`` proves the job empty and closed."""

    __slots__ = ("_job", "_joined", "_pipes", "_terminated", "_transport")

    def __init__(self, transport: asyncio.SubprocessTransport, pipes: _Pipes, job: api.Job) -> None:
        self._transport = transport
        self._pipes = pipes
        self._job: api.Job | None = job
        self._terminated = False
        self._joined = False

    @property
    def pid(self) -> int:
        """The command's process id."""
        return self._transport.get_pid()

    def done(self) -> bool:
        return self._pipes.exited.is_set()

    async def wait_exit(self) -> None:
        await self._pipes.exited.wait()

    def result(self) -> Outcome:
        code = self._transport.get_returncode() if self.done() else None
        if code is None:
            raise ProcessFailure(Operation.RESULT, retryable=True)
        if 0 <= code <= 0xFFFFFFFF:
            return Outcome.exited(code)
        return Outcome.unknown()

    def _terminate(self, operation: Operation) -> None:
        job = self._job
        if job is None:
            if not self._joined:
                raise ProcessFailure(operation, retryable=True)
            return
        try:
            job.terminate(TERMINATED_EXIT_CODE)
        except OSError:
            raise ProcessFailure(operation, retryable=True) from None
        self._terminated = True

    async def request_stop(self) -> None:
        """Terminate the job: Windows has no group signal a console-less server can send."""
        self._terminate(Operation.REQUEST_STOP)

    async def force_kill(self) -> None:
        """Terminate the job: the command and every descendant end."""
        self._terminate(Operation.FORCE_KILL)

    async def wait(self) -> None:
        """The join: job terminated and empty, its handle closed, the pipes closed.

        Raises ``ProcessFailure(WAIT)`` when a bound passes first (retryable: the job is
        kept and a later join tries again). A sink that failed does not fail the join (the
        ``Sink``'s rule: its stream was cut, the rest delivered).
        """
        if self._joined:
            return
        job = self._job
        if job is not None:
            try:
                job.terminate(TERMINATED_EXIT_CODE)
                empty = await _until_empty(job)
            except OSError:
                raise ProcessFailure(Operation.WAIT, retryable=True) from None
            if not empty:
                raise ProcessFailure(Operation.WAIT, retryable=True)
            self._job = None
            job.close()
        try:
            async with asyncio.timeout(DRAIN_BOUND_SECONDS):
                await self._pipes.exited.wait()
                await self._pipes.closed.wait()
        except TimeoutError:
            raise ProcessFailure(Operation.WAIT, retryable=True) from None
        self._transport.close()
        self._joined = True


async def _until_empty(job: api.Job) -> bool:
    """Whether the job's process count reaches 0 within ``EMPTY_BOUND_SECONDS``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + EMPTY_BOUND_SECONDS
    while job.active_processes() > 0:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(EMPTY_POLL_SECONDS)
    return True


@final
class WindowsLauncher:
    """Starts each command suspended, assigns it to its own kill-on-close job, resumes it."""

    __slots__ = ("_containment",)

    def __init__(self, containment: Uncontained | None = None) -> None:
        chosen = windows_containment(DISABLED) if containment is None else containment
        if not isinstance(chosen, Uncontained):
            raise TypeError("containment must be an Uncontained (Windows has no shell sandbox)")
        self._containment = chosen

    @property
    def contained(self) -> bool:
        """Always ``False``: nothing confines a command's writes or network on Windows."""
        return False

    @property
    def containment(self) -> str | None:
        """No sandbox sentence for the shell's description (nothing is confined)."""
        return None

    @property
    def sandbox(self) -> Uncontained:
        """The policy (always ``off``) and the warning ``auto`` gives."""
        return self._containment

    def report(self) -> dict[str, object]:
        """The ``tools`` output's ``sandbox`` object on Windows."""
        return {
            "mode": self._containment.mode,
            "requested": self._containment.requested,
            "contained": False,
            "mechanism": None,
            "abi": 0,
            "network": "allowed",
            "enforced": [],
            "missing": [],
            "not_confined": ["everything"],
            "process_lifetime": (
                "each command runs in a kill-on-close Job Object without breakaway: it and "
                "its descendants end with their call, and when the server dies"
            ),
        }

    async def start(self, spec: Spec) -> WindowsProcess:
        """Start ``spec``; raise ``LaunchError`` (carrying the process if one was created)."""
        if sys.platform != "win32":
            raise LaunchError
        if is_batch(spec.executable):
            raise LaunchError
        try:
            job = api.Job.create()
        except OSError:
            raise LaunchError from None
        loop = asyncio.get_running_loop()
        pipes = _Pipes(spec.stdout, spec.stderr)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: pipes,
                spec.executable,
                *spec.arguments,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.working_directory,
                env=_environment(spec.environment),
                creationflags=CREATION_FLAGS,
                executable=spec.executable,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError):
            job.close()
            raise LaunchError from None
        except BaseException:
            # A cancellation while the Proactor connects the pipes: asyncio kills the
            # suspended process, and the job it never ran in is closed here.
            job.close()
            raise
        process = WindowsProcess(transport, pipes, job)
        try:
            handle = _handle_of(transport)
            job.assign(handle)
            api.resume(handle)
        except OSError:
            # Created but not running: the join terminates it (a suspended process that is
            # not in the job is ended through its own handle first).
            with contextlib.suppress(OSError):
                api.terminate_process(_handle_of(transport), TERMINATED_EXIT_CODE)
            raise LaunchError(process) from None
        _feed(transport, spec.stdin)
        return process


def _environment(entries: tuple[str, ...]) -> dict[str, str]:
    environment: dict[str, str] = {}
    for entry in entries:
        name, _, value = entry.partition("=")
        environment[name] = value
    return environment


def _handle_of(transport: asyncio.SubprocessTransport) -> int:
    popen = transport.get_extra_info("subprocess")
    handle = getattr(popen, "_handle", None)
    if handle is None:
        raise OSError("no process handle")
    return int(handle)


def _feed(transport: asyncio.SubprocessTransport, data: bytes) -> None:
    pipe = transport.get_pipe_transport(0)
    if pipe is None:
        return
    if data:
        assert isinstance(pipe, asyncio.WriteTransport)  # noqa: S101 - stdin is a write pipe
        pipe.write(data)
    pipe.close()
