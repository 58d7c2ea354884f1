"""The text block beside the structured content, shaped to the room left (contract 12.4).

Drawn pages and captures of the worst bytes, under drawn structured sizes and character
bounds: the text block fits its room, and what it says is true of the whole answer (a
prefix page with its ``next_offset``; each stream's start and end with exact omitted
counts). Both sides: an answer that fits comes back as it is, with no note.
"""

from __future__ import annotations

import base64
import json
from typing import Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spice.agent.coding._mcp._text_block import (
    ENVELOPE_BYTES,
    MINIMAL_TEXT_BYTES,
    TEXT_NOTE,
    shaped_text,
    string_bytes,
    text_chars,
)
from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES

UNITS: Final = ('"', "\\", "\x01", "\n", "é", "𝄞", "a")
ROOM: Final = MAXIMUM_ANSWER_BYTES - ENVELOPE_BYTES

texts = st.lists(
    st.tuples(st.sampled_from(UNITS), st.integers(1, 40_000)), min_size=1, max_size=4
).map(lambda runs: "".join(unit * count for unit, count in runs))


def encode(content: dict[str, object]) -> str:
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def page_answer(body: str, *, base64_page: bool, offset: int = 7) -> dict[str, object]:
    data = body.encode()
    shown = base64.b64encode(data).decode() if base64_page else body
    return {
        "ok": True,
        "path": "f",
        "offset": offset,
        "bytes": len(data),
        "total_bytes": offset + len(data),
        "truncated": False,
        "encoding": "base64" if base64_page else "utf-8",
        "file_sha256": "0" * 64,
        "content": shown,
    }


def page_bytes(content: dict[str, object]) -> bytes:
    body = str(content["content"])
    return base64.b64decode(body) if content["encoding"] == "base64" else body.encode()


@settings(max_examples=40, deadline=None)
@given(
    body=texts,
    base64_page=st.booleans(),
    structured=st.integers(0, ROOM),
    chars=st.one_of(st.none(), st.integers(500, 60_000)),
)
@example(body="é" * 300_000, base64_page=False, structured=ROOM - 200_000, chars=None)
@example(body='"' * 300_000, base64_page=False, structured=ROOM - 50_000, chars=None)
@example(body="a" * 100_000, base64_page=True, structured=ROOM - 40_000, chars=None)
@example(body="𝄞" * 50_000, base64_page=False, structured=0, chars=39_744)
@example(body="a" * 100_000, base64_page=False, structured=ROOM - 300, chars=None)
@example(body="a" * 100_000, base64_page=False, structured=ROOM, chars=None)
def test_a_page_s_text_is_a_prefix_page_that_fits(
    body: str, base64_page: bool, structured: int, chars: int | None
) -> None:
    content = page_answer(body, base64_page=base64_page)
    text = encode(content)
    shaped = shaped_text(content, text, structured, chars)
    room = ROOM - structured
    fits = string_bytes(text) <= room and (chars is None or text_chars(text) <= chars)
    if fits:
        assert text == shaped
        return
    shown = json.loads(shaped)
    if shown == {"ok": True, "text_note": TEXT_NOTE}:  # no room at all: the smallest text
        assert string_bytes(shaped) <= MINIMAL_TEXT_BYTES
        return
    assert string_bytes(shaped) <= room
    assert chars is None or text_chars(shaped) <= chars
    assert TEXT_NOTE == shown["text_note"]
    if "content" not in shown:  # not even an empty page fits: the small fields, or less
        return
    kept = page_bytes(shown)
    assert (True, 7 + len(kept), len(kept)) == (
        shown["truncated"],
        shown["next_offset"],
        shown["bytes"],
    )
    assert body.encode().startswith(kept)
    assert list(shown)[-1] == "content"


def capture_answer(out: bytes, err: bytes, omitted: int) -> dict[str, object]:
    """A capture whose stdout had ``omitted`` bytes left out in its middle already."""
    at = len(out) // 2 if omitted else None
    return {
        "ok": True,
        "exit_code": 0,
        "encoding": "base64",
        "stdout_bytes": len(out) + omitted,
        "stderr_bytes": len(err),
        "output_truncated": bool(omitted),
        "stdout_omitted_bytes": omitted,
        "stderr_omitted_bytes": 0,
        "stdout_omitted_at": at,
        "stderr_omitted_at": None,
        "stdout": base64.b64encode(out).decode(),
        "stderr": base64.b64encode(err).decode(),
    }


@settings(max_examples=40, deadline=None)
@given(
    out=st.binary(min_size=0, max_size=300_000),
    err=st.binary(min_size=0, max_size=3_000),
    omitted=st.sampled_from([0, 1, 10_000]),
    structured=st.integers(600_000, ROOM),
)
@example(out=bytes(range(256)) * 1_200, err=b"e" * 3_000, omitted=0, structured=ROOM - 150_000)
@example(out=b"o" * 290_000, err=b"", omitted=10_000, structured=ROOM - 100_000)
@example(out=b"", err=b"\xff" * 3_000, omitted=0, structured=ROOM - 2_000)
@example(out=b"x" * 200_000, err=b"y" * 3_000, omitted=1, structured=ROOM - 300)
@example(out=b"x" * 200_000, err=b"y" * 3_000, omitted=0, structured=ROOM)
def test_a_capture_s_text_keeps_each_stream_s_ends_and_counts_what_it_leaves_out(
    out: bytes, err: bytes, omitted: int, structured: int
) -> None:
    content = capture_answer(out, err, omitted)
    text = encode(content)
    shaped = shaped_text(content, text, structured)
    if string_bytes(text) <= ROOM - structured:
        assert text == shaped
        return
    shown = json.loads(shaped)
    if shown == {"ok": True, "text_note": TEXT_NOTE}:  # no room at all: the smallest text
        assert string_bytes(shaped) <= MINIMAL_TEXT_BYTES
        return
    assert string_bytes(shaped) <= ROOM - structured
    if "stdout" not in shown:
        return
    assert shown["output_truncated"] is True
    for name, captured, before in (
        ("stdout", out, content["stdout_omitted_at"]),
        ("stderr", err, None),
    ):
        data = base64.b64decode(shown[name])
        left_out = shown[f"{name}_omitted_bytes"]
        assert shown[f"{name}_bytes"] == len(data) + left_out
        at = shown[f"{name}_omitted_at"]
        head = len(data) if at is None else at
        assert captured.startswith(data[:head])
        assert captured.endswith(data[head:])
        if before is not None and left_out:  # the old middle lies inside the new one
            assert head <= int(str(before))


@pytest.mark.parametrize("omitted", [0, 5_000])
def test_a_utf8_capture_is_cut_on_character_boundaries(omitted: int) -> None:
    """A capture in UTF-8 keeps whole characters at both cuts, and counts the rest."""
    out, err = "é😀a" * 60_000, "ß" * 1_000
    at = len(out.encode()) // 2 if omitted else None
    content: dict[str, object] = {
        "ok": True,
        "exit_code": 0,
        "encoding": "utf-8",
        "stdout_bytes": len(out.encode()) + omitted,
        "stderr_bytes": len(err.encode()),
        "output_truncated": bool(omitted),
        "stdout_omitted_bytes": omitted,
        "stderr_omitted_bytes": 0,
        "stdout_omitted_at": at,
        "stderr_omitted_at": None,
        "stdout": out,
        "stderr": err,
    }
    structured = ROOM - 120_000
    shown = json.loads(shaped_text(content, encode(content), structured))
    assert TEXT_NOTE == shown["text_note"]
    assert string_bytes(encode(shown)) <= ROOM - structured
    for name, whole in (("stdout", out), ("stderr", err)):
        kept = str(shown[name])
        head = (
            kept
            if shown[f"{name}_omitted_at"] is None
            else kept[: len(kept.encode()[: shown[f"{name}_omitted_at"]].decode())]
        )
        assert whole.startswith(head)
        assert whole.endswith(kept[len(head) :])
        assert shown[f"{name}_bytes"] == len(kept.encode()) + shown[f"{name}_omitted_bytes"]


@pytest.mark.parametrize(
    "content",
    [
        {"ok": True, "encoding": "utf-16", "content": "a" * 400_000, "offset": 0},
        {"ok": True, "encoding": "base64", "content": "not base64!" * 40_000, "offset": 0},
        {"ok": True, "encoding": "utf-8", "content": "", "offset": 0, "diff": "d" * 400_000},
        {"ok": True, "encoding": "utf-8", "stdout": "", "stderr": "", "stdout_bytes": 0,
         "stderr_bytes": 0, "stdout_omitted_at": None, "stderr_omitted_at": None,
         "diff": "d" * 400_000},
        {"ok": False, "encoding": "base64", "stdout": "!!", "stderr": "", "stdout_bytes": 2,
         "stderr_bytes": 0, "stdout_omitted_at": None, "stderr_omitted_at": None,
         "diff": "d" * 400_000},
    ],
)  # fmt: skip
def test_an_answer_no_shaper_reads_keeps_its_small_fields_or_less(
    content: dict[str, object],
) -> None:
    """Where no page or capture can be cut (another encoding, bytes that are not base64,
    nothing to cut), the text keeps the small fields with the note, or only ``ok``."""
    text = encode(content)
    structured = ROOM - 1_000
    shown = json.loads(shaped_text(content, text, structured))
    assert TEXT_NOTE == shown["text_note"]
    assert shown["ok"] is content["ok"]
    assert not {"content", "diff", "stdout", "stderr"} & set(shown)
    tiny = json.loads(shaped_text(content, text, ROOM))
    assert {"ok": content["ok"], "text_note": TEXT_NOTE} == tiny
