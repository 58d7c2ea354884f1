"""The stdio transport's line framing, sans-IO: bytes in, whole lines (or ``TOO_LARGE``) out.

MCP over stdio is one JSON-RPC message a line. ``LineFramer`` keeps the partial line
inside (at most ``MAXIMUM_FRAME_BYTES``); ``_stdio`` reads, feeds and delivers, and
nothing here reads or writes. A line longer than the bound is never held: its bytes are
dropped as they come and its end reports ``TOO_LARGE`` once, so the transport answers it
and goes on with the next line. At end of input a last line without its newline is
still a line; a too-long one then ends silently (its newline never came).
"""

from __future__ import annotations

from typing import Final, final

from spice.agent.tool import MAXIMUM_PAYLOAD_BYTES

__all__ = ["MAXIMUM_FRAME_BYTES", "TOO_LARGE", "LineFramer"]

MAXIMUM_FRAME_BYTES: Final = 8 * MAXIMUM_PAYLOAD_BYTES
"""Longest JSON-RPC line accepted: a maximal payload, escaped, inside its envelope.

A longer line is discarded as it streams in (memory stays bounded) and never delivered.
"""


@final
class _TooLarge:
    """The marker of a line that passed ``MAXIMUM_FRAME_BYTES`` (its bytes are gone)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_LARGE"


TOO_LARGE: Final = _TooLarge()
"""What ``LineFramer`` gives in place of a line over the bound."""


@final
class LineFramer:
    """Split a byte stream into lines, bounded: ``feed`` each chunk, then ``eof``.

    >>> framer = LineFramer(bound=8)
    >>> framer.feed(b'{"a":1}\\n{"b"')
    [b'{"a":1}']
    >>> framer.feed(b':22222}\\n')
    [TOO_LARGE]
    >>> framer.eof()
    []
    """

    __slots__ = ("_bound", "_buffer", "_discarding")

    def __init__(self, bound: int = MAXIMUM_FRAME_BYTES) -> None:
        if bound < 1:
            raise ValueError("the bound must be at least one byte")
        self._bound = bound
        self._buffer = bytearray()
        self._discarding = False

    @property
    def held(self) -> int:
        """How many bytes of a partial line are held (never more than the bound)."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[bytes | _TooLarge]:
        """The lines ``chunk`` completes, in order (without their newline)."""
        frames: list[bytes | _TooLarge] = []
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            if self._discarding:
                self._discarding = False
                frames.append(TOO_LARGE)
            elif len(self._buffer) + newline - start > self._bound:
                self._buffer.clear()
                frames.append(TOO_LARGE)
            else:
                self._buffer += chunk[start:newline]
                frames.append(bytes(self._buffer))
                self._buffer.clear()
            start = newline + 1
        if not self._discarding:
            self._buffer += chunk[start:]
            if len(self._buffer) > self._bound:
                self._buffer.clear()
                self._discarding = True
        return frames

    def eof(self) -> list[bytes | _TooLarge]:
        """The last line, if input ended inside one that fits; the framer is then empty."""
        frames: list[bytes | _TooLarge] = []
        if self._buffer and not self._discarding:
            frames.append(bytes(self._buffer))
        self._buffer.clear()
        self._discarding = False
        return frames
