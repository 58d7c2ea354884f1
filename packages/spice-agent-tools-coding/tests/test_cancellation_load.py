"""A cancellation observed before the commit point is definitive on a loaded machine (9.1).

Each iteration starts one call whose caller is already cancelled, or is cancelled while
the tool reports its progress, with burner threads contending for the interpreter.
Before the fix the cancellation was delivered only at the first await after the worker
thread had been started, and that thread could pass its commit gate before the event
loop told it to stop: some calls committed. Now none may, and no worker is started.
Both load tests are ``slow`` (``make verify`` runs them, ``make fast`` does not: burner
threads for seconds are no unit test); the short one runs ``ITERATIONS`` calls, the long
one many more. The worst schedule is also made deterministic, and runs everywhere: an
executor that blocks the loop until the worker is done (``_RunsToTheEnd``) commits every
such call without the fix.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest
from fakes import FakeLauncher, FakeResolver, shell_call
from replace_helpers import (
    WAIT_SECONDS,
    create_arguments,
    digest,
    make_call,
    make_tool,
    replace_arguments,
    temporaries,
)

from spice.agent.tool import Call, ExecutionState, Progress, Reporter, Result, interruption_of
from spice.agent.tools.coding import _read, _replace, _shell
from spice.agent.tools.coding._config import Config
from spice.agent.tools.coding._read import new_read
from spice.agent.tools.coding._replace import ReplaceTool

BURNERS: Final = 4
"""Burner threads that keep the interpreter lock busy while the calls run."""
ITERATIONS: Final = 40
"""Calls per variant in the default run."""
SLOW_ITERATIONS: Final = 300
"""Calls per variant in the ``slow`` run."""
OLD: Final = b"old\n"
NEW: Final = "new\n"

Starter = Callable[[Callable[[Reporter | None], Awaitable[Result]]], Awaitable[Result]]


@contextmanager
def _burning() -> Iterator[None]:
    """Run ``BURNERS`` threads that spin in Python until the block ends."""
    stop = threading.Event()

    def burn() -> None:
        spins = 0
        while not stop.is_set():
            spins += 1

    threads = [threading.Thread(target=burn, daemon=True) for _ in range(BURNERS)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT_SECONDS)


class _CancelsItsCaller:
    """A reporter that awaits, then cancels the task it reports for (the caller)."""

    async def report(self, progress: Progress) -> None:
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()


class _Signals:
    """A reporter that awaits an event the test sets after cancelling the caller."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def report(self, progress: Progress) -> None:
        self.entered.set()
        await self.release.wait()


async def _already_cancelled(execute: Callable[[Reporter | None], Awaitable[Result]]) -> Result:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    return await execute(None)


async def _cancelled_while_reporting(
    execute: Callable[[Reporter | None], Awaitable[Result]],
) -> Result:
    return await execute(_CancelsItsCaller())


async def _cancelled_by_another_task_while_reporting(
    execute: Callable[[Reporter | None], Awaitable[Result]],
) -> Result:
    reporter = _Signals()
    running = asyncio.ensure_future(execute(reporter))
    async with asyncio.timeout(WAIT_SECONDS):
        await reporter.entered.wait()
    running.cancel()
    reporter.release.set()
    return await running


STARTERS: Final[dict[str, Starter]] = {
    "already-cancelled": _already_cancelled,
    "cancelled-while-reporting": _cancelled_while_reporting,
    "cancelled-by-another-task-while-reporting": _cancelled_by_another_task_while_reporting,
}


async def _cancelled_call(
    starter: Starter, tool: ReplaceTool, arguments: dict[str, object]
) -> None:
    """Run one call that must end cancelled, definitive, without a result."""

    async def execute(reporter: Reporter | None) -> Result:
        return await tool.execute(make_call(arguments), reporter)

    task = asyncio.ensure_future(starter(execute))
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(WAIT_SECONDS * 2):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, None) == (interruption.state, interruption.result)


async def _commits(root: Path, starter: Starter, iterations: int, *, creating: bool) -> int:
    """How many of ``iterations`` cancelled calls changed the disk anyway."""
    tool = make_tool(root)
    with _burning():
        for index in range(iterations):
            name = f"f{index}.txt"
            if creating:
                arguments = create_arguments(name, NEW)
            else:
                (root / name).write_bytes(OLD)
                arguments = {"path": name, "content": NEW, "expected_sha256": digest(OLD)}
            await _cancelled_call(starter, tool, arguments)
    assert [] == temporaries(root)
    return _changed(root)


def _changed(root: Path) -> int:
    """Files under ``root`` that do not hold ``OLD`` (a create's file, a replaced one)."""
    return sum(1 for path in root.iterdir() if path.read_bytes() != OLD)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty worktree root."""
    tree = tmp_path / "root"
    tree.mkdir()
    return tree


@pytest.mark.slow
@pytest.mark.parametrize("creating", [True, False], ids=["create", "replace"])
@pytest.mark.parametrize("starter", list(STARTERS), ids=str)
async def test_a_call_cancelled_before_it_could_commit_never_commits_under_load(
    root: Path, starter: str, creating: bool
) -> None:
    """Burner threads contend; every cancelled call leaves the disk as it was."""
    assert 0 == await _commits(root, STARTERS[starter], ITERATIONS, creating=creating)


@pytest.mark.slow
@pytest.mark.parametrize("creating", [True, False], ids=["create", "replace"])
@pytest.mark.parametrize("starter", list(STARTERS), ids=str)
async def test_many_calls_cancelled_before_they_could_commit_never_commit_under_load(
    root: Path, starter: str, creating: bool
) -> None:
    """The long variant: ``SLOW_ITERATIONS`` cancelled calls per case, zero commits."""
    assert 0 == await _commits(root, STARTERS[starter], SLOW_ITERATIONS, creating=creating)


class _RunsToTheEnd(concurrent.futures.ThreadPoolExecutor):
    """An executor whose ``submit`` returns only when the job is done (bounded).

    The event loop is blocked meanwhile, as a loop thread descheduled on a loaded machine
    would be: a worker started before the caller's cancellation reached the tool runs
    through its commit gate before the tool can close it.
    """

    def submit(  # type: ignore[override]
        self, fn: Callable[..., object], /, *args: object, **kwargs: object
    ) -> concurrent.futures.Future[object]:
        future = super().submit(fn, *args, **kwargs)
        future.exception(timeout=WAIT_SECONDS)
        return future


@pytest.mark.parametrize("creating", [True, False], ids=["create", "replace"])
@pytest.mark.parametrize("starter", ["already-cancelled", "cancelled-while-reporting"], ids=str)
async def test_a_cancelled_call_commits_nothing_even_if_a_worker_could_outrun_the_loop(
    root: Path, starter: str, creating: bool
) -> None:
    """The worst schedule, made deterministic: still definitive, still nothing on disk."""
    executor = _RunsToTheEnd(max_workers=1)
    asyncio.get_running_loop().set_default_executor(executor)
    try:
        arguments = create_arguments("f.txt", NEW)
        if not creating:
            (root / "f.txt").write_bytes(OLD)
            arguments = replace_arguments("f.txt", NEW, OLD)
        await _cancelled_call(STARTERS[starter], make_tool(root), arguments)
    finally:
        executor.shutdown(wait=True)
    assert 0 == _changed(root)
    assert [] == temporaries(root)


@pytest.mark.parametrize("starter", ["already-cancelled", "cancelled-while-reporting"], ids=str)
async def test_a_replace_cancelled_before_it_starts_its_worker_starts_none(
    root: Path, starter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker thread is started after an observed cancellation; the lease is free."""
    started: list[str] = []
    real_work = _replace._work

    def work(*args: object) -> object:
        started.append("worker")
        return real_work(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_replace, "_work", work)
    tool = make_tool(root)
    await _cancelled_call(STARTERS[starter], tool, create_arguments("n.txt", NEW))
    await asyncio.sleep(0)  # a started worker task would have submitted its thread by now
    async with asyncio.timeout(WAIT_SECONDS):
        await asyncio.to_thread(lambda: None)  # and the one-thread default pool ran it
    assert ([], False) == (started, tool._lease.locked())
    assert not (root / "n.txt").exists()


@pytest.mark.parametrize("starter", ["already-cancelled", "cancelled-while-reporting"], ids=str)
async def test_a_read_cancelled_before_it_starts_its_worker_starts_none(
    root: Path, starter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read: no page is read after an observed cancellation, on the loop or in a worker."""
    (root / "f.txt").write_bytes(OLD)
    started: list[str] = []
    real_read = _read._read_page

    def read_page(*args: object) -> object:
        started.append("worker")
        return real_read(*args)  # type: ignore[arg-type]

    real_inline = _read._read_inline

    def read_inline(*args: object) -> object:
        started.append("inline")
        return real_inline(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_read, "_read_page", read_page)
    monkeypatch.setattr(_read, "_read_inline", read_inline)
    tool = new_read(Config(str(root)))

    async def execute(reporter: Reporter | None) -> Result:
        return await tool.execute(Call("call-1", "read", '{"path": "f.txt"}'), reporter)

    task = asyncio.ensure_future(STARTERS[starter](execute))
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(WAIT_SECONDS):
            await task
    assert interruption_of(caught.value) is not None
    await asyncio.sleep(0)
    async with asyncio.timeout(WAIT_SECONDS):
        await asyncio.to_thread(lambda: None)
    assert [] == started


async def test_a_replace_under_a_deadline_already_past_starts_no_worker(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TC-11: ``asyncio.timeout_at`` in the past: ``TimeoutError``, no thread, no change."""
    started: list[str] = []
    real_work = _replace._work

    def work(*args: object) -> object:
        started.append("worker")
        return real_work(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_replace, "_work", work)
    tool = make_tool(root)
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout_at(loop.time() - 1):
            await tool.execute(make_call(create_arguments("n.txt", NEW)))
    async with asyncio.timeout(WAIT_SECONDS):
        await asyncio.to_thread(lambda: None)  # a started worker would have run by now
    assert ([], False) == (started, tool._lease.locked())
    assert not (root / "n.txt").exists()


async def test_a_shell_call_under_a_deadline_already_past_looks_nothing_up(
    tmp_path: Path,
) -> None:
    """TC-11 for shell: no executable lookup, no start."""
    launcher, resolver = FakeLauncher(), FakeResolver()
    tool, _owner = _shell.build_shell(Config(str(tmp_path)), resolver, launcher)
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout_at(loop.time() - 1):
            await tool.execute(shell_call({"argv": ["true"]}))
    assert ([], []) == (resolver.lookups, launcher.specs)
