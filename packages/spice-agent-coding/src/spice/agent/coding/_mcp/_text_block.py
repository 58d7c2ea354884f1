"""The text block beside an answer's structured content, shaped to fit (contract 12.4).

The tools follow the seed: an answer's JSON text, once, stays within the payload bound
(a page or a capture that would escape past it is base64). Over MCP that object goes twice:
as ``structuredContent`` and, as a JSON string, in the text block. Where both together
would pass ``MAXIMUM_ANSWER_BYTES`` on the wire, the structured content stays whole (a
client that reads only it, as Claude Code and VS Code do, loses nothing) and the text
block is shortened to the room left:

- a ``read`` page becomes the longest prefix page that fits, a page in its own right:
  ``bytes``, ``truncated: true`` and ``next_offset`` say where to go on, ``sha256`` is left
  out (it was the whole page's), ``file_sha256`` stays;
- a ``shell`` capture keeps less of each stream's middle: the start and the end of each
  stream, with ``*_omitted_bytes`` and ``*_omitted_at`` for what this text leaves out
  (``observed = captured + omitted`` still holds in the text);
- any other answer keeps its small fields and leaves its large ones out.

Each such text says so in ``text_note``. A client may also bound the text's characters
(Gemini CLI cuts past 40,000: ``chars``); the same shaping keeps it within that.

Cost: an answer that fits is measured once (its length and its quotes and backslashes);
only a text that does not is shaped, by bisection over real encodings (at most about 20).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Final

from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES

__all__ = [
    "ENVELOPE_BYTES",
    "MINIMAL_TEXT_BYTES",
    "TEXT_NOTE",
    "shaped_text",
    "string_bytes",
    "text_chars",
]

ENVELOPE_BYTES: Final = 2048
"""Room kept for the JSON-RPC envelope, the request's id and the result's own keys (the
product keeps the same room within the bound)."""
TEXT_NOTE: Final = (
    "this text is shortened to fit the client's bound; the structured content of this "
    "answer holds it whole"
)
"""What a shortened text block says (``text_note``)."""
NOTE_KEY: Final = "text_note"
MINIMAL_TEXT_BYTES: Final = 256
"""Most bytes of the smallest text block (``ok`` and the note), sent even where no room is
left: the product's answers leave ``ENVELOPE_BYTES`` for it and the JSON-RPC envelope
(about 100 bytes and the request's id)."""
LARGE_FIELDS: Final = ("content", "diff", "stdout", "stderr")
"""The fields that can be long; they close every content object (the product's order)."""


def string_bytes(text: str) -> int:
    """UTF-8 bytes of ``text`` written as a JSON string: its quotes, and a backslash before
    each quote and backslash (a JSON text holds no raw control character to escape)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return size + text.count('"') + text.count("\\") + 2


def text_chars(text: str) -> int:
    """JavaScript's length of ``text`` (UTF-16 code units), as Gemini CLI counts it."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def shaped_text(
    content: Mapping[str, object], text: str, structured_bytes: int, chars: int | None = None
) -> str:
    """The text block for the answer ``content`` (JSON ``text``, ``structured_bytes`` on the
    wire as structured content): ``text`` itself when it fits beside it (and within
    ``chars`` characters when a client bounds them), else the shortened text."""
    room = MAXIMUM_ANSWER_BYTES - ENVELOPE_BYTES - structured_bytes

    def fits(candidate: str) -> bool:
        if chars is not None and text_chars(candidate) > chars:
            return False
        return string_bytes(candidate) <= room

    if fits(text):
        return text
    shaper = _shaper(content)
    if shaper is not None:
        low, high = 0, shaper.size - 1
        if fits(shaper.build(low)):
            while low < high:
                middle = (low + high + 1) // 2
                if fits(shaper.build(middle)):
                    low = middle
                else:
                    high = middle - 1
            return shaper.build(low)
    small = _encode(_noted({k: v for k, v in content.items() if k not in LARGE_FIELDS}))
    if fits(small):
        return small
    return _encode(_noted({"ok": content.get("ok") is True}))  # within MINIMAL_TEXT_BYTES


class _Shaper:
    """Builds the text keeping ``kept`` bytes of the large field(s), ``0 <= kept < size``."""

    __slots__ = ("build", "size")

    def __init__(self, size: int, build: Callable[[int], str]) -> None:
        self.size = size
        self.build = build


def _shaper(content: Mapping[str, object]) -> _Shaper | None:
    encoding = content.get("encoding")
    if encoding not in {"utf-8", "base64"}:
        return None
    if "stdout" in content and "stderr" in content:
        return _capture_shaper(content, str(encoding))
    if "content" in content and isinstance(content.get("offset"), int):
        return _page_shaper(content, str(encoding))
    return None


def _decoded(value: object, encoding: str) -> bytes | None:
    if not isinstance(value, str):
        return None
    if encoding == "utf-8":
        return value.encode("utf-8")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return None


def _rendered(data: bytes, encoding: str) -> str:
    if encoding == "utf-8":
        return data.decode("utf-8")
    return base64.b64encode(data).decode("ascii")


def _boundary(data: bytes, end: int, encoding: str) -> int:
    """``end``, moved back to a character boundary in UTF-8 text."""
    if encoding == "utf-8":
        while 0 < end < len(data) and data[end] & 0xC0 == 0x80:
            end -= 1
    return end


def _page_shaper(content: Mapping[str, object], encoding: str) -> _Shaper | None:
    page = _decoded(content.get("content"), encoding)
    offset = content.get("offset")
    if page is None or not page or not isinstance(offset, int):
        return None

    def build(kept: int) -> str:
        end = _boundary(page, kept, encoding)
        shown: dict[str, object] = {}
        for key, value in content.items():
            if key in {"sha256", "next_offset", "truncated", "content"}:
                continue
            shown[key] = end if key == "bytes" else value
            if key == "total_bytes":
                shown["next_offset"] = offset + end
                shown["truncated"] = True
                shown[NOTE_KEY] = TEXT_NOTE
        shown.setdefault("next_offset", offset + end)
        shown.setdefault("truncated", True)
        shown.setdefault(NOTE_KEY, TEXT_NOTE)
        shown["content"] = _rendered(page[:end], encoding)
        return _encode(_ordered(shown))

    return _Shaper(len(page), build)


def _capture_shaper(content: Mapping[str, object], encoding: str) -> _Shaper | None:
    streams: dict[str, tuple[bytes, int, int | None]] = {}
    for name in ("stdout", "stderr"):
        data = _decoded(content.get(name), encoding)
        observed = content.get(f"{name}_bytes")
        at = content.get(f"{name}_omitted_at")
        if data is None or not isinstance(observed, int) or not (at is None or isinstance(at, int)):
            return None
        streams[name] = (data, observed, at)
    out_size, err_size = len(streams["stdout"][0]), len(streams["stderr"][0])
    if out_size + err_size == 0:
        return None

    def build(budget: int) -> str:
        out_share, err_share = budget - budget // 2, budget // 2
        allowance = {
            "stdout": min(out_size, out_share + max(0, err_share - err_size)),
            "stderr": min(err_size, err_share + max(0, out_share - out_size)),
        }
        shown = dict(content)
        for name, (data, observed, at) in streams.items():
            head, tail = _kept(data, at, allowance[name], encoding)
            omitted = observed - len(head) - len(tail)
            shown[name] = _rendered(head + tail, encoding)
            shown[f"{name}_omitted_bytes"] = omitted
            shown[f"{name}_omitted_at"] = len(head) if omitted else None
        shown["output_truncated"] = True
        shown[NOTE_KEY] = TEXT_NOTE
        return _encode(_ordered(shown))

    return _Shaper(out_size + err_size, build)


def _kept(data: bytes, at: int | None, allowance: int, encoding: str) -> tuple[bytes, bytes]:
    """The head and the tail of one stream's captured ``data`` (whose left-out middle, if
    any, was at ``at``) when ``allowance`` bytes are kept: the new middle holds the old one."""
    if allowance >= len(data):
        return (data[:at], data[at:]) if at is not None else (data, b"")
    keep_head = allowance - allowance // 2
    keep_tail = allowance // 2
    if at is not None:  # the left-out middle lies inside the new one
        if keep_head > at:
            keep_tail, keep_head = keep_tail + keep_head - at, at
        if keep_tail > len(data) - at:
            keep_head, keep_tail = keep_head + keep_tail - (len(data) - at), len(data) - at
    head_end = _boundary(data, keep_head, encoding)
    tail_start = len(data) - keep_tail
    if encoding == "utf-8":
        while tail_start < len(data) and data[tail_start] & 0xC0 == 0x80:
            tail_start += 1
    return data[:head_end], data[tail_start:]


def _noted(content: dict[str, object]) -> dict[str, object]:
    content[NOTE_KEY] = TEXT_NOTE
    return content


def _ordered(content: Mapping[str, object]) -> dict[str, object]:
    """``content`` with its large fields last, in their order (as the tools write them)."""
    ordered = {key: value for key, value in content.items() if key not in LARGE_FIELDS}
    for key in LARGE_FIELDS:
        if key in content:
            ordered[key] = content[key]
    return ordered


def _encode(content: Mapping[str, object]) -> str:
    """Compact JSON, real Unicode: as the tools write their answers."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)
