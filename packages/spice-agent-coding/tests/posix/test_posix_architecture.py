"""Only the platform packages (``_posix``, ``_windows``) of the application start processes
(an AST scan)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

import spice.agent.coding as application

PROCESS_MODULES: Final = frozenset({"subprocess", "pty", "multiprocessing"})
OS_FUNCTION: Final = re.compile(r"^(fork|forkpty|exec\w*|spawn\w*|posix_spawn\w*|system|popen)$")
SUBPROCESS_FUNCTION: Final = re.compile(
    r"^(create_subprocess_\w+|subprocess_exec|subprocess_shell)$"
)
PLATFORM_PACKAGES: Final = frozenset({"_posix", "_windows"})


def process_starts(source: str) -> list[int]:
    """Lines of ``source`` that import process machinery or call a process-starting API."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] in PROCESS_MODULES for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            names = {a.name for a in node.names}
            if (
                module in PROCESS_MODULES
                or names & PROCESS_MODULES
                or any(SUBPROCESS_FUNCTION.match(n) for n in names)
                or (module == "os" and any(OS_FUNCTION.match(n) for n in names))
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Attribute):
            is_os = isinstance(node.value, ast.Name) and node.value.id == "os"
            if SUBPROCESS_FUNCTION.match(node.attr) or (is_os and OS_FUNCTION.match(node.attr)):
                lines.append(node.lineno)
    return lines


def modules() -> list[Path]:
    """Every module of the application package."""
    return sorted(Path(application.__file__).parent.rglob("*.py"))


def test_only_the_platform_modules_start_processes() -> None:
    """Outside ``_posix`` and ``_windows`` no application module starts processes."""
    package = Path(application.__file__).parent
    offending = {
        str(path.relative_to(package)): process_starts(path.read_text())
        for path in modules()
        if path.relative_to(package).parts[0] not in PLATFORM_PACKAGES
    }
    assert {} == {name: lines for name, lines in offending.items() if lines}


def test_the_launcher_module_is_where_processes_start() -> None:
    """The scan sees the launcher's own use of ``subprocess`` (it is not blind)."""
    launcher = next(p for p in modules() if p.parts[-2:] == ("_posix", "_launcher.py"))
    assert process_starts(launcher.read_text())


def test_the_scan_catches_every_kind_of_start() -> None:
    """Imports, aliases and calls of each process-starting API are found."""
    samples = [
        "import subprocess",
        "import pty as p",
        "from multiprocessing import Process",
        "from asyncio import create_subprocess_exec",
        "from os import posix_spawn",
        "import os\nos.fork()",
        "import os\nos.execv('/bin/true', ['true'])",
        "import os\nos.system('true')",
        "import asyncio\nasyncio.create_subprocess_shell('true')",
    ]
    assert all(process_starts(sample) for sample in samples)
    assert [] == process_starts("import os\nos.getpid()\nfrom asyncio import create_task")


def test_the_windows_launcher_module_is_seen_too() -> None:
    """The scan sees the Windows launcher's ``subprocess`` and ``loop.subprocess_exec``."""
    launcher = next(p for p in modules() if p.parts[-2:] == ("_windows", "_launcher.py"))
    assert len(process_starts(launcher.read_text())) >= 2
