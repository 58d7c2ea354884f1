"""Building a tool's answers: one JSON object, its field order and its bound.

The rules every tool keeps for progress and cancellation are ``_progress``'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from spice.agent.tool import Call, ExecutionError, ExecutionState, Result, RetryDisposition

LARGE_FIELDS: Final = ("content", "diff", "stdout", "stderr")
"""The fields that can be long, in the order they close every content object (contract
10.2): ``ok``, ``code`` and ``message`` come first, the small fields (digests and
``exit_code`` among them) next, so a client that shows only the start of a long answer
still shows them."""

MAXIMUM_ANSWER_BYTES: Final = 1 << 20
"""The seed's payload bound (Spice Agent's 1 MiB), and the most bytes one answer takes on
the MCP wire (contract 12.4): the MCP layer shapes its text block to keep the whole line
within it."""
ENVELOPE_BYTES: Final = 2048
"""Room kept within ``MAXIMUM_ANSWER_BYTES`` for what a transport wraps around an answer
(over MCP the JSON-RPC envelope with the request's id, the keys of the result, a note the
MCP layer adds to an image or a shortened text block)."""
ANSWER_ROOM: Final = MAXIMUM_ANSWER_BYTES - ENVELOPE_BYTES
"""The most ``answer_bytes`` of any answer of these tools: its JSON text, once."""
ANSWER_COPIES: Final = 1
"""How often the bound counts an answer's JSON text (the seed's rule, contract 12.4: once,
as the structured content a client reads). Round 4 counted three (Claude Code's line to
the Agent SDK) and shortened pages and captures that base64 carries whole; the MCP layer
now keeps the wire's bound by shaping the text block beside the structured content."""

RESULT_UNENCODABLE: Final = "the tool's result could not be encoded within the answer bound"


def encode(content: Mapping[str, object]) -> str:
    """Compact JSON text of ``content`` (no NaN, real Unicode)."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encoded_size(content: Mapping[str, object]) -> int:
    """UTF-8 size of ``encode(content)``."""
    return len(encode(content).encode("utf-8"))


def answer_bytes(text: str) -> int:
    """The bytes an answer whose JSON text is ``text`` counts against ``ANSWER_ROOM``.

    ``ANSWER_COPIES`` times: once as itself (the structured content) and, for each further
    copy, as a JSON string holding it (the string form adds its two quotes and a backslash
    before each quote and backslash of ``text``, and nothing else, since a JSON text holds
    no raw control byte). Exact for the JSON this package writes (compact, real Unicode),
    which ``orjson``, the MCP SDK and JavaScript's ``JSON.stringify`` write byte for byte
    alike.
    """
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    escapes = text.count('"') + text.count("\\")
    return size + (ANSWER_COPIES - 1) * (size + escapes + 2)


def answer_fits(text: str, verbatim: int = 0) -> bool:
    """Whether ``answer_bytes(text) <= ANSWER_ROOM``, counting only where a bound cannot tell.

    ``verbatim``: bytes of ``text`` known to be one field's raw bytes (a page), so that at
    most twice the rest of ``text`` can be characters its string form escapes (each added
    escape character brings at most two; every other such character is outside the raw
    bytes). Without it, at most all of ``text``. Exact either way: the bound only skips
    the count when even it fits.
    """
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    most = min(size, 2 * (size - verbatim)) if verbatim else size
    if size + (ANSWER_COPIES - 1) * (size + most + 2) <= ANSWER_ROOM:
        return True
    return answer_bytes(text) <= ANSWER_ROOM


def success(
    call: Call, content: Mapping[str, object], state: ExecutionState, retry: RetryDisposition
) -> Result:
    """A successful ``Result``; if it cannot be encoded in bounds, an ``ExecutionError``."""
    return _result(call, {"ok": True, **content}, None, state, retry)


def failure(
    call: Call,
    code: str,
    problem: str,
    state: ExecutionState,
    retry: RetryDisposition,
    extra: Mapping[str, object] | None = None,
) -> Result:
    """A model-visible failure: ``{"ok": false, "code": code, "message": problem, ...extra}``."""
    # ``ok`` is the first key of every content object (contract 9.1); the rest follow.
    content: dict[str, object] = {"ok": False, "code": code, "message": problem}
    for key, value in (extra or {}).items():
        if key not in content:
            content[key] = value
    return _result(call, content, problem, state, retry)


def large_fields_last(content: Mapping[str, object]) -> dict[str, object]:
    """``content`` in its own order, except that ``LARGE_FIELDS`` close it, in their order."""
    ordered = {key: value for key, value in content.items() if key not in LARGE_FIELDS}
    for key in LARGE_FIELDS:
        if key in content:
            ordered[key] = content[key]
    return ordered


def _result(
    call: Call,
    content: Mapping[str, object],
    problem: str | None,
    state: ExecutionState,
    retry: RetryDisposition,
) -> Result:
    content = large_fields_last(content)
    # One encoding, never parsed back: ``from_content`` enforces the payload bound and valid
    # Unicode (ValueError) and keeps the object for the MCP layer's structuredContent. The
    # answer bound is each tool's to keep (a page or an output is shortened to fit); this
    # is the last check that it did.
    try:
        result = Result.from_content(call.id, content, problem)
    except ValueError:
        raise ExecutionError(call.id, state, retry, RESULT_UNENCODABLE) from None
    if not answer_fits(result.content):
        raise ExecutionError(call.id, state, retry, RESULT_UNENCODABLE)
    return result
