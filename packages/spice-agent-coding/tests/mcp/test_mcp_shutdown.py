"""Stdin's EOF and cancellation over MCP (contract 9.5): answers written, no spinning loop.

On EOF the server lets calls already received finish for ``EOF_GRACE_SECONDS``, answers
them and exits 0; past the bound it stops the rest as on cancellation. A cancelled call
is cancelled once and waited for without the event loop spinning.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, final

import pytest
from app_fakes import BlockingTool, GatedTool, SlowFsync, StubbornTool
from portable import PYTHON, WINDOWS
from procutil import descendants_named, is_alive, until
from raw_peer import SERVER, RawPeer, encode, tool_call
from test_mcp_pipes import INITIALIZE, INITIALIZED, LineReader, write_all

from spice.agent.coding import compose
from spice.agent.coding._mcp import _server as mcp
from spice.agent.coding._mcp import _stdio as stdio
from spice.agent.coding._mcp._server import PROGRESS_HEARTBEAT_SECONDS, serving
from spice.agent.coding._mcp._stdio import EOF_GRACE_SECONDS, FLUSH_TIMEOUT_SECONDS, open_stdio
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Tool
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._replace import ReplaceTool
from spice.agent.tools.coding._shell import GRACE_SECONDS

CONNECTION_CLOSED: Final = -32000
SHORT_SLEEP_SECONDS: Final = 1
"""A command well inside the EOF grace period."""

SHORT_SLEEP: Final = (
    [PYTHON, "-c", f"import time; time.sleep({SHORT_SLEEP_SECONDS})"]
    if WINDOWS
    else ["sleep", str(SHORT_SLEEP_SECONDS)]
)
LONG_SLEEP_SECONDS: Final = 300
"""A command far past the EOF grace period (and every bound below)."""

EXIT_BOUND_SECONDS: Final = EOF_GRACE_SECONDS + GRACE_SECONDS + FLUSH_TIMEOUT_SECONDS + 20
"""The server exits within the grace period, the shell's stop grace and the flush (plus slack
for a loaded machine), far less than the long command would take."""

SLOW_FSYNC_SECONDS: Final = 1.5
"""The injected fault: one fsync this slow, so a cancelled replace waits out its worker."""

SHORT_GRACE_SECONDS: Final = 0.2
CPU_SHARE_BOUND: Final = 0.5
"""A cancelled call's wait may use at most this share of one CPU (a spinning loop uses ~1)."""


def initialized() -> bytes:
    return encode(INITIALIZE) + encode(INITIALIZED)


def answers_in(output: bytes) -> dict[object, dict[str, Any]]:
    messages = [json.loads(line) for line in output.splitlines()]
    return {m["id"]: m for m in messages if "id" in m and "method" not in m}


def test_a_call_piped_with_stdin_closed_behind_it_is_answered(tmp_path: Path) -> None:
    """``printf '<init><call>' | spice-coding serve``: the call's answer comes, exit 0."""
    (tmp_path / "a.txt").write_bytes(b"piped\n")
    frames = initialized() + encode(tool_call(2, "read", {"path": "a.txt"}))
    finished = subprocess.run(
        [str(SERVER), "--root", str(tmp_path), "serve"],
        input=frames,
        capture_output=True,
        timeout=EXIT_BOUND_SECONDS,
        check=False,
    )
    answer = answers_in(finished.stdout)[2]
    assert 0 == finished.returncode
    assert "piped\n" == answer["result"]["structuredContent"]["content"]


def test_a_command_shorter_than_the_grace_period_is_answered_after_eof(tmp_path: Path) -> None:
    """A ``sleep`` well inside the 5 s bound runs to its end and is answered; exit 0."""
    with RawPeer(tmp_path) as peer:
        peer.initialize()
        peer.send(tool_call(2, "shell", {"argv": SHORT_SLEEP}))
        rest, code, _err = peer.finish(EXIT_BOUND_SECONDS)
    answer = answers_in(b"\n".join(json.dumps(m).encode() for m in rest))[2]
    content = answer["result"]["structuredContent"]
    assert 0 == code
    assert (True, 0) == (content["ok"], content["exit_code"])


def test_a_command_past_the_grace_period_is_stopped_and_the_server_exits_0(
    tmp_path: Path,
) -> None:
    """A ``sleep`` far past the bound is stopped: an error answer, exit 0, no process left."""
    script = f"exec sleep {LONG_SLEEP_SECONDS}"
    with RawPeer(tmp_path) as peer:
        peer.initialize()
        peer.send(tool_call(2, "shell", {"argv": ["sh", "-c", script]}))
        # The host's pid of the sleep (in a PID namespace ``$$`` is the namespace's own; a
        # staged worktree shows no file the command writes before the call ends).
        assert asyncio.run(until(lambda: bool(descendants_named(peer.pid, "sleep"))))
        pids = descendants_named(peer.pid, "sleep")
        rest, code, _err = peer.finish(EXIT_BOUND_SECONDS)
    answer = answers_in(b"\n".join(json.dumps(m).encode() for m in rest))[2]
    assert 0 == code
    assert CONNECTION_CLOSED == answer["error"]["code"]
    assert asyncio.run(until(lambda: not any(is_alive(pid) for pid in pids)))


@final
class Piped:
    """An in-process server over real pipes, fed raw frames; its calls observable."""

    def __init__(self, in_w: int, reader: LineReader, server: asyncio.Task[None]) -> None:
        self.in_w = in_w
        self.reader = reader
        self.server = server
        self.log: list[dict[str, Any]] = []

    async def message(self) -> dict[str, Any]:
        """The server's next message (bounded), also kept in ``log``."""
        async with asyncio.timeout(EXIT_BOUND_SECONDS):
            line = await self.reader.readline()
        assert line, "the server closed stdout"
        message: dict[str, Any] = json.loads(line)
        self.log.append(message)
        return message

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(write_all, self.in_w, data)

    def close(self) -> None:
        os.close(self.in_w)
        self.in_w = -1

    async def answers(self) -> dict[object, dict[str, Any]]:
        """Every answer until the server closes stdout (bounded)."""
        output = b""
        async with asyncio.timeout(EXIT_BOUND_SECONDS):
            while line := await self.reader.readline():
                output += line
            await self.server
        return answers_in(output)


@asynccontextmanager
async def piped(
    dispatcher: Dispatcher, *, heartbeat_seconds: float = PROGRESS_HEARTBEAT_SECONDS
) -> AsyncIterator[Piped]:
    """Serve ``dispatcher`` over fresh pipes the way ``serve_stdio`` does (minus the divert)."""
    server, calls = serving(dispatcher, heartbeat_seconds=heartbeat_seconds)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    open_ends = {in_r, in_w, out_r, out_w}

    async def serve() -> None:
        try:
            async with open_stdio(in_r, out_w, divert=False) as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await calls.settle()
            open_ends.discard(out_w)
            os.close(out_w)  # the client sees EOF once the server is done

    reader = LineReader(out_r, 1 << 22)
    task = asyncio.create_task(serve())
    handle = Piped(in_w, reader, task)
    try:
        yield handle
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if handle.in_w < 0:
            open_ends.discard(in_w)
        # Write ends first: a thread reading a read end then sees EOF (on Windows, closing
        # the end a thread reads waits for the read).
        for fd in sorted(open_ends, key=lambda end: end not in {in_w, out_w}):
            os.close(fd)
        await calls.settle(EXIT_BOUND_SECONDS)
    assert 0 == len(calls)


async def test_a_call_in_flight_at_eof_is_answered_when_it_finishes_inside_the_bound() -> None:
    """In process: EOF while a call waits; released inside the bound, it is answered."""
    tool = GatedTool()
    async with piped(Dispatcher([tool])) as server:
        await server.write(initialized() + encode(tool_call(2, "gated", {})))
        async with asyncio.timeout(30):
            await tool.until(1)
        server.close()
        tool.release()
        answers = await server.answers()
    assert {"ok": True} == answers[2]["result"]["structuredContent"]


async def test_a_call_still_running_past_the_bound_is_cancelled_and_answered_with_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process, a shortened bound: the blocked call is cancelled; the client hears why."""
    monkeypatch.setattr(stdio, "EOF_GRACE_SECONDS", SHORT_GRACE_SECONDS)
    tool = BlockingTool()
    async with piped(Dispatcher([tool])) as server:
        await server.write(initialized() + encode(tool_call(2, "blocking", {})))
        async with asyncio.timeout(30):
            await tool.started.wait()
        server.close()
        answers = await server.answers()
    assert tool.cancelled.is_set()
    assert CONNECTION_CLOSED == answers[2]["error"]["code"]


async def _cancelled_call_cpu_share(
    root: Path,
    tools: list[Tool],
    call: dict[str, Any],
    started: Callable[[], Awaitable[bool]],
) -> tuple[float, dict[object, dict[str, Any]]]:
    async with compose(Config(root), tools=tools) as dispatcher, piped(dispatcher) as server:
        await server.write(initialized() + encode(call))
        assert await started()
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        cancel_frame = encode({**cancel, "params": {"requestId": call["id"]}})
        wall, cpu = time.monotonic(), time.process_time()
        await server.write(cancel_frame)
        server.close()
        answers = await server.answers()
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    return cpu / wall, answers


async def test_a_cancelled_replace_waits_out_its_slow_worker_without_spinning(
    tmp_path: Path,
) -> None:
    """A cancel while fsync is slow: the wait for the worker uses a small share of a CPU."""
    syscalls = SlowFsync(SLOW_FSYNC_SECONDS)
    replace = ReplaceTool(Config(tmp_path), syscalls=syscalls)
    call = tool_call(2, "replace", {"path": "new.txt", "content": "x", "create": True})

    async def started() -> bool:
        return await asyncio.to_thread(syscalls.reached.wait, 30)

    share, answers = await _cancelled_call_cpu_share(tmp_path, [replace], call, started)
    assert 2 not in answers  # a cancelled request is never answered
    assert share < CPU_SHARE_BOUND


async def test_a_cancelled_command_that_ignores_sigterm_is_waited_out_without_spinning(
    tmp_path: Path,
) -> None:
    """A cancel of a command that ignores SIGTERM: the shell's grace passes with an idle loop."""
    script = f"trap '' TERM; echo $$ > pid; sleep {LONG_SLEEP_SECONDS}"
    call = tool_call(2, "shell", {"argv": ["sh", "-c", script]})

    async def started() -> bool:
        return await until((tmp_path / "pid").exists)

    share, answers = await _cancelled_call_cpu_share(tmp_path, [], call, started)
    pid = int((tmp_path / "pid").read_text())
    assert 2 not in answers
    assert not is_alive(pid)
    assert share < CPU_SHARE_BOUND


@pytest.mark.parametrize("answers_anyway", [False, True])
async def test_a_cancelled_call_that_never_stops_is_given_up_after_the_bound(
    monkeypatch: pytest.MonkeyPatch, answers_anyway: bool
) -> None:
    """Past ``CANCELLED_CALL_SECONDS`` (shortened) the handler and the shutdown stop waiting.

    A call that answers after all once released is still unanswered: the cancel won.
    """
    monkeypatch.setattr(mcp, "CANCELLED_CALL_SECONDS", SHORT_GRACE_SECONDS)
    tool = StubbornTool(answers=answers_anyway)
    async with piped(Dispatcher([tool])) as server:
        await server.write(initialized() + encode(tool_call(2, "stubborn", {})))
        async with asyncio.timeout(30):
            await tool.started.wait()
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        await server.write(encode({**cancel, "params": {"requestId": 2}}))
        async with asyncio.timeout(30):
            await tool.cancel_seen.wait()
        server.close()
        answers = await server.answers()
        still_running = not tool.finished.is_set()
        tool.released.set()
        async with asyncio.timeout(30):
            await tool.finished.wait()
    assert still_running
    assert 2 not in answers
