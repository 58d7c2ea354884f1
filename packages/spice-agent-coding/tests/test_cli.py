"""The ``spice-coding`` CLI: every subcommand and exit code, in process and as a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from app_fakes import FAILURE_MESSAGE, FailingTool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from portable import ANY_ROOT, auto_warning

from spice.agent.coding import _cli
from spice.agent.coding._cli import main, tools_json
from spice.agent.coding._posix import _orphans as orphans
from spice.agent.coding._posix._plan import GIT_PROTECTED
from spice.agent.coding._sandbox import DEFAULT_MODE, HOME_SHOWN, NO_LANDLOCK, SERVER_WARNING
from spice.agent.coding._sandbox import HELP as SANDBOX_HELP
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import MAXIMUM_PAYLOAD_BYTES
from spice.agent.tools.coding import (
    SECURITY_WARNING,
    Config,
    ProtectedPaths,
    new_read,
    new_replace,
)

SCRIPT = Path(sys.executable).parent / "spice-coding"


def script(
    *args: str, cwd: Path | None = None, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SCRIPT), *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "hello.txt").write_bytes(b"hello\n")
    return tree


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_tools_prints_every_definition_with_its_fingerprint(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tools`` prints the three definitions, each with its own fingerprint, and exits 0."""
    code, out, err = run_main(capsys, "--root", str(worktree), "tools")
    listed = {t["name"]: t for t in json.loads(out)["tools"]}
    config = Config(worktree)
    assert 0 == code
    assert auto_warning() == err
    assert ["read", "replace", "shell"] == list(listed)
    assert new_read(config).definition.fingerprint == listed["read"]["fingerprint"]
    assert new_replace(config).definition.fingerprint == listed["replace"]["fingerprint"]
    assert "read_only" == listed["read"]["effect"]


def test_tools_output_is_stable(worktree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs print byte-identical output with sorted keys."""
    first = run_main(capsys, "--root", str(worktree), "tools")
    second = run_main(capsys, "tools", "--root", str(worktree))
    assert first == second
    document = json.loads(first[1])
    assert json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n" == first[1]


def test_call_prints_the_content_object_and_exits_0(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A successful call prints one JSON document (the content object); stderr stays empty."""
    code, out, err = run_main(
        capsys, "--root", str(worktree), "call", "read", '{"path":"hello.txt"}'
    )
    content = json.loads(out)
    assert (0, auto_warning()) == (code, err)
    assert (True, "hello\n") == (content["ok"], content["content"])
    assert 1 == out.count("\n")


def test_an_in_process_call_leaves_the_test_process_without_a_reaper(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The conftest keeps ``main`` from adopting orphans here: a reaper thread left in a
    test worker swept children and opened descriptors under later tests."""
    code, _, _ = run_main(capsys, "--root", str(worktree), "call", "read", '{"path":"hello.txt"}')
    assert (0, False) == (code, orphans.adopting())


def test_call_with_a_model_visible_failure_exits_1(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure result prints its content on stdout, its problem on stderr, and exits 1."""
    code, out, err = run_main(capsys, "--root", str(worktree), "call", "read", '{"path":"nope"}')
    content = json.loads(out)
    assert 1 == code
    assert "not_found" == content["code"]
    assert f"{auto_warning()}spice-coding: {content['message']}\n" == err


def test_call_of_an_unknown_tool_exits_1(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown tool is the dispatcher's visible unknown_tool failure."""
    code, out, _ = run_main(capsys, "--root", str(worktree), "call", "grep", "{}")
    assert (1, "unknown_tool") == (code, json.loads(out)["code"])


def test_call_with_invalid_arguments_exits_1(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arguments the tool rejects are its invalid_arguments result."""
    code, out, _ = run_main(capsys, "--root", str(worktree), "call", "read", '{"path":"a","x":1}')
    assert (1, "invalid_arguments") == (code, json.loads(out)["code"])


@pytest.mark.parametrize("text", ["{bad", "", "{} trailing", "[1,"])
def test_call_with_bad_json_exits_2_without_output(
    worktree: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Arguments that are not JSON are unusable input: exit 2, a short message, no stdout."""
    code, out, err = run_main(capsys, "--root", str(worktree), "call", "read", text)
    assert (2, "") == (code, out)
    assert err.startswith(
        f"{auto_warning()}spice-coding: the arguments (the argument after the tool's name) "
        "are not JSON: "
    )
    assert " at line 1, column " in err
    assert "Traceback" not in err


def test_call_with_an_unusable_tool_name_exits_2(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty or over-long tool name is unusable input."""
    assert 2 == run_main(capsys, "--root", str(worktree), "call", "", "{}")[0]
    assert 2 == run_main(capsys, "--root", str(worktree), "call", "x" * 129, "{}")[0]


def test_call_reads_arguments_from_stdin_with_a_dash(worktree: Path) -> None:
    """``call TOOL -`` takes the JSON arguments from stdin."""
    done = script("--root", str(worktree), "call", "read", "-", stdin=b'{"path":"hello.txt"}')
    assert (0, True) == (done.returncode, json.loads(done.stdout)["ok"])


def test_stdin_arguments_beyond_the_payload_bound_are_unusable(worktree: Path) -> None:
    """Arguments on stdin longer than the payload bound exit 2; at the bound they reach the tool."""
    filler = MAXIMUM_PAYLOAD_BYTES - len('{"path":"hello.txt","x":""}')
    at_bound = json.dumps({"path": "hello.txt", "x": "a" * filler}, separators=(",", ":"))
    accepted = script("--root", str(worktree), "call", "read", "-", stdin=at_bound.encode())
    refused = script("--root", str(worktree), "call", "read", "-", stdin=at_bound.encode() + b" ")
    assert 1 == accepted.returncode  # the tool's own invalid_arguments: x is unknown
    assert "invalid_arguments" == json.loads(accepted.stdout)["code"]
    assert (2, b"") == (refused.returncode, refused.stdout)


def test_stdin_arguments_that_are_not_utf8_are_unusable(worktree: Path) -> None:
    """Bytes that are not UTF-8 exit 2."""
    done = script("--root", str(worktree), "call", "read", "-", stdin=b"\xff\xfe")
    assert 2 == done.returncode


def test_an_execution_error_exits_2(
    worktree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ExecutionError prints its bounded message with state and retry, and exits 2."""

    @asynccontextmanager
    async def failing_compose(config: Config, **_: object) -> AsyncIterator[Dispatcher]:
        yield Dispatcher([FailingTool("read")])

    monkeypatch.setattr(_cli, "compose", failing_compose)
    code, out, err = run_main(capsys, "--root", str(worktree), "call", "read", "{}")
    assert (2, "") == (code, out)
    assert (
        f"{auto_warning()}spice-coding: execution error (uncertain, retry never): "
        f"{FAILURE_MESSAGE}\n"
    ) == err


def test_the_environment_names_the_root_without_a_flag(worktree: Path) -> None:
    """Without --root, SPICE_AGENT_WORKTREE names the root."""
    env = {**os.environ, "SPICE_AGENT_WORKTREE": str(worktree)}
    done = script("call", "read", '{"path":"hello.txt"}', env=env, cwd=worktree.parent)
    assert 0 == done.returncode


def test_the_current_directory_is_the_last_resort(worktree: Path) -> None:
    """Without --root or the variable, the current directory is the root."""
    env = {k: v for k, v in os.environ.items() if k != "SPICE_AGENT_WORKTREE"}
    done = script("call", "read", '{"path":"hello.txt"}', env=env, cwd=worktree)
    assert 0 == done.returncode


def test_a_root_with_nul_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A root that cannot be a path is unusable input."""
    code, out, err = run_main(capsys, "--root", "a\0b", "tools")
    assert (2, "") == (code, out)
    assert "spice-coding: the worktree root is not a usable path\n" == err


@pytest.mark.parametrize(
    "argv", [["--help"], ["tools", "--help"], ["call", "--help"], ["serve", "--help"]]
)
def test_help_shows_the_security_warning(argv: list[str]) -> None:
    """Every help text carries the server's security warning and exits 0: the sandbox as it
    is, not the library's "provide no sandbox" (contract 12.4)."""
    done = script(*argv)
    flat = " ".join(done.stdout.decode().split())
    assert 0 == done.returncode
    assert " ".join(SERVER_WARNING.split()) in flat
    assert "provide no sandbox" not in flat
    assert "provide no sandbox" in SECURITY_WARNING  # the library's own words stay its own
    # The sandbox as it is (contract 11.3); argparse may wrap it at a hyphen.
    assert "".join(SANDBOX_HELP.split()) in "".join(flat.split())


def test_the_sandbox_help_says_what_the_code_does() -> None:
    """Each claim of the help text is held against the constants it restates."""
    flat = " ".join(SANDBOX_HELP.split())
    flags = _cli._parser().format_help()
    assert ("auto", "auto, the default") == (DEFAULT_MODE, flat.split(": ", 1)[1][:17])
    assert "workspace refuses to start without Landlock" in flat
    assert NO_LANDLOCK.startswith("the kernel has no Landlock")
    assert {".gitconfig", ".local/bin", ".cargo/bin"} <= set(HOME_SHOWN)
    assert "(~/.gitconfig, ~/.local/bin, ~/.cargo/bin and the like; --allow-read" in flat
    protected = {name for name, _ in GIT_PROTECTED}
    assert {".git/hooks", ".git/config", ".git/info", ".gitmodules"} == protected
    standard = ProtectedPaths.default()
    for name in (".git/config", ".git/hooks/x", ".git/info/x", ".git/commondir", ".mcp.json"):
        assert standard.protects("/w", name)
    assert "config, hooks, info, commondir" in flat
    assert ".gitmodules and agent and editor settings (.mcp.json, .claude/, .vscode/" in flat
    assert "protected in every mode" in flat
    assert "--unprotect PATH gives one back" in flat
    assert "--unprotect" in flags
    for flag in ("--deny-read", "--allow-read", "--allow-network", "--max-processes"):
        assert flag in flat
        assert flag in flags
    assert "A root of / is refused unless --sandbox off is given." in flat
    # The round-4 proxy (contract 11.1): only with the namespaces, and said so.
    proxy = "a private loopback and the --allow-domain hosts (through the server's proxy)"
    assert f"have no network but {proxy} unless --allow-network" in flat
    assert "--allow-domain" in flags


def test_version_prints_the_distribution_version() -> None:
    """--version prints the program and the installed version."""
    done = script("--version")
    assert 0 == done.returncode
    assert done.stdout.decode().startswith("spice-coding 0.")


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["--bogus", "tools"], ["call", "read"]])
def test_bad_usage_exits_2_with_a_short_message(argv: list[str]) -> None:
    """A missing or unknown command or flag exits 2 with usage, never a traceback."""
    done = script(*argv)
    assert 2 == done.returncode
    assert b"Traceback" not in done.stderr
    assert b"usage: spice-coding" in done.stderr


def test_an_internal_error_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception prints one fixed line naming its type and exits 2."""

    def broken(argv: object) -> int:
        raise LookupError("secret detail")

    monkeypatch.setattr(_cli, "run", broken)
    code, _, err = run_main(capsys, "tools")
    assert 2 == code
    assert "spice-coding: an internal error stopped the command (LookupError)\n" == err


def test_an_interrupt_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C ends the command with 130 and no traceback."""

    def interrupted(argv: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli, "run", interrupted)
    assert 130 == run_main(capsys, "tools")[0]


@pytest.mark.parametrize("command", [["tools"], ["call", "read", '{"path":"hello.txt"}']])
def test_tools_and_call_never_import_the_mcp_sdk(worktree: Path, command: list[str]) -> None:
    """The fast paths run without loading the MCP SDK (checked over sys.modules)."""
    code = (
        "import sys\n"
        "from spice.agent.coding._cli import main\n"
        f"rc = main({['--root', str(worktree), *command]!r})\n"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))\n"
        "sys.stderr.write(repr(loaded))\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, check=False
    )
    assert (0, auto_warning().encode() + b"[]") == (done.returncode, done.stderr)


def test_tools_json_sorts_by_name() -> None:
    """The JSON lists tools in the dispatcher's (sorted) order."""
    config = Config(ANY_ROOT)
    text = tools_json(Dispatcher([new_replace(config), new_read(config)]))
    assert ["read", "replace"] == [t["name"] for t in json.loads(text)["tools"]]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arguments=st.text(max_size=64))
def test_any_argument_text_exits_0_1_or_2_without_a_traceback(
    worktree: Path, capsys: pytest.CaptureFixture[str], arguments: str
) -> None:
    """Whatever the argument text, the exit code is 0, 1 or 2 and stderr has no traceback."""
    code, _, err = run_main(capsys, "--root", str(worktree), "call", "read", arguments)
    assert code in {0, 1, 2}
    assert "Traceback" not in err


def test_an_argument_that_looks_like_an_option_exits_2_without_raising(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``call read -:`` is a usage error: ``main`` returns 2 instead of raising SystemExit."""
    code, out, err = run_main(capsys, "--root", str(worktree), "call", "read", "-:")
    assert (2, "") == (code, out)
    assert "Traceback" not in err
