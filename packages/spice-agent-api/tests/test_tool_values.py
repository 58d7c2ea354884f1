"""Contract §2: bounds, identities, ``Definition`` and fingerprint, ``Call``, ``Result``."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import pickle
import struct
import types
from collections.abc import Callable

import pytest

from spice.agent.tool import (
    MAXIMUM_IDENTITY_BYTES,
    MAXIMUM_MESSAGE_BYTES,
    MAXIMUM_PAYLOAD_BYTES,
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionState,
    Progress,
    ReplaySafety,
    Result,
    RetryDisposition,
)


def reference_fingerprint(
    name: str,
    description: str,
    input_schema: str,
    effect: str,
    replay_safety: str,
    capabilities: list[str],
) -> str:
    """The contract's algorithm, written again from its text, independent of the package."""
    digest = hashlib.sha256()
    for field in (name, description, input_schema, effect, replay_safety, *sorted(capabilities)):
        encoded = field.encode("utf-8")
        digest.update(struct.pack(">Q", len(encoded)))
        digest.update(encoded)
    return digest.hexdigest()


def json_string_of_size(size: int, filler: str = "a") -> str:
    """A JSON string literal of exactly ``size`` UTF-8 bytes, made of ``filler`` then ASCII."""
    body = size - 2
    unit = len(filler.encode("utf-8"))
    count = body // unit
    return '"' + filler * count + "a" * (body - count * unit) + '"'


def json_object_of_size(size: int, filler: str = "a") -> str:
    """A JSON object text of exactly ``size`` UTF-8 bytes: ``{"k":"..."}``."""
    return '{"k":' + json_string_of_size(size - 6, filler) + "}"


def sample_definition(**changes: object) -> Definition:
    """A valid mutating definition, with ``changes`` applied to its arguments."""
    fields: dict[str, object] = {
        "name": "replace",
        "description": "Replace a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        "effect": Effect.MUTATING,
        "replay_safety": ReplaySafety.IDEMPOTENT,
        "capabilities": [Capability.FILESYSTEM_WRITE, Capability.FILESYSTEM_READ],
    }
    fields.update(changes)
    return Definition(**fields)  # type: ignore[arg-type]


# --- the bounds -----------------------------------------------------------------------------


def test_bounds_have_the_contract_values() -> None:
    """The three bounds are 1 MiB, 4096 bytes and 128 bytes."""
    assert (1 << 20, 4096, 128) == (
        MAXIMUM_PAYLOAD_BYTES,
        MAXIMUM_MESSAGE_BYTES,
        MAXIMUM_IDENTITY_BYTES,
    )


def test_enums_have_the_contract_spellings() -> None:
    """Every enum value is spelled exactly as the contract writes it."""
    assert ["read_only", "mutating"] == [e.value for e in Effect]
    assert ["safe", "idempotent", "unsafe"] == [r.value for r in ReplaySafety]
    assert ["definitive", "uncertain"] == [s.value for s in ExecutionState]
    assert ["never", "allowed"] == [r.value for r in RetryDisposition]
    assert [
        "filesystem.read",
        "filesystem.write",
        "process.execute",
        "network.access",
        "secrets.read",
        "environment.read",
        "environment.write",
    ] == [c.value for c in Capability]


# --- identities -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "identity", ["a" * 128, "é" * 64, "€" * 42 + "ab", "x", "a b", "mcp-1", "a\u00a0b", "日本"]
)
def test_an_identity_at_the_bound_is_accepted(identity: str) -> None:
    """Names and ids up to 128 UTF-8 bytes (multi-byte included) are accepted."""
    assert identity == Call(identity, identity).id


@pytest.mark.parametrize("identity", ["a" * 129, "é" * 64 + "a", "€" * 43])
def test_an_identity_one_byte_past_the_bound_is_rejected(identity: str) -> None:
    """A name or id of 129 UTF-8 bytes is rejected, whether as id or as name."""
    with pytest.raises(ValueError, match="exceeds 128 bytes"):
        Call(identity, "read")
    with pytest.raises(ValueError, match="exceeds 128 bytes"):
        Call("1", identity)


@pytest.mark.parametrize(
    ("identity", "rule"),
    [
        ("", "must not be empty"),
        (" a", "surrounding whitespace"),
        ("a\n", "surrounding whitespace"),
        ("a\0b", "control characters"),
        ("a\x1bb", "control characters"),
        ("a\x7fb", "control characters"),
        ("é\x85b", "control characters"),
        ("a\x9fb", "control characters"),
        ("a\ud800", "lone surrogate"),
    ],
)
def test_an_identity_breaking_a_rule_is_rejected(identity: str, rule: str) -> None:
    """Empty ids, surrounding space, control characters and lone surrogates are rejected."""
    with pytest.raises(ValueError, match=rule):
        Call(identity, "read")


@pytest.mark.parametrize("identity", [None, 1, b"id", ["id"]])
def test_an_identity_of_another_type_is_a_value_error(identity: object) -> None:
    """A non-string id is a ValueError, not a TypeError."""
    with pytest.raises(ValueError, match="must be a string"):
        Call(identity, "read")  # type: ignore[arg-type]


# --- Definition -----------------------------------------------------------------------------


def test_a_definition_keeps_its_fields_and_canonical_schema() -> None:
    """Every field is kept; the schema becomes canonical JSON text; enums are real enums."""
    definition = Definition(
        "read", "Read.", {"b": [1, 2], "a": "é"}, "read_only", "safe", ["filesystem.read"]
    )
    assert "read" == definition.name
    assert "Read." == definition.description
    assert '{"a":"é","b":[1,2]}' == definition.input_schema
    assert Effect.READ_ONLY is definition.effect
    assert ReplaySafety.SAFE is definition.replay_safety
    assert (Capability.FILESYSTEM_READ,) == definition.capabilities


def test_a_mapping_and_a_text_schema_give_the_same_definition() -> None:
    """A mapping and any JSON text of the same object give equal definitions and fingerprints."""
    from_mapping = sample_definition(input_schema={"type": "object", "required": ["path"]})
    from_text = sample_definition(input_schema='{ "required" : [ "path" ],\n "type":"object" }')
    assert from_mapping == from_text
    assert from_mapping.fingerprint == from_text.fingerprint


def test_the_schema_is_exactly_the_contract_canonical_form() -> None:
    """The stored schema equals ``json.dumps(sort_keys, compact separators, no ASCII escapes)``."""
    schema = {"z": {"y": 1.5, "x": None}, "a": ["\u2028", "ü", True]}
    expected = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert expected == sample_definition(input_schema=schema).input_schema


@pytest.mark.parametrize(
    "schema", ["[]", "1", "null", "{", '{"a":NaN}', '{"a":Infinity}', "{} {}", '{"a":1e400}', ""]
)
def test_a_schema_that_is_not_a_strict_json_object_is_rejected(schema: str) -> None:
    """Arrays, scalars, broken text, NaN, infinity and trailing data are rejected."""
    with pytest.raises(ValueError, match="input schema"):
        sample_definition(input_schema=schema)


@pytest.mark.parametrize(
    "schema",
    [{"a": float("nan")}, {"a": {1, 2}}, {("t",): 1}, 7, None, ["a"], b"{}", {"a": "\udc80"}],
)
def test_a_schema_value_that_cannot_be_json_is_rejected(schema: object) -> None:
    """Mappings with non-JSON values or keys, and non-mappings, are ValueErrors."""
    with pytest.raises(ValueError, match="input schema"):
        sample_definition(input_schema=schema)


def test_a_recursive_schema_mapping_is_rejected() -> None:
    """A mapping that contains itself is a ValueError, not a RecursionError."""
    schema: dict[str, object] = {}
    schema["self"] = schema
    with pytest.raises(ValueError, match="input schema"):
        sample_definition(input_schema=schema)


def test_a_schema_at_the_payload_bound_is_accepted_and_one_past_rejected() -> None:
    """The canonical schema may be exactly 1 MiB (multi-byte text), not one byte more."""
    at_bound = json_object_of_size(MAXIMUM_PAYLOAD_BYTES, "€")
    assert MAXIMUM_PAYLOAD_BYTES == len(at_bound.encode("utf-8"))
    assert at_bound == sample_definition(input_schema=at_bound).input_schema
    assert at_bound == sample_definition(input_schema=json.loads(at_bound)).input_schema
    past = json_object_of_size(MAXIMUM_PAYLOAD_BYTES + 1, "€")
    with pytest.raises(ValueError, match="input schema"):
        sample_definition(input_schema=past)
    with pytest.raises(ValueError, match="input schema"):
        sample_definition(input_schema=json.loads(past))


def test_a_description_at_the_message_bound_is_accepted_and_one_past_rejected() -> None:
    """A description of 4096 UTF-8 bytes is accepted; 4097 is rejected; empty is rejected."""
    assert 4096 == len(sample_definition(description="é" * 2048).description.encode())
    with pytest.raises(ValueError, match="exceeds 4096 bytes"):
        sample_definition(description="é" * 2048 + "a")
    with pytest.raises(ValueError, match="must not be empty"):
        sample_definition(description="")


@pytest.mark.parametrize("replay", [ReplaySafety.IDEMPOTENT, ReplaySafety.UNSAFE])
def test_a_read_only_tool_must_be_replay_safe(replay: ReplaySafety) -> None:
    """Read-only with idempotent or unsafe replay is rejected."""
    with pytest.raises(ValueError, match="read-only tool must be replay-safe"):
        sample_definition(effect=Effect.READ_ONLY, replay_safety=replay, capabilities=[])


def test_a_mutating_tool_cannot_be_replay_safe() -> None:
    """Mutating with safe replay is rejected; idempotent and unsafe are accepted."""
    with pytest.raises(ValueError, match="mutating tool cannot be replay-safe"):
        sample_definition(replay_safety=ReplaySafety.SAFE)
    assert ReplaySafety.UNSAFE is sample_definition(replay_safety="unsafe").replay_safety


@pytest.mark.parametrize(
    "capability",
    [
        Capability.FILESYSTEM_WRITE,
        Capability.PROCESS_EXECUTE,
        Capability.NETWORK_ACCESS,
        Capability.ENVIRONMENT_WRITE,
    ],
)
def test_a_read_only_tool_may_not_declare_a_mutation_capable_capability(
    capability: Capability,
) -> None:
    """Each of the four mutation-capable capabilities is refused on a read-only tool."""
    with pytest.raises(ValueError, match="mutation-capable"):
        sample_definition(
            effect="read_only", replay_safety="safe", capabilities=["filesystem.read", capability]
        )


def test_a_read_only_tool_may_declare_every_other_capability() -> None:
    """filesystem.read, secrets.read and environment.read are fine on a read-only tool."""
    definition = sample_definition(
        effect="read_only",
        replay_safety="safe",
        capabilities=["secrets.read", "environment.read", "filesystem.read"],
    )
    assert (
        Capability.ENVIRONMENT_READ,
        Capability.FILESYSTEM_READ,
        Capability.SECRETS_READ,
    ) == definition.capabilities


def test_a_mutating_tool_may_declare_all_capabilities_kept_sorted() -> None:
    """All seven capabilities given in reverse order are kept, sorted by value."""
    definition = sample_definition(capabilities=reversed(list(Capability)))
    assert tuple(sorted(Capability, key=lambda c: c.value)) == definition.capabilities
    assert [c.value for c in definition.capabilities] == sorted(c.value for c in Capability)


@pytest.mark.parametrize(
    "capabilities",
    [
        ["filesystem.read", "filesystem.read"],
        [Capability.FILESYSTEM_READ, "filesystem.read"],
    ],
)
def test_duplicate_capabilities_are_rejected(capabilities: list[object]) -> None:
    """A capability listed twice, as enum or text, is rejected."""
    with pytest.raises(ValueError, match="must not repeat"):
        sample_definition(capabilities=capabilities)


@pytest.mark.parametrize("capabilities", ["filesystem.read", b"x", 3, None, ["filesystem.exec"]])
def test_capabilities_that_are_not_a_collection_of_known_values_are_rejected(
    capabilities: object,
) -> None:
    """A bare string, bytes, a number, None or an unknown value is rejected."""
    with pytest.raises(ValueError, match="capabilit"):
        sample_definition(capabilities=capabilities)


@pytest.mark.parametrize(
    ("field", "value"),
    [("effect", "writes"), ("effect", 1), ("replay_safety", "maybe"), ("replay_safety", None)],
)
def test_an_unknown_effect_or_replay_safety_is_rejected(field: str, value: object) -> None:
    """An effect or replay safety outside its enum is rejected."""
    with pytest.raises(ValueError, match="not a known value"):
        sample_definition(**{field: value})


def test_a_definition_is_immutable() -> None:
    """Assigning a field of a definition fails."""
    definition = sample_definition()
    with pytest.raises(dataclasses.FrozenInstanceError):
        definition.name = "other"  # type: ignore[misc]


# --- fingerprint ----------------------------------------------------------------------------


def test_the_fingerprint_equals_an_independent_computation() -> None:
    """The fingerprint is SHA-256 over 8-byte big-endian length-prefixed UTF-8 fields."""
    definition = sample_definition(name="wrïte", description="Écrire ✓.")
    expected = reference_fingerprint(
        "wrïte",
        "Écrire ✓.",
        '{"properties":{"path":{"type":"string"}},"type":"object"}',
        "mutating",
        "idempotent",
        ["filesystem.write", "filesystem.read"],
    )
    assert expected == definition.fingerprint


def test_the_fingerprint_of_a_known_definition_never_changes() -> None:
    """A fixed definition keeps a fixed fingerprint (a wire-compatibility anchor)."""
    definition = Definition("t", "d", "{}", "read_only", "safe", [])
    assert reference_fingerprint("t", "d", "{}", "read_only", "safe", []) == definition.fingerprint
    assert (
        "90e0797d99cf8d07ed59be452941d6d1184797470a0db85e8ad8fb153bbf4180" == definition.fingerprint
    )


def test_the_fingerprint_is_stable_across_copies() -> None:
    """Copies, deep copies, pickles and re-constructions all share the fingerprint."""
    definition = sample_definition()
    rebuilt = sample_definition()
    clones = [copy.copy(definition), copy.deepcopy(definition), rebuilt]
    clones.append(pickle.loads(pickle.dumps(definition)))  # noqa: S301 - our own bytes
    assert all(definition.fingerprint == c.fingerprint for c in clones)
    assert all(definition == c for c in clones)
    assert hash(definition) == hash(rebuilt)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "replacf"),
        ("description", "Replace a file!"),
        ("input_schema", {"type": "object"}),
        ("replay_safety", ReplaySafety.UNSAFE),
        ("capabilities", [Capability.FILESYSTEM_WRITE]),
        ("capabilities", [Capability.FILESYSTEM_WRITE, Capability.FILESYSTEM_READ, "secrets.read"]),
    ],
)
def test_the_fingerprint_differs_when_one_field_differs(field: str, value: object) -> None:
    """Changing any single field changes the fingerprint."""
    assert sample_definition().fingerprint != sample_definition(**{field: value}).fingerprint


def test_the_fingerprint_differs_when_only_the_effect_differs() -> None:
    """Read-only/safe and mutating/safe cannot coexist, so compare two honest pairs by effect."""
    read_only = Definition("t", "d", "{}", "read_only", "safe", [])
    mutating = Definition("t", "d", "{}", "mutating", "idempotent", [])
    assert read_only.fingerprint != mutating.fingerprint
    assert reference_fingerprint("t", "d", "{}", "mutating", "idempotent", []) == (
        mutating.fingerprint
    )


def test_length_prefixes_keep_field_boundaries_apart() -> None:
    """Moving text across a field boundary changes the fingerprint (no ambiguity)."""
    left = Definition("ab", "c", "{}", "read_only", "safe", [])
    right = Definition("a", "bc", "{}", "read_only", "safe", [])
    assert left.fingerprint != right.fingerprint


def test_the_fingerprint_ignores_the_order_capabilities_were_given_in() -> None:
    """Capabilities given in any order give one fingerprint."""
    forward = sample_definition(capabilities=["filesystem.read", "filesystem.write"])
    backward = sample_definition(capabilities=["filesystem.write", "filesystem.read"])
    assert forward.fingerprint == backward.fingerprint


# --- Call -----------------------------------------------------------------------------------


def test_a_call_keeps_its_fields_and_defaults_to_empty_arguments() -> None:
    """A call keeps id, name and arguments; arguments default to ``{}``."""
    assert ("1", "read", "{}") == dataclasses.astuple(Call("1", "read"))
    assert '[1, "x"]' == Call("1", "read", '[1, "x"]').arguments


def test_call_arguments_at_the_payload_bound_are_accepted_with_multibyte_text() -> None:
    """Arguments of exactly 1 MiB are accepted, with 1-, 2-, 3- and 4-byte characters."""
    for filler in ("a", "é", "€", "😀"):
        arguments = json_string_of_size(MAXIMUM_PAYLOAD_BYTES, filler)
        assert MAXIMUM_PAYLOAD_BYTES == len(arguments.encode("utf-8"))
        assert arguments == Call("1", "read", arguments).arguments


def test_call_arguments_one_byte_past_the_payload_bound_are_rejected() -> None:
    """Arguments of 1 MiB + 1 byte are rejected, also when the last character is multi-byte."""
    for filler in ("a", "€", "😀"):
        arguments = json_string_of_size(MAXIMUM_PAYLOAD_BYTES + 1, filler)
        with pytest.raises(ValueError, match=f"exceeds {MAXIMUM_PAYLOAD_BYTES} bytes"):
            Call("1", "read", arguments)
    assert MAXIMUM_PAYLOAD_BYTES + 2 == len(('"' + "é" * (2**19) + '"').encode())
    with pytest.raises(ValueError, match="exceeds"):
        Call("1", "read", '"' + "é" * (2**19) + '"')


@pytest.mark.parametrize(
    "arguments", ["", "{", "{'a': 1}", "NaN", '{"a":-Infinity}', "{} x", "[1,]", '{"a":"\x01"}']
)
def test_call_arguments_that_are_not_strict_json_are_rejected(arguments: str) -> None:
    """Empty text, broken JSON, NaN/Infinity, trailing data and raw control characters fail."""
    with pytest.raises(ValueError, match="arguments"):
        Call("1", "read", arguments)


@pytest.mark.parametrize("arguments", [{"a": 1}, None, b"{}", 3])
def test_call_arguments_must_be_text(arguments: object) -> None:
    """Arguments are JSON text; a mapping, bytes or a number is a ValueError."""
    with pytest.raises(ValueError, match="arguments must be a string"):
        Call("1", "read", arguments)  # type: ignore[arg-type]


def test_call_arguments_nested_too_deeply_are_a_value_error() -> None:
    """Arguments nested past the parser's recursion limit are a ValueError."""
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(ValueError, match="arguments must be valid JSON"):
        Call("1", "read", deep)


def test_a_call_repr_shows_no_arguments() -> None:
    """The repr of a call names its id and tool but never its arguments."""
    text = repr(Call("7", "read", '{"path":"secret-file"}'))
    assert "secret-file" not in text
    assert "'7'" in text
    assert "'read'" in text


# --- Result ---------------------------------------------------------------------------------


def test_a_result_accepts_a_mapping_or_text() -> None:
    """A mapping is stored as compact sorted JSON; text is stored as given."""
    assert '{"a":2,"b":"é"}' == Result("1", {"b": "é", "a": 2}).content
    assert '{ "b": 1 }' == Result("1", '{ "b": 1 }').content


def test_a_result_with_a_problem_is_an_error() -> None:
    """``problem`` set means a model-visible failure; absent means success."""
    failed = Result("1", {"ok": False, "code": "stale"}, "the file changed")
    assert failed.is_error
    assert "the file changed" == failed.problem
    ok = Result("1", {"ok": True})
    assert not ok.is_error
    assert ok.problem is None


@pytest.mark.parametrize("content", ["[]", '"x"', "1", "{", {"a": float("inf")}, None, 4])
def test_result_content_must_be_a_json_object(content: object) -> None:
    """Arrays, scalars, broken text, non-JSON values and non-text are rejected."""
    with pytest.raises(ValueError, match="result content"):
        Result("1", content)  # type: ignore[arg-type]


def test_result_content_at_the_payload_bound_is_accepted_and_one_past_rejected() -> None:
    """Content of exactly 1 MiB (3-byte characters) is accepted, as text and as a mapping."""
    at_bound = json_object_of_size(MAXIMUM_PAYLOAD_BYTES, "€")
    assert at_bound == Result("1", at_bound).content
    assert at_bound == Result("1", json.loads(at_bound)).content
    past = json_object_of_size(MAXIMUM_PAYLOAD_BYTES + 1, "€")
    with pytest.raises(ValueError, match="exceeds"):
        Result("1", past)
    with pytest.raises(ValueError, match="exceeds"):
        Result("1", json.loads(past))


def test_a_problem_at_the_message_bound_is_accepted_and_one_past_rejected() -> None:
    """A problem of 4096 bytes is accepted, 4097 bytes and an empty problem are rejected."""
    assert 4096 == len(Result("1", {}, "€" * 1365 + "a").problem.encode())  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="exceeds 4096 bytes"):
        Result("1", {}, "€" * 1365 + "ab")
    with pytest.raises(ValueError, match="problem must not be empty"):
        Result("1", {}, "")


def test_a_result_built_from_a_tools_own_content_is_encoded_once_in_its_key_order() -> None:
    """``from_content`` keeps the mapping's key order (``ok`` first), compact, real Unicode."""
    result = Result.from_content("1", {"ok": True, "path": "é.txt", "bytes": 3})
    assert '{"ok":true,"path":"é.txt","bytes":3}' == result.content
    assert {"ok": True, "path": "é.txt", "bytes": 3} == dict(result.content_object)
    assert ["ok", "path", "bytes"] == list(result.content_object)
    assert not result.is_error


def test_a_result_from_content_equals_the_validated_result_of_its_text() -> None:
    """The two construction paths give equal values for the same text and problem."""
    built = Result.from_content("7", {"ok": False, "code": "stale"}, "the file changed")
    validated = Result("7", '{"ok":false,"code":"stale"}', "the file changed")
    assert validated == built
    assert hash(validated) == hash(built)
    assert built.is_error
    assert "the file changed" == built.problem


def test_a_result_from_content_takes_any_mapping() -> None:
    """A read-only mapping (not a ``dict``) is encoded like a dict of the same items."""
    proxy = types.MappingProxyType({"ok": True, "n": [1, {"a": (2,)}]})
    result = Result.from_content("1", proxy)
    assert '{"ok":true,"n":[1,{"a":[2]}]}' == result.content
    assert {"ok": True, "n": [1, {"a": (2,)}]} == dict(result.content_object)


def test_a_result_from_content_keeps_a_snapshot_of_the_top_level() -> None:
    """A key added to the mapping afterwards reaches neither the text nor the object."""
    content: dict[str, object] = {"ok": True}
    result = Result.from_content("1", content)
    content["late"] = 1
    assert '{"ok":true}' == result.content
    assert {"ok": True} == dict(result.content_object)


def test_the_content_object_is_read_only() -> None:
    """``content_object`` is a read-only view: assigning a key raises ``TypeError``."""
    for result in (Result.from_content("1", {"ok": True}), Result("1", '{"ok":true}')):
        view = result.content_object
        with pytest.raises(TypeError):
            view["ok"] = False  # type: ignore[index]
        assert {"ok": True} == dict(result.content_object)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{ "b": [1, {"c": null}] }', {"b": [1, {"c": None}]}),
        ({"b": "é", "a": 2}, {"a": 2, "b": "é"}),
    ],
)
def test_the_content_object_of_validated_content_is_its_decoded_text(
    content: str | dict[str, object], expected: dict[str, object]
) -> None:
    """Text or a mapping given to the constructor: ``content_object`` is the parsed text."""
    result = Result("1", content)
    assert expected == dict(result.content_object)
    assert json.loads(result.content) == dict(result.content_object)


def _pickled(result: Result) -> Result:
    clone = pickle.loads(pickle.dumps(result))  # noqa: S301 - our own bytes
    assert isinstance(clone, Result)
    return clone


@pytest.mark.parametrize("make", [copy.copy, copy.deepcopy, _pickled])
def test_a_copied_or_unpickled_result_decodes_its_text_on_first_use(
    make: Callable[[Result], Result],
) -> None:
    """A copy carries only the fields; its ``content_object`` is decoded from the text."""
    original = Result.from_content("1", {"ok": True, "items": [1, 2]})
    copied = make(original)
    assert original == copied
    assert {"ok": True, "items": [1, 2]} == dict(copied.content_object)
    assert {"ok": True, "items": [1, 2]} == dict(copied.content_object)


def test_replacing_a_results_content_gives_the_new_content_object() -> None:
    """``dataclasses.replace`` validates the new text; the object follows it."""
    replaced = dataclasses.replace(Result.from_content("1", {"ok": True}), content='{"ok":false}')
    assert {"ok": False} == dict(replaced.content_object)


@pytest.mark.parametrize(
    "content",
    [
        {1: "number key"},
        {"ok": {2: "nested number key"}},
        {"ok": [{None: "key in a list"}]},
        {"ok": ({True: "key in a tuple"},)},
        {"ok": [[[{"fine": 1}, {2.5: "deep key"}]]]},
        {"ok": float("nan")},
        {"ok": float("inf")},
        {"ok": object()},
        {"ok": b"bytes"},
        '{"ok":true}',
        ["ok"],
        None,
    ],
)
def test_a_result_from_content_rejects_what_is_not_a_json_object_mapping(content: object) -> None:
    """Non-string keys at any level, NaN, non-JSON values and non-mappings are rejected."""
    with pytest.raises(ValueError, match="result content"):
        Result.from_content("1", content)  # type: ignore[arg-type]


def test_a_result_from_content_rejects_a_lone_surrogate_and_names_no_content() -> None:
    """A lone surrogate in a value is invalid Unicode; the message does not quote it."""
    with pytest.raises(ValueError, match="result content") as raised:
        Result.from_content("1", {"ok": "secret\ud800"})
    assert "secret" not in str(raised.value)


def test_a_result_from_content_rejects_nesting_deeper_than_json_can_encode() -> None:
    """Nesting past the interpreter's recursion limit is a ``ValueError``, not a crash."""
    deep: dict[str, object] = {}
    for _ in range(100_000):
        deep = {"k": deep}
    with pytest.raises(ValueError, match="result content"):
        Result.from_content("1", deep)


def test_a_result_from_content_at_the_payload_bound_is_accepted_and_one_past_rejected() -> None:
    """Content encoding to exactly 1 MiB is accepted; one byte more is rejected."""
    at_bound = json.loads(json_object_of_size(MAXIMUM_PAYLOAD_BYTES, "€"))
    assert MAXIMUM_PAYLOAD_BYTES == len(Result.from_content("1", at_bound).content.encode())
    past = json.loads(json_object_of_size(MAXIMUM_PAYLOAD_BYTES + 1, "€"))
    with pytest.raises(ValueError, match="exceeds"):
        Result.from_content("1", past)


@pytest.mark.parametrize(("call_id", "problem"), [(" 1", None), ("", None), ("1", ""), ("1", 3)])
def test_a_result_from_content_validates_its_id_and_problem(call_id: str, problem: object) -> None:
    """The id and the problem follow the same rules as the constructor's."""
    with pytest.raises(ValueError, match=r"call id|problem"):
        Result.from_content(call_id, {"ok": False}, problem)  # type: ignore[arg-type]


def test_a_result_repr_shows_no_content() -> None:
    """The repr of a result tells its id and error state, never its content."""
    for result in (
        Result("1", {"content": "file body"}),
        Result.from_content("1", {"content": "file body"}),
    ):
        text = repr(result)
        assert "file body" not in text
        assert "is_error=False" in text


# --- Progress -------------------------------------------------------------------------------


def test_progress_at_the_message_bound_is_accepted_and_one_past_rejected() -> None:
    """A progress message of 4096 bytes is accepted; 4097 and empty are rejected."""
    assert "é" * 2048 == Progress("1", "é" * 2048).message
    with pytest.raises(ValueError, match="exceeds 4096 bytes"):
        Progress("1", "é" * 2048 + "a")
    with pytest.raises(ValueError, match="must not be empty"):
        Progress("1", "")
    with pytest.raises(ValueError, match="progress call id"):
        Progress(" 1", "reading")
