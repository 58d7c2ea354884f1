"""Refusals that teach (contract 12.4): each test reads the exact words a model or a person
sees, and each has its other side.

- a failing ``argv`` holding a glob character: nothing expands it; ``find`` or ``sh -c``;
- a port in use: the address and port, and ``--port 0``;
- a missing token file: its path, and ``token add``;
- an ``--allow-write`` refusal: the path and why;
- CLI arguments that are not JSON: where they stop being JSON (line, column, character).

The glob case runs real commands through the composed application (the platform's own
launcher); the others run the real CLI's ``main`` or its console script.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from portable import auto_warning

from spice.agent.coding import compose
from spice.agent.coding._cli import main
from spice.agent.tool import Call
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._shell_problems import GLOB_HINT

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
EXITED: Final = "the command exited with a non-zero status"
NOT_FOUND: Final = (
    "no executable matches argv[0]: a name without '/' is looked up in PATH only; "
    "use ./name for a program in the workdir"
)
GLOB: Final = (
    "; argv holds *, ? or [, which nothing expands here (no shell runs the command): if it "
    'is a file pattern, list the files with ["find", ".", "-name", "*.py"], or run a shell '
    'yourself: ["sh", "-c", "ls *.py"]'
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="ls and sh are POSIX programs")


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


# --- a glob in argv ------------------------------------------------------------------------


async def shell(root: Path, argv: list[str]) -> dict[str, object]:
    config = Config(root)
    async with compose(config) as dispatcher:
        result = await dispatcher.dispatch(Call("c", "shell", json.dumps({"argv": argv})))
    content = json.loads(result.content)
    assert isinstance(content, dict)
    return content


def test_the_hint_is_the_words_the_test_reads() -> None:
    assert GLOB == GLOB_HINT


@posix_only
async def test_a_failing_argv_with_a_glob_is_told_nothing_expands_it(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("pass\n")
    answer = await shell(tmp_path, ["ls", "*.py"])
    assert ("command_failed", EXITED + GLOB) == (answer["code"], answer["message"])


@posix_only
async def test_the_hint_s_own_advice_works(tmp_path: Path) -> None:
    """The other side: ``sh -c`` expands the pattern, and a success carries no hint."""
    (tmp_path / "a.py").write_text("pass\n")
    answer = await shell(tmp_path, ["sh", "-c", "ls *.py"])
    assert (True, "a.py\n") == (answer["ok"], answer["stdout"])
    assert "message" not in answer


@posix_only
async def test_a_failing_argv_without_a_glob_gets_no_glob_hint(tmp_path: Path) -> None:
    answer = await shell(tmp_path, ["ls", "missing.py"])
    assert ("command_failed", EXITED) == (answer["code"], answer["message"])


@posix_only
async def test_a_program_s_own_text_after_c_is_not_a_glob(tmp_path: Path) -> None:
    """Issue 47: ``python -c`` code holding ``sys.argv[1:]`` failed for another reason and
    got the glob hint; code after ``-c``/``-e`` is not a file pattern."""
    code = "import sys; print(sys.argv[1:]); sys.exit(3)"
    answer = await shell(tmp_path, [sys.executable, "-c", code, "x"])
    assert ("command_failed", EXITED, 3) == (answer["code"], answer["message"], answer["exit_code"])


@posix_only
async def test_a_glob_as_the_program_is_told_too(tmp_path: Path) -> None:
    answer = await shell(tmp_path, ["*.sh"])
    assert ("command_not_found", NOT_FOUND + GLOB) == (answer["code"], answer["message"])


# --- a port in use -------------------------------------------------------------------------


def test_a_port_in_use_names_it_and_port_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, out, err = run_main(
            capsys, "--root", str(tmp_path), "serve", "--transport", "http",
            "--port", str(port), "--insecure-no-auth",
        )  # fmt: skip
    assert (2, "") == (code, out)
    assert (
        f"spice-coding: cannot listen on 127.0.0.1 port {port}: the port is in use (another "
        "server, or this one already running?); choose another --port, or give --port 0 to "
        "let the system pick a free one (the 'listening on' line names it)"
    ) == last_line(err)


# --- a missing token file ------------------------------------------------------------------


def test_a_missing_token_file_names_its_path_and_token_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    missing = tmp_path / "secrets" / "tokens"
    code, out, err = run_main(
        capsys, "--root", str(root), "serve", "--transport", "http",
        "--port", "0", "--token-file", str(missing),
    )  # fmt: skip
    assert (2, "") == (code, out)
    assert (
        f"spice-coding: the token file {missing} does not exist: make it with spice-coding "
        f"token add NAME --scopes read,write,shell --token-file {missing} (it prints the "
        "token once)"
    ) == last_line(err)


def test_token_add_from_the_home_names_the_root_it_took_and_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: the README's ``token add ... --token-file ~/.config/spice-coding/tokens``
    run from the home refused with nothing naming the root it took or ``--root``."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SPICE_AGENT_WORKTREE", raising=False)
    tokens = home / ".config" / "spice-coding" / "tokens"
    tokens.parent.mkdir(parents=True, mode=0o700)
    line = ("token", "add", "hosted", "--scopes", "read", "--token-file", str(tokens))
    code, out, err = run_main(capsys, *line)
    assert (2, "") == (code, out)
    assert (
        f"spice-coding: the token file lies beneath the worktree root {home}, where the read "
        "tool would show it; without --root the root is the current directory (or "
        "$SPICE_AGENT_WORKTREE): give --root the worktree the server will serve, or keep the "
        "file elsewhere"
    ) == last_line(err)
    assert not tokens.exists()
    # The other side: with --root naming the worktree, the same line adds the token.
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    code, out, err = run_main(capsys, "--root", str(worktree), *line)
    assert (0, True) == (code, tokens.is_file()), err
    assert len(out.strip()) > 20


# --- an --allow-write refusal --------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "why"),
    [
        ("relative", "is relative: name it from /"),
        ("missing", "does not exist (create it first)"),
        ("file", "is not a directory"),
        ("dangling", "is a dangling symbolic link"),
    ],
)
def test_an_allow_write_refusal_names_the_path_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str, why: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    place = {
        "relative": "build/out",
        "missing": str(tmp_path / "nowhere"),
        "file": str(tmp_path / "a-file"),
        "dangling": str(tmp_path / "dangling"),
    }[make]
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    code, out, err = run_main(capsys, "--root", str(root), "--allow-write", place, "tools")
    assert (2, "") == (code, out)
    assert (
        f"spice-coding: --allow-write {place!r} {why}: it takes existing absolute directories"
    ) == last_line(err)


def test_an_allowed_directory_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other side: an existing absolute directory outside the root starts."""
    root, place = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    place.mkdir()
    code, out, _ = run_main(capsys, "--root", str(root), "--allow-write", str(place), "tools")
    assert 0 == code
    assert json.loads(out)["tools"]


# --- CLI arguments that are not JSON -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"path": "a",}', (
            "Illegal trailing comma before end of object at line 1, column 13 (character 13)"
            if sys.version_info >= (3, 13)  # json's own words changed in 3.13
            else "Expecting property name enclosed in double quotes at line 1, column 14 "
            "(character 14)"
        )),
        ('{"path":\n  README.md}', "Expecting value at line 2, column 3 (character 12)"),
        ("", "Expecting value at line 1, column 1 (character 1)"),
        ('{"path": "a"} x', "Extra data at line 1, column 15 (character 15)"),
    ],
)  # fmt: skip
def test_arguments_that_are_not_json_name_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str
) -> None:
    code, out, err = run_main(capsys, "--root", str(tmp_path), "call", "read", text)
    assert (2, "") == (code, out)
    assert err == (
        f"{auto_warning()}spice-coding: the arguments (the argument after the tool's name) are "
        f"not JSON: {where}; give one JSON object, e.g. "
        """'{"path": "README.md"}'\n"""
    )


def test_arguments_on_stdin_that_are_not_utf8_name_the_byte(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "--root", str(tmp_path), "call", "read", "-"],
        input=b'{"path": "\xff"}',
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (2, b"") == (done.returncode, done.stdout)
    assert "spice-coding: the arguments on stdin are not UTF-8: byte 11 is not" == last_line(
        done.stderr.decode()
    )


def test_json_arguments_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The other side: a JSON object reaches the tool (its own answer, exit 0)."""
    (tmp_path / "a.txt").write_bytes(b"hi\n")  # the same bytes on every platform
    code, out, _ = run_main(capsys, "--root", str(tmp_path), "call", "read", '{"path": "a.txt"}')
    assert (0, "hi\n") == (code, json.loads(out)["content"])
