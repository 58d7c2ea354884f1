"""Hypothesis over ``read``'s arguments and paths: only Results or ExecutionErrors come out."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from coding_strategies import byte_content, path_strings, read_argument_texts
from hypothesis import given, settings

from spice.agent.tool import Call, ExecutionError, Result, Tool
from spice.agent.tools.coding import Config, new_read

MARK = "\u2603"
"""A character no fixed problem text contains; generated paths may carry it."""


@pytest.fixture(scope="module")
def worktree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small worktree shared by every generated example (read-only use)."""
    base = tmp_path_factory.mktemp("read-properties")
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a").write_bytes(b"alpha\n")
    (root / "file.txt").write_bytes("é€𝄞\r\n".encode())
    (root / "sub" / "file.txt").write_bytes(b"\xff\x00binary")
    (root / "link").symlink_to("sub/file.txt")
    (root / "outside").symlink_to("../outside")
    (base / "outside").mkdir()
    (base / "outside" / "a").write_bytes(b"SENTINEL")
    return root


def outcome(tool: Tool, arguments: str) -> Result | ExecutionError:
    """Run one call to completion; an ExecutionError is returned, anything else escapes."""

    async def call() -> Result:
        return await tool.execute(Call("prop", "read", arguments))

    try:
        return asyncio.run(call())
    except ExecutionError as error:
        return error


def check(result: Result | ExecutionError, root: Path) -> None:
    """A model-visible answer that leaks no machine path and no generated text."""
    assert isinstance(result, Result)
    content = json.loads(result.content)
    assert content["ok"] is (result.problem is None)
    if result.problem is not None:
        # The one machine path a problem may show: the configured root, in the refusal of an
        # absolute path outside it (contract 10.2); nothing else of the machine.
        problem = result.problem.replace(f"the worktree root ({root})", "the worktree root")
        assert str(root.parent) not in problem
        assert MARK not in problem
    else:
        assert "SENTINEL" not in str(content["content"])


@given(read_argument_texts())
@settings(max_examples=100, deadline=None)
def test_any_json_arguments_give_a_result(worktree: Path, arguments: str) -> None:
    """Arbitrary JSON (objects, odd values, non-objects) never raises anything else."""
    try:
        Call("prop", "read", arguments)
    except ValueError:
        return  # the contract's Call refuses it before any tool sees it
    check(outcome(new_read(Config(worktree)), arguments), worktree)


@given(path_strings)
@settings(max_examples=100, deadline=None)
def test_any_path_string_gives_a_result_without_echoing_it(worktree: Path, path: str) -> None:
    """Every path string is read or refused; problems never echo it or the machine path."""
    arguments = json.dumps({"path": path, "limit": 64})
    check(outcome(new_read(Config(worktree, max_read_bytes=64)), arguments), worktree)


@given(byte_content)
@settings(max_examples=50, deadline=None)
def test_pages_reassemble_to_the_file_byte_for_byte(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    """Reading page after page (limit 3) and decoding each gives back exactly the file."""
    root = tmp_path_factory.mktemp("pages")
    (root / "f").write_bytes(data)
    tool = new_read(Config(root, max_read_bytes=3))
    offset, collected = 0, b""
    for _ in range(len(data) + 1):
        result = outcome(tool, json.dumps({"path": "f", "offset": offset}))
        assert isinstance(result, Result)
        content = json.loads(result.content)
        page = (
            str(content["content"]).encode()
            if content["encoding"] == "utf-8"
            else base64.b64decode(content["content"])
        )
        assert content["bytes"] == len(page)
        collected += page
        if not content["truncated"]:
            break
        assert content["bytes"] > 0
        offset = content["next_offset"]
    assert data == collected
