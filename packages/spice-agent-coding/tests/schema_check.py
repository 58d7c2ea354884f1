"""Validation of content objects against the output schemas the MCP server declares.

``jsonschema`` (a dependency of ``mcp``, the validator its client uses) ships no type
hints and the lock holds no stubs, so its one use is wrapped here with types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import (  # type: ignore[import-untyped]  # no stubs; typed by the wrappers below
    Draft202012Validator,
)

from spice.agent.coding._mcp._outputs import output_schema

_VALIDATORS: dict[str, Any] = {}


def schema_errors(schema: Mapping[str, Any], instance: object) -> list[str]:
    """The messages of every way ``instance`` breaks ``schema`` (draft 2020-12)."""
    return [
        str(error.message) for error in Draft202012Validator(dict(schema)).iter_errors(instance)
    ]


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise unless ``schema`` is itself a valid draft 2020-12 schema."""
    Draft202012Validator.check_schema(dict(schema))


def output_errors(name: str, content: Mapping[str, Any]) -> list[str]:
    """How ``content`` breaks the output schema of tool ``name`` (empty when it satisfies it)."""
    validator = _VALIDATORS.get(name)
    if validator is None:
        validator = _VALIDATORS[name] = Draft202012Validator(output_schema(name))
    return [str(error.message) for error in validator.iter_errors(dict(content))]


def check_output_schema(name: str, content: Mapping[str, Any]) -> None:
    """Fail unless ``content`` satisfies the outputSchema the MCP server declares for ``name``.

    Every content object an adversarial route sees passes through here, so each suite
    also proves that ``structuredContent`` always validates (contract 9.3).
    """
    assert [] == output_errors(name, content), f"a {name} content object breaks its schema"
