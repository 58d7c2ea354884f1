"""The settings file (contract 12.2): parsed strictly, placed safely, read before each call.

Round 4: every flag was fixed at start, so each change meant editing the client's
configuration and restarting the agent. Here the rules of a TOML file are checked as
values (``parse_rules``: every refusal names the file, the line and the key), as a start
(exit 2 for a misplaced or invalid file), and on a running launcher (``WatchingLauncher``):
a change applies to the next call, a broken file refuses calls until it is fixed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from procutil import Collect

from spice.agent.coding._platform import platform_launcher
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.coding._settings._file import (
    KEYS,
    MAXIMUM_LIST_ITEMS,
    MAXIMUM_SETTINGS_BYTES,
    SettingsFile,
    SettingsFileError,
    parse_rules,
    placement_problem,
)
from spice.agent.coding._settings._reload import WatchingLauncher, watching
from spice.agent.coding._settings._resolve import Flags, resolve_settings
from spice.agent.coding._settings._values import SettingsError
from spice.agent.process import LaunchError, Spec

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
PYTHON: Final = os.path.realpath(sys.executable)
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
BOUND: Final = 60.0
"""Hang guard for one command (never a timing assertion)."""
ROOT: Final = "/w/root"

FULL: Final = """\
allow_domains = ["python", "pypi.org"]
allow_private_address = true
allow_write = ["/srv/cache"]
deny_read = ["/srv/secret"]
allow_read = ["~/.npmrc"]
allow_env = ["JAVA_HOME"]
unprotect = ["/w/root/.vscode"]
max_processes = 512
max_memory = "2G"

[worktree."/w/root"]
allow_domains = ["npm"]
max_processes = 64

[worktree."/w/other"]
allow_domains = ["go"]
"""


# -- the file as a value ------------------------------------------------------------------


def test_every_key_is_read_and_the_roots_table_adds_to_the_top() -> None:
    rules = parse_rules("/c/s.toml", FULL, ROOT)
    assert ("python", "pypi.org", "npm") == rules.values("allow_domains")
    assert ("/srv/cache",) == rules.values("allow_write")
    assert ("~/.npmrc",) == rules.values("allow_read")
    assert ("/w/root/.vscode",) == rules.values("unprotect")
    assert rules.allow_private_address
    assert (64, "2G") == (rules.max_processes, rules.max_memory)  # the table's wins
    assert "settings file /c/s.toml, line 13: max_processes" == rules.where("max_processes")
    other = parse_rules("/c/s.toml", FULL, "/w/other")
    assert ("python", "pypi.org", "go") == other.values("allow_domains")
    assert 512 == other.max_processes
    assert set(KEYS) == {
        "journal_max_bytes",
        "journal_max_age",
        "allow_domains",
        "allow_private_address",
        "allow_write",
        "deny_read",
        "allow_read",
        "allow_env",
        "unprotect",
        "max_processes",
        "max_memory",
        "ca_files",
    }


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ('allow_domains = ["python"]\nallow_domain = ["npm"]\n', 2, "allow_domain"),
        ('max_processes = "many"\n', 1, "max_processes"),
        ('allow_write = "/srv"\n', 1, "allow_write"),
        ("allow_private_address = 1\n", 1, "allow_private_address"),
        ("max_memory = true\n", 1, "max_memory"),
        ('[worktree."/w/root"]\nallow_env = [1]\n', 2, "allow_env"),
        ('[worktree."/w/root"]\nbogus = 1\n', 2, "bogus"),
    ],
)
def test_an_unknown_key_or_a_wrong_type_names_the_file_the_line_and_the_key(
    text: str, line: int, key: str
) -> None:
    with pytest.raises(SettingsFileError) as refused:
        parse_rules("/c/s.toml", text, ROOT)
    said = str(refused.value)
    assert said.startswith(f"settings file /c/s.toml, line {line}: {key} ")
    assert "many" not in said  # never the value


def test_a_file_that_does_not_parse_names_its_line() -> None:
    with pytest.raises(SettingsFileError, match=r"line 3: does not parse as TOML"):
        parse_rules("/c/s.toml", 'allow_env = ["A"]\n\nallow_write = [\n', ROOT)


def test_a_worktree_table_must_be_named_by_an_absolute_root() -> None:
    with pytest.raises(SettingsFileError, match="absolute root"):
        parse_rules("/c/s.toml", '[worktree."relative"]\nallow_env = []\n', ROOT)
    with pytest.raises(SettingsFileError, match="worktree"):
        parse_rules("/c/s.toml", "worktree = 3\n", ROOT)


def test_a_list_is_bounded_on_both_sides() -> None:
    fits = "allow_env = [" + ", ".join(['"A"'] * MAXIMUM_LIST_ITEMS) + "]\n"
    assert MAXIMUM_LIST_ITEMS == len(parse_rules("/c/s.toml", fits, ROOT).values("allow_env"))
    over = "allow_env = [" + ", ".join(['"A"'] * (MAXIMUM_LIST_ITEMS + 1)) + "]\n"
    with pytest.raises(SettingsFileError, match=f"at most {MAXIMUM_LIST_ITEMS}"):
        parse_rules("/c/s.toml", over, ROOT)


@given(st.text(max_size=200))
def test_any_text_is_rules_or_a_refusal_naming_the_file(text: str) -> None:
    try:
        parse_rules("/c/s.toml", text, ROOT)
    except SettingsFileError as refused:
        said = str(refused)
    else:
        return
    assert said.startswith("settings file /c/s.toml, line ")


# -- where it may lie ---------------------------------------------------------------------


def _file(directory: Path, text: str = 'allow_env = ["A"]\n') -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / "settings.toml"
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


def test_a_file_beneath_the_root_or_a_writable_place_or_writable_by_others_is_refused(
    tmp_path: Path,
) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "config"
    root.mkdir()
    assert placement_problem(str(_file(elsewhere)), (str(root),)) is None
    inside = _file(root / ".spice")
    assert "beneath the worktree" in str(placement_problem(str(inside), (str(root),)))
    writable = tmp_path / "cache"
    assert "beneath" in str(placement_problem(str(_file(writable)), (str(root), str(writable))))
    loose = _file(tmp_path / "loose")
    os.chmod(loose, 0o620)
    assert "group or others" in str(placement_problem(str(loose), (str(root),)))
    open_directory = _file(tmp_path / "open")
    os.chmod(open_directory.parent, 0o777)  # noqa: S103 - the refusal under test
    assert "group or others" in str(placement_problem(str(open_directory), (str(root),)))
    directory = tmp_path / "a-directory"
    directory.mkdir()
    assert "not a regular file" in str(placement_problem(str(directory), (str(root),)))
    assert "cannot be read" in str(placement_problem(str(tmp_path / "absent"), (str(root),)))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the file to another user")
def test_a_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path / "config")
    os.chown(path, 65534, 65534)
    assert "not owned" in str(placement_problem(str(path), ("/w/root",)))


def test_the_start_refuses_a_misplaced_invalid_or_missing_file_with_exit_2(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}

    def start(*flags: str, **variables: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), "--root", str(root), *flags, "tools"],
            capture_output=True,
            text=True,
            env={**env, **variables},
            timeout=BOUND,
            check=False,
        )

    inside = _file(root / ".config")
    done = start("--settings", str(inside))
    assert (2, True) == (done.returncode, "beneath the worktree" in done.stderr)
    broken = _file(tmp_path / "c1", 'allow_env = ["A"]\nallow_everything = true\n')
    done = start("--settings", str(broken))
    assert 2 == done.returncode
    assert f"settings file {broken}, line 2: allow_everything" in done.stderr
    done = start(SPICE_AGENT_SETTINGS=str(tmp_path / "absent.toml"))
    assert (2, True) == (done.returncode, "does not exist" in done.stderr)
    good = _file(tmp_path / "c2", 'allow_domains = ["npm"]\n')
    done = start("--settings", str(good), "--allow-domain", "python")
    assert 0 == done.returncode, done.stderr
    sandbox = json.loads(done.stdout)["sandbox"]
    assert f"allow_domains npm (settings file {good})" in sandbox["rules"]
    assert "allow_domains python (--allow-domain)" in sandbox["rules"]
    assert {"registry.npmjs.org", "pypi.org"} <= set(sandbox["domains"]["allowed"])


def test_flags_add_to_the_file_and_a_bad_value_names_the_file_line_and_key(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    path = _file(tmp_path / "c", 'allow_write = ["relative"]\n')
    with pytest.raises(SettingsError, match=rf"settings file {path}, line 1: allow_write: "):
        resolve_settings(Flags(root=str(root), settings=str(path)), {"HOME": str(tmp_path)})
    path.write_text('allow_domains = ["pythn"]\n')
    with pytest.raises(SettingsError, match=r"line 1: allow_domains: .*did you mean 'python'"):
        resolve_settings(Flags(root=str(root), settings=str(path)), {"HOME": str(tmp_path)})
    path.write_text('allow_env = ["FROM_FILE"]\nmax_processes = 99\n')
    settings = resolve_settings(
        Flags(root=str(root), settings=str(path), allow_env=("FROM_FLAG",), max_processes="7"),
        {"HOME": str(tmp_path)},
    )
    assert {"FROM_FILE", "FROM_FLAG"} <= set(settings.config.environment_allowlist)
    assert 7 == settings.max_processes  # a flag wins over the file for a number


@pytest.mark.parametrize("named_by", ["file", "flag"])
def test_a_link_beneath_a_place_the_other_source_names_is_refused(
    tmp_path: Path, named_by: str
) -> None:
    """R4-5 across the two sources: the file's ``allow_write`` may not name a link inside a
    flag's directory, nor a flag one inside the file's (each would be followed next start)."""
    root, flagged, filed, outside = (tmp_path / n for n in ("root", "flag", "file", "out"))
    for place in (root, flagged, filed, outside):
        place.mkdir()
    holder = flagged if named_by == "file" else filed
    (holder / "sub").symlink_to(outside)
    link = str(holder / "sub")
    in_file, on_flag = (link, str(flagged)) if named_by == "file" else (str(filed), link)
    path = _file(tmp_path / "c", f'allow_write = ["{in_file}"]\n')
    flags = Flags(root=str(root), settings=str(path), allow_write=(on_flag,))
    with pytest.raises(SettingsError, match="symbolic link inside a writable place") as caught:
        resolve_settings(flags, {"HOME": str(tmp_path)})
    assert link in str(caught.value)
    if named_by == "file":
        assert f"settings file {path}, line 1: allow_write" in str(caught.value)
    (holder / "sub").unlink()
    (holder / "sub").mkdir()  # a real directory there: both sources are taken
    settings = resolve_settings(flags, {"HOME": str(tmp_path)})
    assert os.path.realpath(holder / "sub") in settings.allow_write


# -- read again before each call ------------------------------------------------------------


def test_the_file_is_read_again_only_when_its_stat_changes(tmp_path: Path) -> None:
    path = _file(tmp_path / "c")
    watched = SettingsFile(str(path), ROOT, (ROOT,))
    first = watched.current()
    assert first is watched.current()  # unchanged: the same value, not read again
    path.write_text('allow_env = ["A", "B"]\n')
    second = watched.current()
    assert ("A", "B") == second.values("allow_env")
    path.write_text("x" * (MAXIMUM_SETTINGS_BYTES + 1))
    with pytest.raises(SettingsFileError, match=f"larger than {MAXIMUM_SETTINGS_BYTES}"):
        watched.current()
    path.write_text("#" * MAXIMUM_SETTINGS_BYTES)  # exactly at the bound: read
    assert () == watched.current().values("allow_env")
    path.unlink()
    with pytest.raises(SettingsFileError, match="is gone"):
        watched.current()


def test_a_default_file_that_appears_later_is_read(tmp_path: Path) -> None:
    path = tmp_path / "c" / "settings.toml"
    watched = SettingsFile(str(path), ROOT, (ROOT,))
    assert () == watched.current().values("allow_env")
    _file(path.parent, 'allow_env = ["LATE"]\n')
    assert ("LATE",) == watched.current().values("allow_env")


def test_a_default_file_beneath_the_root_is_ignored_and_blocks_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """R6-14: HOME inside the worktree, and a call writes the default settings file there:
    the next start (and a running server's next call) neither uses it nor stops; the start
    warns once it exists. A file named by ``--settings`` there still stops the start."""
    root = tmp_path / "root"
    home = root / "home"
    home.mkdir(parents=True)
    environ = {"HOME": str(home)}
    before = resolve_settings(Flags(root=str(root)), environ)
    assert before.settings_file is None  # not watched: it could appear there later
    planted = _file(home / ".config" / "spice-coding", 'allow_env = ["PLANTED"]\n')
    with caplog.at_level("WARNING"):
        after = resolve_settings(Flags(root=str(root)), environ)
    assert "PLANTED" not in after.config.environment_allowlist
    assert after.settings_file is None
    assert str(planted) in caplog.text
    assert "not used" in caplog.text
    with pytest.raises(SettingsError, match="lies beneath the worktree"):
        resolve_settings(Flags(root=str(root), settings=str(planted)), environ)
    outside = tmp_path / "elsewhere"
    _file(outside / ".config" / "spice-coding", 'allow_env = ["MINE"]\n')
    mine = resolve_settings(Flags(root=str(root)), {"HOME": str(outside)})
    assert "MINE" in mine.config.environment_allowlist


PRINT: Final = (
    "import os, sys\n"
    "print('ENV', os.environ.get('SPICE_TEST_FROM_FILE'))\n"
    "try:\n"
    "    open(sys.argv[1], 'w').close()\n"
    "    print('WROTE')\n"
    "except OSError as error:\n"
    "    print('REFUSED', error.errno)\n"
)


async def _run(launcher: WatchingLauncher, root: Path, target: Path) -> str:
    out, err = Collect(), Collect()
    env = ("PATH=/usr/bin:/bin", f"HOME={root.parent / 'home'}")
    spec = Spec(PYTHON, ("-I", "-c", PRINT, str(target)), str(root), env, b"", out, err)
    process = await launcher.start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return out.data.decode() + err.data.decode()


@pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")
async def test_a_change_applies_to_the_next_call_and_a_broken_file_refuses_calls(
    visible_path: Path,
) -> None:
    """No restart: the running launcher follows the file, both ways, and a broken file
    refuses the call naming the line and the key until it is fixed."""
    root, extra, home = (visible_path / name for name in ("root", "extra", "home"))
    for directory in (root, extra, home):
        directory.mkdir()
    path = _file(visible_path / "config", "")
    environ: Mapping[str, str] = {"HOME": str(home), "SPICE_TEST_FROM_FILE": "given"}
    flags = Flags(root=str(root), sandbox="workspace", settings=str(path))
    settings = resolve_settings(flags, environ)
    launcher = watching(flags, environ, settings, platform_launcher(settings.sandbox_request()))
    assert isinstance(launcher, WatchingLauncher)
    target = extra / "written"
    before = await _run(launcher, root, target)
    assert "REFUSED" in before
    assert "ENV None" in before
    path.write_text(f'allow_write = ["{extra}"]\nallow_env = ["SPICE_TEST_FROM_FILE"]\n')
    after = await _run(launcher, root, target)
    assert "WROTE" in after, after
    assert "ENV given" in after
    assert target.exists()
    assert f"allow_write {extra} (settings file {path})" in launcher.report()["rules"]  # type: ignore[operator]
    target.unlink()
    path.write_text(f'allow_write = ["{extra}"]\nallow_env = "SPICE_TEST_FROM_FILE"\n')
    with pytest.raises(LaunchError) as refused:
        await _run(launcher, root, target)
    assert f"settings file {path}, line 2: allow_env must be" in str(refused.value.reason)
    path.write_text("")  # narrowed again: the next call is held to it
    again = await _run(launcher, root, target)
    assert "REFUSED" in again
    assert "ENV None" in again
    assert not target.exists()
    os.chmod(path, 0o666)  # noqa: S103 - the refusal under test
    with pytest.raises(LaunchError) as loose:
        await _run(launcher, root, target)
    assert "group or others" in str(loose.value.reason)


@pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")
async def test_a_running_stdio_server_follows_its_settings_file_without_a_restart(
    visible_path: Path,
) -> None:
    """The real ``serve`` over stdio, one session: a writable place added to the file is
    writable on the next call; a broken file answers that call with the line and the key;
    fixed, the next call runs."""
    from mcp import Client, StdioServerParameters, stdio_client  # noqa: PLC0415 - the SDK here

    root, extra, home = (visible_path / name for name in ("root", "extra", "home"))
    for directory in (root, extra, home):
        directory.mkdir()
    path = _file(visible_path / "config", "")
    params = StdioServerParameters(
        command=str(SCRIPT),
        args=["serve", "--root", str(root), "--sandbox", "workspace", "--settings", str(path)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"},
        cwd=str(root),
    )
    target = str(extra / "written")
    argv = {"argv": ["/bin/sh", "-c", f"echo x > {target} && echo WROTE"]}
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - /dev/null
        async with asyncio.timeout(BOUND), Client(stdio_client(params, errlog=errlog)) as client:
            before = (await client.call_tool("shell", argv)).structured_content
            path.write_text(f'allow_write = ["{extra}"]\n')
            after = (await client.call_tool("shell", argv)).structured_content
            path.write_text(f'allow_write = ["{extra}"]\nallow_writes = []\n')
            broken = await client.call_tool("shell", argv)
            path.write_text(f'allow_write = ["{extra}"]\n')
            fixed = (await client.call_tool("shell", argv)).structured_content
    assert before is not None
    assert 0 != before["exit_code"]
    assert after is not None
    assert "WROTE" in after["stdout"], after
    said = json.dumps(broken.structured_content) + str(broken.content)
    assert f"settings file {path}, line 2: allow_writes" in said
    assert fixed is not None
    assert "WROTE" in fixed["stdout"]
