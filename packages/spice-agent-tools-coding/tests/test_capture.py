"""Bounded head-and-tail capture: exact counts, bounded memory, text or base64."""

from __future__ import annotations

import base64
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.tools.coding._capture import (
    UTF8_EDGE_BYTES,
    Capture,
    StreamCapture,
    StreamPart,
)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split ``data`` at the (sorted, de-duplicated) ``cuts``."""
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def feed(sink: StreamCapture, chunks: list[bytes]) -> None:
    """Write every chunk into ``sink``."""
    for chunk in chunks:
        sink.write(chunk)


# -- one stream -------------------------------------------------------------------------


def test_a_short_stream_is_kept_whole() -> None:
    """Below the limits nothing is dropped."""
    sink = StreamCapture(4, 4)
    feed(sink, [b"ab", b"cde"])
    assert (b"abcde", b"") == sink.parts(8)
    assert (5, 5) == (sink.observed, sink.retained)


def test_the_tail_ring_keeps_the_newest_bytes_across_wraps() -> None:
    """Many small writes wrap the ring; it still holds the last bytes in order."""
    sink = StreamCapture(2, 3)
    feed(sink, [bytes([byte]) for byte in b"abcdefghij"])
    assert (b"ab", b"hij") == (sink.head(), sink.tail())
    assert (10, 5) == (sink.observed, sink.retained)


def test_a_write_that_crosses_the_ring_end_wraps() -> None:
    """A chunk split across the end of the ring keeps the order of the newest bytes."""
    sink = StreamCapture(0, 4)
    feed(sink, [b"abcd", b"ef", b"ghi"])
    assert (b"", b"fghi", 9) == (sink.head(), sink.tail(), sink.observed)


def test_a_write_longer_than_the_ring_replaces_it() -> None:
    """One big write keeps only its own last bytes in the tail."""
    sink = StreamCapture(1, 3)
    feed(sink, [b"a", b"bc", b"0123456789"])
    assert (b"a", b"789") == (sink.head(), sink.tail())


def test_zero_limits_count_but_keep_nothing() -> None:
    """A stream with no room still counts every byte."""
    sink = StreamCapture(0, 0)
    feed(sink, [b"abc"])
    assert (3, 0) == (sink.observed, sink.retained)


def test_negative_limits_are_rejected() -> None:
    """A capture needs non-negative limits."""
    with pytest.raises(ValueError, match="negative"):
        StreamCapture(-1, 0)


def test_sinks_accept_any_bytes_like_chunk() -> None:
    """Bytearrays and memoryviews are taken like bytes."""
    sink = StreamCapture(8, 8)
    sink.write(bytearray(b"ab"))
    sink.write(memoryview(b"cd"))
    assert (b"abcd", b"") == sink.parts(16)


# -- two streams and the budget -------------------------------------------------------


def test_a_budget_of_zero_is_rejected() -> None:
    """The budget is at least one byte."""
    with pytest.raises(ValueError, match="at least 1"):
        Capture(0)


def test_output_exactly_at_the_budget_is_not_truncated() -> None:
    """Boundary: observed == budget keeps everything."""
    capture = Capture(10)
    capture.stdout.write(b"0123456789")
    fields = capture.finish().fields(text=True)
    assert ("0123456789", False, None) == (
        fields["stdout"],
        fields["output_truncated"],
        fields["stdout_omitted_at"],
    )


def test_one_byte_past_the_budget_omits_exactly_one_byte() -> None:
    """Boundary: observed == budget + 1 omits one byte from the middle."""
    capture = Capture(10)
    capture.stdout.write(b"0123456789X")
    fields = capture.finish().fields(text=True)
    assert ("012346789X", 1, 5) == (
        fields["stdout"],
        fields["stdout_omitted_bytes"],
        fields["stdout_omitted_at"],
    )


def test_an_unused_share_goes_to_the_other_stream() -> None:
    """stderr keeps its own half and gives stdout what it does not use."""
    capture = Capture(10)
    capture.stdout.write(b"a" * 100)
    capture.stderr.write(b"b" * 2)
    done = capture.finish()
    assert (8, 2) == (done.stdout.captured, done.stderr.captured)


def test_both_streams_over_their_share_split_the_budget_in_half() -> None:
    """Two long streams get ceil and floor of half the budget."""
    capture = Capture(11)
    capture.stdout.write(b"a" * 100)
    capture.stderr.write(b"b" * 100)
    done = capture.finish()
    assert (6, 5) == (done.stdout.captured, done.stderr.captured)
    assert (94, 95) == (done.stdout.omitted, done.stderr.omitted)


def test_a_budget_of_one_byte_goes_to_stdout_first() -> None:
    """The smallest budget: stdout's share is the one byte; stderr keeps nothing."""
    capture = Capture(1)
    capture.stdout.write(b"xy")
    capture.stderr.write(b"z")
    fields = capture.finish().fields(text=True)
    assert ("x", 1, 1) == (
        fields["stdout"],
        fields["stdout_omitted_bytes"],
        fields["stdout_omitted_at"],
    )
    assert ("", 1, 0) == (
        fields["stderr"],
        fields["stderr_omitted_bytes"],
        fields["stderr_omitted_at"],
    )


# -- text and base64 -------------------------------------------------------------------


def test_a_split_character_at_a_cut_is_dropped_and_counted() -> None:
    """A cut inside a UTF-8 character drops its pieces and counts them as omitted."""
    capture = Capture(6)
    capture.stdout.write("a€b€c".encode())  # 9 bytes; both cuts split a euro sign
    fields = capture.finish().fields(text=True)
    assert ("utf-8", "ac", 7, 1) == (
        fields["encoding"],
        fields["stdout"],
        fields["stdout_omitted_bytes"],
        fields["stdout_omitted_at"],
    )


def test_invalid_utf8_makes_both_streams_base64_of_the_exact_bytes() -> None:
    """Bytes that are not UTF-8 anywhere: base64, nothing trimmed."""
    capture = Capture(6)
    capture.stdout.write(b"\xff" * 10)
    capture.stderr.write(b"ok")
    fields = capture.finish().fields(text=True)
    assert "base64" == fields["encoding"]
    assert b"\xff" * 4 == base64.b64decode(str(fields["stdout"]))
    assert (b"ok", 6) == (base64.b64decode(str(fields["stderr"])), fields["stdout_omitted_bytes"])


def test_base64_keeps_the_untrimmed_bytes_when_asked() -> None:
    """``text=False`` gives base64 of every captured byte, even for valid text."""
    data = "a€b€c".encode()
    capture = Capture(6)
    capture.stdout.write(data)
    fields = capture.finish().fields(text=False)
    assert ("base64", 3) == (fields["encoding"], fields["stdout_omitted_bytes"])
    assert data[:3] + data[-3:] == base64.b64decode(str(fields["stdout"]))


def test_a_part_without_omission_is_text_only_when_valid() -> None:
    """An untruncated part is never trimmed."""
    assert StreamPart(1, b"\xc3", b"").text() is None
    whole = StreamPart(2, "é".encode(), b"")
    assert whole == whole.text()


# -- properties --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    budget=st.integers(min_value=1, max_value=64),
    out=st.binary(max_size=300),
    err=st.binary(max_size=300),
    out_cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=40),
    err_cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=40),
    text=st.booleans(),
)
def test_any_chunking_of_any_streams_keeps_every_invariant(
    budget: int, out: bytes, err: bytes, out_cuts: list[int], err_cuts: list[int], text: bool
) -> None:
    """Captured <= budget; observed = captured + omitted; head prefix; tail suffix; memory."""
    capture = Capture(budget)
    for sink, data, cuts in ((capture.stdout, out, out_cuts), (capture.stderr, err, err_cuts)):
        for chunk in chunked(data, cuts):
            sink.write(chunk)
            assert sink.retained <= budget
    done = capture.finish()
    assert done.stdout.captured + done.stderr.captured <= budget
    fields = done.fields(text=text)
    total = 0
    for name, data, part in (("stdout", out, done.stdout), ("stderr", err, done.stderr)):
        assert len(data) == part.observed == part.captured + part.omitted
        assert data.startswith(part.head)
        assert data.endswith(part.tail)
        assert (part.omitted_at is None) == (part.omitted == 0)
        shown = fields[name]
        assert isinstance(shown, str)
        kept = shown.encode() if fields["encoding"] == "utf-8" else base64.b64decode(shown)
        omitted = fields[f"{name}_omitted_bytes"]
        at = fields[f"{name}_omitted_at"]
        assert isinstance(omitted, int)
        assert len(data) == len(kept) + omitted
        if at is None:
            assert data == kept
        else:
            assert isinstance(at, int)
            assert data.startswith(kept[:at])
            assert data.endswith(kept[at:])
        assert part.captured - len(kept) <= 2 * UTF8_EDGE_BYTES
        total += len(kept)
    assert total <= budget
    assert fields["output_truncated"] == bool(
        fields["stdout_omitted_bytes"] or fields["stderr_omitted_bytes"]
    )


@settings(max_examples=100, deadline=None)
@given(
    budget=st.integers(min_value=1, max_value=40),
    text=st.text(st.characters(exclude_categories=["Cs"]), max_size=200),
    cuts=st.lists(st.integers(min_value=0, max_value=900), max_size=12),
)
def test_utf8_text_stays_text_at_any_cut(budget: int, text: str, cuts: list[int]) -> None:
    """Valid UTF-8 output is always answered as text, however the budget cuts it."""
    data = text.encode("utf-8")
    capture = Capture(budget)
    for chunk in chunked(data, cuts):
        capture.stdout.write(chunk)
    fields = capture.finish().fields(text=True)
    assert "utf-8" == fields["encoding"]
    assert len(str(fields["stdout"]).encode()) <= budget
