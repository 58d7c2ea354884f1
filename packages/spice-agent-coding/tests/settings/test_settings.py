"""Settings of ``serve``, ``call`` and ``tools``: flags, ``SPICE_AGENT_*`` variables, bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from portable import ANY_ROOT, DEFAULT_NAMES, PYTHON, auto_warning

from spice.agent.coding import _cli
from spice.agent.coding._cli import main
from spice.agent.coding._sandbox import DEFAULT_MODE as DEFAULT_SANDBOX
from spice.agent.coding._sandbox import MODES as SANDBOX_MODES
from spice.agent.coding._sandbox import SANDBOX_ENVIRONMENT_VARIABLE as SANDBOX_VARIABLE
from spice.agent.coding._settings._resolve import (
    ALLOW_NETWORK_VARIABLE,
    COMMAND_TIMEOUT_VARIABLE,
    MAX_EDIT_BYTES_VARIABLE,
    MAX_OUTPUT_BYTES_VARIABLE,
    MAX_READ_BYTES_VARIABLE,
    MAX_WRITE_BYTES_VARIABLE,
    Flags,
    Settings,
    flags_of,
    resolve_settings,
)
from spice.agent.coding._settings._values import (
    ALLOW_ENV_VARIABLE,
    MAXIMUM_ALLOWED_NAMES,
    MAXIMUM_NAME_LENGTH,
    MAXIMUM_VALUE_LENGTH,
    SettingsError,
)
from spice.agent.tools.coding import Config, ProtectedPaths

PROTECTED = ProtectedPaths.default()
"""What the application protects by default (contract 12.1)."""

SCRIPT = Path(sys.executable).parent / "spice-coding"
SETTING_VARIABLES = (
    ALLOW_ENV_VARIABLE,
    ALLOW_NETWORK_VARIABLE,
    COMMAND_TIMEOUT_VARIABLE,
    MAX_OUTPUT_BYTES_VARIABLE,
    MAX_READ_BYTES_VARIABLE,
    MAX_WRITE_BYTES_VARIABLE,
    MAX_EDIT_BYTES_VARIABLE,
    SANDBOX_VARIABLE,
)
BYTES_FLAGS = (
    ("--max-read-bytes", MAX_READ_BYTES_VARIABLE, "max_read_bytes"),
    ("--max-write-bytes", MAX_WRITE_BYTES_VARIABLE, "max_write_bytes"),
    ("--max-output-bytes", MAX_OUTPUT_BYTES_VARIABLE, "max_output_bytes"),
)
COMMANDS = ("tools", "serve", "call")

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)


def default_config(root: Path) -> Config:
    """The application's ``Config`` of ``root`` with no setting given."""
    return Config(root, environment_allowlist=DEFAULT_NAMES, protected_paths=PROTECTED)


def parsed(argv: list[str], environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the real parser and resolver make of ``argv`` over ``environ``."""
    return resolve_settings(flags_of(_cli._parser().parse_args(argv)), environ or {})


def command_tail(command: str) -> list[str]:
    return ["read", "{}"] if command == "call" else []


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "hello.txt").write_bytes(b"hello\n")
    return tree


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in SETTING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def maximum_of(out: str, tool: str, prop: str) -> object:
    """The ``maximum`` of one input property in the ``tools`` output."""
    listed = {t["name"]: t["input_schema"]["properties"] for t in json.loads(out)["tools"]}
    return listed[tool][prop]["maximum"]


def script(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if k not in SETTING_VARIABLES}
    return subprocess.run(
        [str(SCRIPT), *args],
        input=b"",
        capture_output=True,
        env={**clean, **(env or {})},
        cwd=cwd,
        timeout=60,
        check=False,
    )


# --- the defaults -----------------------------------------------------------------------------


def test_without_flags_or_variables_the_defaults_hold(worktree: Path) -> None:
    """No flag and no variable: Config's defaults, sandbox auto, no network."""
    actual = parsed(["--root", str(worktree), "serve"])
    assert Settings(default_config(worktree), DEFAULT_SANDBOX, allow_network=False) == actual
    assert "auto" == DEFAULT_SANDBOX
    assert ("auto", "workspace", "off") == SANDBOX_MODES


def test_empty_variables_count_as_unset(worktree: Path) -> None:
    """A variable set to the empty string (or blanks) is the same as no variable."""
    environ = dict.fromkeys(SETTING_VARIABLES, "")
    environ[ALLOW_ENV_VARIABLE] = "  "
    assert Settings(default_config(worktree)) == parsed(["--root", str(worktree), "tools"], environ)


# --- option order -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_settings_work_before_and_after_the_command_word(worktree: Path, command: str) -> None:
    """Every setting is accepted before the command word and after it, with the same effect."""
    options = [
        "--allow-env", "JAVA_HOME", "--command-timeout", "5", "--max-read-bytes", "10",
        "--max-write-bytes", "20", "--max-output-bytes", "30", "--sandbox", "off",
        "--allow-network",
    ]  # fmt: skip
    before = parsed(["--root", str(worktree), *options, command, *command_tail(command)])
    after = parsed(["--root", str(worktree), command, *options, *command_tail(command)])
    expected = Settings(
        Config(
            worktree,
            max_read_bytes=10,
            max_write_bytes=20,
            max_output_bytes=30,
            command_timeout=5.0,
            environment_allowlist=(*DEFAULT_NAMES, "JAVA_HOME"),
            protected_paths=PROTECTED,
        ),
        "off",
        allow_network=True,
    )
    assert (expected, expected) == (before, after)


def test_after_the_command_word_wins_over_before_it(worktree: Path) -> None:
    """A scalar given on both sides of the command word takes the later one."""
    actual = parsed(
        ["--root", str(worktree), "--command-timeout", "5", "--sandbox", "workspace", "serve",
         "--command-timeout", "9", "--sandbox", "off"]
    )  # fmt: skip
    assert (9.0, "off") == (actual.config.command_timeout, actual.sandbox)


def test_allow_env_collects_names_from_both_sides_of_the_command_word(worktree: Path) -> None:
    """Repeated --allow-env before and after the command word all reach the allowlist."""
    actual = parsed(
        ["--root", str(worktree), "--allow-env", "A", "serve", "--allow-env", "B",
         "--allow-env", "C", "--allow-env", "A"]
    )  # fmt: skip
    expected = tuple(sorted({*DEFAULT_NAMES, "A", "B", "C"}))
    assert expected == actual.config.environment_allowlist


@settings(max_examples=60, deadline=None)
@given(
    command=st.sampled_from(COMMANDS),
    placed=st.lists(
        st.tuples(
            st.sampled_from(["--command-timeout", "--max-read-bytes", "--sandbox"]),
            st.booleans(),
        ),
        max_size=6,
    ),
    values=st.data(),
)
def test_any_option_order_gives_the_last_value_per_side(
    command: str, placed: list[tuple[str, bool]], values: st.DataObject
) -> None:
    """Options in any order and number: after the command word wins, else the last before it."""
    value_of = {
        "--command-timeout": st.integers(1, 1800).map(str),
        "--max-read-bytes": st.integers(1, 524_288).map(str),
        "--sandbox": st.sampled_from(SANDBOX_MODES),
    }
    before: list[str] = []
    after: list[str] = []
    chosen: dict[str, tuple[bool, str]] = {}
    for flag, is_after in placed:
        value = values.draw(value_of[flag])
        (after if is_after else before).extend([flag, value])
        if is_after or not chosen.get(flag, (False, ""))[0]:
            chosen[flag] = (is_after, value)
    actual = parsed(["--root", ANY_ROOT, *before, command, *after, *command_tail(command)])
    expected_timeout = float(chosen.get("--command-timeout", (False, "120"))[1])
    expected_read = int(chosen.get("--max-read-bytes", (False, "262144"))[1])
    expected_sandbox = chosen.get("--sandbox", (False, DEFAULT_SANDBOX))[1]
    assert (expected_timeout, expected_read, expected_sandbox) == (
        actual.config.command_timeout,
        actual.config.max_read_bytes,
        actual.sandbox,
    )


@settings(max_examples=60, deadline=None)
@given(
    before=st.lists(names, max_size=5),
    after=st.lists(names, max_size=5),
    command=st.sampled_from(COMMANDS),
)
def test_repeated_allow_env_adds_every_name_to_the_defaults(
    before: list[str], after: list[str], command: str
) -> None:
    """Every --allow-env NAME, repeated anywhere, is added; the defaults always stay."""
    argv = ["--root", ANY_ROOT]
    for name in before:
        argv += ["--allow-env", name]
    argv.append(command)
    for name in after:
        argv += ["--allow-env", name]
    actual = parsed([*argv, *command_tail(command)])
    assert tuple(sorted({*DEFAULT_NAMES, *before, *after})) == actual.config.environment_allowlist


# --- the environment and its precedence ------------------------------------------------------


def test_every_variable_sets_its_setting(worktree: Path) -> None:
    """Each SPICE_AGENT_* variable sets what its flag sets."""
    environ = {
        ALLOW_ENV_VARIABLE: "VIRTUAL_ENV, JAVA_HOME",
        COMMAND_TIMEOUT_VARIABLE: "2.5",
        MAX_READ_BYTES_VARIABLE: "11",
        MAX_WRITE_BYTES_VARIABLE: "12",
        MAX_OUTPUT_BYTES_VARIABLE: "13",
        SANDBOX_VARIABLE: "workspace",
        ALLOW_NETWORK_VARIABLE: "1",
    }
    actual = parsed(["--root", str(worktree), "serve"], environ)
    expected = Settings(
        Config(
            worktree,
            max_read_bytes=11,
            max_write_bytes=12,
            max_output_bytes=13,
            command_timeout=2.5,
            environment_allowlist=(*DEFAULT_NAMES, "VIRTUAL_ENV", "JAVA_HOME"),
            protected_paths=PROTECTED,
        ),
        "workspace",
        allow_network=True,
    )
    assert expected == actual


@settings(max_examples=60, deadline=None)
@given(
    flag=st.one_of(st.none(), st.integers(1, 1800)),
    variable=st.one_of(st.none(), st.integers(1, 1800)),
    read_flag=st.one_of(st.none(), st.integers(1, 524_288)),
    read_variable=st.one_of(st.none(), st.integers(1, 524_288)),
    after=st.booleans(),
)
def test_flags_win_over_the_environment(
    flag: int | None,
    variable: int | None,
    read_flag: int | None,
    read_variable: int | None,
    after: bool,
) -> None:
    """A flag, where given, wins; else the variable; else the default."""
    options: list[str] = []
    if flag is not None:
        options += ["--command-timeout", str(flag)]
    if read_flag is not None:
        options += ["--max-read-bytes", str(read_flag)]
    environ = {}
    if variable is not None:
        environ[COMMAND_TIMEOUT_VARIABLE] = str(variable)
    if read_variable is not None:
        environ[MAX_READ_BYTES_VARIABLE] = str(read_variable)
    argv = ["serve", *options] if after else [*options, "serve"]
    actual = parsed(["--root", ANY_ROOT, *argv], environ)
    expected_timeout = next(v for v in (flag, variable, 120) if v is not None)
    expected_read = next(v for v in (read_flag, read_variable, 262_144) if v is not None)
    assert (float(expected_timeout), expected_read) == (
        actual.config.command_timeout,
        actual.config.max_read_bytes,
    )


def test_allow_env_flags_replace_the_variable_names() -> None:
    """Given --allow-env, SPICE_AGENT_ALLOW_ENV is not read; either adds to the defaults."""
    environ = {ALLOW_ENV_VARIABLE: "FROM_ENV"}
    with_flag = parsed(["--root", ANY_ROOT, "serve", "--allow-env", "FROM_FLAG"], environ)
    without = parsed(["--root", ANY_ROOT, "serve"], environ)
    assert tuple(sorted({*DEFAULT_NAMES, "FROM_FLAG"})) == with_flag.config.environment_allowlist
    assert tuple(sorted({*DEFAULT_NAMES, "FROM_ENV"})) == without.config.environment_allowlist


def test_the_sandbox_flag_wins_over_its_variable() -> None:
    """--sandbox beats SPICE_AGENT_SANDBOX, even a bad one it makes irrelevant."""
    actual = parsed(["--root", ANY_ROOT, "--sandbox", "off", "serve"], {SANDBOX_VARIABLE: "bogus"})
    assert "off" == actual.sandbox


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("true", True), ("YES", True), (" on ", True), ("0", False), ("off", False),
     ("false", False), ("No", False)],
)  # fmt: skip
def test_the_network_variable_reads_common_spellings(text: str, expected: bool) -> None:
    """SPICE_AGENT_ALLOW_NETWORK takes 1/0, true/false, yes/no, on/off (any case)."""
    assert (
        expected
        == parsed(["--root", ANY_ROOT, "serve"], {ALLOW_NETWORK_VARIABLE: text}).allow_network
    )


@given(
    mode=st.sampled_from(SANDBOX_MODES),
    cases=st.lists(st.booleans(), min_size=9, max_size=9),
    blanks=st.sampled_from(["", " ", "\t", "  "]),
    from_flag=st.booleans(),
)
def test_a_sandbox_mode_is_read_in_any_case_with_blanks_around(
    mode: str, cases: list[bool], blanks: str, from_flag: bool
) -> None:
    """One case rule: ``Workspace`` or `` OFF `` name their mode, by flag or variable."""
    spelled = "".join(c.upper() if up else c for c, up in zip(mode, cases, strict=False))
    text = f"{blanks}{spelled}{blanks}"
    if from_flag:
        actual = parsed(["--root", ANY_ROOT, "serve", "--sandbox", text], {SANDBOX_VARIABLE: "x"})
    else:
        actual = parsed(["--root", ANY_ROOT, "serve"], {SANDBOX_VARIABLE: text})
    assert mode == actual.sandbox


def test_the_network_flag_wins_over_a_variable_that_says_no() -> None:
    """--allow-network is on even where SPICE_AGENT_ALLOW_NETWORK says 0."""
    actual = parsed(["--root", ANY_ROOT, "serve", "--allow-network"], {ALLOW_NETWORK_VARIABLE: "0"})
    assert actual.allow_network


# --- bounds, both sides ----------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "variable", "field"), BYTES_FLAGS)
@pytest.mark.parametrize(
    ("value", "accepted"),
    [("1", True), ("524288", True), ("0", False), ("524289", False)],
)
def test_byte_bounds_hold_on_both_sides(
    worktree: Path,
    capsys: pytest.CaptureFixture[str],
    clean_environment: pytest.MonkeyPatch,
    flag: str,
    variable: str,
    field: str,
    value: str,
    accepted: bool,
) -> None:
    """1 and 524288 are accepted, 0 and 524289 exit 2 with one line, as flag and as variable."""
    by_flag = run_main(capsys, "--root", str(worktree), "tools", flag, value)
    clean_environment.setenv(variable, value)
    by_variable = run_main(capsys, "--root", str(worktree), "tools")
    for code, out, err in (by_flag, by_variable):
        if accepted:
            assert (0, auto_warning()) == (code, err)
        else:
            assert (2, "", 1) == (code, out, err.count("\n"))
            assert f"{field} must be within 1..524288" in err
    assert by_flag[0] == by_variable[0]


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("1800", True), ("0.001", True), ("1800.0", True), ("1800.5", False), ("0", False),
     ("0.0", False), ("1801", False)],
)  # fmt: skip
def test_timeout_bounds_hold_on_both_sides(
    worktree: Path,
    capsys: pytest.CaptureFixture[str],
    clean_environment: pytest.MonkeyPatch,
    value: str,
    accepted: bool,
) -> None:
    """0 < seconds <= 1800: 1800 is accepted, 1800.5 and 0 exit 2, as flag and as variable."""
    by_flag = run_main(capsys, "--root", str(worktree), "tools", "--command-timeout", value)
    clean_environment.setenv(COMMAND_TIMEOUT_VARIABLE, value)
    by_variable = run_main(capsys, "--root", str(worktree), "tools")
    for code, out, err in (by_flag, by_variable):
        if accepted:
            assert (0, auto_warning()) == (code, err)
            assert float(value) == maximum_of(out, "shell", "timeout_seconds")
        else:
            assert (2, "", 1) == (code, out, err.count("\n"))
            assert "command_timeout must be within 0 < seconds <= 1800" in err


def test_the_longest_value_text_is_accepted_and_one_more_character_is_not() -> None:
    """A numeric text of MAXIMUM_VALUE_LENGTH characters parses; one character more does not."""
    longest = "1".rjust(MAXIMUM_VALUE_LENGTH, "0")
    assert (
        1
        == parsed(["--root", ANY_ROOT, "tools", "--max-read-bytes", longest]).config.max_read_bytes
    )
    with pytest.raises(SettingsError, match="whole number of bytes"):
        parsed(["--root", ANY_ROOT, "tools", "--max-read-bytes", "0" + longest])


def test_at_most_the_bound_of_names_may_be_added() -> None:
    """MAXIMUM_ALLOWED_NAMES names are accepted, one more is refused (flags and variable)."""
    many = [f"N{i}" for i in range(MAXIMUM_ALLOWED_NAMES)]
    argv = ["--root", ANY_ROOT, "serve"]
    for name in many:
        argv += ["--allow-env", name]
    accepted = parsed(argv).config.environment_allowlist
    assert set(many) <= set(accepted)
    with pytest.raises(SettingsError, match=f"at most {MAXIMUM_ALLOWED_NAMES} variables"):
        parsed([*argv, "--allow-env", "ONE_MORE"])
    with pytest.raises(SettingsError, match=f"at most {MAXIMUM_ALLOWED_NAMES} variables"):
        parsed(["--root", ANY_ROOT, "serve"], {ALLOW_ENV_VARIABLE: ",".join([*many, "ONE_MORE"])})


def test_a_name_of_the_bound_length_is_accepted_and_a_longer_one_is_not() -> None:
    """A name of MAXIMUM_NAME_LENGTH characters is accepted; one more character is refused."""
    longest = "A" * MAXIMUM_NAME_LENGTH
    assert (
        longest
        in parsed(
            ["--root", ANY_ROOT, "serve", "--allow-env", longest]
        ).config.environment_allowlist
    )
    with pytest.raises(SettingsError, match="environment variable names"):
        parsed(["--root", ANY_ROOT, "serve", "--allow-env", longest + "A"])


# --- bad values: one line, exit 2, never the value --------------------------------------------

BAD_VALUES = [
    ["--command-timeout", "abc"],
    ["--command-timeout", "nan"],
    ["--command-timeout", "inf"],
    ["--command-timeout", "-5"],
    ["--command-timeout", "1e3"],
    ["--command-timeout", ""],
    ["--max-read-bytes", "1.5"],
    ["--max-write-bytes", "-1"],
    ["--max-output-bytes", "0x10"],
    ["--max-read-bytes", "1_000"],
    ["--allow-env", "A=B"],
    ["--allow-env", ""],
    ["--allow-env", "1ABC"],
    ["--allow-env", "WITH SPACE"],
    ["--allow-env", "DASH-NAME"],
    ["--sandbox", "strict"],
    ["--sandbox", ""],
    ["--sandbox", "of f"],
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad", BAD_VALUES)
def test_a_bad_flag_value_is_one_line_and_exit_2(
    worktree: Path,
    capsys: pytest.CaptureFixture[str],
    clean_environment: pytest.MonkeyPatch,
    bad: list[str],
    command: str,
) -> None:
    """Each bad value prints one line naming the flag (not the value) and exits 2, no output."""
    code, out, err = run_main(
        capsys, "--root", str(worktree), command, *bad, *command_tail(command)
    )
    assert (2, "", 1) == (code, out, err.count("\n"))
    assert err.startswith(f"spice-coding: {bad[0]}")
    assert "Traceback" not in err
    if bad[1].strip():
        assert bad[1] not in err.removeprefix(f"spice-coding: {bad[0]}")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (COMMAND_TIMEOUT_VARIABLE, "soon"),
        (COMMAND_TIMEOUT_VARIABLE, "0"),
        (MAX_READ_BYTES_VARIABLE, "big"),
        (MAX_WRITE_BYTES_VARIABLE, "524289"),
        (MAX_OUTPUT_BYTES_VARIABLE, "0"),
        (ALLOW_ENV_VARIABLE, "GOOD,BAD=1"),
        (ALLOW_ENV_VARIABLE, "A,,B"),
        (SANDBOX_VARIABLE, "none"),
        (ALLOW_NETWORK_VARIABLE, "maybe"),
    ],
)
def test_a_bad_variable_is_one_line_naming_it_and_exit_2(
    worktree: Path,
    capsys: pytest.CaptureFixture[str],
    clean_environment: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    """A bad SPICE_AGENT_* value names the variable in one line and exits 2."""
    clean_environment.setenv(variable, value)
    code, out, err = run_main(capsys, "--root", str(worktree), "serve")
    assert (2, "", 1) == (code, out, err.count("\n"))
    assert err.startswith(f"spice-coding: {variable}")


@settings(max_examples=80, deadline=None)
@given(
    flag=st.sampled_from(
        ["--command-timeout", "--max-read-bytes", "--max-write-bytes", "--max-output-bytes",
         "--allow-env", "--sandbox"]
    ),
    value=st.text(max_size=40).filter(lambda t: not t.startswith("-") and "\0" not in t),
)  # fmt: skip
def test_any_value_is_a_setting_or_a_settings_error(flag: str, value: str) -> None:
    """Whatever the text, resolving gives Settings or SettingsError with one short line."""
    try:
        actual = parsed(["--root", ANY_ROOT, "serve", flag, value])
    except SettingsError as error:
        message = str(error)
        assert message.startswith(flag)
        assert "\n" not in message
        assert len(message) <= 200
    else:
        assert isinstance(actual, Settings)


def test_a_bad_root_is_the_settings_one_line_error() -> None:
    """A root that cannot be a path is a SettingsError with the fixed root text."""
    with pytest.raises(SettingsError, match=r"^the worktree root is not a usable path$"):
        resolve_settings(Flags(root="a\0b"), {})


def test_settings_refuse_what_is_not_a_setting() -> None:
    """Settings itself checks its Config, its mode and its flag's type."""
    config = Config(ANY_ROOT)
    with pytest.raises(TypeError):
        Settings(ANY_ROOT)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sandbox mode"):
        Settings(config, "strict")
    with pytest.raises(TypeError):
        Settings(config, "off", 1)  # type: ignore[arg-type]


# --- the settings reach the tools for real ---------------------------------------------------


def test_flags_reach_the_tool_definitions(
    worktree: Path, capsys: pytest.CaptureFixture[str], clean_environment: pytest.MonkeyPatch
) -> None:
    """``tools`` shows what ``serve`` would serve: the read page and timeout bounds follow flags."""
    code, out, _ = run_main(
        capsys, "--root", str(worktree), "tools", "--max-read-bytes", "4096",
        "--command-timeout", "7",
    )  # fmt: skip
    assert 0 == code
    assert 4096 == maximum_of(out, "read", "limit")
    assert 7.0 == maximum_of(out, "shell", "timeout_seconds")


def test_an_allowed_name_reaches_the_child_and_others_do_not(
    worktree: Path, capsys: pytest.CaptureFixture[str], clean_environment: pytest.MonkeyPatch
) -> None:
    """``call --allow-env NAME``: the child sees NAME; without the flag it does not."""
    clean_environment.setenv("SPICE_TEST_SECRET_HOME", "kept")
    argv = [
        PYTHON,
        "-c",
        (
            "import os, sys; value = os.environ.get('SPICE_TEST_SECRET_HOME'); "
            "sys.stdout.buffer.write(f'{value}\\n'.encode())"
        ),
    ]
    shell = json.dumps({"argv": argv})
    allowed = run_main(
        capsys, "--root", str(worktree), "call", "--allow-env", "SPICE_TEST_SECRET_HOME",
        "shell", shell,
    )  # fmt: skip
    refused = run_main(capsys, "--root", str(worktree), "call", "shell", shell)
    assert (0, "kept\n") == (allowed[0], json.loads(allowed[1])["stdout"])
    assert (0, "None\n") == (refused[0], json.loads(refused[1])["stdout"])


def test_the_output_bound_reaches_the_shell(
    worktree: Path, capsys: pytest.CaptureFixture[str], clean_environment: pytest.MonkeyPatch
) -> None:
    """--max-output-bytes 16 keeps 16 bytes of a 100-byte output and says how many it left out."""
    shell = json.dumps(
        {"argv": [PYTHON, "-c", "import sys; sys.stdout.buffer.write(b'x' * 99 + b'\\n')"]}
    )
    code, out, _ = run_main(
        capsys, "--root", str(worktree), "call", "--max-output-bytes", "16", "shell", shell
    )
    content = json.loads(out)
    assert (0, 16, 84) == (code, len(content["stdout"]), content["stdout_omitted_bytes"])


def test_the_write_bound_reaches_replace(
    worktree: Path, capsys: pytest.CaptureFixture[str], clean_environment: pytest.MonkeyPatch
) -> None:
    """Under --max-write-bytes 4, a 4-byte create succeeds and a 5-byte one is refused."""
    root = str(worktree)
    at_bound = json.dumps({"path": "four.txt", "content": "abcd", "create": True})
    over = json.dumps({"path": "five.txt", "content": "abcde", "create": True})
    accepted = run_main(
        capsys, "--root", root, "call", "--max-write-bytes", "4", "replace", at_bound
    )
    refused = run_main(capsys, "--root", root, "call", "--max-write-bytes", "4", "replace", over)
    assert 0 == accepted[0]
    assert 1 == refused[0]
    assert not (worktree / "five.txt").exists()


def test_the_environment_reaches_the_tools_through_a_real_process(worktree: Path) -> None:
    """The installed script reads SPICE_AGENT_COMMAND_TIMEOUT; a flag after ``call`` beats it."""
    env = {COMMAND_TIMEOUT_VARIABLE: "3"}
    from_environment = script("--root", str(worktree), "tools", env=env)
    slow = json.dumps({"argv": ["sleep", "30"], "timeout_seconds": 3})
    beaten = script(
        "--root", str(worktree), "call", "--command-timeout", "0.5", "shell", slow, env=env
    )
    assert 3.0 == maximum_of(from_environment.stdout.decode(), "shell", "timeout_seconds")
    assert (1, "invalid_arguments") == (beaten.returncode, json.loads(beaten.stdout)["code"])


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--allow-env", "BAD=NAME"],
        ["--max-read-bytes", "524289", "serve"],
        ["call", "--command-timeout", "1800.5", "shell", '{"argv":["true"]}'],
        ["tools", "--sandbox", "maybe"],
    ],
)
def test_a_real_process_answers_a_bad_value_with_one_line_and_exit_2(
    worktree: Path, argv: list[str]
) -> None:
    """The console script: exit 2, one line on stderr, nothing on stdout, no traceback."""
    done = script("--root", str(worktree), *argv)
    assert (2, b"", 1) == (done.returncode, done.stdout, done.stderr.count(b"\n"))
    assert done.stderr.startswith(b"spice-coding: ")


def test_a_bad_variable_stops_a_real_server_before_it_serves(worktree: Path) -> None:
    """``serve`` with a bad SPICE_AGENT_SANDBOX exits 2 at once, without the MCP warning."""
    done = script("--root", str(worktree), "serve", env={SANDBOX_VARIABLE: "bogus"})
    expected = b"spice-coding: SPICE_AGENT_SANDBOX must be one of auto, workspace, off\n"
    assert (2, expected) == (done.returncode, done.stderr)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(timeout=st.integers(1, 1800), after=st.booleans())
def test_any_timeout_in_bounds_reaches_the_shell_schema(
    worktree: Path, capsys: pytest.CaptureFixture[str], timeout: int, after: bool
) -> None:
    """Through ``main``, any whole timeout in bounds becomes the shell's maximum, either side."""
    option = ["--command-timeout", str(timeout)]
    argv = ["tools", *option] if after else [*option, "tools"]
    code, out, _ = run_main(capsys, "--root", str(worktree), *argv)
    assert (0, float(timeout)) == (code, maximum_of(out, "shell", "timeout_seconds"))


@settings(max_examples=100, deadline=None)
@given(
    flag=st.sampled_from([flag for flag, _, _ in BYTES_FLAGS]),
    value=st.integers(-10, 10**7) | st.integers(524_280, 524_300),
    by_variable=st.booleans(),
)
def test_a_byte_bound_is_accepted_exactly_within_1_to_524288(
    flag: str, value: int, by_variable: bool
) -> None:
    """Any whole number, by flag or by variable: accepted iff 1 <= N <= 524288."""
    variable, field = {f: (v, n) for f, v, n in BYTES_FLAGS}[flag]
    text = str(value)
    argv = ["--root", ANY_ROOT, "serve"] + ([] if by_variable else [flag, text])
    environ = {variable: text} if by_variable else {}
    if 1 <= value <= 524_288:
        assert value == getattr(parsed(argv, environ).config, field)
    else:
        with pytest.raises(SettingsError, match=variable if by_variable else flag):
            parsed(argv, environ)


@settings(max_examples=100, deadline=None)
@given(
    whole=st.integers(0, 4000) | st.integers(1799, 1801),
    fraction=st.sampled_from(["", ".0", ".5", ".001", ".999"]),
    after=st.booleans(),
)
def test_a_timeout_is_accepted_exactly_within_0_to_1800(
    whole: int, fraction: str, after: bool
) -> None:
    """Any decimal text: accepted iff 0 < seconds <= 1800, before or after the command word."""
    text = f"{whole}{fraction}"
    option = ["--command-timeout", text]
    argv = ["--root", ANY_ROOT, *(["call", *option] if after else [*option, "call"]), "read", "{}"]
    seconds = float(text)
    if 0 < seconds <= 1800:
        assert seconds == parsed(argv).config.command_timeout
    else:
        with pytest.raises(SettingsError, match="--command-timeout"):
            parsed(argv)
