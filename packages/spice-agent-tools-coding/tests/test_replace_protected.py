"""``replace`` of a protected path (12.1): refused, the file untouched, git runs nothing.

Real files and the real ``git``: the user's ``git status`` runs outside after the call,
and a marker file is written only by the ``core.fsmonitor`` program a call would plant.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from replace_helpers import create_arguments, digest, run

from spice.agent.tools.coding import Config, ProtectedPaths, _replace, _where
from spice.agent.tools.coding._protected import PROTECTED
from spice.agent.tools.coding._replace import UNPLACED, ReplaceTool

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("git") is None, reason="POSIX with git"
)

GIT_TIMEOUT = 60.0


def _git(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
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


def _repository(root: Path) -> Path:
    root.mkdir()
    assert _git("init", "-q", cwd=root).returncode == 0
    (root / "a.txt").write_text("a\n")
    return root


def _planted_config(config: Path, marker: Path) -> str:
    """``config``'s text with a ``core.fsmonitor`` that writes ``marker`` when git runs it."""
    program = config.parent / "monitor.sh"
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    program.chmod(0o755)
    return config.read_text() + f"[core]\n\tfsmonitor = {program}\n"


def _tool(root: Path, policy: ProtectedPaths) -> ReplaceTool:
    return ReplaceTool(Config(str(root), protected_paths=policy))


def _state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize("form", ["content", "edits"])
async def test_fsmonitor_in_git_config_is_refused(tmp_path: Path, form: str) -> None:
    """R5-1: a planted ``core.fsmonitor`` never reaches ``.git/config``; without the
    policy (the seed's default) the same call plants it and ``git status`` runs it."""
    for policy, planted in ((ProtectedPaths(), True), (ProtectedPaths.default(), False)):
        root = _repository(tmp_path / f"r{planted}")
        marker = tmp_path / f"marker{planted}"
        config = root / ".git" / "config"
        text = _planted_config(config, marker)
        before = _state(config)
        if form == "content":
            arguments: dict[str, object] = {
                "path": ".git/config",
                "content": text,
                "expected_sha256": digest(before[0]),
            }
        else:
            arguments = {
                "path": str(config),
                "expected_sha256": digest(before[0]),
                "edits": [
                    {"old_text": before[0].decode(), "new_text": text},
                ],
            }
        _, content = await run(_tool(root, policy), arguments)
        assert _git("status", cwd=root).returncode == 0
        if planted:
            assert content["ok"] is True
            assert marker.exists()
            continue
        assert content["ok"] is False
        assert content["code"] == "path_unavailable"
        assert content["message"] == PROTECTED
        assert "--unprotect" in str(content["message"])
        assert content["committed"] is False
        assert _state(config) == before
        assert not marker.exists()


async def test_an_existing_hook_is_not_edited(tmp_path: Path) -> None:
    """R5-1: an executable ``pre-commit`` edited by ``replace`` would run at the commit."""
    root = _repository(tmp_path / "r")
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    before = _state(hook)
    marker = tmp_path / "marker"
    arguments = {
        "path": ".git/hooks/pre-commit",
        "content": f"#!/bin/sh\ntouch '{marker}'\n",
        "expected_sha256": digest(before[0]),
    }
    _, content = await run(_tool(root, ProtectedPaths.default()), arguments)
    assert content["code"] == "path_unavailable"
    assert _state(hook) == before
    assert _git("add", "a.txt", cwd=root).returncode == 0
    assert _git("commit", "-q", "-m", "m", cwd=root).returncode == 0
    assert not marker.exists()


@pytest.mark.parametrize(
    "path",
    [".mcp.json", ".claude/settings.json", ".vscode/tasks.json", "sub/.git", ".gitmodules"],
)
async def test_creating_a_protected_path_is_refused(tmp_path: Path, path: str) -> None:
    """A create makes no file and leaves no directory it would have made."""
    root = tmp_path / "r"
    root.mkdir()
    _, content = await run(_tool(root, ProtectedPaths.default()), create_arguments(path, "{}"))
    assert content["code"] == "path_unavailable"
    assert sorted(p.name for p in root.iterdir()) == []


async def test_through_a_symlinked_directory(tmp_path: Path) -> None:
    """``link/config`` where ``link`` leads to ``.git``: the real place is protected."""
    root = _repository(tmp_path / "r")
    (root / "link").symlink_to(".git")
    (root / "deep").mkdir()
    (root / "deep" / "hooks").symlink_to("../.git/hooks")
    config = root / ".git" / "config"
    before = _state(config)
    tool = _tool(root, ProtectedPaths.default())
    arguments = {"path": "link/config", "content": "x", "expected_sha256": digest(before[0])}
    _, content = await run(tool, arguments)
    assert content["code"] == "path_unavailable"
    assert _state(config) == before
    _, content = await run(tool, create_arguments("deep/hooks/pre-commit", "#!/bin/sh\n"))
    assert content["code"] == "path_unavailable"
    assert not (root / ".git" / "hooks" / "pre-commit").exists()
    # An ordinary file through a symbolic link is still written.
    (root / "src").mkdir()
    (root / "alias").symlink_to("src")
    _, content = await run(tool, create_arguments("alias/new.py", "x"))
    assert content["ok"] is True


async def test_a_hard_link_alias_leaves_the_protected_file(tmp_path: Path) -> None:
    """A hard link of ``.git/config`` elsewhere is replaced as its own file (the engine
    splits the link): ``.git/config`` keeps its bytes and its time."""
    root = _repository(tmp_path / "r")
    config = root / ".git" / "config"
    alias = root / "alias"
    os.link(config, alias)
    before = _state(config)
    arguments = {"path": "alias", "content": "x", "expected_sha256": digest(before[0])}
    _, content = await run(_tool(root, ProtectedPaths.default()), arguments)
    assert content["ok"] is True
    assert content["hard_links_split"] is True
    assert _state(config) == before
    assert alias.read_bytes() == b"x"


async def test_unprotect_gives_a_path_back(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    policy = ProtectedPaths.default(unprotect=[str(root / ".vscode")])
    _, content = await run(_tool(root, policy), create_arguments(".vscode/tasks.json", "{}"))
    assert content["ok"] is True
    _, content = await run(_tool(root, policy), create_arguments(".claude/x", "{}"))
    assert content["code"] == "path_unavailable"


async def test_an_unplaced_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the directory's place cannot be told, the call is refused, nothing written."""
    root = tmp_path / "r"
    (root / "src").mkdir(parents=True)
    monkeypatch.setattr(_replace, "real_relative", lambda _root, _dir: None)
    _, content = await run(_tool(root, ProtectedPaths.default()), create_arguments("src/a.py", "x"))
    assert (content["code"], content["message"]) == ("path_unavailable", UNPLACED)
    assert not (root / "src" / "a.py").exists()
    # The seed's default asks nothing.
    _, content = await run(_tool(root, ProtectedPaths()), create_arguments("src/a.py", "x"))
    assert content["ok"] is True


def test_the_walk_up_agrees_with_proc(tmp_path: Path) -> None:
    """The portable walk finds the same place as ``/proc`` (and the root is ``.``)."""
    (tmp_path / "a" / "b c").mkdir(parents=True)
    (tmp_path / "l").symlink_to("a/b c")
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    inner = os.open(tmp_path / "l", os.O_RDONLY | os.O_DIRECTORY)
    outside = os.open(tmp_path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _where.walked_relative(root, inner) == "a/b c"
        assert _where.real_relative(root, inner) == "a/b c"
        assert _where.walked_relative(root, root) == "."
        assert _where.walked_relative(root, outside) is None
    finally:
        for fd in (root, inner, outside):
            os.close(fd)


def test_the_windows_worker_asks_the_policy_before_its_engine(tmp_path: Path) -> None:
    """``_windows._replace.work`` refuses a protected path before it opens anything (the
    Windows API is never reached here: the root does not even exist)."""
    from spice.agent.tools.coding._commit import CommitGate  # noqa: PLC0415
    from spice.agent.tools.coding._replace_arguments import decode  # noqa: PLC0415
    from spice.agent.tools.coding._windows import _replace as _replace_windows  # noqa: PLC0415 - one test

    config = Config(str(tmp_path / "absent"), protected_paths=ProtectedPaths.default())
    for path in (".GIT/Config", ".git./hooks/pre-commit", "sub\\.mcp.json"):
        arguments = decode(
            f'{{"path": "{path}", "content": "x", "create": true}}'.replace("\\", "\\\\"), config
        )
        done = _replace_windows.work(config, arguments, CommitGate())
        assert (done.outcome.code, done.outcome.message) == ("path_unavailable", PROTECTED)
