"""Claude Code shows our long answers whole (contract 10.2), driven for real.

The Claude Agent SDK runs its bundled Claude Code CLI with the options of
``examples/claude_agent_sdk.py``; a loopback stand-in for the Messages API plays the model
(it calls one tool, then stops) and keeps what Claude Code sent it, which is exactly what a
model would have read. A 256 KiB page (about 270,000 characters of answer) arrives whole,
because each tool declares ``anthropic/maxResultSizeChars``. The same server with that key
renamed shows the other side: Claude Code saves the answer to a file and shows a 2 KB
preview, which still holds the digest, because big fields come last.

Contract 12.4: Claude Code shows the model the structured content, never the text block
(measured: a server whose text block said something else was shown the structured
content). Pages of quotes, backslashes and control bytes arrive whole (control bytes as
base64); Claude Code's line to the SDK holds the answer three times, so the example sets
``max_buffer_size``. A PNG arrives as an image.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gc
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Final

import claude_agent_sdk
import procutil
import pytest
from claude_agent_sdk import query
from claude_standin import StandIn
from test_examples import SPICE_CODING, load
from test_mcp_answers_wire import png

BUNDLED_CLI: Final = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
PREVIEW_CHARS: Final = 2048
"""What Claude Code shows of an answer it saved to a file."""
SAVE_THRESHOLD_CHARS: Final = 50_000
"""Claude Code saves a longer answer without the declaration."""
PAGE: Final = b"".join(b"    value_%06d = compute(%d)\n" % (n, n) for n in range(20_000))[:262_144]
LAST_LINE: Final = PAGE.decode().splitlines()[-2].strip()

pytestmark = pytest.mark.skipif(
    not BUNDLED_CLI.is_file(), reason="the Claude Agent SDK's bundled Claude Code CLI is missing"
)


@pytest.fixture(autouse=True)
def _loopback() -> None:
    """The stand-in listens on 127.0.0.1: up it comes in verify-offline's namespace, or skip."""
    reason = procutil.loopback_reason()
    if reason is not None:
        pytest.skip(reason)


def _without_declaration(tmp_path: Path) -> str:
    """``spice-coding`` whose tools carry no ``anthropic/maxResultSizeChars`` (the old server)."""
    script = tmp_path / "undeclared.py"
    script.write_text(
        "import sys\n"
        "from spice.agent.coding._mcp import _server as _mcp\n"
        "_mcp.RESULT_SIZE_META = 'spice.agent/undeclared'\n"
        "from spice.agent.coding._cli import main\n"
        "sys.exit(main())\n"
    )
    wrapper = tmp_path / "undeclared"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


async def _shown(
    tmp_path: Path, command: str, page: bytes = PAGE, *, default_buffer: bool = False
) -> str:
    """Run Claude Code on a worktree holding big.py (``page``); the text of the one tool
    result (``default_buffer``: the SDK's own line buffer, not the example's)."""
    results = (await _blocks(tmp_path, command, page, default_buffer=default_buffer))[0]
    assert 1 == len(results)
    return results[0]


async def _blocks(
    tmp_path: Path, command: str, page: bytes, *, default_buffer: bool = False
) -> tuple[list[str], list[dict[str, Any]]]:
    """Run Claude Code on a worktree holding big.py (``page``); the texts and the blocks of
    the tool results the model was shown."""
    root = tmp_path / "tree"
    root.mkdir()
    (root / "big.py").write_bytes(page)
    home = tmp_path / "home"
    home.mkdir()
    options = load("claude_agent_sdk").spice_options(command, str(root))
    with StandIn("mcp__spice-coding__read", {"path": "big.py"}) as standin:
        options = dataclasses.replace(
            options,
            max_buffer_size=None if default_buffer else options.max_buffer_size,
            cwd=str(root),
            max_turns=3,
            env={
                "ANTHROPIC_BASE_URL": standin.url,
                "ANTHROPIC_API_KEY": "stand-in",
                "HOME": str(home),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
                "ENABLE_TOOL_SEARCH": "false",  # offer the MCP tools at once, not behind a search
                "PATH": os.environ.get("PATH", ""),
            },
        )
        async for _ in query(prompt="Read big.py", options=options):
            pass
        return standin.tool_results(), standin.tool_result_blocks()


async def test_a_256_kib_page_reaches_the_model_whole(tmp_path: Path) -> None:
    """The whole answer, with both digests in its first 2 KB."""
    shown = await _shown(tmp_path, SPICE_CODING)
    digest = hashlib.sha256(PAGE).hexdigest()
    assert len(shown) > 5 * SAVE_THRESHOLD_CHARS
    assert shown.startswith('{"ok":true,"path":"big.py"')
    assert shown.endswith('"}')
    assert f'"file_sha256":"{digest}"' in shown[:PREVIEW_CHARS]
    assert PAGE.decode() == json.loads(shown)["content"]


async def test_without_the_declaration_only_a_preview_arrives_and_it_holds_the_digest(
    tmp_path: Path,
) -> None:
    """The other side: the answer is saved to a file; the 2 KB preview still shows the
    digest the model needs to edit (big fields last)."""
    shown = await _shown(tmp_path, _without_declaration(tmp_path))
    digest = hashlib.sha256(PAGE).hexdigest()
    assert len(shown) < 4 * PREVIEW_CHARS
    assert LAST_LINE not in shown  # the end of the page did not arrive
    assert f'"file_sha256":"{digest}"' in shown


@pytest.mark.parametrize(
    ("unit", "encoding"),
    [(b'"', "utf-8"), (b"\\", "utf-8"), (b"\x01", "base64")],
    ids=["quotes", "backslashes", "control-bytes"],
)
async def test_a_256_kib_page_at_the_worst_escaping_reaches_the_model_whole(
    tmp_path: Path, unit: bytes, encoding: str
) -> None:
    """Contract 12.4: Claude Code shows the model the structured content, which holds the
    whole page (quotes and backslashes as text, control bytes as base64: six characters a
    byte escaped would pass the payload bound); the text block beside it is the part the
    wire's bound shortens, and Claude Code never shows it. The example's
    ``max_buffer_size`` reads Claude Code's line, which holds the answer three times."""
    shown = await _shown(tmp_path, SPICE_CODING, unit * 262_144)
    if encoding == "utf-8":
        # 524,000 characters, past Claude Code's own cap of 500,000 whatever the server
        # declares: Claude Code saves the whole answer to a file the model can read, and
        # shows where (with a preview that holds the digests).
        saved = re.search(r"Full output saved to: (\S+)", shown)
        assert saved is not None
        assert '"file_sha256"' in shown
        shown = await asyncio.to_thread(Path(saved.group(1)).read_text)
    answer = json.loads(shown)
    assert (False, 262_144, encoding) == (answer["truncated"], answer["bytes"], answer["encoding"])
    page = answer["content"]
    assert unit * 262_144 == (page.encode() if encoding == "utf-8" else base64.b64decode(page))
    assert "text_note" not in answer
    assert hashlib.sha256(unit * 262_144).hexdigest() == answer["file_sha256"]


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_without_the_examples_buffer_the_sdk_cannot_read_the_line(tmp_path: Path) -> None:
    """The other side: with the SDK's default 1 MiB buffer, the line holding a page of
    quotes three times does not fit (``CLIJSONDecodeError``). The SDK then leaves its
    subprocess transport unclosed; it is collected here, so its warning stays this test's
    (the SDK's own, not ours) instead of failing whichever test runs the next collection."""
    with pytest.raises(claude_agent_sdk.CLIJSONDecodeError):
        await _shown(tmp_path, SPICE_CODING, b'"' * 262_144, default_buffer=True)
    assert 1 << 20 < load("claude_agent_sdk").LINE_BYTES
    await asyncio.sleep(0)
    gc.collect()


async def test_a_png_reaches_the_model_as_an_image(tmp_path: Path) -> None:
    """Contract 11.3: a whole image is an image block, which Claude Code hands the model as
    an image (base64, its media type from the bytes: the file is named big.py)."""
    data = png(3, 2)
    texts, blocks = await _blocks(tmp_path, SPICE_CODING, data)
    images = [block for block in blocks if block.get("type") == "image"]
    assert 1 == len(images)
    source = images[0]["source"]
    assert ("base64", "image/png", data) == (
        source["type"],
        source["media_type"],
        base64.b64decode(source["data"]),
    )
    del texts  # Claude Code adds a text of its own ("[Image: source: <its copy>]")
    (answer,) = (
        json.loads(block["text"])
        for block in blocks
        if block.get("type") == "text" and block["text"].startswith("{")
    )
    assert ("image/png", len(data)) == (answer["mime_type"], answer["bytes"])
