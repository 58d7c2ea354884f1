"""Fuzzing: arbitrary arguments through the Dispatcher, arbitrary ``tools/call`` over stdio.

Every outcome must be a ``Result``, an ``ExecutionError`` or a JSON-RPC error with a
bounded message, and no problem text, error message or stderr line may carry a
traceback, a machine path, an environment value (a canary planted in a variable that is
not allow-listed) or file content (a canary planted in the worktree's files).
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from adv_support import (
    CALL_REJECTED,
    EXECUTION_ERROR,
    Answer,
    dispatcher_route,
    leaks,
    new_canary,
    without_named_root,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_check import check_output_schema

from spice.agent.tool import MAXIMUM_MESSAGE_BYTES
from spice.agent.tools.coding import Config

EXAMPLES: Final = 120
MCP_EXAMPLES: Final = 120
RESPONSE_SECONDS: Final = 10.0
ENVIRONMENT_CANARY_NAME: Final = "SPICE_ADV_SECRET"
HARMLESS: Final = ("true", "echo", "pwd", "printf", "no-such-command-adv")
SERVER: Final = Path(sys.executable).parent / "spice-coding"

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
paths = st.one_of(
    st.sampled_from(["file.txt", "dir/inner.txt", ".", "..", "../x", "/etc/passwd", "dir", ""]),
    st.text(alphabet=st.sampled_from(list("ab./\\\x00 \u00e9~")), max_size=24),
    st.text(max_size=24),
)


def _read_arguments() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"path": paths},
        optional={
            "offset": st.integers(min_value=-2, max_value=2**64) | json_values,
            "limit": st.integers(min_value=-2, max_value=2**21) | json_values,
            "extra": json_values,
        },
    )


def _replace_arguments() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"path": paths, "content": st.text(max_size=64) | json_values},
        optional={
            "create": st.booleans() | json_values,
            "expected_sha256": st.text(alphabet="0123456789abcdefABCDEF", min_size=63, max_size=65)
            | json_values,
            "encoding": st.sampled_from(["utf-8", "base64", "latin-1"]) | json_values,
        },
    )


def _shell_arguments() -> st.SearchStrategy[dict[str, Any]]:
    argv = st.tuples(st.sampled_from(HARMLESS), st.lists(st.text(max_size=16), max_size=4)).map(
        lambda parts: [parts[0], *parts[1]]
    )
    return st.fixed_dictionaries(
        {"argv": argv | st.lists(st.sampled_from(HARMLESS), max_size=2)},
        optional={
            "workdir": paths,
            "timeout_seconds": st.floats(min_value=-1, max_value=5, allow_nan=False) | json_values,
        },
    )


calls = st.one_of(
    st.tuples(st.just("read"), _read_arguments() | json_values),
    st.tuples(st.just("replace"), _replace_arguments() | json_values),
    st.tuples(st.just("shell"), _shell_arguments() | json_values),
    st.tuples(st.text(max_size=12), json_values),
)


def lay_out(root: Path, canary: str) -> None:
    """A small worktree whose files all carry the file canary."""
    (root / "dir").mkdir(parents=True, exist_ok=True)
    (root / "file.txt").write_text(f"file content {canary}\n")
    (root / "dir" / "inner.txt").write_text(f"inner content {canary}\n")


def visible(answer: Answer) -> Answer:
    """What must hold no file content: problems and errors, never a page or the output."""
    if answer.code in {EXECUTION_ERROR, CALL_REJECTED}:
        return answer
    kept = {
        key: value
        for key, value in answer.content.items()
        if key not in {"content", "stdout", "stderr"}
    }
    return Answer(answer.code, kept, (json.dumps(kept), str(kept.get("message", ""))))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=calls)
def test_any_arguments_to_any_tool_give_a_clean_bounded_answer(
    call: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dispatcher: a Result or an ExecutionError, never a traceback, path, secret or content."""
    file_canary, environment_canary = new_canary("file"), new_canary("env")
    monkeypatch.setenv(ENVIRONMENT_CANARY_NAME, environment_canary)
    # Not "root": a ``pwd`` in the output would then show ".../root/dir", which reads as
    # the fixed machine-path fragment "/root/" (a false positive found by Hypothesis).
    root = tmp_path / "tree"
    lay_out(root, file_canary)
    name, arguments = call

    async def run() -> Answer:
        async with dispatcher_route(Config(root, command_timeout=5)) as route:
            return await route(name, arguments)

    answer = asyncio.run(run())
    request = json.dumps(arguments, ensure_ascii=False)
    assert [] == leaks(answer, [environment_canary], request)
    shown = without_named_root(visible(answer), os.fspath(root))  # 10.2 names the root there
    assert [] == leaks(shown, [file_canary, os.fspath(tmp_path)], request)


class StdioPeer:
    """A raw JSON-RPC peer of ``spice-coding serve`` (newline-delimited JSON over pipes)."""

    def __init__(self, root: Path, environment: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [str(SERVER), "--root", str(root), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
        )
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.numbers = iter(range(1, 1 << 30))

    def send(self, message: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def messages(self, seconds: float) -> Iterator[dict[str, Any]]:
        """Messages from the server until ``seconds`` pass (bounded, no sleeping)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + seconds
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                yield json.loads(line)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.selector.select(remaining):
                return
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                return
            self.buffer += chunk

    def request(self, method: str, params: object) -> dict[str, Any] | None:
        """Send one request; its response, or ``None`` if none came in time."""
        number = next(self.numbers)
        self.send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
        for message in self.messages(RESPONSE_SECONDS):
            if message.get("id") == number:
                return message
        return None

    def close(self) -> str:
        """Close stdin, wait (bounded) for the server to exit; return its stderr."""
        _out, err = self.process.communicate(timeout=30)  # closes stdin first
        return err.decode("utf-8", "replace")


def _check_response(response: dict[str, Any] | None, forbidden: list[str], root: str) -> None:
    assert response is not None
    assert ("result" in response) != ("error" in response)
    if "error" in response:
        message = str(response["error"].get("message", ""))
        assert len(message.encode()) <= MAXIMUM_MESSAGE_BYTES
        text = json.dumps(response["error"])
    else:
        result = response["result"]
        structured = result.get("structuredContent") or {}
        kept = {k: v for k, v in structured.items() if k not in {"content", "stdout", "stderr"}}
        if kept.get("code") == "invalid_arguments" and isinstance(kept.get("message"), str):
            # The refusal of an absolute path outside names the configured root (10.2).
            kept["message"] = kept["message"].replace(f"the worktree root ({root})", "")
        text = json.dumps(kept)  # the text copy repeats it, with the child's output
    for fragment in [*forbidden, "Traceback"]:
        assert fragment not in text


def test_raw_tools_call_payloads_over_stdio_get_clean_bounded_answers(tmp_path: Path) -> None:
    """Real stdio server: every tools/call gets a result or a bounded error; stderr is clean."""
    file_canary, environment_canary = new_canary("file"), new_canary("env")
    root = tmp_path / "root"
    lay_out(root, file_canary)
    environment = {**os.environ, ENVIRONMENT_CANARY_NAME: environment_canary}
    peer = StdioPeer(root, environment)
    forbidden = [file_canary, environment_canary, os.fspath(tmp_path)]
    try:
        initialize = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "adversarial", "version": "1"},
        }
        assert "result" in (peer.request("initialize", initialize) or {})
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        params = st.one_of(
            calls.map(lambda call: {"name": call[0], "arguments": call[1]}),
            st.dictionaries(st.text(max_size=10), json_values, max_size=4),
            st.fixed_dictionaries({"name": st.sampled_from(["read", "shell"])}),
        )

        @settings(max_examples=MCP_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        @given(payload=params)
        def probe(payload: dict[str, Any]) -> None:
            response = peer.request("tools/call", payload)
            _check_response(response, forbidden, os.fspath(root))
            name = payload.get("name")
            if response is not None and "result" in response and isinstance(name, str):
                check_output_schema(name, response["result"].get("structuredContent") or {})

        probe()
    finally:
        stderr = peer.close()
    assert 0 == peer.process.returncode
    for fragment in [*forbidden, "Traceback"]:
        assert fragment not in stderr


def test_a_request_with_non_object_params_gets_an_error_response(tmp_path: Path) -> None:
    """A request with ``params: 7`` is answered with a JSON-RPC error, not silence."""
    root = tmp_path / "root"
    lay_out(root, new_canary("file"))
    peer = StdioPeer(root, dict(os.environ))
    try:
        initialize = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "adversarial", "version": "1"},
        }
        assert "result" in (peer.request("initialize", initialize) or {})
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        response = peer.request("tools/call", 7)
    finally:
        peer.close()
    assert response is not None
    assert "error" in response
