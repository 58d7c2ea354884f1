"""A staged call's commit at the join (contract 13.1): read, judge, apply, say.

After every process of the call is gone, the stage's upper layer is read into the exact
list of changes (``_upper``), the one protected-paths policy judges it, and what it keeps
is applied to the worktree path by path, each atomically by a rename from the upper
(never following a link the call made: every parent is opened relative to the one above
it without following links). A worktree path that another writer changed after the
stage opened (its change time is later: no process can set it) is not overwritten: it is
listed in ``conflicts`` (the user's edits win). What the policy refuses is listed in
``protected_refused``. A dry run reads and judges, and applies nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._changes import Change, Judged, shown_changes

from ._stage import Stage
from ._upper import StageTooLarge, View

__all__ = ["MAXIMUM_LISTED", "StageResult", "commit", "judge_protected"]

MAXIMUM_LISTED: Final = 16
"""Paths an answer names in ``conflicts`` and in ``protected_refused`` (a count says all)."""

TOO_LARGE: Final = "the call changed more entries than a stage's commit reads"
UNREADABLE: Final = "the call's stage could not be read"


@final
@dataclass(frozen=True, slots=True)
class StageResult:
    """What a staged call's commit did (the answer's fields)."""

    changes: tuple[Change, ...] = ()
    applied: bool = False
    conflicts: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    failure: str | None = None
    dry_run: bool = False

    def fields(self) -> dict[str, object]:
        """The answer's ``staged`` fields."""
        said: dict[str, object] = {
            "staged": True,
            "changes": shown_changes(self.changes),
            "changes_applied": self.applied,
        }
        if self.conflicts:
            said["conflicts"] = list(self.conflicts[:MAXIMUM_LISTED])
            said["conflicts_count"] = len(self.conflicts)
        if self.refused:
            said["protected_refused"] = list(self.refused[:MAXIMUM_LISTED])
            said["protected_refused_count"] = len(self.refused)
        if self.failure is not None:
            said["stage_failure"] = self.failure
        return said


def judge_protected(
    policy: ProtectedPaths, root: str, changes: Sequence[Change], view: View
) -> Judged:
    """The protected-paths policy over a list of changes: a change to a protected path,
    or a deleted directory that holds one, is refused."""
    _ = view
    kept: list[Change] = []
    refused: list[str] = []
    for change in changes:
        if refused and change.path.startswith(refused[-1] + "/"):
            continue  # beneath a refused directory: refused with it
        whole = change.action == "deleted" and change.before == "directory"
        if policy.protects(root, change.path) or (
            whole and _holds_protected(policy, root, change.path)
        ):
            refused.append(change.path)
        else:
            kept.append(change)
    return Judged(tuple(kept), tuple(refused))


def _holds_protected(policy: ProtectedPaths, root: str, path: str) -> bool:
    for top, directories, files in os.walk(os.path.join(root, path)):
        for name in (*directories, *files):
            relative = os.path.relpath(os.path.join(top, name), root)
            if policy.protects(root, relative):
                return True
    return False


def commit(
    stage: Stage,
    policy: ProtectedPaths,
    *,
    dry_run: bool = False,
) -> StageResult:
    """Read, judge and (unless ``dry_run``) apply the stage; the stage is removed after."""
    try:
        try:
            read = stage.read()
        except StageTooLarge:
            return StageResult(failure=TOO_LARGE, dry_run=dry_run)
        except OSError:
            return StageResult(failure=UNREADABLE, dry_run=dry_run)
        judged = judge_protected(policy, stage.lower, read.changes, View(stage.lower, stage.upper))
        refused = (*judged.refused, *read.refused)
        if dry_run or not judged.kept:
            return StageResult(judged.kept, applied=False, refused=refused, dry_run=dry_run)
        conflicts = _apply(stage.lower, judged, stage.opened_ns)
        return StageResult(judged.kept, applied=True, conflicts=conflicts, refused=refused)
    finally:
        stage.remove()


_DIRECTORY: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def _parent(root: int, path: str) -> Iterator[tuple[int, str]]:
    """The directory holding ``path`` (opened beneath ``root`` without following a link)
    and the last name; ``OSError`` when a parent is missing or is not a directory."""
    *parents, name = path.split("/")
    fd = os.dup(root)
    try:
        for part in parents:
            inner = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        yield fd, name
    finally:
        os.close(fd)


def _changed_since(directory: int, name: str, opened_ns: int, *, whole: bool) -> bool:
    """Whether another writer changed ``name`` after ``opened_ns`` (``whole``: anything
    beneath it too, for a directory the call deletes)."""
    try:
        info = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        return False
    if info.st_ctime_ns > opened_ns:
        return True
    if whole and stat.S_ISDIR(info.st_mode):
        return _tree_changed_since(directory, name, opened_ns)
    return False


def _tree_changed_since(directory: int, name: str, opened_ns: int) -> bool:
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=directory)
    except OSError:
        return True
    try:
        for entry in os.scandir(fd):
            info = entry.stat(follow_symlinks=False)
            if info.st_ctime_ns > opened_ns:
                return True
            if stat.S_ISDIR(info.st_mode) and _tree_changed_since(fd, entry.name, opened_ns):
                return True
        return False
    finally:
        os.close(fd)


def _remove(directory: int, name: str) -> None:
    try:
        info = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=directory)
    else:
        os.unlink(name, dir_fd=directory)


def _apply(root_path: str, judged: Judged, opened_ns: int) -> tuple[str, ...]:
    """Apply the kept changes in order; the paths left for the user's edits."""
    conflicts: list[str] = []
    skipped: list[str] = []
    root = os.open(root_path, _DIRECTORY)
    try:
        for change in judged.kept:
            if any(change.path.startswith(top + "/") for top in skipped):
                continue
            try:
                with _parent(root, change.path) as (directory, name):
                    whole = change.action == "deleted"
                    if change.action != "added" and _changed_since(
                        directory, name, opened_ns, whole=whole
                    ):
                        conflicts.append(change.path)
                        skipped.append(change.path)
                        continue
                    if change.action == "added" and os.path.lexists(
                        f"/proc/self/fd/{directory}/{name}"
                    ):
                        conflicts.append(change.path)
                        skipped.append(change.path)
                        continue
                    _apply_one(directory, name, change)
            except OSError:
                conflicts.append(change.path)
                skipped.append(change.path)
    finally:
        os.close(root)
    return tuple(conflicts)


def _apply_one(directory: int, name: str, change: Change) -> None:
    if change.action == "deleted":
        _remove(directory, name)
        return
    if change.kind == "directory":
        try:
            info = os.lstat(name, dir_fd=directory)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=directory)
            info = None
        if info is None:
            os.mkdir(name, 0o700, dir_fd=directory)
        if change.mode is not None:
            fd = os.open(name, _DIRECTORY, dir_fd=directory)
            try:
                os.fchmod(fd, change.mode)
            finally:
                os.close(fd)
        return
    assert change.source is not None  # noqa: S101 - a file or link has its source
    try:
        info = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=directory)
    os.rename(change.source, name, dst_dir_fd=directory)
