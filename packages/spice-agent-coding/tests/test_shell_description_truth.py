"""The shell's description tells the truth about the real platform (contract 9.3).

What the description promises is run here with the platform's resolver and launcher:
a bare ``argv[0]`` is looked up in ``PATH`` only (a program of the worktree needs
``./``), ``./name`` is relative to the workdir, an absolute workdir beneath the root is
accepted, and exactly the variables the description names can reach the program.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
from portable import WINDOWS, windows_program

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding._windows._launcher import WindowsLauncher
from spice.agent.coding._windows._resolver import WindowsResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.lifecycle import Cleanup
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

BOUND: Final = 30.0
"""Hang guard for one dispatched call (never a timing assertion)."""

PYTHON: Final = os.path.normpath(sys.executable)
ENVIRONMENT_NAMES: Final = (
    "import json\n"
    "raw = open('/proc/self/environ', 'rb').read()\n"
    "print(json.dumps(sorted(e.decode().partition('=')[0] for e in raw.split(b'\\0') if e)))\n"
)
"""The names of the environment the program was started with (not Python's own changes)."""
ALLOWED: Final = ("PATH", "SPICE_TRUTH_ALLOWED")
TOOL: Final = "./tool.exe" if WINDOWS else "./tool"
"""The worktree's program, named relative to the workdir (Windows runs ``.exe`` files)."""


class Shell:
    """A shell tool over the POSIX platform, through a dispatcher."""

    def __init__(self, root: Path) -> None:
        self.config = Config(root, environment_allowlist=ALLOWED, command_timeout=30)
        platform = (
            (WindowsResolver(), WindowsLauncher())
            if WINDOWS
            else (PosixResolver(), PosixLauncher())
        )
        tool, self.cleanup = new_shell(self.config, *platform)
        self.description = tool.definition.description
        self.dispatcher = Dispatcher([tool])

    async def call(self, arguments: dict[str, object]) -> dict[str, object]:
        """One bounded call; its content."""
        async with asyncio.timeout(BOUND):
            result = await self.dispatcher.dispatch(Call("c", "shell", json.dumps(arguments)))
        content = json.loads(result.content)
        assert isinstance(content, dict)
        return content


@pytest.fixture
async def shell(tmp_path: Path) -> AsyncIterator[Shell]:
    """A worktree with ``tool`` (prints ``root``) and ``sub/tool`` (prints ``sub``)."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    for where, word in ((root, "root"), (root / "sub", "sub")):
        if WINDOWS:
            (where / "tool.exe").write_bytes(windows_program(f"print({word!r})"))
            continue
        script = where / "tool"
        script.write_text(f"#!/bin/sh\necho {word}\n")
        script.chmod(0o755)
    made = Shell(root)
    yield made
    cleanup: Cleanup = made.cleanup
    async with asyncio.timeout(BOUND):
        await cleanup()


async def test_a_bare_name_is_not_looked_up_in_the_workdir(shell: Shell) -> None:
    """``tool`` is in the root but not in PATH: command_not_found, whose message says ./."""
    assert "looked up in PATH only" in shell.description
    content = await shell.call({"argv": ["tool"]})
    assert "command_not_found" == content["code"]
    assert "./name" in str(content["message"])


async def test_dot_slash_runs_the_program_of_the_workdir(shell: Shell) -> None:
    """``./tool`` is resolved against the workdir, as the description says."""
    in_root = await shell.call({"argv": [TOOL]})
    in_sub = await shell.call({"argv": [TOOL], "workdir": "sub"})
    newline = "\r\n" if WINDOWS else "\n"
    assert (f"root{newline}", f"sub{newline}") == (in_root["stdout"], in_sub["stdout"])


async def test_an_absolute_workdir_beneath_the_root_runs_there(shell: Shell) -> None:
    """The absolute form of ``sub`` is ``sub``; the result shows it relative."""
    newline = "\r\n" if WINDOWS else "\n"
    # The platform's own spelling, and the root followed by "/" (answers show paths with "/")
    for workdir in (os.path.join(shell.config.root, "sub"), f"{shell.config.root}/sub"):
        content = await shell.call({"argv": [TOOL], "workdir": workdir})
        assert (True, "sub", f"sub{newline}") == (
            content["ok"],
            content["workdir"],
            content["stdout"],
        )


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/self/environ")
async def test_only_the_variables_the_description_names_reach_the_program(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The allow-listed names are in the description; nothing else reaches the child."""
    monkeypatch.setenv("SPICE_TRUTH_ALLOWED", "1")
    monkeypatch.setenv("SPICE_TRUTH_DENIED", "1")
    assert "when set: PATH, SPICE_TRUTH_ALLOWED." in shell.description
    content = await shell.call({"argv": [PYTHON, "-c", ENVIRONMENT_NAMES]})
    names = set(json.loads(str(content["stdout"])))
    assert "SPICE_TRUTH_ALLOWED" in names
    assert names <= set(ALLOWED)
    assert "SPICE_TRUTH_DENIED" not in names
