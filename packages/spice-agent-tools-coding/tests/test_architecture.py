"""The product starts no process itself: an AST scan of every module of the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

import pytest

import spice.agent.tools.coding as product

FORBIDDEN_MODULES: Final = frozenset({"subprocess", "pty", "multiprocessing"})
"""Modules whose import would let the product start a process."""

OS_MODULES: Final = frozenset({"os", "posix", "nt"})
"""Modules that carry the process-starting functions."""

OS_FUNCTION: Final = re.compile(r"^(fork|forkpty|exec\w*|spawn\w*|posix_spawn\w*|system|popen)$")
"""``os`` functions that start or replace a process."""

SUBPROCESS_FUNCTION: Final = re.compile(r"^create_subprocess_\w+$")
"""``asyncio`` (or loop) functions that start a process."""

IMPORTERS: Final = frozenset({"__import__", "import_module"})


def violations(source: str, name: str = "<module>") -> list[str]:
    """Every place in ``source`` that could start a process, as ``name:line: what``."""
    tree = ast.parse(source, filename=name)
    os_aliases = set(OS_MODULES)
    found: list[str] = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{name}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in FORBIDDEN_MODULES:
                    report(node, f"import {alias.name}")
                if root in OS_MODULES:
                    os_aliases.add(alias.asname or root)
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if module in FORBIDDEN_MODULES:
                report(node, f"from {node.module} import")
            for alias in node.names:
                if module in OS_MODULES and OS_FUNCTION.match(alias.name):
                    report(node, f"from {module} import {alias.name}")
                if SUBPROCESS_FUNCTION.match(alias.name):
                    report(node, f"import of {alias.name}")
                if alias.name in FORBIDDEN_MODULES:
                    report(node, f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Attribute):
            if SUBPROCESS_FUNCTION.match(node.attr):
                report(node, f"use of {node.attr}")
            if (
                isinstance(node.value, ast.Name)
                and node.value.id in os_aliases
                and OS_FUNCTION.match(node.attr)
            ):
                report(node, f"use of {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call):
            callee = node.func
            callee_name = callee.attr if isinstance(callee, ast.Attribute) else None
            if isinstance(callee, ast.Name):
                callee_name = callee.id
            if callee_name in IMPORTERS and any(
                isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.split(".")[0] in FORBIDDEN_MODULES
                for arg in node.args
            ):
                report(node, "dynamic import of a process module")
    # A second pass: names bound by ``import os as o`` anywhere count everywhere.
    if os_aliases - OS_MODULES:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in os_aliases - OS_MODULES
                and OS_FUNCTION.match(node.attr)
            ):
                report(node, f"use of {node.value.id}.{node.attr}")
    return sorted(set(found))


def product_modules() -> list[Path]:
    """Every Python module of ``spice.agent.tools.coding`` (subpackages included)."""
    package = Path(product.__file__).parent
    return sorted(package.rglob("*.py"))


def test_the_scan_sees_every_module_of_the_product() -> None:
    """The scan covers the package, its private modules and ``autoconfigure``."""
    names = {path.name for path in product_modules()}
    assert {"__init__.py", "_shell.py", "_capture.py", "_ownership.py"} <= names


def test_no_product_module_can_start_a_process() -> None:
    """No import of subprocess/pty, no create_subprocess_*, no os.fork/exec/spawn/system/popen."""
    found = [
        hit
        for path in product_modules()
        for hit in violations(path.read_text(encoding="utf-8"), path.name)
    ]
    assert [] == found


PLANTED: Final = {
    "import subprocess": "import subprocess",
    "import subprocess as sp": "import subprocess",
    "from subprocess import run": "from subprocess import",
    "import pty": "import pty",
    "from pty import fork": "from pty import",
    "import asyncio\nasyncio.create_subprocess_exec('x')": "create_subprocess_exec",
    "from asyncio import create_subprocess_shell": "create_subprocess_shell",
    "import os\nos.fork()": "os.fork",
    "import os\nos.execv('/bin/x', [])": "os.execv",
    "import os\nos.execvpe('x', [], {})": "os.execvpe",
    "import os\nos.spawnl(0, 'x')": "os.spawnl",
    "import os\nos.posix_spawn('x', [], {})": "os.posix_spawn",
    "import os\nos.posix_spawnp('x', [], {})": "os.posix_spawnp",
    "import os\nos.system('x')": "os.system",
    "import os\nos.popen('x')": "os.popen",
    "from os import fork": "from os import fork",
    "from os import execv as run": "from os import execv",
    "import os as o\no.system('x')": "o.system",
    "__import__('subprocess')": "dynamic import",
    "import importlib\nimportlib.import_module('pty')": "dynamic import",
}


@pytest.mark.parametrize(("source", "expected"), sorted(PLANTED.items()))
def test_the_scanner_catches_a_planted_violation(
    tmp_path: Path, source: str, expected: str
) -> None:
    """Each forbidden form, planted in a temporary module, is reported."""
    planted = tmp_path / "planted.py"
    planted.write_text(f"from __future__ import annotations\n{source}\n", encoding="utf-8")
    found = violations(planted.read_text(encoding="utf-8"), planted.name)
    assert any(expected in hit for hit in found), found


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.fspath('x')",
        "import os\nos.open('x', 0)",
        "import asyncio\nasyncio.to_thread(print)",
        "import platform\nplatform.system()",
        "from os import fstat",
    ],
)
def test_the_scanner_passes_harmless_code(source: str) -> None:
    """Ordinary file and asyncio use is not reported (no false alarms)."""
    assert [] == violations(source)
