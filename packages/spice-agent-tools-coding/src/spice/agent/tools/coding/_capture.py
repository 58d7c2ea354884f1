"""Bounded head-and-tail capture of a child's stdout and stderr.

Each stream is a ``Sink`` that keeps, whatever the child writes, at most
``budget`` bytes: the first ``ceil(budget / 2)`` bytes (the head) and the last
``floor(budget / 2)`` bytes that follow the head (the tail, a ring buffer). It
also counts every byte it was given (``observed``). Memory per stream is
therefore bounded by ``budget`` and never depends on how much the child writes.

``Capture.finish`` decides how much of each stream goes into the answer, so that
both streams together never exceed ``budget``:

* each stream has a share: stdout ``ceil(budget / 2)``, stderr ``floor(budget / 2)``;
* a stream that needs less than its share gives the unused rest to the other one;
* a stream given ``a`` bytes out of ``n > a`` observed keeps its first
  ``ceil(a / 2)`` and its last ``floor(a / 2)`` bytes; the middle is omitted and
  ``omitted_at`` is the offset in the captured bytes where the middle was.

For every stream ``observed == captured + omitted`` holds exactly.

Text: the answer is ``utf-8`` when both captured streams are valid UTF-8. A cut
at the edge of the head or the tail may split a multi-byte character; then the
pieces of that one character at that edge (at most three bytes: an unfinished
sequence at the end of the head, continuation bytes at the start of the tail)
are dropped so the text stays text, and they are counted as omitted (the middle
grows by those bytes). Nothing else is ever dropped: when a stream is still not
valid UTF-8, nothing is dropped at all and the answer is base64 of the exact
captured bytes (both streams, since ``encoding`` is one field).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Final, final

UTF8_EDGE_BYTES: Final = 3
"""Most bytes of one split UTF-8 character that a cut edge may leave behind."""


@final
class StreamCapture:
    """A ``Sink`` keeping a bounded head and tail of one stream and counting every byte."""

    __slots__ = ("_head", "_head_limit", "_observed", "_position", "_tail", "_tail_limit")

    def __init__(self, head_limit: int, tail_limit: int) -> None:
        if head_limit < 0 or tail_limit < 0:
            raise ValueError("capture limits must not be negative")
        self._head_limit = head_limit
        self._tail_limit = tail_limit
        self._head = bytearray()
        self._tail = bytearray()
        self._position = 0
        self._observed = 0

    @property
    def observed(self) -> int:
        """Every byte written so far."""
        return self._observed

    @property
    def retained(self) -> int:
        """Bytes held in memory (at most ``head_limit + tail_limit``)."""
        return len(self._head) + len(self._tail)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Take one chunk: fill the head, then keep the newest bytes in the tail ring."""
        view = memoryview(data).cast("B")
        self._observed += len(view)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += view[:room]
            view = view[room:]
        if len(view):
            self._push(view)

    def _push(self, view: memoryview) -> None:
        limit = self._tail_limit
        size = len(view)
        if limit == 0:
            return
        if size >= limit:
            self._tail[:] = view[size - limit :]
            self._position = 0
            return
        if len(self._tail) < limit:
            fill = min(limit - len(self._tail), size)
            self._tail += view[:fill]
            view = view[fill:]
            size -= fill
            if size == 0:
                return
        position = self._position
        first = min(size, limit - position)
        self._tail[position : position + first] = view[:first]
        rest = size - first
        if rest:
            self._tail[:rest] = view[first:]
        self._position = (position + size) % limit

    def head(self) -> bytes:
        """The retained head (the stream's first bytes)."""
        return bytes(self._head)

    def tail(self) -> bytes:
        """The retained tail, oldest byte first (the stream's last bytes after the head)."""
        if len(self._tail) < self._tail_limit:
            return bytes(self._tail)
        return bytes(self._tail[self._position :] + self._tail[: self._position])

    def parts(self, allowance: int) -> tuple[bytes, bytes]:
        """The head and tail pieces when ``allowance`` bytes of the stream may be kept."""
        observed = self._observed
        if allowance >= observed:
            return self.head() + self.tail(), b""
        keep_head = allowance - allowance // 2
        keep_tail = allowance // 2
        if observed <= self._head_limit + self._tail_limit:
            whole = self.head() + self.tail()
            return whole[:keep_head], whole[observed - keep_tail :]
        tail = self.tail()
        return self.head()[:keep_head], tail[len(tail) - keep_tail :]


@final
@dataclass(frozen=True, slots=True)
class StreamPart:
    """What one stream contributes to the answer."""

    observed: int
    head: bytes
    tail: bytes

    @property
    def captured(self) -> int:
        """Bytes in the answer."""
        return len(self.head) + len(self.tail)

    @property
    def omitted(self) -> int:
        """Bytes observed but left out (the middle)."""
        return self.observed - self.captured

    @property
    def omitted_at(self) -> int | None:
        """Offset in the captured bytes where the omitted middle was; ``None`` if none."""
        return len(self.head) if self.omitted else None

    def text(self) -> StreamPart | None:
        """This part as valid UTF-8, dropping only a character split by a cut edge."""
        if not self.omitted:
            return self if _is_utf8(self.head) else None
        head = self.head[: len(self.head) - _split_at_end(self.head)]
        tail = self.tail[_split_at_start(self.tail) :]
        if not (_is_utf8(head) and _is_utf8(tail)):
            return None
        return StreamPart(self.observed, head, tail)


def _sequence_length(lead: int) -> int:
    """Bytes of the UTF-8 sequence ``lead`` starts; 0 when it is no lead byte."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _split_at_end(data: bytes) -> int:
    """How many bytes at the end are the beginning of a character cut short (0..3)."""
    for size in range(1, min(UTF8_EDGE_BYTES, len(data)) + 1):
        piece = data[len(data) - size :]
        if size < _sequence_length(piece[0]) and all(map(_is_continuation, piece[1:])):
            return size
    return 0


def _split_at_start(data: bytes) -> int:
    """How many bytes at the start are the rest of a character cut short (0..3)."""
    count = 0
    while count < min(UTF8_EDGE_BYTES, len(data)) and _is_continuation(data[count]):
        count += 1
    return count


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@final
@dataclass(frozen=True, slots=True)
class Captured:
    """The two streams' parts, exact bytes and (when possible) text."""

    stdout: StreamPart
    stderr: StreamPart

    def fields(self, *, text: bool) -> dict[str, object]:
        """The shell result's output fields, as UTF-8 text when ``text`` and possible."""
        out, err = self.stdout, self.stderr
        encoding = "base64"
        if text:
            out_text, err_text = out.text(), err.text()
            if out_text is not None and err_text is not None:
                out, err, encoding = out_text, err_text, "utf-8"
        return {
            "encoding": encoding,
            "stdout": _render(out, encoding),
            "stderr": _render(err, encoding),
            "stdout_bytes": out.observed,
            "stderr_bytes": err.observed,
            "output_truncated": bool(out.omitted or err.omitted),
            "stdout_omitted_bytes": out.omitted,
            "stderr_omitted_bytes": err.omitted,
            "stdout_omitted_at": out.omitted_at,
            "stderr_omitted_at": err.omitted_at,
        }


def _render(part: StreamPart, encoding: str) -> str:
    data = part.head + part.tail
    if encoding == "utf-8":
        return data.decode("utf-8")
    return base64.b64encode(data).decode("ascii")


@final
class Capture:
    """The stdout and stderr sinks of one call, sharing one byte budget.

    >>> capture = Capture(4)
    >>> capture.stdout.write(b"abcdef")
    >>> capture.finish().fields(text=True)["stdout"]
    'abef'
    """

    __slots__ = ("_budget", "stderr", "stdout")

    def __init__(self, budget: int) -> None:
        if budget < 1:
            raise ValueError("the capture budget must be at least 1 byte")
        self._budget = budget
        head, tail = budget - budget // 2, budget // 2
        self.stdout = StreamCapture(head, tail)
        self.stderr = StreamCapture(head, tail)

    def finish(self, budget: int | None = None) -> Captured:
        """Split the budget (or a smaller ``budget``) between the streams; take their parts."""
        budget = self._budget if budget is None else max(0, min(budget, self._budget))
        out_share = budget - budget // 2
        err_share = budget // 2
        out_seen, err_seen = self.stdout.observed, self.stderr.observed
        out_allowance = min(out_seen, out_share + max(0, err_share - err_seen))
        err_allowance = min(err_seen, err_share + max(0, out_share - out_seen))
        return Captured(
            StreamPart(out_seen, *self.stdout.parts(out_allowance)),
            StreamPart(err_seen, *self.stderr.parts(err_allowance)),
        )
