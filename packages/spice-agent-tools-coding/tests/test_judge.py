"""``judge`` (13.1) on real files: the worktree as it would be after a list of changes is a
real directory (``TreeAfter``), the worktree before is ``place``, and the real ``git``
says what it would open and run once the kept changes are applied."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.tools.coding import ProtectedPaths, _gitdir, _judge
from spice.agent.tools.coding._changes import Change, Judged, Kind, sorted_changes
from spice.agent.tools.coding._gitconfig import MAXIMUM_HOOKS_PATHS, filtered, hooks_paths
from spice.agent.tools.coding._gitdir import runs_a_command
from spice.agent.tools.coding._judge import judge

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("git") is None, reason="POSIX with git"
)

GIT_TIMEOUT = 60.0
POLICY = ProtectedPaths.default()


class TreeAfter:
    """The worktree after the changes: a real directory, read without following links."""

    def __init__(self, top: Path) -> None:
        self.top = top

    def kind(self, path: str) -> Kind | None:
        try:
            mode = os.lstat(self.top / path).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode):
            return "directory"
        return "symlink" if stat.S_ISLNK(mode) else "file"

    def read(self, path: str, limit: int) -> bytes | None:
        target = self.top / path
        if target.is_symlink() or not target.is_file():
            return None
        with target.open("rb") as file:
            return file.read(limit)


def _git(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CEILING_DIRECTORIES": str(cwd.parent),
    }
    return subprocess.run(
        ["git", *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
        check=False,
    )


def _added(top: Path, below: str = "") -> list[Change]:
    """Every entry beneath ``top/below`` as an added change (a new tree)."""
    changes: list[Change] = []
    start = top / below if below else top
    for directory, names, files in os.walk(start):
        for name in names + files:
            path = Path(directory, name)
            relative = path.relative_to(top).as_posix()
            kind: Kind = (
                "symlink" if path.is_symlink() else "directory" if path.is_dir() else "file"
            )
            changes.append(Change(relative, "added", kind, None))
    if below:
        changes.append(Change(below, "added", "directory", None))
    return list(sorted_changes(changes))


def _apply(top: Path, judged: Judged, changes: list[Change]) -> None:
    """Leave out of ``top`` what was refused, and write what was rewritten."""
    for path in sorted(judged.refused, key=len, reverse=True):
        target = top / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    for path, data in judged.rewritten.items():
        (top / path).write_bytes(data)
    assert {c.path for c in judged.kept} | set(judged.refused) == {c.path for c in changes}


def _monitor(tmp_path: Path, marker: Path) -> str:
    program = tmp_path / "monitor.sh"
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    program.chmod(0o755)
    return str(program)


def test_git_init_keeps_a_repository_that_runs_nothing(tmp_path: Path) -> None:
    """Positive: a new repository keeps HEAD, objects, refs and the allow-listed config;
    its hooks and info are refused, and git still opens it."""
    place = tmp_path / "w"
    place.mkdir()
    marker = tmp_path / "marker"
    assert _git("init", "-q", "new", cwd=place).returncode == 0
    config = place / "new" / ".git" / "config"
    _git("config", "-f", str(config), "core.fsmonitor", _monitor(tmp_path, marker), cwd=place)
    _git("config", "-f", str(config), "remote.origin.url", "https://example.org/r", cwd=place)
    changes = _added(place, "new")
    judged = judge(POLICY, str(place), changes, TreeAfter(place))
    assert "new/.git" not in judged.refused
    assert "new/.git/HEAD" not in judged.refused
    assert "new/.git/hooks" in judged.refused
    assert "new/.git/info" in judged.refused
    assert "fsmonitor" not in judged.rewritten["new/.git/config"].decode()
    assert b"https://example.org/r" in judged.rewritten["new/.git/config"]
    _apply(place, judged, changes)
    assert _git("status", cwd=place / "new").returncode == 0
    assert not marker.exists()


def test_a_policy_that_protects_nothing_keeps_everything(tmp_path: Path) -> None:
    place = tmp_path / "w"
    place.mkdir()
    assert _git("init", "-q", "new", cwd=place).returncode == 0
    changes = _added(place, "new")
    judged = judge(ProtectedPaths(), str(place), changes, TreeAfter(place))
    assert judged.kept == tuple(changes)
    assert judged.refused == ()


@pytest.mark.parametrize("directory", ["src", "", "a/b/c/d/e/f"])
def test_a_git_directory_under_any_name_runs_nothing(tmp_path: Path, directory: str) -> None:
    """R6-2, R6-9: HEAD, objects, refs and a config with fsmonitor and worktree, at any
    depth and at the root: the config is rewritten; git opens it and runs nothing."""
    place = tmp_path / "w"
    top = place / directory if directory else place
    (top / "objects" / "info").mkdir(parents=True)
    (top / "refs" / "heads").mkdir(parents=True)
    (top / "HEAD").write_text("ref: refs/heads/master\n")
    marker = tmp_path / "marker"
    worktree = "." if not directory else "/".join([".."] * (directory.count("/") + 1))
    (top / "config").write_text(
        f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {worktree}\n"
        f"\tfsmonitor = {_monitor(tmp_path, marker)}\n"
    )
    (top / "hooks").mkdir()
    (top / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    changes = [c for c in _added(place) if c.path.startswith(directory)]
    judged = judge(POLICY, str(place), changes, TreeAfter(place))
    prefix = f"{directory}/" if directory else ""
    assert f"{prefix}config" in judged.rewritten
    assert f"{prefix}hooks/post-checkout" in judged.refused
    _apply(place, judged, changes)
    _git("status", cwd=top)
    assert not marker.exists()


def test_a_copied_git_directory_with_a_link_to_objects(tmp_path: Path) -> None:
    """R6-1's plant: ``.git/objects/pack/.e`` with refs, HEAD, config and ``objects ->
    ../..``, and ``.git/commondir`` naming it: the commondir is refused, the config
    rewritten, and the user's ``git status`` runs nothing."""
    place = tmp_path / "w"
    place.mkdir()
    assert _git("init", "-q", cwd=place).returncode == 0
    marker = tmp_path / "marker"
    plant = place / ".git" / "objects" / "pack" / ".e"
    plant.mkdir()
    shutil.copytree(place / ".git" / "refs", plant / "refs")
    shutil.copy(place / ".git" / "HEAD", plant / "HEAD")
    (plant / "objects").symlink_to("../..")
    (plant / "config").write_text(f"[core]\n\tfsmonitor = {_monitor(tmp_path, marker)}\n")
    (place / ".git" / "commondir").write_text(str(plant))
    changes = [
        *_added(place, ".git/objects/pack/.e"),
        Change(".git/commondir", "added", "file", None),
    ]
    judged = judge(POLICY, str(place), list(sorted_changes(changes)), TreeAfter(place))
    assert ".git/commondir" in judged.refused
    assert ".git/objects/pack/.e/config" in judged.rewritten
    _apply(place, judged, changes)
    _git("status", cwd=place)
    assert not marker.exists()


def test_an_unchanged_config_that_runs_code_stops_the_making(tmp_path: Path) -> None:
    """A directory already holding a config (the user's file, not a change) that runs
    code: the changes that would make it a repository are refused, whatever the order."""
    place = tmp_path / "w"
    (place / "src").mkdir(parents=True)
    marker = tmp_path / "marker"
    (place / "src" / "config").write_text(f"[core]\n\tfsmonitor = {_monitor(tmp_path, marker)}\n")
    (place / "src" / "objects").mkdir()
    (place / "src" / "refs").mkdir()
    (place / "src" / "HEAD").write_text("ref: refs/heads/master\n")
    changes = [
        Change("src/HEAD", "added", "file", None),
        Change("src/objects", "added", "directory", None),
        Change("src/refs", "added", "directory", None),
    ]
    judged = judge(POLICY, str(place), changes, TreeAfter(place))
    assert set(judged.refused) == {"src/HEAD", "src/objects", "src/refs"}
    # Negative: with a config that runs nothing, the repository is kept.
    (place / "src" / "config").write_text("[core]\n\tbare = true\n")
    assert judge(POLICY, str(place), changes, TreeAfter(place)).refused == ()


def test_a_config_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """Failure: a config the judge cannot read as a regular file is never kept."""
    place = tmp_path / "w"
    (place / "g" / "objects").mkdir(parents=True)
    (place / "g" / "refs").mkdir()
    (place / "g" / "HEAD").write_text("ref: refs/heads/master\n")
    (place / "elsewhere").write_text("[core]\n\tfsmonitor = x\n")
    (place / "g" / "config").symlink_to("../elsewhere")
    changes = _added(place, "g")
    judged = judge(POLICY, str(place), changes, TreeAfter(place))
    assert "g/config" in judged.refused
    assert "g/HEAD" not in judged.refused  # a refused new config leaves none


def test_a_deleted_directory_holding_protected_paths_is_refused(tmp_path: Path) -> None:
    place = tmp_path / "w"
    (place / "d" / "e" / ".vscode").mkdir(parents=True)
    (place / "plain" / "x").mkdir(parents=True)
    after = tmp_path / "after"
    after.mkdir()
    changes = [
        Change("d", "deleted", None, "directory"),
        Change("plain", "deleted", None, "directory"),
    ]
    judged = judge(POLICY, str(place), changes, TreeAfter(after))
    assert judged.refused == ("d",)
    assert [c.path for c in judged.kept] == ["plain"]


def test_the_deletion_bound_on_both_sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Boundary: a deleted directory of ``DELETION_ENTRIES`` entries is looked through; one
    more and the deletion is refused (what lies beneath could not all be told)."""
    monkeypatch.setattr(_judge, "DELETION_ENTRIES", 8)
    place = tmp_path / "w"
    (place / "d").mkdir(parents=True)
    for index in range(8):
        (place / "d" / f"f{index}").write_text("")
    change = Change("d", "deleted", None, "directory")
    after = TreeAfter(tmp_path / "none")
    assert judge(POLICY, str(place), [change], after).refused == ()
    (place / "d" / "f8").write_text("")
    assert judge(POLICY, str(place), [change], after).refused == ("d",)


def test_everything_beneath_a_refused_directory_is_refused(tmp_path: Path) -> None:
    place = tmp_path / "w"
    (place / ".zed" / "sub").mkdir(parents=True)
    (place / ".zed" / "sub" / "settings.json").write_text("{}")
    changes = _added(place, ".zed")
    judged = judge(POLICY, str(place), changes, TreeAfter(place))
    assert set(judged.refused) == {c.path for c in changes}


def test_a_todo_list_bound_on_both_sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Boundary: a todo list of ``TODO_BYTES`` without exec is kept; one byte more and its
    state directory is refused (it is not read)."""
    monkeypatch.setattr(_gitdir, "TODO_BYTES", 16)
    monkeypatch.setattr(_judge, "TODO_BYTES", 16)
    place = tmp_path / "w"
    place.mkdir()
    assert _git("init", "-q", cwd=place).returncode == 0
    todo = place / ".git" / "sequencer" / "todo"
    todo.parent.mkdir()
    changes = [
        Change(".git/sequencer", "added", "directory", None),
        Change(".git/sequencer/todo", "added", "file", None),
    ]
    todo.write_bytes(b"pick 0123456789\n")
    assert judge(POLICY, str(place), changes, TreeAfter(place)).refused == ()
    todo.write_bytes(b"pick 01234567890\n")
    assert set(judge(POLICY, str(place), changes, TreeAfter(place)).refused) == {
        ".git/sequencer",
        ".git/sequencer/todo",
    }


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["pick", "p", "reword", "fixup", "#", "exec", "x", "X", "EXEC"]),
            st.text(alphabet=" \tabc/'", max_size=12),
            st.sampled_from(["", " ", "\t"]),
        ),
        max_size=6,
    )
)
def test_runs_a_command_finds_every_spelling(lines: list[tuple[str, str, str]]) -> None:
    text = "\n".join(f"{indent}{word} {rest}" for word, rest, indent in lines)
    expected = any(word.casefold() in {"x", "exec"} for word, _, _ in lines)
    assert runs_a_command(text.encode()) is expected


@given(st.lists(st.text(alphabet="abc./_-", min_size=1, max_size=8), max_size=20))
def test_hooks_paths_reads_each_value_up_to_its_bound(values: list[str]) -> None:
    text = "".join(
        f"[core]\n\thooksPath = {value}\n[other]\n\thooksPath = no\n" for value in values
    )
    assert hooks_paths(text) == tuple(values[:MAXIMUM_HOOKS_PATHS])


def test_the_allow_list_drops_what_runs(tmp_path: Path) -> None:
    """The moved filter still keeps only what runs nothing (``_gitconfig.filtered``)."""
    text = "[core]\n\tbare = false\n\tfsmonitor = x\n\thooksPath = y\n[include]\n\tpath = z\n"
    assert filtered(text) == "[core]\n\tbare = false\n"


def test_each_directory_is_asked_once_whether_git_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 changes in 10 directories: whether git opens a directory is decided once per
    directory (and the root), not once per change (issue 44: the judge's per-path cost)."""
    place = tmp_path / "w"
    paths = [f"pkg{index % 10}/m{index}.py" for index in range(1000)]
    for path in paths:
        (place / path).parent.mkdir(parents=True, exist_ok=True)
        (place / path).write_text("x\n")
    asked: list[str] = []
    real = _gitdir.git_directory

    def counted(kind: object, directory: str) -> bool:
        asked.append(directory)
        return real(kind, directory)  # type: ignore[arg-type]

    monkeypatch.setattr(_judge, "git_directory", counted)
    changes = [Change(path, "modified", "file", "file", 0o644) for path in paths]
    judged = judge(POLICY, str(place), changes, TreeAfter(place))
    assert len(judged.kept) == len(paths)
    assert sorted(asked) == sorted({"", *(f"pkg{index}" for index in range(10))})
