"""One shell command's life, from its decoded arguments to how it ended.

admission ─► workdir (no symlink component) ─► lookup ─► resolve ─► workdir again ─► start
─► own ─► wait for exit (timeout ─► stop, grace, force) ─► join ─► :class:`Ended`

The runner never starts a process itself: it asks the injected resolver for the
executable and the injected launcher for the process, then owns what it gets until a join
proves it released (``_ownership``). It never builds an answer either: every way a call
ends is an ``Ended`` that ``_shell_answer`` turns into the model's answer.

Cancellation before the start is definitive; from the start on, the same bounded
stop/grace/force/join runs shielded and the ``CancelledError`` propagates with an
uncertain, never-retry ``Interruption``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Final, final

from spice.agent.process import (
    ExecutableNotFound,
    ExecutableResolver,
    Launcher,
    LaunchError,
    Lookup,
    Outcome,
    Process,
    Spec,
)
from spice.agent.tool import (
    Capability,
    ExecutionError,
    ExecutionState,
    Interruption,
    RetryDisposition,
)

from ._capture import Capture
from ._config import Config, absolute
from ._ownership import Entry, Owner, Ticket
from ._platform import workdir_check
from ._progress import attach
from ._root import PathError, open_directory, open_root
from ._sandbox_fields import sandbox_fields
from ._shell_answer import Ended
from ._shell_arguments import ShellArguments
from ._shell_launcher import (
    DryRunLauncher,
    launcher_dry_runs,
    launcher_text,
    process_cleaned_up,
    process_hint,
)
from ._shell_problems import GLOB_HINT
from ._shell_problems import PROBLEMS as _PROBLEMS
from .settling import deliver_cancellation, settle

__all__ = [
    "FINISH_SETTLE_SECONDS",
    "FORCE_WAIT_SECONDS",
    "SIGNAL_SECONDS",
    "START_SETTLE_SECONDS",
    "CommandRunner",
]

SIGNAL_SECONDS: Final = 5.0
"""Longest a ``request_stop`` or ``force_kill`` call may take."""

FORCE_WAIT_SECONDS: Final = 5.0
"""How long to wait for the exit after a force kill before going on to the join."""

START_SETTLE_SECONDS: Final = 10.0
"""How long a cancelled call waits for a launcher start already under way to settle."""

FINISH_SETTLE_SECONDS: Final = 60.0
"""How long a cancelled call waits for its process to be stopped and joined; longer than
the stop's own bounds with the default timing (5 + 2 + 5 + 5 + 30 = 47 seconds)."""

_RETRY: Final = RetryDisposition.NEVER
_DEFINITIVE: Final = ExecutionState.DEFINITIVE
_UNCERTAIN: Final = ExecutionState.UNCERTAIN

_RESOLVER_FAILED: Final = "the executable resolver failed; no process was started"
_LAUNCHER_FAILED: Final = "the process launcher failed; a process may have been started"
_JOIN_FAILED: Final = "the command's process could not be proven released"
_PARTIAL_START: Final = "the command may have started; it was stopped"
"""A start that failed after its process existed (``LaunchError(process)``)."""

_WORKDIR_CODES: Final = frozenset(
    {"invalid_arguments", "root_unavailable", "path_escape", "workdir_unavailable"}
)
"""Codes a workdir check keeps; every other path failure is ``workdir_unavailable``."""


def _absolute(root: str, cleaned: str) -> str:
    return root if cleaned == "." else os.path.normpath(os.path.join(root, cleaned))


def _inspect_workdir(root: str, cleaned: str) -> tuple[tuple[int, int], str]:
    """Open the workdir beneath the root with no symlink component; its identity and path.

    Runs in a worker thread; every descriptor it opens is closed before it returns, so
    a cancelled caller leaks nothing. The absolute path the launcher will use is built
    on the root's resolved path (the root is trusted configuration and may sit below a
    symlink, such as macOS ``/tmp``), so it has no symlink component at all: a launcher
    can enter it without following one (``PosixLauncher`` does). It must name the same
    directory as the descriptor.
    """
    try:
        root_fd = open_root(root)
        try:
            directory_fd = open_directory(root_fd, cleaned, follow_symlinks=False)
            try:
                held = os.fstat(directory_fd)
            finally:
                os.close(directory_fd)
        finally:
            os.close(root_fd)
    except OSError:
        raise PathError("workdir_unavailable", _PROBLEMS["workdir_unavailable"]) from None
    try:
        path = _absolute(os.path.realpath(root), cleaned)
        named = os.stat(path)
    except OSError:
        raise PathError("workdir_unavailable", _PROBLEMS["workdir_changed"]) from None
    if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
        raise PathError("workdir_unavailable", _PROBLEMS["workdir_changed"])
    return (held.st_dev, held.st_ino), path


def _environment(allowlist: tuple[str, ...], environ: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(f"{name}={environ[name]}" for name in allowlist if name in environ)


def _is_absolute_canonical(path: object) -> bool:
    return (
        isinstance(path, str)
        and "\0" not in path
        and absolute(path)
        and os.path.normpath(path) == path
        and not path.startswith("//")
    )


@final
@dataclass(frozen=True, slots=True)
class _Started:
    entry: Entry | None
    partial: bool
    reason: str | None = None


@final
@dataclass(frozen=True, slots=True)
class _Finished:
    joined: bool
    clean: bool


@final
class _NotAProcess(Exception):
    """The launcher answered a start with something that is not a ``Process``."""


@final
class CommandRunner:
    """Runs the commands of one ``shell`` tool: its config, resolver, launcher and owner."""

    __slots__ = ("_capabilities", "_config", "_grace", "_launcher", "_owner", "_resolver")

    def __init__(
        self,
        config: Config,
        resolver: ExecutableResolver,
        launcher: Launcher,
        owner: Owner,
        *,
        capabilities: tuple[Capability, ...],
        grace_seconds: float,
    ) -> None:
        self._capabilities = capabilities
        self._config = config
        self._resolver = resolver
        self._launcher = launcher
        self._owner = owner
        self._grace = grace_seconds

    async def run(self, call_id: str, arguments: ShellArguments, *, contained: bool) -> Ended:
        """Admit, start, wait for and join one command; how it ended. ``contained`` is the
        launcher's, read once by the call (a contained command's failure gets its hint)."""
        if arguments.batch_file:
            return Ended(arguments.workdir, ("invalid_arguments", _PROBLEMS["batch_file"]))
        if arguments.dry_run and not launcher_dry_runs(self._launcher):
            unavailable = _PROBLEMS["dry_run_unavailable"]
            return Ended(arguments.workdir, ("invalid_arguments", unavailable))
        ticket = self._owner.admit()
        if isinstance(ticket, str):
            return Ended(arguments.workdir, (ticket, _PROBLEMS[ticket]))
        try:
            return await self._run(call_id, arguments, ticket, contained)
        finally:
            ticket.leave()

    async def _run(
        self, call_id: str, arguments: ShellArguments, ticket: Ticket, contained: bool
    ) -> Ended:
        capture = Capture(self._config.max_output_bytes)
        try:
            prepared = await self._prepare(call_id, arguments, capture)
            if not isinstance(prepared, Ended):
                await deliver_cancellation()  # no launch after an observed cancellation
        except asyncio.CancelledError as cancelled:
            attach(cancelled, Interruption(call_id, _DEFINITIVE, _RETRY))
            raise
        if isinstance(prepared, Ended):
            return prepared
        ticket.starting = True  # from here the start task, not the call, settles the slot
        starting = self._owner.spawn(self._start(prepared, ticket, dry_run=arguments.dry_run))
        try:
            started = await asyncio.shield(starting)
        except asyncio.CancelledError as cancelled:
            if not _being_cancelled():
                raise ExecutionError(call_id, _UNCERTAIN, _RETRY, _LAUNCHER_FAILED) from None
            await self._settle_cancelled_start(call_id, starting, cancelled)
            raise
        except Exception:  # noqa: BLE001 - a launcher breaking its contract is a host failure
            raise ExecutionError(call_id, _UNCERTAIN, _RETRY, _LAUNCHER_FAILED) from None
        if started.entry is None:
            problem = started.reason or _PROBLEMS["launch_failed"]
            return Ended(arguments.workdir, ("launch_failed", problem), capture=capture)
        if started.partial:
            finished = await self._finish_shielded(call_id, started.entry, stop=True)
            if not finished.joined:
                raise ExecutionError(call_id, _UNCERTAIN, _RETRY, _JOIN_FAILED) from None
            partial = ("launch_failed", _PARTIAL_START)
            return Ended(arguments.workdir, partial, _UNCERTAIN, capture)
        return await self._supervise(call_id, arguments, started.entry, capture, contained)

    async def _prepare(
        self, call_id: str, arguments: ShellArguments, capture: Capture
    ) -> Spec | Ended:
        root, cleaned = self._config.root, arguments.workdir
        try:
            identity, workdir = await asyncio.to_thread(
                workdir_check(_inspect_workdir), root, cleaned
            )
        except PathError as error:
            return Ended(cleaned, _workdir_problem(error))
        environment = _environment(self._config.environment_allowlist, os.environ)
        lookup = Lookup(arguments.argv[0], workdir, environment)
        executable = await _resolve(self._resolver, lookup, call_id, arguments)
        if isinstance(executable, Ended):
            return executable
        try:
            again = await asyncio.to_thread(workdir_check(_inspect_workdir), root, cleaned)
        except PathError as error:
            return Ended(cleaned, _workdir_problem(error))
        if again != (identity, workdir):
            return Ended(cleaned, ("workdir_unavailable", _PROBLEMS["workdir_changed"]))
        return Spec(
            executable,
            arguments.argv[1:],
            workdir,
            environment,
            b"",
            capture.stdout,
            capture.stderr,
            self._capabilities,
        )

    async def _start(self, spec: Spec, ticket: Ticket, *, dry_run: bool) -> _Started:
        """Start through the launcher and own what it returns at once (a spawned task);
        ``dry_run``: through its dry start (``DryRunLauncher``), checked before."""
        try:
            launcher = self._launcher
            if not dry_run:
                process = await launcher.start(spec)
            elif launcher_dry_runs(launcher) and isinstance(launcher, DryRunLauncher):
                process = await launcher.start_dry_run(spec)
            else:  # never started for real: run() refused this already
                ticket.release_slot()
                return _Started(None, partial=False, reason=_PROBLEMS["dry_run_unavailable"])
        except LaunchError as error:
            partial: object = error.process
            if partial is None:
                ticket.release_slot()
                return _Started(None, partial=False, reason=launcher_text(error.reason))
            return _Started(self._own(ticket, partial), partial=True)
        except BaseException:
            ticket.release_slot()
            raise
        return _Started(self._own(ticket, process), partial=False)

    def _own(self, ticket: Ticket, process: object) -> Entry:
        """Own what the launcher gave; something that is no ``Process`` cannot be owned.

        A start that answered with something else (``None``, a pid, ...) may still have
        started a process nobody can stop or join: the call fails uncertain, and the
        slot goes back, since there is nothing ``Cleanup`` could ever join.
        """
        if not isinstance(process, Process):
            ticket.release_slot()
            raise _NotAProcess
        return self._owner.own(ticket, process)

    async def _settle_cancelled_start(
        self, call_id: str, starting: asyncio.Task[_Started], cancelled: asyncio.CancelledError
    ) -> None:
        """The caller was cancelled while the launcher was starting: settle, bounded."""
        settling = self._owner.spawn(self._abandon(starting))
        # Repeated cancellations are held back until the start settled or the bound
        # passed (``settling``); past the bound the settling goes on as a tracked task
        # that Cleanup waits for. The caller re-raises its first cancellation.
        settled = await settle(settling, START_SETTLE_SECONDS)
        state = _UNCERTAIN
        # A settling task cancelled by the loop's shutdown is not settled: nothing is known.
        if (
            settled.done
            and not settling.cancelled()
            and settling.exception() is None
            and not settling.result()
        ):
            state = _DEFINITIVE  # the start created nothing
        attach(cancelled, Interruption(call_id, state, _RETRY))

    async def _abandon(self, starting: asyncio.Task[_Started]) -> bool:
        """Wait for the start; stop and join whatever it produced. ``True`` if a process was."""
        try:
            started = await starting
        except Exception:  # noqa: BLE001 - a broken launcher: nothing known to own
            return True
        if started.entry is None:
            return False
        await self._finish(started.entry, stop=True)
        return True

    async def _supervise(
        self,
        call_id: str,
        arguments: ShellArguments,
        entry: Entry,
        capture: Capture,
        contained: bool,
    ) -> Ended:
        process = entry.process
        stop = False
        timed_out = False
        try:
            async with asyncio.timeout(arguments.timeout):
                await process.wait_exit()
        except TimeoutError:
            stop = timed_out = True
        except asyncio.CancelledError as cancelled:
            if not _being_cancelled():
                stop = True  # the platform's wait raised it, not the caller: an unknown exit
            else:
                await self._finish_after_cancel(entry, call_id, cancelled)
                raise
        except Exception:  # noqa: BLE001 - the exit is unknown: stop, join, ask for the outcome
            stop = True
        finished = await self._finish_shielded(call_id, entry, stop=stop)
        if not finished.joined:
            raise ExecutionError(call_id, _UNCERTAIN, _RETRY, _JOIN_FAILED) from None
        outcome = _outcome(process)
        problem = _verdict(timed_out, outcome)
        if problem is not None and problem[0] == "command_failed" and arguments.arguments_globbed:
            problem = (problem[0], problem[1] + GLOB_HINT)
        return Ended(
            arguments.workdir,
            problem,
            _UNCERTAIN,
            capture,
            exit_code=-1 if outcome.exit_code is None else outcome.exit_code,
            timed_out=timed_out,
            managed_cleanup_completed=finished.clean,
            sandbox_hint=process_hint(process) if problem is not None and contained else None,
            sandbox=sandbox_fields(process),
        )

    async def _finish_shielded(self, call_id: str, entry: Entry, *, stop: bool) -> _Finished:
        finishing = self._owner.spawn(self._finish(entry, stop=stop))
        try:
            return await asyncio.shield(finishing)
        except asyncio.CancelledError as cancelled:
            if not _being_cancelled():
                raise ExecutionError(call_id, _UNCERTAIN, _RETRY, _JOIN_FAILED) from None
            await _outlast(finishing)
            attach(cancelled, Interruption(call_id, _UNCERTAIN, _RETRY))
            raise

    async def _finish_after_cancel(
        self, entry: Entry, call_id: str, cancelled: asyncio.CancelledError
    ) -> None:
        finishing = self._owner.spawn(self._finish(entry, stop=True))
        await _outlast(finishing)
        attach(cancelled, Interruption(call_id, _UNCERTAIN, _RETRY))

    async def _finish(self, entry: Entry, *, stop: bool) -> _Finished:
        """Stop (request, grace, force) when asked, then join once. Bounded; never raises."""
        process = entry.process
        clean = True
        if stop and not _done(process):
            clean = await _signal(process.request_stop()) and clean
            if not await _exited(process, self._grace):
                clean = await _signal(process.force_kill()) and clean
                clean = await _exited(process, FORCE_WAIT_SECONDS) and clean
        joined = await self._owner.join(entry)
        return _Finished(joined, clean and process_cleaned_up(process))


async def _resolve(
    resolver: ExecutableResolver, lookup: Lookup, call_id: str, arguments: ShellArguments
) -> str | Ended:
    """The executable ``lookup`` names (absolute, canonical), or the model's refusal."""
    try:
        executable = await resolver.resolve(lookup)
    except ExecutableNotFound:
        # One element holding a whole command line is the usual mistake: teach the split.
        spaced = any(char.isspace() for char in lookup.requested_executable)
        problem = _PROBLEMS["split_argv" if spaced else "command_not_found"]
        if arguments.program_globbed:
            problem += GLOB_HINT
        return Ended(arguments.workdir, ("command_not_found", problem))
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        raise ExecutionError(call_id, _DEFINITIVE, _RETRY, _RESOLVER_FAILED) from None
    except Exception:  # noqa: BLE001 - any other resolver failure is a host failure
        raise ExecutionError(call_id, _DEFINITIVE, _RETRY, _RESOLVER_FAILED) from None
    if not _is_absolute_canonical(executable):
        raise ExecutionError(call_id, _DEFINITIVE, _RETRY, _RESOLVER_FAILED) from None
    return executable


def _verdict(timed_out: bool, outcome: Outcome) -> tuple[str, str] | None:
    """The answer's code and problem for a command that ran (``None``: success)."""
    if timed_out:
        return "timed_out", _PROBLEMS["timed_out"]
    if outcome.successful:
        return None
    return "command_failed", _PROBLEMS[outcome.kind.value]


async def _outlast(task: asyncio.Task[_Finished] | asyncio.Task[bool]) -> None:
    """Wait for a tracked, internally bounded task while the caller is being cancelled.

    Further cancellations are held back (``settling``) until the task is done or
    ``FINISH_SETTLE_SECONDS`` passed (then the task goes on, tracked by the owner, and
    ``Cleanup`` waits for it); the caller re-raises its first ``CancelledError``, so no
    cancellation is lost. The task reports through ownership, not here.
    """
    await settle(task, FINISH_SETTLE_SECONDS)


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _done(process: Process) -> bool:
    try:
        return bool(process.done())
    except Exception:  # noqa: BLE001 - a failing probe counts as "still running"
        return False


async def _signal(request: Awaitable[None]) -> bool:
    try:
        async with asyncio.timeout(SIGNAL_SECONDS):
            await request
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        return False  # the platform's own CancelledError: a failed request
    except Exception:  # noqa: BLE001 - a failed or slow stop request is recorded, not raised
        return False
    return True


async def _exited(process: Process, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await process.wait_exit()
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        return False  # the platform's own CancelledError: not known exited
    except Exception:  # noqa: BLE001 - an expired bound or a failing wait: not known exited
        return False
    return True


def _outcome(process: Process) -> Outcome:
    try:
        outcome = process.result()
    except Exception:  # noqa: BLE001 - no outcome is an unknown outcome
        return Outcome.unknown()
    return outcome if isinstance(outcome, Outcome) else Outcome.unknown()


def _workdir_problem(error: PathError) -> tuple[str, str]:
    if error.code in _WORKDIR_CODES:
        return error.code, error.message
    return "workdir_unavailable", _PROBLEMS["workdir_unavailable"]
