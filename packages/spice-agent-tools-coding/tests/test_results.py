"""The answer builders every tool shares."""

from __future__ import annotations

import json

from spice.agent.tool import Call, ExecutionState, RetryDisposition
from spice.agent.tools.coding._results import failure, success

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
