"""A dispatched answer as MCP content blocks: the JSON text, and an image where there is one.

Every answer is a text block holding the content object's JSON text, beside the same
object as ``structuredContent``. A ``read`` of a whole image (the product says
``mime_type``: PNG, JPEG, GIF or WebP by the file's first bytes; the page from offset 0
is the whole file, in base64) is answered with an image block as well, so a multimodal
model sees it: the text and the structured content then leave the base64 ``content``
out (the image block carries it, once) and say so in ``note``. A page of an image that
is not the whole image gets no image block (a partial image is no image) and a ``note``
saying how to get it whole.

Bounds: the image answer is smaller than the product's answer it comes from (the same
fields but ``content``, whose base64 is written once instead of twice, plus a note of at
most ``NOTE_BYTES``); the product keeps that answer within ``MAXIMUM_ANSWER_BYTES`` less
the envelope's room, which holds the note.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from mcp.types import ImageContent, TextContent

from ._text_block import shaped_text

IMAGE_SENT: Final = "the file is the image block of this answer; its base64 is not repeated here"
IMAGE_NOT_WHOLE: Final = (
    "a page of an image, not all of it, so no image block: an image is shown only when one "
    "page holds the whole file"
)
SHOWN_NAME_CHARS: Final = 64
"""Most characters of a refused call's tool name that the answer shows (model input)."""
NOTE_BYTES: Final = 160
"""The longest note (tested): the room kept for it within the envelope's bytes."""


def blocks_of(
    content: Mapping[str, object], text: str, chars: int | None = None
) -> tuple[list[TextContent | ImageContent], dict[str, object]]:
    """The content blocks and the structured content of the answer whose object is
    ``content`` and whose JSON text is ``text`` (used as is where nothing changes).

    The structured content is the whole answer; the text block is ``text`` where both fit
    the wire's bound together (and ``chars``, a client's bound on the text's characters),
    else shortened to fit (``_text_block``)."""
    mime_type = content.get("mime_type")
    if not (isinstance(mime_type, str) and mime_type.startswith("image/")):
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        block = shaped_text(content, text, size, chars)
        return [TextContent(type="text", text=block)], dict(content)
    data = content.get("content")
    whole = content.get("offset") == 0 and content.get("truncated") is False
    if whole and content.get("encoding") == "base64" and isinstance(data, str):
        shown = {key: value for key, value in content.items() if key != "content"}
        shown["note"] = IMAGE_SENT
        image = ImageContent(type="image", data=data, mime_type=mime_type)
        return [TextContent(type="text", text=_json(shown)), image], shown
    shown = {key: value for key, value in content.items() if key != "content"}
    shown["note"] = IMAGE_NOT_WHOLE
    if "content" in content:
        shown["content"] = content["content"]  # the large field stays last
    encoded = _json(shown)
    text_shown = shaped_text(shown, encoded, len(encoded.encode("utf-8")), chars)
    return [TextContent(type="text", text=text_shown)], shown


def _json(content: Mapping[str, object]) -> str:
    """Compact JSON, real Unicode: as the tools write their answers."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def unknown_tool_problem(name: str, names: Sequence[str]) -> str:
    """The problem of a call to ``name``, which no tool has, when the call could not even be
    formed (a name that is no valid identity): the dispatcher's words for the same case,
    the name shortened and its non-printable characters shown as ``?``. ``names`` are the
    served tools' (a few, each a short identity)."""
    shown = "".join(c if c.isprintable() else "?" for c in name[:SHOWN_NAME_CHARS])
    shown = f"'{shown}'" + ("..." if len(name) > SHOWN_NAME_CHARS else "")
    tools = f"the tools are: {', '.join(names)}" if names else "there are no tools"
    return f"no tool named {shown} is available; {tools}"
