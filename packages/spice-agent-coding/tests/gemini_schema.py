"""What the Gemini API accepts as a function's parameters: the rules of its ``Schema``.

The API's ``FunctionDeclaration.parameters`` is a ``Schema`` message, "a select subset of
an OpenAPI 3.0 schema object"; a request breaking it is answered 400 before any model
runs. The public reports, and the SDKs' own converters, name the breaks this checks:
``type`` must be one name ("Proto field is not repeating, cannot start list" for
``["integer", "null"]``), an ``enum`` holds non-empty strings only ("enum[2]: cannot be
empty" for ``null``) and only on strings, every schema names its ``type``, an array has
``items``, and a keyword outside the message (``additionalProperties``,
``exclusiveMinimum``, ``oneOf``, ``$ref``, ...) is an unknown field. Nullability is the
message's own ``nullable``. Gemini CLI sends the schema as ``parametersJsonSchema``
instead, which admits more; the same rules are applied to it, so what passes here is
accepted under either field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

SCHEMA_FIELDS: Final = frozenset(
    {
        "type",
        "format",
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
"""The fields of the Gemini API's ``Schema`` message (JSON names)."""
TYPES: Final = frozenset({"string", "number", "integer", "boolean", "array", "object"})
"""The ``Type`` names a parameter schema uses (the API reads them in any case)."""
MAXIMUM_DEPTH: Final = 32


def gemini_problems(schema: object, where: str = "parameters", depth: int = 0) -> list[str]:
    """Every way ``schema`` breaks the Gemini ``Schema`` rules (empty when it is accepted)."""
    if depth > MAXIMUM_DEPTH:
        return [f"{where}: nested too deeply"]
    if not isinstance(schema, Mapping):
        return [f"{where}: a schema must be an object, not {type(schema).__name__}"]
    problems = [f"{where}.{key}: unknown field" for key in schema if key not in SCHEMA_FIELDS]
    kind = schema.get("type")
    if kind is None and "anyOf" not in schema:
        problems.append(f"{where}: no type")
    elif kind is not None and not isinstance(kind, str):
        problems.append(f"{where}.type: not one type name ({kind!r})")
    elif isinstance(kind, str) and kind.lower() not in TYPES:
        problems.append(f"{where}.type: unknown type {kind!r}")
    name = kind.lower() if isinstance(kind, str) else None
    problems += _enum_problems(schema, where, name)
    if "nullable" in schema and not isinstance(schema["nullable"], bool):
        problems.append(f"{where}.nullable: not a boolean")
    if name == "array" and not isinstance(schema.get("items"), Mapping):
        problems.append(f"{where}: an array without items")
    if "items" in schema:
        problems += gemini_problems(schema["items"], f"{where}.items", depth + 1)
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        problems.append(f"{where}.properties: not an object")
        properties = {}
    for key, value in properties.items():
        problems += gemini_problems(value, f"{where}.properties[{key}]", depth + 1)
    required = schema.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(properties):
        problems.append(f"{where}.required: names a property that is not declared")
    any_of = schema.get("anyOf", [])
    if not isinstance(any_of, list) or ("anyOf" in schema and not any_of):
        problems.append(f"{where}.anyOf: not a list of schemas")
        any_of = []
    for index, value in enumerate(any_of):
        problems += gemini_problems(value, f"{where}.anyOf[{index}]", depth + 1)
    return problems


def _enum_problems(schema: Mapping[str, Any], where: str, name: str | None) -> list[str]:
    if "enum" not in schema:
        return []
    values = schema["enum"]
    problems = []
    if name != "string":
        problems.append(f"{where}.enum: only allowed for the string type")
    if not isinstance(values, list) or not values:
        return [*problems, f"{where}.enum: not a list of values"]
    problems += [
        f"{where}.enum[{index}]: cannot be empty"
        for index, value in enumerate(values)
        if not isinstance(value, str) or not value
    ]
    return problems
