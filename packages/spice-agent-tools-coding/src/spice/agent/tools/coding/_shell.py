"""The ``shell`` tool: one program, discrete argv, a checked workdir, bounded output.

The tool never starts a process itself: it asks the injected resolver for the
executable and the injected launcher for the process, then owns what it gets
until a join proves it released (see ``_ownership``). One call::

    progress ─► name, platform, arguments ─► admission ─► workdir (no symlink component)
      ─► lookup ─► resolve ─► workdir again ─► start ─► own ─► wait for exit
      (timeout ─► stop, grace, force) ─► join ─► outcome ─► bounded output (``_capture``)

Every answer, success or failure, carries the same shell fields (``_Frame.content``),
among them ``contained``: the launcher's optional attribute, read once per call.

Cancellation before the start is definitive; from the start on, the same bounded
stop/grace/force/join runs shielded and the ``CancelledError`` propagates with an
uncertain, never-retry ``Interruption``.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Final, final

from spice.agent.lifecycle import Cleanup
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
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    ExecutionState,
    Interruption,
    ReplaySafety,
    Reporter,
    Result,
    RetryDisposition,
    Tool,
)

from ._arguments import ArgumentError, decode_object, take_number, take_string, take_string_list
from ._capture import Capture, Captured
from ._config import Config, absolute
from ._ownership import Entry, Owner, Ticket, Timing
from ._paths import ABSOLUTE_ELSEWHERE
from ._platform import batch_file, clean_path, is_windows, workdir_check
from ._results import (
    answer_fits,
    attach,
    encode,
    failure,
    report_progress,
    success,
)
from ._root import PathError, open_directory, open_root
from ._sandbox_fields import sandbox_fields
from ._shell_description import MAXIMUM_ARGV_BYTES, MAXIMUM_ARGV_ITEMS, _number, shell_description
from ._shell_launcher import (
    launcher_contained,
    launcher_containment,
    launcher_text,
    process_cleaned_up,
    process_hint,
)
from ._shell_problems import GLOB_HINT, globbed
from ._shell_problems import PROBLEMS as _PROBLEMS
from .settling import deliver_cancellation, settle

NAME: Final = "shell"
GRACE_SECONDS: Final = 2.0
"""How long a process has to exit after the stop request before it is force-killed."""

SIGNAL_SECONDS: Final = 5.0
"""Longest a ``request_stop`` or ``force_kill`` call may take."""

FORCE_WAIT_SECONDS: Final = 5.0
"""How long to wait for the exit after a force kill before going on to the join."""

START_SETTLE_SECONDS: Final = 10.0
"""How long a cancelled call waits for a launcher start already under way to settle."""

FINISH_SETTLE_SECONDS: Final = 60.0
"""How long a cancelled call waits for its process to be stopped and joined; longer than
the stop's own bounds with the default timing (5 + 2 + 5 + 5 + 30 = 47 seconds)."""

PROGRESS: Final = "starting a command"
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


def _capabilities() -> tuple[Capability, ...]:
    return tuple(Capability)


def _schema(config: Config) -> dict[str, object]:
    """The input schema: optional properties are nullable (null means absent).

    Defaults and bounds are stated in the descriptions, not as ``default`` or
    ``minLength`` keywords, which clients that make schemas strict refuse; the decoder
    enforces every rule itself.
    """
    timeout = _number(config.command_timeout)
    return {
        "type": "object",
        "properties": {
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": MAXIMUM_ARGV_ITEMS,
                "description": (
                    f"The program and its arguments: 1 to {MAXIMUM_ARGV_ITEMS} non-empty "
                    f"strings, at most {MAXIMUM_ARGV_BYTES} bytes together, passed literally "
                    "(no shell). argv[0] without '/' is looked up in PATH only; use ./name "
                    "for a program in the workdir."
                ),
            },
            "workdir": {
                "type": ["string", "null"],
                "description": (
                    "The directory to run in: relative to the worktree root, or absolute "
                    "beneath it; default the root."
                ),
            },
            "timeout_seconds": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "maximum": config.command_timeout,
                "description": (
                    f"Seconds before the program is stopped: more than 0, at most {timeout}; "
                    f"default {timeout}."
                ),
            },
        },
        "required": ["argv"],
        "additionalProperties": False,
    }


@final
@dataclass(frozen=True, slots=True)
class _Arguments:
    argv: tuple[str, ...]
    workdir: str
    timeout: float


def _parse(arguments: str, config: Config) -> _Arguments:
    values = decode_object(arguments, frozenset({"argv", "workdir", "timeout_seconds"}))
    if "argv" not in values:
        raise ArgumentError("argv is required")
    argv = take_string_list(values, "argv")
    if not argv:
        raise ArgumentError("argv must name a program: it needs at least 1 element")
    if len(argv) > MAXIMUM_ARGV_ITEMS:
        raise ArgumentError(f"argv must have at most {MAXIMUM_ARGV_ITEMS} elements")
    if any(not item for item in argv):
        raise ArgumentError("argv elements must not be empty")
    if any("\0" in item for item in argv):
        raise ArgumentError("argv elements must not contain NUL")
    if sum(len(item.encode("utf-8")) for item in argv) > MAXIMUM_ARGV_BYTES:
        raise ArgumentError(f"argv must be at most {MAXIMUM_ARGV_BYTES} bytes together")
    workdir = take_string(values, "workdir", required=False)
    timeout = take_number(values, "timeout_seconds")
    if timeout is None:
        timeout = config.command_timeout
    elif not timeout > 0:
        raise ArgumentError("timeout_seconds must be greater than 0")
    elif not (math.isfinite(timeout) and timeout <= config.command_timeout):
        raise ArgumentError("timeout_seconds must be at most the configured command timeout")
    try:
        cleaned = "." if workdir is None else clean_path(workdir, root=config.root)
    except PathError as error:
        # An absolute workdir elsewhere: the path check's own words, which name the root
        # (as read and replace answer); on Windows also a path rooted on the current drive.
        if config.root in error.message:
            raise ArgumentError(f"workdir: {error.message}") from None
        if workdir is not None and (absolute(workdir) or workdir[:1] in {"/", "\\"}):
            raise ArgumentError(f"workdir: {ABSOLUTE_ELSEWHERE} ({config.root})") from None
        raise ArgumentError(
            "workdir must be a relative path, or an absolute one beneath the worktree "
            "root, that stays in the root"
        ) from None
    return _Arguments(tuple(argv), cleaned, timeout)


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
@dataclass(frozen=True, slots=True)
class _Frame:
    """What every answer of one call shares: its cleaned workdir and ``contained``.

    ``workdir`` is ``None`` only when the arguments were not decoded (wrong tool name,
    unsupported platform, invalid arguments).
    """

    workdir: str | None
    contained: bool

    def content(
        self,
        capture: Capture | None,
        *,
        exit_code: int = -1,
        timed_out: bool = False,
        managed_cleanup_completed: bool = False,
        problem: tuple[str, str] | None = None,
        sandbox_hint: str | None = None,
        sandbox: Mapping[str, object] | None = None,
    ) -> dict[str, object]:
        """Every shell field (``ok``, ``code`` and ``message`` are added by the caller).

        The defaults are those of a command that did not run: no exit code (-1), no
        output, no timeout, no completed managed cleanup.
        """
        content: dict[str, object] = {
            "workdir": self.workdir,
            "exit_code": exit_code,
            "timed_out": timed_out,
            "managed_cleanup_completed": managed_cleanup_completed,
            "contained": self.contained,
        }
        if sandbox_hint is not None:
            content["sandbox_hint"] = sandbox_hint
        if sandbox:
            content.update(sandbox)  # network_refused, protected_restored: _sandbox_fields
        content.update(_output_fields(capture or Capture(1), problem, content))
        return content


def _definition(config: Config, launcher: Launcher) -> Definition:
    """``shell``'s definition: its description states the bounds and the launcher's text."""
    return Definition(
        NAME,
        shell_description(config, launcher_containment(launcher)),
        _schema(config),
        Effect.MUTATING,
        ReplaySafety.UNSAFE,
        _capabilities(),
    )


@final
class _Shell:
    """The ``shell`` tool of one ``new_shell`` call."""

    __slots__ = ("_config", "_definition", "_grace", "_launcher", "_owner", "_posix", "_resolver")

    def __init__(
        self,
        config: Config,
        resolver: ExecutableResolver,
        launcher: Launcher,
        owner: Owner,
        *,
        grace_seconds: float,
        posix: bool,
    ) -> None:
        self._config = config
        self._resolver = resolver
        self._launcher = launcher
        self._owner = owner
        self._grace = grace_seconds
        self._posix = posix
        self._definition = _definition(config, launcher)

    @property
    def definition(self) -> Definition:
        """``shell``: mutating, unsafe, all seven capabilities."""
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Run one command; see the module docstring for the steps."""
        await report_progress(call, reporter, PROGRESS, _RETRY)
        # Read once per call, before anything can fail, so every answer carries it.
        unparsed = _Frame(None, launcher_contained(self._launcher))
        if call.name != NAME:
            return _refuse(call, "invalid_arguments", _PROBLEMS["wrong_tool"], unparsed)
        if not self._posix:
            return _refuse(
                call, "unsupported_platform", _PROBLEMS["unsupported_platform"], unparsed
            )
        try:
            arguments = _parse(call.arguments, self._config)
        except ArgumentError as error:
            return _refuse(call, "invalid_arguments", str(error), unparsed)
        frame = _Frame(arguments.workdir, unparsed.contained)
        if is_windows() and batch_file(arguments.argv[0]):
            return _refuse(call, "invalid_arguments", _PROBLEMS["batch_file"], frame)
        ticket = self._owner.admit()
        if isinstance(ticket, str):
            return _refuse(call, ticket, _PROBLEMS[ticket], frame)
        try:
            return await self._run(call, arguments, ticket, frame)
        finally:
            ticket.leave()

    async def _run(
        self, call: Call, arguments: _Arguments, ticket: Ticket, frame: _Frame
    ) -> Result:
        capture = Capture(self._config.max_output_bytes)
        try:
            prepared = await self._prepare(call, arguments, capture, frame)
            if not isinstance(prepared, Result):
                await deliver_cancellation()  # no launch after an observed cancellation
        except asyncio.CancelledError as cancelled:
            attach(cancelled, Interruption(call.id, _DEFINITIVE, _RETRY))
            raise
        if isinstance(prepared, Result):
            return prepared
        ticket.starting = True  # from here the start task, not the call, settles the slot
        starting = self._owner.spawn(self._start(prepared, ticket))
        try:
            started = await asyncio.shield(starting)
        except asyncio.CancelledError as cancelled:
            if not _being_cancelled():
                raise ExecutionError(call.id, _UNCERTAIN, _RETRY, _LAUNCHER_FAILED) from None
            await self._settle_cancelled_start(call, starting, cancelled)
            raise
        except Exception:  # noqa: BLE001 - a launcher breaking its contract is a host failure
            raise ExecutionError(call.id, _UNCERTAIN, _RETRY, _LAUNCHER_FAILED) from None
        if started.entry is None:
            problem = started.reason or _PROBLEMS["launch_failed"]
            return _refuse(call, "launch_failed", problem, frame, capture)
        if started.partial:
            finished = await self._finish_shielded(call, started.entry, stop=True)
            if not finished.joined:
                raise ExecutionError(call.id, _UNCERTAIN, _RETRY, _JOIN_FAILED) from None
            content = frame.content(capture, problem=("launch_failed", _PARTIAL_START))
            return failure(call, "launch_failed", _PARTIAL_START, _UNCERTAIN, _RETRY, content)
        return await self._supervise(call, arguments, started.entry, capture, frame)

    async def _prepare(
        self, call: Call, arguments: _Arguments, capture: Capture, frame: _Frame
    ) -> Spec | Result:
        root, cleaned = self._config.root, arguments.workdir
        try:
            identity, workdir = await asyncio.to_thread(
                workdir_check(_inspect_workdir), root, cleaned
            )
        except PathError as error:
            return _refuse(call, *_workdir_problem(error), frame)
        environment = _environment(self._config.environment_allowlist, os.environ)
        lookup = Lookup(arguments.argv[0], workdir, environment)
        executable = await _resolve(self._resolver, lookup, call, frame)
        if isinstance(executable, Result):
            return executable
        try:
            again = await asyncio.to_thread(workdir_check(_inspect_workdir), root, cleaned)
        except PathError as error:
            return _refuse(call, *_workdir_problem(error), frame)
        if again != (identity, workdir):
            return _refuse(call, "workdir_unavailable", _PROBLEMS["workdir_changed"], frame)
        return Spec(
            executable,
            arguments.argv[1:],
            workdir,
            environment,
            b"",
            capture.stdout,
            capture.stderr,
            self._definition.capabilities,
        )

    async def _start(self, spec: Spec, ticket: Ticket) -> _Started:
        """Start through the launcher and own what it returns at once (a spawned task)."""
        try:
            process = await self._launcher.start(spec)
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
        self, call: Call, starting: asyncio.Task[_Started], cancelled: asyncio.CancelledError
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
        attach(cancelled, Interruption(call.id, state, _RETRY))

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
        self, call: Call, arguments: _Arguments, entry: Entry, capture: Capture, frame: _Frame
    ) -> Result:
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
                await self._finish_after_cancel(entry, call, cancelled)
                raise
        except Exception:  # noqa: BLE001 - the exit is unknown: stop, join, ask for the outcome
            stop = True
        finished = await self._finish_shielded(call, entry, stop=stop)
        if not finished.joined:
            raise ExecutionError(call.id, _UNCERTAIN, _RETRY, _JOIN_FAILED) from None
        outcome = _outcome(process)
        code, problem = _verdict(timed_out, outcome)
        if code == "command_failed" and problem is not None and globbed(arguments.argv[1:]):
            problem += GLOB_HINT
        content = frame.content(
            capture,
            exit_code=-1 if outcome.exit_code is None else outcome.exit_code,
            timed_out=timed_out,
            managed_cleanup_completed=finished.clean,
            problem=(code, problem) if code is not None and problem is not None else None,
            sandbox_hint=process_hint(process) if code is not None and frame.contained else None,
            sandbox=sandbox_fields(process),
        )
        if code is None or problem is None:
            return success(call, content, _UNCERTAIN, _RETRY)
        return failure(call, code, problem, _UNCERTAIN, _RETRY, content)

    async def _finish_shielded(self, call: Call, entry: Entry, *, stop: bool) -> _Finished:
        finishing = self._owner.spawn(self._finish(entry, stop=stop))
        try:
            return await asyncio.shield(finishing)
        except asyncio.CancelledError as cancelled:
            if not _being_cancelled():
                raise ExecutionError(call.id, _UNCERTAIN, _RETRY, _JOIN_FAILED) from None
            await _outlast(finishing)
            attach(cancelled, Interruption(call.id, _UNCERTAIN, _RETRY))
            raise

    async def _finish_after_cancel(
        self, entry: Entry, call: Call, cancelled: asyncio.CancelledError
    ) -> None:
        finishing = self._owner.spawn(self._finish(entry, stop=True))
        await _outlast(finishing)
        attach(cancelled, Interruption(call.id, _UNCERTAIN, _RETRY))

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
    resolver: ExecutableResolver, lookup: Lookup, call: Call, frame: _Frame
) -> str | Result:
    """The executable ``lookup`` names (absolute, canonical), or the model's refusal."""
    try:
        executable = await resolver.resolve(lookup)
    except ExecutableNotFound:
        # One element holding a whole command line is the usual mistake: teach the split.
        spaced = any(char.isspace() for char in lookup.requested_executable)
        problem = _PROBLEMS["split_argv" if spaced else "command_not_found"]
        if globbed((lookup.requested_executable,)):
            problem += GLOB_HINT
        return _refuse(call, "command_not_found", problem, frame)
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        raise ExecutionError(call.id, _DEFINITIVE, _RETRY, _RESOLVER_FAILED) from None
    except Exception:  # noqa: BLE001 - any other resolver failure is a host failure
        raise ExecutionError(call.id, _DEFINITIVE, _RETRY, _RESOLVER_FAILED) from None
    if not _is_absolute_canonical(executable):
        raise ExecutionError(call.id, _DEFINITIVE, _RETRY, _RESOLVER_FAILED) from None
    return executable


def _verdict(timed_out: bool, outcome: Outcome) -> tuple[str | None, str | None]:
    """The answer's code and problem for a command that ran (``None``, ``None``: success)."""
    if timed_out:
        return "timed_out", _PROBLEMS["timed_out"]
    if outcome.successful:
        return None, None
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


def _output_fields(
    capture: Capture, problem: tuple[str, str] | None, content: Mapping[str, object]
) -> dict[str, object]:
    """Text when both streams are UTF-8 and their JSON-escaped text keeps the answer within
    the bound; else base64 of the whole capture (the seed's rule, contract 12.4).

    Output of NUL or control bytes escapes to six times its size: base64 (4 characters for
    3 bytes) carries it whole instead, so a capture is never shortened where base64 fits;
    with ``max_output_bytes`` at most 512 KiB it always does. Only a base64 answer still
    past the bound keeps less of each stream's middle: the largest capture budget whose
    answer fits, found by bisection (at most ``log2(max_output_bytes) + 1`` encodings).
    """
    captured = capture.finish()

    def fields_of(captured: Captured, *, text: bool) -> tuple[dict[str, object], bool]:
        fields = captured.fields(text=text)
        whole: dict[str, object] = {"ok": problem is None, **content, **fields}
        if problem is not None:
            whole.update(code=problem[0], message=problem[1])
        return fields, answer_fits(encode(whole))

    fields, fits = fields_of(captured, text=True)
    if fits:
        return fields
    if fields["encoding"] == "utf-8":
        fields, fits = fields_of(captured, text=False)
        if fits:
            return fields
    low, high = 0, captured.stdout.captured + captured.stderr.captured - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fields_of(capture.finish(middle), text=False)[1]:
            low = middle
        else:
            high = middle - 1
    return fields_of(capture.finish(low), text=False)[0]


def _workdir_problem(error: PathError) -> tuple[str, str]:
    if error.code in _WORKDIR_CODES:
        return error.code, error.message
    return "workdir_unavailable", _PROBLEMS["workdir_unavailable"]


def _refuse(
    call: Call, code: str, problem: str, frame: _Frame, capture: Capture | None = None
) -> Result:
    """A failure before anything ran (or a start that created nothing): every shell field."""
    content = frame.content(capture, problem=(code, problem))
    return failure(call, code, problem, _DEFINITIVE, _RETRY, content)


def _posix_platform() -> bool:
    """Whether the shell runs here: POSIX, and Windows (with its own workdir check)."""
    return os.name in {"posix", "nt"}


def _require(value: object, protocol: type, method: str, role: str) -> None:
    """Refuse, at construction, a collaborator that cannot do its part (``TypeError``)."""
    if value is None:
        raise TypeError(f"new_shell needs a {role}; got None")
    if not isinstance(value, protocol) or not callable(getattr(value, method, None)):
        raise TypeError(f"the {role} must implement {protocol.__name__} (a {method} method)")


def build_shell(
    config: Config,
    resolver: ExecutableResolver,
    launcher: Launcher,
    *,
    timing: Timing | None = None,
    grace_seconds: float = GRACE_SECONDS,
    posix: bool | None = None,
) -> tuple[_Shell, Owner]:
    """``new_shell`` with its bounds exposed (tests shorten the grace period and backoff)."""
    _require(resolver, ExecutableResolver, "resolve", "resolver")
    _require(launcher, Launcher, "start", "launcher")
    owner = Owner(timing or Timing())
    shell = _Shell(
        config,
        resolver,
        launcher,
        owner,
        grace_seconds=grace_seconds,
        posix=_posix_platform() if posix is None else posix,
    )
    return shell, owner


def new_shell(
    config: Config, resolver: ExecutableResolver, launcher: Launcher
) -> tuple[Tool, Cleanup]:
    """Build the ``shell`` tool and its ``Cleanup``; performs no process action.

    ``resolver`` and ``launcher`` are required: ``None``, or an object without a callable
    ``resolve`` / ``start``, is a ``TypeError`` here rather than a failure of every call.
    A launcher may have the optional read-only attribute ``contained: bool``; every shell
    result reports it (absent or not a ``bool`` counts as ``False``).

    >>> tool, cleanup = new_shell(Config("/work/tree"), resolver, launcher)  # doctest: +SKIP
    >>> result = await Dispatcher([tool]).dispatch(Call("1", "shell", '{"argv":["ls"]}'))
    """
    shell, owner = build_shell(config, resolver, launcher)
    return shell, owner.cleanup
