"""JSON on the MCP path: ``orjson`` where its output is exactly what we would write anyway.

Two places serialize per call in the application layer: each outgoing JSON-RPC frame, and
the arguments of each ``tools/call`` (turned into the JSON text a ``Call`` carries). Both
use ``orjson`` (measured in ``benchmarks/README.md``: a 256 KiB ``read`` answer's frame is
about 6x faster to write, the arguments of a 256 KiB ``replace`` over 10x), and fall back to
the encoder used before wherever ``orjson`` would differ:

- frames: ``orjson`` of the message's JSON-mode dump; byte for byte what the SDK's
  ``model_dump_json`` writes (tested); a value ``orjson`` refuses (an integer past 64 bits)
  goes through ``model_dump_json`` itself;
- arguments: ``orjson`` only for plain JSON values (exact ``dict``/``list``/``str``/``int``/
  ``float``/``bool``/``None``, finite floats, integers within 64 bits, string keys, bounded
  depth); anything else (NaN, a ``datetime``, an enum, a subclass) goes through
  ``json.dumps(..., ensure_ascii=False, allow_nan=False)`` as before, so it is rejected or
  written exactly as it was.

The contract and the product never import this module: they stay standard-library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson
from mcp.types import INTERNAL_ERROR, ErrorData, JSONRPCError, JSONRPCResponse

from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES

if TYPE_CHECKING:
    from mcp.types import JSONRPCMessage

ANSWER_TOO_LARGE: Final = (
    "the answer is larger than the 1 MiB a client reads in one line; nothing of it was sent"
)

PLAIN_DEPTH: Final = 64
"""Deepest nesting sent through ``orjson`` (it refuses past 255); deeper goes to ``json``."""

_SMALLEST: Final = -(1 << 63)
_LARGEST: Final = (1 << 64) - 1
"""``orjson``'s integer range; a larger integer goes to ``json`` (arbitrary precision)."""
_SCALARS: Final = (str, bool)


def frame(message: JSONRPCMessage) -> bytes:
    """One outgoing JSON-RPC message as one line of UTF-8 (the newline included).

    An answer longer than ``MAXIMUM_ANSWER_BYTES`` (the line a client buffers) becomes a
    JSON-RPC error saying so: the tools keep their answers within the payload bound and the
    text block is shaped to the room left (``_text_block``), so only an answer of another
    tool, or one carrying an id of hundreds of bytes, can get here.
    """
    data = _line(message)
    if len(data) > MAXIMUM_ANSWER_BYTES and isinstance(message, JSONRPCResponse):
        error = ErrorData(code=INTERNAL_ERROR, message=ANSWER_TOO_LARGE)
        return _line(JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
    return data


def _line(message: JSONRPCMessage) -> bytes:
    dumped = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
    try:
        return orjson.dumps(dumped, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError: a value it refuses; the SDK's own encoder
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def arguments_text(arguments: Mapping[str, Any] | None) -> str:
    """The JSON text of a call's arguments (``{}`` for none), compact, real Unicode.

    Raises ``ValueError`` for NaN or infinity and ``TypeError`` for a value JSON cannot
    hold, as ``json.dumps(..., allow_nan=False)`` does.
    """
    value: Mapping[str, Any] = {} if arguments is None else arguments
    if _plain(value, 0):
        try:
            return orjson.dumps(value).decode("utf-8")
        except TypeError:  # orjson.JSONEncodeError: e.g. a lone surrogate; json decides
            pass
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _plain(value: object, depth: int) -> bool:
    """Whether ``value`` holds only exact JSON types that ``orjson`` writes as ``json`` would.

    Walks containers and scalars, never the characters of a string.
    """
    if value is None or type(value) in _SCALARS:
        return True
    if isinstance(value, int) and type(value) is int:
        return _SMALLEST <= value <= _LARGEST
    if isinstance(value, float) and type(value) is float:
        return math.isfinite(value)
    if depth >= PLAIN_DEPTH:
        return False
    if isinstance(value, dict) and type(value) is dict:
        return all(type(key) is str and _plain(item, depth + 1) for key, item in value.items())
    if isinstance(value, list) and type(value) is list:
        return all(_plain(item, depth + 1) for item in value)
    return False
