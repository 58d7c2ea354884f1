"""The stdio transport in process: real pipes and files, the real MCP client on the other end."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import procutil
import pytest
from app_fakes import PROGRESS_MESSAGE, EchoTool
from mcp import Client
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from raw_peer import pump

from spice.agent.coding import mcp_server
from spice.agent.coding._mcp._framing import MAXIMUM_FRAME_BYTES
from spice.agent.coding._mcp._stdio import (
    READ_CHUNK_BYTES,
    _error_for,
    open_stdio,
)
from spice.agent.dispatch import Dispatcher

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "pipes", "version": "0"},
    },
}
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def echo_call(request_id: int, text: str = "hi") -> dict[str, Any]:
    params = {"name": "echo", "arguments": {"text": text}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def serve(stdin_fd: int, stdout_fd: int, *, divert: bool = False) -> None:
    server = mcp_server(Dispatcher([EchoTool()]))
    async with open_stdio(stdin_fd, stdout_fd, divert=divert) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@asynccontextmanager
async def pipes() -> AsyncIterator[tuple[int, int, int, int]]:
    """(server stdin read end, its write end, server stdout read end, its write end).

    The write ends close first: a thread still reading a read end (Windows serves stdio
    from threads) then sees EOF, where closing the end it reads would wait for the read.
    """
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        yield in_r, in_w, out_r, out_w
    finally:
        for fd in (in_w, out_w, in_r, out_r):
            with contextlib.suppress(OSError):
                os.close(fd)


class LineReader:
    """Lines of a pipe's read end, read all along by a daemon thread (as the loop's pipe
    transport reads, which needs overlapped pipes on Windows; ``os.pipe`` makes none); a
    line longer than ``limit`` fails, as ``asyncio.StreamReader(limit=...)`` does. Built
    inside the running loop."""

    def __init__(self, fd: int, limit: int) -> None:
        self._fd, self._limit, self._buffer, self._ended = fd, limit, b"", False
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue()
        threading.Thread(target=self._pump, name="line-reader", daemon=True).start()

    def _pump(self) -> None:
        pump(self._fd, self._hand_over)

    def _hand_over(self, chunk: bytes) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads any more
            self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)

    async def readline(self) -> bytes:
        """The next line with its newline; what is left at EOF; ``b""`` after it."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > self._limit:
                raise ValueError("a line longer than the limit")
            chunk = b"" if self._ended else await self._chunks.get()
            if not chunk:
                self._ended = True
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"


async def finished(task: asyncio.Task[None]) -> None:
    async with asyncio.timeout(10):
        await task


async def test_the_real_client_talks_to_the_server_over_pipes() -> None:
    """Both ends of the transport over pipes: listing, a call, and its progress."""
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with pipes() as (in_r, in_w, out_r, out_w):
        server = asyncio.create_task(serve(in_r, out_w))
        async with Client(open_stdio(out_r, in_w, divert=False), mode="legacy") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool(
                "echo", {"text": "piped"}, progress_callback=on_progress
            )
        os.close(in_w)
        await finished(server)
    assert ["echo"] == names
    assert {"ok": True, "echo": "piped"} == result.structured_content
    assert PROGRESS_MESSAGE in seen


async def test_regular_files_serve_without_an_event_loop_pipe(tmp_path: Path) -> None:
    """A request file on stdin and a file on stdout are read and written directly."""
    requests = tmp_path / "requests.jsonl"
    answers = tmp_path / "answers.jsonl"
    requests.write_bytes(frame(INITIALIZE) + frame(INITIALIZED) + frame(echo_call(2)))
    stdin = os.open(requests, os.O_RDONLY)
    stdout = os.open(answers, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        await finished(asyncio.create_task(serve(stdin, stdout)))
    finally:
        os.close(stdin)
        os.close(stdout)
    lines = [json.loads(line) for line in answers.read_bytes().splitlines()]
    assert all("2.0" == line["jsonrpc"] for line in lines)
    assert 1 in {line.get("id") for line in lines}


async def test_the_null_device_on_stdin_ends_at_once() -> None:
    """The null device (which a selector refuses) is read directly: EOF, a clean end."""
    async with pipes() as (_, _in_w, out_r, out_w):
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            await finished(asyncio.create_task(serve(null, out_w)))
        finally:
            os.close(null)
        os.close(out_w)
        assert b"" == os.read(out_r, 16)


async def test_divert_points_the_descriptors_away_while_serving_and_restores_them() -> None:
    """With divert, stdout's descriptor is stderr and stdin's the null device; both restored."""
    async with pipes() as (in_r, in_w, out_r, out_w):
        original = (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
        server = asyncio.create_task(serve(in_r, out_w, divert=True))
        write_all(in_w, frame(INITIALIZE))
        loop = asyncio.get_running_loop()
        answer = await asyncio.wait_for(loop.run_in_executor(None, os.read, out_r, 65536), 10)
        during = (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
        expected_during = (os.stat(os.devnull).st_ino, os.fstat(2).st_ino)
        os.close(in_w)
        await finished(server)
        after = (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
    assert 1 == json.loads(answer)["id"]
    assert expected_during == during
    assert original == after


DIVERT_STEPS: Final = 7
"""``_divert``'s descriptor operations: 4 ``dup``, the ``open`` of the null device, 2 ``dup2``."""


@pytest.mark.parametrize("failing", range(1, DIVERT_STEPS + 1))
async def test_a_divert_that_fails_at_any_step_leaks_nothing_and_restores_both(
    monkeypatch: pytest.MonkeyPatch, failing: int
) -> None:
    """EMFILE (the fault) at the n-th descriptor operation: no descriptor left, none moved."""
    steps = 0

    def failing_at(real: Callable[..., int]) -> Callable[..., int]:
        def step(*arguments: object, **keywords: object) -> int:
            nonlocal steps
            steps += 1
            if steps == failing:
                raise OSError(errno.EMFILE, "injected")
            return real(*arguments, **keywords)

        return step

    async with pipes() as (in_r, _, _, out_w):
        original = (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
        before = procutil.open_descriptors()
        for name in ("dup", "dup2", "open"):
            monkeypatch.setattr(os, name, failing_at(getattr(os, name)))
        with pytest.raises(OSError, match="injected"):
            async with open_stdio(in_r, out_w, divert=True):
                pass  # pragma: no cover - the divert fails first
        monkeypatch.undo()
        assert before == procutil.open_descriptors()
        assert original == (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
    assert steps >= failing  # the fault was reached (a restore may add steps after it)


async def exchange(chunks: list[bytes], requests: list[int | None]) -> list[dict[str, Any]]:
    """Feed raw chunks to a server over pipes; return the answers to ``requests``."""
    async with pipes() as (in_r, in_w, out_r, out_w):
        server = asyncio.create_task(serve(in_r, out_w))
        reader = LineReader(out_r, MAXIMUM_FRAME_BYTES)
        for chunk in chunks:
            await asyncio.to_thread(write_all, in_w, chunk)
        answers: dict[int | None, dict[str, Any]] = {}
        async with asyncio.timeout(10):
            while set(requests) - set(answers):
                message = json.loads(await reader.readline())
                if "id" in message:
                    answers[message["id"]] = message
        os.close(in_w)
        await finished(server)
    return [answers[i] for i in requests]


async def test_an_oversized_frame_in_many_chunks_is_discarded() -> None:
    """A line past the frame bound, arriving in many chunks, is dropped; the next is served."""
    huge = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"' + b"a" * MAXIMUM_FRAME_BYTES
    chunks = [frame(INITIALIZE), frame(INITIALIZED), huge, b'"}}\n' + frame(echo_call(2))]
    [answer] = await exchange(chunks, [2])
    assert {"ok": True, "echo": "hi"} == answer["result"]["structuredContent"]


async def test_a_frame_at_the_bound_is_served() -> None:
    """A line exactly at the frame bound is still parsed (and this one is served)."""
    head = json.dumps(echo_call(3, "")).encode()
    text = "b" * (MAXIMUM_FRAME_BYTES - len(head))
    line = json.dumps(echo_call(3, text)).encode()
    assert MAXIMUM_FRAME_BYTES == len(line)
    [answer] = await exchange([frame(INITIALIZE), frame(INITIALIZED), line + b"\n"], [3])
    assert "result" in answer or "error" in answer


async def test_a_frame_one_past_the_bound_in_one_chunk_is_dropped() -> None:
    """A line one byte past the bound is never answered, even when it arrives whole."""
    head = json.dumps(echo_call(4, "")).encode()
    line = json.dumps(echo_call(4, "c" * (MAXIMUM_FRAME_BYTES + 1 - len(head)))).encode()
    chunks = [frame(INITIALIZE), frame(INITIALIZED), line + b"\n" + frame(echo_call(5))]
    [answer] = await exchange(chunks, [5])
    assert {"ok": True, "echo": "hi"} == answer["result"]["structuredContent"]


async def test_garbage_blank_lines_and_a_last_line_without_newline_are_handled() -> None:
    """Blank lines are skipped, garbage gets a parse error, a final unterminated line is read."""
    chunks = [b"\n  \n", b"not json\n", json.dumps(INITIALIZE).encode()]
    async with pipes() as (in_r, in_w, out_r, out_w):
        server = asyncio.create_task(serve(in_r, out_w))
        for chunk in chunks:
            write_all(in_w, chunk)
        os.close(in_w)
        await finished(server)
        os.close(out_w)
        output = await asyncio.to_thread(_read_to_end, out_r)
    # initialize is handled inline, so even a request cut off by EOF gets its answer.
    answers = [json.loads(line) for line in output.splitlines()]
    assert [None, 1] == [answer.get("id") for answer in answers]
    assert -32700 == answers[0]["error"]["code"]
    assert b"not json" not in output


def _read_to_end(fd: int) -> bytes:
    parts = []
    while part := os.read(fd, READ_CHUNK_BYTES):
        parts.append(part)
    return b"".join(parts)


async def test_a_client_that_stops_reading_does_not_break_the_server() -> None:
    """When stdout's reader is gone, writes stop quietly and EOF still ends the server."""
    async with pipes() as (in_r, in_w, out_r, out_w):
        os.close(out_r)
        server = asyncio.create_task(serve(in_r, out_w))
        write_all(in_w, frame(INITIALIZE) + frame(INITIALIZED) + frame(echo_call(2)))
        os.close(in_w)
        await finished(server)
    assert server.done()
    assert server.exception() is None


async def test_cancelling_the_server_stops_a_blocked_read() -> None:
    """A server waiting for the client's next line stops when its task is cancelled."""
    async with pipes() as (in_r, in_w, out_r, out_w):
        server = asyncio.create_task(serve(in_r, out_w))
        write_all(in_w, frame(INITIALIZE))
        loop = asyncio.get_running_loop()
        # The answer proves the server is up and back to waiting for the next line.
        await asyncio.wait_for(loop.run_in_executor(None, os.read, out_r, 65536), 10)
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await finished(server)


@pytest.mark.parametrize(
    ("frame_text", "expected"),
    [
        (b"not json", (None, -32700)),
        (b"[1, 2]", (None, -32600)),
        (b"7", (None, -32600)),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": 7}', (5, -32602)),
        (b'{"jsonrpc": "2.0", "id": "x", "method": 3}', ("x", -32600)),
        (b"{}", (None, -32600)),
        (b'{"jsonrpc": "2.0", "id": true, "method": "tools/call", "params": 7}', (None, -32600)),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping", "params": 7}', (None, -32600)),
        (b'{"jsonrpc": "2.0", "id": 9, "result": 7, "extra": []}', (None, -32600)),
    ],
)
def test_a_frame_that_is_not_a_valid_message_gets_a_json_rpc_error(
    frame_text: bytes, expected: tuple[object, int]
) -> None:
    """Every invalid frame that JSON-RPC says to answer is answered: no client waits forever."""
    answer = _error_for(frame_text)
    assert answer is not None
    assert expected == (answer.id, answer.error.code)
    assert frame_text.decode() not in answer.error.message


@pytest.mark.parametrize(
    "frame_text",
    [
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": 7}',
        b'{"jsonrpc": "1.0", "method": "notifications/x"}',
        b'{"method": 7}',
    ],
)
def test_invalid_notifications_get_no_answer(frame_text: bytes) -> None:
    """JSON-RPC never answers a notification (a ``method`` and no ``id``), valid or not."""
    assert _error_for(frame_text) is None
