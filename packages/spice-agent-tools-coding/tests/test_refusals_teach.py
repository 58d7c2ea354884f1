"""Refusals that teach (contract 11.3): the unknown property is named, a whole command
line in one argv element gets a hint to split it, an absolute workdir elsewhere names the
root. Names from the call are model input: shown shortened, non-printable characters as
``?``, the answer bounded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fakes import FakeLauncher, FakeResolver, content_of, shell_call
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.process import ExecutableNotFound
from spice.agent.tool import MAXIMUM_MESSAGE_BYTES, Call
from spice.agent.tools.coding import Config, new_read, new_replace
from spice.agent.tools.coding._arguments import SHOWN_NAME_CHARS, ArgumentError, decode_object
from spice.agent.tools.coding._shell import build_shell
from spice.agent.tools.coding._shell_problems import PROBLEMS

READ = frozenset({"path", "offset", "limit"})


def refusal(arguments: str, allowed: frozenset[str] = READ) -> str:
    with pytest.raises(ArgumentError) as raised:
        decode_object(arguments, allowed)
    return str(raised.value)


def test_an_unknown_property_is_named_beside_the_known_ones() -> None:
    assert (
        "arguments have an unknown property 'cwd'; the properties are limit, offset, path"
        == refusal('{"path": "a", "cwd": "."}')
    )


def test_several_unknown_properties_name_the_first_and_count_the_rest() -> None:
    message = refusal('{"path": "a", "zz": 1, "cwd": 2, "dir": 3}')
    assert "unknown property 'cwd' (and 2 more);" in message


def test_a_known_property_is_not_named() -> None:
    """The other side: known properties pass the decoder."""
    assert {"path": "a", "limit": 1} == decode_object('{"path": "a", "limit": 1}', READ)


@given(st.text(min_size=1, max_size=300).filter(lambda name: name not in READ))
@settings(max_examples=200, deadline=None)
def test_any_unknown_name_is_shown_bounded_and_printable(name: str) -> None:
    try:
        arguments = json.dumps({"path": "a", name: 1})
        message = refusal(arguments)
    except UnicodeEncodeError:  # a lone surrogate: refused as such, never shown
        return
    if any("\ud800" <= char <= "\udfff" for char in name):
        assert "lone surrogates" in message
        return
    shown = message.split("property ", 1)[1].split("; the properties", 1)[0]
    assert shown.startswith("'")
    assert len(shown) <= SHOWN_NAME_CHARS + len("''...")
    assert all(char.isprintable() for char in message)
    assert len(message.encode()) <= MAXIMUM_MESSAGE_BYTES
    if name.isprintable() and len(name) <= SHOWN_NAME_CHARS:
        assert f"'{name}'" == shown  # a short printable name is shown exactly


def test_a_long_name_is_cut_and_marked() -> None:
    message = refusal(json.dumps({"path": "a", "x" * 1000: 1}))
    assert f"'{'x' * SHOWN_NAME_CHARS}'..." in message
    assert "x" * (SHOWN_NAME_CHARS + 1) not in message


def test_control_characters_are_shown_as_question_marks() -> None:
    message = refusal(json.dumps({"path": "a", "a\nb\x1b[31mc\u202e": 1}))
    assert "'a?b?[31mc?'" in message


async def test_through_read_and_replace_the_refusal_names_the_property(tmp_path: Path) -> None:
    read = await new_read(Config(tmp_path)).execute(Call("c", "read", '{"path": "a", "p": 1}'))
    assert "unknown property 'p'" in str(content_of(read)["message"])
    edit = {"path": "a", "expected_sha256": "0" * 64, "edits": [{"old_text": "a", "new": "b"}]}
    replace = await new_replace(Config(tmp_path)).execute(Call("c", "replace", json.dumps(edit)))
    content = content_of(replace)
    assert "invalid_arguments" == content["code"]
    assert "edits[0] has an unknown property 'new'; the properties are" in str(content["message"])


def shell_answer(tmp_path: Path, arguments: dict[str, object]) -> dict[str, object]:
    launcher = FakeLauncher()
    tool, _ = build_shell(
        Config(tmp_path), FakeResolver(ExecutableNotFound()), launcher, posix=True
    )
    content = content_of(asyncio.run(tool.execute(shell_call(arguments))))
    assert [] == launcher.specs  # nothing started
    return content


@pytest.mark.parametrize(
    "argv", [["python3 -m unittest"], ["python3 -m", "unittest"], ["make\ttest"]]
)
def test_a_command_line_in_argv0_gets_the_hint_to_split_it(tmp_path: Path, argv: list[str]) -> None:
    content = shell_answer(tmp_path, {"argv": argv})
    assert "command_not_found" == content["code"]  # the code is unchanged (contract 5)
    message = str(content["message"])
    assert "holds spaces" in message
    assert '["python3", "-m", "unittest"]' in message
    assert PROBLEMS["split_argv"] == message  # fixed words: nothing of the argv is echoed


def test_a_name_without_spaces_gets_the_plain_answer(tmp_path: Path) -> None:
    """The other side: no hint where argv[0] has no space."""
    content = shell_answer(tmp_path, {"argv": ["nope", "a b"]})
    assert "command_not_found" == content["code"]
    assert "holds spaces" not in str(content["message"])
    assert "./name" in str(content["message"])


@pytest.mark.parametrize("workdir", ["/etc", "/"])
def test_an_absolute_workdir_elsewhere_names_the_root(tmp_path: Path, workdir: str) -> None:
    content = shell_answer(tmp_path, {"argv": ["ls"], "workdir": workdir})
    assert ("invalid_arguments", f"({tmp_path})") == (
        content["code"],
        str(content["message"])[-len(str(tmp_path)) - 2 :],
    )


def test_a_relative_workdir_that_leaves_keeps_its_own_words(tmp_path: Path) -> None:
    content = shell_answer(tmp_path, {"argv": ["ls"], "workdir": "../x"})
    assert str(content["message"]).startswith("workdir must be a relative path")
