"""Bounds and small validators shared by the contract's value types."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

MAXIMUM_PAYLOAD_BYTES: Final = 1 << 20
"""Largest arguments, result content or input schema, in UTF-8 bytes."""

MAXIMUM_MESSAGE_BYTES: Final = 4096
"""Largest description, problem, progress or execution-error text, in UTF-8 bytes."""

MAXIMUM_IDENTITY_BYTES: Final = 128
"""Largest tool name or call id, in UTF-8 bytes."""


def utf8_size(text: str, field: str = "text") -> int:
    """Return the UTF-8 size of ``text``; raise ``ValueError`` on lone surrogates."""
    if text.isascii():  # constant time; one byte per character, no surrogate possible
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{field} is not valid Unicode (lone surrogate)") from None


def require_text(value: object, field: str, *, maximum: int, allow_empty: bool = False) -> str:
    """Check a text field: a ``str``, valid Unicode, within ``maximum`` UTF-8 bytes."""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string")
    if not value and not allow_empty:
        raise ValueError(f"{field} must not be empty")
    if utf8_size(value, field) > maximum:
        raise ValueError(f"{field} exceeds {maximum} bytes")
    return value


def require_identity(value: object, field: str) -> str:
    """Check a name or id: non-empty, bounded, no control characters or surrounding space."""
    text = require_text(value, field, maximum=MAXIMUM_IDENTITY_BYTES)
    if text != text.strip():
        raise ValueError(f"{field} must not have surrounding whitespace")
    # Printable ASCII has no control character: the common case skips the per-character scan.
    if not (text.isascii() and text.isprintable()) and any(
        unicodedata.category(char) in {"Cc", "Cs"} for char in text
    ):
        raise ValueError(f"{field} must not contain control characters")
    return text


def _reject_constant(_name: str) -> object:
    raise ValueError("NaN and Infinity are not JSON")


def parse_json(text: str, field: str, *, maximum: int = MAXIMUM_PAYLOAD_BYTES) -> object:
    """Parse strict JSON text within ``maximum`` bytes, with a bounded message on failure."""
    require_text(text, field, maximum=maximum)
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise ValueError(f"{field} must be valid JSON") from None


def canonical_json(value: object, field: str) -> str:
    """Serialize ``value`` as the contract's canonical JSON text."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{field} must be JSON-serializable") from None


def compact_json(value: Mapping[str, object], field: str) -> tuple[str, dict[str, object]]:
    """Serialize a mapping as compact JSON in its own key order, real Unicode, no NaN.

    Returns the text and the snapshot of the mapping's top level that was encoded. Keys
    must be strings at every level (``json.dumps`` would silently turn a number key into
    text, and the text would no longer describe the object it came from).
    """
    try:
        snapshot = dict(value)
        text = json.dumps(snapshot, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        _require_string_keys(snapshot)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{field} must be JSON-serializable") from None
    return text, snapshot


def _require_string_keys(value: dict[str, object]) -> None:
    # Only containers are visited (never the characters of a string), without recursion:
    # cheap even for a page, and json.dumps already bounded the depth. Containers are what
    # json.dumps writes as objects and arrays (it refused anything else already).
    pending: list[dict[Any, Any] | list[Any] | tuple[Any, ...]] = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            for key, item in current.items():
                if not isinstance(key, str):
                    raise TypeError
                if isinstance(item, (dict, list, tuple)):
                    pending.append(item)
        else:
            pending.extend(item for item in current if isinstance(item, (dict, list, tuple)))


def json_object_text(value: object, field: str) -> tuple[str, dict[str, object]]:
    """Accept a mapping or the JSON text of an object; return (text, parsed object)."""
    if isinstance(value, str):
        parsed = parse_json(value, field)
        if not isinstance(parsed, dict):
            raise ValueError(f"{field} must be a JSON object")
        return value, parsed
    if isinstance(value, Mapping):
        text = canonical_json(dict(value), field)
        require_text(text, field, maximum=MAXIMUM_PAYLOAD_BYTES)
        parsed = parse_json(text, field)
        assert isinstance(parsed, dict)  # noqa: S101 - a Mapping serializes to an object
        return text, parsed
    raise ValueError(f"{field} must be a JSON object or its text")
