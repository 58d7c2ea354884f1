"""``--max-edit-bytes`` / ``SPICE_AGENT_MAX_EDIT_BYTES`` (contract 10.2): parsed, bounded, shown."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from portable import ANY_ROOT

from spice.agent.coding import _cli
from spice.agent.coding._cli import main
from spice.agent.coding._settings._resolve import (
    MAX_EDIT_BYTES_VARIABLE,
    flags_of,
    resolve_settings,
)
from spice.agent.coding._settings._values import SettingsError
from spice.agent.tools.coding import Config

FLAG = "--max-edit-bytes"
MOST = 64 * 1024 * 1024


def _config(argv: list[str], environ: Mapping[str, str] | None = None) -> Config:
    return resolve_settings(flags_of(_cli._parser().parse_args(argv)), environ or {}).config


def test_the_default_is_4_mib_and_the_write_bound_stays_apart() -> None:
    """No flag, no variable: 4 MiB to edit, 256 KiB of content."""
    config = _config(["--root", ANY_ROOT, "serve"])
    assert (4 * 1024 * 1024, 262_144) == (config.max_edit_bytes, config.max_write_bytes)


@pytest.mark.parametrize("where", ["before", "after", "variable"])
def test_the_flag_before_or_after_the_command_word_and_the_variable_set_it(where: str) -> None:
    """The same value three ways."""
    argv = {
        "before": ["--root", ANY_ROOT, FLAG, "1000", "serve"],
        "after": ["--root", ANY_ROOT, "serve", FLAG, "1000"],
        "variable": ["--root", ANY_ROOT, "serve"],
    }[where]
    environ = {MAX_EDIT_BYTES_VARIABLE: "1000"} if where == "variable" else {}
    assert 1000 == _config(argv, environ).max_edit_bytes


def test_the_flag_wins_over_the_variable() -> None:
    """Flag 7, variable 9: 7."""
    argv = ["--root", ANY_ROOT, "serve", FLAG, "7"]
    assert 7 == _config(argv, {MAX_EDIT_BYTES_VARIABLE: "9"}).max_edit_bytes


@settings(max_examples=60, deadline=None)
@given(
    value=st.integers(-5, 5) | st.integers(MOST - 3, MOST + 3) | st.integers(0, 10**9),
    by_variable=st.booleans(),
)
def test_the_bound_is_accepted_exactly_within_1_to_64_mib(value: int, by_variable: bool) -> None:
    """Accepted iff 1 <= N <= 67108864, by flag or variable; else one line naming the origin."""
    text = str(value)
    argv = ["--root", ANY_ROOT, "serve"] + ([] if by_variable else [FLAG, text])
    environ = {MAX_EDIT_BYTES_VARIABLE: text} if by_variable else {}
    if 1 <= value <= MOST:
        assert value == _config(argv, environ).max_edit_bytes
    else:
        with pytest.raises(SettingsError, match=MAX_EDIT_BYTES_VARIABLE if by_variable else FLAG):
            _config(argv, environ)


@pytest.mark.parametrize(("value", "code"), [(str(MOST), 0), (str(MOST + 1), 2), ("x", 2)])
def test_the_cli_accepts_or_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, code: int
) -> None:
    """``tools`` with the bound at and over its maximum; a bad value is one line, exit 2."""
    assert code == main(["--root", str(tmp_path), "tools", FLAG, value])
    captured = capsys.readouterr()
    if code:
        assert 1 == captured.err.count("\n")
        assert captured.err.startswith(f"spice-coding: {FLAG}")
    else:
        tools = {t["name"]: t["description"] for t in json.loads(captured.out)["tools"]}
        assert str(MOST) in tools["read"]
        assert str(MOST) in tools["replace"]


def test_config_refuses_both_sides_of_its_range() -> None:
    """Config itself: 0 and 64 MiB + 1 are refused, 1 and 64 MiB accepted, bools refused."""
    for bad in (0, MOST + 1, True):
        with pytest.raises(ValueError, match="max_edit_bytes"):
            Config(ANY_ROOT, max_edit_bytes=bad)
    assert (1, MOST) == (
        Config(ANY_ROOT, max_edit_bytes=1).max_edit_bytes,
        Config(ANY_ROOT, max_edit_bytes=MOST).max_edit_bytes,
    )
