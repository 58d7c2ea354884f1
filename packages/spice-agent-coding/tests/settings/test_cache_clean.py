"""``spice-coding cache`` in process (contracts 11.1 and 12.2): the worktree's private cache
is removed whole (a tree its commands made hard to remove included), a missing one is said,
and a user without a home or one whose cache cannot be removed whole gets exit 2; ``cache
list`` and ``cache clean --all`` see every worktree's cache and never remove one a running
server holds (a real second process holds it); ``serve`` removes the caches unused for
``--cache-max-age`` days at start."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cache_support import HOLDER_SECONDS, holding

from spice.agent.coding._cli import main
from spice.agent.coding._posix import _caches, _facts
from spice.agent.coding._posix._supervisor import _tmpdir
from spice.agent.coding._settings._cache_age import (
    CACHE_MAX_AGE_VARIABLE,
    CacheAgeError,
    resolve_cache_max_age,
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the POSIX sandbox's caches")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tree


def clean(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["--root", str(root), "cache", "clean"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cache_is_removed_whole_and_a_second_clean_says_none(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = Path(str(_facts.cache_directory(str(root), os.environ)))
    locked = cache / "npm" / "locked"
    locked.mkdir(parents=True)
    (locked / "file").write_text("x")
    locked.chmod(0o500)  # what a command may leave: a directory its owner cannot write
    other = cache.parent / "another-worktree"
    other.mkdir()
    code, out, _ = clean(root, capsys)
    answer = json.loads(out)
    assert (0, str(cache), str(cache)) == (code, answer["removed"], answer["cache"])
    assert not cache.exists()
    assert other.is_dir()  # only this worktree's cache
    code, out, _ = clean(root, capsys)
    assert (0, None) == (code, json.loads(out)["removed"])


def test_without_a_home_there_is_no_cache_to_clean(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_caches, "cache_directory", lambda _root, _environ: None)
    code, out, err = clean(root, capsys)
    assert (2, "") == (code, out)
    assert "no home or cache directory" in err


def test_a_cache_that_cannot_be_removed_whole_is_an_error_naming_it(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam a failing file system fails through (``remove_tree`` says not whole)."""
    cache = Path(str(_facts.cache_directory(str(root), os.environ)))
    cache.mkdir(parents=True)
    monkeypatch.setattr(_tmpdir, "remove_tree", lambda _path: False)
    code, out, err = clean(root, capsys)
    assert (2, "") == (code, out)
    assert f"the cache directory {cache} could not be removed whole" in err
    assert cache.is_dir()


# -- every worktree's cache: list, clean --all, the age bound at serve's start (12.2) --------


def recorded_cache(root: Path, size: int = 4) -> Path:
    """``root``'s cache as a server's start leaves it: made, recorded, with ``size`` bytes."""
    root.mkdir(parents=True, exist_ok=True)
    cache = Path(str(_facts.cache_directory(str(root), os.environ)))
    (cache / "uv").mkdir(parents=True)
    (cache / "uv" / "wheel").write_bytes(b"w" * size)
    Path(_caches.lock_path(str(cache))).write_text(json.dumps({"root": str(root)}))
    return cache


def make_old(cache: Path, days: float) -> None:
    when = time.time() - days * _caches.SECONDS_PER_DAY
    os.utime(_caches.lock_path(str(cache)), (when, when))


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cache_list_shows_each_worktree_its_size_last_use_and_whether_in_use(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = recorded_cache(root, size=10)
    other_root = tmp_path / "other"
    other = recorded_cache(other_root, size=3)
    make_old(other, 2)
    with holding(mine, root):
        code, out, err = run_cli(["cache", "list"], capsys)
    assert (0, "") == (code, err)
    listed = json.loads(out)
    assert listed["truncated"] is False
    rows = [(c["cache"], c["root"], c["size_bytes"], c["in_use"]) for c in listed["caches"]]
    assert [(str(mine), str(root), 10, True), (str(other), str(other_root), 3, False)] == rows
    assert {"cache", "root", "size_bytes", "size_complete", "last_use", "in_use"} == set(
        listed["caches"][0]
    )


def test_cache_list_with_no_cache_and_list_with_all_refused(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["cache", "list"], capsys)
    listed = json.loads(out)
    assert (0, [], False, "") == (code, listed["caches"], listed["truncated"], err)
    code, out, err = run_cli(["cache", "list", "--all"], capsys)
    assert (2, "") == (code, out)
    assert "--all goes with cache clean" in err


def test_cache_clean_all_removes_every_cache_no_server_holds(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = recorded_cache(root)
    free = [recorded_cache(tmp_path / name) for name in ("a", "b")]
    with holding(held, root):
        code, out, err = run_cli(["cache", "clean", "--all"], capsys)
        assert (0, "") == (code, err)
        outcome = json.loads(out)
        assert sorted(map(str, free)) == sorted(outcome["removed"])
        assert ([str(held)], []) == (outcome["in_use"], outcome["failed"])
        assert (held / "uv" / "wheel").is_file()
        assert not any(path.exists() for path in free)
        code, out, err = run_cli(["--root", str(root), "cache", "clean"], capsys)
        assert (2, "") == (code, out)
        assert f"the cache directory {held} is in use by a running server" in err
    assert (held / "uv" / "wheel").is_file()


def test_cache_clean_all_that_cannot_remove_one_says_so(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam a failing file system fails through: exit 2, the JSON still printed."""
    cache = recorded_cache(root)
    monkeypatch.setattr(_tmpdir, "remove_tree", lambda _path: False)
    code, out, err = run_cli(["cache", "clean", "--all"], capsys)
    assert 2 == code
    assert [str(cache)] == json.loads(out)["failed"]
    assert "1 cache directories could not be removed whole" in err


@pytest.mark.parametrize(
    ("flag", "variable", "expected"),
    [
        (None, None, 30),
        (None, "", 30),
        ("0", None, 0),
        ("36500", None, 36500),
        (" 7 ", "9", 7),
        (None, "9", 9),
    ],
)
def test_cache_max_age_from_the_flag_else_the_variable_else_30(
    flag: str | None, variable: str | None, expected: int
) -> None:
    options = argparse.Namespace(cache_max_age=flag)
    environ = {} if variable is None else {CACHE_MAX_AGE_VARIABLE: variable}
    assert expected == resolve_cache_max_age(options, environ)


@pytest.mark.parametrize(
    ("flag", "variable", "message"),
    [
        ("36501", None, "--cache-max-age must be between 0 and 36500"),
        ("-1", None, "--cache-max-age must be a whole number of days"),
        ("3.5", None, "--cache-max-age must be a whole number of days"),
        ("9" * 17, None, "--cache-max-age must be a whole number of days"),
        (None, "thirty", f"{CACHE_MAX_AGE_VARIABLE} must be a whole number of days"),
    ],
)
def test_a_bad_cache_max_age_names_its_origin_never_its_value(
    flag: str | None, variable: str | None, message: str
) -> None:
    options = argparse.Namespace(cache_max_age=flag)
    environ = {} if variable is None else {CACHE_MAX_AGE_VARIABLE: variable}
    with pytest.raises(CacheAgeError) as raised:
        resolve_cache_max_age(options, environ)
    assert message == str(raised.value)


def test_serve_refuses_a_bad_cache_max_age_in_one_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["--root", str(root), "serve", "--cache-max-age", "x"], capsys)
    assert (2, "") == (code, out)
    assert "spice-coding: --cache-max-age must be a whole number of days\n" == err


@pytest.mark.slow
def test_serve_removes_the_caches_unused_too_long_at_start_but_not_one_in_use(
    root: Path, tmp_path: Path
) -> None:
    """A real ``serve`` (stdin closed at once): a cache unused 31 days goes, one 29 days old
    stays, one as old but held by a running server stays, and its own stays."""
    stale = recorded_cache(tmp_path / "stale")
    fresh = recorded_cache(tmp_path / "fresh")
    held = recorded_cache(tmp_path / "held")
    for cache, days in ((stale, 31), (fresh, 29), (held, 400)):
        make_old(cache, days)
    server = Path(sys.executable).parent / "spice-coding"
    with holding(held, tmp_path / "held"):
        done = subprocess.run(
            [str(server), "--root", str(root), "serve"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=HOLDER_SECONDS,
            check=False,
        )
    assert 0 == done.returncode, done.stderr
    assert not stale.exists()
    assert fresh.is_dir()
    assert held.is_dir()
    assert "removed 1 private caches unused for more than 30 days" in done.stderr
    again = subprocess.run(
        [str(server), "--root", str(root), "serve", "--cache-max-age", "0"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=HOLDER_SECONDS,
        check=False,
    )
    assert 0 == again.returncode, again.stderr
    assert held.is_dir()
    assert "removed" not in again.stderr


def test_all_before_the_command_word_is_refused(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded_cache(root)
    code, out, err = run_cli(["--all", "cache", "clean"], capsys)
    assert (2, "", "spice-coding: --all goes after cache clean\n") == (code, out, err)
    assert Path(str(_facts.cache_directory(str(root), os.environ))).is_dir()


def test_a_command_run_in_process_lets_go_of_its_cache_when_it_ends(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tools`` holds the worktree's cache while it runs; once ``main`` returns (as in the
    tests, in process) the cache is free, so a clean in the same process removes it."""
    code, _, _ = run_cli(["--root", str(root), "--sandbox", "auto", "tools"], capsys)
    assert 0 == code
    cache = Path(str(_facts.cache_directory(str(root), os.environ)))
    if not cache.is_dir():
        pytest.skip("no contained commands here: no cache was made")
    assert not _caches._HELD
    code, out, _ = run_cli(["--root", str(root), "cache", "clean"], capsys)
    assert (0, str(cache)) == (code, json.loads(out)["removed"])
