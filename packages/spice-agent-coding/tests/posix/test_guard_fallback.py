"""The join's guard where there is no stage (13.1): it reads every git directory's files
first whatever else the worktree holds, at any depth, and never lists a put-back that
failed. Real files, the real ``Guard`` (its ``begin`` and ``end`` as a call's start and
join), and the real ``git`` run outside afterwards; a marker file is written only by the
program a call would plant. R6-1, R6-3, R6-6, R6-9 and R6-12 of
``sandbox-attacks-round5.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding._posix import _scan
from spice.agent.coding._posix._guard import Guard
from spice.agent.coding._settings._protection import policy_of
from spice.agent.tools.coding import ProtectedPaths

GIT: Final = shutil.which("git")
BOUND: Final = 60.0
"""Hang guard for one git or helper run (never a timing assertion)."""
UNPRIVILEGED: Final = 65534

pytestmark = pytest.mark.skipif(sys.platform == "win32" or GIT is None, reason="POSIX with git")


def git(cwd: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The user's git, outside."""
    assert GIT is not None
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CEILING_DIRECTORIES": str(cwd.parent),
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.invalid",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.invalid",
    }
    return subprocess.run(
        [GIT, *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


def _repository(root: Path) -> Path:
    root.mkdir(parents=True)
    assert git(root, "init", "-q").returncode == 0
    return root


def _plant_commondir(root: Path, marker: Path) -> None:
    """R6-1 (a): a copy of ``.git`` in ``objects/pack/.e`` whose config runs a program,
    and ``.git/commondir`` naming it."""
    plant = root / ".git" / "objects" / "pack" / ".e"
    plant.mkdir()
    shutil.copytree(root / ".git" / "refs", plant / "refs")
    shutil.copy(root / ".git" / "HEAD", plant / "HEAD")
    (plant / "objects").symlink_to("../..")
    (plant / "config").write_text(f"[core]\n\tfsmonitor = touch {marker}; false\n")
    (root / ".git" / "commondir").write_text(str(plant))


def _guard(root: Path) -> Guard:
    return Guard([str(root)], ProtectedPaths.default())


def test_a_flood_in_a_new_claude_leaves_no_commondir(tmp_path: Path) -> None:
    """R6-1 (a), real bounds: 4,100 files in a new ``.claude/`` (past
    ``SNAPSHOT_ENTRIES``) and a ``.git/commondir``: the join removes the commondir and
    ``git status`` runs nothing; ``.git/config`` and hooks are not listed as put back."""
    root = _repository(tmp_path / "r")
    marker = tmp_path / "marker"
    guard = _guard(root)
    guard.begin()
    flood = root / ".claude" / "x"
    flood.mkdir(parents=True)
    for index in range(_scan.SNAPSHOT_ENTRIES + 4):
        (flood / str(index)).touch()
    _plant_commondir(root, marker)
    restored = guard.end()
    assert not (root / ".git" / "commondir").exists()
    assert str(root / ".git" / "commondir") in restored
    assert str(root / ".git" / "config") not in restored
    assert not any("/.git/hooks" in path for path in restored)
    git(root, "status")
    assert not marker.exists()


def test_a_root_flood_past_the_entry_bound_still_puts_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R6-1 (b, d), the entry bound made small: the root's listing is cut before ``.git``
    and ``.mcp.json`` may be seen; the commondir is removed and ``.mcp.json`` gets its
    bytes back all the same. A call that only floods puts nothing back and says so."""
    root = _repository(tmp_path / "r")
    (root / ".mcp.json").write_text("{}\n")
    marker = tmp_path / "marker"
    monkeypatch.setattr(_scan, "SCAN_ENTRIES", 8)
    guard = _guard(root)
    guard.begin()
    for index in range(40):
        (root / f"f{index:02}").touch()
    assert guard.end() == ()  # only flooded: nothing put back, nothing claimed
    guard.begin()
    (root / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "sh"}}}\n')
    _plant_commondir(root, marker)
    restored = guard.end()
    assert (root / ".mcp.json").read_text() == "{}\n"
    assert not (root / ".git" / "commondir").exists()
    assert set(restored) == {str(root / ".mcp.json"), str(root / ".git" / "commondir")}
    git(root, "status")
    assert not marker.exists()


def test_a_flooded_git_directory_still_has_its_files_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boundary: entries in ``.git`` itself past ``GIT_ENTRIES`` never hide its config,
    commondir or hooks (they are looked up by name)."""
    root = _repository(tmp_path / "r")
    shutil.rmtree(root / ".git" / "hooks")  # no samples: the baseline fits the bound
    (root / ".git" / "hooks").mkdir()
    monkeypatch.setattr(_scan, "GIT_ENTRIES", 4)
    guard = _guard(root)
    guard.begin()
    for index in range(20):
        (root / ".git" / f"junk{index:02}").touch()
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch m\n")
    (root / ".git" / "commondir").write_text("/elsewhere\n")
    restored = guard.end()
    assert not hook.exists()
    assert not (root / ".git" / "commondir").exists()
    assert str(root / ".git" / "commondir") in restored


def test_a_repository_five_levels_down_runs_nothing(tmp_path: Path) -> None:
    """R6-9: ``git init`` at ``d1/d2/d3/d4/d5`` with a planted ``core.fsmonitor`` and a
    ``.mcp.json`` beside it: the config keeps only what runs nothing, the file goes."""
    root = _repository(tmp_path / "r")
    marker = tmp_path / "marker"
    guard = _guard(root)
    guard.begin()
    deep = root / "d1" / "d2" / "d3" / "d4" / "d5"
    deep.mkdir(parents=True)
    assert git(deep, "init", "-q").returncode == 0
    assert git(deep, "config", "core.fsmonitor", f"touch {marker}; false").returncode == 0
    (deep / ".mcp.json").write_text("{}")
    restored = guard.end()
    assert not (deep / ".mcp.json").exists()
    assert str(deep / ".git" / "config") in restored
    git(deep, "status")
    assert not marker.exists()


@pytest.mark.parametrize(
    "path",
    [
        "opencode.json",
        ".zed/settings.json",
        ".husky/pre-commit",
        "lefthook.yml",
        ".githooks/pre-commit",
        "sub/mise.toml",
        ".pre-commit-config.yaml",
    ],
)
def test_more_settings_are_put_back(tmp_path: Path, path: str) -> None:
    """R6-6, R6-12: what 13.1 adds is put back at the join (a new one removed)."""
    root = _repository(tmp_path / "r")
    guard = _guard(root)
    guard.begin()
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("planted\n")
    restored = guard.end()
    assert not target.exists()
    assert restored


_UNPRIVILEGED_CALL: Final = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from spice.agent.coding._posix._guard import Guard
    from spice.agent.tools.coding import ProtectedPaths
    root, marker = sys.argv[-2], sys.argv[-1]
    guard = Guard([root], ProtectedPaths.default())
    guard.begin()
    # The call: R6-3's plant, then chmod 555 on the directories that hold it.
    git = os.path.join(root, ".git")
    with open(os.path.join(git, "commondir"), "w") as file:
        file.write("/elsewhere\\n")
    nested = os.path.join(root, "nested")
    subprocess.run(["git", "init", "-q", nested], check=True)
    hook = os.path.join(nested, ".git", "hooks", "pre-commit")
    with open(hook, "w") as file:
        file.write("#!/bin/sh\\ntouch " + marker + "\\n")
    os.chmod(hook, 0o755)
    os.chmod(os.path.join(nested, ".git", "hooks"), 0o555)
    os.chmod(git, 0o555)
    os.chmod(os.path.join(root, ".claude"), 0o000)
    restored = guard.end()
    print(json.dumps({"uid": os.geteuid(), "restored": list(restored)}))
    """
)


def _as_unprivileged(arguments: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return arguments
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    return [
        setpriv,
        f"--reuid={UNPRIVILEGED}",
        f"--regid={UNPRIVILEGED}",
        "--clear-groups",
        "--inh-caps=-all",
        *arguments,
    ]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory the unprivileged user can reach (pytest's own is root's, 0700)."""
    made = Path(tempfile.mkdtemp(prefix="spice-guard-"))
    try:
        yield made
    finally:
        for path in [made, *made.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o700)
        shutil.rmtree(made, ignore_errors=True)


def test_a_chmod_does_not_defeat_a_non_root_servers_put_back(
    scratch: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R6-3, as uid 65534 (a server that is not root, owning its worktree): a
    ``commondir`` in a ``chmod 555`` ``.git``, a hook in a ``chmod 555`` ``hooks/``, and a
    ``chmod 000`` ``.claude``: all put back, listed only when done; ``git`` afterwards
    runs nothing. The directories keep the modes the call gave them."""
    root = _repository(scratch / "r")
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text("{}")
    marker = scratch / "marker"
    if os.geteuid() == 0:
        for path in [scratch, *scratch.rglob("*")]:
            os.lchown(path, UNPRIVILEGED, UNPRIVILEGED)
    environment = {
        **os.environ,
        "HOME": str(scratch),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if os.geteuid() != 0:
        # Already unprivileged (``make test-unprivileged``): the call runs in this process.
        monkeypatch.setattr(sys, "argv", [sys.argv[0], str(root), str(marker)])
        monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        exec(_UNPRIVILEGED_CALL, {"__name__": "call"})  # noqa: S102 - the test's own code
        output = capsys.readouterr().out
    else:
        probe = subprocess.run(
            _as_unprivileged([sys.executable, "-c", "import spice.agent.coding._posix._guard"]),
            env=environment,
            capture_output=True,
            timeout=BOUND,
            check=False,
        )
        if probe.returncode != 0:
            pytest.skip(
                f"uid {UNPRIVILEGED} cannot import this checkout's sources with this "
                "interpreter (a clone beneath a directory only root may enter); "
                "make test-unprivileged runs the suite as that user"
            )
        command = _as_unprivileged(
            [sys.executable, "-c", _UNPRIVILEGED_CALL, str(root), str(marker)]
        )
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=BOUND, check=False
        )
        assert done.returncode == 0, done.stderr
        output = done.stdout
    answer = json.loads(output)
    assert answer["uid"] != 0
    assert not (root / ".git" / "commondir").exists()
    assert not (root / "nested" / ".git" / "hooks" / "pre-commit").exists()
    assert (root / ".claude" / "settings.json").read_text() == "{}"
    assert str(root / ".git" / "commondir") in answer["restored"]
    assert str(root / "nested" / ".git" / "hooks") in answer["restored"]
    git(root, "status")
    git(root / "nested", "commit", "-q", "--allow-empty", "-m", "x")
    assert not marker.exists()


@pytest.mark.parametrize("state", ["rebase-merge/git-rebase-todo", "sequencer/todo"])
def test_a_planted_rebase_with_exec_is_put_back(tmp_path: Path, state: str) -> None:
    """R6-7: a call plants an in-progress rebase (or cherry-pick) whose todo runs
    ``exec``: the state directory goes; ``git status`` and ``git rebase --continue``
    outside run nothing. A todo without a command stays (the call's own rebase)."""
    root = _repository(tmp_path / "r")
    (root / "a").write_text("a\n")
    assert git(root, "add", "a").returncode == 0
    assert git(root, "commit", "-qm", "a").returncode == 0
    head = git(root, "rev-parse", "HEAD").stdout.strip()
    marker = tmp_path / "marker"
    guard = _guard(root)
    guard.begin()
    directory = root / ".git" / state.partition("/")[0]
    directory.mkdir()
    for name, text in (("head-name", "refs/heads/master"), ("onto", head), ("orig-head", head)):
        (directory / name).write_text(text + "\n")
    (directory / "interactive").touch()
    (root / ".git" / state).write_text(f"exec touch {marker}\n")
    restored = guard.end()
    assert not directory.exists()
    assert str(directory) in restored
    git(root, "status")
    git(root, "rebase", "--continue")
    git(root, "cherry-pick", "--continue")
    assert not marker.exists()
    guard.begin()
    directory.mkdir()
    (root / ".git" / state).write_text(f"pick {head} a\n")
    assert guard.end() == ()
    assert (root / ".git" / state).exists()


def test_the_repositorys_own_hooks_path_is_put_back(tmp_path: Path) -> None:
    """R6-6 on the fallback: ``core.hooksPath = tools/hooks`` (a name no list knows); the
    application's policy protects it, so the join puts back an edited hook and ``git
    commit`` outside runs only the user's. Without the setting nothing is added."""
    root = _repository(tmp_path / "r")
    hook = root / "tools" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    assert policy_of([], str(root)).extra == ()
    assert git(root, "config", "core.hooksPath", "tools/hooks").returncode == 0
    policy = policy_of([], str(root))
    assert policy.protects(str(root), "tools/hooks/pre-commit")
    assert not policy.protects(str(root), "tools/other")
    marker = tmp_path / "marker"
    guard = Guard([str(root)], policy)
    guard.begin()
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    assert str(hook) in guard.end()
    (root / "a").write_text("a\n")
    git(root, "add", "a")
    assert git(root, "commit", "-qm", "a").returncode == 0
    assert not marker.exists()
