"""Smoke test until the full contract suite lands."""

from __future__ import annotations

from spice.agent.tool import Definition


def test_definition_canonicalizes_schema() -> None:
    """A mapping schema is stored as canonical JSON text."""
    definition = Definition("x", "X.", {"b": 1, "a": 2}, "read_only", "safe", [])
    assert '{"a":2,"b":1}' == definition.input_schema
