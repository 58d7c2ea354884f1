"""read's file_sha256 (contracts 9.2, 10.2): every page of a file within the edit bound has it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Final

import pytest
from replace_helpers import make_tool, run

from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read
from spice.agent.tools.coding._read import _pread, _pread_cached, _Reader, _whole_file

PAGE: Final = 64
BOUND: Final = 256


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _read(root: Path, arguments: dict[str, object]) -> dict[str, object]:
    # The write bound stays at its default, far above: the edit bound is the one that counts.
    tool = new_read(Config(str(root), max_read_bytes=PAGE, max_edit_bytes=BOUND))
    result = await tool.execute(Call("r", "read", json.dumps(arguments)))
    content = json.loads(result.content)
    assert isinstance(content, dict)
    return content


async def test_every_page_of_a_file_within_the_bound_carries_the_whole_files_digest(
    tmp_path: Path,
) -> None:
    """Three pages of a 150-byte file: each has file_sha256 of all 150 bytes, none sha256."""
    data = bytes(range(100, 250))
    (tmp_path / "f.bin").write_bytes(data)
    pages = [await _read(tmp_path, {"path": "f.bin", "offset": n}) for n in (0, 64, 128)]
    assert [_digest(data)] * 3 == [page["file_sha256"] for page in pages]
    assert all("sha256" not in page for page in pages)
    assert [64, 64, 22] == [page["bytes"] for page in pages]


async def test_a_complete_page_has_file_sha256_equal_to_sha256(tmp_path: Path) -> None:
    """A file that fits one page: the two digests agree."""
    (tmp_path / "t.txt").write_text("caf\u00e9\n", encoding="utf-8")
    page = await _read(tmp_path, {"path": "t.txt"})
    assert page["sha256"] == page["file_sha256"] == _digest("caf\u00e9\n".encode())


@pytest.mark.parametrize(("size", "has"), [(BOUND, True), (BOUND + 1, False)], ids=["at", "over"])
async def test_a_file_at_the_edit_bound_has_the_digest_and_one_byte_more_has_none(
    tmp_path: Path, size: int, has: bool
) -> None:
    """file_sha256 is given up to max_edit_bytes bytes exactly; a larger file pages as before."""
    data = b"x" * size
    (tmp_path / "f.txt").write_bytes(data)
    page = await _read(tmp_path, {"path": "f.txt", "offset": 100, "limit": 10})
    assert has == ("file_sha256" in page)
    if has:
        assert _digest(data) == page["file_sha256"]
    assert ("x" * 10, size, 110) == (page["content"], page["total_bytes"], page["next_offset"])


async def test_an_empty_page_at_the_end_and_an_empty_file_carry_the_digest(tmp_path: Path) -> None:
    """offset = size still has the file's digest; an empty file has the empty digest twice."""
    (tmp_path / "f.txt").write_bytes(b"abc")
    (tmp_path / "e.txt").write_bytes(b"")
    end = await _read(tmp_path, {"path": "f.txt", "offset": 3})
    empty = await _read(tmp_path, {"path": "e.txt"})
    assert (0, _digest(b"abc")) == (end["bytes"], end["file_sha256"])
    assert _digest(b"") == empty["sha256"] == empty["file_sha256"]


async def test_a_file_larger_than_a_page_is_edited_with_its_file_sha256(tmp_path: Path) -> None:
    """read a later page, then replace by edits with file_sha256: committed."""
    data = b"".join(b"line %03d\n" % n for n in range(20))  # 180 bytes, three pages
    (tmp_path / "f.txt").write_bytes(data)
    page = await _read(tmp_path, {"path": "f.txt", "offset": 128})
    assert "line 015" in str(page["content"])
    edits = [{"old_text": "line 015\n", "new_text": "line fifteen\n"}]
    arguments = {"path": "f.txt", "expected_sha256": page["file_sha256"], "edits": edits}
    _, content = await run(make_tool(tmp_path, max_edit_bytes=BOUND), arguments)
    assert content["committed"] is True
    assert data.replace(b"line 015", b"line fifteen") == (tmp_path / "f.txt").read_bytes()


def test_the_description_tells_the_model_about_file_sha256(tmp_path: Path) -> None:
    """The model learns that any page of a small enough file can lead to an edit."""
    description = new_read(Config(str(tmp_path))).definition.description
    assert "file_sha256" in description
    assert "expected_sha256" in description


@pytest.mark.parametrize(
    ("seen", "actual", "expected"),
    [(150, 150, 150), (10, 150, 150), (10, BOUND, BOUND), (10, BOUND + 1, None), (0, 0, 0)],
)
@pytest.mark.parametrize("reader", [_pread, _pread_cached], ids=["worker", "inline"])
def test_the_whole_file_is_read_in_a_buffer_of_its_size_and_again_if_it_grew(
    tmp_path: Path, seen: int, actual: int, expected: int | None, reader: _Reader
) -> None:
    """A file larger than fstat said (it grew) is read again up to the bound; past it, none.

    Both routes' readers: the worker's, and the event loop's (from the page cache, which
    holds a file just written).
    """
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * actual)
    fd = os.open(path, os.O_RDONLY)
    try:
        whole = _whole_file(fd, seen, BOUND, reader)
    finally:
        os.close(fd)
    assert expected == (None if whole is None else len(whole))


def test_a_proc_file_has_its_digest_under_the_default_edit_bound() -> None:
    """The real case: /proc/sys/kernel/ostype (size 0) under a 4 MiB bound."""
    fd = os.open("/proc/sys/kernel/ostype", os.O_RDONLY)
    try:
        data = _whole_file(fd, 0, 4 * 1024 * 1024, _pread)
    finally:
        os.close(fd)
    assert b"Linux\n" == data
