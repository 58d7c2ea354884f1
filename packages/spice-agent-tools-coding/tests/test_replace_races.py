"""Races and cancellation of replace: one commit wins, the Interruption matches the disk."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from replace_helpers import (
    WAIT_SECONDS,
    Pause,
    Recording,
    content_of,
    create_arguments,
    digest,
    make_call,
    make_tool,
    replace_arguments,
    run,
    temporaries,
    watch_cancellation,
)

from spice.agent.tool import (
    ExecutionError,
    ExecutionState,
    Interruption,
    Progress,
    Reporter,
    Result,
    RetryDisposition,
    interruption_of,
)
from spice.agent.tools.coding import _replace
from spice.agent.tools.coding._commit import Checkpoint
from spice.agent.tools.coding._replace import ReplaceTool

OLD = b"old\n"
MINE = "mine\n"
THEIRS = b"theirs\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A worktree root holding ``f.txt`` with ``OLD``."""
    tree = tmp_path / "root"
    tree.mkdir()
    (tree / "f.txt").write_bytes(OLD)
    return tree


class _Signal:
    """A reporter that records progress and sets an event."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.messages: list[str] = []

    async def report(self, progress: Progress) -> None:
        self.messages.append(progress.message)
        self.event.set()


class _Raising:
    """A reporter that fails."""

    async def report(self, progress: Progress) -> None:
        raise RuntimeError(progress.message)


async def _interruption_of_cancelled(task: asyncio.Task[Result]) -> Interruption:
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(WAIT_SECONDS * 2):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    return interruption


def _start(
    tool: ReplaceTool, arguments: dict[str, object], reporter: Reporter | None = None
) -> asyncio.Task[Result]:
    return asyncio.ensure_future(tool.execute(make_call(arguments), reporter))


# -- races ----------------------------------------------------------------------------


async def test_two_concurrent_replaces_on_one_instance_commit_exactly_once(root: Path) -> None:
    """The lease serializes them: one commits, the other is stale against its result."""
    tool = make_tool(root)
    results = await asyncio.gather(
        run(tool, replace_arguments("f.txt", "first\n", OLD), call_id="a"),
        run(tool, replace_arguments("f.txt", "second\n", OLD), call_id="b"),
    )
    contents = [content for _, content in results]
    winners = [c for c in contents if c["ok"] is True]
    losers = [c for c in contents if c["ok"] is False]
    assert 1 == len(winners)
    assert 1 == len(losers)
    assert "stale" == losers[0]["code"]
    assert winners[0]["sha256"] == losers[0]["current_sha256"]
    assert winners[0]["sha256"] == digest((root / "f.txt").read_bytes())
    assert [] == temporaries(root)


async def test_two_instances_past_preflight_together_commit_exactly_once(root: Path) -> None:
    """Two tools that both passed the preflight: the final re-check lets only one commit."""
    barrier = threading.Barrier(2, timeout=WAIT_SECONDS)

    def meet() -> None:
        barrier.wait()

    tools = [
        make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: meet})) for _ in range(2)
    ]
    results = await asyncio.gather(
        run(tools[0], replace_arguments("f.txt", "first\n", OLD), call_id="a"),
        run(tools[1], replace_arguments("f.txt", "second\n", OLD), call_id="b"),
    )
    contents = [content for _, content in results]
    committed = [c for c in contents if c["ok"] is True and c["committed"] is True]
    stale = [c for c in contents if c.get("code") == "stale"]
    assert 1 == len(committed)
    assert 1 == len(stale)
    assert committed[0]["sha256"] == digest((root / "f.txt").read_bytes())
    assert committed[0]["sha256"] == stale[0]["current_sha256"]
    assert [] == temporaries(root)


async def test_an_external_write_between_preflight_and_commit_survives_as_stale(
    root: Path,
) -> None:
    """Another writer changes the file in place after the preflight: its bytes survive."""

    def intrude() -> None:
        (root / "f.txt").write_bytes(THEIRS)

    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: intrude}))
    _, content = await run(tool, replace_arguments("f.txt", MINE, OLD))
    assert "stale" == content["code"]
    assert digest(THEIRS) == content["current_sha256"]
    assert THEIRS == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


async def test_an_external_replacement_with_identical_bytes_is_not_stale(root: Path) -> None:
    """The re-check compares content: a new inode with the read bytes is replaced (9.1)."""

    def swap() -> None:
        (root / "swap.tmp").write_bytes(OLD)
        os.replace(root / "swap.tmp", root / "f.txt")

    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: swap}))
    _, content = await run(tool, replace_arguments("f.txt", MINE, OLD))
    assert content["ok"] is True
    assert content["committed"] is True
    assert MINE.encode() == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


@pytest.mark.parametrize("by_rename", [True, False], ids=["rename", "in-place"])
@pytest.mark.parametrize(
    "theirs", [OLD, THEIRS, b"", OLD + b"x"], ids=["same", "other", "empty", "longer"]
)
async def test_a_stale_answer_never_shows_the_expected_digest_as_current(
    root: Path, theirs: bytes, by_rename: bool
) -> None:
    """Whatever lands between the checks: the expected bytes commit, anything else is stale."""

    def intrude() -> None:
        if by_rename:
            (root / "swap.tmp").write_bytes(theirs)
            os.replace(root / "swap.tmp", root / "f.txt")
        else:
            (root / "f.txt").write_bytes(theirs)

    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: intrude}))
    _, content = await run(tool, replace_arguments("f.txt", MINE, OLD))
    if theirs == OLD:
        assert (True, MINE.encode()) == (content["committed"], (root / "f.txt").read_bytes())
    else:
        assert ("stale", digest(theirs)) == (content["code"], content["current_sha256"])
        assert digest(OLD) != content["current_sha256"]
        assert theirs == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


async def test_a_target_removed_before_commit_is_not_found_and_not_recreated(
    root: Path,
) -> None:
    """A target deleted during the call stays deleted."""

    def remove() -> None:
        (root / "f.txt").unlink()

    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: remove}))
    _, content = await run(tool, replace_arguments("f.txt", MINE, OLD))
    assert "not_found" == content["code"]
    assert not (root / "f.txt").exists()
    assert [] == temporaries(root)


async def test_a_target_swapped_for_a_symlink_before_commit_is_not_regular(
    root: Path, tmp_path: Path
) -> None:
    """A symlink planted during the call is neither followed nor replaced."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OLD)

    def plant() -> None:
        (root / "f.txt").unlink()
        (root / "f.txt").symlink_to(outside)

    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: plant}))
    _, content = await run(tool, replace_arguments("f.txt", MINE, OLD))
    assert "not_regular" == content["code"]
    assert (root / "f.txt").is_symlink()
    assert OLD == outside.read_bytes()


# -- cancellation ---------------------------------------------------------------------


async def test_cancel_while_waiting_for_the_lease_changes_nothing(root: Path) -> None:
    """Cancelled before the lease: definitive, allowed, no result; the holder finishes."""
    pause = Pause()
    tool = make_tool(root, Recording(hooks={Checkpoint.PREFLIGHT_DONE: pause}))
    holder = _start(tool, replace_arguments("f.txt", MINE, OLD))
    await pause.wait_reached()
    signal = _Signal()
    waiter = _start(tool, replace_arguments("f.txt", "other\n", OLD), reporter=signal)
    async with asyncio.timeout(WAIT_SECONDS):
        await signal.event.wait()
    waiter.cancel()
    interruption = await _interruption_of_cancelled(waiter)
    pause.release.set()
    async with asyncio.timeout(WAIT_SECONDS):
        held = await holder
    assert Interruption("call-1", ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED) == (
        interruption
    )
    assert 1 == len(signal.messages)
    assert content_of(held)["committed"] is True
    assert MINE.encode() == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


@pytest.mark.parametrize("point", [Checkpoint.PREFLIGHT_DONE, Checkpoint.TEMPORARY_SYNCED], ids=str)
async def test_cancel_before_the_commit_point_changes_nothing(
    root: Path, point: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled before the commit: definitive/allowed, old bytes, no temporary, lease free."""
    pause = Pause()
    pause.release = watch_cancellation(monkeypatch)
    tool = make_tool(root, Recording(hooks={point: pause}))
    task = _start(tool, replace_arguments("f.txt", MINE, OLD))
    await pause.wait_reached()
    if point is Checkpoint.TEMPORARY_SYNCED:
        assert 1 == len(temporaries(root))
    task.cancel()  # the worker goes on once the cancellation reached it
    interruption = await _interruption_of_cancelled(task)
    assert ExecutionState.DEFINITIVE == interruption.state
    assert RetryDisposition.ALLOWED == interruption.retry
    assert interruption.result is None
    assert OLD == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)
    _, again = await run(make_tool(root), replace_arguments("f.txt", MINE, OLD))
    assert again["committed"] is True


async def test_cancel_after_the_commit_carries_the_committed_result(root: Path) -> None:
    """Cancelled after the rename: the Interruption carries the committed Result."""
    pause = Pause()
    tool = make_tool(root, Recording(hooks={Checkpoint.COMMITTED: pause}))
    task = _start(tool, replace_arguments("f.txt", MINE, OLD))
    await pause.wait_reached()
    task.cancel()
    pause.release.set()
    interruption = await _interruption_of_cancelled(task)
    assert ExecutionState.DEFINITIVE == interruption.state
    assert interruption.result is not None
    content = content_of(interruption.result)
    assert content["committed"] is True
    assert content["durable"] is True
    assert digest((root / "f.txt").read_bytes()) == content["sha256"]
    assert [] == temporaries(root)
    _, replay = await run(tool, replace_arguments("f.txt", MINE, OLD))
    assert replay["sha256"] == replay["current_sha256"]


@pytest.mark.parametrize(
    ("point", "exists"),
    [(Checkpoint.TEMPORARY_SYNCED, False), (Checkpoint.COMMITTED, True)],
    ids=["before-link", "after-link"],
)
async def test_cancel_around_the_link_of_a_create_matches_the_disk(
    root: Path, point: Checkpoint, exists: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled create says committed exactly when the file exists."""
    pause = Pause()
    pause.release = watch_cancellation(monkeypatch)
    tool = make_tool(root, Recording(hooks={point: pause}))
    task = _start(tool, create_arguments("n.txt", MINE))
    await pause.wait_reached()
    task.cancel()  # the worker goes on once the cancellation reached it
    interruption = await _interruption_of_cancelled(task)
    assert exists == (root / "n.txt").exists()
    assert exists == (interruption.result is not None)
    assert [] == temporaries(root)


async def test_a_worker_slower_than_the_bound_before_commit_stays_leased_and_stops(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound exceeded before the commit point: definitive, and the lease waits for the thread."""
    monkeypatch.setattr(_replace, "SETTLE_SECONDS", 0.01)
    pause = Pause()
    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: pause}))
    task = _start(tool, replace_arguments("f.txt", MINE, OLD))
    await pause.wait_reached()
    task.cancel()
    interruption = await _interruption_of_cancelled(task)
    assert ExecutionState.DEFINITIVE == interruption.state
    assert interruption.result is None
    assert tool._lease.locked()
    pause.release.set()
    _, after = await run(tool, replace_arguments("f.txt", "later\n", OLD), call_id="c2")
    assert after["committed"] is True
    assert b"later\n" == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


async def test_a_worker_slower_than_the_bound_after_the_commit_point_is_uncertain(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound exceeded past the commit point: uncertain and never, as nobody can tell."""
    monkeypatch.setattr(_replace, "SETTLE_SECONDS", 0.01)
    pause = Pause()
    tool = make_tool(root, Recording(hooks={Checkpoint.COMMITTED: pause}))
    task = _start(tool, replace_arguments("f.txt", MINE, OLD))
    await pause.wait_reached()
    task.cancel()
    interruption = await _interruption_of_cancelled(task)
    pause.release.set()
    assert ExecutionState.UNCERTAIN == interruption.state
    assert RetryDisposition.NEVER == interruption.retry
    _, replay = await run(tool, replace_arguments("f.txt", MINE, OLD), call_id="c2")
    assert replay["sha256"] == replay["current_sha256"]
    assert [] == temporaries(root)


async def test_a_failing_reporter_is_an_execution_error_and_nothing_is_written(
    root: Path,
) -> None:
    """A reporter failure stops the call before the lease: no mutation, no text leaked."""
    tool = make_tool(root)
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(make_call(replace_arguments("f.txt", MINE, OLD)), _Raising())
    assert ExecutionState.DEFINITIVE == caught.value.state
    assert RetryDisposition.ALLOWED == caught.value.retry
    assert "replace:" not in caught.value.message
    assert OLD == (root / "f.txt").read_bytes()
    assert not tool._lease.locked()


@pytest.mark.parametrize("point", [Checkpoint.PREFLIGHT_DONE, Checkpoint.TEMPORARY_SYNCED], ids=str)
async def test_a_defect_in_the_worker_is_an_execution_error_before_the_commit_point(
    root: Path, point: Checkpoint
) -> None:
    """An unexpected exception in the worker: a definitive host failure, no temporary left."""

    def explode() -> None:
        raise ValueError("defect")

    tool = make_tool(root, Recording(hooks={point: explode}))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(make_call(replace_arguments("f.txt", MINE, OLD)))
    assert ExecutionState.DEFINITIVE == caught.value.state
    assert "defect" not in str(caught.value)
    assert OLD == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


async def test_a_defect_after_the_commit_point_is_uncertain(root: Path) -> None:
    """An unexpected exception past the commit point cannot be called definitive."""

    def explode() -> None:
        raise ValueError("defect")

    tool = make_tool(root, Recording(hooks={Checkpoint.COMMITTED: explode}))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(make_call(replace_arguments("f.txt", MINE, OLD)))
    assert ExecutionState.UNCERTAIN == caught.value.state
    assert RetryDisposition.NEVER == caught.value.retry


async def test_exactly_one_progress_message_comes_first_even_for_bad_arguments(
    root: Path,
) -> None:
    """Progress is reported once per call, before any check."""
    signal = _Signal()
    tool = make_tool(root)
    await tool.execute(make_call({"path": "f.txt"}), signal)
    await tool.execute(make_call(replace_arguments("f.txt", MINE, OLD)), signal)
    assert 2 == len(signal.messages)
