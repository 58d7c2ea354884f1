"""What MCP clients see of each tool (contract 9.3): title, outputSchema, isError.

A corpus of calls provokes a success and every failure code it can on a real worktree;
each content object is validated against the declared outputSchema with ``jsonschema``,
in process through the dispatcher and over stdio through the real ``mcp`` client (which
validates ``structuredContent`` against the outputSchema itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from mcp import Client
from mcp.types import TextContent
from portable import PYTHON, WINDOWS, exits_with, prints_and_exits, succeeds
from schema_check import check_schema, output_errors, schema_errors
from test_mcp_stdio import SCRIPT, client_for

from spice.agent.coding import compose, mcp_server
from spice.agent.coding._mcp._outputs import TITLES, output_schema, title_of
from spice.agent.coding._mcp._server import DATA_FAILURE_CODES, result_of
from spice.agent.tool import Call, Result
from spice.agent.tools.coding import Config

EXPECTED_TITLES: Final = {"read": "Read file", "replace": "Replace file", "shell": "Run command"}
PROVOKED: Final = frozenset(
    {
        "ok",
        "not_found",
        "not_regular",
        "invalid_arguments",
        "path_escape",
        "already_exists",
        "stale",
        "command_failed",
        "timed_out",
        "command_not_found",
        "workdir_unavailable",
        "unknown_tool",
    }
) - (
    {"path_escape"} if WINDOWS else set()  # only a link provokes it; Wine makes none
)
"""The codes the corpus must provoke (so the validation is not vacuous)."""

E_TEXT: Final = "one two\n"

SLEEPS_UNTIL_STOPPED: Final = "import itertools, time; [time.sleep(1) for _ in itertools.count()]"
"""Never ends by itself, even if one sleep returns early (a timer under Wine on a VM)."""


def lay_out(root: Path) -> Path:
    root.mkdir()
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "r.txt").write_bytes(b"to replace\n")
    (root / "e.txt").write_bytes(E_TEXT.encode())
    (root / "big.txt").write_bytes(b"b" * 100_000)
    (root / "bin.dat").write_bytes(bytes(range(256)))
    (root / "dir").mkdir()
    if not WINDOWS:  # Wine makes no symbolic links; test_windows_* cover them on Windows
        (root / "link").symlink_to("/etc/hostname")
    return root


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


CORPUS: Final[list[tuple[str, dict[str, Any]]]] = [
    ("read", {"path": "a.txt"}),
    ("read", {"path": "big.txt", "limit": 10}),
    ("read", {"path": "big.txt", "offset": 99_990}),
    ("read", {"path": "bin.dat"}),
    ("read", {"path": "missing.txt"}),
    ("read", {"path": "dir"}),
    ("read", {"path": "a.txt", "offset": -1}),
    *([] if WINDOWS else [("read", {"path": "link"})]),
    ("read", {"path": "../outside"}),
    ("replace", {"path": "new/deep.txt", "content": "n\n", "create": True}),
    ("replace", {"path": "r.txt", "content": "replaced\n", "expected_sha256": sha("to replace\n")}),
    (
        "replace",
        {
            "path": "e.txt",
            "expected_sha256": sha(E_TEXT),
            "edits": [{"old_text": "one", "new_text": "1"}],
        },
    ),
    (
        "replace",
        {
            "path": "a.txt",
            "expected_sha256": sha("alpha\n"),
            "edits": [{"old_text": "zz", "new_text": "y"}],
        },
    ),
    ("replace", {"path": "a.txt", "content": "x", "create": True}),
    ("replace", {"path": "a.txt", "content": "x", "expected_sha256": "0" * 64}),
    ("replace", {"path": "missing.txt", "content": "x", "expected_sha256": "0" * 64}),
    ("replace", {"path": "a.txt", "content": "x"}),
    ("replace", {"path": "dir", "content": "x", "create": True}),
    *(
        []
        if WINDOWS
        else [("replace", {"path": "link", "content": "x", "expected_sha256": "0" * 64})]
    ),
    ("replace", {"path": "b64.bin", "content": "AAEC", "encoding": "base64", "create": True}),
    ("shell", {"argv": succeeds()}),
    ("shell", {"argv": prints_and_exits("out", "err", 3)}),
    *([] if WINDOWS else [("shell", {"argv": ["sh", "-c", "kill -9 $$"]})]),  # no signals there
    ("shell", {"argv": [PYTHON, "-c", SLEEPS_UNTIL_STOPPED], "timeout_seconds": 0.3}),
    ("shell", {"argv": ["no-such-command-for-schemas"]}),
    ("shell", {"argv": succeeds(), "workdir": "missing"}),
    ("shell", {"argv": []}),
    ("shell", {"argv": [PYTHON, "-c", "import sys; sys.stdout.write('0' * 600000)"]}),
    ("shell", {"argv": ["cmd", "/c", "cd"] if WINDOWS else ["pwd"], "workdir": "dir"}),
    ("grep", {"pattern": "x"}),
]


def code_of(content: Mapping[str, Any]) -> str:
    return "ok" if content.get("ok") is True else str(content.get("code"))


def answered(codes: list[str]) -> str:
    """Which corpus entry gave which code, for a failure's message."""
    return "; ".join(f"{number} {CORPUS[number][0]}: {code}" for number, code in enumerate(codes))


def test_each_coding_tool_has_its_human_title_and_others_their_name() -> None:
    """``read``/``replace``/``shell`` are "Read file", "Replace file", "Run command"."""
    assert EXPECTED_TITLES == dict(TITLES)
    assert "echo" == title_of("echo")


@pytest.mark.parametrize("name", [*EXPECTED_TITLES, "echo"])
def test_each_output_schema_is_a_valid_open_object_schema_that_requires_only_ok(
    name: str,
) -> None:
    """Draft 2020-12, ``type: object``, ``required: [ok]``, extra fields allowed."""
    schema = output_schema(name)
    check_schema(schema)
    assert ("object", ["ok"]) == (schema["type"], schema["required"])
    assert "additionalProperties" not in schema
    assert [] == output_errors(name, {"ok": True, "a_field_added_later": [1]})


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("read", {"path": "a"}),
        ("read", {"ok": "yes"}),
        ("replace", {"ok": True, "committed": "true"}),
        ("shell", {"ok": False, "code": "command_failed", "exit_code": "3"}),
        ("shell", {"ok": True, "stdout_omitted_at": "here"}),
    ],
)
def test_a_content_object_of_the_wrong_shape_breaks_the_schema(
    name: str, content: dict[str, Any]
) -> None:
    """The schemas are not vacuous: no ``ok``, or a declared field of another type, fails."""
    assert [] != output_errors(name, content)


async def test_every_content_object_of_the_corpus_validates_against_its_output_schema(
    tmp_path: Path,
) -> None:
    """In process: every answer, success and failure, satisfies the declared schema."""
    root = lay_out(tmp_path / "root")
    answers: list[str] = []
    async with compose(Config(root)) as dispatcher:
        for number, (name, arguments) in enumerate(CORPUS):
            result = await dispatcher.dispatch(Call(f"c{number}", name, json.dumps(arguments)))
            assert [] == output_errors(name, result.content_object)
            answers.append(code_of(result.content_object))
    assert PROVOKED <= set(answers), answered(answers)


async def test_over_stdio_the_real_client_accepts_every_answer_and_is_error_follows_the_rule(
    tmp_path: Path,
) -> None:
    """The real client validates each answer; isError is false for success and command_failed."""
    root = lay_out(tmp_path / "root")
    seen: list[tuple[str, bool]] = []
    async with client_for(root) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        for name, arguments in CORPUS:
            result = await client.call_tool(name, arguments)
            content = result.structured_content or {}
            assert [] == output_errors(name, content)
            [text] = result.content
            assert isinstance(text, TextContent)
            assert content == json.loads(text.text)
            seen.append((code_of(content), result.is_error))
    assert {n: (t.title, t.output_schema) for n, t in listed.items()} == {
        n: (title, output_schema(n)) for n, title in EXPECTED_TITLES.items()
    }
    assert PROVOKED <= {code for code, _ in seen}, answered([code for code, _ in seen])
    for code, is_error in seen:
        assert (code not in {"ok", *DATA_FAILURE_CODES}) == is_error


async def test_a_command_that_exits_non_zero_is_data_over_mcp_but_a_failure_in_process(
    tmp_path: Path,
) -> None:
    """``exit 3``: in process ``is_error``; over MCP ``isError: false`` with ok, code, exit_code."""
    root = lay_out(tmp_path / "root")
    arguments = {"argv": exits_with(3)}
    async with compose(Config(root)) as dispatcher:
        result = await dispatcher.dispatch(Call("x", "shell", json.dumps(arguments)))
        async with Client(mcp_server(dispatcher)) as client:
            over_mcp = await client.call_tool("shell", arguments)
    content = over_mcp.structured_content or {}
    assert result.is_error
    assert (False, False, "command_failed", 3) == (
        over_mcp.is_error,
        content["ok"],
        content["code"],
        content["exit_code"],
    )


@pytest.mark.parametrize(
    ("content", "is_error"),
    [
        ({"ok": True}, False),
        ({"ok": False, "code": "command_failed", "message": "m", "exit_code": 1}, False),
        ({"ok": False, "code": "timed_out", "message": "m", "exit_code": -1}, True),
        ({"ok": False, "code": "not_found", "message": "m"}, True),
    ],
)
def test_is_error_is_true_for_every_failure_but_a_command_that_ran_and_failed(
    content: dict[str, Any], is_error: bool
) -> None:
    """``result_of``: only ``command_failed`` among failures turns into ``isError: false``."""
    problem = None if content["ok"] else "m"
    answer = result_of(Result("1", json.dumps(content), problem))
    assert is_error == answer.is_error
    assert content == answer.structured_content


def test_the_cli_exit_code_of_a_failing_command_is_unchanged(tmp_path: Path) -> None:
    """``spice-coding call shell`` of ``exit 3`` still exits 1 (a model-visible failure)."""
    finished = subprocess.run(
        [
            str(SCRIPT),
            "--root",
            str(tmp_path),
            "call",
            "shell",
            json.dumps({"argv": exits_with(3)}),
        ],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert 1 == finished.returncode
    assert "command_failed" == json.loads(finished.stdout)["code"]


def test_schema_errors_finds_the_breaks_of_a_plain_schema() -> None:
    """The helper itself: a wrong type is reported, a right one is not."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert ([], 1) == (schema_errors(schema, {"n": 1}), len(schema_errors(schema, {"n": "1"})))
