"""Property tests of replace arguments, both forms: any JSON gives a Result or an error."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Final

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replace_helpers import content_of, digest, make_tool

from spice.agent.tool import Call, ExecutionError

CODES: Final = frozenset(
    {
        "invalid_arguments",
        "root_unavailable",
        "not_found",
        "path_unavailable",
        "path_escape",
        "not_regular",
        "read_failed",
        "file_too_large",
        "already_exists",
        "stale",
        "temporary_failed",
        "write_failed",
        "sync_failed",
        "close_failed",
        "create_failed",
        "replace_failed",
        "durability_unconfirmed",
        "cleanup_incomplete",
        "edit_not_found",
        "edit_ambiguous",
        "not_text",
    }
)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
_values = {
    "path": st.sampled_from(["f.txt", "d/n.txt", "../x", "/abs", ".", "", " f", "a//b/../c"])
    | st.text(max_size=12),
    "content": st.text(max_size=40) | st.sampled_from(["QUJD", "QQ==", "!!", ""]),
    "create": st.booleans(),
    "expected_sha256": st.sampled_from([digest(b"old\n"), "0" * 64, "F" * 64, ""]),
    "encoding": st.sampled_from(["utf-8", "base64", "UTF-8", "latin-1"]),
    "edits": st.lists(
        st.fixed_dictionaries(
            {"old_text": st.sampled_from(["old", "o", "", "\n", "x"]) | _json},
            optional={"new_text": st.text(max_size=8) | _json, "replace_all": _json},
        ),
        max_size=3,
    ),
}
_arguments = st.fixed_dictionaries(
    {}, optional={name: strategy | _json for name, strategy in _values.items()}
) | st.dictionaries(st.sampled_from([*_values, "mode"]), _json, max_size=6)


def _execute(root: Path, arguments: str) -> None:
    async def go() -> None:
        tool = make_tool(root, max_write_bytes=32)
        try:
            async with asyncio.timeout(10):
                result = await tool.execute(Call("prop", "replace", arguments))
        except ExecutionError:
            return
        content = content_of(result)
        assert isinstance(content["ok"], bool)
        if content["ok"] is False:
            assert content["code"] in CODES
            assert result.problem == content["message"]
        else:
            assert result.problem is None

    asyncio.run(go())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arguments=_arguments)
def test_any_argument_object_gives_a_result_and_stays_inside_the_root(
    arguments: dict[str, object],
) -> None:
    """Whatever the object holds: a Result with a known code, nothing outside the root."""
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        root = base / "root"
        root.mkdir()
        (root / "f.txt").write_bytes(b"old\n")
        _execute(root, json.dumps(arguments))
        assert ["root"] == os.listdir(base)


@settings(max_examples=60, deadline=None)
@given(value=_json)
def test_any_json_document_gives_a_result(value: object) -> None:
    """Non-object and odd JSON documents are answered, never raised."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        _execute(root, json.dumps(value))
