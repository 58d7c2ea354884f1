"""``spice-coding history`` and ``undo`` (13.2): exit codes, JSON, a real journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spice.agent.coding._cli import run
from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal


def test_history_and_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, stage, state = tmp_path / "w", tmp_path / "s", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    (stage / "new.py").write_text("x\n")
    journal = Journal.open(str(root))
    journal.commit(
        "shell",
        "c1",
        Judged((Change("new.py", "added", "file", None, 0o644, str(stage / "new.py")),)),
        0,
    )
    assert run(["--root", str(root), "history", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert [(e["id"], e["tool"], e["paths"], e["undone"]) for e in entries] == [
        (1, "shell", ["A new.py"], False)
    ]
    assert run(["--root", str(root), "undo", "99"]) == 2
    assert "no entry 99" in capsys.readouterr().err
    (root / "new.py").write_text("user\n")
    assert run(["--root", str(root), "undo", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["refused"] == ["new.py"]
    assert run(["--root", str(root), "undo", "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["restored"] == ["new.py"]
    assert not (root / "new.py").exists()
