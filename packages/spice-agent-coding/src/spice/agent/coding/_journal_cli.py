"""``spice-coding history`` and ``spice-coding undo`` (contract 13.2), and the served
worktree's journal: opened at ``serve``'s (``call``'s, ``tools``') start, listed by ``cache
list`` and removed by ``cache clean``.

Exit codes: 0 every path came back (or history printed), 1 some path was changed since
the call and left as it is (``--force`` takes it back), 2 an unknown id or an unusable
journal (one line on stderr naming it, nothing changed).

A server holds a shared ``flock`` on its journal's ``served`` file for its whole life, so
``cache clean`` never removes the journal of a running server (it says ``in_use``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._journal_records import journal_directory, read_json, state_home

from ._settings._journal_bounds import JournalBounds, add_journal_bounds

__all__ = [
    "MAX_JOURNALS_LISTED",
    "ServedJournal",
    "add_journal_arguments",
    "clean_all_journals",
    "clean_journal",
    "list_journals",
    "open_served_journal",
    "release_journals",
    "run_history",
    "run_undo",
]

EXIT_REFUSED: Final = 1
EXIT_UNUSABLE: Final = 2
MAX_JOURNALS_LISTED: Final = 1000
"""Journals ``cache list`` shows at most (one per worktree)."""
SERVED: Final = "served"
"""The file of a journal whose shared ``flock`` a running server holds."""
_HELD: list[int] = []
"""The ``served`` descriptors this process holds (released when it exits)."""


@final
@dataclass(frozen=True, slots=True)
class ServedJournal:
    """The served worktree's journal, or why there is none (one line naming the place)."""

    journal: Journal | None
    problem: str | None = None

    def report(self) -> dict[str, object]:
        """What ``tools`` says of it."""
        if self.journal is None:
            return {"replace": "not journaled", "problem": self.problem}
        return {"replace": "journaled", "directory": self.journal.directory}


def open_served_journal(root: str, bounds: JournalBounds) -> ServedJournal:
    """Open the journal of ``root``, finish or roll back what a killed server left
    (``recover``), and hold it as served. A journal that cannot be used is not fatal:
    the tools run without it, and the answer names the place."""
    try:
        journal = Journal.open(root, max_bytes=bounds.max_bytes, max_age_days=bounds.max_age_days)
        journal.recover()
    except JournalError as error:
        return ServedJournal(None, f"{error.message}: replace is not journaled (no undo)")
    _hold(journal.directory)
    return ServedJournal(journal)


def _hold(directory: str) -> None:
    if sys.platform == "win32":  # pragma: no cover - no flock there
        return
    import fcntl  # noqa: PLC0415 - POSIX only

    with contextlib.suppress(OSError):
        fd = os.open(
            os.path.join(directory, SERVED),
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        _HELD.append(fd)


def release_journals() -> None:
    """Let go of every journal this process holds as served (``main``'s end)."""
    while _HELD:
        with contextlib.suppress(OSError):
            os.close(_HELD.pop())


def _journals_home() -> str | None:
    home = state_home()
    return None if home is None else os.path.dirname(journal_directory(home, "/"))


def _tree_size(path: str) -> int:
    total = 0
    for _top, _dirs, files, top_fd in os.fwalk(path, follow_symlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(name, dir_fd=top_fd, follow_symlinks=False).st_size
    return total


def list_journals() -> tuple[list[dict[str, object]], bool]:
    """Every worktree's journal (``cache list``): its place, worktree and size in bytes;
    and whether more were there than ``MAX_JOURNALS_LISTED``."""
    base = _journals_home()
    if base is None or sys.platform == "win32":
        return [], False
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return [], False
    listed: list[dict[str, object]] = []
    for name in names[:MAX_JOURNALS_LISTED]:
        directory = os.path.join(base, name)
        if os.path.islink(directory) or not os.path.isdir(directory):
            continue
        root: object = None
        with contextlib.suppress(JournalError):
            meta = read_json(os.path.join(directory, "journal.json"), directory)
            root = meta.get("root") if isinstance(meta, dict) else None
        listed.append(
            {
                "journal": directory,
                "root": root if isinstance(root, str) else None,
                "size_bytes": _tree_size(directory),
                "in_use": _in_use(directory),
            }
        )
    return listed, len(names) > MAX_JOURNALS_LISTED


def _in_use(directory: str) -> bool:
    if sys.platform == "win32":  # pragma: no cover - no flock there
        return False
    import fcntl  # noqa: PLC0415 - POSIX only

    try:
        fd = os.open(os.path.join(directory, SERVED), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _remove(directory: str) -> str:
    """``removed``, ``absent``, ``in_use`` (a running server holds it) or ``failed``."""
    if not os.path.lexists(directory):
        return "absent"
    if os.path.islink(directory) or not os.path.isdir(directory):
        return "failed"
    if _in_use(directory):
        return "in_use"
    shutil.rmtree(directory, ignore_errors=True)
    return "failed" if os.path.lexists(directory) else "removed"


def clean_journal(root: str) -> tuple[str | None, str]:
    """Remove the journal of the worktree ``root`` (``cache clean``): its place (``None``
    when no state directory is known) and ``removed``, ``absent``, ``in_use``, ``failed``."""
    home = state_home()
    if home is None:
        return None, "absent"
    directory = journal_directory(home, os.path.realpath(root))
    return directory, _remove(directory)


def clean_all_journals() -> dict[str, list[str]]:
    """Remove every journal no running server holds (``cache clean --all``)."""
    outcome: dict[str, list[str]] = {"removed": [], "in_use": [], "failed": []}
    for entry in list_journals()[0]:
        directory = str(entry["journal"])
        result = _remove(directory)
        if result != "absent":
            outcome[result].append(directory)
    return outcome


def add_journal_arguments(sub: argparse.ArgumentParser, command: str) -> None:
    """The options of ``history`` or ``undo``."""
    sub.add_argument("--json", action="store_true", help="print JSON")
    add_journal_bounds(sub)
    if command == "undo":
        sub.add_argument("entry", metavar="ID", nargs="?", type=int, help="the entry to undo")
        sub.add_argument("--to", type=int, metavar="ID", help="undo every entry down to ID")
        sub.add_argument("--force", action="store_true", help="also paths changed since")


def _journal(root: str, bounds: JournalBounds) -> Journal:
    return Journal.open(root, max_bytes=bounds.max_bytes, max_age_days=bounds.max_age_days)


def run_history(root: str, options: argparse.Namespace, bounds: JournalBounds) -> int:
    """Print the journal's entries, newest first."""
    try:
        history = _journal(root, bounds).history()
    except JournalError as error:
        sys.stderr.write(f"spice-coding: {error.message}\n")
        return EXIT_UNUSABLE
    if options.json:
        value = {"entries": [e.json() for e in history.entries], "dropped": history.dropped}
        sys.stdout.write(json.dumps(value, indent=2) + "\n")
        return 0
    for entry in history.entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.time_ns / 1e9))
        mark = " (undone)" if entry.undone else ""
        sys.stdout.write(f"{entry.id}  {when}  {entry.tool}  {len(entry.paths)} paths{mark}\n")
    if history.dropped:
        sys.stdout.write(f"{history.dropped} older entries were dropped by the journal's bounds\n")
    return 0


def run_undo(root: str, options: argparse.Namespace, bounds: JournalBounds) -> int:
    """Take back one call (or every one down to ``--to``)."""
    try:
        undone = _journal(root, bounds).undo(options.entry, to=options.to, force=options.force)
    except JournalError as error:
        sys.stderr.write(f"spice-coding: {error.message}\n")
        return EXIT_UNUSABLE
    if options.json:
        value = {
            "entry": undone.entry,
            "restored": list(undone.restored),
            "refused": list(undone.refused),
        }
        sys.stdout.write(json.dumps(value, indent=2) + "\n")
    else:
        for path in undone.restored:
            sys.stdout.write(f"restored {path}\n")
        for path in undone.refused:
            sys.stdout.write(f"left {path}: changed since the call (--force takes it back)\n")
    return EXIT_REFUSED if undone.refused else 0
