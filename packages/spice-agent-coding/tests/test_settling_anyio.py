"""9.1 in process: a caller inside a cancelled AnyIO scope costs no CPU while it waits.

An AnyIO cancel scope re-delivers its cancellation on every event-loop iteration while
its task lives (``CancelScope._deliver_cancellation`` reschedules itself). The product's
``settling`` waits in a shielded AnyIO scope when AnyIO is loaded, so neither the wait
nor the loop wakes for it. Counted in wake-ups and in event-loop iterations (the
selector's ``select`` calls), never in time.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, cast

import anyio
import pytest

from spice.agent.tool import Call, ExecutionState, interruption_of
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._commit import POSIX, Syscalls
from spice.agent.tools.coding._replace import ReplaceTool
from spice.agent.tools.coding.settling import Settled, outlast, settle

ITERATIONS: Final = 100
"""Event-loop iterations until the awaited future finishes."""
WORKER_SECONDS: Final = 0.3
"""How long the worker thread is held after the caller was cancelled."""
IDLE_ITERATIONS: Final = 20
"""Most event-loop iterations a wait of ``WORKER_SECONDS`` may take (a spin takes
thousands: one per ``call_soon`` of AnyIO's re-delivery)."""


async def _finish_after_iterations(future: asyncio.Future[None]) -> None:
    for _ in range(ITERATIONS):
        await asyncio.sleep(0)
    future.set_result(None)


async def _settle_in_a_cancelled_scope(*, shielded: bool) -> Settled:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    finisher = asyncio.ensure_future(_finish_after_iterations(future))
    settled: Settled | None = None
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await asyncio.sleep(1)  # the first delivery, like a tool's worker await
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=shielded):
                settled = await settle(future, 5.0)
            raise
    await finisher
    assert settled is not None
    return settled


@pytest.mark.parametrize("shielded", [False, True])
async def test_a_cancelled_anyio_scope_does_not_wake_the_wait(shielded: bool) -> None:
    """Shielded by the caller or not: one wake-up, when the future finishes."""
    settled = await _settle_in_a_cancelled_scope(shielded=shielded)
    assert Settled(done=True, wakeups=1, held=0) == settled


@contextmanager
def counted_iterations() -> Iterator[list[int]]:
    """Count the running loop's iterations (one ``select`` each) inside the block."""
    loop = asyncio.get_running_loop()
    selector = cast(selectors.BaseSelector, loop._selector)  # type: ignore[attr-defined]
    real = selector.select
    count = [0]

    def select(timeout: float | None = None) -> list[tuple[Any, int]]:
        count[0] += 1
        return real(timeout)

    selector.select = select  # type: ignore[method-assign]
    try:
        yield count
    finally:
        selector.select = real  # type: ignore[method-assign]


def _later(future: asyncio.Future[None]) -> None:
    loop = future.get_loop()
    timer = threading.Timer(WORKER_SECONDS, loop.call_soon_threadsafe, (future.set_result, None))
    timer.start()


async def test_a_wait_in_a_cancelled_scope_leaves_the_loop_idle() -> None:
    """A thread finishes the future after ``WORKER_SECONDS``: few iterations, not a spin."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with counted_iterations() as iterations, anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            _later(future)
            settled = await settle(future, 5.0)
            raise
    assert settled.done
    assert iterations[0] <= IDLE_ITERATIONS


async def test_outlast_in_a_cancelled_scope_waits_idle_then_reraises() -> None:
    """``outlast`` (the application's waits) inside a scope cancelled during the wait:
    idle until the future is done; the scope's cancellation still ends the scope."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    reached = False
    with counted_iterations() as iterations, anyio.CancelScope() as scope:
        _later(future)
        asyncio.get_running_loop().call_soon(scope.cancel)
        await outlast(future, 5.0)
        # Shielded, the scope's cancellation was not delivered during the wait; AnyIO
        # delivers it at the next checkpoint, as after any shielded scope.
        await asyncio.sleep(0)
        reached = True  # pragma: no cover - the scope's cancellation is raised above
    assert (future.done(), reached, scope.cancelled_caught) == (True, False, True)
    assert iterations[0] <= IDLE_ITERATIONS


class _SlowSync:
    """The real calls, with the first ``fsync`` held until ``release`` is set."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        self._entered = entered
        self._release = release

    def fsync(self, fd: int) -> None:
        self._entered.set()
        self._release.wait(10)
        POSIX.fsync(fd)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return cast(Callable[..., Any], getattr(POSIX, name))


async def test_a_tool_cancelled_in_an_anyio_scope_waits_for_its_worker_idle(
    tmp_path: Path,
) -> None:
    """``replace`` in process, its caller's AnyIO scope cancelled while the worker syncs:
    the call waits for the thread (which stops before its commit) with an idle loop."""
    entered, release = threading.Event(), threading.Event()
    tool = ReplaceTool(Config(str(tmp_path)), syscalls=cast(Syscalls, _SlowSync(entered, release)))
    arguments = {"path": "new.txt", "content": "x\n", "create": True}
    caught: list[BaseException] = []
    with counted_iterations() as iterations, anyio.CancelScope() as scope:

        async def cancel_when_syncing() -> None:
            await asyncio.to_thread(entered.wait, 10)
            scope.cancel()
            threading.Timer(WORKER_SECONDS, release.set).start()

        helper = asyncio.ensure_future(cancel_when_syncing())
        try:
            await tool.execute(Call("c-1", "replace", json.dumps(arguments)))
        except asyncio.CancelledError as cancelled:
            caught.append(cancelled)
            raise
    await helper
    assert iterations[0] <= IDLE_ITERATIONS
    interruption = interruption_of(caught[0])
    assert interruption is not None
    assert ExecutionState.DEFINITIVE == interruption.state
    # Cancelled before its commit point: the worker stopped and removed its temporary
    # before the call ended (it waited for the thread), and says nothing was written.
    assert ([], None) == (os.listdir(tmp_path), interruption.result)
