"""``spice-coding cache clean`` in process (contract 11.1): the worktree's private cache is
removed whole (a tree its commands made hard to remove included), a missing one is said,
and a user without a home or one whose cache cannot be removed whole gets exit 1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spice.agent.coding._cli import main
from spice.agent.coding._posix import _facts, _tmpdir

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
    assert (0, {"removed": str(cache), "cache": str(cache)}) == (code, json.loads(out))
    assert not cache.exists()
    assert other.is_dir()  # only this worktree's cache
    code, out, _ = clean(root, capsys)
    assert (0, None) == (code, json.loads(out)["removed"])


def test_without_a_home_there_is_no_cache_to_clean(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_facts, "cache_directory", lambda _root, _environ: None)
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
