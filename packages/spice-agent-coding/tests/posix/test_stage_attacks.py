"""Round 5's attacks on the protected paths (R6-2, R6-6, R6-7, R6-9, R6-12) against a
staged worktree (contract 13.1): each plant is made by a contained command, the user's
real git runs outside afterwards, and a marker that only planted code writes must not
exist. The commit judges the kernel's list of changes, so nothing depends on a scan.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _bwrap, _facts
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Spec
from spice.agent.tools.coding._sandbox_fields import stage_fields

BOUND: Final = 60.0
"""Hang guard for one command or git run (never a timing assertion)."""
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
GIT: Final = shutil.which("git")

pytestmark = pytest.mark.skipif(
    not NAMESPACES.made or landlock_abi() < 1 or GIT is None,
    reason="staging needs namespaces, Landlock and git",
)


def _environment(home: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.invalid",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def git(cwd: Path, home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The user's git, outside every sandbox."""
    assert GIT is not None
    return subprocess.run(
        [GIT, *arguments],
        cwd=cwd,
        env=_environment(home),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


@pytest.fixture
def repository(root: Path, home: Path) -> Path:
    """A repository with one commit at the root."""
    assert git(root, home, "init", "-q", "-b", "main").returncode == 0
    (root / "a.txt").write_text("one\n")
    assert git(root, home, "add", "a.txt").returncode == 0
    assert git(root, home, "commit", "-q", "-m", "first").returncode == 0
    return root


async def _staged(root: Path, home: Path, script: str) -> tuple[str, dict[str, object]]:
    policy: Containment = dataclasses.replace(
        resolve_containment("workspace"), namespaces=NAMESPACES
    )
    facts = _facts.start_facts(
        str(root), (), bwrap=NAMESPACES.bwrap, environ={"HOME": str(home)}, cache=True
    )
    if facts.stages is None:
        pytest.skip(f"no stage here: {facts.unstaged}")
    chosen = PosixLauncher.build(policy, str(root), facts=facts)
    out, err = Collect(), Collect()
    environment = tuple(f"{k}={v}" for k, v in _environment(home).items())
    spec = Spec("/bin/sh", ("-c", script), str(root), environment, b"", out, err)
    process = await chosen.start(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    return out.data.decode() + err.data.decode(), stage_fields(process)


def _refused(fields: dict[str, object]) -> list[str]:
    refused = fields.get("protected_refused", [])
    assert isinstance(refused, list)
    return [str(path) for path in refused]


async def test_r6_2_a_git_directory_not_named_git_runs_nothing(
    root: Path, home: Path, visible_path: Path
) -> None:
    """Four creates make ``src/`` a repository whose config runs ``core.fsmonitor``; the
    user's ``git status`` in ``src`` afterwards runs nothing."""
    marker = visible_path / "MARKER"
    script = (
        "mkdir -p src/objects src/refs && echo 'ref: refs/heads/main' > src/HEAD && "
        f"printf '[core]\\n\\tworktree = ..\\n\\tfsmonitor = touch {marker}; false\\n' "
        "> src/config && echo DONE"
    )
    text, _ = await _staged(root, home, script)
    assert "DONE" in text
    config = root / "src" / "config"
    if config.exists():  # kept by the allow-list: nothing of it runs
        kept = config.read_text().lower()
        assert "fsmonitor" not in kept
        assert "worktree" not in kept
    git(root / "src", home, "status")
    assert not marker.exists()


async def test_r6_2_the_root_made_a_repository_runs_nothing(
    root: Path, home: Path, visible_path: Path
) -> None:
    """At a root without ``.git``, the same four creates at the root itself."""
    marker = visible_path / "MARKER"
    script = (
        "mkdir -p objects refs && echo 'ref: refs/heads/main' > HEAD && "
        f"printf '[core]\\n\\tfsmonitor = touch {marker}; false\\n' > config && echo DONE"
    )
    text, _ = await _staged(root, home, script)
    assert "DONE" in text
    git(root, home, "status")
    assert not marker.exists()


async def test_r6_6_the_repositorys_own_hooks_path_is_protected(
    repository: Path, home: Path, visible_path: Path
) -> None:
    """``core.hooksPath = .githooks``: a hook edited there never runs at the next commit."""
    marker = visible_path / "MARKER"
    hooks = repository / ".githooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "pre-commit").chmod(0o755)
    assert git(repository, home, "config", "core.hooksPath", ".githooks").returncode == 0
    script = f"printf '#!/bin/sh\\ntouch {marker}\\n' > .githooks/pre-commit; echo DONE"
    text, fields = await _staged(repository, home, script)
    assert "DONE" in text
    assert ".githooks/pre-commit" in _refused(fields)
    (repository / "b.txt").write_text("two\n")
    git(repository, home, "add", "b.txt")
    assert git(repository, home, "commit", "-q", "-m", "second").returncode == 0
    assert not marker.exists()


async def test_r6_7_a_planted_rebase_todo_with_exec_never_runs(
    repository: Path, home: Path, visible_path: Path
) -> None:
    marker = visible_path / "MARKER"
    script = (
        "mkdir -p .git/rebase-merge && "
        f"printf 'exec touch {marker}\\n' > .git/rebase-merge/git-rebase-todo && "
        "git rev-parse HEAD > .git/rebase-merge/orig-head && "
        "echo refs/heads/main > .git/rebase-merge/head-name && "
        "git rev-parse HEAD > .git/rebase-merge/onto && echo DONE"
    )
    text, fields = await _staged(repository, home, script)
    assert "DONE" in text
    assert not (repository / ".git" / "rebase-merge").exists()
    assert _refused(fields)
    git(repository, home, "rebase", "--continue")
    assert not marker.exists()


@pytest.mark.parametrize(
    "path",
    [
        "opencode.json",
        ".zed/settings.json",
        ".roo/x",
        ".amazonq/x",
        ".kiro/x",
        ".exrc",
        "mise.toml",
    ],
)
async def test_r6_12_more_agent_and_editor_settings_are_refused(
    root: Path, home: Path, path: str
) -> None:
    script = f"mkdir -p $(dirname {path}) && echo planted > {path}; echo DONE"
    text, fields = await _staged(root, home, script)
    assert "DONE" in text
    assert not (root / path).exists()
    top = path.split("/", maxsplit=1)[0]
    assert top in _refused(fields) or path in _refused(fields)


async def test_r6_9_a_plant_deeper_than_four_levels_is_refused(root: Path, home: Path) -> None:
    """No depth bound: a ``.vscode/tasks.json`` twelve levels down is refused as at the top."""
    deep = "/".join(f"d{index}" for index in range(12))
    script = f"mkdir -p {deep}/.vscode && echo x > {deep}/.vscode/tasks.json && echo DONE"
    text, fields = await _staged(root, home, script)
    assert "DONE" in text
    assert not (root / deep / ".vscode").exists()
    assert (root / deep).is_dir()  # what is not protected is applied
    assert f"{deep}/.vscode" in _refused(fields)
