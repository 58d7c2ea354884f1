"""The shell call's route: each room once, one answer site (contract 12.5).

``_shell_arguments`` decodes once and carries what the answer needs of the argv;
``_shell_run`` ends every call in an ``Ended`` and never builds an answer; ``_shell_answer``
is the one place an ``Ended`` becomes the model's answer.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

import spice.agent.tools.coding as product
from spice.agent.tool import Call, ExecutionError, ExecutionState
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._arguments import ArgumentError
from spice.agent.tools.coding._capture import Capture
from spice.agent.tools.coding._platform import batch_file, is_windows
from spice.agent.tools.coding._results import ANSWER_ROOM, RESULT_UNENCODABLE
from spice.agent.tools.coding._shell_answer import Ended, answer
from spice.agent.tools.coding._shell_arguments import parse
from spice.agent.tools.coding._shell_description import MAXIMUM_ARGV_ITEMS
from spice.agent.tools.coding._shell_problems import (
    CODE_OPTIONS,
    GLOB_CHARACTERS,
    NOT_IN_A_PATH,
    PROBLEMS,
)

PACKAGE: Final = Path(product.__file__).parent
SHELL_FIELDS: Final = (
    "workdir",
    "exit_code",
    "timed_out",
    "managed_cleanup_completed",
    "contained",
)
CALL: Final = Call("c", "shell", "{}")
CONFIG: Final = Config(str(Path(__file__).resolve().parent))
"""A root that is absolute on every platform (decoding never opens it)."""

ARGV_ITEM: Final = st.text(
    alphabet=st.characters(min_codepoint=1, max_codepoint=0xD7FF),  # no NUL, no surrogate
    min_size=1,
    max_size=12,
)


def imported(module: str) -> set[str]:
    """The names of the package's modules that ``module`` imports (``from .x import``)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names.add(node.module)
    return names


# ---- the arguments carry the argv's hints ---------------------------------------------------


@given(st.lists(ARGV_ITEM, min_size=1, max_size=6))
def test_the_hints_of_the_argv_are_decided_once_at_decoding(argv: list[str]) -> None:
    """A glob in the program or in an argument, or a batch file (Windows only), is known from
    the decoded arguments, so no later step looks at the argv again for it."""
    arguments = parse(json.dumps({"argv": argv}), CONFIG)
    assert arguments.argv == tuple(argv)
    assert arguments.program_globbed == (not GLOB_CHARACTERS.isdisjoint(argv[0]))
    rest = argv[1:]
    assert arguments.arguments_globbed == any(
        not GLOB_CHARACTERS.isdisjoint(item)
        and NOT_IN_A_PATH.isdisjoint(item)
        and (index == 0 or CODE_OPTIONS.fullmatch(rest[index - 1]) is None)
        for index, item in enumerate(rest)
    )
    assert arguments.batch_file == (is_windows() and batch_file(argv[0]))


@pytest.mark.parametrize(
    ("argv", "program", "rest"),
    [(["ls"], False, False), (["*.py"], True, False), (["ls", "*.py"], False, True)],
)
def test_a_glob_is_placed_where_it_stands(argv: list[str], program: bool, rest: bool) -> None:
    arguments = parse(json.dumps({"argv": argv}), CONFIG)
    assert (program, rest) == (arguments.program_globbed, arguments.arguments_globbed)


@pytest.mark.parametrize(
    ("argv", "rest"),
    [
        (["python3", "-c", "import sys; print(sys.argv[1:])"], False),  # issue 47
        (["python3", "-c", "print(sys.argv[1:])"], False),  # code, even without blanks
        (["node", "-e", "process.argv.slice(2)[0]"], False),
        (["sh", "-c", "ls *.py"], False),
        (["bash", "-lc", "ls *.py"], False),
        (["perl", "-e", "print for glob('*')"], False),
        (["ls", "*.py"], True),
        (["ls", "src/[ab]?.py"], True),
        (["python3", "-c", "pass", "*.py"], True),  # after the code: a path again
        (["grep", "-e", "a*b", "x"], False),  # sed/grep -e: a pattern, not a path
        (["ls", "a b*"], False),  # a blank: text, not a path an agent meant to expand
    ],
)
def test_only_an_argument_that_looks_like_a_file_pattern_is_globbed(
    argv: list[str], rest: bool
) -> None:
    arguments = parse(json.dumps({"argv": argv}), CONFIG)
    assert arguments.arguments_globbed is rest


@pytest.mark.parametrize(
    ("program", "batch"), [("tool.bat", True), ("TOOL.CMD", True), ("tool.exe", False)]
)
def test_a_batch_file_is_known_at_decoding_on_windows_only(program: str, batch: bool) -> None:
    arguments = parse(json.dumps({"argv": [program, "x"]}), CONFIG)
    assert arguments.batch_file is (batch and os.name == "nt")


def test_the_argv_bound_is_kept_at_decoding_on_both_sides() -> None:
    at_bound = parse(json.dumps({"argv": ["x"] * MAXIMUM_ARGV_ITEMS}), CONFIG)
    assert MAXIMUM_ARGV_ITEMS == len(at_bound.argv)
    with pytest.raises(ArgumentError):
        parse(json.dumps({"argv": ["x"] * (MAXIMUM_ARGV_ITEMS + 1)}), CONFIG)


# ---- one answer site ------------------------------------------------------------------------


@pytest.mark.parametrize("contained", [True, False])
def test_a_refusal_carries_every_shell_field(contained: bool) -> None:
    """The defaults of an ``Ended`` are those of a command that did not run."""
    result = answer(CALL, Ended(None, ("invalid_arguments", "no")), contained=contained)
    content = json.loads(result.content)
    assert list(content)[:3] == ["ok", "code", "message"]
    assert (False, "invalid_arguments", "no") == (
        content["ok"],
        content["code"],
        content["message"],
    )
    assert {"workdir": None, "exit_code": -1, "timed_out": False} == {
        key: content[key] for key in ("workdir", "exit_code", "timed_out")
    }
    assert content["managed_cleanup_completed"] is False
    assert contained is content["contained"]
    assert set(SHELL_FIELDS) <= set(content)
    assert ("", "", "utf-8") == (content["stdout"], content["stderr"], content["encoding"])


def test_a_command_that_ran_carries_its_outcome_and_its_sandbox_fields() -> None:
    capture = Capture(64)
    capture.stdout.write(b"out\n")
    ended = Ended(
        ".",
        None,
        ExecutionState.UNCERTAIN,
        capture,
        exit_code=0,
        managed_cleanup_completed=True,
        sandbox={"network_refused": ["example.org:443"], "network_refused_count": 1},
    )
    content = json.loads(answer(CALL, ended, contained=True).content)
    assert content["ok"] is True
    assert "code" not in content
    assert (".", 0, "out\n") == (content["workdir"], content["exit_code"], content["stdout"])
    assert ["example.org:443"] == content["network_refused"]
    assert "sandbox_hint" not in content


def test_a_hint_is_carried_only_when_the_run_gave_one() -> None:
    hinted = Ended(".", ("command_failed", PROBLEMS["exited"]), sandbox_hint="try --allow-net")
    content = json.loads(answer(CALL, hinted, contained=True).content)
    assert "try --allow-net" == content["sandbox_hint"]
    assert "sandbox_hint" not in json.loads(answer(CALL, Ended(".", None), contained=True).content)


def test_an_answer_past_the_bound_fails_with_the_state_of_how_the_call_ended() -> None:
    """An answer that cannot be kept within its bound is a host failure that still says
    what the call did (here: a command ran, uncertain)."""
    problem = ("command_failed", "x" * (ANSWER_ROOM + 1))
    with pytest.raises(ExecutionError) as raised:
        answer(CALL, Ended(".", problem, ExecutionState.UNCERTAIN), contained=False)
    assert ExecutionState.UNCERTAIN == raised.value.state
    assert RESULT_UNENCODABLE == raised.value.message


def test_the_run_never_builds_an_answer() -> None:
    """``_shell_run`` ends every call in an ``Ended``: it imports no answer builder, so a
    refusal cannot be answered from the middle of a run (the route's returns of round 5)."""
    run = imported("_shell_run")
    assert "_shell_answer" in run  # for Ended
    assert "_results" not in run
    tree = ast.parse((PACKAGE / "_shell_run.py").read_text(encoding="utf-8"))
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "_shell_answer"
        for alias in node.names
    }
    assert {"Ended"} == names


def test_every_room_of_the_route_is_entered_from_the_face_once() -> None:
    """``_shell`` hands the call to each room once: progress, arguments, the run, the answer."""
    assert {"_progress", "_shell_arguments", "_shell_run", "_shell_answer"} <= imported("_shell")
    assert "_results" not in imported("_shell")
    assert "_progress" not in imported("_results")
