"""Hand-written, typed fakes for the contract's protocols (no mocks)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import final

from spice.agent.process import Operation as ProcessOperation
from spice.agent.process import Outcome, ProcessFailure
from spice.agent.tool import (
    Call,
    Capability,
    Definition,
    Effect,
    Progress,
    ReplaySafety,
    Reporter,
    Result,
)

Behaviour = Callable[[Call, Reporter | None], Awaitable[Result]]


def read_only_definition(name: str = "echo") -> Definition:
    """A small honest read-only definition."""
    return Definition(
        name, "Echo the arguments.", {"type": "object"}, Effect.READ_ONLY, ReplaySafety.SAFE,
        [Capability.FILESYSTEM_READ],
    )  # fmt: skip


def mutating_definition(name: str = "write") -> Definition:
    """A small honest mutating definition."""
    return Definition(
        name, "Write something.", {"type": "object"}, Effect.MUTATING, ReplaySafety.IDEMPOTENT,
        [Capability.FILESYSTEM_READ, Capability.FILESYSTEM_WRITE],
    )  # fmt: skip


async def echo(call: Call, _reporter: Reporter | None) -> Result:
    """Answer with the call's arguments as content."""
    return Result(call.id, call.arguments)


@final
class FakeTool:
    """A tool whose answer is a plain coroutine function; records every call it sees."""

    def __init__(self, definition: Definition, behaviour: Behaviour = echo) -> None:
        self._definition = definition
        self._behaviour = behaviour
        self.calls: list[Call] = []
        self.reporters: list[Reporter | None] = []

    @property
    def definition(self) -> Definition:
        """The definition given at construction."""
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Record the call, then run the behaviour."""
        self.calls.append(call)
        self.reporters.append(reporter)
        return await self._behaviour(call, reporter)


@final
class ShiftingTool:
    """A tool whose definition changes after the first read (tests the dispatcher's snapshot)."""

    def __init__(self, first: Definition, later: Definition) -> None:
        self._definitions = [first, later]
        self.reads = 0

    @property
    def definition(self) -> Definition:
        """The first definition once, the later one after."""
        self.reads += 1
        return self._definitions[min(self.reads - 1, 1)]

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Echo."""
        return await echo(call, reporter)


@final
class RecordingReporter:
    """A reporter that keeps every progress message."""

    def __init__(self) -> None:
        self.progress: list[Progress] = []

    async def report(self, progress: Progress) -> None:
        """Keep ``progress``."""
        self.progress.append(progress)


@final
class CollectingSink:
    """A sink that keeps what it is given."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        """Append ``data``."""
        self.data += data


@final
class FinishedProcess:
    """A process that has already exited with ``outcome``; its join succeeds or fails."""

    def __init__(self, outcome: Outcome, *, join_fails: bool = False) -> None:
        self._outcome = outcome
        self._join_fails = join_fails
        self.stops = 0
        self.kills = 0

    def done(self) -> bool:
        """Always done."""
        return True

    async def wait_exit(self) -> None:
        """Already exited."""
        await asyncio.sleep(0)

    def result(self) -> Outcome:
        """The outcome given at construction."""
        return self._outcome

    async def request_stop(self) -> None:
        """Count the stop request."""
        self.stops += 1

    async def force_kill(self) -> None:
        """Count the kill."""
        self.kills += 1

    async def wait(self) -> None:
        """The join; raises a non-retryable ``ProcessFailure`` when told to fail."""
        if self._join_fails:
            raise ProcessFailure(ProcessOperation.WAIT, retryable=False)
