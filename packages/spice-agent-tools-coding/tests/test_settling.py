"""One rule for waiting out work while the caller is cancelled again and again (9.1).

``settling.settle`` holds back repeated cancellations, waits until the future is done
(or its bound), and wakes once per real event: the future, the deadline, or a new
cancellation. The tests count wake-ups, never time.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Final

import pytest
from fakes import FakeLauncher, FakeResolver, shell_call
from replace_helpers import (
    WAIT_SECONDS,
    Pause,
    Recording,
    content_of,
    digest,
    make_call,
    make_tool,
    replace_arguments,
    temporaries,
)

from spice.agent.lifecycle import Cleanup
from spice.agent.process import LaunchError
from spice.agent.tool import ExecutionState, Interruption, Result, Tool, interruption_of
from spice.agent.tools.coding import Config, _replace, _shell, _shell_run, settling
from spice.agent.tools.coding._ownership import Timing
from spice.agent.tools.coding.settling import Settled, deliver_cancellation, settle

RECANCELS: Final = 50
"""Further cancellations a test sends while a call settles."""
IDLE_SECONDS: Final = 0.2
"""When a test future completes: long enough that a polling wait would wake meanwhile."""
OLD: Final = b"old\n"
MINE: Final = "mine\n"


async def _recancel(task: asyncio.Future[Any], times: int) -> None:
    """Cancel ``task`` ``times`` more times, letting it run between two."""
    for _ in range(times):
        await asyncio.sleep(0)
        task.cancel()


async def _cancelled(task: asyncio.Future[Any]) -> Interruption | None:
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(WAIT_SECONDS * 2):
            await task
    return interruption_of(caught.value)


# -- the helper -------------------------------------------------------------------------


async def test_a_quiet_wait_wakes_exactly_once_when_the_future_finishes() -> None:
    """No cancellation: one wake-up, whatever the wait's length (no polling)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()
    loop.call_later(IDLE_SECONDS, future.set_result, "done")
    settled = await settle(future, WAIT_SECONDS)
    assert Settled(done=True, wakeups=1, held=0) == settled
    assert "done" == future.result()


async def test_each_further_cancellation_wakes_the_wait_once_and_is_held_back() -> None:
    """K cancellations during the wait: K held back, K + 1 wake-ups, the future awaited."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    async def waiter() -> Settled:
        return await settle(future, WAIT_SECONDS)

    task = asyncio.ensure_future(waiter())
    await asyncio.sleep(0)
    await _recancel(task, RECANCELS)
    assert not task.done()
    loop.call_later(IDLE_SECONDS, future.set_result, None)
    async with asyncio.timeout(WAIT_SECONDS):
        settled = await task
    assert Settled(done=True, wakeups=RECANCELS + 1, held=RECANCELS) == settled
    assert RECANCELS == task.cancelling()  # held back, not withdrawn: the caller re-raises


async def test_the_bound_ends_the_wait_once_and_leaves_the_future_alone() -> None:
    """A future that never finishes: one wake-up at the deadline, done false, not cancelled."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    settled = await settle(future, 0.01)
    assert Settled(done=False, wakeups=1, held=0) == settled
    assert not future.done()


async def test_a_finished_future_is_not_waited_for() -> None:
    """Already done: no wake-up at all."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_exception(RuntimeError("x"))
    assert Settled(done=True, wakeups=0, held=0) == await settle(future, WAIT_SECONDS)
    assert isinstance(future.exception(), RuntimeError)


async def test_deliver_cancellation_raises_a_pending_request_and_nothing_else() -> None:
    """A pending cancel is delivered; without one, or after it was withdrawn, nothing."""
    await deliver_cancellation()
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await deliver_cancellation()
    # Delivered and caught without uncancel(): the count stays, no new cancellation.
    await deliver_cancellation()
    assert 0 == task.uncancel()
    await deliver_cancellation()


def test_the_primitive_is_public_and_names_its_policy() -> None:
    """One public module, six names; the docstring states the rule."""
    expected = ["Settled", "checkpoint", "deliver_cancellation", "in_thread", "outlast", "settle"]
    assert expected == sorted(settling.__all__)
    assert "held back" in str(settling.__doc__)


# -- replace ----------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A worktree root holding ``f.txt`` with ``OLD``."""
    tree = tmp_path / "root"
    tree.mkdir()
    (tree / "f.txt").write_bytes(OLD)
    return tree


def _record_settles(monkeypatch: pytest.MonkeyPatch, module: object) -> list[Settled]:
    recorded: list[Settled] = []
    real = settle

    async def recording(future: asyncio.Future[object], seconds: float) -> Settled:
        settled = await real(future, seconds)
        recorded.append(settled)
        return settled

    monkeypatch.setattr(module, "settle", recording)
    return recorded


@pytest.mark.parametrize(
    ("fsync", "committed"),
    [(1, False), (3, True)],
    ids=["slow-temporary-fsync", "slow-directory-fsync"],
)
async def test_a_replace_cancelled_again_and_again_waits_for_its_worker_without_spinning(
    root: Path, fsync: int, committed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow fsync, 1 + K cancels: K + 1 wake-ups, the worker's end awaited, honest answer."""
    recorded = _record_settles(monkeypatch, _replace)
    pause = Pause()
    tool = make_tool(root, Recording(slow={("fsync", fsync): pause}))
    task = asyncio.ensure_future(tool.execute(make_call(replace_arguments("f.txt", MINE, OLD))))
    await pause.wait_reached()
    task.cancel()
    await _recancel(task, RECANCELS)
    assert not task.done()  # still waiting for the worker, whatever the cancellations
    pause.release.set()
    interruption = await _cancelled(task)
    [settled] = recorded
    assert settled.done is True
    assert settled.held <= RECANCELS
    assert settled.held + 1 == settled.wakeups
    assert interruption is not None
    assert ExecutionState.DEFINITIVE == interruption.state
    assert committed == (interruption.result is not None)
    if interruption.result is not None:
        assert digest(MINE.encode()) == content_of(interruption.result)["sha256"]
    assert (MINE.encode() if committed else OLD) == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)
    assert not tool._lease.locked()


async def test_a_replace_worker_past_the_bound_is_still_answered_honestly(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound reached while cancelled again: one wake-up per event, uncertain after commit."""
    monkeypatch.setattr(_replace, "SETTLE_SECONDS", 0.05)
    recorded = _record_settles(monkeypatch, _replace)
    pause = Pause()
    tool = make_tool(root, Recording(slow={("fsync", 2): pause}))
    task = asyncio.ensure_future(tool.execute(make_call(replace_arguments("f.txt", MINE, OLD))))
    await pause.wait_reached()
    task.cancel()
    await _recancel(task, 3)
    interruption = await _cancelled(task)
    pause.release.set()
    [settled] = recorded
    assert (False, settled.held + 1) == (settled.done, settled.wakeups)
    assert interruption is not None
    assert ExecutionState.UNCERTAIN == interruption.state


# -- shell ------------------------------------------------------------------------------


def _make_shell(root: Path, launcher: FakeLauncher) -> tuple[Tool, Cleanup]:
    tool, owner = _shell.build_shell(
        Config(str(root)),
        FakeResolver(),
        launcher,
        timing=Timing(join_seconds=5.0, backoff_seconds=0.0, backoff_limit_seconds=0.0),
        grace_seconds=0.05,
    )
    return tool, owner.cleanup


async def test_a_shell_start_cancelled_again_and_again_is_waited_for_to_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled during a start, then K times more: the wait lasts until the start settles.

    The start then fails without a process, so the answer is definitive; a wait cut
    short by the second cancellation (the old policy) could only say uncertain.
    """
    recorded = _record_settles(monkeypatch, _shell_run)
    gate = asyncio.Event()
    launcher = FakeLauncher(failure=LaunchError(), gate=gate)
    tool, cleanup = _make_shell(tmp_path, launcher)
    task = asyncio.ensure_future(tool.execute(shell_call({"argv": ["true"]})))
    async with asyncio.timeout(WAIT_SECONDS):
        await launcher.entered.wait()
    task.cancel()
    await _recancel(task, RECANCELS)
    assert not task.done()
    gate.set()
    interruption = await _cancelled(task)
    [settled] = recorded
    assert (True, settled.held + 1) == (settled.done, settled.wakeups)
    assert 1 <= settled.held <= RECANCELS
    assert interruption is not None
    assert ExecutionState.DEFINITIVE == interruption.state
    async with asyncio.timeout(WAIT_SECONDS):
        await cleanup()


@pytest.mark.parametrize("already", [True, False], ids=["already-cancelled", "while-reporting"])
async def test_a_shell_call_cancelled_before_its_start_launches_nothing(
    tmp_path: Path, already: bool
) -> None:
    """No launcher start after an observed cancellation: definitive, no spec recorded."""
    launcher = FakeLauncher()
    tool, cleanup = _make_shell(tmp_path, launcher)

    class CancelsItsCaller:
        async def report(self, _progress: object) -> None:
            await asyncio.sleep(0)
            current = asyncio.current_task()
            assert current is not None
            current.cancel()

    async def call() -> Result:
        current = asyncio.current_task()
        assert current is not None
        if already:
            current.cancel()
            return await tool.execute(shell_call({"argv": ["true"]}))
        return await tool.execute(shell_call({"argv": ["true"]}), CancelsItsCaller())

    interruption = await _cancelled(asyncio.ensure_future(call()))
    assert interruption is not None
    assert ExecutionState.DEFINITIVE == interruption.state
    assert [] == launcher.specs
    async with asyncio.timeout(WAIT_SECONDS):
        await cleanup()


# -- loop shutdown (asyncio.run cancels every task) --------------------------------------


def test_a_replace_at_loop_shutdown_keeps_its_interruption_and_its_lease(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``main`` returns while a replace is syncing: ``asyncio.run`` cancels every task.

    The call still waits for its worker thread, attaches its ``Interruption``, and its
    lease goes back only after the thread has finished (B6).
    """
    ended: list[bool] = []
    real_work = _replace._work

    def work(*args: object) -> object:
        try:
            return real_work(*args)  # type: ignore[arg-type]
        finally:
            ended.append(True)

    monkeypatch.setattr(_replace, "_work", work)
    pause = Pause()
    tool = make_tool(root, Recording(slow={("fsync", 1): pause}))
    releases: list[bool] = []

    class Lease(asyncio.Lock):
        def release(self) -> None:
            releases.append(bool(ended))  # was the thread finished?
            super().release()

    tool._lease = Lease()
    seen: list[Interruption | None] = []
    tasks: list[asyncio.Future[Any]] = []

    async def call() -> None:
        try:
            await tool.execute(make_call(replace_arguments("f.txt", MINE, OLD)))
        except asyncio.CancelledError as cancelled:
            seen.append(interruption_of(cancelled))
            raise

    async def main() -> None:
        tasks.append(asyncio.ensure_future(call()))
        await pause.wait_reached()
        threading.Timer(IDLE_SECONDS, pause.release.set).start()

    asyncio.run(main())
    assert [True] == releases
    [interruption] = seen
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, None) == (interruption.state, interruption.result)
    assert OLD == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


def test_a_shell_start_at_loop_shutdown_keeps_its_interruption(tmp_path: Path) -> None:
    """``main`` returns while the launcher is starting: the call is answered uncertain."""
    seen: list[Interruption | None] = []
    tasks: list[asyncio.Future[Any]] = []

    async def main() -> None:
        launcher = FakeLauncher(gate=asyncio.Event())  # never opened
        tool, _cleanup = _make_shell(tmp_path, launcher)

        async def call() -> None:
            try:
                await tool.execute(shell_call({"argv": ["true"]}))
            except asyncio.CancelledError as cancelled:
                seen.append(interruption_of(cancelled))
                raise

        tasks.append(asyncio.ensure_future(call()))
        async with asyncio.timeout(WAIT_SECONDS):
            await launcher.entered.wait()

    asyncio.run(main())
    [interruption] = seen
    assert interruption is not None
    assert ExecutionState.UNCERTAIN == interruption.state
