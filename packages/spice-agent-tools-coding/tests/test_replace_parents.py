"""A create that fails or stops before its commit takes back the directories it made (9.1)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from replace_helpers import (
    Pause,
    Recording,
    create_arguments,
    make_call,
    make_tool,
    run,
    temporaries,
    watch_cancellation,
)

from spice.agent.tool import ExecutionState, interruption_of
from spice.agent.tools.coding import _root
from spice.agent.tools.coding._commit import Checkpoint

NEW = "new\n"
DEEP = "a/b/c/new.txt"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty worktree root."""
    tree = tmp_path / "root"
    tree.mkdir()
    return tree


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("failing", ["open_temporary", "write", "fsync", "link"])
async def test_a_failed_create_removes_every_parent_it_made(root: Path, failing: str) -> None:
    """ENOSPC-like failure at each pre-commit step: a/b/c are gone, the answer is honest."""
    syscalls = Recording(failures={failing: [1]})
    _, content = await run(make_tool(root, syscalls), create_arguments(DEEP, NEW))
    assert content["ok"] is False
    assert content["committed"] is False
    assert str(content["message"]).endswith("nothing was changed")
    assert "directories_cleaned" not in content
    assert [] == _tree(root)


async def test_only_the_directories_it_made_are_removed_deepest_first(root: Path) -> None:
    """``a`` existed before the call: ``a/b`` and ``a/b/c`` go, ``a`` and its file stay."""
    (root / "a").mkdir()
    (root / "a" / "keep.txt").write_bytes(b"keep")
    syscalls = Recording(failures={"write": [1]})
    _, content = await run(make_tool(root, syscalls), create_arguments(DEEP, NEW))
    assert "write_failed" == content["code"]
    assert ["a", "a/keep.txt"] == _tree(root)


async def test_an_existing_empty_parent_is_never_removed(root: Path) -> None:
    """An empty directory the call did not make stays, even though it is empty."""
    (root / "a" / "b").mkdir(parents=True)
    syscalls = Recording(failures={"write": [1]})
    await run(make_tool(root, syscalls), create_arguments(DEEP, NEW))
    assert ["a", "a/b"] == _tree(root)


async def test_a_parent_that_is_no_longer_empty_stays_and_the_answer_says_so(root: Path) -> None:
    """Someone writes into ``a/b`` meanwhile: ``a/b/c`` goes, ``a/b`` stays, no false claim."""

    def intrude() -> None:
        (root / "a" / "b" / "theirs.txt").write_bytes(b"theirs")

    syscalls = Recording(failures={"write": [1]}, hooks={Checkpoint.PREFLIGHT_DONE: intrude})
    result, content = await run(make_tool(root, syscalls), create_arguments(DEEP, NEW))
    assert ("write_failed", False) == (content["code"], content["directories_cleaned"])
    assert "nothing was changed" not in str(content["message"])
    assert "nothing was changed" not in str(result.problem)
    assert ["a", "a/b", "a/b/theirs.txt"] == _tree(root)


async def test_a_made_directory_replaced_by_another_is_never_removed(root: Path) -> None:
    """``a/b/c`` is swapped for a new empty directory: that one is not the call's to remove."""

    def swap() -> None:
        (root / "a" / "b" / "c").rename(root / "moved")
        (root / "a" / "b" / "c").mkdir()
        (root / "moved").rmdir()

    syscalls = Recording(failures={"write": [1]}, hooks={Checkpoint.PREFLIGHT_DONE: swap})
    _, content = await run(make_tool(root, syscalls), create_arguments(DEEP, NEW))
    assert content["directories_cleaned"] is False
    assert ["a", "a/b", "a/b/c"] == _tree(root)


async def test_removal_never_goes_through_a_symlink(root: Path, tmp_path: Path) -> None:
    """``a`` is swapped for a symlink to a copy of the tree: nothing is removed through it."""
    elsewhere = tmp_path / "elsewhere"

    def plant() -> None:
        (root / "a").rename(elsewhere)
        (root / "a").symlink_to(elsewhere)

    syscalls = Recording(failures={"write": [1]}, hooks={Checkpoint.PREFLIGHT_DONE: plant})
    _, content = await run(make_tool(root, syscalls), create_arguments(DEEP, NEW))
    assert content["directories_cleaned"] is False
    assert (root / "a").is_symlink()
    assert (elsewhere / "b" / "c").is_dir()


async def test_a_create_cancelled_before_its_commit_removes_what_it_made(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled with the temporary synced: definitive, no file, no temporary, no a/b/c."""
    pause = Pause()
    pause.release = watch_cancellation(monkeypatch)
    tool = make_tool(root, Recording(hooks={Checkpoint.TEMPORARY_SYNCED: pause}))
    task = asyncio.ensure_future(tool.execute(make_call(create_arguments(DEEP, NEW))))
    await pause.wait_reached()
    assert (root / "a" / "b" / "c").is_dir()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(10):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, None) == (interruption.state, interruption.result)
    assert [] == _tree(root)
    assert [] == temporaries(root)


async def test_a_directory_made_before_a_failing_mkdir_is_removed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a`` is made, making ``a/b`` fails: path_unavailable and ``a`` is taken back."""
    real_mkdir = os.mkdir
    made: list[str] = []

    def mkdir(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        made.append(name)
        if len(made) == 2:
            raise PermissionError
        real_mkdir(name, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir)
    _, content = await run(make_tool(root), create_arguments(DEEP, NEW))
    assert ("path_unavailable", ["a", "b"]) == (content["code"], made)
    assert [] == _tree(root)


async def test_a_committed_create_keeps_its_new_parents(root: Path) -> None:
    """The success path removes nothing: the file and a/b/c are there."""
    _, content = await run(make_tool(root), create_arguments(DEEP, NEW))
    assert content["committed"] is True
    assert "directories_cleaned" not in content
    assert ["a", "a/b", "a/b/c", DEEP] == _tree(root)


def test_remove_made_stops_at_the_first_directory_it_cannot_remove(root: Path) -> None:
    """Deepest first; a non-empty one stops the removal and stays in the list."""
    made: list[_root.MadeDirectory] = []
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(
            _root.open_directory(
                root_fd, "x/y", follow_symlinks=True, create_missing=True, made=made
            )
        )
        assert ["x", "x/y"] == [m.path for m in made]
        (root / "x" / "file").write_bytes(b"")
        assert _root.remove_made(root_fd, made) is False
        assert ["x"] == [m.path for m in made]
        (root / "x" / "file").unlink()
        assert _root.remove_made(root_fd, made) is True
        assert [] == made
    finally:
        os.close(root_fd)
    assert [] == _tree(root)
