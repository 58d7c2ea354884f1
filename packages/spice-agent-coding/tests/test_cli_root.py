"""``serve``, ``call`` and ``tools`` refuse an unusable root (contract 10.2): one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spice.agent.coding._cli import main
from spice.agent.coding._sandbox import SLASH_ROOT_NEEDS_OFF
from spice.agent.coding._settings._resolve import EMPTY_ROOT

SCRIPT = Path(sys.executable).parent / "spice-coding"
COMMANDS = {"tools": [], "call": ["read", '{"path": "a.txt"}'], "serve": []}


def _run(capsys: pytest.CaptureFixture[str], root: Path, command: str) -> tuple[int, str, str]:
    code = main(["--root", str(root), command, *COMMANDS[command]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_missing_root_is_one_line_naming_it_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """``--root /nonexistent``: nothing starts; the line names the root."""
    missing = tmp_path / "no" / "such"
    code, out, err = _run(capsys, missing, command)
    assert (2, "", 1) == (code, out, err.count("\n"))
    assert f"the worktree root {missing} does not exist" in err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_file_as_root_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A regular file is not a worktree."""
    (tmp_path / "f").write_text("x")
    code, _, err = _run(capsys, tmp_path / "f", command)
    assert 2 == code
    assert f"the worktree root {tmp_path / 'f'} is not a directory" in err


def test_a_link_to_a_directory_is_a_usable_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Boundary: the root's own path may be a symlink (trusted configuration); a dangling
    one does not exist."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.txt").write_text("alpha\n")
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "dangling").symlink_to("gone")
    assert 0 == _run(capsys, tmp_path / "link", "call")[0]
    assert 2 == _run(capsys, tmp_path / "dangling", "tools")[0]


def test_the_console_script_refuses_before_serving(tmp_path: Path) -> None:
    """The real program: ``serve`` on a missing root exits 2 at once, stdin untouched."""
    missing = tmp_path / "missing"
    finished = subprocess.run(
        [str(SCRIPT), "--root", str(missing), "serve"],
        stdin=subprocess.PIPE,
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert 2 == finished.returncode
    assert b"" == finished.stdout
    assert str(missing).encode() in finished.stderr
    assert 1 == finished.stderr.count(b"\n")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_empty_root_is_refused_not_the_current_directory(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--root ''`` once served the current directory in silence (contract 11.3)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("alpha\n")
    code = main(["--root", "", command, *COMMANDS[command]])
    captured = capsys.readouterr()
    assert (2, "") == (code, captured.out)
    assert f"spice-coding: {EMPTY_ROOT}\n" == captured.err


@pytest.mark.parametrize("sandbox", [[], ["--sandbox", "auto"], ["--sandbox", "workspace"]])
def test_a_root_of_slash_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], sandbox: list[str]
) -> None:
    """The default (auto) and workspace: exit 2, one line naming --sandbox off."""
    code = main(["--root", "/", *sandbox, "tools"])
    captured = capsys.readouterr()
    assert (2, "") == (code, captured.out)
    assert f"spice-coding: {SLASH_ROOT_NEEDS_OFF}\n" == captured.err
    assert "--sandbox off" in captured.err


@pytest.mark.parametrize(
    ("argv", "environment"),
    [
        (["--sandbox", "off"], {}),
        (["tools", "--sandbox", "off"], {}),
        ([], {"SPICE_AGENT_SANDBOX": "off"}),
    ],
)
def test_a_root_of_slash_is_served_when_off_is_chosen(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    environment: dict[str, str],
) -> None:
    """The other side: ``off``, given by flag (before or after the command) or variable."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    before, after = (argv, []) if argv[:1] != ["tools"] else ([], argv[1:])
    code = main(["--root", "/", *before, "tools", *after])
    captured = capsys.readouterr()
    assert 0 == code, captured.err
    listed = json.loads(captured.out)
    assert ({"read", "replace", "shell"}, False) == (
        {tool["name"] for tool in listed["tools"]},
        listed["sandbox"]["contained"],
    )


def test_a_link_to_slash_is_slash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "everything").symlink_to("/")
    assert 2 == main(["--root", str(tmp_path / "everything"), "tools"])
    assert SLASH_ROOT_NEEDS_OFF in capsys.readouterr().err
