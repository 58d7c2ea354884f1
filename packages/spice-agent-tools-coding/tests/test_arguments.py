"""The shared strict argument decoder: structure only, every malformation refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.tools.coding._arguments import (
    MAXIMUM_NESTING,
    ArgumentError,
    decode_object,
    take_boolean,
    take_integer,
    take_number,
    take_string,
    take_string_list,
)

ALLOWED = frozenset({"path", "offset", "flag", "argv", "limit", "nested"})


def test_a_plain_object_with_known_properties_is_decoded() -> None:
    """Known properties of the right types come back as parsed values."""
    values = decode_object('{"path": "a", "offset": 3, "flag": true}', ALLOWED)
    assert ("a", 3, True) == (
        take_string(values, "path", required=True),
        take_integer(values, "offset"),
        take_boolean(values, "flag"),
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '"x"',
        "1",
        "null",
        '{"path": "a"} trailing',
        '{"path": "a"}{"path": "b"}',
        '{"path": "a", "path": "b"}',
        '{"unknown": 1}',
        '{"offset": NaN}',
        '{"offset": Infinity}',
        '{"path": "\\ud800"}',
        '{"\\udfff": 1}',
    ],
)
def test_malformed_arguments_are_refused(text: str) -> None:
    """Non-objects, trailing data, repeats, unknown names, non-JSON constants, lone surrogates."""
    with pytest.raises(ArgumentError):
        decode_object(text, ALLOWED)


def test_a_lone_surrogate_at_the_end_of_a_long_string_is_found() -> None:
    """The surrogate check covers the whole of a 256 KiB string, to its last character."""
    text = json.dumps({"path": "a" * 262_144 + "\ud800"})
    with pytest.raises(ArgumentError):
        decode_object(text, ALLOWED)


def test_nesting_at_the_bound_is_accepted_and_one_deeper_is_refused() -> None:
    """Arrays nested up to ``MAXIMUM_NESTING`` decode; one more level is refused."""
    at_bound = "[" * (MAXIMUM_NESTING - 1) + "]" * (MAXIMUM_NESTING - 1)
    decode_object('{"nested": ' + at_bound + "}", ALLOWED)
    past = "[" * (MAXIMUM_NESTING + 1) + "]" * (MAXIMUM_NESTING + 1)
    with pytest.raises(ArgumentError):
        decode_object('{"nested": ' + past + "}", ALLOWED)


@pytest.mark.parametrize("value", ["true", "1.0", '"1"', "[]", "{}"])
def test_an_integer_must_be_a_real_json_integer(value: str) -> None:
    """``true``, ``1.0``, ``"1"`` and friends are not integers."""
    values = decode_object('{"offset": ' + value + "}", ALLOWED)
    with pytest.raises(ArgumentError):
        take_integer(values, "offset")


def test_absent_optional_values_are_none_and_required_strings_are_enforced() -> None:
    """Absent optional properties give ``None``; a required string must be there."""
    values = decode_object("{}", ALLOWED)
    assert (None, None, None, None) == (
        take_string(values, "path", required=False),
        take_integer(values, "offset"),
        take_number(values, "limit"),
        take_boolean(values, "flag"),
    )
    with pytest.raises(ArgumentError):
        take_string(values, "path", required=True)


def test_null_means_absent_for_optional_values_and_missing_for_required_ones() -> None:
    """``null`` is what a strict-schema client sends for an unused property (contract 9.3)."""
    values = decode_object('{"path": null, "offset": null, "limit": null, "flag": null}', ALLOWED)
    assert (None, None, None, None) == (
        take_string(values, "path", required=False),
        take_integer(values, "offset"),
        take_number(values, "limit"),
        take_boolean(values, "flag"),
    )
    with pytest.raises(ArgumentError, match="path must be a string"):
        take_string(values, "path", required=True)


def test_numbers_accept_integers_and_floats_but_not_booleans() -> None:
    """A number is an int or a float; a bool is refused."""
    assert 2.5 == take_number(decode_object('{"limit": 2.5}', ALLOWED), "limit")
    assert 2.0 == take_number(decode_object('{"limit": 2}', ALLOWED), "limit")
    with pytest.raises(ArgumentError):
        take_number(decode_object('{"limit": false}', ALLOWED), "limit")


def test_a_string_list_must_hold_only_strings() -> None:
    """``argv`` style properties are arrays of strings and nothing else."""
    assert ["a", "b"] == take_string_list(decode_object('{"argv": ["a", "b"]}', ALLOWED), "argv")
    for bad in ('{"argv": ["a", 1]}', '{"argv": "a"}', "{}"):
        with pytest.raises(ArgumentError):
            take_string_list(decode_object(bad, ALLOWED), "argv")


def test_a_boolean_must_be_a_json_boolean() -> None:
    """``1`` and ``"true"`` are not booleans."""
    for bad in ('{"flag": 1}', '{"flag": "true"}'):
        with pytest.raises(ArgumentError):
            take_boolean(decode_object(bad, ALLOWED), "flag")


MARKER = "\u2603"
_MARKED_TEXT = st.tuples(st.text(max_size=32), st.text(max_size=32)).map(
    lambda parts: parts[0] + MARKER + parts[1]
)


@given(st.one_of(_MARKED_TEXT, _MARKED_TEXT.map(lambda t: json.dumps({"path": t, "x": t}))))
def test_any_text_decodes_or_raises_argument_error_without_echoing_it(text: str) -> None:
    """Arbitrary text never raises anything but ``ArgumentError``, whose text is the project's."""
    message = ""
    try:
        decode_object(text, ALLOWED)
    except ArgumentError as error:
        message = str(error)
    assert MARKER not in message
    assert len(message) <= 128
