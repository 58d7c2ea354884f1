"""Small real ``Tool`` implementations and recorders for the application tests.

They implement the contract honestly (definitions, results, progress,
cancellation) so the composition, CLI and MCP layers can be tested without
the real coding tools.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Final, final

from spice.agent.lifecycle import Cleanup
from spice.agent.process import ExecutableResolver, Launcher
from spice.agent.starter import AutoBean, AutoConfiguration
from spice.agent.tool import (
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    ExecutionState,
    Progress,
    ReplaySafety,
    Reporter,
    Result,
    RetryDisposition,
)
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._commit import POSIX, Checkpoint

TEXT_SCHEMA: Final[Mapping[str, object]] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "additionalProperties": False,
}
FAILURE_MESSAGE: Final = "the fake host failed"
PROGRESS_MESSAGE: Final = "echoing"
ECHO_LIMIT: Final = 1024
"""The echo keeps at most this many characters, so big arguments give small results."""


def _compact(content: Mapping[str, object]) -> str:
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


@final
class EchoTool:
    """Answers with its ``text`` argument; reports one progress message first."""

    def __init__(
        self,
        name: str = "echo",
        effect: Effect = Effect.READ_ONLY,
        replay: ReplaySafety = ReplaySafety.SAFE,
        capabilities: tuple[Capability, ...] = (Capability.FILESYSTEM_READ,),
    ) -> None:
        self._definition = Definition(
            name, f"Echo ({name}).", TEXT_SCHEMA, effect, replay, capabilities
        )
        self.calls: list[Call] = []

    @property
    def definition(self) -> Definition:
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        self.calls.append(call)
        if reporter is not None:
            await reporter.report(Progress(call.id, PROGRESS_MESSAGE))
        arguments = json.loads(call.arguments)
        if not isinstance(arguments, dict) or set(arguments) - {"text"}:
            problem = "the arguments must be an object with at most a text"
            content = {"ok": False, "code": "invalid_arguments", "message": problem}
            return Result(call.id, _compact(content), problem)
        text = str(arguments.get("text", ""))
        return Result(call.id, _compact({"ok": True, "echo": text[:ECHO_LIMIT]}))


@final
class ProblemTool:
    """Always answers with a model-visible failure."""

    def __init__(self, name: str = "problem") -> None:
        self._definition = Definition(
            name, "Always fails visibly.", TEXT_SCHEMA, Effect.READ_ONLY, ReplaySafety.SAFE, ()
        )

    @property
    def definition(self) -> Definition:
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        problem = "the file does not exist"
        content = {"ok": False, "code": "not_found", "message": problem}
        return Result(call.id, _compact(content), problem)


@final
class FailingTool:
    """Always raises an uncertain ``ExecutionError`` (a host failure)."""

    def __init__(self, name: str = "failing") -> None:
        self._definition = Definition(
            name,
            "Always fails on the host.",
            TEXT_SCHEMA,
            Effect.MUTATING,
            ReplaySafety.UNSAFE,
            (Capability.PROCESS_EXECUTE,),
        )

    @property
    def definition(self) -> Definition:
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        raise ExecutionError(
            call.id, ExecutionState.UNCERTAIN, RetryDisposition.NEVER, FAILURE_MESSAGE
        )


@final
class BlockingTool:
    """Blocks until cancelled; records that it started and that it was cancelled."""

    def __init__(self, name: str = "blocking") -> None:
        self._definition = Definition(
            name,
            "Blocks until cancelled.",
            TEXT_SCHEMA,
            Effect.MUTATING,
            ReplaySafety.UNSAFE,
            (Capability.NETWORK_ACCESS, Capability.PROCESS_EXECUTE),
        )
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    @property
    def definition(self) -> Definition:
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")  # pragma: no cover


@final
class CleanupRecorder:
    """A ``Cleanup`` that counts its calls; optionally fails or hangs."""

    def __init__(self, *, fail: bool = False, hang: bool = False) -> None:
        self.calls = 0
        self.finished = 0
        self._fail = fail
        self._hang = hang

    async def __call__(self) -> None:
        self.calls += 1
        if self._hang:
            await asyncio.Event().wait()
        if self._fail:
            raise OSError("cleanup failed")
        self.finished += 1


@final
class FakeRecord:
    """A fallback record with fake factories for ``read``, ``replace`` and ``shell``."""

    def __init__(self, cleanup: CleanupRecorder | None = None) -> None:
        self.cleanup = CleanupRecorder() if cleanup is None else cleanup
        self.built: list[str] = []
        self.platform: list[tuple[ExecutableResolver, Launcher]] = []

    def read(self, config: Config) -> EchoTool:
        self.built.append("read")
        return EchoTool("read")

    def replace(self, config: Config) -> EchoTool:
        self.built.append("replace")
        return EchoTool("replace", Effect.MUTATING, ReplaySafety.IDEMPOTENT, ())

    def shell(
        self, config: Config, resolver: ExecutableResolver, launcher: Launcher
    ) -> tuple[EchoTool, Cleanup]:
        self.built.append("shell")
        self.platform.append((resolver, launcher))
        tool = EchoTool("shell", Effect.MUTATING, ReplaySafety.UNSAFE, tuple(Capability))
        return tool, self.cleanup

    def record(self) -> AutoConfiguration:
        return AutoConfiguration(
            review="docs/dependency-review.md",
            beans=(
                AutoBean("read", self.read),
                AutoBean("replace", self.replace),
                AutoBean("shell", self.shell),
            ),
        )


@final
class GatedTool:
    """Each call waits for one ``release()``; records how many run at once (and the peak)."""

    def __init__(self, name: str = "gated") -> None:
        self._definition = Definition(
            name, "Waits to be released.", TEXT_SCHEMA, Effect.READ_ONLY, ReplaySafety.SAFE, ()
        )
        self.running = 0
        self.peak = 0
        self.started = 0
        self.changed = asyncio.Event()
        self._gate = asyncio.Semaphore(0)

    @property
    def definition(self) -> Definition:
        return self._definition

    def release(self) -> None:
        """Let one waiting (or the next) call finish."""
        self._gate.release()

    async def until(self, running: int) -> None:
        """Wait until exactly ``running`` calls are running."""
        while self.running != running:
            self.changed.clear()
            await self.changed.wait()

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        self.started += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.changed.set()
        try:
            await self._gate.acquire()
        finally:
            self.running -= 1
            self.changed.set()
        return Result(call.id, _compact({"ok": True}))


@final
class SlowFsync:
    """The real system calls of ``replace``, but its first fsync is slow (a busy disk).

    The delay is the injected fault; it runs in the tool's worker thread.
    """

    def __init__(self, seconds: float) -> None:
        self.reached = threading.Event()
        self._seconds = seconds

    def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
        return POSIX.open(name, flags, mode, dir_fd)

    def read(self, fd: int, size: int) -> bytes:
        return POSIX.read(fd, size)

    def write(self, fd: int, data: memoryview) -> int:
        return POSIX.write(fd, data)

    def fsync(self, fd: int) -> None:
        if not self.reached.is_set():
            self.reached.set()
            time.sleep(self._seconds)
        POSIX.fsync(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        POSIX.fchmod(fd, mode)

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        POSIX.fchown(fd, uid, gid)

    def close(self, fd: int) -> None:
        POSIX.close(fd)

    def lstat(self, name: str, dir_fd: int) -> os.stat_result:
        return POSIX.lstat(name, dir_fd)

    def fstat(self, fd: int) -> os.stat_result:
        return POSIX.fstat(fd)

    def rename(self, source: str, target: str, dir_fd: int) -> None:
        POSIX.rename(source, target, dir_fd)

    def link(self, source: str, target: str, dir_fd: int) -> None:
        POSIX.link(source, target, dir_fd)

    def unlink(self, name: str, dir_fd: int) -> None:
        POSIX.unlink(name, dir_fd)

    def checkpoint(self, point: Checkpoint) -> None:
        POSIX.checkpoint(point)


@final
class StubbornTool:
    """Keeps running after it is cancelled, until released (a tool that never stops: a fault)."""

    def __init__(self, name: str = "stubborn", *, answers: bool = False) -> None:
        self._definition = Definition(
            name, "Ignores cancellation.", TEXT_SCHEMA, Effect.READ_ONLY, ReplaySafety.SAFE, ()
        )
        self._answers = answers
        self.started = asyncio.Event()
        self.cancel_seen = asyncio.Event()
        self.released = asyncio.Event()
        self.finished = asyncio.Event()

    @property
    def definition(self) -> Definition:
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        self.started.set()
        try:
            await self.released.wait()
        except asyncio.CancelledError:
            self.cancel_seen.set()
            await asyncio.shield(self.released.wait())  # the fault: it will not stop
            self.finished.set()
            if self._answers:  # a worse fault: it answers as if never cancelled
                return Result(call.id, _compact({"ok": True}))
            raise
        self.finished.set()  # pragma: no cover - the tests always cancel it
        raise AssertionError("unreachable")  # pragma: no cover
