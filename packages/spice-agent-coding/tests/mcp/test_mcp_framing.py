"""``_mcp._framing.LineFramer``: the stdio transport's line framing, sans-IO (contract 12.5).

Every property is checked three ways, as h11's own tests feed their parsers: the whole
stream at once, byte by byte, and in any split hypothesis draws; the bound on both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._mcp._framing import MAXIMUM_FRAME_BYTES, TOO_LARGE, LineFramer

BOUND: Final = 16
"""A small bound, so the tests reach both of its sides cheaply."""

Frame = bytes | object


def whole(data: bytes) -> list[bytes]:
    return [data]


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def trailing(data: bytes) -> list[bytes]:
    return [data, b""]


SPLITS: Final[tuple[Callable[[bytes], list[bytes]], ...]] = (whole, byte_by_byte, trailing)


def framed(chunks: Iterable[bytes], bound: int = BOUND) -> list[Frame]:
    framer = LineFramer(bound)
    frames: list[Frame] = []
    for chunk in chunks:
        frames += framer.feed(chunk)
        assert framer.held <= bound  # never more than the bound held
    return frames + framer.eof()


def expected(data: bytes, bound: int = BOUND) -> list[Frame]:
    """The rule, written the obvious way: split on newlines, mark the long ones."""
    lines = data.split(b"\n")
    last = lines.pop()
    frames: list[Frame] = [line if len(line) <= bound else TOO_LARGE for line in lines]
    if last and len(last) <= bound:
        frames.append(last)
    return frames


@pytest.mark.parametrize("split", SPLITS)
def test_lines_come_out_whole_in_order(split: Callable[[bytes], list[bytes]]) -> None:
    data = b'{"a":1}\n\n{"b":2}\nlast'
    assert [b'{"a":1}', b"", b'{"b":2}', b"last"] == framed(split(data))


@pytest.mark.parametrize("split", SPLITS)
def test_the_bound_on_both_sides(split: Callable[[bytes], list[bytes]]) -> None:
    at = b"x" * BOUND
    over = b"y" * (BOUND + 1)
    assert [at, TOO_LARGE, b"z"] == framed(split(at + b"\n" + over + b"\nz\n"))


@pytest.mark.parametrize("split", SPLITS)
def test_a_long_last_line_without_its_newline_ends_silently(
    split: Callable[[bytes], list[bytes]],
) -> None:
    assert [b"ok"] == framed(split(b"ok\n" + b"q" * (BOUND + 5)))


def test_the_framer_is_reusable_after_eof_and_refuses_a_bound_below_one() -> None:
    framer = LineFramer(BOUND)
    assert [] == framer.feed(b"x" * (BOUND + 1))
    assert [] == framer.eof()
    assert [b"fresh"] == framer.feed(b"fresh\n")
    with pytest.raises(ValueError, match="at least one byte"):
        LineFramer(0)


def test_the_default_bound_is_the_transports() -> None:
    framer = LineFramer()
    assert [b"a" * MAXIMUM_FRAME_BYTES] == framer.feed(b"a" * MAXIMUM_FRAME_BYTES + b"\n")
    assert [TOO_LARGE] == framer.feed(b"a" * (MAXIMUM_FRAME_BYTES + 1) + b"\n")


@given(
    st.lists(st.sampled_from([b"a", b"\n", b"{", b"\xff"]), max_size=120).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_any_split_of_any_stream_gives_the_rule(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert expected(data) == framed(chunks)
