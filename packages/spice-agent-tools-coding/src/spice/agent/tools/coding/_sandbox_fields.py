"""What a launcher's process says about its sandbox's network, as fields of the answer.

A process may have the optional read-only attribute ``network_refused``
(``spice.agent.process.Process``), read by the shell after a successful join and checked
here, never trusted as it comes (``sandbox_hint``, the other one, is ``_shell``'s
``process_hint``):

- ``network_refused``: ``(hosts, count)``, the ``host:port`` its sandbox's network
  refused during the call (at most ``MAXIMUM_REFUSED_HOSTS``, each of letters, digits
  and ``.-:[]_`` only, at most ``MAXIMUM_HOST_BYTES``) and how many refusals there were
  in all. The answer gets ``network_refused`` (the list) and ``network_refused_count``
  when the count is above 0.

- ``protected_restored``: ``(paths, count)``, the protected paths (contract 12.1) the
  command changed or made that the launcher put back at the join (at most
  ``MAXIMUM_RESTORED``, text without control characters, ``MAXIMUM_PATH_BYTES`` UTF-8
  bytes in all) and how many in all. The answer gets ``protected_restored`` and
  ``protected_restored_count`` when the count is above 0.

Anything else (absent, another type, out of bounds, a property that raises) is no field.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Final

from spice.agent.process import MAXIMUM_REFUSED_HOSTS

from ._changes import SHOWN_CHANGES
from ._optional import reports_network_refused, reports_protected_restored, reports_stage

__all__ = [
    "MAXIMUM_HOST_BYTES",
    "MAXIMUM_PATH_BYTES",
    "MAXIMUM_REFUSED_HOSTS",
    "MAXIMUM_RESTORED",
    "MAXIMUM_STAGE_LISTED",
    "network_fields",
    "protected_fields",
    "sandbox_fields",
    "stage_fields",
]

MAXIMUM_RESTORED: Final = 16
"""At most this many put-back paths in an answer (the count says how many in all)."""

MAXIMUM_PATH_BYTES: Final = 2048
"""The put-back paths named in an answer have at most this many UTF-8 bytes in all (the
count counts every one)."""

# MAXIMUM_REFUSED_HOSTS: at most this many refused ``host:port`` in an answer (the count
# says how many in all); the contract's bound, owned by ``spice.agent.process``.

MAXIMUM_HOST_BYTES: Final = 262
"""A ``host:port`` has at most this many bytes (a 253-character name, ``:``, 5 digits)."""

MAXIMUM_COUNT: Final = 2**31 - 1


_HOST_CHARACTERS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]_"
)


def _printable_host(value: object) -> bool:
    """A ``host:port`` of name characters only (nothing JSON must escape)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAXIMUM_HOST_BYTES
        and set(value) <= _HOST_CHARACTERS
    )


def network_fields(process: object) -> dict[str, object]:
    """``network_refused`` and ``network_refused_count`` of ``process``, or nothing."""
    try:
        value = process.network_refused if reports_network_refused(process) else None
    except Exception:  # noqa: BLE001 - a failing property is a process saying nothing
        return {}
    if not isinstance(value, tuple) or len(value) != 2:
        return {}
    hosts, count = value
    if not isinstance(hosts, tuple) or isinstance(count, bool) or not isinstance(count, int):
        return {}
    if len(hosts) > MAXIMUM_REFUSED_HOSTS or not all(_printable_host(h) for h in hosts):
        return {}
    if not len(hosts) <= count <= MAXIMUM_COUNT or count == 0:
        return {}
    return {"network_refused": list(hosts), "network_refused_count": count}


def _path_bytes(value: object) -> int | None:
    """The UTF-8 size of a path without control characters, else ``None``."""
    if not isinstance(value, str) or not value:
        return None
    if any(unicodedata.category(char) == "Cc" for char in value):
        return None
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def protected_fields(process: object) -> dict[str, object]:
    """``protected_restored`` and ``protected_restored_count`` of ``process``, or nothing."""
    try:
        value = process.protected_restored if reports_protected_restored(process) else None
    except Exception:  # noqa: BLE001 - a failing property is a process saying nothing
        return {}
    if not isinstance(value, tuple) or len(value) != 2:
        return {}
    paths, count = value
    if not isinstance(paths, tuple) or isinstance(count, bool) or not isinstance(count, int):
        return {}
    sizes = [_path_bytes(path) for path in paths]
    if len(paths) > MAXIMUM_RESTORED or None in sizes:
        return {}
    if sum(size or 0 for size in sizes) > MAXIMUM_PATH_BYTES:
        return {}
    if not len(paths) <= count <= MAXIMUM_COUNT or count == 0:
        return {}
    return {"protected_restored": list(paths), "protected_restored_count": count}


def sandbox_fields(process: object) -> dict[str, object]:
    """Every optional field a process says about its sandbox (network, protected paths)."""
    return {**network_fields(process), **protected_fields(process), **stage_fields(process)}


MAXIMUM_STAGE_LISTED: Final = 16
"""Paths a stage's answer names in ``conflicts`` and ``protected_refused``."""

LISTED_PATH_BYTES: Final = 4096
"""UTF-8 bytes of all the paths of one of a stage's lists (``conflicts``, ...) together."""

CHANGED_PATH_BYTES: Final = 8192
"""UTF-8 bytes of all of ``changes.paths`` together (at most ``SHOWN_CHANGES`` of them)."""

_STAGE_REASON_BYTES: Final = 512


def _short_text(value: object, limit: int) -> bool:
    size = _path_bytes(value)
    return size is not None and size <= limit


def _paths(value: object, most: int, total: int) -> bool:
    """A list of at most ``most`` printable texts of ``total`` UTF-8 bytes in all."""
    if not isinstance(value, list) or len(value) > most:
        return False
    sizes = [_path_bytes(item) for item in value]
    return None not in sizes and sum(size or 0 for size in sizes) <= total


def _listed(value: object) -> bool:
    return _paths(value, MAXIMUM_STAGE_LISTED, LISTED_PATH_BYTES)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAXIMUM_COUNT


def _changes(value: object) -> bool:
    if not isinstance(value, dict) or set(value) != {"added", "modified", "deleted", "paths"}:
        return False
    return all(_count(value[key]) for key in ("added", "modified", "deleted")) and _paths(
        value["paths"], SHOWN_CHANGES, CHANGED_PATH_BYTES
    )


_STAGE_CHECKS: Final[dict[str, Callable[[object], bool]]] = {
    "staged": lambda v: isinstance(v, bool),
    "staged_reason": lambda v: _short_text(v, _STAGE_REASON_BYTES),
    "changes": _changes,
    "changes_applied": lambda v: isinstance(v, bool),
    "conflicts": _listed,
    "conflicts_count": _count,
    "protected_refused": _listed,
    "protected_refused_count": _count,
    "stage_failure": lambda v: _short_text(v, _STAGE_REASON_BYTES),
    "journal_entry": _count,
    "dry_run": lambda v: isinstance(v, bool),
    "changes_failed": _listed,
    "changes_failed_count": _count,
}


def stage_fields(process: object) -> dict[str, object]:
    """What a process says of its stage (contract 13.1: ``staged``, ``changes``,
    ``changes_applied``, ``conflicts``, ``protected_refused``), each field checked; a
    process that says something malformed says nothing."""
    try:
        value = process.stage_fields if reports_stage(process) else None
    except Exception:  # noqa: BLE001 - a failing property is a process saying nothing
        return {}
    if not isinstance(value, dict) or not value or "staged" not in value:
        return {}
    if not all(key in _STAGE_CHECKS and _STAGE_CHECKS[key](item) for key, item in value.items()):
        return {}
    return dict(value)
