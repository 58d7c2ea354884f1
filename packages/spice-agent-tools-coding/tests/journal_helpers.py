"""Shared by the journal's tests: a worktree's snapshot and an opening time after it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from spice.agent.tools.coding._journal import Journal

__all__ = ["Snapshot", "after_setup", "snapshot"]

Snapshot = dict[str, tuple[str, int, bytes]]


def snapshot(root: Path) -> Snapshot:
    found: Snapshot = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            status = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(status.st_mode):
                found[key] = ("symlink", 0, os.fsencode(os.readlink(path)))
            elif stat.S_ISDIR(status.st_mode):
                found[key] = ("directory", stat.S_IMODE(status.st_mode), b"")
            else:
                found[key] = ("file", stat.S_IMODE(status.st_mode), path.read_bytes())
    return found


def after_setup(journal: Journal, root: Path) -> int:
    """An opening time later than every change time in ``root``."""
    latest = max(p.lstat().st_ctime_ns for p in [root, *root.rglob("*")])
    return max(latest + 1, journal.opening())
