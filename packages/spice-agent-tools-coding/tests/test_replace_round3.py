"""replace by edits, round 3 (contract 10.2): the edit bound, CRLF files, hints, the chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pytest
from replace_helpers import digest, make_tool, run

from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read

WRITE_BOUND: Final = 262_144


def _lines_of(size: int) -> bytes:
    """``size`` bytes of numbered 16-byte lines."""
    data = b"".join(b"line %010d\n" % n for n in range(size // 16 + 1))
    return data[:size]


async def _read(
    root: Path, arguments: dict[str, object], config: Config | None = None
) -> dict[str, object]:
    tool = new_read(config or Config(str(root)))
    result = await tool.execute(Call("r", "read", json.dumps(arguments)))
    content = json.loads(result.content)
    assert isinstance(content, dict)
    return content


def _edits(*pairs: tuple[str, str]) -> list[dict[str, object]]:
    return [{"old_text": old, "new_text": new} for old, new in pairs]


async def test_a_three_line_change_that_grows_a_256_kib_file_by_13_bytes_is_written(
    tmp_path: Path,
) -> None:
    """The issue's cliff: a 262,144-byte file, read with limit 1 for its digest, three lines
    changed (13 bytes more): committed; its sha256 is the next expected_sha256."""
    data = _lines_of(WRITE_BOUND)
    (tmp_path / "big.txt").write_bytes(data)
    page = await _read(tmp_path, {"path": "big.txt", "limit": 1})
    assert (1, digest(data)) == (page["bytes"], page["file_sha256"])
    old = "line 0000000100\nline 0000000101\nline 0000000102\n"
    new = "line 0000000100 (a)\nline 0000000101 (b)\nline 0000000102 (c)x\n"
    assert 13 == len(new) - len(old)
    arguments = {
        "path": "big.txt",
        "expected_sha256": page["file_sha256"],
        "edits": _edits((old, new)),
    }
    _, first = await run(make_tool(tmp_path), arguments)
    assert (True, WRITE_BOUND + 13) == (first["ok"], first["bytes"])
    expected = data.replace(old.encode(), new.encode())
    assert expected == (tmp_path / "big.txt").read_bytes()
    chained = {
        "path": "big.txt",
        "expected_sha256": first["sha256"],
        "edits": _edits(("(a)", "(A)")),
    }
    _, second = await run(make_tool(tmp_path), chained)
    assert second["ok"] is True
    assert expected.replace(b"(a)", b"(A)") == (tmp_path / "big.txt").read_bytes()


@pytest.mark.parametrize(("extra", "code"), [(0, None), (1, "file_too_large")], ids=["at", "over"])
async def test_a_file_at_the_edit_bound_is_edited_and_one_byte_more_is_too_large(
    tmp_path: Path, extra: int, code: str | None
) -> None:
    """The current file may hold max_edit_bytes; one byte more is file_too_large, without
    any hint (no similar passage is looked for in a file over the bound)."""
    bound = 4096
    data = _lines_of(bound + extra)
    (tmp_path / "f.txt").write_bytes(data)
    arguments = {
        "path": "f.txt",
        "expected_sha256": digest(data),
        "edits": _edits(("line 0000000001", "L1")),
    }
    _, content = await run(make_tool(tmp_path, max_edit_bytes=bound), arguments)
    assert code == content.get("code")
    assert "similar_line" not in content


async def test_the_content_form_keeps_the_write_bound_for_the_current_file(tmp_path: Path) -> None:
    """A file over max_write_bytes but within max_edit_bytes: edits work, content does not."""
    data = _lines_of(600)
    (tmp_path / "f.txt").write_bytes(data)
    tool = make_tool(tmp_path, max_write_bytes=500, max_edit_bytes=1000)
    whole = {"path": "f.txt", "expected_sha256": digest(data), "content": "short\n"}
    _, refused = await run(tool, whole)
    assert "file_too_large" == refused["code"]
    edits = {
        "path": "f.txt",
        "expected_sha256": digest(data),
        "edits": _edits(("line 0000000002", "two")),
    }
    _, edited = await run(tool, edits)
    assert edited["ok"] is True


async def test_an_lf_edit_of_a_crlf_file_keeps_crlf_on_disk(tmp_path: Path) -> None:
    """A multi-line LF edit of an all-CRLF file: matched, written with CRLF, others untouched."""
    data = b"a = 1\r\nb = 2\r\nc = 3\r\n"
    (tmp_path / "w.py").write_bytes(data)
    arguments = {
        "path": "w.py",
        "expected_sha256": digest(data),
        "edits": _edits(("a = 1\nb = 2\n", "a = 10\nb = 20\nb2 = 0\n")),
    }
    _, content = await run(make_tool(tmp_path), arguments)
    assert content["ok"] is True
    assert b"a = 10\r\nb = 20\r\nb2 = 0\r\nc = 3\r\n" == (tmp_path / "w.py").read_bytes()
    assert "-a = 1\r\n" in str(content["diff"])


async def test_edit_not_found_names_the_edit_and_the_similar_passage(tmp_path: Path) -> None:
    """Edit 1 of 2 has the wrong indentation: edit_index 1, line 2, whitespace, the file's text."""
    data = b"import os\ndef f():\n    return 1\n"
    (tmp_path / "f.py").write_bytes(data)
    edits = _edits(("import os", "import os"), ("def f():\n  return 1\n", "def f():\n  return 2\n"))
    arguments = {"path": "f.py", "expected_sha256": digest(data), "edits": edits}
    _, content = await run(make_tool(tmp_path), arguments)
    assert (False, "edit_not_found", 1) == (content["ok"], content["code"], content["edit_index"])
    assert (2, "whitespace", "def f():\n    return 1\n") == (
        content["similar_line"],
        content["similar_difference"],
        content["similar_text"],
    )
    assert "line 2" in str(content["message"])
    assert "return 1" not in str(
        content["message"]
    )  # the file's text is in a field, not the message
    assert data == (tmp_path / "f.py").read_bytes()


async def test_edit_ambiguous_names_the_edit_and_the_count(tmp_path: Path) -> None:
    """Two places: edit_index and occurrences; no hint fields."""
    data = b"x\nx\n"
    (tmp_path / "f.txt").write_bytes(data)
    arguments = {"path": "f.txt", "expected_sha256": digest(data), "edits": _edits(("x", "y"))}
    _, content = await run(make_tool(tmp_path), arguments)
    assert ("edit_ambiguous", 0, 2) == (
        content["code"],
        content["edit_index"],
        content["occurrences"],
    )
    assert "similar_text" not in content


async def test_a_page_of_a_file_over_the_write_bound_has_file_sha256_by_default(
    tmp_path: Path,
) -> None:
    """Default bounds: a 1 MiB file's one-byte page carries the whole file's digest."""
    data = _lines_of(1024 * 1024)
    (tmp_path / "m.txt").write_bytes(data)
    page = await _read(tmp_path, {"path": "m.txt", "offset": 500_000, "limit": 1})
    assert digest(data) == page["file_sha256"]


def test_the_descriptions_state_both_bounds_and_the_chain(tmp_path: Path) -> None:
    """read and replace say max_edit_bytes and max_write_bytes in numbers, that limit 1 gives
    file_sha256 cheaply, and that a replace's sha256 is the next expected_sha256."""
    config = Config(str(tmp_path), max_write_bytes=123_456, max_edit_bytes=7_654_321)
    read = new_read(config).definition.description
    replace = make_tool(
        tmp_path, max_write_bytes=123_456, max_edit_bytes=7_654_321
    ).definition.description
    assert "7654321" in read
    assert {"123456", "7654321"} <= {word.strip("(),.") for word in replace.split()}
    for text in (read, replace):
        assert "limit` 1" in text or "limit 1" in text
        assert "next" in text
        assert "expected_sha256" in text
    assert len(replace) <= 2048  # Claude Code cuts descriptions at 2 KB
