"""The answer builders every tool shares."""

from __future__ import annotations

import json

import pytest

from spice.agent.tool import (
    MAXIMUM_PAYLOAD_BYTES,
    Call,
    ExecutionError,
    ExecutionState,
    RetryDisposition,
)
from spice.agent.tools.coding._results import RESULT_UNENCODABLE, failure, success

CALL = Call("c1", "read", "{}")
STATE = ExecutionState.DEFINITIVE
RETRY = RetryDisposition.ALLOWED


def test_ok_is_the_first_key_of_a_failure_with_extra_fields() -> None:
    """Contract 9.1: ``ok`` leads every content object, whatever ``extra`` holds first."""
    result = failure(CALL, "stale", "changed", STATE, RETRY, {"path": "a", "committed": False})
    keys = list(json.loads(result.content))
    assert keys[:3] == ["ok", "code", "message"]
    assert keys[3:] == ["path", "committed"]


def test_extra_cannot_overwrite_ok_code_or_message() -> None:
    """A tool's own fields never shadow the failure's verdict."""
    extra = {"ok": True, "code": "other", "message": "other", "exit_code": 1}
    content = json.loads(failure(CALL, "command_failed", "failed", STATE, RETRY, extra).content)
    assert content == {"ok": False, "code": "command_failed", "message": "failed", "exit_code": 1}


def test_ok_is_the_first_key_of_a_success() -> None:
    """A success starts with ``ok: true`` too."""
    content = json.loads(success(CALL, {"path": "a", "bytes": 1}, STATE, RETRY).content)
    assert list(content) == ["ok", "path", "bytes"]


@pytest.mark.parametrize(
    "content",
    [{"value": float("nan")}, {"value": object()}, {"value": "x" * MAXIMUM_PAYLOAD_BYTES}],
)
def test_content_that_cannot_be_encoded_in_bounds_is_an_execution_error(
    content: dict[str, object],
) -> None:
    """NaN, a non-JSON value or content past 1 MiB: a fixed ``ExecutionError``, not a result."""
    with pytest.raises(ExecutionError) as raised:
        success(CALL, content, STATE, RETRY)
    assert (CALL.id, STATE, RETRY, RESULT_UNENCODABLE) == (
        raised.value.call_id,
        raised.value.state,
        raised.value.retry,
        raised.value.message,
    )


def test_a_problem_past_the_message_bound_is_an_execution_error() -> None:
    """A failure whose problem text is over 4096 bytes cannot be answered as a result."""
    with pytest.raises(ExecutionError):
        failure(CALL, "stale", "x" * 4097, STATE, RETRY)


def test_a_success_keeps_its_object_for_the_mcp_layer() -> None:
    """The content is encoded once; ``content_object`` is the same object, ``ok`` first."""
    result = success(CALL, {"path": "a", "bytes": 1}, STATE, RETRY)
    assert '{"ok":true,"path":"a","bytes":1}' == result.content
    assert {"ok": True, "path": "a", "bytes": 1} == dict(result.content_object)
