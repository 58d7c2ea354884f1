"""``serve --cache-max-age DAYS``: how long an unused private cache lives (contract 12.2).

A flag, else its variable (``SPICE_AGENT_CACHE_MAX_AGE``), else the default
(``_sandbox.DEFAULT_CACHE_MAX_AGE_DAYS``, 30), as every setting reads (``_settings``): a
bad value is one fixed line naming the flag or the variable, never the value.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Final

from .._sandbox import DEFAULT_CACHE_MAX_AGE_DAYS, MAX_CACHE_MAX_AGE_DAYS

__all__ = ["CACHE_MAX_AGE_VARIABLE", "add_cache_max_age", "resolve_cache_max_age"]

CACHE_MAX_AGE_VARIABLE: Final = "SPICE_AGENT_CACHE_MAX_AGE"
FLAG: Final = "--cache-max-age"
MAXIMUM_TEXT_LENGTH: Final = 16
"""Bound of the text read as a number of days (the largest has six digits)."""
_WHOLE: Final = re.compile(r"[0-9]+")


class CacheAgeError(ValueError):
    """A ``--cache-max-age`` that cannot be used (one line naming its origin)."""


def add_cache_max_age(parser: argparse.ArgumentParser) -> None:
    """``serve``'s ``--cache-max-age DAYS``."""
    parser.add_argument(
        FLAG,
        metavar="DAYS",
        help=(
            "at start, remove the worktrees' private caches unused for more than DAYS days, "
            f"0 never (default ${CACHE_MAX_AGE_VARIABLE}, else {DEFAULT_CACHE_MAX_AGE_DAYS})"
        ),
    )


def resolve_cache_max_age(options: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Whole days, 0 to ``MAX_CACHE_MAX_AGE_DAYS``; ``CacheAgeError`` otherwise. An empty
    variable counts as unset; a command without the flag gets the variable or default."""
    given = vars(options).get("cache_max_age")
    origin = FLAG
    if given is None:
        given, origin = environ.get(CACHE_MAX_AGE_VARIABLE, ""), CACHE_MAX_AGE_VARIABLE
        if given == "":
            return DEFAULT_CACHE_MAX_AGE_DAYS
    text = given.strip()
    if len(text) > MAXIMUM_TEXT_LENGTH or _WHOLE.fullmatch(text) is None:
        raise CacheAgeError(f"{origin} must be a whole number of days")
    value = int(text)
    if value > MAX_CACHE_MAX_AGE_DAYS:
        raise CacheAgeError(f"{origin} must be between 0 and {MAX_CACHE_MAX_AGE_DAYS}")
    return value
