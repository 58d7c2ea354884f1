"""``read`` on Windows: NT opens beneath held directory handles, no reparse point followed.

Runs under Windows CPython (real Windows, or Wine: ``make test-windows``); skipped
elsewhere with that reason. Link and junction tests first make the link and assert it
exists, so they skip under Wine (which cannot make either) instead of passing vacuously.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from pathlib import Path

import pytest
from windows_helpers import (
    handle_count,
    make_junction,
    make_symlink,
    nobody_holds,
    settle_handles,
    windows_only,
)

from spice.agent.tool import Call, Result, interruption_of
from spice.agent.tools.coding import Config, new_read

pytestmark = windows_only


def content_of(result: Result) -> dict[str, object]:
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value


async def read(
    root: Path, arguments: dict[str, object], max_read_bytes: int = 262_144
) -> dict[str, object]:
    tool = new_read(Config(str(root), max_read_bytes=max_read_bytes))
    result = await tool.execute(Call("c", "read", json.dumps(arguments)))
    content = content_of(result)
    assert (result.problem is None) == (content["ok"] is True)
    return content


@pytest.fixture
def root(tmp_path: Path) -> Path:
    worktree = tmp_path / "root"
    worktree.mkdir()
    (worktree / "a.txt").write_bytes(b"hello\n")
    (worktree / "sub").mkdir()
    (worktree / "sub" / "b.txt").write_bytes(b"inside")
    (tmp_path / "outside.txt").write_bytes(b"SECRET")
    return worktree


# ---- positive -------------------------------------------------------------------------------


async def test_a_file_is_read_whole_with_its_digest(root: Path) -> None:
    content = await read(root, {"path": "a.txt"})
    assert content["ok"] is True
    assert "hello\n" == content["content"]
    assert hashlib.sha256(b"hello\n").hexdigest() == content["sha256"]
    assert "a.txt" == content["path"]


async def test_backslashes_are_separators_and_answers_use_slashes(root: Path) -> None:
    content = await read(root, {"path": "sub\\b.txt"})
    assert "sub/b.txt" == content["path"]
    assert "inside" == content["content"]


async def test_an_absolute_path_beneath_the_root_is_its_remainder(root: Path) -> None:
    content = await read(root, {"path": str(root / "sub" / "b.txt")})
    assert "sub/b.txt" == content["path"]
    upper = await read(root, {"path": str(root / "sub" / "b.txt").upper()})
    assert "inside" == upper["content"]


async def test_names_are_case_insensitive_as_in_win32(root: Path) -> None:
    content = await read(root, {"path": "SUB/B.TXT"})
    assert "inside" == content["content"]
    assert "SUB/B.TXT" == content["path"]


async def test_bytes_are_read_exactly_never_in_text_mode(root: Path) -> None:
    """CRLF and ^Z come back as written (the CRT's text mode would change both)."""
    data = b"a\r\nb\x1ac\r\n"
    (root / "crlf.txt").write_bytes(data)
    content = await read(root, {"path": "crlf.txt"})
    assert data.decode() == content["content"]
    assert len(data) == content["bytes"] == content["total_bytes"]


async def test_binary_is_base64(root: Path) -> None:
    data = bytes(range(256))
    (root / "bin").write_bytes(data)
    content = await read(root, {"path": "bin"})
    assert "base64" == content["encoding"]
    assert data == base64.b64decode(str(content["content"]))


async def test_pages_follow_one_another(root: Path) -> None:
    data = b"0123456789" * 10
    (root / "p.txt").write_bytes(data)
    first = await read(root, {"path": "p.txt", "limit": 30})
    assert first["truncated"] is True
    assert 30 == first["next_offset"]
    assert "sha256" not in first
    assert hashlib.sha256(data).hexdigest() == first["file_sha256"]
    second = await read(root, {"path": "p.txt", "offset": 30, "limit": 70})
    assert second["truncated"] is False
    assert data[30:].decode() == second["content"]


# ---- boundaries -----------------------------------------------------------------------------


async def test_offset_at_the_end_is_empty_and_past_it_invalid(root: Path) -> None:
    at_end = await read(root, {"path": "a.txt", "offset": 6})
    assert 0 == at_end["bytes"]
    past = await read(root, {"path": "a.txt", "offset": 7})
    assert "invalid_arguments" == past["code"]


async def test_limit_bounds(root: Path) -> None:
    assert "invalid_arguments" == (await read(root, {"path": "a.txt", "limit": 11}, 10))["code"]
    assert 6 == (await read(root, {"path": "a.txt", "limit": 10}, 10))["bytes"]
    assert 1 == (await read(root, {"path": "a.txt", "limit": 1}, 10))["bytes"]


async def test_a_page_past_four_gib_reads_at_the_right_offset(root: Path) -> None:
    """The offset's high 32 bits reach ``ReadFile`` (a sparse file, if the FS allows it)."""
    big = root / "big"
    with big.open("wb") as handle:
        handle.seek((1 << 32) + 5)
        handle.write(b"tail")
    content = await read(root, {"path": "big", "offset": (1 << 32) + 5, "limit": 4})
    assert "tail" == content["content"]


# ---- negative: confinement ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../outside.txt",
        "sub/../../outside.txt",
        "\\outside.txt",
        "C:outside.txt",
        "\\\\localhost\\c$\\x",
        "\\\\?\\C:\\x",
        "a.txt:stream",
        "a.txt::$DATA",
        "CON",
        "nul.txt",
        "COM1",
        "a.txt.",
        "a.txt ",
        "SUB~1\\b.txt",
    ],
)
async def test_names_windows_would_read_otherwise_are_invalid(root: Path, path: str) -> None:
    content = await read(root, {"path": path})
    assert "invalid_arguments" == content["code"]
    assert "SECRET" not in json.dumps(content)


async def test_an_absolute_path_outside_the_root_is_invalid(root: Path) -> None:
    content = await read(root, {"path": str(root.parent / "outside.txt")})
    assert "invalid_arguments" == content["code"]


async def test_missing_directory_and_missing_root(root: Path) -> None:
    assert "not_found" == (await read(root, {"path": "nope.txt"}))["code"]
    assert "not_found" == (await read(root, {"path": "nope/x.txt"}))["code"]
    assert "not_regular" == (await read(root, {"path": "sub"}))["code"]
    assert "not_regular" == (await read(root, {"path": "a.txt/x"}))["code"]
    missing = await read(root / "missing", {"path": "a.txt"})
    assert "root_unavailable" == missing["code"]


async def test_a_file_symlink_is_never_followed(root: Path) -> None:
    make_symlink(root / "link.txt", root.parent / "outside.txt")
    content = await read(root, {"path": "link.txt"})
    assert "not_regular" == content["code"]
    assert "SECRET" not in json.dumps(content)


async def test_a_symlink_inside_the_root_is_not_followed_either(root: Path) -> None:
    make_symlink(root / "inner.txt", root / "a.txt")
    assert "not_regular" == (await read(root, {"path": "inner.txt"}))["code"]


async def test_a_directory_symlink_on_the_way_is_an_escape(root: Path) -> None:
    make_symlink(root / "out", root.parent, directory=True)
    content = await read(root, {"path": "out/outside.txt"})
    assert "path_escape" == content["code"]


async def test_a_junction_on_the_way_is_an_escape(root: Path) -> None:
    make_junction(root / "j", root.parent)
    content = await read(root, {"path": "j/outside.txt"})
    assert "path_escape" == content["code"]
    assert "SECRET" not in json.dumps(content)


# ---- races: handles held while names move ---------------------------------------------------


def test_a_directory_renamed_while_held_is_still_the_one_read(root: Path) -> None:
    """The walk holds ``sub``'s handle: renaming it meanwhile does not redirect the open,
    and a new ``sub`` put in its place is not what the held handle names."""
    from spice.agent.tools.coding._windows import _root as rw  # noqa: PLC0415 - Windows only

    root_handle = rw.open_root(str(root))
    try:
        directory = rw.open_directory(root_handle, "sub")
        try:
            (root / "sub").rename(root / "moved")
            (root / "sub").mkdir()
            (root / "sub" / "b.txt").write_bytes(b"impostor")
            handle = rw.open_file(directory, "b.txt", 0x1 | 0x80 | 0x100000)
            try:
                assert b"inside" == rw.read_handle(handle, 100, 0)
            finally:
                rw.close(handle)
        finally:
            rw.close(directory)
    finally:
        rw.close(root_handle)


def test_the_root_renamed_while_held_still_resolves_beneath_it(root: Path) -> None:
    from spice.agent.tools.coding._windows import _root as rw  # noqa: PLC0415 - Windows only

    root_handle = rw.open_root(str(root))
    try:
        root.rename(root.parent / "renamed")
        handle = rw.open_file(root_handle, "a.txt", 0x1 | 0x80 | 0x100000)
        try:
            assert b"hello\n" == rw.read_handle(handle, 100, 0)
        finally:
            rw.close(handle)
    finally:
        rw.close(root_handle)


# ---- resources, cancellation, failure -------------------------------------------------------


async def _every_outcome(root: Path) -> None:
    await read(root, {"path": "a.txt"})
    await read(root, {"path": "sub/b.txt", "limit": 2})
    await read(root, {"path": "sub/nope.txt"})
    await read(root, {"path": "nope/x.txt"})
    await read(root, {"path": "sub"})
    await read(root, {"path": "a.txt/x"})
    await read(root, {"path": "a.txt", "offset": 99})


async def test_no_handle_is_left_open_on_any_object_touched(root: Path) -> None:
    """Successes and every kind of failure close what they opened: afterwards the root,
    the directory and both files can each be opened with share mode 0."""
    await _every_outcome(root)
    settle_handles()
    for touched in (root, root / "sub", root / "a.txt", root / "sub" / "b.txt"):
        assert nobody_holds(touched), touched


async def test_no_handle_is_left_open_by_count(root: Path) -> None:
    """The process's handle count does not grow with calls (where Windows counts them)."""
    await _every_outcome(root)  # warm: the executor's thread, the DLLs
    settle_handles()
    before = handle_count()
    if before == 0:
        pytest.skip("GetProcessHandleCount answers 0 under Wine")
    for _ in range(20):
        await _every_outcome(root)
    settle_handles()
    assert handle_count() <= before + 2


async def test_a_call_cancelled_before_it_starts_reads_nothing(root: Path) -> None:
    tool = new_read(Config(str(root)))
    with pytest.raises(TimeoutError) as raised:
        async with asyncio.timeout(0):
            await tool.execute(Call("c", "read", json.dumps({"path": "a.txt"})))
    interruption = interruption_of(raised.value)
    assert interruption is not None
    assert "c" == interruption.call_id


async def test_a_file_held_with_share_mode_zero_is_read_failed_or_unavailable(root: Path) -> None:
    """A file another process holds exclusively cannot be opened: a model-visible failure."""
    from windows_helpers import Holder  # noqa: PLC0415

    with Holder(root / "a.txt"):
        content = await read(root, {"path": "a.txt"})
    assert content["code"] in {"path_unavailable", "read_failed"}


def test_the_posix_route_is_not_taken() -> None:
    """The platform seam picks the Windows functions here."""
    from spice.agent.tools.coding import _platform  # noqa: PLC0415
    from spice.agent.tools.coding._windows import _root as _root_windows  # noqa: PLC0415

    assert _platform.WINDOWS
    assert _platform.open_regular is _root_windows.open_regular
    assert os.name == "nt"


@pytest.mark.parametrize("name", ["sub\\b.txt", "sub/b.txt", ".", "..", "..\\outside.txt"])
def test_one_nt_open_takes_exactly_one_component(root: Path, name: str) -> None:
    """A separator or a dot name never reaches NtCreateFile: one component per open."""
    from spice.agent.tools.coding._root import PathError  # noqa: PLC0415
    from spice.agent.tools.coding._windows import _root as rw  # noqa: PLC0415 - Windows only

    root_handle = rw.open_root(str(root))
    try:
        with pytest.raises(PathError) as raised:
            rw.open_file(root_handle, name, 0x1 | 0x80 | 0x100000)
        assert "invalid_arguments" == raised.value.code
        with pytest.raises(PathError):
            rw.open_directory(root_handle, f"sub/{name}")
    finally:
        rw.close(root_handle)
