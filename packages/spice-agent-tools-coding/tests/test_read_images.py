"""``read`` names an image by its first bytes (PNG, JPEG, GIF, WebP), never by its name."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import zlib
from pathlib import Path

import pytest
from fakes import content_of

from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read
from spice.agent.tools.coding._images import SIGNATURE_BYTES, image_type


def tiny_png() -> bytes:
    """A real 1x1 grey PNG, written with zlib and struct."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\x80"))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (tiny_png(), "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image/jpeg"),
        (b"GIF87a\x01\x00\x01\x00", "image/gif"),
        (b"GIF89a\x01\x00\x01\x00", "image/gif"),
        (b"RIFF\x1a\x00\x00\x00WEBPVP8L", "image/webp"),
        (b"RIFF\x1a\x00\x00\x00WAVEfmt ", None),  # a RIFF file that is no WebP
        (b"RIFF\x1a\x00\x00\x00WEB", None),  # too short to be one
        (b"\x89PNG\r\n", None),  # a cut signature
        (b"GIF90a", None),
        (b"", None),
        (b"plain text", None),
    ],
)
def test_image_type_reads_the_signature(data: bytes, expected: str | None) -> None:
    assert expected == image_type(data)
    assert SIGNATURE_BYTES == 12


def read(root: Path, arguments: dict[str, object]) -> dict[str, object]:
    tool = new_read(Config(root))
    return content_of(asyncio.run(tool.execute(Call("c", "read", json.dumps(arguments)))))


def test_a_png_named_txt_is_a_png_in_base64(tmp_path: Path) -> None:
    data = tiny_png()
    (tmp_path / "notes.txt").write_bytes(data)
    content = read(tmp_path, {"path": "notes.txt"})
    assert ("base64", "image/png", False) == (
        content["encoding"],
        content["mime_type"],
        content["truncated"],
    )
    assert data == base64.b64decode(str(content["content"]))


def test_a_gif_whose_bytes_are_valid_utf8_is_still_an_image(tmp_path: Path) -> None:
    """An image is base64 even when its bytes happen to be text (only ASCII here)."""
    data = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
    data.decode("utf-8")  # valid UTF-8 indeed
    (tmp_path / "g").write_bytes(data)
    content = read(tmp_path, {"path": "g"})
    assert ("base64", "image/gif") == (content["encoding"], content["mime_type"])


def test_a_text_named_png_is_text(tmp_path: Path) -> None:
    (tmp_path / "plot.png").write_text("a plot, described\n")
    content = read(tmp_path, {"path": "plot.png"})
    assert ("utf-8", None) == (content["encoding"], content.get("mime_type"))


def test_only_a_page_from_offset_0_is_named(tmp_path: Path) -> None:
    """A page elsewhere in an image does not start with its signature: no ``mime_type``."""
    data = tiny_png()
    (tmp_path / "p").write_bytes(data)
    assert "image/png" == read(tmp_path, {"path": "p", "limit": 8})["mime_type"]
    assert "mime_type" not in read(tmp_path, {"path": "p", "offset": 8})
