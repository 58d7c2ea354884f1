"""``replace`` over ``spice-coding serve`` with the real MCP client: its answer carries
``call_id``, the one the journal's entry names (contract 13.2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from mcp import Client, StdioServerParameters

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
WAIT_SECONDS: Final = 60.0

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")


def history_of(root: Path, environ: dict[str, str]) -> list[dict[str, object]]:
    """``spice-coding history --json``'s entries, by the real command in a child."""
    history = subprocess.run(
        [str(SCRIPT), "--root", str(root), "history", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=WAIT_SECONDS,
        check=False,
    )
    entries: list[dict[str, object]] = json.loads(history.stdout)["entries"]
    return entries


async def test_a_replace_answer_carries_the_call_id_the_journal_names(tmp_path: Path) -> None:
    root, state = tmp_path / "tree", tmp_path / "state"
    root.mkdir()
    environ = {**os.environ, "XDG_STATE_HOME": str(state)}
    params = StdioServerParameters(
        command=str(SCRIPT), args=["serve", "--root", str(root)], cwd=str(tmp_path), env=environ
    )
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening /dev/null
        from mcp import stdio_client  # noqa: PLC0415 - beside its one use

        async with Client(stdio_client(params, errlog=errlog)) as client:
            created = await client.call_tool(
                "replace", {"path": "new.txt", "content": "made\n", "create": True}
            )
            refused = await client.call_tool("replace", {"path": "new.txt"})
    content = created.structured_content
    assert (False, True) == (created.is_error, content["committed"])
    call_id = content["call_id"]
    assert isinstance(call_id, str)
    assert call_id
    assert isinstance(refused.structured_content["call_id"], str)
    entries = history_of(root, environ)
    assert [("replace", call_id, ["A new.txt"])] == [
        (e["tool"], e["call_id"], e["paths"]) for e in entries
    ]


MANY_FILES: Final = 10_000
ANSWER_BOUND_BYTES: Final = 8_000
"""What a model may receive for a call that added ``MANY_FILES`` files and printed nothing:
the counts whole, at most ``SHOWN_CHANGES`` paths (a few kilobytes), never the whole list."""


async def test_what_a_model_receives_for_ten_thousand_files_stays_bounded(
    visible_path: Path,
) -> None:
    """Judged as an agent author would (13.2): a staged call that adds 10,000 files, over
    the real MCP client: the text block and the structured content stay within a few
    kilobytes, the counts are whole, at most ``SHOWN_CHANGES`` paths are listed. A
    ``dry_run`` of the same command lists the same counts and leaves the tree as it was."""
    from spice.agent.tools.coding._changes import SHOWN_CHANGES  # noqa: PLC0415 - one use

    tmp_path = visible_path  # outside /tmp, which the namespace path makes private
    root, state = tmp_path / "tree", tmp_path / "state"
    root.mkdir()
    environ = {**os.environ, "XDG_STATE_HOME": str(state)}
    params = StdioServerParameters(
        command=str(SCRIPT), args=["serve", "--root", str(root)], cwd=str(tmp_path), env=environ
    )
    script = f"mkdir many && cd many && seq {MANY_FILES} | xargs touch"
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening /dev/null
        from mcp import stdio_client  # noqa: PLC0415 - beside its one use

        async with Client(stdio_client(params, errlog=errlog)) as client:
            probe = await client.call_tool("shell", {"argv": ["/bin/true"]})
            staged = probe.structured_content.get("staged") is True
            if staged:
                dry = await client.call_tool(
                    "shell", {"argv": ["/bin/sh", "-c", script], "dry_run": True}
                )
                assert not (root / "many").exists()
                done = await client.call_tool("shell", {"argv": ["/bin/sh", "-c", script]})
    if not staged:
        reason = probe.structured_content.get("staged_reason")
        pytest.skip(f"calls are not staged here: {reason}")
    assert dry.structured_content.get("ok") is True, dry.structured_content.get("message")
    for answer, applied in ((dry, False), (done, True)):
        content = answer.structured_content
        changes = content["changes"]
        assert (changes["added"], changes["modified"], changes["deleted"]) == (MANY_FILES + 1, 0, 0)
        assert len(changes["paths"]) == SHOWN_CHANGES
        assert content["changes_applied"] is applied
        text = "".join(block.text for block in answer.content if block.type == "text")
        shown = len(text.encode()) + len(json.dumps(content).encode())
        assert shown <= ANSWER_BOUND_BYTES, shown
    assert len(list((root / "many").iterdir())) == MANY_FILES
