"""Progress heartbeats over MCP (contract 9.3): at least every 10 s while a call runs.

In process over real pipes with a short interval injected through ``serving``'s
``heartbeat_seconds`` seam; the calls wait to be released, so nothing sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final, cast

import pytest
from app_fakes import GatedTool
from mcp.server.session import ServerSession
from raw_peer import encode, tool_call
from test_mcp_shutdown import Piped, initialized, piped

from spice.agent.coding import mcp_server
from spice.agent.coding._mcp._server import PROGRESS_HEARTBEAT_SECONDS, _outcome, _SessionReporter
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Result

INTERVAL: Final = 0.02
HEARTBEATS: Final = 3
CONTRACT_SECONDS: Final = 10.0


def progress_of(message: dict[str, Any], token: str) -> bool:
    return message.get("method") == "notifications/progress" and (
        message["params"]["progressToken"] == token
    )


def answer_of(message: dict[str, Any], ident: int) -> bool:
    return "method" not in message and message.get("id") == ident


def test_the_default_interval_is_within_the_contract() -> None:
    """The heartbeat comes at least every 10 seconds (5 s by default)."""
    assert 0 < PROGRESS_HEARTBEAT_SECONDS < CONTRACT_SECONDS


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_a_heartbeat_interval_that_is_not_positive_is_refused(seconds: float) -> None:
    """The seam takes only a positive interval."""
    with pytest.raises(ValueError, match="positive"):
        mcp_server(Dispatcher([GatedTool()]), heartbeat_seconds=seconds)


async def test_a_call_with_a_progress_token_hears_heartbeats_until_its_answer_and_none_after() -> (
    None
):
    """Heartbeats arrive while the call runs, with growing progress; none after the answer."""
    tool = GatedTool()
    async with piped(Dispatcher([tool]), heartbeat_seconds=INTERVAL) as server:
        await server.write(initialized() + encode(tool_call(2, "gated", {}, progressToken="a")))
        beats = [m async for m in _until_beats(server, "a", HEARTBEATS)]
        tool.release()
        while not answer_of(await server.message(), 2):
            pass
        answered_at = len(server.log)
        # A second call keeps the session open for several more intervals.
        await server.write(encode(tool_call(3, "gated", {}, progressToken="b")))
        _ = [m async for m in _until_beats(server, "b", HEARTBEATS)]
        tool.release()
        while not answer_of(await server.message(), 3):
            pass
        server.close()
        await server.answers()
    progress = [m["params"]["progress"] for m in beats]
    assert HEARTBEATS == len(progress)
    assert sorted(set(progress)) == progress
    assert [] == [m for m in server.log[answered_at:] if progress_of(m, "a")]


async def test_a_call_without_a_progress_token_hears_no_heartbeat() -> None:
    """No token, no progress notification, however long the call runs."""
    tool = GatedTool()
    async with piped(Dispatcher([tool]), heartbeat_seconds=INTERVAL) as server:
        await server.write(initialized() + encode(tool_call(2, "gated", {})))
        await tool.until(1)
        # A call with a token, beside it, measures out several intervals.
        await server.write(encode(tool_call(3, "gated", {}, progressToken="b")))
        _ = [m async for m in _until_beats(server, "b", HEARTBEATS)]
        tool.release()
        tool.release()
        answered: set[int] = set()
        while answered != {2, 3}:
            message = await server.message()
            if "method" not in message and "id" in message:
                answered.add(message["id"])
        server.close()
        await server.answers()
    progress = [m for m in server.log if m.get("method") == "notifications/progress"]
    assert {"b"} == {m["params"]["progressToken"] for m in progress}


async def test_cancelling_a_call_stops_its_heartbeats() -> None:
    """After the cancel takes effect no heartbeat of that call is written."""
    tool = GatedTool()
    async with piped(Dispatcher([tool]), heartbeat_seconds=INTERVAL) as server:
        await server.write(initialized() + encode(tool_call(2, "gated", {}, progressToken="a")))
        _ = [m async for m in _until_beats(server, "a", 1)]
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        await server.write(encode({**cancel, "params": {"requestId": 2}}))
        await tool.until(0)  # the call's task was cancelled: its handler has stopped beating
        await server.write(encode(tool_call(3, "gated", {}, progressToken="b")))
        first_b = [m async for m in _until_beats(server, "b", 1)]
        after = len(server.log)
        _ = [m async for m in _until_beats(server, "b", HEARTBEATS)]
        tool.release()
        while not answer_of(await server.message(), 3):
            pass
        server.close()
        answers = await server.answers()
    assert first_b
    assert [] == [m for m in server.log[after:] if progress_of(m, "a")]
    assert 2 not in answers
    assert 2 not in {m.get("id") for m in server.log if "method" not in m}


async def _until_beats(server: Piped, token: str, count: int) -> AsyncIterator[dict[str, Any]]:
    """Yield the next ``count`` progress notifications for ``token`` (bounded reads)."""
    seen = 0
    while seen < count:
        message = await server.message()
        if progress_of(message, token):
            seen += 1
            yield message


class _BrokenSession:
    """A session whose progress notification fails (a transport gone wrong)."""

    def __init__(self) -> None:
        self.sent = 0

    async def report_progress(self, progress: float, total: float | None, message: str) -> None:
        self.sent += 1
        raise RuntimeError("the transport failed")


async def test_a_heartbeat_that_fails_cancels_the_call_before_the_handler_fails() -> None:
    """Any exit of the handler, not only a cancellation, cancels and waits for the call."""
    release = asyncio.Event()

    async def call() -> Result:
        await release.wait()
        raise AssertionError("a call that outlived its handler")  # pragma: no cover

    task = asyncio.get_running_loop().create_task(call())
    session = _BrokenSession()
    reporter = _SessionReporter(cast("ServerSession", session))
    with pytest.raises(RuntimeError):
        await _outcome(task, reporter, INTERVAL)
    assert (True, 1) == (task.cancelled(), session.sent)
