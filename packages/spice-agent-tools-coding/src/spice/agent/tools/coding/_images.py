"""Which image a file holds, from its first bytes (never its name).

The four formats every multimodal model API takes: PNG, JPEG, GIF and WebP. A file is
one of them when it starts with that format's signature; nothing else is checked (a
damaged image is still answered as that image, and the model sees what it can).
"""

from __future__ import annotations

from typing import Final

SIGNATURE_BYTES: Final = 12
"""The most bytes a signature needs (WebP's: ``RIFF``, a 4-byte size, ``WEBP``)."""

_PREFIXES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(data: bytes) -> str | None:
    """The MIME type of the image ``data`` starts with, or ``None``.

    >>> image_type(b"GIF89a" + bytes(8))
    'image/gif'
    >>> image_type(b"plain text") is None
    True
    """
    for prefix, mime_type in _PREFIXES:
        if data.startswith(prefix):
            return mime_type
    if len(data) >= SIGNATURE_BYTES and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None
