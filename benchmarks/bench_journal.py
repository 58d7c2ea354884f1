"""Section "journal": what the worktree's journal costs (contract 13.2, issue 45).

Measured in one run, alternating, each round on fresh files:

- ``undo`` of an entry that changed 1,000 files (each modified), beside issue 45's bound
  of 0.5 s (the ratio is the time over 0.5 s: target at most 1.0x);
- the journal's commit of 1,000 modified files from a stage on the worktree's file system
  (renames, the old files kept in the journal's store), beside plain ``os.rename`` of the
  same 1,000 stage files over the worktree's (target at most 1.05x).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_journal.py [--quick]``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Final

from _harness import Figure, Settings, Target, main_of, milliseconds

from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal

SECTION: Final = "journal"
FILES: Final = 1000
DIRECTORIES: Final = 10
UNDO_BOUND_SECONDS: Final = 0.5
UNDO: Final = "undo of a call that changed 1,000 files beside 0.5 s"
COMMIT: Final = "journal commit of 1,000 renamed files beside plain renames"
_COMMIT_NOTE: Final = (
    "the commit hashes each path before and after (SHA-256), hard-links the old file into "
    "the store, writes and syncs its entry and then a small mark, and syncs every directory "
    "it wrote in"
)
TARGETS: Final = (
    Target(SECTION, UNDO, most=1.0, source="issue 45"),
    Target(SECTION, COMMIT, most=1.05, source="issue 45"),
)


def _paths() -> list[str]:
    return [f"d{index % DIRECTORIES}/f{index}.py" for index in range(FILES)]


def _write(base: Path, paths: list[str], text: str) -> None:
    for path in paths:
        target = base / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _judged(stage: Path, paths: list[str]) -> Judged:
    return Judged(
        tuple(Change(path, "modified", "file", "file", 0o644, str(stage / path)) for path in paths)
    )


def _round(base: Path, index: int) -> tuple[float, float, float]:
    """One round: a journal commit, its undo, and plain renames of the same files."""
    paths = _paths()
    root, stage, plain, plain_stage, state = (
        base / f"root{index}",
        base / f"stage{index}",
        base / f"plain{index}",
        base / f"plain-stage{index}",
        base / "state",
    )
    for tree, text in ((root, "old\n"), (plain, "old\n"), (stage, "new\n"), (plain_stage, "new\n")):
        _write(tree, paths, text)
    journal = Journal.open(str(root), state_home=str(state))
    opened = journal.opening()
    clock = time.perf_counter_ns
    if index % 2:
        start = clock()
        for path in paths:
            os.rename(plain_stage / path, plain / path)
        renamed = clock() - start
    start = clock()
    committed = journal.commit("shell", f"bench-{index}", _judged(stage, paths), opened)
    commit = clock() - start
    if not index % 2:
        start = clock()
        for path in paths:
            os.rename(plain_stage / path, plain / path)
        renamed = clock() - start
    if committed.entry is None or committed.copied or len(committed.applied) != FILES:
        raise RuntimeError("the journal's commit did not rename every file")
    start = clock()
    undone = journal.undo(committed.entry)
    undo = clock() - start
    if len(undone.restored) != FILES:
        raise RuntimeError("the undo did not take every file back")
    for tree in (root, stage, plain, plain_stage):
        shutil.rmtree(tree)
    return commit / 1e9, renamed / 1e9, undo / 1e9


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    repeats = settings.slow_repeats
    base = Path(tempfile.mkdtemp(prefix="spice-bench-journal-"))
    commits: list[float] = []
    renames: list[float] = []
    undos: list[float] = []
    try:
        for index in range(settings.warmup + repeats):
            commit, renamed, undo = _round(base, index)
            if index >= settings.warmup:
                commits.append(commit)
                renames.append(renamed)
                undos.append(undo)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    bound = milliseconds([UNDO_BOUND_SECONDS])
    return [
        Figure(
            SECTION,
            UNDO,
            milliseconds(undos),
            "floor",
            "issue 45's bound, 0.5 s",
            bound,
            notes=("each undo takes back 1,000 modified files of one entry, in an entry",),
        ),
        Figure(
            SECTION,
            COMMIT,
            milliseconds(commits),
            "floor",
            "os.rename of the same 1,000 files",
            milliseconds(renames),
            notes=(_COMMIT_NOTE,),
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_of(run))
