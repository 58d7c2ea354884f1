"""Strict decoding of a call's JSON arguments.

The decoder checks structure only: an object, no unknown properties, the right JSON
types (``true``, ``1.0`` and ``"1"`` are not integers), no trailing data, no lone
surrogates, no duplicate keys. Range rules belong to each tool, with their own words.

JSON ``null`` for a property means the same as leaving it out (contract 9.3: a client
that makes schemas "strict" sends every property, ``null`` for the unused ones). A
required property given as ``null`` is therefore missing, and is refused as such.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final, final

MAXIMUM_NESTING: Final = 32
"""Deepest JSON nesting an argument object may have."""
SHOWN_NAME_CHARS: Final = 64
"""Most characters of a name from a call that an answer shows (``shown_name``)."""


@final
class ArgumentError(Exception):
    """The arguments are malformed; ``str(error)`` is a fixed, model-safe text."""


def _no_constants(_name: str) -> object:
    raise ArgumentError("arguments must be valid JSON")


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ArgumentError("arguments repeat a property")
        out[key] = value
    return out


def _has_lone_surrogate(value: object, depth: int = 0) -> bool:
    if depth > MAXIMUM_NESTING:
        raise ArgumentError("arguments are nested too deeply")
    if isinstance(value, str):
        # Strict UTF-8 encoding fails exactly on lone surrogates, and runs in C.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, list):
        return any(_has_lone_surrogate(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return any(
            _has_lone_surrogate(key, depth + 1) or _has_lone_surrogate(item, depth + 1)
            for key, item in value.items()
        )
    return False


def decode_object(arguments: str, allowed: frozenset[str]) -> dict[str, object]:
    """Parse ``arguments`` as one JSON object with only ``allowed`` properties."""
    try:
        value = json.loads(
            arguments, object_pairs_hook=_unique_object, parse_constant=_no_constants
        )
    except ArgumentError:
        raise
    except (ValueError, RecursionError):
        raise ArgumentError("arguments must be one valid JSON object") from None
    if not isinstance(value, dict):
        raise ArgumentError("arguments must be a JSON object")
    if _has_lone_surrogate(value):
        raise ArgumentError("arguments must not contain lone surrogates")
    unknown = set(value) - allowed
    if unknown:
        raise ArgumentError(f"arguments have {unknown_properties(unknown, allowed)}")
    return value


def shown_name(name: str) -> str:
    """A name the call gave (a property), as the model is shown it: in single quotes, at
    most ``SHOWN_NAME_CHARS`` characters (then ``...``), each one that is not printable
    as ``?``. It is model input: never more of it, never raw control characters."""
    cut = name[:SHOWN_NAME_CHARS]
    text = "".join(char if char.isprintable() else "?" for char in cut)
    return f"'{text}'" + ("..." if len(name) > SHOWN_NAME_CHARS else "")


def unknown_properties(unknown: set[str], allowed: frozenset[str]) -> str:
    """``an unknown property 'x' (and N more); the properties are a, b`` (bounded: one
    name shown, the allowed names are the tool's own)."""
    first = min(unknown)
    more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
    names = ", ".join(sorted(allowed))
    return f"an unknown property {shown_name(first)}{more}; the properties are {names}"


def take_string(values: Mapping[str, object], name: str, *, required: bool) -> str | None:
    """The string property ``name``; ``None`` when absent or null and not required."""
    value = values.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ArgumentError(f"{name} must be a string")
    return value


def take_integer(values: Mapping[str, object], name: str) -> int | None:
    """The integer property ``name`` (a real JSON integer); ``None`` when absent or null."""
    value = values.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{name} must be an integer")
    return value


def take_number(values: Mapping[str, object], name: str) -> float | None:
    """The number property ``name`` (int or float, never a bool); ``None`` when absent or null."""
    value = values.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{name} must be a number")
    return float(value)


def take_boolean(values: Mapping[str, object], name: str) -> bool | None:
    """The boolean property ``name``; ``None`` when absent or null."""
    value = values.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ArgumentError(f"{name} must be a boolean")
    return value


def take_string_list(values: Mapping[str, object], name: str) -> list[str]:
    """The required array-of-strings property ``name``."""
    value = values.get(name)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ArgumentError(f"{name} must be an array of strings")
    return list(value)
