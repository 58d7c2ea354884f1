"""Every answer fits the payload bound (the seed's rule, contract 12.4), at the worst escaping.

``answer_bytes`` counts an answer's JSON text once (the structured content; the MCP layer
shapes the text block beside it); it is checked here against real serializations. Pages
and command output made of runs of the worst bytes (quotes, backslashes, control bytes,
characters of two to four bytes, plain letters) are answered within ``ANSWER_ROOM``, whole:
as text where the escaped text fits, else as base64; a page ends early only where the limit
would cut a character, and reading on from ``next_offset`` gives back the file byte for
byte.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path
from typing import Final

import pytest
from fakes import FakeLauncher, FakeProcess, FakeResolver, content_of, shell_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.process import Outcome
from spice.agent.tool import Call
from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES, Config, new_read, new_replace
from spice.agent.tools.coding._config import MAXIMUM_BYTES
from spice.agent.tools.coding._ownership import Timing
from spice.agent.tools.coding._results import (
    ANSWER_COPIES,
    ANSWER_ROOM,
    ENVELOPE_BYTES,
    answer_bytes,
    answer_fits,
    encode,
)
from spice.agent.tools.coding._shell import build_shell

UNITS: Final = (
    b'"',
    b"\\",
    b"\x01",
    b"\n",
    b"\x00",
    "é".encode(),
    "€".encode(),
    "𝄞".encode(),
    b"a",
)
"""The bytes that cost most (and least) in an answer; runs of them make the pages."""
runs = st.lists(
    st.tuples(st.sampled_from(UNITS), st.integers(min_value=1, max_value=160_000)),
    min_size=1,
    max_size=6,
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def page_of(parts: list[tuple[bytes, int]]) -> bytes:
    return b"".join(unit * count for unit, count in parts)


@given(st.text(alphabet=st.sampled_from('"\\\x01\n\x00é€𝄞a{}:,'), max_size=200))
def test_answer_bytes_is_exactly_the_text_once(text: str) -> None:
    """Measured against ``json``'s own writing of the answer (one copy: the seed's bound)."""
    answer = json.dumps({"content": text}, ensure_ascii=False, separators=(",", ":"))
    assert len(answer.encode()) == answer_bytes(answer)
    assert 1 == ANSWER_COPIES


def test_the_room_leaves_the_envelope_inside_one_mebibyte() -> None:
    assert (1_048_576, MAXIMUM_ANSWER_BYTES - ENVELOPE_BYTES) == (MAXIMUM_ANSWER_BYTES, ANSWER_ROOM)


def read_all(root: Path, config: Config, data: bytes) -> list[dict[str, object]]:
    """Every page of ``f`` from offset 0 until one is not truncated (bounded)."""
    tool = new_read(config)
    pages: list[dict[str, object]] = []
    offset = 0
    for number in range(64):
        result = asyncio.run(
            tool.execute(Call(f"c{number}", "read", json.dumps({"path": "f", "offset": offset})))
        )
        content = content_of(result)
        assert answer_bytes(result.content) <= ANSWER_ROOM
        pages.append({**content, "_answer_bytes": answer_bytes(result.content)})
        if not content["truncated"]:
            return pages
        offset = int(str(content["next_offset"]))
    raise AssertionError("the file was not read to its end in 64 pages")


@pytest.mark.parametrize("max_read_bytes", [262_144, MAXIMUM_BYTES])
@given(parts=runs)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_every_page_fits_as_much_as_it_can_and_the_pages_give_back_the_file(
    tmp_path: Path, max_read_bytes: int, parts: list[tuple[bytes, int]]
) -> None:
    data = page_of(parts)
    (tmp_path / "f").write_bytes(data)
    config = Config(tmp_path, max_read_bytes=max_read_bytes)
    collected = b""
    for page in read_all(tmp_path, config, data):
        offset, kept = int(str(page["offset"])), int(str(page["bytes"]))
        if page["encoding"] == "utf-8":
            body = str(page["content"]).encode()  # str: never a piece of a character
        else:
            body = base64.b64decode(str(page["content"]))
        assert (kept, data[offset : offset + kept]) == (len(body), body)
        collected += body
        asked = min(max_read_bytes, len(data) - offset)
        assert asked - 3 <= kept  # never shortened: only a character the limit would cut
    assert data == collected


def test_a_page_that_fits_whole_is_not_shortened(tmp_path: Path) -> None:
    """The other side: 256 KiB of letters take 3 bytes each, well within the bound."""
    data = b"a" * 262_144
    (tmp_path / "f").write_bytes(data)
    (page,) = read_all(tmp_path, Config(tmp_path), data)
    assert (262_144, False) == (page["bytes"], page["truncated"])


FAST: Final = Timing(join_seconds=5.0, backoff_seconds=0.0, backoff_limit_seconds=0.0)


@given(out=runs, err=runs, exit_code=st.sampled_from([0, 3]))
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_every_command_output_fits_and_counts_every_byte(
    tmp_path: Path, out: list[tuple[bytes, int]], err: list[tuple[bytes, int]], exit_code: int
) -> None:
    """Output of the worst bytes, both streams, up to the largest output bound: the answer
    fits, and for each stream what is shown plus what was left out is what it wrote."""
    stdout, stderr = page_of(out), page_of(err)
    process = FakeProcess(stdout=[stdout], stderr=[stderr], outcome=Outcome.exited(exit_code))
    tool, _ = build_shell(
        Config(tmp_path, max_output_bytes=MAXIMUM_BYTES),
        FakeResolver(),
        FakeLauncher(lambda: process),
        timing=FAST,
        grace_seconds=0.01,
        posix=True,
    )
    result = asyncio.run(tool.execute(shell_call({"argv": ["true"]})))
    content = content_of(result)
    assert answer_bytes(result.content) <= ANSWER_ROOM
    for name, written in (("stdout", stdout), ("stderr", stderr)):
        text = str(content[name])
        shown = text.encode() if content["encoding"] == "utf-8" else base64.b64decode(text)
        omitted = int(str(content[f"{name}_omitted_bytes"]))
        assert (len(written), len(written)) == (content[f"{name}_bytes"], len(shown) + omitted)
        at = content[f"{name}_omitted_at"]
        head = len(shown) if at is None else int(str(at))
        assert written.startswith(shown[:head])
        assert written.endswith(shown[head:])


def test_an_edit_s_diff_of_control_bytes_stays_far_within_the_bound(tmp_path: Path) -> None:
    """``replace``'s answer is bounded by its diff (16 KiB) and its quote (1 KiB): a diff of
    control bytes under a long path, the worst it can say, stays far below the bound."""
    deep = "/".join(["d" * 200] * 3)
    (tmp_path / deep).mkdir(parents=True)
    lines = b"".join(b"\x02" * 60 + b"\nk\n" for _ in range(2000))
    (tmp_path / deep / "e.txt").write_bytes(lines)
    edits = [{"old_text": "\x02" * 60, "new_text": "\x03" * 60, "replace_all": True}]
    arguments = {"path": f"{deep}/e.txt", "expected_sha256": sha256(lines), "edits": edits}
    tool = new_replace(Config(tmp_path))
    result = asyncio.run(tool.execute(Call("c", "replace", json.dumps(arguments))))
    content = content_of(result)
    assert (True, True) == (content["ok"], content["diff_truncated"])
    assert 80_000 < answer_bytes(result.content) < ANSWER_ROOM // 8


@given(parts=runs, path=st.text(alphabet=st.sampled_from('a"\\\x01é'), max_size=40))
@settings(max_examples=60, deadline=None)
def test_the_quick_check_agrees_with_the_count(parts: list[tuple[bytes, int]], path: str) -> None:
    """``answer_fits`` (a bound from lengths first, the count only where it cannot tell)
    answers exactly what ``answer_bytes`` does, on both sides of the room."""
    page = page_of(parts)
    try:
        body = page.decode()
    except UnicodeDecodeError:
        body = base64.b64encode(page).decode()
    text = encode({"ok": True, "path": path, "bytes": len(page), "content": body})
    verbatim = len(page) if body.encode() == page else len(body)
    assert (answer_bytes(text) <= ANSWER_ROOM) == answer_fits(text, verbatim)
    assert (answer_bytes(text) <= ANSWER_ROOM) == answer_fits(text)
