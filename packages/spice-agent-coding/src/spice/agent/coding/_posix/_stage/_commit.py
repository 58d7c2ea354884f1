"""A staged call's commit at the join (contract 13.1): read, judge, apply, say.

After every process of the call is gone, the stage's upper layer is read into the exact
list of changes (``_upper``), the one protected-paths policy judges it, and what it keeps
is applied under the worktree's journal (``tools.coding._journal``: written first, each
path renamed from the upper, what it replaced kept for ``undo``). A worktree path that
another writer changed after the stage opened is not overwritten: it is listed in
``conflicts`` (the user's edits win). What the policy refuses is listed in
``protected_refused``. A dry run reads and judges, and applies nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._changes import Change, Judged, shown_changes
from spice.agent.tools.coding._journal import Journal, JournalError

from ._stage import Stage
from ._upper import StageTooLarge, View

__all__ = ["MAXIMUM_LISTED", "StageResult", "StagedCall", "commit", "judge_protected"]

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
    failed: tuple[str, ...] = ()
    entry: int | None = None

    def fields(self) -> dict[str, object]:
        """The answer's ``staged`` fields."""
        said: dict[str, object] = {
            "staged": True,
            "changes": shown_changes(self.changes),
            "changes_applied": self.applied,
        }
        if self.entry is not None:
            said["call_id"] = self.entry
        if self.dry_run:
            said["dry_run"] = True
        if self.failed:
            said["changes_failed"] = list(self.failed[:MAXIMUM_LISTED])
            said["changes_failed_count"] = len(self.failed)
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


@final
@dataclass(frozen=True, slots=True)
class StagedCall:
    """What a staged call's join commits: its stage, the policy, the worktree's journal,
    and whether it is a dry run (its changes listed, none applied)."""

    stage: Stage
    policy: ProtectedPaths
    journal: Journal
    dry_run: bool = False


def commit(call: StagedCall) -> StageResult:
    """Read, judge and (unless a dry run) apply the stage under the journal; the stage
    is removed after, whatever happened."""
    stage, dry_run = call.stage, call.dry_run
    try:
        try:
            read = stage.read()
        except StageTooLarge:
            return StageResult(failure=TOO_LARGE, dry_run=dry_run)
        except OSError:
            return StageResult(failure=UNREADABLE, dry_run=dry_run)
        view = View(stage.lower, stage.upper)
        judged = judge_protected(call.policy, stage.lower, read.changes, view)
        refused = (*judged.refused, *read.refused)
        if dry_run or not judged.kept:
            return StageResult(judged.kept, applied=False, refused=refused, dry_run=dry_run)
        try:
            done = call.journal.commit("shell", None, judged, stage.opened_ns)
        except JournalError as error:
            return StageResult(judged.kept, refused=refused, failure=error.message)
        return StageResult(
            judged.kept,
            applied=bool(done.applied),
            conflicts=done.conflicts,
            refused=refused,
            failed=done.failed,
            entry=done.entry,
        )
    finally:
        stage.remove()
