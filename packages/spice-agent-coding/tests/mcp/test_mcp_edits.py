"""replace by edits over ``spice-coding serve``, driven by the real MCP client (contract 9.2)."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
from mcp import Client, StdioServerParameters

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
SOURCE: Final = "def greet(name):\n    return 'Helo, ' + name\n"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A worktree holding one small source file."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "greet.py").write_text(SOURCE)
    return tree


@asynccontextmanager
async def client_for(worktree: Path, transport: str = "stdio") -> AsyncIterator[Client]:
    """The real MCP client to ``spice-coding serve --root worktree``: over stdio, or over
    streamable HTTP (a token with every scope)."""
    if transport == "http":
        from http_support import http_server, sdk_client  # noqa: PLC0415 - the http leg only

        async with (
            http_server(worktree.parent, worktree) as server,
            sdk_client(server.url, server.tokens["full"]) as client,
        ):
            yield client
        return
    params = StdioServerParameters(
        command=str(SCRIPT), args=["serve", "--root", str(worktree)], cwd=str(worktree.parent)
    )
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening /dev/null
        from mcp import stdio_client  # noqa: PLC0415 - beside its one use

        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


@pytest.fixture(params=("stdio", "http"))
def transport(request: pytest.FixtureRequest) -> str:
    """Each test runs once per transport."""
    chosen: str = request.param
    return chosen


async def test_a_read_then_an_edit_commits_and_answers_with_the_diff(
    worktree: Path, transport: str
) -> None:
    """read gives the digest; replace with edits commits; the diff shows the one change."""
    async with client_for(worktree, transport) as client:
        read = await client.call_tool("read", {"path": "greet.py"})
        digest = read.structured_content["file_sha256"]
        edits = [{"old_text": "Helo", "new_text": "Hello"}]
        edited = await client.call_tool(
            "replace", {"path": "greet.py", "expected_sha256": digest, "edits": edits}
        )
        replay = await client.call_tool(
            "replace", {"path": "greet.py", "expected_sha256": digest, "edits": edits}
        )
    content = edited.structured_content
    assert hashlib.sha256(SOURCE.encode()).hexdigest() == digest
    assert (False, True, True, 1) == (
        edited.is_error,
        content["committed"],
        content["durable"],
        content["edits_applied"],
    )
    assert "-    return 'Helo, ' + name\n+    return 'Hello, ' + name\n" in content["diff"]
    assert SOURCE.replace("Helo", "Hello") == (worktree / "greet.py").read_text()
    assert (True, "stale") == (replay.is_error, replay.structured_content["code"])


async def test_a_strict_client_call_with_every_property_and_nulls_works(
    worktree: Path, transport: str
) -> None:
    """All properties sent, the unused ones null, as strict-schema clients do: it commits."""
    async with client_for(worktree, transport) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        properties = listed["replace"].input_schema["properties"]
        digest = hashlib.sha256(SOURCE.encode()).hexdigest()
        arguments = {
            "path": "greet.py",
            "expected_sha256": digest,
            "edits": [{"old_text": "Helo", "new_text": "Hello", "replace_all": None}],
            "content": None,
            "create": None,
            "encoding": None,
        }
        edited = await client.call_tool("replace", arguments)
    assert set(arguments) == set(properties)
    assert (False, True) == (edited.is_error, edited.structured_content["committed"])


async def test_an_ambiguous_edit_is_an_error_result_and_writes_nothing(
    worktree: Path, transport: str
) -> None:
    """edit_ambiguous comes back as isError with the index and count in its message."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()
    edits = [{"old_text": "name", "new_text": "who"}]
    async with client_for(worktree, transport) as client:
        failed = await client.call_tool(
            "replace", {"path": "greet.py", "expected_sha256": digest, "edits": edits}
        )
    assert (True, "edit_ambiguous") == (failed.is_error, failed.structured_content["code"])
    assert failed.structured_content["message"].startswith("edit 0: old_text occurs 2 times")
    assert SOURCE == (worktree / "greet.py").read_text()
