"""``spice-coding history`` and ``undo`` on Windows (13.2, issue 45): ``replace`` calls
made by the real CLI are journaled, listed, taken back and put back again; ``tools`` says
where the journal is.

Runs under Windows Python (Wine in ``make test-windows``, windows-latest in the
portability workflow); skipped elsewhere, where ``test_journal_cli`` covers the same paths.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "win32",
    reason="Windows only (runs under Wine in make test-windows, and on windows-latest)",
)

CLI: Final = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"
TIMEOUT_SECONDS: Final = 120
OLD: Final = b"print('old')\r\n"


def spice(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process, its journal beneath ``state``."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def tree_of(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    root, state = tmp_path / "w", tmp_path / "state"
    root.mkdir()
    (root / "a.py").write_bytes(OLD)
    return root, state


def edit_of(old: bytes, new: str) -> str:
    digest = hashlib.sha256(old).hexdigest()
    return json.dumps({"path": "a.py", "content": new, "expected_sha256": digest})


def test_tools_says_replace_is_journaled(places: tuple[Path, Path]) -> None:
    root, state = places
    done = spice(state, "--root", str(root), "tools")
    assert 0 == done.returncode, done.stderr
    journal = json.loads(done.stdout)["journal"]
    assert "journaled" == journal["replace"]
    assert Path(journal["directory"]).is_relative_to(state)


def test_an_edit_and_a_create_undone_with_to_by_the_real_cli(places: tuple[Path, Path]) -> None:
    root, state = places
    before = tree_of(root)
    create = json.dumps({"path": "pkg/sub/new.py", "content": "x = 1\n", "create": True})
    for arguments in (edit_of(OLD, "print('new')\n"), create):
        done = spice(state, "--root", str(root), "call", "replace", arguments)
        assert 0 == done.returncode, done.stderr
        assert "cli-1" == json.loads(done.stdout)["call_id"]
    history = spice(state, "--root", str(root), "history", "--json")
    assert 0 == history.returncode, history.stderr
    entries = json.loads(history.stdout)["entries"]
    assert [["A pkg/", "A pkg/sub/", "A pkg/sub/new.py"], ["M a.py"]] == [
        entry["paths"] for entry in entries
    ]
    undone = spice(state, "--root", str(root), "undo", "--to", str(entries[-1]["id"]), "--json")
    assert (0, []) == (undone.returncode, json.loads(undone.stdout)["refused"])
    assert before == tree_of(root)
    again = spice(state, "--root", str(root), "undo", "--json")  # the undo undone
    assert 0 == again.returncode
    assert b"print('new')\n" == (root / "a.py").read_bytes()
    assert b"x = 1\n" == (root / "pkg" / "sub" / "new.py").read_bytes()


def test_a_path_changed_since_exits_1_and_force_takes_it_back(places: tuple[Path, Path]) -> None:
    root, state = places
    done = spice(state, "--root", str(root), "call", "replace", edit_of(OLD, "new\n"))
    assert 0 == done.returncode, done.stderr
    (root / "a.py").write_bytes(b"mine\n")
    refused = spice(state, "--root", str(root), "undo")
    assert 1 == refused.returncode
    assert b"mine\n" == (root / "a.py").read_bytes()
    forced = spice(state, "--root", str(root), "undo", "--force")
    assert 0 == forced.returncode
    assert OLD == (root / "a.py").read_bytes()
    unknown = spice(state, "--root", str(root), "undo", "99")
    assert 2 == unknown.returncode
