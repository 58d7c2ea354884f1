"""LangChain's MCP adapters keep one session (contract 12.4).

``examples/langchain/langchain_agent.py`` runs in the environment ``make langchain`` makes
(the adapters need the mcp 1.x SDK, so they cannot share ours), against the real
``spice-coding serve``. The server command is a wrapper that writes one line per start, so
the test counts the servers the snippet started: one for the whole task. The other side:
``get_tools()``, the adapters' default, starts a server per call.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Final

import pytest
from test_examples import EXAMPLES, RUN_BOUND_SECONDS, SPICE_CODING

LANGCHAIN: Final = EXAMPLES / "langchain"
PYTHON: Final = LANGCHAIN / ".venv" / "bin" / "python"
SNIPPET_RUN: Final = """\
import asyncio, sys
sys.path.insert(0, sys.argv[3])
import langchain_agent as example
print(asyncio.run(example.main(sys.argv[1], sys.argv[2])))
"""
DEFAULT_RUN: Final = """\
import asyncio, sys
sys.path.insert(0, sys.argv[3])
import langchain_agent as example

async def main():
    tools = {t.name: t for t in await example.spice_client(sys.argv[1], sys.argv[2]).get_tools()}
    await tools["read"].ainvoke({"path": "greeting.py", "limit": 1})
    return await tools["shell"].ainvoke({"argv": ["true"]})

print(asyncio.run(main()))
"""


@pytest.fixture
def counted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A worktree, a server command that logs each start, and the log."""
    if not (LANGCHAIN / ".venv" / "installed").is_file():
        pytest.skip("LangChain's environment is not installed (make langchain)")
    root = tmp_path / "tree"
    root.mkdir()
    (root / "greeting.py").write_text("GREETING = 'hi'\n")
    (root / "test_greeting.py").write_text(
        "import unittest\nimport greeting\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_it(self):\n        self.assertEqual('hi', greeting.GREETING)\n"
    )
    starts = tmp_path / "starts"
    wrapper = tmp_path / "counted-spice-coding"
    wrapper.write_text(f'#!/bin/sh\necho start >> "{starts}"\nexec "{SPICE_CODING}" "$@"\n')
    wrapper.chmod(0o755)
    return root, wrapper, starts


def _run(script: str, wrapper: Path, root: Path) -> str:
    done = subprocess.run(
        [str(PYTHON), "-c", script, str(wrapper), str(root), str(LANGCHAIN)],
        capture_output=True,
        timeout=RUN_BOUND_SECONDS,
        check=False,
    )
    assert 0 == done.returncode, done.stderr.decode()[-2000:]
    return done.stdout.decode()


def test_the_langchain_snippet_keeps_one_session(counted: tuple[Path, Path, Path]) -> None:
    root, wrapper, starts = counted
    out = _run(SNIPPET_RUN, wrapper, root)
    assert ["start"] == starts.read_text().split()
    assert '"exit_code":0' in out.replace(" ", "")


def test_the_adapters_default_starts_a_server_per_call(counted: tuple[Path, Path, Path]) -> None:
    """The other side: ``get_tools()`` lists on one server and calls each tool on another."""
    root, wrapper, starts = counted
    out = _run(DEFAULT_RUN, wrapper, root)
    assert 3 == len(starts.read_text().split())
    assert json.dumps(0) in out
