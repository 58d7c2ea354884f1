"""Hand-written, typed fakes of the process platform and the reporter (no mocks).

They stand in for faults a real POSIX platform cannot be made to show on demand:
a join that fails, a process that ignores every signal, a start that fails half way.
Every fake counts what it was asked to do, so tests can say "exactly once".
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast, final

from spice.agent.process import (
    LaunchError,
    Lookup,
    Operation,
    Outcome,
    Process,
    ProcessFailure,
    Spec,
)
from spice.agent.tool import Call, Progress, Result

TRUE = os.path.abspath("/usr/bin/true")
"""The resolver fake's default answer: an absolute path on every platform."""


@final
class RecordingReporter:
    """Records every progress message; raises ``failure`` (when set) after recording it."""

    def __init__(self, failure: BaseException | None = None) -> None:
        self.messages: list[Progress] = []
        self._failure = failure

    async def report(self, progress: Progress) -> None:
        """Record, then fail if told to."""
        self.messages.append(progress)
        if self._failure is not None:
            raise self._failure


@final
class FakeResolver:
    """Answers every lookup with ``answer`` (a path, or an exception to raise).

    ``during`` runs inside each lookup (between the two workdir checks). ``gate``, when
    given, holds each lookup until it is set; ``entered`` is set when a lookup arrives,
    so a test can cancel a call while it is being resolved.
    """

    def __init__(
        self,
        answer: str | BaseException = TRUE,
        gate: asyncio.Event | None = None,
        during: Callable[[], None] | None = None,
    ) -> None:
        self.lookups: list[Lookup] = []
        self.entered = asyncio.Event()
        self._answer = answer
        self._gate = gate
        self._during = during

    async def resolve(self, lookup: Lookup) -> str:
        """Record the lookup; run ``during`` (a race to plant); wait for the gate; answer."""
        self.lookups.append(lookup)
        self.entered.set()
        if self._during is not None:
            self._during()
        if self._gate is not None:
            await self._gate.wait()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer


JoinStep = BaseException | None
"""One scripted answer of ``FakeProcess.wait``: ``None`` succeeds, an exception is raised."""


@final
class FakeProcess:
    """A process whose exit, signals and joins are scripted.

    ``outcome`` is how it ends when it exits on its own (``exit_now`` makes it exit at
    once, otherwise ``exit_with`` ends it). ``obeys_stop=False`` ignores ``request_stop``;
    ``force_kill`` always ends it. ``joins`` scripts successive ``wait`` answers (after
    the script, every join succeeds; ``join_gate`` holds each join until set).
    ``stop_failure`` makes ``request_stop`` raise; ``exit_failure`` makes ``wait_exit``
    raise; ``result_failure`` makes ``result`` raise. ``stdout``/``stderr`` chunks are written into
    the spec's sinks by ``FakeLauncher`` at start.
    """

    def __init__(
        self,
        *,
        outcome: Outcome | None = None,
        exit_now: bool = True,
        obeys_stop: bool = True,
        joins: Iterable[JoinStep] = (),
        stdout: Sequence[bytes] = (),
        stderr: Sequence[bytes] = (),
        exit_failure: BaseException | None = None,
        result_failure: bool = False,
        stop_failure: BaseException | None = None,
        join_gate: asyncio.Event | None = None,
    ) -> None:
        self.outcome = Outcome.exited(0) if outcome is None else outcome
        self.obeys_stop = obeys_stop
        self.stdout = tuple(stdout)
        self.stderr = tuple(stderr)
        self._joins = list(joins)
        self._exit_failure = exit_failure
        self._result_failure = result_failure
        self._stop_failure = stop_failure
        self._join_gate = join_gate
        self.join_entered = asyncio.Event()
        """Set when a join starts (it then waits for ``join_gate``, when given)."""
        self._exited = asyncio.Event()
        self.waiting_exit = asyncio.Event()
        """Set once someone waits for the exit: the process is running and watched."""
        self.stop_requested = asyncio.Event()
        """Set by the first ``request_stop``."""
        self.stop_calls = 0
        self.kill_calls = 0
        self.wait_calls = 0
        self.joined = False
        if exit_now:
            self._exited.set()

    def exit_with(self, outcome: Outcome) -> None:
        """End the process now with ``outcome``."""
        if not self._exited.is_set():
            self.outcome = outcome
            self._exited.set()

    def done(self) -> bool:
        """True once exited."""
        return self._exited.is_set()

    async def wait_exit(self) -> None:
        """Wait for the exit (or raise the scripted failure)."""
        self.waiting_exit.set()
        if self._exit_failure is not None:
            raise self._exit_failure
        await self._exited.wait()

    def result(self) -> Outcome:
        """The outcome once exited."""
        if self._result_failure or not self._exited.is_set():
            raise ProcessFailure(Operation.RESULT)
        return self.outcome

    async def request_stop(self) -> None:
        """Count; end with a signal unless the process ignores stop requests."""
        self.stop_calls += 1
        self.stop_requested.set()
        if self._stop_failure is not None:
            raise self._stop_failure
        if self.obeys_stop:
            self.exit_with(Outcome.signaled())

    async def force_kill(self) -> None:
        """Count; end with a signal."""
        self.kill_calls += 1
        self.exit_with(Outcome.signaled())

    async def wait(self) -> None:
        """Count; answer with the next scripted join step."""
        self.wait_calls += 1
        self.join_entered.set()
        if self._join_gate is not None:
            await self._join_gate.wait()
        step = self._joins.pop(0) if self._joins else None
        if step is not None:
            raise step
        self.joined = True


ProcessFactory = Callable[[], FakeProcess]


@final
class FakeLauncher:
    """Starts ``FakeProcess`` values made by ``make``; records every spec.

    ``failure`` is raised instead of returning (a ``LaunchError`` may carry a partial
    process). ``gate`` holds each start until set; ``entered`` is set when one arrives.
    """

    def __init__(
        self,
        make: ProcessFactory = FakeProcess,
        *,
        failure: BaseException | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.specs: list[Spec] = []
        self.started: list[FakeProcess] = []
        self.entered = asyncio.Event()
        self._make = make
        self._failure = failure
        self._gate = gate

    async def start(self, spec: Spec) -> Process:
        """Record the spec, wait for the gate, then fail or start a fake process."""
        self.specs.append(spec)
        self.entered.set()
        if self._gate is not None:
            await self._gate.wait()
        if self._failure is not None:
            raise self._failure
        process = self._make()
        self.started.append(process)
        for chunk in process.stdout:
            spec.stdout.write(chunk)
        for chunk in process.stderr:
            spec.stderr.write(chunk)
        return process


@final
class ContainedLauncher:
    """A ``FakeLauncher`` that declares the optional ``contained`` attribute.

    ``value`` is what the attribute answers (any object, to test how it is read);
    ``failure`` makes reading it raise. ``reads`` counts how often it was read.
    """

    def __init__(
        self,
        value: object = True,
        inner: FakeLauncher | None = None,
        *,
        failure: Exception | None = None,
    ) -> None:
        self.value = value
        self.inner = FakeLauncher() if inner is None else inner
        self.reads = 0
        self.reads_at_start: list[int] = []
        self._failure = failure

    @property
    def contained(self) -> object:
        """Count the read; raise the failure or answer the value."""
        self.reads += 1
        if self._failure is not None:
            raise self._failure
        return self.value

    async def start(self, spec: Spec) -> Process:
        """Note how often ``contained`` was read so far, then start through ``inner``."""
        self.reads_at_start.append(self.reads)
        return await self.inner.start(spec)


@final
class AnsweringLauncher:
    """A broken launcher whose ``start`` returns ``answer``, whatever it is (``None``...).

    ``gate`` holds each start until set; ``entered`` is set when one arrives.
    """

    def __init__(self, answer: object, gate: asyncio.Event | None = None) -> None:
        self.answer = answer
        self.specs: list[Spec] = []
        self.entered = asyncio.Event()
        self._gate = gate

    async def start(self, spec: Spec) -> Process:
        """Record the spec, wait for the gate, answer (breaking the protocol on purpose)."""
        self.specs.append(spec)
        self.entered.set()
        if self._gate is not None:
            await self._gate.wait()
        return cast("Process", self.answer)


@final
class HalfProcess:
    """Has some ``Process`` methods but not ``wait`` (the join): not a process."""

    def done(self) -> bool:
        """Always done."""
        return True

    async def wait_exit(self) -> None:
        """Returns at once."""


def partial_start(process: FakeProcess) -> LaunchError:
    """A ``LaunchError`` that carries a process created before the start failed."""
    return LaunchError(process)


SHELL_FIELDS: tuple[str, ...] = (
    "workdir",
    "exit_code",
    "stdout",
    "stderr",
    "encoding",
    "stdout_bytes",
    "stderr_bytes",
    "output_truncated",
    "timed_out",
    "managed_cleanup_completed",
    "stdout_omitted_bytes",
    "stderr_omitted_bytes",
    "stdout_omitted_at",
    "stderr_omitted_at",
    "contained",
)
"""Every shell result has exactly these fields after ``ok`` (failures add code and message)."""


def shell_call(arguments: Mapping[str, object] | str, *, name: str = "shell") -> Call:
    """A call of the shell tool with ``arguments`` (a mapping or raw JSON text)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Call("call-1", name, text)


def content_of(result: Result) -> dict[str, object]:
    """The result's content as a dict."""
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value
