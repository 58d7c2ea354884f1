"""``replace`` obeys the git-directory rule and 13.1's names (R6-2, R6-6, R6-7, R6-12).

Real files and the real ``git``, run outside as the user after the calls; a marker file
is written only by the program a call would plant.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from replace_helpers import create_arguments, digest, run

from spice.agent.tools.coding import Config, ProtectedPaths
from spice.agent.tools.coding._protected import PROTECTED
from spice.agent.tools.coding._replace import ReplaceTool

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("git") is None, reason="POSIX with git"
)

GIT_TIMEOUT = 60.0


def _git(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CEILING_DIRECTORIES": str(cwd.parent),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
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


def _tool(root: Path, policy: ProtectedPaths | None = None) -> ReplaceTool:
    return ReplaceTool(Config(str(root), protected_paths=policy or ProtectedPaths.default()))


def _monitor(tmp_path: Path, marker: Path) -> Path:
    program = tmp_path / "monitor.sh"
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    program.chmod(0o755)
    return program


def _four_creates(directory: str, program: Path) -> list[tuple[str, str]]:
    """R6-2: what makes ``directory`` a repository whose config runs ``program``."""
    prefix = f"{directory}/" if directory else ""
    worktree = ".." if directory else "."
    return [
        (f"{prefix}HEAD", "ref: refs/heads/master\n"),
        (f"{prefix}objects/info/packs", ""),
        (f"{prefix}refs/heads/.keep", ""),
        (
            f"{prefix}config",
            (
                "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
                f"\tworktree = {worktree}\n\tfsmonitor = {program}\n"
            ),
        ),
    ]


ORDERS = list(itertools.permutations(range(4)))


@pytest.mark.parametrize("order", [ORDERS[0], ORDERS[5], ORDERS[13], ORDERS[23]])
@pytest.mark.parametrize("directory", ["src", ""])
async def test_four_creates_never_make_a_repository_that_runs_code(
    tmp_path: Path, directory: str, order: tuple[int, ...]
) -> None:
    """R6-2: in any order, the create that would complete the repository (or its config)
    is refused with the protected-path code; ``git status`` there runs nothing. Without
    the policy (the seed) the same creates plant it."""
    for policy, planted in ((ProtectedPaths(), True), (ProtectedPaths.default(), False)):
        root = tmp_path / f"root-{planted}"
        (root / "src").mkdir(parents=True)
        (root / "src" / "m.py").write_text("x = 1\n")
        marker = tmp_path / f"marker-{planted}"
        program = _monitor(tmp_path, marker)
        creates = _four_creates(directory, program)
        refused: list[str] = []
        for index in order:
            path, text = creates[index]
            _, content = await run(_tool(root, policy), create_arguments(path, text))
            if content["ok"] is not True:
                assert content["code"] == "path_unavailable"
                assert content["message"] == PROTECTED
                assert not (root / path).exists()
                refused.append(path)
        where = root / directory if directory else root
        _git("status", cwd=where)
        assert marker.exists() is planted
        assert (refused == []) is planted


async def test_a_new_git_directorys_safe_config_is_written(tmp_path: Path) -> None:
    """Positive: a config that runs nothing is written into a new git directory."""
    root = tmp_path / "r"
    root.mkdir()
    safe = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
    tool = _tool(root)
    for path, text in (
        ("b.git/HEAD", "ref: refs/heads/master\n"),
        ("b.git/objects/info/packs", ""),
        ("b.git/refs/heads/.keep", ""),
        ("b.git/config", safe),
    ):
        _, content = await run(tool, create_arguments(path, text))
        assert content["ok"] is True, content
    assert (root / "b.git" / "config").read_text() == safe
    assert _git("rev-parse", "--is-bare-repository", cwd=root / "b.git").stdout == "true\n"


async def test_a_hook_in_a_bare_repository_is_refused(tmp_path: Path) -> None:
    """N9 (R6-2): a ``pre-receive`` hook in a bare repository not named ``.git``."""
    root = tmp_path / "r"
    root.mkdir()
    assert _git("init", "-q", "--bare", "build/cache.git", cwd=root).returncode == 0
    for path in ("build/cache.git/hooks/pre-receive", "build/cache.git/commondir"):
        _, content = await run(_tool(root), create_arguments(path, "#!/bin/sh\n"))
        assert content["code"] == "path_unavailable"
        assert not (root / path).exists()


@pytest.mark.parametrize("spelling", ["exec touch {m}", "x touch {m}", "  X touch {m}"])
async def test_a_rebase_todo_with_exec_is_refused(tmp_path: Path, spelling: str) -> None:
    """R6-7: a planted rebase whose todo runs a command; a todo without one is written."""
    root = tmp_path / "r"
    root.mkdir()
    assert _git("init", "-q", cwd=root).returncode == 0
    (root / "a").write_text("a\n")
    assert _git("add", "a", cwd=root).returncode == 0
    assert _git("commit", "-qm", "a", cwd=root).returncode == 0
    marker = tmp_path / "marker"
    tool = _tool(root)
    for todo in (".git/rebase-merge/git-rebase-todo", ".git/sequencer/todo"):
        text = spelling.format(m=marker) + "\n"
        _, content = await run(tool, create_arguments(todo, text))
        assert content["code"] == "path_unavailable"
        assert not (root / todo).exists()
    _, content = await run(tool, create_arguments(".git/sequencer/todo", "pick 1234 a\n"))
    assert content["ok"] is True
    _git("status", cwd=root)
    assert not marker.exists()


@pytest.mark.parametrize("hooks", [".githooks", "tools/hooks", ".husky/_"])
async def test_the_repositorys_own_hooks_path_is_protected(tmp_path: Path, hooks: str) -> None:
    """R6-6: the directory ``core.hooksPath`` names (and husky's parent) is protected;
    ``git commit`` afterwards runs only the user's hook."""
    root = tmp_path / "r"
    root.mkdir()
    assert _git("init", "-q", cwd=root).returncode == 0
    hook = root / hooks / "pre-commit"
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    assert _git("config", "core.hooksPath", hooks, cwd=root).returncode == 0
    marker = tmp_path / "marker"
    before = hook.read_bytes()
    tool = _tool(root)
    arguments = {
        "path": f"{hooks}/pre-commit",
        "content": f"#!/bin/sh\ntouch '{marker}'\nexit 0\n",
        "expected_sha256": digest(before),
    }
    _, content = await run(tool, arguments)
    assert content["code"] == "path_unavailable"
    assert hook.read_bytes() == before
    if hooks.endswith("/_"):
        parent = hooks.rpartition("/")[0]
        _, content = await run(tool, create_arguments(f"{parent}/pre-commit", "touch m\n"))
        assert content["code"] == "path_unavailable"
    (root / "a").write_text("a\n")
    _git("add", "a", cwd=root)
    assert _git("commit", "-qm", "a", cwd=root).returncode == 0
    assert not marker.exists()
    # Given back, the same edit is written.
    policy = ProtectedPaths.default(unprotect=[str(root / hooks)])
    _, content = await run(_tool(root, policy), arguments)
    assert content["ok"] is True


@pytest.mark.parametrize(
    "path",
    [
        "opencode.json",
        ".opencode/agent.md",
        ".zed/settings.json",
        ".continue/config.yaml",
        ".amazonq/mcp.json",
        ".kiro/settings/mcp.json",
        ".roo/mcp.json",
        ".windsurf/mcp.json",
        ".aider.conf.yml",
        ".devcontainer/devcontainer.json",
        ".nvim.lua",
        ".exrc",
        "mise.toml",
        "sub/.mise.toml",
        ".pre-commit-config.yaml",
        "lefthook.yml",
        ".husky/pre-commit",
    ],
)
async def test_more_settings_are_protected(tmp_path: Path, path: str) -> None:
    """R6-12: 13.1's names (at any depth) are refused, nothing made."""
    root = tmp_path / "r"
    root.mkdir()
    _, content = await run(_tool(root), create_arguments(path, "planted\n"))
    assert content["code"] == "path_unavailable"
    assert list(root.iterdir()) == []


async def test_ordinary_names_beside_them_are_written(tmp_path: Path) -> None:
    """Negative: names near the protected ones are not protected."""
    root = tmp_path / "r"
    root.mkdir()
    for path in ("opencode.json.md", "zed/settings.json", "mise.toml.d/x", "AGENTS.md"):
        _, content = await run(_tool(root), create_arguments(path, "x\n"))
        assert content["ok"] is True, path
