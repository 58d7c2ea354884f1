"""A staged call's commit at the join (contract 13.1): read, judge, apply, say.

After every process of the call is gone, the stage's upper layer is read into the exact
list of changes (``_upper``), the one protected-paths policy judges it, and what it keeps
is applied under the worktree's journal (``tools.coding._journal``: written first, each
path renamed from the upper, what it replaced kept for ``undo``). A worktree path that
another writer changed after the stage opened is not overwritten: it is listed in
``conflicts`` (the user's edits win). What the policy refuses is listed in
``protected_refused``. A dry run reads and judges, and applies nothing. The stage is
removed after the answer (``_removal``), whatever happened.

The stage's sync (one ``syncfs``: 20 to 25 ms for 1,000 copied-up files here) starts on a
thread of its own as soon as the read found a change, and runs while the policy judges
and the journal reads the paths' states; the journal waits for it before its entry is
written and before the first rename (``Journal.commit``'s ``ready``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._changes import Change, shown_changes
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._judge import judge
from spice.agent.tools.coding._sandbox_fields import CHANGED_PATH_BYTES, LISTED_PATH_BYTES

from ._removal import REMOVALS, Removals
from ._stage import Stage
from ._upper import StageTooLarge, View

__all__ = ["MAXIMUM_LISTED", "StageResult", "StagedCall", "commit"]

MAXIMUM_LISTED: Final = 16
"""Paths an answer names in ``conflicts`` and in ``protected_refused`` (a count says all)."""

TOO_LARGE: Final = "the call changed more entries than a stage's commit reads"
UNREADABLE: Final = "the call's stage could not be read"
UNSYNCED: Final = "the call's stage could not be written to disk: nothing was applied"


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
        shown = shown_changes(self.changes)
        shown["paths"] = _fitting(shown["paths"], CHANGED_PATH_BYTES)
        said: dict[str, object] = {
            "staged": True,
            "changes": shown,
            "changes_applied": self.applied,
        }
        if self.entry is not None:
            said["journal_entry"] = self.entry
        if self.dry_run:
            said["dry_run"] = True
        if self.failed:
            said["changes_failed"] = _fitting(self.failed[:MAXIMUM_LISTED], LISTED_PATH_BYTES)
            said["changes_failed_count"] = len(self.failed)
        if self.conflicts:
            said["conflicts"] = _fitting(self.conflicts[:MAXIMUM_LISTED], LISTED_PATH_BYTES)
            said["conflicts_count"] = len(self.conflicts)
        if self.refused:
            said["protected_refused"] = _fitting(self.refused[:MAXIMUM_LISTED], LISTED_PATH_BYTES)
            said["protected_refused_count"] = len(self.refused)
        if self.failure is not None:
            said["stage_failure"] = self.failure
        return said


@final
@dataclass(frozen=True, slots=True)
class StagedCall:
    """What a staged call's join commits: its stage, the policy, the worktree's journal,
    whether it is a dry run (its changes listed, none applied), and who removes the stage
    after the answer."""

    stage: Stage
    policy: ProtectedPaths
    journal: Journal
    dry_run: bool = False
    removals: Removals = REMOVALS


class _Unsynced(Exception):
    """The stage's sync failed: nothing is applied."""


@final
class _Syncing:
    """The stage's sync, on a thread of its own (a daemon: a commit that applies
    nothing does not wait for it)."""

    def __init__(self, stage: Stage) -> None:
        self._stage = stage
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="spice-stage-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._stage.sync()
        except OSError:
            self._failed = True

    def wait(self) -> None:
        """Wait for the sync; ``_Unsynced`` when it failed."""
        self._thread.join()
        if self._failed:
            raise _Unsynced


def commit(call: StagedCall) -> StageResult:
    """Read, judge and (unless a dry run) apply the stage under the journal; the stage
    is handed to ``call.removals`` after, whatever happened (removed after the answer)."""
    stage, dry_run = call.stage, call.dry_run
    try:
        try:
            read = stage.read()
        except StageTooLarge:
            return StageResult(failure=TOO_LARGE, dry_run=dry_run)
        except OSError:
            return StageResult(failure=UNREADABLE, dry_run=dry_run)
        syncing = None if dry_run or not read.changes else _Syncing(stage)
        view = View(stage.lower, stage.upper)
        judged = judge(call.policy, stage.lower, read.changes, view)
        refused = _outermost((*judged.refused, *read.refused))
        if syncing is None or not judged.kept:
            return StageResult(judged.kept, applied=False, refused=refused, dry_run=dry_run)
        try:
            done = call.journal.commit(
                "shell", None, judged, stage.opened_ns, synced=True, ready=syncing.wait
            )
        except _Unsynced:
            return StageResult(judged.kept, refused=refused, failure=UNSYNCED)
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
        call.removals.later(stage)


def _outermost(paths: Sequence[str]) -> tuple[str, ...]:
    """``paths`` without those beneath another of them (a refused directory takes its
    subtree: the answer names the directory)."""
    kept: list[str] = []
    for path in sorted(paths, key=lambda p: p.split("/")):
        if not any(path.startswith(top + "/") for top in kept):
            kept.append(path)
    return tuple(kept)


def _fitting(paths: object, total: int) -> list[str]:
    """The first of ``paths`` whose UTF-8 bytes fit ``total`` together (the counts beside
    them stay whole); a path that is not printable text is left out."""
    kept: list[str] = []
    used = 0
    for path in paths if isinstance(paths, (list, tuple)) else ():
        if not isinstance(path, str) or not path.isprintable():
            continue
        size = len(path.encode("utf-8", "surrogateescape"))
        if used + size > total:
            break
        kept.append(path)
        used += size
    return kept
