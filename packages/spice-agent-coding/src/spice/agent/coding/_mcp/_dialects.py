"""The input schemas of the tool listing, in the dialect each client's model API accepts.

A tool's definition holds its canonical input schema: JSON Schema that a strict client
(OpenAI structured outputs) takes as it is: ``additionalProperties: false``, optional
properties nullable by a type union (``"type": ["integer", "null"]``), an optional enum
holding ``null``. Two clients break on it before a model sees it:

- the ``google-genai`` SDK's MCP support walks ``additionalProperties`` as a schema and
  raises ``AttributeError`` on ``false``; it turns a type union into ``nullable`` itself,
  but passes an enum's ``null`` on, which the Gemini API refuses (400);
- Gemini CLI turns a type union into ``nullable`` and sends the rest as it is; the Gemini
  API's ``Schema`` (an OpenAPI 3.0 subset) has no ``additionalProperties``,
  ``exclusiveMinimum`` or ``null`` enum value.

So the listing is served in one of two dialects, chosen by the name the client gives in
``initialize`` (``dialect_of``):

- ``PORTABLE``, for every client not named for Gemini (the ``google-genai`` SDK among
  them: it uses the ``mcp`` SDK's client, named ``mcp`` like the OpenAI Agents SDK's and
  pydantic-ai's): the canonical schema without a boolean ``additionalProperties`` (a
  strict client adds ``false`` back; the server refuses an unknown property itself), and
  an enum holding ``null`` written as ``anyOf`` of the enum and ``{"type": "null"}``. It
  is still JSON Schema that admits exactly the canonical schema's values on the declared
  properties, and a strict conversion of it admits ``null`` where the canonical one does.
- ``GEMINI``, for a client whose name holds ``gemini`` (Gemini CLI is
  ``gemini-cli-mcp-client``): the Gemini API's ``Schema``: one type name per schema with
  ``nullable: true`` for a union with ``null``, an enum of strings only, and only the
  keywords that message has (``additionalProperties``, ``exclusiveMinimum``, ``format``,
  ``$ref`` ... are left out; the descriptions state the bounds, the decoder enforces
  every rule).

Output schemas are served as they are in both: the clients validate answers against them
as JSON Schema, and neither Gemini client shows them to the model.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

__all__ = [
    "GEMINI_CUT_CHARS",
    "GEMINI_TEXT_CHARS",
    "Dialect",
    "dialect_of",
    "gemini_schema",
    "portable_schema",
    "schema_in",
    "text_chars_of",
]

MAXIMUM_SCHEMA_DEPTH: Final = 64
"""Deepest nesting of schemas (through properties, items, anyOf ...) a conversion follows."""
GEMINI_CUT_CHARS: Final = 40_000
"""Gemini CLI replaces a tool answer longer than its ``truncateToolOutputThreshold`` (40,000
characters by default) with its first 8,000 and last 32,000 characters and a pointer to a
file (measured with 0.61.0: the model then reads broken JSON)."""
GEMINI_WRAPPER_CHARS: Final = 256
"""Room for what Gemini CLI wraps around the text before it counts (0.61.0: the 41
characters of ``<untrusted_context>`` and its closing tag, measured)."""
GEMINI_TEXT_CHARS: Final = GEMINI_CUT_CHARS - GEMINI_WRAPPER_CHARS
"""Most characters of an answer's text block for a Gemini client: within it the answer is a
shorter page or capture that says so (``_text_block``), which Gemini CLI passes whole."""
GEMINI_MARK: Final = "gemini"
"""A client whose ``initialize`` name holds this (in any case) gets the Gemini dialect."""

GEMINI_KEYWORDS: Final = frozenset(
    {
        "type",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
"""The fields of the Gemini API's ``Schema`` kept in the Gemini dialect (``format`` is left
out: the API takes only a few formats)."""
_TYPE_KEYWORDS: Final[Mapping[str, frozenset[str]]] = {
    "string": frozenset({"enum", "pattern", "minLength", "maxLength"}),
    "number": frozenset({"minimum", "maximum"}),
    "integer": frozenset({"minimum", "maximum"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "object": frozenset(
        {"properties", "required", "minProperties", "maxProperties", "propertyOrdering"}
    ),
    "boolean": frozenset(),
}
"""The keywords that constrain only values of one type (to split a union of types)."""
_SCHEMA_MAPS: Final = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_SCHEMA_LISTS: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_VALUES: Final = frozenset(
    {"items", "additionalProperties", "not", "contains", "if", "then", "else"}
)
_NULL: Final = "null"


class Dialect(enum.StrEnum):
    """The input-schema dialects of the listing."""

    PORTABLE = "portable"
    GEMINI = "gemini"


def dialect_of(client_name: str | None) -> Dialect:
    """The dialect for the client named ``client_name`` in ``initialize`` (``None``: unnamed)."""
    if client_name is not None and GEMINI_MARK in client_name.casefold():
        return Dialect.GEMINI
    return Dialect.PORTABLE


def text_chars_of(dialect: Dialect) -> int | None:
    """The most characters of a text block in ``dialect`` (``None``: only the wire's bound)."""
    return GEMINI_TEXT_CHARS if dialect is Dialect.GEMINI else None


def schema_in(dialect: Dialect, schema: Mapping[str, object]) -> dict[str, object]:
    """The canonical input ``schema`` written in ``dialect`` (a new object)."""
    if dialect is Dialect.GEMINI:
        return gemini_schema(schema)
    return portable_schema(schema)


def _depth_checked(depth: int) -> int:
    if depth > MAXIMUM_SCHEMA_DEPTH:
        raise ValueError("a tool's input schema is nested too deeply to convert")
    return depth + 1


# --- the portable dialect -------------------------------------------------------------------


def portable_schema(schema: Mapping[str, object], depth: int = 0) -> dict[str, object]:
    """``schema`` without boolean ``additionalProperties``, and with each enum that holds
    ``null`` written as ``anyOf`` of the enum's other values and ``{"type": "null"}``."""
    inner = _depth_checked(depth)
    out: dict[str, object] = {}
    for key, value in schema.items():
        if key == "additionalProperties" and isinstance(value, bool):
            continue
        out[key] = _portable_value(key, value, inner)
    enumerated = out.get("enum")
    if isinstance(enumerated, list) and None in enumerated:
        return _null_split(out)
    return out


def _portable_value(key: str, value: object, depth: int) -> object:
    if key in _SCHEMA_MAPS and isinstance(value, Mapping):
        return {name: _portable_sub(sub, depth) for name, sub in value.items()}
    if key in _SCHEMA_LISTS and isinstance(value, list):
        return [_portable_sub(sub, depth) for sub in value]
    if key in _SCHEMA_VALUES:
        return _portable_sub(value, depth)
    return value


def _portable_sub(value: object, depth: int) -> object:
    return portable_schema(value, depth) if isinstance(value, Mapping) else value


def _null_split(schema: dict[str, object]) -> dict[str, object]:
    """``schema`` (its enum holds null) as ``anyOf`` of its non-null part and null; the
    keywords stay with the non-null part (the google-genai SDK keeps them there)."""
    enumerated = schema["enum"]
    assert isinstance(enumerated, list)  # noqa: S101 - checked by the caller
    values = [value for value in enumerated if value is not None]
    if not values:
        return {"type": _NULL}
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [name for name in kind if name != _NULL]
        kind = kinds[0] if len(kinds) == 1 else kinds
    part = {**schema, "enum": values}
    if kind is None or kind == []:
        part.pop("type", None)
    else:
        part["type"] = kind
    return {"anyOf": [part, {"type": _NULL}]}


# --- the Gemini dialect ---------------------------------------------------------------------


def gemini_schema(schema: Mapping[str, object], depth: int = 0) -> dict[str, object]:
    """``schema`` as the Gemini API's ``Schema``: one type name, ``nullable`` for a union
    with null, string enums without null, and only the keywords that message has."""
    inner = _depth_checked(depth)
    out: dict[str, object] = {}
    nullable = False
    kind = schema.get("type")
    kinds: list[str] = []
    if isinstance(kind, str):
        kinds = [kind]
    elif isinstance(kind, list):
        kinds = [name for name in kind if isinstance(name, str)]
    if _NULL in kinds and len(kinds) > 1:
        nullable = True
        kinds = [name for name in kinds if name != _NULL]
    for key, value in schema.items():
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {
                name: gemini_schema(sub, inner)
                for name, sub in value.items()
                if isinstance(sub, Mapping)
            }
        elif key == "items" and isinstance(value, Mapping):
            out[key] = gemini_schema(value, inner)
        elif key in {"anyOf", "oneOf"} and isinstance(value, list):
            branches = [sub for sub in value if isinstance(sub, Mapping)]
            others = [gemini_schema(sub, inner) for sub in branches if sub.get("type") != _NULL]
            nullable = nullable or len(others) < len(branches)
            out["anyOf"] = [*_list(out.get("anyOf")), *others]
        elif key == "enum" and isinstance(value, list):
            nullable = nullable or None in value
            out[key] = [item for item in value if item is not None]
        elif key in GEMINI_KEYWORDS and key not in {"type", "nullable"}:
            out[key] = value
    if kinds:
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
    _settle_gemini(out)
    if nullable or out.get("nullable") is True or schema.get("nullable") is True:
        out["nullable"] = True
    return out


def _settle_gemini(out: dict[str, object]) -> None:
    """Make ``out`` one ``Schema``: a lone ``anyOf`` branch merged in, a union of types
    split into ``anyOf``, an enum only on strings, ``required`` only of declared names."""
    branches = out.pop("anyOf", None)
    if isinstance(branches, list) and len(branches) == 1 and isinstance(branches[0], dict):
        for key, value in branches[0].items():
            out.setdefault(key, value)
    elif isinstance(branches, list) and branches:
        out["anyOf"] = branches
    kind = out.get("type")
    if isinstance(kind, list):
        del out["type"]
        if "anyOf" not in out:
            out["anyOf"] = [_only_of_type(out, name) for name in kind]
        for name in kind:
            for key in _TYPE_KEYWORDS.get(name, frozenset()):
                out.pop(key, None)
    enumerated = out.get("enum")
    if "enum" in out and (
        out.get("type") != "string"
        or not isinstance(enumerated, list)
        or not enumerated
        or not all(isinstance(item, str) and item for item in enumerated)
    ):
        del out["enum"]
    properties = out.get("properties")
    required = out.get("required")
    if isinstance(required, list):
        declared = properties if isinstance(properties, Mapping) else {}
        out["required"] = [name for name in required if name in declared]


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _only_of_type(schema: Mapping[str, object], name: str) -> dict[str, object]:
    part: dict[str, object] = {"type": name}
    part.update({key: schema[key] for key in _TYPE_KEYWORDS.get(name, ()) if key in schema})
    _settle_gemini(part)
    return part
