"""The git-directory rule on every platform: ``replace`` on Windows asks the same judge.

Round 6 found that Windows' ``replace`` never asked the judge (four creates could make a
repository there too) and that ``hooks_directories`` needs opening directories by
descriptor, which Windows' Python cannot: its ``dir_fd`` raised ``NotImplementedError``
on a file given as the root (an internal error before the refusal). These tests run on
POSIX and under Wine alike (no git is run: what is asserted is what lands on disk); the
path route of ``hooks_directories`` is also forced on POSIX.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from replace_helpers import create_arguments, run

from spice.agent.tools.coding import Config, ProtectedPaths, _gitdir
from spice.agent.tools.coding._gitconfig import MAXIMUM_CONFIG_BYTES
from spice.agent.tools.coding._protected import PROTECTED
from spice.agent.tools.coding._replace import ReplaceTool

FSMONITOR = "[core]\n\trepositoryformatversion = 0\n\tworktree = ..\n\tfsmonitor = evil\n"
FOLDS_CASE = os.path.normcase("A") == "a"
"""Windows: the file system folds case, so ``CONFIG`` is the ``config`` git reads."""
SAFE = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"


def _tool(root: Path, policy: ProtectedPaths | None = None) -> ReplaceTool:
    return ReplaceTool(Config(str(root), protected_paths=policy or ProtectedPaths.default()))


def _creates(directory: str, config_name: str, config: str) -> list[tuple[str, str]]:
    return [
        (f"{directory}/HEAD", "ref: refs/heads/master\n"),
        (f"{directory}/objects/info/packs", ""),
        (f"{directory}/refs/heads/.keep", ""),
        (f"{directory}/{config_name}", config),
    ]


@pytest.mark.parametrize("config_name", ["config", "CONFIG", "Config"])
async def test_the_create_that_completes_a_repository_that_runs_code_is_refused(
    tmp_path: Path, config_name: str
) -> None:
    """R6-2 on every platform: the config with ``core.fsmonitor`` is refused and never
    written; on a case-insensitive file system (Windows) its spelling does not matter, on
    a case-sensitive one ``CONFIG`` is another file, which git never reads."""
    root = tmp_path / "r"
    (root / "src").mkdir(parents=True)
    tool = _tool(root)
    answers = [
        (await run(tool, create_arguments(path, text)))[1]
        for path, text in _creates("src", config_name, FSMONITOR)
    ]
    git_reads_it = config_name == "config" or FOLDS_CASE
    assert [answer["ok"] for answer in answers] == [True, True, True, not git_reads_it]
    names = sorted(entry.name for entry in (root / "src").iterdir())
    if git_reads_it:
        assert (answers[3]["code"], answers[3]["message"]) == ("path_unavailable", PROTECTED)
        assert names == ["HEAD", "objects", "refs"]
    else:
        assert names == sorted(["HEAD", "objects", "refs", config_name])


async def test_a_config_that_runs_nothing_completes_a_repository(tmp_path: Path) -> None:
    """Positive: the allow-list keeps a safe config whole, so it is written."""
    root = tmp_path / "r"
    root.mkdir()
    tool = _tool(root)
    for path, text in _creates("b.git", "config", SAFE):
        _, content = await run(tool, create_arguments(path, text))
        assert content["ok"] is True, content
    assert (root / "b.git" / "config").read_text() == SAFE


async def test_without_the_policy_the_same_creates_plant_it(tmp_path: Path) -> None:
    """The seed's behaviour (no policy): nothing is judged, all four are written."""
    root = tmp_path / "r"
    root.mkdir()
    tool = _tool(root, ProtectedPaths())
    for path, text in _creates("src", "config", FSMONITOR):
        _, content = await run(tool, create_arguments(path, text))
        assert content["ok"] is True, content
    assert (root / "src" / "config").read_text() == FSMONITOR


async def test_a_hook_in_a_repository_not_named_git_is_refused(tmp_path: Path) -> None:
    """A directory git would open (HEAD, objects, refs) keeps no hook, whatever its name."""
    root = tmp_path / "r"
    for name in ("objects", "refs"):
        (root / "cache.git" / name).mkdir(parents=True)
    (root / "cache.git" / "HEAD").write_text("ref: refs/heads/master\n")
    _, content = await run(_tool(root), create_arguments("cache.git/hooks/pre-commit", "x"))
    assert (content["code"], content["message"]) == ("path_unavailable", PROTECTED)
    assert not (root / "cache.git" / "hooks").exists()


def _repository(place: Path, config: str) -> None:
    (place / ".git").mkdir(parents=True)
    (place / ".git" / "config").write_bytes(config.encode())  # no newline translation


@pytest.fixture(params=["native", "by path"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each route of ``hooks_directories``: the platform's own, and the path route
    (the only one on Windows) forced here by hiding ``dir_fd`` support."""
    if request.param == "by path":
        monkeypatch.setattr(os, "supports_dir_fd", set())
    return str(request.param)


def test_the_hooks_path_is_read_by_either_route(tmp_path: Path, route: str) -> None:
    _repository(tmp_path, "[core]\n\thooksPath = .githooks\n")
    assert _gitdir.hooks_directories(str(tmp_path)) == (".githooks",), route


def test_a_file_as_the_place_names_nothing(tmp_path: Path, route: str) -> None:
    """The Windows regression: a file given as the root is no repository (no error)."""
    (tmp_path / "f").write_text("x")
    assert _gitdir.hooks_directories(str(tmp_path / "f")) == (), route


def test_a_missing_place_or_config_names_nothing(tmp_path: Path, route: str) -> None:
    assert _gitdir.hooks_directories(str(tmp_path / "absent")) == (), route
    (tmp_path / ".git").mkdir()
    assert _gitdir.hooks_directories(str(tmp_path)) == (), route


def test_the_config_bound_on_both_sides(tmp_path: Path, route: str) -> None:
    line = "[core]\n\thooksPath = .githooks\n"
    at = line + "#" * (MAXIMUM_CONFIG_BYTES - len(line) - 1) + "\n"
    assert len(at) == MAXIMUM_CONFIG_BYTES
    _repository(tmp_path, at)
    assert _gitdir.hooks_directories(str(tmp_path)) == (".githooks",), route
    (tmp_path / ".git" / "config").write_bytes((at + "#").encode())
    assert _gitdir.hooks_directories(str(tmp_path)) == (), route


@pytest.mark.skipif(os.name == "nt", reason="Wine makes no symbolic links")
def test_a_linked_git_directory_or_config_is_not_followed(tmp_path: Path, route: str) -> None:
    """Negative: a ``.git`` or ``config`` that is a link names nothing (never followed)."""
    elsewhere = tmp_path / "elsewhere"
    _repository(elsewhere, "[core]\n\thooksPath = .githooks\n")
    place = tmp_path / "place"
    place.mkdir()
    (place / ".git").symlink_to(elsewhere / ".git")
    assert _gitdir.hooks_directories(str(place)) == (), route
    (place / ".git").unlink()
    (place / ".git").mkdir()
    (place / ".git" / "config").symlink_to(elsewhere / ".git" / "config")
    assert _gitdir.hooks_directories(str(place)) == (), route


def test_a_config_replaced_between_the_look_and_the_open_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failure: the path route reads only the file it looked at (same device and index)."""
    _repository(tmp_path, "[core]\n\thooksPath = .githooks\n")
    other = tmp_path / "other"
    other.write_text("x")
    monkeypatch.setattr(os, "supports_dir_fd", set())
    real_lstat = os.lstat
    config = str(tmp_path / ".git" / "config")

    def lstat(path: str) -> os.stat_result:
        return real_lstat(str(other) if os.fspath(path) == config else path)

    monkeypatch.setattr(os, "lstat", lstat)
    assert _gitdir.hooks_directories(str(tmp_path)) == ()


_NAMES = st.sampled_from(["config", "HEAD", "hooks", "objects", "src", "Readme", "x.txt"])


@given(st.lists(st.tuples(_NAMES, st.booleans()), min_size=1, max_size=6))
def test_git_spelling_folds_only_git_names(parts: list[tuple[str, bool]]) -> None:
    """Each component git reads is spelled as git does, whatever its case; others stay."""
    path = "/".join(name.upper() if upper else name for name, upper in parts)
    spelled = _gitdir.git_spelling(path).split("/")
    for (name, upper), got in zip(parts, spelled, strict=True):
        if name in {"config", "HEAD", "hooks", "objects"}:
            assert got == name
        else:
            assert got == (name.upper() if upper else name)
