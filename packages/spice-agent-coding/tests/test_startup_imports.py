"""What each command imports: the one-shot commands load only the standard library and ours.

``tools``, ``call`` and ``--help`` never load the MCP SDK, its dependencies (pydantic, anyio,
the protocol types), ``orjson`` or ``importlib.metadata``: all of that is ``serve``'s, loaded
when ``serve`` starts. Checked over ``sys.modules`` in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT_SECONDS = 60
OURS = frozenset({"spice", "__main__"})
MEASUREMENT = frozenset({"coverage", "$coverage", "__mp_main__"})
"""The suite's own coverage measurement, which a child under ``make test`` loads at start."""
STDLIB_PREFIXES = ("_sysconfigdata_",)
"""Standard-library modules named per platform (absent from ``sys.stdlib_module_names``)."""

PROBE = """
import json, sys
from spice.agent.coding._cli import main
try:
    rc = main({argv!r})
except SystemExit as done:
    rc = done.code
tops = sorted({{name.partition(".")[0] for name in sys.modules}} - set(sys.stdlib_module_names))
sys.stderr.write(json.dumps({{"tops": tops, "metadata": "importlib.metadata" in sys.modules}}))
sys.exit(rc)
"""


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A worktree with one small file."""
    (tmp_path / "hello.txt").write_text("hello\n", encoding="utf-8")
    return tmp_path


def loaded_by(argv: list[str]) -> tuple[int, list[str], bool]:
    """Exit code, third-party top-level modules, and whether importlib.metadata was loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    report = json.loads(done.stderr.decode().splitlines()[-1])
    tops = [
        name
        for name in report["tops"]
        if name not in OURS | MEASUREMENT and not name.startswith(STDLIB_PREFIXES)
    ]
    return done.returncode, tops, report["metadata"]


@pytest.mark.parametrize(
    "command",
    [
        ["tools"],
        ["call", "read", '{"path":"hello.txt"}'],
        ["call", "read", '{"path":"missing.txt"}'],
        ["call", "nope", "{}"],
        ["--help"],
        ["call", "--help"],
    ],
)
def test_the_one_shot_commands_import_only_the_standard_library_and_ours(
    worktree: Path, command: list[str]
) -> None:
    """No third-party module and no ``importlib.metadata``, whatever the call's outcome."""
    code, third_party, metadata = loaded_by(["--root", str(worktree), *command])
    assert code in {0, 1}
    assert ([], False) == (third_party, metadata)


def test_the_version_loads_importlib_metadata_and_nothing_third_party(worktree: Path) -> None:
    """``--version`` is the one fast path that needs the installed metadata."""
    code, third_party, metadata = loaded_by(["--version"])
    assert (0, [], True) == (code, third_party, metadata)


def test_the_probe_sees_a_third_party_import_when_there_is_one(worktree: Path) -> None:
    """The check can fail: importing the SDK first shows up in the report."""
    done = subprocess.run(
        [sys.executable, "-c", "import mcp\n" + PROBE.format(argv=["tools"])],
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
        cwd=worktree,
    )
    report = json.loads(done.stderr.decode().splitlines()[-1])
    assert {"mcp", "pydantic", "anyio", "mcp_types"} <= set(report["tops"])
