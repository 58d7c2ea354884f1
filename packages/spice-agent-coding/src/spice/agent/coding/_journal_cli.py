"""``spice-coding history`` and ``spice-coding undo`` (contract 13.2).

Exit codes: 0 every path came back (or history printed), 1 some path was changed since
the call and left as it is (``--force`` takes it back), 2 an unknown id or an unusable
journal (one line on stderr naming it, nothing changed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Final

from spice.agent.tools.coding._journal import MAX_AGE_DAYS, MAX_BYTES, Journal, JournalError

__all__ = ["add_journal_arguments", "run_history", "run_undo"]

EXIT_REFUSED: Final = 1
EXIT_UNUSABLE: Final = 2


def add_journal_arguments(sub: argparse.ArgumentParser, command: str) -> None:
    """The options of ``history`` or ``undo``."""
    sub.add_argument("--json", action="store_true", help="print JSON")
    sub.add_argument(
        "--journal-max-bytes",
        type=int,
        default=MAX_BYTES,
        metavar="BYTES",
        help="the journal's bound in bytes (default 1 GiB); the oldest entries go first",
    )
    sub.add_argument(
        "--journal-max-age",
        type=int,
        default=MAX_AGE_DAYS,
        metavar="DAYS",
        help="entries older than this many days go (default 7)",
    )
    if command == "undo":
        sub.add_argument("entry", metavar="ID", nargs="?", type=int, help="the entry to undo")
        sub.add_argument("--to", type=int, metavar="ID", help="undo every entry down to ID")
        sub.add_argument("--force", action="store_true", help="also paths changed since")


def _journal(root: str, options: argparse.Namespace) -> Journal:
    return Journal.open(
        root, max_bytes=options.journal_max_bytes, max_age_days=options.journal_max_age
    )


def run_history(root: str, options: argparse.Namespace) -> int:
    """Print the journal's entries, newest first."""
    try:
        history = _journal(root, options).history()
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


def run_undo(root: str, options: argparse.Namespace) -> int:
    """Take back one call (or every one down to ``--to``)."""
    try:
        undone = _journal(root, options).undo(options.entry, to=options.to, force=options.force)
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
