"""``Config`` and ``SECURITY_WARNING``: defaults, every bound on both sides, normalization."""

from __future__ import annotations

import dataclasses
import math
import ntpath
import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.tools.coding import SECURITY_WARNING, Config, _config
from spice.agent.tools.coding._config import (
    DEFAULT_BYTES,
    DEFAULT_COMMAND_TIMEOUT,
    MAXIMUM_BYTES,
    MAXIMUM_COMMAND_TIMEOUT,
)

BYTE_FIELDS = ("max_read_bytes", "max_write_bytes", "max_output_bytes")
TREE = os.path.abspath("/work/tree")
R = os.path.abspath("/r")
W_T = os.path.abspath("/w/t")
"""Absolute roots on every platform (``C:\\work\\tree`` on Windows)."""
WINDOWS_NAMES = ("COMSPEC", "PATHEXT", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP", "USERPROFILE")
DEFAULT_NAMES = tuple(
    sorted(("HOME", "LANG", "PATH", "TMPDIR") + (WINDOWS_NAMES if os.name == "nt" else ()))
)
"""The contract's four names, and on Windows the seven a program needs to start there."""


def test_defaults_are_the_contracts() -> None:
    """256 KiB pages and captures, two minutes, and the four default variable names."""
    config = Config(TREE)
    assert (TREE, 262_144, 262_144, 262_144, 120.0, DEFAULT_NAMES) == (
        config.root,
        config.max_read_bytes,
        config.max_write_bytes,
        config.max_output_bytes,
        config.command_timeout,
        config.environment_allowlist,
    )
    assert (DEFAULT_BYTES, MAXIMUM_BYTES, DEFAULT_COMMAND_TIMEOUT, MAXIMUM_COMMAND_TIMEOUT) == (
        262_144,
        524_288,
        120.0,
        1800.0,
    )


def test_construction_touches_nothing_on_disk(tmp_path: Path) -> None:
    """A root that does not exist is accepted and still does not exist afterwards."""
    missing = tmp_path / "not" / "there"
    assert str(missing) == Config(missing).root
    assert not missing.exists()
    assert not (tmp_path / "not").exists()


def test_config_is_frozen() -> None:
    """A Config cannot be changed after construction."""
    config = Config(TREE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_read_bytes = 1  # type: ignore[misc]


@pytest.mark.parametrize("field", BYTE_FIELDS)
@pytest.mark.parametrize("value", [1, MAXIMUM_BYTES])
def test_byte_bounds_accept_both_ends(field: str, value: int) -> None:
    """1 and 524288 are accepted for every byte bound."""
    assert value == getattr(Config(R, **{field: value}), field)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", BYTE_FIELDS)
@pytest.mark.parametrize("value", [0, -1, MAXIMUM_BYTES + 1, True, 1.0, "1", None])
def test_byte_bounds_refuse_one_past_each_end_and_non_integers(field: str, value: object) -> None:
    """0 and 524289 are refused, and so are booleans, floats, strings and None."""
    with pytest.raises(ValueError, match=field):
        Config(R, **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [MAXIMUM_COMMAND_TIMEOUT, 1, 0.001, math.ulp(0.0)])
def test_timeout_accepts_up_to_1800_seconds(value: float) -> None:
    """Any finite positive number of seconds up to 1800 is accepted, as a float."""
    timeout = Config(R, command_timeout=value).command_timeout
    assert (float(value), float) == (timeout, type(timeout))


@pytest.mark.parametrize(
    "value",
    [
        0,
        0.0,
        -1,
        math.nextafter(MAXIMUM_COMMAND_TIMEOUT, math.inf),
        1801,
        math.nan,
        math.inf,
        True,
        "1",
    ],
)
def test_timeout_refuses_zero_past_1800_and_non_numbers(value: object) -> None:
    """0, just above 1800, NaN, infinity, booleans and strings are refused."""
    with pytest.raises(ValueError, match="command_timeout"):
        Config(R, command_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/work/tree/", "/work/tree"),
        ("//work//tree", "/work/tree"),
        ("///work/./a/../tree", "/work/tree"),
        ("/", "/"),
        (Path("/work/tree"), "/work/tree"),
    ],
)
def test_the_root_is_normalized_lexically(raw: str | Path, expected: str) -> None:
    """Redundant separators, ``.`` and ``..`` are cleaned without looking at the disk."""
    assert expected == Config(raw).root


@pytest.mark.parametrize("raw", ["", "relative/tree", "./tree", "/work/\0tree", 7, None, b"/work"])
def test_the_root_must_be_an_absolute_path(raw: object) -> None:
    """Empty, relative, NUL-carrying and non-text roots are refused."""
    with pytest.raises(ValueError, match="root") as caught:
        Config(raw)  # type: ignore[arg-type]
    assert "tree" not in str(caught.value)


def test_the_allowlist_is_trimmed_deduplicated_and_sorted() -> None:
    """Names are stripped, repeated names kept once, and the result sorted."""
    config = Config(R, environment_allowlist=[" PATH", "HOME ", "PATH", "LANG"])
    assert ("HOME", "LANG", "PATH") == config.environment_allowlist
    assert ("A", "B", "C") == Config(R, environment_allowlist="C, B A,,").environment_allowlist
    assert () == Config(R, environment_allowlist=[]).environment_allowlist


@pytest.mark.parametrize("names", [[""], ["  "], ["A=B"], ["A\0"], [1], b"PATH", 3, None])
def test_the_allowlist_refuses_empty_names_equals_nul_and_non_text(names: object) -> None:
    """An empty name, ``=``, NUL, a non-string name or a non-collection are refused."""
    with pytest.raises(ValueError, match="environment_allowlist"):
        Config(R, environment_allowlist=names)  # type: ignore[arg-type]


def test_from_environment_reads_the_worktree_variable() -> None:
    """The root comes from ``SPICE_AGENT_WORKTREE`` of the given mapping; overrides apply."""
    config = Config.from_environment({"SPICE_AGENT_WORKTREE": W_T + os.sep}, max_read_bytes=5)
    assert (W_T, 5) == (config.root, config.max_read_bytes)


def test_from_environment_without_the_variable_is_refused() -> None:
    """A missing variable is a ValueError naming the variable, not a KeyError."""
    with pytest.raises(ValueError, match="SPICE_AGENT_WORKTREE"):
        Config.from_environment({"HOME": "/root"})
    with pytest.raises(ValueError, match="root must be an absolute path"):
        Config.from_environment({"SPICE_AGENT_WORKTREE": "relative"})


def test_an_empty_worktree_variable_counts_as_unset() -> None:
    """One rule for both the library and the application (``Config.root_in``): an empty
    value is no root, said as the variable not set (not as a bad path)."""
    with pytest.raises(ValueError, match="SPICE_AGENT_WORKTREE is not set"):
        Config.from_environment({"SPICE_AGENT_WORKTREE": ""})
    assert Config.root_in({"SPICE_AGENT_WORKTREE": ""}) is None
    assert Config.root_in({}) is None
    assert Config.root_in({"SPICE_AGENT_WORKTREE": W_T}) == W_T


def test_from_environment_defaults_to_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a mapping, ``os.environ`` is read."""
    monkeypatch.setenv("SPICE_AGENT_WORKTREE", os.path.abspath("/from/env"))
    assert os.path.abspath("/from/env") == Config.from_environment().root


def test_the_security_warning_says_what_the_tools_can_do() -> None:
    """Files, processes, network, environment, the user's privileges, no sandbox or prompt."""
    lowered = SECURITY_WARNING.lower()
    for word in ("read and write files", "processes", "network", "environment", "privileges"):
        assert word in lowered
    assert "no sandbox" in lowered
    assert "approval prompt" in lowered


# -- what is an absolute path (both spellings are checked on every platform) ----------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("C:\\work", True),
        ("c:/work", True),
        ("\\\\server\\share\\work", True),
        ("\\work", False),  # rooted, but on the current drive: ntpath.isabs took it before 3.13
        ("/work", False),
        ("C:work", False),  # relative to drive C's current directory
        ("work", False),
        ("", False),
    ],
)
def test_a_windows_path_is_absolute_only_with_a_drive_or_a_share(path: str, expected: bool) -> None:
    assert expected is _config.absolute(path, ntpath)


@pytest.mark.parametrize(("path", "expected"), [("/work", True), ("work", False), ("", False)])
def test_a_posix_path_is_absolute_as_posixpath_says(path: str, expected: bool) -> None:
    assert expected is _config.absolute(path, posixpath)


@given(st.text(alphabet="C:\\/.aw", max_size=12))
def test_a_windows_path_taken_as_absolute_names_its_drive_or_share(path: str) -> None:
    if _config.absolute(path, ntpath):
        drive, rest = ntpath.splitdrive(path)
        assert drive
        share = len(drive) >= 2 and set(drive[:2]) <= {"\\", "/"}
        assert share or (drive[0].isalpha() and rest.startswith(("\\", "/")))


def test_a_root_without_a_drive_is_refused_on_windows() -> None:
    if os.name != "nt":
        pytest.skip("the platform's own spelling: Windows (make test-windows)")
    with pytest.raises(ValueError, match="absolute"):
        Config("\\work")
