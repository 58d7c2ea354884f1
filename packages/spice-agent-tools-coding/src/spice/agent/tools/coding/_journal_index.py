"""What the journal's bounds and its recovery need of each entry, without re-reading it (13.2).

After every commit the bounds (bytes, age, count) look at every entry, and before every
commit, undo and recovery the journal looks for entries a killed server left ``pending``.
Reading and parsing every record each time made a commit cost O(entries x paths). The
index keeps, per entry, its phase, time and store size, checked against the record file's
inode (``os.scandir`` gives it without a ``stat``): a record is only written whole to a
new file renamed over the old one, so a record whose inode is unchanged is unchanged. Only
records the index has not seen, or has seen ``pending``, are read again. A ``pending``
record is never trusted from the index: its id may be discarded and used again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from ._journal_records import JournalError, Phase, Record

__all__ = ["EntryIndex", "Indexed"]


@final
@dataclass(frozen=True, slots=True)
class Indexed:
    """One entry as the index knows it."""

    id: int
    phase: Phase
    time_ns: int
    size: int


def entry_id(name: str) -> int | None:
    """The id of an entry's record file name (``000000000012.json``), else ``None``."""
    stem = name.removesuffix(".json")
    if name.endswith(".json") and stem.isdigit():
        return int(stem)
    return None


@final
class EntryIndex:
    """The index of one journal's ``entries`` directory (``read``: parse one record)."""

    def __init__(self, entries: str, shown: str, read: Callable[[int], Record]) -> None:
        self._entries = entries
        self._shown = shown
        self._read = read
        self._known: dict[int, tuple[int, Indexed]] = {}

    def scan(self) -> list[Indexed]:
        """Every entry, by id; a record the index has not seen (or saw pending) is read."""
        found: dict[int, int] = {}
        try:
            with os.scandir(self._entries) as listing:
                for entry in listing:
                    number = entry_id(entry.name)
                    if number is not None:
                        found[number] = entry.inode()
        except OSError:
            raise JournalError(
                "journal_unusable", f"the journal {self._shown} cannot be read"
            ) from None
        for number in [n for n in self._known if n not in found]:
            del self._known[number]
        listed: list[Indexed] = []
        for number in sorted(found):
            held = self._known.get(number)
            if held is None or held[0] != found[number] or held[1].phase != "done":
                record = self._read(number)
                held = (found[number], _indexed(record))
                self._known[number] = held
            listed.append(held[1])
        return listed

    def note(self, record: Record, inode: int) -> None:
        """A record this journal just wrote (as ``inode``)."""
        self._known[record.id] = (inode, _indexed(record))

    def forget(self, number: int) -> None:
        """An entry this journal just discarded."""
        self._known.pop(number, None)


def _indexed(record: Record) -> Indexed:
    return Indexed(record.id, record.phase, record.time_ns, record.size)
