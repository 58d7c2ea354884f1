"""What a launcher's process may say about its sandbox, as fields of the shell's answer.

A process may have two optional read-only attributes (``spice.agent.process.Process``),
read by the shell after a successful join and checked here, never trusted as they come:

- ``network_refused``: ``(hosts, count)``, the ``host:port`` its sandbox's network
  refused during the call (at most ``MAXIMUM_REFUSED_HOSTS``, each printable ASCII of at
  most ``MAXIMUM_HOST_BYTES``) and how many refusals there were in all. The answer gets
  ``network_refused`` (the list) and ``network_refused_count`` when the count is above 0.
- ``sandbox_hint``: one sentence (at most ``MAXIMUM_HINT_BYTES`` UTF-8 bytes, no control
  characters) naming the server flag that would have let the command through. The
  answer gets it only when the command failed (contract 11.1).

Anything else (absent, another type, out of bounds, a property that raises) is no field.
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = [
    "MAXIMUM_HINT_BYTES",
    "MAXIMUM_HOST_BYTES",
    "MAXIMUM_REFUSED_HOSTS",
    "network_fields",
    "sandbox_hint",
]

MAXIMUM_REFUSED_HOSTS: Final = 16
"""At most this many refused ``host:port`` in an answer (the count says how many in all)."""

MAXIMUM_HOST_BYTES: Final = 262
"""A ``host:port`` has at most this many bytes (a 253-character name, ``:``, 5 digits)."""

MAXIMUM_HINT_BYTES: Final = 512
"""A ``sandbox_hint`` has at most this many UTF-8 bytes."""

MAXIMUM_COUNT: Final = 2**31 - 1


def _printable_host(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAXIMUM_HOST_BYTES
        and value.isascii()
        and value.isprintable()
        and " " not in value
    )


def network_fields(process: object) -> dict[str, object]:
    """``network_refused`` and ``network_refused_count`` of ``process``, or nothing."""
    try:
        value = getattr(process, "network_refused", None)
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


def sandbox_hint(process: object) -> str | None:
    """``process``'s ``sandbox_hint`` when it is a usable sentence, else ``None``."""
    try:
        value = getattr(process, "sandbox_hint", None)
    except Exception:  # noqa: BLE001 - a failing property is a process saying nothing
        return None
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    if not 0 < size <= MAXIMUM_HINT_BYTES:
        return None
    if any(unicodedata.category(char) in {"Cc", "Cs"} for char in text):
        return None
    return text
