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
