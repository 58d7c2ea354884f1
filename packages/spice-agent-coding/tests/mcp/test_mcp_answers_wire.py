"""Every answer fits a client's 1 MiB line, and a whole image is shown as an image (11.3).

Over stdio, measured on the wire: a ``read`` of a 256 KiB page of the worst bytes (quotes,
backslashes, control bytes, characters of 2 and 4 bytes), also under the largest page
bound, and a command whose output is quotes, each answer in one line of at most
``MAXIMUM_ANSWER_BYTES``, whole in its structured content (text, or base64 where the
escaped text would pass the payload bound: contract 12.4). ``frame`` itself turns any answer
past the bound into a JSON-RPC error (both sides of the bound).

Images: real small images written here byte for byte (a PNG made with ``zlib`` and
``struct``, a GIF), and the signatures of a JPEG and a WebP file, read through the real
MCP client: an image block with the MIME type of the bytes (a PNG named ``.txt`` is an
image, a text named ``.png`` is text), the structured result without the base64 and with a
note; an image larger than one page gets the note and no image block (both sides of
that bound); a page from another offset is no image.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import zlib
from pathlib import Path
from typing import Any, Final

import pytest
from mcp import Client
from mcp.types import (
    INTERNAL_ERROR,
    CallToolResult,
    ImageContent,
    JSONRPCResponse,
    TextContent,
)
from raw_peer import RawPeer, tool_call

from spice.agent.coding import compose, mcp_server
from spice.agent.coding._mcp._answers import IMAGE_NOT_WHOLE, IMAGE_SENT, NOTE_BYTES
from spice.agent.coding._mcp._json import ANSWER_TOO_LARGE, frame
from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES, Config

PAGE: Final = 262_144
WORST: Final = {
    "quotes": b'"',
    "backslashes": b"\\",
    "controls": b"\x01",
    "two-byte": "é".encode(),
    "four-byte": "𝄞".encode(),
}


def png(width: int, height: int, *, pixels: bytes | None = None, padding: int = 0) -> bytes:
    """A real RGB PNG (zlib + struct), optionally with a ``tEXt`` chunk of ``padding``
    letters (to reach an exact size)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = pixels if pixels is not None else bytes(3 * width * height)
    rows = b"".join(b"\x00" + raw[row * 3 * width : (row + 1) * 3 * width] for row in range(height))
    text = chunk(b"tEXt", b"Comment\x00" + b"a" * padding) if padding else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + text
        + chunk(b"IDAT", zlib.compress(rows, 0))
        + chunk(b"IEND", b"")
    )


GIF: Final = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff"
    b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)
"""A real 1x1 GIF: header, a two-colour table, one image descriptor, its LZW data, end."""
JPEG_HEADER: Final = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
"""A JPEG's start of image and JFIF segment (the signature; not a decodable picture)."""
WEBP_HEADER: Final = b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x00"
"""A WebP file's RIFF header and the start of a lossless 1x1 chunk (the signature)."""


# -- the wire ----------------------------------------------------------------------------


def test_over_stdio_every_worst_page_and_output_fits_one_mebibyte_line(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for name, unit in WORST.items():
        (root / f"{name}.txt").write_bytes(unit * (PAGE // len(unit)))
    quotes = [sys.executable, "-c", "import sys; sys.stdout.write(chr(34) * 524288)"]
    lines: dict[str, tuple[int, dict[str, Any]]] = {}
    with RawPeer(root, "--max-read-bytes", "524288", "--max-output-bytes", "524288") as peer:
        peer.initialize()
        for number, name in enumerate(WORST):
            peer.send(tool_call(number, "read", {"path": f"{name}.txt"}))
            answer = peer.answer(number)
            lines[name] = (peer.last_line_bytes, answer["result"]["structuredContent"])
        peer.send(tool_call("shell", "shell", {"argv": quotes}))
        answer = peer.answer("shell")
        lines["shell"] = (peer.last_line_bytes, answer["result"]["structuredContent"])
    for name, (size, content) in lines.items():
        assert size <= MAXIMUM_ANSWER_BYTES, name
        assert content["ok"] is True, name
    for name in ("quotes", "backslashes"):  # text, whole: escaped, within the payload bound
        size, content = lines[name]
        assert ("utf-8", False, PAGE) == (
            content["encoding"],
            content["truncated"],
            content["bytes"],
        )
        assert size > 900_000, name  # the text block beside it is as long as fits
    size, controls = lines["controls"]  # six characters a byte escaped: base64, whole
    assert ("base64", False, PAGE) == (
        controls["encoding"],
        controls["truncated"],
        controls["bytes"],
    )
    shell_size, shell = lines["shell"]  # 512 KiB of quotes: base64, whole (the seed's rule)
    assert ("base64", False, 524_288) == (
        shell["encoding"],
        shell["output_truncated"],
        shell["stdout_bytes"],
    )
    assert base64.b64decode(shell["stdout"]) == b'"' * 524_288
    assert shell_size > 900_000


def response_of(text: str) -> JSONRPCResponse:
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return JSONRPCResponse(jsonrpc="2.0", id=7, result=result)


def test_frame_sends_an_answer_of_exactly_the_bound_and_refuses_one_byte_more() -> None:
    """An answer line of ``MAXIMUM_ANSWER_BYTES`` goes out as it is; one byte longer becomes
    a JSON-RPC error with the same id (an answer of another tool: ours never get there)."""
    empty = len(frame(response_of("")))
    at_bound = frame(response_of("a" * (MAXIMUM_ANSWER_BYTES - empty)))
    assert MAXIMUM_ANSWER_BYTES == len(at_bound)
    assert "a" * 10 in at_bound.decode()
    past = frame(response_of("a" * (MAXIMUM_ANSWER_BYTES - empty + 1)))
    error = json.loads(past)
    assert (7, INTERNAL_ERROR, ANSWER_TOO_LARGE) == (
        error["id"],
        error["error"]["code"],
        error["error"]["message"],
    )
    assert len(past) < 1024


# -- images ------------------------------------------------------------------------------


async def read_over_mcp(
    root: Path, arguments: dict[str, object], max_read_bytes: int = PAGE
) -> CallToolResult:
    config = Config(root, max_read_bytes=max_read_bytes)
    async with (
        compose(config) as dispatcher,
        Client(mcp_server(dispatcher, config=config)) as client,
    ):
        return await client.call_tool("read", arguments)


@pytest.mark.parametrize(
    ("name", "data", "mime_type"),
    [
        ("plot.txt", png(2, 2), "image/png"),  # the name says text: the bytes say PNG
        ("dot.gif", GIF, "image/gif"),
        ("photo", JPEG_HEADER + b"\xff\xd9", "image/jpeg"),
        ("pic.bin", WEBP_HEADER, "image/webp"),
    ],
)
async def test_a_whole_image_is_an_image_block_beside_the_structured_result(
    tmp_path: Path, name: str, data: bytes, mime_type: str
) -> None:
    (tmp_path / name).write_bytes(data)
    result = await read_over_mcp(tmp_path, {"path": name})
    assert 2 == len(result.content)
    text, image = result.content
    assert isinstance(text, TextContent)
    assert isinstance(image, ImageContent)
    assert (mime_type, data) == (image.mime_type, base64.b64decode(image.data))
    shown = result.structured_content
    assert shown == json.loads(text.text)
    assert (True, mime_type, "base64", len(data), IMAGE_SENT) == (
        shown["ok"],
        shown["mime_type"],
        shown["encoding"],
        shown["bytes"],
        shown["note"],
    )
    assert "content" not in shown  # the image block carries the bytes, once
    assert result.is_error is False


async def test_a_text_named_png_is_text(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_bytes(b"not an image\n")
    result = await read_over_mcp(tmp_path, {"path": "notes.png"})
    assert [TextContent] == [type(block) for block in result.content]
    shown = result.structured_content
    assert ("utf-8", "not an image\n") == (shown["encoding"], shown["content"])
    assert "mime_type" not in shown
    assert "note" not in shown


async def test_a_page_of_an_image_is_no_image_and_says_why(tmp_path: Path) -> None:
    """A limit shorter than the file: the first page has the MIME type, a note and its
    base64, no image block; a page from another offset is just bytes."""
    data = png(4, 4)
    (tmp_path / "p.png").write_bytes(data)
    first = await read_over_mcp(tmp_path, {"path": "p.png", "limit": 20})
    assert [TextContent] == [type(block) for block in first.content]
    shown = first.structured_content
    assert ("image/png", IMAGE_NOT_WHOLE, True) == (
        shown["mime_type"],
        shown["note"],
        shown["truncated"],
    )
    assert data[:20] == base64.b64decode(shown["content"])
    assert list(shown)[-1] == "content"  # the large field stays last
    later = await read_over_mcp(tmp_path, {"path": "p.png", "offset": 20})
    assert [TextContent] == [type(block) for block in later.content]
    assert "mime_type" not in later.structured_content


async def test_an_image_as_large_as_the_largest_page_is_shown_and_a_page_of_it_is_not(
    tmp_path: Path,
) -> None:
    """Both sides of the page bound for an image: a 512 KiB PNG (its base64 is 699,052
    characters, once in the image block) is an image block at ``max_read_bytes`` 524,288;
    one byte more is a page of it, with the note and no image block."""
    pixels = os.urandom(3 * 400 * 400)
    base = png(400, 400, pixels=pixels)
    for size, shown in ((524_288, True), (524_289, False)):
        data = png(400, 400, pixels=pixels, padding=size - len(base) - 20)  # tEXt: 20 more
        assert size == len(data)
        (tmp_path / "big.png").write_bytes(data)
        result = await read_over_mcp(tmp_path, {"path": "big.png"}, max_read_bytes=524_288)
        images = [block for block in result.content if isinstance(block, ImageContent)]
        assert shown == bool(images), size
        note = result.structured_content["note"]
        assert (IMAGE_SENT if shown else IMAGE_NOT_WHOLE) == note
        if shown:
            assert data == base64.b64decode(images[0].data)


def test_the_notes_fit_their_room() -> None:
    assert max(len(IMAGE_SENT.encode()), len(IMAGE_NOT_WHOLE.encode())) <= NOTE_BYTES
