"""Shell argument rules: each with its own message, both sides of every bound."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fakes import FakeLauncher, FakeResolver, content_of, shell_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.tool import ExecutionError, Result
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._shell import build_shell
from spice.agent.tools.coding._shell_description import MAXIMUM_ARGV_BYTES, MAXIMUM_ARGV_ITEMS

TIMEOUT = 30.0


async def answer(root: Path, arguments: dict[str, object] | str) -> tuple[dict[str, object], int]:
    """The content of one call over ``root`` and how many processes were launched."""
    launcher = FakeLauncher()
    tool, _ = build_shell(
        Config(root, command_timeout=TIMEOUT), FakeResolver(), launcher, posix=True
    )
    result = await tool.execute(shell_call(arguments))
    return content_of(result), len(launcher.specs)


async def accepted(root: Path, arguments: dict[str, object]) -> None:
    """Assert the call ran."""
    content, launched = await answer(root, arguments)
    assert (True, 1) == (content["ok"], launched)


async def rejected(root: Path, arguments: dict[str, object] | str, message: str) -> None:
    """Assert the call is invalid with a message containing ``message`` and ran nothing."""
    content, launched = await answer(root, arguments)
    assert ("invalid_arguments", 0) == (content["code"], launched)
    assert message in str(content["message"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "argv is required"),
        ({"argv": "ls -l"}, "argv must be an array of strings"),
        ({"argv": ["ls", 1]}, "argv must be an array of strings"),
        ({"argv": []}, "at least 1 element"),
        ({"argv": ["ls", ""]}, "must not be empty"),
        ({"argv": ["ls", "a\0b"]}, "must not contain NUL"),
        ({"argv": ["ls"], "cwd": "."}, "unknown property"),
        ({"argv": ["ls"], "workdir": 3}, "workdir must be a string"),
        (
            {"argv": ["ls"], "workdir": "/etc"},
            "workdir: an absolute path must lie beneath the worktree root (",
        ),
        ({"argv": ["ls"], "workdir": "../x"}, "workdir must be a relative path"),
        ({"argv": ["ls"], "workdir": "a/../../x"}, "workdir must be a relative path"),
        ({"argv": ["ls"], "workdir": ""}, "workdir must be a relative path"),
        ({"argv": ["ls"], "timeout_seconds": 0}, "greater than 0"),
        ({"argv": ["ls"], "timeout_seconds": -1.5}, "greater than 0"),
        ({"argv": ["ls"], "timeout_seconds": TIMEOUT + 0.001}, "at most the configured"),
        ({"argv": ["ls"], "timeout_seconds": True}, "timeout_seconds must be a number"),
        ({"argv": ["ls"], "timeout_seconds": "1"}, "timeout_seconds must be a number"),
        ('{"argv": ["ls"], "timeout_seconds": 1e400}', "at most the configured"),
        ("[]", "JSON object"),
    ],
)
async def test_each_rule_has_its_own_message(
    tmp_path: Path, arguments: dict[str, object] | str, message: str
) -> None:
    """Invalid arguments are model-visible, specific, and start nothing."""
    await rejected(tmp_path, arguments, message)


async def test_argv_at_its_element_bound_is_accepted(tmp_path: Path) -> None:
    """128 elements run."""
    await accepted(tmp_path, {"argv": ["x"] * MAXIMUM_ARGV_ITEMS})


async def test_argv_one_past_its_element_bound_is_rejected(tmp_path: Path) -> None:
    """129 elements do not."""
    await rejected(tmp_path, {"argv": ["x"] * (MAXIMUM_ARGV_ITEMS + 1)}, "at most 128 elements")


async def test_argv_at_its_byte_bound_is_accepted(tmp_path: Path) -> None:
    """64 KiB of UTF-8 together runs; multi-byte characters count by their bytes."""
    half = MAXIMUM_ARGV_BYTES // 2
    await accepted(tmp_path, {"argv": ["x" * half, "é" * (half // 2)]})


async def test_argv_one_byte_past_its_byte_bound_is_rejected(tmp_path: Path) -> None:
    """One byte more does not."""
    half = MAXIMUM_ARGV_BYTES // 2
    await rejected(tmp_path, {"argv": ["x" * half, "é" * (half // 2), "y"]}, "65536 bytes together")


async def test_timeout_at_the_configured_bound_is_accepted(tmp_path: Path) -> None:
    """``timeout_seconds`` equal to ``command_timeout`` is allowed; integers are numbers."""
    await accepted(tmp_path, {"argv": ["true"], "timeout_seconds": TIMEOUT})
    await accepted(tmp_path, {"argv": ["true"], "timeout_seconds": 1})


async def test_workdir_dot_is_the_root(tmp_path: Path) -> None:
    """``"."`` and ``"./"`` name the root itself."""
    await accepted(tmp_path, {"argv": ["true"], "workdir": "."})


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
ARGUMENTS = st.dictionaries(
    st.sampled_from(["argv", "workdir", "timeout_seconds", "other"]),
    JSON_VALUES | st.lists(st.text(max_size=6), max_size=6),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arguments=ARGUMENTS)
def test_every_argument_object_gets_a_result_or_an_execution_error(
    tmp_path_factory: pytest.TempPathFactory, arguments: dict[str, object]
) -> None:
    """Whatever the model sends, the tool answers with a Result (or an ExecutionError)."""
    root = tmp_path_factory.getbasetemp()
    launcher = FakeLauncher()
    tool, _ = build_shell(
        Config(root, command_timeout=TIMEOUT), FakeResolver(), launcher, posix=True
    )
    try:
        outcome: object = asyncio.run(tool.execute(shell_call(json.dumps(arguments))))
    except ExecutionError as error:
        outcome = error
    assert isinstance(outcome, (Result, ExecutionError))
    if isinstance(outcome, Result) and outcome.is_error:
        assert json.loads(outcome.content)["code"] in {
            "invalid_arguments",
            "workdir_unavailable",
            "path_escape",
        }
        assert [] == launcher.specs
