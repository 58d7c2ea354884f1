"""The journal's bounds (contract 13.2): ``--journal-max-bytes`` and ``--journal-max-age``.

A flag (``serve``, ``call``, ``history``, ``undo``), else the settings file's
``journal_max_bytes`` / ``journal_max_age``, else the default (1 GiB, 7 days). A bad
value is one fixed line naming the flag, or the settings file, its line and the key;
never the value.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding._journal import MAX_AGE_DAYS, MAX_BYTES

from ._file import FileRules
from ._values import MAXIMUM_VALUE_LENGTH, SettingsError

__all__ = [
    "JOURNAL_MAX_AGE_FLAG",
    "JOURNAL_MAX_BYTES_FLAG",
    "MAXIMUM_JOURNAL_AGE_DAYS",
    "MAXIMUM_JOURNAL_BYTES",
    "MINIMUM_JOURNAL_AGE_DAYS",
    "MINIMUM_JOURNAL_BYTES",
    "JournalBounds",
    "add_journal_bounds",
    "journal_bounds",
]

JOURNAL_MAX_BYTES_FLAG: Final = "--journal-max-bytes"
JOURNAL_MAX_AGE_FLAG: Final = "--journal-max-age"
MINIMUM_JOURNAL_BYTES: Final = 1024**2
"""The journal keeps at least 1 MiB (a smaller bound would drop each entry as it is made)."""
MAXIMUM_JOURNAL_BYTES: Final = 1024**4
"""And at most 1 TiB."""
MINIMUM_JOURNAL_AGE_DAYS: Final = 1
"""Entries live at least a day (a bound of 0 would drop each entry as it is made)."""
MAXIMUM_JOURNAL_AGE_DAYS: Final = 3650
"""And at most ten years."""
_SIZE: Final = re.compile(r"([0-9]+)([KMGTkmgt]?)")
_UNITS: Final = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_WHOLE: Final = re.compile(r"[0-9]+")


@final
@dataclass(frozen=True, slots=True)
class JournalBounds:
    """What the journal keeps: at most ``max_bytes`` of replaced bytes, entries at most
    ``max_age_days`` old (the oldest go first)."""

    max_bytes: int = MAX_BYTES
    max_age_days: int = MAX_AGE_DAYS


def add_journal_bounds(parser: argparse.ArgumentParser) -> None:
    """The two flags, on a command that opens the journal."""
    parser.add_argument(
        JOURNAL_MAX_BYTES_FLAG,
        metavar="BYTES",
        help="the journal keeps at most BYTES of what calls replaced (K, M, G or T; "
        "default 1G, settings file: journal_max_bytes); the oldest entries go first",
    )
    parser.add_argument(
        JOURNAL_MAX_AGE_FLAG,
        metavar="DAYS",
        help="the journal's entries older than DAYS days go (default 7, settings file: "
        "journal_max_age)",
    )


def _size(text: str, origin: str) -> int:
    cleaned = text.strip()
    matched = _SIZE.fullmatch(cleaned) if len(cleaned) <= MAXIMUM_VALUE_LENGTH else None
    if matched is None:
        raise SettingsError(f"{origin} must be a number of bytes, or with K, M, G or T")
    value = int(matched[1]) * _UNITS[matched[2].lower()]
    if not MINIMUM_JOURNAL_BYTES <= value <= MAXIMUM_JOURNAL_BYTES:
        raise SettingsError(f"{origin} must be at least 1M and at most 1T")
    return value


def _days(text: str, origin: str) -> int:
    cleaned = text.strip()
    if len(cleaned) > MAXIMUM_VALUE_LENGTH or _WHOLE.fullmatch(cleaned) is None:
        raise SettingsError(f"{origin} must be a whole number of days")
    value = int(cleaned)
    if not MINIMUM_JOURNAL_AGE_DAYS <= value <= MAXIMUM_JOURNAL_AGE_DAYS:
        raise SettingsError(
            f"{origin} must be between {MINIMUM_JOURNAL_AGE_DAYS} and {MAXIMUM_JOURNAL_AGE_DAYS}"
        )
    return value


def journal_bounds(max_bytes: str | None, max_age: str | None, rules: FileRules) -> JournalBounds:
    """The bounds from the flags' text (``None``: not given), else the settings file's."""
    if max_bytes is not None:
        size = _size(max_bytes, JOURNAL_MAX_BYTES_FLAG)
    elif rules.journal_max_bytes is not None:
        size = _size(rules.journal_max_bytes, rules.where("journal_max_bytes"))
    else:
        size = MAX_BYTES
    if max_age is not None:
        days = _days(max_age, JOURNAL_MAX_AGE_FLAG)
    elif rules.journal_max_age is not None:
        days = _days(str(rules.journal_max_age), rules.where("journal_max_age"))
    else:
        days = MAX_AGE_DAYS
    return JournalBounds(size, days)
