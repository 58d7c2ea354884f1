"""The application's JSON on the MCP path: ``orjson`` only where it writes what we would anyway."""

from __future__ import annotations

import datetime
import enum
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.types import JSONRPCNotification, JSONRPCResponse

from spice.agent.coding._mcp._json import (
    _LARGEST,
    _SMALLEST,
    PLAIN_DEPTH,
    _plain,
    arguments_text,
    frame,
)

UNDER_LOAD = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = st.text(st.characters(codec="utf-8"), max_size=6)


def json_values(floats: st.SearchStrategy[float]) -> st.SearchStrategy[object]:
    """Nested JSON values with the given floats (and every Unicode scalar in strings)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=_SMALLEST, max_value=_LARGEST),
        floats,
        st.text(st.characters(codec="utf-8"), max_size=12),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)
        ),
        max_leaves=16,
    )


def stdlib(value: object) -> str:
    """What the arguments text was before ``orjson``: the reference."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def sdk_frame(message: JSONRPCResponse | JSONRPCNotification) -> bytes:
    """What the SDK's own encoder writes for ``message``, as one line."""
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


@UNDER_LOAD
@given(st.dictionaries(KEYS, json_values(st.floats()), max_size=5))
def test_a_frame_is_byte_for_byte_what_the_sdk_writes(result: dict[str, object]) -> None:
    """Any result (NaN and infinity included, which the SDK writes as null): the same bytes."""
    message = JSONRPCResponse(jsonrpc="2.0", id=7, result=result)
    assert sdk_frame(message) == frame(message)


def test_a_frame_is_one_line_ending_in_a_newline() -> None:
    """A text with newlines inside is escaped; the frame has exactly one, at its end."""
    message = JSONRPCResponse(jsonrpc="2.0", id="a", result={"text": "one\ntwo\r\n"})
    line = frame(message)
    assert line.endswith(b"\n")
    assert 1 == line.count(b"\n")
    assert {"jsonrpc": "2.0", "id": "a", "result": {"text": "one\ntwo\r\n"}} == json.loads(line)


def test_a_frame_with_an_integer_orjson_refuses_falls_back_to_the_sdk_encoder() -> None:
    """An integer past 64 bits is written by the SDK's encoder, exactly."""
    message = JSONRPCNotification(jsonrpc="2.0", method="x", params={"big": _LARGEST + 1})
    assert sdk_frame(message) == frame(message)
    assert _LARGEST + 1 == json.loads(frame(message))["params"]["big"]


@UNDER_LOAD
@given(st.dictionaries(KEYS, json_values(st.nothing()), max_size=5))
def test_plain_arguments_without_floats_are_byte_for_byte_the_stdlib_text(
    arguments: dict[str, object],
) -> None:
    """Strings (every scalar value, escapes), integers, booleans, null, nesting: same text."""
    assert stdlib(arguments) == arguments_text(arguments)


@UNDER_LOAD
@given(st.dictionaries(KEYS, json_values(st.floats(allow_nan=False, allow_infinity=False))))
def test_plain_arguments_with_floats_decode_to_the_same_values(
    arguments: dict[str, object],
) -> None:
    """A float may be spelled differently (``1e16`` for ``1e+16``); its value is the same."""
    assert json.loads(stdlib(arguments)) == json.loads(arguments_text(arguments))


def test_no_arguments_are_the_empty_object() -> None:
    """``None`` (the client sent no arguments) is ``{}``."""
    assert "{}" == arguments_text(None)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_float_is_rejected_as_before(value: float) -> None:
    """NaN and infinity are not JSON: ``ValueError``, never written as ``null``."""
    with pytest.raises(ValueError, match="JSON compliant"):
        arguments_text({"offset": [value]})


class Colour(enum.Enum):
    """A plain enum: not JSON."""

    RED = "red"


class Mode(enum.StrEnum):
    """A string enum: JSON as its value."""

    FAST = "fast"


class Name(str):
    """A string subclass."""


@pytest.mark.parametrize(
    "arguments",
    [
        {"when": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
        {"colour": Colour.RED},
        {"items": (1, 2)},
        {1: "number key"},
    ],
)
def test_a_value_json_cannot_hold_is_rejected_as_before(arguments: dict[object, object]) -> None:
    """What ``json.dumps`` refuses is refused (``TypeError``), never given an ``orjson`` form."""
    try:
        expected: str | None = stdlib(arguments)
    except TypeError:
        expected = None
    if expected is None:
        with pytest.raises(TypeError):
            arguments_text(arguments)  # type: ignore[arg-type]
    else:
        assert expected == arguments_text(arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "arguments",
    [
        {"mode": Mode.FAST},
        {"name": Name("a.txt")},
        {"big": _LARGEST + 1, "small": _SMALLEST - 1},
        {"lone": "\ud800"},
        {"deep": json.loads("[" * (PLAIN_DEPTH + 5) + "]" * (PLAIN_DEPTH + 5))},
    ],
)
def test_values_outside_the_plain_set_are_written_by_json_exactly(
    arguments: dict[str, object],
) -> None:
    """Subclasses, integers past 64 bits, a lone surrogate, deep nesting: the stdlib text."""
    assert stdlib(arguments) == arguments_text(arguments)


def test_the_plain_bounds_hold_on_both_sides() -> None:
    """Integers at orjson's limits are plain, one past is not; so is the depth bound."""
    assert _plain(_LARGEST, 0)
    assert _plain(_SMALLEST, 0)
    assert not _plain(_LARGEST + 1, 0)
    assert not _plain(_SMALLEST - 1, 0)
    nested: object = []
    for _ in range(PLAIN_DEPTH - 1):
        nested = [nested]
    assert _plain(nested, 0)
    assert not _plain([nested], 0)
    assert not _plain({"k": nested}, 1)
