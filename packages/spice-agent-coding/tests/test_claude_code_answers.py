"""Claude Code shows our long answers whole (contract 10.2), driven for real.

The Claude Agent SDK runs its bundled Claude Code CLI with the options of
``examples/claude_agent_sdk.py``; a loopback stand-in for the Messages API plays the model
(it calls one tool, then stops) and keeps what Claude Code sent it, which is exactly what a
model would have read. A 256 KiB page (about 270,000 characters of answer) arrives whole,
because each tool declares ``anthropic/maxResultSizeChars``. The same server with that key
renamed shows the other side: Claude Code saves the answer to a file and shows a 2 KB
preview, which still holds the digest, because big fields come last.

Contract 11.3: pages of quotes, backslashes and control bytes (1.5 MB on the MCP wire
whole, about 1.75 MB in Claude Code's line to the SDK, which failed with
``CLIJSONDecodeError``) arrive shortened to fit; a PNG arrives as an image.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
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


async def _shown(tmp_path: Path, command: str, page: bytes = PAGE) -> str:
    """Run Claude Code on a worktree holding big.py (``page``); the text of the one tool
    result."""
    results = (await _blocks(tmp_path, command, page))[0]
    assert 1 == len(results)
    return results[0]


async def _blocks(
    tmp_path: Path, command: str, page: bytes
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
    "unit", [b'"', b"\\", b"\x01"], ids=["quotes", "backslashes", "control-bytes"]
)
async def test_a_256_kib_page_at_the_worst_escaping_reaches_the_model_shortened(
    tmp_path: Path, unit: bytes
) -> None:
    """Contract 11.3: a page of quotes (or backslashes) is 1.5 MB on the wire whole, past the
    SDK's 1 MiB line (it raised ``CLIJSONDecodeError`` and the call never ended well). The
    page is shortened to fit: the model reads the longest prefix that fits, told where the
    next page starts."""
    shown = await _shown(tmp_path, SPICE_CODING, unit * 262_144)
    answer = json.loads(shown)
    kept = answer["bytes"]
    assert (True, kept, unit.decode() * kept) == (
        answer["truncated"],
        answer["next_offset"],
        answer["content"],
    )
    assert 50_000 < kept < 262_144  # control bytes take 20 bytes each, quotes 10
    assert hashlib.sha256(unit * 262_144).hexdigest() == answer["file_sha256"]


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
