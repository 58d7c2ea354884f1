"""The HTTP gate in process (the real ``mcp.Client`` on the in-memory transport): without an
authenticated request it fails closed, and every call, refused or not, is audited."""

from __future__ import annotations

import io
import json

import pytest
from app_fakes import EchoTool
from mcp import Client

from spice.agent.coding._mcp._audit import AUDIT_PREFIX, AuditLog
from spice.agent.coding._mcp._gate import HttpGate
from spice.agent.coding._mcp._server import serving
from spice.agent.dispatch import Dispatcher


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_without_an_authenticated_request_nothing_is_listed_or_called(mode: str) -> None:
    """No HTTP request behind the call (no user): an empty listing, ``forbidden`` for a
    served tool, one audit line naming no token; the tool never ran."""
    tool = EchoTool()
    name = tool.definition.name
    stream = io.StringIO()
    gate = HttpGate(frozenset({name}), frozenset({name}), AuditLog(stream=stream), 4)
    server, _ = serving(Dispatcher([tool]), gate=gate)
    async with Client(server, mode=mode) as client:
        listed = (await client.list_tools()).tools
        answer = await client.call_tool(name, {"text": "SECRET"})
    assert [] == listed
    assert (True, "forbidden") == (answer.is_error, answer.structured_content["code"])
    assert [] == tool.calls
    [line] = stream.getvalue().splitlines()
    record = json.loads(line.removeprefix(AUDIT_PREFIX))
    assert ("-", name, "forbidden") == (record["token"], record["tool"], record["outcome"])
    assert "SECRET" not in line


async def test_an_unknown_tool_name_is_audited_without_the_name() -> None:
    """A client-chosen name the server does not serve is logged as ``(unknown)``."""
    stream = io.StringIO()
    gate = HttpGate(frozenset(), frozenset({"echo"}), AuditLog(stream=stream), 4)
    server, _ = serving(Dispatcher([EchoTool()]), gate=gate)
    async with Client(server) as client:
        answer = await client.call_tool("no-such-tool-SECRET", {})
    assert "unknown_tool" == answer.structured_content["code"]
    record = json.loads(stream.getvalue().removeprefix(AUDIT_PREFIX))
    assert ("(unknown)", "unknown_tool") == (record["tool"], record["outcome"])
    assert "SECRET" not in stream.getvalue()
