"""The write's decision ladder (``_decision.decide``), written once for both platforms:
each rung on both sides, for a create and for a replace."""

from __future__ import annotations

import hashlib

import pytest

from spice.agent.tools.coding._decision import (
    EXISTS,
    EXISTS_SAME,
    NOT_FOUND,
    PATH_UNAVAILABLE,
    READ_FAILED,
    STALE,
    STALE_SAME,
    Absent,
    Current,
    Found,
    Occupied,
    Outcome,
    Request,
    decide,
)

OLD = b"old\n"
NEW = b"new\n"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def current(data: bytes) -> Current:
    return Current(1, 2, 0o644, 1, 0, 0, digest(data), data)


def request(expected: bytes | None, data: bytes = NEW) -> Request:
    return Request("f", data, digest(data), None if expected is None else digest(expected), 64)


def test_a_create_of_an_absent_target_goes_on_without_a_current_file() -> None:
    assert decide(Absent(), request(None)) is None


@pytest.mark.parametrize(
    ("found", "code", "message"),
    [
        (current(OLD), "already_exists", EXISTS),
        (current(NEW), "already_exists", EXISTS_SAME),
        (Occupied("not_regular", "x"), "already_exists", EXISTS),
        (Occupied("path_unavailable", PATH_UNAVAILABLE), "path_unavailable", PATH_UNAVAILABLE),
    ],
)
def test_a_create_never_overwrites(found: Found, code: str, message: str) -> None:
    answer = decide(found, request(None))
    assert isinstance(answer, Outcome)
    assert (answer.code, answer.message, answer.committed) == (code, message, False)


def test_a_replace_of_the_expected_file_goes_on_with_it() -> None:
    found = current(OLD)
    assert decide(found, request(OLD)) is found


@pytest.mark.parametrize(
    ("found", "data", "code", "message"),
    [
        (Absent(), NEW, "not_found", NOT_FOUND),
        (Occupied("read_failed", READ_FAILED), NEW, "read_failed", READ_FAILED),
        (current(b"other\n"), NEW, "stale", STALE),
        (current(NEW), NEW, "stale", STALE_SAME),  # stale, but already the new bytes
    ],
)
def test_a_replace_stops_where_the_target_is_not_the_expected_file(
    found: Found, data: bytes, code: str, message: str
) -> None:
    answer = decide(found, request(OLD, data))
    assert isinstance(answer, Outcome)
    assert (answer.code, answer.message, answer.committed) == (code, message, False)


def test_the_same_content_is_a_durable_no_op() -> None:
    answer = decide(current(OLD), request(OLD, OLD))
    assert answer == Outcome(durable=True)
