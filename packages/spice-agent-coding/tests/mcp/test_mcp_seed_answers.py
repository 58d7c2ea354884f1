"""The seed's base64 rule over MCP, bytes on the wire (contract 12.4).

The real ``mcp`` SDK client runs ``spice-coding serve`` over stdio; the server's standard
output passes through ``tee`` into a file, so the test reads every line the client read,
byte for byte. The seed's cases:

- RD: a ``read`` page of 300 KiB of NUL bytes (1.8 MB escaped as JSON) comes whole, base64;
- SH-25: a ``shell`` capture of 180 KiB of NUL bytes comes whole, base64 (245,760
  characters; round 4 returned 52,274 bytes and left 132,046 out);
- SH-26: a capture of 512 KiB still comes whole.

Each answer's line is at most ``MAXIMUM_ANSWER_BYTES``: where the structured content and
the text block would not fit together, the text block is the shorter answer that says so
(``text_note``) and the structured content stays whole. A client that reads only the
structured content (Claude Code, VS Code) loses nothing; one that reads only the text gets
a consistent shorter page or capture.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Final

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation, TextContent
from test_examples import RUN_BOUND_SECONDS, SPICE_CODING

from spice.agent.coding._mcp._dialects import GEMINI_TEXT_CHARS
from spice.agent.coding._mcp._text_block import TEXT_NOTE, text_chars
from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES

RD_BYTES: Final = 300 * 1024
SH25_BYTES: Final = 180 * 1024
SH26_BYTES: Final = 512 * 1024
LARGEST: Final = 524_288


def _writer(count: int, unit: str = "\\0") -> list[str]:
    """argv of a command that writes ``count`` bytes of ``unit`` to stdout."""
    code = f"import sys; sys.stdout.buffer.write(b'{unit}' * {count})"
    return [sys.executable, "-c", code]


async def _calls(
    tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], client_name: str | None = None
) -> tuple[list[tuple[dict[str, Any], str]], list[bytes]]:
    """Each call's (structured content, text block) through the SDK client over stdio, and
    every line the server wrote."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    (root / "zeros").write_bytes(b"\0" * RD_BYTES)
    (root / "quotes.txt").write_bytes(b'"' * 262_144)
    wire = tmp_path / "wire"
    serve = [
        SPICE_CODING, "--root", str(root), "serve",
        "--max-read-bytes", str(LARGEST), "--max-output-bytes", str(LARGEST),
    ]  # fmt: skip
    command = f"{shlex.join(serve)} | tee {shlex.quote(str(wire))}"
    server = StdioServerParameters(command="/bin/sh", args=["-c", command])
    info = None if client_name is None else Implementation(name=client_name, version="1")
    answers: list[tuple[dict[str, Any], str]] = []
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write, client_info=info) as session,
        ):
            await session.initialize()
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                [block] = result.content
                assert isinstance(block, TextContent)
                assert result.structured_content is not None
                answers.append((result.structured_content, block.text))
    return answers, wire.read_bytes().splitlines()


def _stream(content: dict[str, Any], name: str) -> bytes:
    text = str(content[name])
    return text.encode() if content["encoding"] == "utf-8" else base64.b64decode(text)


def _check_capture_text(shown: dict[str, Any]) -> None:
    """A capture's text block keeps ``observed = captured + omitted`` for each stream."""
    for name in ("stdout", "stderr"):
        assert shown[f"{name}_bytes"] == len(_stream(shown, name)) + shown[f"{name}_omitted_bytes"]


async def test_rd_sh25_sh26_come_whole_and_every_line_fits(tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read", {"path": "zeros"}),
        ("shell", {"argv": _writer(SH25_BYTES)}),
        ("shell", {"argv": _writer(SH26_BYTES)}),
    ]
    answers, lines = await _calls(tmp_path, calls)
    assert all(len(line) + 1 <= MAXIMUM_ANSWER_BYTES for line in lines)
    (rd, rd_text), (sh25, sh25_text), (sh26, sh26_text) = answers
    # RD: the whole page, base64, with its digest; the text block is the same answer.
    assert ("base64", False, b"\0" * RD_BYTES) == (
        rd["encoding"],
        rd["truncated"],
        base64.b64decode(rd["content"]),
    )
    assert rd == json.loads(rd_text)
    # SH-25: the whole capture (245,760 characters of base64), nothing left out.
    assert ("base64", False, 0, b"\0" * SH25_BYTES) == (
        sh25["encoding"],
        sh25["output_truncated"],
        sh25["stdout_omitted_bytes"],
        _stream(sh25, "stdout"),
    )
    assert 245_760 == len(sh25["stdout"])
    assert sh25 == json.loads(sh25_text)
    # SH-26: the whole capture in the structured content; its text block is shorter and
    # says so (both together would pass 1 MiB).
    assert ("base64", False, b"\0" * SH26_BYTES) == (
        sh26["encoding"],
        sh26["output_truncated"],
        _stream(sh26, "stdout"),
    )
    shown = json.loads(sh26_text)
    assert (TEXT_NOTE, True, "base64") == (
        shown["text_note"],
        shown["output_truncated"],
        shown["encoding"],
    )
    _check_capture_text(shown)
    kept = _stream(shown, "stdout")
    assert 100_000 < len(kept) < SH26_BYTES
    assert kept == b"\0" * len(kept)


async def test_a_page_of_quotes_is_whole_text_and_its_text_block_a_shorter_page(
    tmp_path: Path,
) -> None:
    """256 KiB of quotes escape to 512 KiB: within the payload bound, so text, whole; the
    text block (each quote written as four bytes there) is the longest page that fits,
    with ``next_offset``; reading on from there gives the rest."""
    answers, lines = await _calls(tmp_path, [("read", {"path": "quotes.txt"})])
    assert all(len(line) + 1 <= MAXIMUM_ANSWER_BYTES for line in lines)
    [(content, text)] = answers
    assert ("utf-8", False, '"' * 262_144) == (
        content["encoding"],
        content["truncated"],
        content["content"],
    )
    shown = json.loads(text)
    kept = shown["bytes"]
    assert (True, kept, '"' * kept, TEXT_NOTE) == (
        shown["truncated"],
        shown["next_offset"],
        shown["content"],
        shown["text_note"],
    )
    assert "sha256" not in shown
    assert content["file_sha256"] == shown["file_sha256"]
    assert 100_000 < kept < 262_144
    # Within a few bytes of the bound: the line is as full as it can be.
    assert max(len(line) for line in lines) > MAXIMUM_ANSWER_BYTES - 4096


async def test_a_small_answer_has_the_same_text_and_structured_content(tmp_path: Path) -> None:
    """The other side: an answer that fits twice is sent twice, whole, with no note."""
    answers, _ = await _calls(tmp_path, [("shell", {"argv": _writer(10, "a")})])
    [(content, text)] = answers
    assert content == json.loads(text)
    assert "text_note" not in content
    assert "aaaaaaaaaa" == content["stdout"]


async def test_a_gemini_client_gets_text_within_its_limit_and_whole_structured_content(
    tmp_path: Path,
) -> None:
    """Gemini CLI cuts an answer past 40,000 characters: a client named for Gemini gets a
    text block within that (a shorter page and a shorter capture that say so); the
    structured content stays whole."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read", {"path": "zeros"}),
        ("shell", {"argv": _writer(SH25_BYTES, "a")}),
    ]
    answers, _ = await _calls(tmp_path, calls, client_name="gemini-cli-mcp-client")
    (page, page_text), (run, run_text) = answers
    assert (False, b"\0" * RD_BYTES) == (page["truncated"], base64.b64decode(page["content"]))
    assert (False, "a" * SH25_BYTES) == (run["output_truncated"], run["stdout"])
    for text in (page_text, run_text):
        assert GEMINI_TEXT_CHARS - 200 < text_chars(text) <= GEMINI_TEXT_CHARS
        assert TEXT_NOTE == json.loads(text)["text_note"]
    shown_page = json.loads(page_text)
    assert (True, shown_page["bytes"]) == (shown_page["truncated"], shown_page["next_offset"])
    assert b"\0" * shown_page["bytes"] == base64.b64decode(shown_page["content"])
    _check_capture_text(json.loads(run_text))
