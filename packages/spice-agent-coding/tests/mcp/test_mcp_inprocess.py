"""The MCP server in process, driven by the real ``mcp.Client``.

Each test runs twice: over the SDK's in-memory JSON-RPC streams (``legacy``
handshake) and over its direct per-request path (``auto``, the 2026 protocol).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
from app_fakes import (
    FAILURE_MESSAGE,
    PROGRESS_MESSAGE,
    BlockingTool,
    EchoTool,
    FailingTool,
    ProblemTool,
)
from mcp import Client, MCPError
from mcp.types import INTERNAL_ERROR, TextContent

from spice.agent.coding import mcp_server
from spice.agent.coding._mcp._dialects import portable_schema
from spice.agent.coding._mcp._server import META_PREFIX, annotations_of
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import (
    MAXIMUM_IDENTITY_BYTES,
    MAXIMUM_PAYLOAD_BYTES,
    Capability,
    Effect,
    ReplaySafety,
    Tool,
)

MODES = ["legacy", "auto"]


@asynccontextmanager
async def connected(tools: Sequence[Tool], mode: str) -> AsyncIterator[Client]:
    async with Client(mcp_server(Dispatcher(tools)), mode=mode) as client:
        yield client


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


async def test_every_definition_is_listed_with_honest_annotations(mode: str) -> None:
    """Each definition is one MCP tool; its hints follow effect, replay safety and network."""
    tools: list[Tool] = [
        EchoTool("read"),
        EchoTool(
            "replace",
            Effect.MUTATING,
            ReplaySafety.IDEMPOTENT,
            (Capability.FILESYSTEM_READ, Capability.FILESYSTEM_WRITE),
        ),
        EchoTool("shell", Effect.MUTATING, ReplaySafety.UNSAFE, tuple(Capability)),
        EchoTool("local", Effect.MUTATING, ReplaySafety.UNSAFE, (Capability.PROCESS_EXECUTE,)),
    ]
    async with connected(tools, mode) as client:
        listed = (await client.list_tools()).tools
    hints = {
        t.name: (
            t.annotations.read_only_hint,
            t.annotations.destructive_hint,
            t.annotations.idempotent_hint,
            t.annotations.open_world_hint,
        )
        for t in listed
        if t.annotations is not None
    }
    assert {
        "local": (False, True, False, False),
        "read": (True, False, True, False),
        "replace": (False, True, True, False),
        "shell": (False, True, False, True),
    } == hints


async def test_listed_tools_carry_schema_description_and_fingerprint(mode: str) -> None:
    """The description and fingerprint are the definition's own; the input schema is the
    definition's in the portable dialect (the in-process client names itself ``mcp``)."""
    tool = EchoTool("read")
    async with connected([tool], mode) as client:
        [listed] = (await client.list_tools()).tools
    assert portable_schema(json.loads(tool.definition.input_schema)) == listed.input_schema
    assert tool.definition.description == listed.description
    assert listed.meta is not None
    assert tool.definition.fingerprint == listed.meta[f"{META_PREFIX}fingerprint"]
    assert ["filesystem.read"] == listed.meta[f"{META_PREFIX}capabilities"]


async def test_a_successful_call_carries_structured_content_and_a_text_copy(mode: str) -> None:
    """A success is structuredContent (the content object), the same JSON as text, no isError."""
    async with connected([EchoTool()], mode) as client:
        result = await client.call_tool("echo", {"text": "héllo"})
    assert {"ok": True, "echo": "héllo"} == result.structured_content
    [text] = result.content
    assert isinstance(text, TextContent)
    assert result.structured_content == json.loads(text.text)
    assert False is result.is_error


async def test_a_model_visible_failure_is_an_is_error_result(mode: str) -> None:
    """A Result with a problem is isError with the content still structured."""
    async with connected([ProblemTool()], mode) as client:
        result = await client.call_tool("problem", {})
    assert True is result.is_error
    assert "not_found" == result.structured_content["code"]


async def test_invalid_arguments_reach_the_tool_and_come_back_visible(mode: str) -> None:
    """Arguments the tool rejects are the tool's own invalid_arguments result."""
    async with connected([EchoTool()], mode) as client:
        result = await client.call_tool("echo", {"text": "x", "extra": 1})
    assert True is result.is_error
    assert "invalid_arguments" == result.structured_content["code"]


async def test_an_unknown_tool_is_the_dispatchers_unknown_tool_result(mode: str) -> None:
    """A name no tool has is a visible unknown_tool result, not a protocol error."""
    tool = EchoTool()
    async with connected([tool], mode) as client:
        result = await client.call_tool("nope", {})
    assert True is result.is_error
    assert "unknown_tool" == result.structured_content["code"]
    assert (
        "no tool named 'nope' is available; the tools are: echo"
        == result.structured_content["message"]
    )
    assert [] == tool.calls


async def test_a_name_beyond_the_identity_bound_is_unknown(mode: str) -> None:
    """A name longer than any tool name could be is unknown_tool, and reaches no tool; it is
    named shortened (contract 11.3), as the dispatcher names a valid unknown name."""
    async with connected([EchoTool()], mode) as client:
        result = await client.call_tool("x" * (MAXIMUM_IDENTITY_BYTES + 1), {})
    assert "unknown_tool" == result.structured_content["code"]
    shown = f"no tool named '{'x' * 64}'... is available; the tools are: echo"
    assert shown == result.structured_content["message"]


@pytest.mark.parametrize("name", ["re\x00ad", " read", "\u202eread\n", "x" * 5000])
async def test_a_name_no_call_can_have_is_named_printable_and_bounded(mode: str, name: str) -> None:
    """Control characters, surrounding spaces, a huge name: never echoed raw, never long."""
    async with connected([EchoTool()], mode) as client:
        result = await client.call_tool(name, {})
    message = result.structured_content["message"]
    assert "unknown_tool" == result.structured_content["code"]
    assert message.startswith("no tool named '")
    assert message.isprintable()
    assert len(message) < 200


async def test_arguments_beyond_the_payload_bound_are_invalid(mode: str) -> None:
    """Arguments whose JSON exceeds the payload bound never reach the tool."""
    tool = EchoTool()
    async with connected([tool], mode) as client:
        at_bound = "x" * (MAXIMUM_PAYLOAD_BYTES - len('{"text":""}'))
        accepted = await client.call_tool("echo", {"text": at_bound})
        refused = await client.call_tool("echo", {"text": at_bound + "x"})
    assert False is accepted.is_error
    assert "invalid_arguments" == refused.structured_content["code"]
    assert 1 == len(tool.calls)


async def test_an_execution_error_is_a_protocol_error_with_its_message(mode: str) -> None:
    """An ExecutionError becomes a JSON-RPC error: its bounded message, state and retry."""
    async with connected([FailingTool()], mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("failing", {})
    assert INTERNAL_ERROR == raised.value.code
    assert FAILURE_MESSAGE == raised.value.message
    assert {"state": "uncertain", "retry": "never"} == {
        k: raised.value.data[k] for k in ("state", "retry")
    }


async def test_progress_reaches_the_client_as_notifications(mode: str) -> None:
    """With a progress callback (a progress token), the tool's progress arrives as MCP progress."""
    seen: list[str | None] = []
    arrived = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        arrived.set()

    async with connected([EchoTool()], mode) as client:
        await client.call_tool("echo", {}, progress_callback=on_progress)
        async with asyncio.timeout(5):
            await arrived.wait()
    assert [PROGRESS_MESSAGE] == seen


async def test_without_a_progress_token_the_call_still_succeeds(mode: str) -> None:
    """A tool reporting progress to a client that asked for none is not disturbed."""
    async with connected([EchoTool()], mode) as client:
        result = await client.call_tool("echo", {"text": "quiet"})
    assert False is result.is_error


async def test_cancelling_the_request_cancels_the_calls_task(mode: str) -> None:
    """A client cancelling a call cancels the tool's task on the server."""
    tool = BlockingTool()
    async with connected([tool, EchoTool()], mode) as client:
        call = asyncio.create_task(client.call_tool("blocking", {}))
        async with asyncio.timeout(5):
            await tool.started.wait()
        call.cancel()
        async with asyncio.timeout(5):
            await tool.cancelled.wait()
        with pytest.raises(asyncio.CancelledError):
            await call
        after = await client.call_tool("echo", {"text": "still served"})
    assert {"ok": True, "echo": "still served"} == after.structured_content


async def test_closing_the_connection_cancels_calls_in_flight(mode: str) -> None:
    """Leaving the client while a call runs cancels it on the server."""
    tool = BlockingTool()
    async with connected([tool], mode) as client, asyncio.TaskGroup() as group:
        call = group.create_task(client.call_tool("blocking", {}))
        async with asyncio.timeout(5):
            await tool.started.wait()
        call.cancel()
    async with asyncio.timeout(5):
        await tool.cancelled.wait()


def test_annotations_follow_the_definition() -> None:
    """The hint mapping is the contract's: read-only, mutating, safe-or-idempotent, network."""
    hints = annotations_of(EchoTool().definition)
    assert (True, False, True, False) == (
        hints.read_only_hint,
        hints.destructive_hint,
        hints.idempotent_hint,
        hints.open_world_hint,
    )


def test_mcp_server_takes_a_dispatcher() -> None:
    """Anything but a Dispatcher is refused."""
    with pytest.raises(TypeError):
        mcp_server([EchoTool()])  # type: ignore[arg-type]
