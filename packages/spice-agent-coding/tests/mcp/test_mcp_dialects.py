"""The listing's input schemas in the dialect each client's model API accepts (contract 11.3).

Hypothesis draws schemas of the shapes the tools use (type unions with null, enums holding
null, closed objects, nested arrays and objects, bounds, ``anyOf`` with null) and checks
both conversions: the Gemini dialect passes the Gemini API's ``Schema`` rules
(``gemini_schema``) and keeps what a model needs (the properties, which are required,
which admit null, the descriptions, the enum's values); the portable dialect admits
exactly the values the canonical schema admits on declared properties, survives the
OpenAI Agents SDK's strict conversion, and what the google-genai SDK's own converter makes
of it passes the Gemini rules too (it raises on the canonical schema). Over stdio the real
server lists each client's dialect by the name it gives in ``initialize``; a name it does
not know keeps the portable one.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from agents.strict_schema import ensure_strict_json_schema
from gemini_schema import gemini_problems
from google.genai._mcp_utils import mcp_to_gemini_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation
from mcp.types import Tool as McpTool
from schema_check import schema_errors
from test_examples import RUN_BOUND_SECONDS, SPICE_CODING

from spice.agent.coding import mcp_server
from spice.agent.coding._mcp._dialects import (
    MAXIMUM_SCHEMA_DEPTH,
    Dialect,
    dialect_of,
    gemini_schema,
    portable_schema,
    schema_in,
)
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call, Definition, Effect, ReplaySafety, Reporter, Result
from spice.agent.tools.coding import Config, new_read, new_replace

GEMINI_CLI_NAME: Final = "gemini-cli-mcp-client"
"""The name Gemini CLI gives in ``initialize`` (its bundle, 0.61.0)."""
TOOL_NAMES: Final = ("read", "replace", "shell")
NAMES: Final = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
WORDS: Final = st.text(alphabet="abc xyz.,", min_size=1, max_size=20)
EXAMPLES: Final = 150


# --- drawing schemas and values ---------------------------------------------------------------


def _typed(kind: str, nullable: bool) -> object:
    return [kind, "null"] if nullable else kind


@st.composite
def scalar_schemas(draw: st.DrawFn) -> dict[str, object]:
    """A string, integer, number or boolean schema, maybe nullable, with its keywords."""
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean"]))
    nullable = draw(st.booleans())
    schema: dict[str, object] = {"type": _typed(kind, nullable)}
    if draw(st.booleans()):
        schema["description"] = draw(WORDS)
    if kind == "string" and draw(st.booleans()):
        values: list[object] = draw(st.lists(WORDS, min_size=1, max_size=3, unique=True))
        schema["enum"] = [*values, None] if nullable else values
    elif kind == "string" and draw(st.booleans()):
        schema["pattern"] = "^[a-f]*$"
    elif kind in {"integer", "number"}:
        bounds = draw(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "none"]))
        if bounds != "none":
            schema[bounds] = draw(st.integers(-5, 5))
    if kind == "string" and nullable and draw(st.booleans()):
        # Nullable the other way: anyOf of the value and null (what the portable dialect writes).
        del schema["type"]
        return {"anyOf": [{"type": "string", **schema}, {"type": "null"}]}
    return schema


def _extend(children: st.SearchStrategy[dict[str, object]]) -> st.SearchStrategy[Any]:
    arrays = st.builds(
        lambda item, nullable, bounded: {
            "type": _typed("array", nullable),
            "items": item,
            **({"minItems": 1, "maxItems": 4} if bounded else {}),
        },
        children,
        st.booleans(),
        st.booleans(),
    )
    objects = st.dictionaries(NAMES, children, min_size=1, max_size=4).flatmap(
        lambda properties: st.builds(
            lambda required, closed: {
                "type": "object",
                "properties": properties,
                "required": required,
                **({"additionalProperties": False} if closed else {}),
            },
            st.lists(st.sampled_from(sorted(properties)), unique=True),
            st.booleans(),
        )
    )
    return st.one_of(arrays, objects)


SCHEMAS: Final = st.recursive(scalar_schemas(), _extend, max_leaves=10)
ROOTS: Final = st.dictionaries(NAMES, SCHEMAS, min_size=1, max_size=5).flatmap(
    lambda properties: st.builds(
        lambda required: {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        st.lists(st.sampled_from(sorted(properties)), unique=True),
    )
)
"""Input schemas as the tools write them: a closed object at the root."""
SCALAR_VALUES: Final = st.one_of(
    st.none(), st.booleans(), st.integers(-6, 6), st.floats(-6, 6), WORDS, st.just("abc")
)


def _kinds(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return kind
    return [k for branch in schema.get("anyOf", []) for k in _kinds(branch)]


def values_of(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values near ``schema``: of its types, its enum's, null, and stray scalars."""
    options: list[st.SearchStrategy[Any]] = [SCALAR_VALUES]
    options += [values_of(branch) for branch in schema.get("anyOf", [])]
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
    kinds = _kinds(schema)
    if "array" in kinds:
        options.append(st.lists(values_of(schema["items"]), max_size=3))
    if "object" in kinds:
        properties = schema.get("properties", {})
        options.append(
            st.fixed_dictionaries(
                {}, optional={name: values_of(sub) for name, sub in properties.items()}
            )
        )
    return st.one_of(options)


def without_closed_objects(schema: object) -> object:
    """``schema`` without its boolean ``additionalProperties`` (the portable loosening)."""
    if isinstance(schema, dict):
        return {
            key: without_closed_objects(value)
            for key, value in schema.items()
            if not (key == "additionalProperties" and isinstance(value, bool))
        }
    if isinstance(schema, list):
        return [without_closed_objects(item) for item in schema]
    return schema


def admits_null(schema: Mapping[str, Any]) -> bool:
    """Whether JSON Schema validation of ``schema`` lets ``null`` through."""
    return not schema_errors(schema, None)


def pairs(
    original: Mapping[str, Any], converted: Mapping[str, Any]
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]]:
    """The nodes of a schema and of its Gemini form, side by side, through properties and
    items: (the original node, its keywords with an ``anyOf``'s non-null branch merged in,
    the converted node)."""
    branches = [b for b in original.get("anyOf", []) if b.get("type") != "null"]
    merged = {**original, **branches[0]} if len(branches) == 1 else original
    yield original, merged, converted
    for name, sub in merged.get("properties", {}).items():
        yield from pairs(sub, converted["properties"][name])
    if isinstance(merged.get("items"), Mapping):
        yield from pairs(merged["items"], converted["items"])


def every_node(schema: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(schema, Mapping):
        yield schema
        for value in schema.values():
            yield from every_node(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from every_node(item)


def nested(depth: int) -> dict[str, object]:
    """An array of arrays ... of strings: ``depth`` schemas, one inside the other."""
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def genai_parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """What the google-genai SDK sends as ``parameters`` for an MCP tool of ``schema``
    (its own conversion, as its automatic function calling runs it)."""
    declaration = mcp_to_gemini_tool(McpTool(name="t", input_schema=dict(schema)))
    [function] = declaration.function_declarations or []
    assert function.parameters is not None
    return function.parameters.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- the Gemini dialect ------------------------------------------------------------------------


@given(ROOTS)
@settings(max_examples=EXAMPLES, deadline=None)
def test_the_gemini_dialect_is_a_schema_the_gemini_api_accepts(schema: dict[str, Any]) -> None:
    """No type list, no null in an enum, no keyword the API's ``Schema`` lacks, anywhere."""
    assert [] == gemini_problems(gemini_schema(schema))


@given(ROOTS)
@settings(max_examples=EXAMPLES, deadline=None)
def test_the_gemini_dialect_keeps_what_the_model_needs(schema: dict[str, Any]) -> None:
    """Same properties and required names; nullable where null was admitted; the same
    descriptions and enum values."""
    converted = gemini_schema(schema)
    for original, merged, gemini in pairs(schema, converted):
        assert admits_null(original) == (gemini.get("nullable") is True)
        assert merged.get("description") == gemini.get("description")
        assert sorted(merged.get("properties", {})) == sorted(gemini.get("properties", {}))
        assert merged.get("required") == gemini.get("required")
        if "enum" in merged:
            assert [v for v in merged["enum"] if v is not None] == gemini["enum"]


@given(ROOTS)
@settings(max_examples=60, deadline=None)
def test_each_dialect_is_stable_and_leaves_its_input_alone(schema: dict[str, Any]) -> None:
    """Converting twice changes nothing more; the canonical schema is never modified."""
    before = copy.deepcopy(schema)
    for dialect in Dialect:
        once = schema_in(dialect, schema)
        assert once == schema_in(dialect, once)
    assert before == schema


def test_the_gemini_dialect_of_the_replace_schema_is_exactly_this(tmp_path: Path) -> None:
    """The one enum and the nested closed object, written out (so the rules can fail)."""
    canonical = json.loads(new_replace(Config(tmp_path)).definition.input_schema)
    gemini = gemini_schema(canonical)
    encoding = gemini["properties"]["encoding"]  # type: ignore[index]
    assert {"type": "string", "enum": ["utf-8", "base64"], "nullable": True} == {
        key: encoding[key] for key in ("type", "enum", "nullable")
    }
    assert "additionalProperties" not in gemini["properties"]["edits"]["items"]  # type: ignore[index]
    assert gemini_problems(canonical) == [
        "parameters.additionalProperties: unknown field",
        "parameters.properties[content].type: not one type name (['string', 'null'])",
        "parameters.properties[create].type: not one type name (['boolean', 'null'])",
        "parameters.properties[edits].type: not one type name (['array', 'null'])",
        "parameters.properties[edits].items.additionalProperties: unknown field",
        (
            "parameters.properties[edits].items.properties[replace_all].type: "
            "not one type name (['boolean', 'null'])"
        ),
        "parameters.properties[encoding].type: not one type name (['string', 'null'])",
        "parameters.properties[encoding].enum: only allowed for the string type",
        "parameters.properties[encoding].enum[2]: cannot be empty",
        "parameters.properties[expected_sha256].type: not one type name (['string', 'null'])",
    ]


def test_a_union_of_two_types_becomes_any_of_with_each_types_own_keywords() -> None:
    """``["string", "integer", "null"]`` with a pattern and a maximum: two typed branches."""
    schema = {"type": ["string", "integer", "null"], "pattern": "^a$", "maximum": 3}
    assert {
        "anyOf": [{"type": "string", "pattern": "^a$"}, {"type": "integer", "maximum": 3}],
        "nullable": True,
    } == gemini_schema(schema)
    branches = [{"type": "string"}, {"type": "integer", "minimum": 0}]
    both = {"type": ["string", "integer"], "anyOf": branches, "maximum": 3}
    assert {"anyOf": branches} == gemini_schema(both)  # its own anyOf says it already


def test_what_the_gemini_dialect_cannot_say_is_left_out_not_guessed() -> None:
    """A schema-valued property (``true``) and a non-string enum are dropped, with their
    required entry; the schema stays acceptable."""
    schema = {
        "type": "object",
        "properties": {"any": True, "level": {"type": "integer", "enum": [1, 2]}},
        "required": ["any", "level"],
    }
    converted = gemini_schema(schema)
    assert {
        "type": "object",
        "properties": {"level": {"type": "integer"}},
        "required": ["level"],
    } == converted
    assert [] == gemini_problems(converted)


# --- the portable dialect -----------------------------------------------------------------------


@given(st.data(), ROOTS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_portable_dialect_admits_exactly_what_the_canonical_schema_does(
    data: st.DataObject, schema: dict[str, Any]
) -> None:
    """On values near the schema (its types, enums, null, strays), the portable form and the
    canonical form without its closed-object flag agree on every value."""
    portable = portable_schema(schema)
    loosened = without_closed_objects(schema)
    assert isinstance(loosened, dict)
    for _ in range(5):
        value = data.draw(values_of(schema))
        assert (not schema_errors(loosened, value)) == (not schema_errors(portable, value))


@given(ROOTS)
@settings(max_examples=EXAMPLES, deadline=None)
def test_the_portable_dialect_has_no_boolean_additional_properties_and_no_null_enum(
    schema: dict[str, Any],
) -> None:
    """The two things the google-genai SDK and the Gemini API refuse are gone."""
    for node in every_node(portable_schema(schema)):
        assert not isinstance(node.get("additionalProperties"), bool)
        assert None not in node.get("enum", [])


@given(ROOTS)
@settings(max_examples=EXAMPLES, deadline=None)
def test_google_genai_turns_the_portable_dialect_into_what_the_gemini_api_accepts(
    schema: dict[str, Any],
) -> None:
    """The SDK's own conversion of the portable form passes the Gemini rules."""
    assert [] == gemini_problems(genai_parameters(portable_schema(schema)))


@given(ROOTS)
@settings(max_examples=EXAMPLES, deadline=None)
def test_a_strict_conversion_of_the_portable_dialect_is_the_strict_canonical_schema(
    schema: dict[str, Any],
) -> None:
    """The OpenAI Agents SDK's strict conversion succeeds, closes every object again and
    admits null exactly where it would for the canonical schema."""
    strict = ensure_strict_json_schema(copy.deepcopy(portable_schema(schema)))
    canonical = ensure_strict_json_schema(copy.deepcopy(schema))
    for node in every_node(strict):
        if node.get("type") == "object" or "object" in node.get("type", []):
            assert node["additionalProperties"] is False
            assert sorted(node["properties"]) == sorted(node["required"])
    for name, sub in canonical["properties"].items():
        assert admits_null(sub) == admits_null(strict["properties"][name])


def test_google_genai_raises_on_the_canonical_schema(tmp_path: Path) -> None:
    """The other side: the SDK fails on ``additionalProperties: false`` before any request."""
    canonical = json.loads(new_read(Config(tmp_path)).definition.input_schema)
    with pytest.raises(AttributeError):
        genai_parameters(canonical)
    assert [] == gemini_problems(genai_parameters(portable_schema(canonical)))


def test_the_portable_null_enum_keeps_its_keywords_with_the_values() -> None:
    """``enum: [a, b, null]`` becomes ``anyOf`` of ``{type, enum: [a, b], description}``
    and null; an enum of null alone is the null type."""
    schema = {"type": ["string", "null"], "enum": ["a", "b", None], "description": "d"}
    assert {
        "anyOf": [{"type": "string", "enum": ["a", "b"], "description": "d"}, {"type": "null"}]
    } == portable_schema(schema)
    assert {"type": "null"} == portable_schema({"enum": [None]})
    assert {"anyOf": [{"enum": ["a"]}, {"type": "null"}]} == portable_schema({"enum": ["a", None]})


# --- bounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", list(Dialect))
def test_a_schema_nested_to_the_bound_converts_and_one_deeper_is_refused(
    dialect: Dialect,
) -> None:
    """``MAXIMUM_SCHEMA_DEPTH`` levels below the root convert; one more raises ValueError
    (at listing time, not in a client)."""
    deepest = schema_in(dialect, nested(MAXIMUM_SCHEMA_DEPTH + 1))
    assert MAXIMUM_SCHEMA_DEPTH == json.dumps(deepest).count('"items"')
    with pytest.raises(ValueError, match="nested too deeply"):
        schema_in(dialect, nested(MAXIMUM_SCHEMA_DEPTH + 2))


class _SchemaTool:
    """A tool that only declares ``schema`` as its input (never called)."""

    def __init__(self, schema: Mapping[str, object]) -> None:
        self.definition = Definition(
            "deep", "Declares a deep schema.", schema, Effect.READ_ONLY, ReplaySafety.SAFE, ()
        )

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        raise AssertionError("never called")


async def test_a_server_whose_tool_nests_past_the_bound_is_refused_when_built() -> None:
    """Failure at build time, not in a client: a tool whose schema nests one level past the
    bound is refused by ``mcp_server``; at the bound it is listed."""
    at_bound: dict[str, object] = {
        "type": "object",
        "properties": {"a": nested(MAXIMUM_SCHEMA_DEPTH)},
    }
    async with Client(mcp_server(Dispatcher([_SchemaTool(at_bound)]))) as client:
        [listed] = (await client.list_tools()).tools
    assert portable_schema(at_bound) == listed.input_schema
    past: dict[str, object] = {
        "type": "object",
        "properties": {"a": nested(MAXIMUM_SCHEMA_DEPTH + 1)},
    }
    with pytest.raises(ValueError, match="nested too deeply"):
        mcp_server(Dispatcher([_SchemaTool(past)]))


# --- choosing the dialect -------------------------------------------------------------------------


@given(st.text(max_size=40))
def test_only_a_client_named_for_gemini_gets_the_gemini_dialect(name: str) -> None:
    """Any name holding "gemini" (in any case) is Gemini's; every other name, and none, is
    portable."""
    expected = Dialect.GEMINI if "gemini" in name.casefold() else Dialect.PORTABLE
    assert expected is dialect_of(name)
    assert Dialect.GEMINI is dialect_of(f"x{name}GeMiNi")
    assert Dialect.PORTABLE is dialect_of(None)


async def _listed(client_name: str | None, root: Path) -> dict[str, dict[str, Any]]:
    """The input schemas the real server lists to a client named ``client_name``."""
    server = StdioServerParameters(command=SPICE_CODING, args=["serve", "--root", str(root)])
    info = None if client_name is None else Implementation(name=client_name, version="1")
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write, client_info=info) as session,
        ):
            await session.initialize()
            tools = (await session.list_tools()).tools
    return {tool.name: tool.input_schema for tool in tools}


def _canonical(root: Path) -> dict[str, dict[str, Any]]:
    """The definitions' own schemas, as ``spice-coding tools`` prints them."""
    import subprocess  # noqa: PLC0415 - only this helper runs the CLI

    done = subprocess.run(
        [SPICE_CODING, "tools", "--root", str(root)], capture_output=True, check=True, timeout=60
    )
    return {tool["name"]: tool["input_schema"] for tool in json.loads(done.stdout)["tools"]}


@pytest.mark.parametrize(
    ("client_name", "dialect"),
    [
        (GEMINI_CLI_NAME, Dialect.GEMINI),
        ("Gemini Code Assist", Dialect.GEMINI),
        (None, Dialect.PORTABLE),  # the mcp SDK's default name, "mcp" (google-genai's too)
        ("claude-code", Dialect.PORTABLE),
        ("an-editor-nobody-knows", Dialect.PORTABLE),
    ],
)
async def test_the_real_server_lists_each_client_its_dialect(
    tmp_path: Path, client_name: str | None, dialect: Dialect
) -> None:
    """Over stdio, ``initialize``'s name picks the listing; an unknown name keeps the
    portable one; the Gemini listing passes the Gemini rules."""
    listed = await _listed(client_name, tmp_path)
    canonical = _canonical(tmp_path)
    assert sorted(TOOL_NAMES) == sorted(listed)
    for name in TOOL_NAMES:
        assert schema_in(dialect, canonical[name]) == listed[name]
        if dialect is Dialect.GEMINI:
            assert [] == gemini_problems(listed[name])
        else:
            assert listed[name] != canonical[name]  # additionalProperties: false is gone
