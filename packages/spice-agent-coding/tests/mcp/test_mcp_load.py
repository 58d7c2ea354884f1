"""The MCP server under load (contract 9.5): one answer per request, a cap, bounded memory.

Raw frames go to a real ``spice-coding serve`` subprocess; the cap is observed in
process over real pipes with a tool that waits to be released.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
from pathlib import Path
from typing import Any, Final

import pytest
from app_fakes import BlockingTool, FailingTool, GatedTool, ProblemTool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_peer import RawPeer, encode, request, tool_call, vm_bytes
from test_mcp_pipes import INITIALIZE, INITIALIZED, LineReader, exchange, pipes, write_all
from test_mcp_shutdown import initialized, piped

from spice.agent.coding import mcp_server
from spice.agent.coding._mcp._framing import MAXIMUM_FRAME_BYTES
from spice.agent.coding._mcp._stdio import (
    MAXIMUM_REQUESTS_IN_FLIGHT,
    _InFlight,
    open_stdio,
)
from spice.agent.dispatch import Dispatcher

EXAMPLES: Final = 300
INVALID_REQUEST: Final = -32600
PIPELINED_BYTES: Final = 256 * 1024
PIPELINED_REQUESTS: Final = 600
"""Enough 256 KiB requests that the peak RSS would pass the bound without the cap."""

SOAK_PIPELINED_REQUESTS: Final = 2000
RSS_GROWTH_BOUND_BYTES: Final = 192 << 20
CALLS_PAST_THE_CAP: Final = 3 * MAXIMUM_REQUESTS_IN_FLIGHT
PADDING: Final = "p" * 4096
"""Makes the pipelined calls outgrow the pipe and a read chunk, so reading must stop."""

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ids = st.integers(min_value=-(2**63), max_value=2**63) | st.text(max_size=8) | json_values
methods = (
    st.sampled_from(
        ["ping", "tools/list", "tools/call", "initialize", "notifications/cancelled", "nope"]
    )
    | st.text(max_size=12)
    | json_values
)
params = (
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["read", "nope"]),
            "arguments": json_values | st.just({"path": "f"}),
        }
    )
    | json_values
)
objects = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | json_values,
        "id": ids,
        "method": methods,
        "params": params,
    },
)
frames = (
    objects.map(lambda value: json.dumps(value).encode())
    | json_values.map(lambda value: json.dumps(value).encode())
    | st.binary(max_size=24).filter(lambda data: b"\n" not in data and b"\r" not in data)
)


def _usable(ident: object) -> bool:
    return isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))


def expected_answer(frame: bytes) -> tuple[bool, object]:
    """Whether JSON-RPC says to answer ``frame``, and the id the answer must carry."""
    if not frame.strip():
        return False, None
    try:
        value = json.loads(frame)
    except ValueError:
        return True, None
    if not isinstance(value, dict):
        return True, None
    if "method" in value and "id" not in value:
        return False, None  # a notification, however malformed
    ident = value.get("id")
    return True, ident if "method" in value and _usable(ident) else None


def lay_out(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "f").write_text("a file\n")
    return root


def test_every_frame_that_is_not_a_notification_gets_exactly_one_answer(tmp_path: Path) -> None:
    """Hypothesis over raw frames: requests of any shape get one answer, notifications none."""
    with RawPeer(lay_out(tmp_path / "root")) as peer:
        peer.initialize()
        sentinels = iter(f"sentinel-{n:06d}" for n in range(1 << 20))

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        @given(frame=frames)
        def probe(frame: bytes) -> None:
            answered, ident = expected_answer(frame)
            sentinel = next(sentinels)
            peer.write(frame + b"\n" + encode(request(sentinel, "ping")))
            answers: list[dict[str, Any]] = []
            sentinel_seen = False
            for message in peer.messages():
                if "method" in message:
                    continue  # a notification from the server (progress), never an answer
                if message.get("id") == sentinel:
                    sentinel_seen = True
                else:
                    answers.append(message)
                if sentinel_seen and len(answers) >= answered:
                    break
            assert sentinel_seen
            assert int(answered) == len(answers)
            if answered:
                assert ident == answers[0]["id"]

        probe()
        last = "sentinel-last"
        peer.send(request(last, "ping"))
        assert last == next(m for m in peer.messages() if "method" not in m).get("id")
        _rest, code, _err = peer.finish()
    assert 0 == code


FORBIDDEN_ID_FRAMES: Final = (
    b"{}",
    b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
    b'{"jsonrpc":"2.0","id":[1],"method":"ping"}',
    b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":false,"method":"tools/call","params":{"name":"read"}}',
    b'{"jsonrpc":"2.0","id":7}',
)


def test_a_request_whose_id_json_rpc_forbids_is_an_invalid_request_with_a_null_id(
    tmp_path: Path,
) -> None:
    """``{}`` and ids that are not strings or integers get Invalid Request, ``id: null``."""
    seen: list[list[tuple[object, object]]] = []
    with RawPeer(lay_out(tmp_path / "root")) as peer:
        peer.initialize()
        for number, frame in enumerate(FORBIDDEN_ID_FRAMES):
            after = f"after-{number}"
            peer.write(frame + b"\n" + encode(request(after, "ping")))
            answers: list[tuple[object, object]] = []
            for message in peer.messages():
                if "method" not in message:
                    answers.append((message["id"], message.get("error", {}).get("code")))
                if after == message.get("id"):
                    break
            seen.append(answers)
    assert [
        [(None, INVALID_REQUEST), (f"after-{n}", None)] for n in range(len(FORBIDDEN_ID_FRAMES))
    ] == seen


def test_a_well_formed_notification_with_an_id_free_shape_gets_no_answer(tmp_path: Path) -> None:
    """The other side: notifications, valid or not, are never answered."""
    with RawPeer(lay_out(tmp_path / "root")) as peer:
        peer.initialize()
        peer.write(
            b'{"jsonrpc":"2.0","method":"notifications/whatever","params":7}\n'
            b'{"jsonrpc":"2.0","method":"notifications/progress"}\n'
            + encode(request("after", "ping"))
        )
        first = next(m for m in peer.messages() if "method" not in m)
    assert "after" == first["id"]


async def _serve(tool: GatedTool, in_r: int, out_w: int) -> None:
    server = mcp_server(Dispatcher([tool]))
    async with open_stdio(in_r, out_w, divert=False) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _gated_call(ident: int) -> bytes:
    return encode(tool_call(ident, "gated", {"text": PADDING}))


async def _answers(reader: LineReader, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    async with asyncio.timeout(30):
        while len(found) < count:
            message = json.loads(await reader.readline())
            if "id" in message and "method" not in message:
                found.append(message)
    return found


async def test_no_more_than_the_cap_of_requests_run_at_once_and_the_rest_wait_unread() -> None:
    """Pipelined past the cap: exactly 64 run, stdin is left unread, each answer admits one."""
    tool = GatedTool()
    total = MAXIMUM_REQUESTS_IN_FLIGHT + CALLS_PAST_THE_CAP
    data = frame_of_init() + b"".join(_gated_call(n) for n in range(2, total + 2))
    assert len(data) > 4 * MAXIMUM_REQUESTS_IN_FLIGHT * len(PADDING)
    async with pipes() as (in_r, in_w, out_r, out_w):
        server = asyncio.create_task(_serve(tool, in_r, out_w))
        reader = LineReader(out_r, MAXIMUM_FRAME_BYTES)
        written = threading.Event()

        def writer() -> None:
            write_all(in_w, data)
            written.set()

        feeding = asyncio.create_task(asyncio.to_thread(writer))
        await _answers(reader, 1)  # initialize
        async with asyncio.timeout(30):
            await tool.until(MAXIMUM_REQUESTS_IN_FLIGHT)
        stopped_reading = not written.is_set()
        for remaining in range(total, 0, -1):
            async with asyncio.timeout(30):
                await tool.until(min(remaining, MAXIMUM_REQUESTS_IN_FLIGHT))
            tool.release()
        answers = await _answers(reader, total)
        await feeding
        os.close(in_w)
        async with asyncio.timeout(30):
            await server
    assert stopped_reading
    assert MAXIMUM_REQUESTS_IN_FLIGHT == tool.peak
    assert total == tool.started
    assert set(range(2, total + 2)) == {a["id"] for a in answers}


def frame_of_init() -> bytes:
    return encode(INITIALIZE) + encode(INITIALIZED)


async def test_a_cancelled_request_gives_its_place_back() -> None:
    """A full cap, one request cancelled (never answered): the next request is admitted."""
    tool = GatedTool()
    full = MAXIMUM_REQUESTS_IN_FLIGHT
    async with pipes() as (in_r, in_w, out_r, out_w):
        server = asyncio.create_task(_serve(tool, in_r, out_w))
        reader = LineReader(out_r, MAXIMUM_FRAME_BYTES)
        calls = b"".join(_gated_call(n) for n in range(2, full + 2))
        await asyncio.to_thread(write_all, in_w, frame_of_init() + calls)
        await _answers(reader, 1)
        async with asyncio.timeout(30):
            await tool.until(full)
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 2},
        }
        extra = _gated_call(full + 2)
        await asyncio.to_thread(write_all, in_w, encode(cancel) + extra)
        async with asyncio.timeout(30):
            while tool.started < full + 1:
                tool.changed.clear()
                await tool.changed.wait()
        for _ in range(full):
            tool.release()
        answers = await _answers(reader, full)
        os.close(in_w)
        async with asyncio.timeout(30):
            await server
    assert set(range(3, full + 3)) == {a["id"] for a in answers}


def pipelined_growth(root: Path, count: int) -> tuple[int, int]:
    """Pipeline ``count`` 256 KiB ``replace`` creates; (answers that were ok, peak RSS growth)."""
    content = "x" * PIPELINED_BYTES
    with RawPeer(root) as peer:
        peer.initialize()
        peer.send(
            tool_call("warm", "replace", {"path": "warm.txt", "content": content, "create": True})
        )
        assert peer.answer("warm")["result"]["structuredContent"]["ok"]
        idle = max(vm_bytes(peer.pid, "VmHWM"), vm_bytes(peer.pid, "VmRSS"))
        frames = [
            encode(
                tool_call(n, "replace", {"path": f"d/{n}.txt", "content": content, "create": True})
            )
            for n in range(count)
        ]
        oks: list[bool] = []

        def seen(message: dict[str, Any]) -> None:
            if "result" in message:
                oks.append(bool(message["result"]["structuredContent"]["ok"]))

        answered = peer.pipeline(frames, seen)
        peak = vm_bytes(peer.pid, "VmHWM")
        _rest, code, _err = peer.finish()
    assert count == answered
    assert 0 == code
    return sum(oks), peak - idle


def test_pipelined_large_requests_keep_the_peak_rss_growth_bounded(tmp_path: Path) -> None:
    """600 pipelined 256 KiB replaces: all answered, peak RSS growth under 192 MiB."""
    oks, growth = pipelined_growth(tmp_path, PIPELINED_REQUESTS)
    assert PIPELINED_REQUESTS == oks
    assert growth < RSS_GROWTH_BOUND_BYTES


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SPICE_SOAK") != "1", reason="soak runs under SPICE_SOAK=1")
def test_two_thousand_pipelined_large_requests_keep_the_peak_rss_growth_bounded(
    tmp_path: Path,
) -> None:
    """The issue's figure: 2,000 pipelined 256 KiB replaces grow the peak RSS < 192 MiB."""
    oks, growth = pipelined_growth(tmp_path, SOAK_PIPELINED_REQUESTS)
    assert SOAK_PIPELINED_REQUESTS == oks
    assert growth < RSS_GROWTH_BOUND_BYTES


async def test_the_in_flight_count_settles_duplicate_ids_one_at_a_time_and_ignores_strangers() -> (
    None
):
    """Two requests with one id need two answers; an answer to an unknown id frees nothing."""
    in_flight = _InFlight(2)
    in_flight.admit(7)
    unanswered = in_flight.admit(7)
    in_flight.answered("stranger")
    room = asyncio.create_task(in_flight.room())
    await asyncio.sleep(0)
    blocked = not room.done()
    await unanswered()
    async with asyncio.timeout(5):
        await room
    drained = asyncio.create_task(in_flight.drained())
    await asyncio.sleep(0)
    still_one = not drained.done()
    in_flight.answered(7)
    async with asyncio.timeout(5):
        await drained
    assert (True, True) == (blocked, still_one)


async def test_a_request_with_a_boolean_id_is_answered_by_the_transport_in_process() -> None:
    """In process over pipes: ``id: true`` (the SDK's notification) gets Invalid Request."""
    chunks = [
        encode(INITIALIZE),
        encode(INITIALIZED),
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}\n',
        encode(request(2, "ping")),
    ]
    _init, invalid, ping = await exchange(chunks, [1, None, 2])
    assert INVALID_REQUEST == invalid["error"]["code"]
    assert {} == ping["result"]


@pytest.mark.parametrize("outcome", ["answered", "execution_error", "cancelled"])
async def test_a_finished_call_leaves_no_garbage_cycle_holding_its_arguments(
    outcome: str,
) -> None:
    """Answered, failed with an ``ExecutionError`` or cancelled: nothing cyclic keeps the call."""
    blocking = BlockingTool()
    dispatcher = Dispatcher([ProblemTool(), FailingTool(), blocking])
    name = {"answered": "problem", "execution_error": "failing", "cancelled": "blocking"}[outcome]
    async with piped(dispatcher) as server:
        await server.write(initialized())
        await server.message()
        gc.collect()
        gc.disable()
        try:
            await server.write(encode(tool_call(2, name, {"text": PADDING}, progressToken=2)))
            if outcome == "cancelled":
                async with asyncio.timeout(30):
                    await blocking.started.wait()
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
                await server.write(encode({**cancel, "params": {"requestId": 2}}))
                async with asyncio.timeout(30):
                    await blocking.cancelled.wait()
            await server.write(encode(request("after", "ping")))
            while "after" != (await server.message()).get("id"):
                pass
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            kept = [type(found).__name__ for found in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        server.close()
        await server.answers()
    assert [] == [kind for kind in kept if kind in {"Call", "CallToolRequestParams"}]
