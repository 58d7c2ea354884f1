"""Properties of the contract's values over generated input (hypothesis)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable

import pytest
from api_fakes import FakeTool, read_only_definition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    SECRET_MARK,
    capabilities,
    definitions,
    identities,
    invalid_identities,
    json_objects,
    json_values,
    secrets,
)

from spice.agent.dispatch import Dispatcher
from spice.agent.process import Lookup
from spice.agent.tool import (
    MAXIMUM_MESSAGE_BYTES,
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    Interruption,
    Progress,
    Result,
)

HEX64 = re.compile(r"[0-9a-f]{64}")
UNDER_LOAD = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""No per-example deadline: the machine is shared, and speed is not what these tests check."""


def assert_clean_value_error(build: Callable[[], object], secret: str) -> None:
    """``build`` raises ValueError (nothing else) with a bounded message free of ``secret``."""
    with pytest.raises(ValueError) as caught:  # noqa: PT011 - the message is checked below
        build()
    assert type(caught.value) is ValueError
    message = str(caught.value)
    assert len(message.encode("utf-8")) <= MAXIMUM_MESSAGE_BYTES
    assert secret not in message
    assert SECRET_MARK not in message
    assert SECRET_MARK not in repr(caught.value)


@UNDER_LOAD
@given(identities(), identities(), json_values())
def test_any_valid_identity_and_json_round_trip_through_a_call(
    call_id: str, name: str, value: object
) -> None:
    """A call keeps any valid id and name, and its arguments decode to the value given."""
    call = Call(call_id, name, json.dumps(value, ensure_ascii=False))
    assert (call_id, name) == (call.id, call.name)
    assert value == json.loads(call.arguments)


@UNDER_LOAD
@given(identities(), json_objects())
def test_any_json_object_round_trips_through_a_result(
    call_id: str, content: dict[str, object]
) -> None:
    """Mapping and text content both decode back to the object given."""
    assert content == json.loads(Result(call_id, content).content)
    text = json.dumps(content)
    assert content == json.loads(Result(call_id, text).content)


@UNDER_LOAD
@given(identities(), json_objects())
def test_any_json_object_built_by_a_tool_is_one_compact_text_of_its_object(
    call_id: str, content: dict[str, object]
) -> None:
    """``from_content``: its text decodes to the object, in its key order, and equals the
    validated result of the same text; ``content_object`` is that object."""
    built = Result.from_content(call_id, content)
    assert content == json.loads(built.content)
    assert list(content) == list(json.loads(built.content))
    assert content == dict(built.content_object)
    assert Result(call_id, built.content) == built
    assert content == dict(Result(call_id, built.content).content_object)


@UNDER_LOAD
@given(json_objects())
def test_a_schema_is_the_same_from_a_mapping_and_from_any_text_of_it(
    schema: dict[str, object],
) -> None:
    """The canonical schema does not depend on how the object was written."""
    base = ("t", "d")
    from_mapping = Definition(*base, schema, "read_only", "safe", [])
    from_text = Definition(*base, json.dumps(schema, indent=2), "read_only", "safe", [])
    assert from_mapping == from_text
    assert schema == json.loads(from_mapping.input_schema)


@UNDER_LOAD
@given(definitions())
def test_any_definition_has_a_deterministic_64_hex_fingerprint(definition: Definition) -> None:
    """The fingerprint is 64 lowercase hex digits and the same for an equal rebuild."""
    assert HEX64.fullmatch(definition.fingerprint)
    rebuilt = Definition(
        definition.name,
        definition.description,
        definition.input_schema,
        definition.effect,
        definition.replay_safety,
        reversed(definition.capabilities),
    )
    assert definition.fingerprint == rebuilt.fingerprint
    assert definition.fingerprint == copy.deepcopy(definition).fingerprint
    assert list(definition.capabilities) == sorted(definition.capabilities)


@UNDER_LOAD
@given(capabilities(Effect.MUTATING))
def test_any_capability_set_is_kept_sorted_and_unique(listed: list[Capability]) -> None:
    """A mutating tool keeps any unique capability list, sorted."""
    definition = Definition("t", "d", "{}", "mutating", "unsafe", listed)
    assert tuple(sorted(listed)) == definition.capabilities


@UNDER_LOAD
@given(st.lists(identities(), max_size=8, unique=True))
def test_a_dispatcher_lists_any_unique_names_sorted(names: list[str]) -> None:
    """Any set of uniquely named tools is listed sorted by name."""
    dispatcher = Dispatcher([FakeTool(read_only_definition(n)) for n in names])
    assert sorted(names) == [d.name for d in dispatcher.definitions]


@UNDER_LOAD
@given(invalid_identities())
def test_an_invalid_identity_is_always_a_clean_value_error(identity: str) -> None:
    """Wherever an identity goes, an invalid one is a bounded ValueError without its text."""
    builders: list[Callable[[], object]] = [
        lambda: Call(identity, "t"),
        lambda: Call("1", identity),
        lambda: Result(identity, {}),
        lambda: Result.from_content(identity, {}),
        lambda: Progress(identity, "working"),
        lambda: ExecutionError(identity, "definitive", "never", "failed"),
        lambda: Interruption(identity, "definitive", "never"),
        lambda: Definition(identity, "d", {}, "read_only", "safe"),
    ]
    for build in builders:
        assert_clean_value_error(build, identity)


@UNDER_LOAD
@given(secrets(), st.sampled_from(["{", "[", "NaN", "{} x", "'", '{"a":}', "tru"]))
def test_invalid_json_is_always_a_clean_value_error(secret: str, broken: str) -> None:
    """Broken JSON text carrying a secret fails everywhere without leaking it."""
    text = broken + json.dumps(secret, ensure_ascii=False)
    builders: list[Callable[[], object]] = [
        lambda: Call("1", "t", text),
        lambda: Result("1", text),
        lambda: Definition("t", "d", text, "read_only", "safe"),
    ]
    for build in builders:
        assert_clean_value_error(build, secret)


@UNDER_LOAD
@given(secrets(), st.integers(min_value=1, max_value=64))
def test_overlong_messages_are_always_a_clean_value_error(secret: str, extra: int) -> None:
    """Messages past 4096 bytes fail without quoting themselves."""
    text = secret + "é" * (MAXIMUM_MESSAGE_BYTES // 2) + "x" * extra
    builders: list[Callable[[], object]] = [
        lambda: Progress("1", text),
        lambda: Result("1", {}, text),
        lambda: Result.from_content("1", {}, text),
        lambda: ExecutionError("1", "definitive", "never", text),
        lambda: Definition("t", text, {}, "read_only", "safe"),
    ]
    for build in builders:
        assert_clean_value_error(build, secret)


@UNDER_LOAD
@given(secrets(), st.sampled_from(["effect", "replay", "capability"]))
def test_unknown_enum_values_are_always_a_clean_value_error(secret: str, field: str) -> None:
    """An unknown effect, replay safety or capability fails without quoting it."""
    effect, replay, listed = "mutating", "unsafe", ["process.execute"]
    if field == "effect":
        effect = secret
    elif field == "replay":
        replay = secret
    else:
        listed = [secret]
    assert_clean_value_error(lambda: Definition("t", "d", {}, effect, replay, listed), secret)


@UNDER_LOAD
@given(secrets())
def test_bad_process_values_are_always_a_clean_value_error(secret: str) -> None:
    """Relative workdirs and malformed environment entries fail without quoting them."""
    assert_clean_value_error(lambda: Lookup("ls", secret), secret)
    assert_clean_value_error(lambda: Lookup("ls", "/" + secret + "/"), secret)
    assert_clean_value_error(lambda: Lookup("ls", "/", [secret]), secret)
    assert_clean_value_error(lambda: Lookup("ls", "/", [f"A={secret}", f"A={secret}"]), secret)
