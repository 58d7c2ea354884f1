"""The ``read`` tool: definition, arguments, paging, encodings, special files, cancellation."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from spice.agent.tool import (
    Call,
    Capability,
    Effect,
    ExecutionError,
    ExecutionState,
    Progress,
    ReplaySafety,
    Result,
    RetryDisposition,
    interruption_of,
)
from spice.agent.tools.coding import Config, new_read
from spice.agent.tools.coding._config import MAXIMUM_BYTES
from spice.agent.tools.coding._read import INLINE_READ_BYTES, PREAD_CHUNK_BYTES, PROGRESS, _pread
from spice.agent.tools.coding._results import ANSWER_ROOM, answer_bytes

REPORTER_TEXT = "reporter-text-\u2603"
HAS_FD_DIR = os.path.isdir("/proc/self/fd")
"""Whether open descriptors can be counted (Linux)."""


def content_of(result: Result) -> dict[str, object]:
    """The result's content object."""
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value


async def read(
    root: Path, arguments: dict[str, object] | str, max_read_bytes: int = 262_144
) -> dict[str, object]:
    """One ``read`` call on a tool rooted at ``root``; its content object."""
    tool = new_read(Config(root, max_read_bytes=max_read_bytes))
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    result = await tool.execute(Call("call-1", "read", text))
    content = content_of(result)
    assert (result.problem is None) == (content["ok"] is True)
    if result.problem is not None:
        assert result.problem == content["message"]
    return content


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty worktree root."""
    worktree = tmp_path / "root"
    worktree.mkdir()
    return worktree


class Recorder:
    """A reporter that keeps every progress message."""

    def __init__(self) -> None:
        self.messages: list[Progress] = []

    async def report(self, progress: Progress) -> None:
        """Keep ``progress``."""
        self.messages.append(progress)


class Failing:
    """A reporter that raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def report(self, progress: Progress) -> None:
        """Raise the configured error."""
        raise self.error


class Blocking:
    """A reporter that blocks until released; ``entered`` is set once it is called."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def report(self, progress: Progress) -> None:
        """Block until ``release`` is set."""
        self.entered.set()
        await self.release.wait()


# ---- definition and factory ----------------------------------------------------------------


def test_the_definition_is_read_only_safe_and_declares_filesystem_read(tmp_path: Path) -> None:
    """Name, effect, replay safety, capability and schema are the contract's."""
    definition = new_read(Config(tmp_path / "missing-root", max_read_bytes=1000)).definition
    assert "read" == definition.name
    assert Effect.READ_ONLY == definition.effect
    assert ReplaySafety.SAFE == definition.replay_safety
    assert (Capability.FILESYSTEM_READ,) == definition.capabilities
    schema = json.loads(definition.input_schema)
    assert ["path"] == schema["required"]
    assert schema["additionalProperties"] is False
    assert {"type": "string"}.items() <= schema["properties"]["path"].items()
    offset = {"type": ["integer", "null"], "minimum": 0}
    assert offset.items() <= schema["properties"]["offset"].items()
    limit = {"type": ["integer", "null"], "minimum": 1, "maximum": 1000}
    assert limit.items() <= schema["properties"]["limit"].items()
    assert not (tmp_path / "missing-root").exists()


async def test_a_missing_root_is_root_unavailable(tmp_path: Path) -> None:
    """The root is opened per call; when it is missing the call says so, without the path."""
    content = await read(tmp_path / "missing", {"path": "a.txt"})
    assert "root_unavailable" == content["code"]
    assert str(tmp_path) not in json.dumps(content)


async def test_a_call_naming_another_tool_is_invalid(root: Path) -> None:
    """A call whose name is not ``read`` is a model-visible ``invalid_arguments``."""
    result = await new_read(Config(root)).execute(Call("c", "replace", '{"path": "a"}'))
    assert "invalid_arguments" == content_of(result)["code"]


# ---- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"path": "a", "offset": true}', "offset must be an integer"),
        ('{"path": "a", "offset": 1.0}', "offset must be an integer"),
        ('{"path": "a", "offset": "1"}', "offset must be an integer"),
        ('{"path": "a", "limit": "1"}', "limit must be an integer"),
        ('{"path": 1}', "path must be a string"),
        ("{}", "path must be a string"),
        (
            '{"path": "a", "other": 1}',
            "arguments have an unknown property 'other'; the properties are limit, offset, path",
        ),
        ('{"path": "a", "path": "b"}', "arguments repeat a property"),
        ('{"path": "\\ud800"}', "arguments must not contain lone surrogates"),
        ('["a"]', "arguments must be a JSON object"),
        ('{"path": "a", "offset": -1}', "offset must be at least 0"),
        ('{"path": "a", "limit": 0}', "limit must be at least 1"),
        ('{"path": "a", "limit": 17}', "limit must be at most 16 (max_read_bytes)"),
        ('{"path": ""}', "path must not be empty"),
        ('{"path": "../a"}', "path must not leave the worktree root"),
        ('{"path": "/etc/passwd"}', "an absolute path must lie beneath the worktree root ({root})"),
    ],
)
async def test_malformed_arguments_get_their_own_words(
    root: Path, arguments: str, message: str
) -> None:
    """Structure, type and range failures are ``invalid_arguments`` with a specific message."""
    content = await read(root, arguments, max_read_bytes=16)
    expected = message.replace("{root}", str(root))  # the refusal names the root (10.2)
    assert ("invalid_arguments", expected) == (content["code"], content["message"])


async def test_limit_at_the_bound_is_accepted(root: Path) -> None:
    """``limit == max_read_bytes`` reads; ``max_read_bytes + 1`` is refused (above)."""
    (root / "f").write_bytes(b"x" * 20)
    content = await read(root, {"path": "f", "limit": 16}, max_read_bytes=16)
    assert (16, 16) == (content["bytes"], content["next_offset"])


# ---- pages ---------------------------------------------------------------------------------


async def test_a_complete_page_has_the_whole_file_and_its_sha256(root: Path) -> None:
    """Offset 0 and the whole file: not truncated, with the digest; no ``next_offset``."""
    data = b"hello\r\n\xef\xbb\xbfworld\n"
    (root / "f.txt").write_bytes(data)
    content = await read(root, {"path": "./f.txt"})
    assert {
        "ok": True,
        "path": "f.txt",
        "offset": 0,
        "bytes": len(data),
        "total_bytes": len(data),
        "truncated": False,
        "encoding": "utf-8",
        "content": data.decode(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "file_sha256": hashlib.sha256(data).hexdigest(),
    } == content
    assert data == str(content["content"]).encode()  # CRLF and the BOM byte-exact


async def test_pages_walk_the_file_with_next_offset(root: Path) -> None:
    """Pages of 4 over 10 bytes: 0-4, 4-8, 8-10; only the last one is not truncated."""
    (root / "f").write_bytes(b"0123456789")
    seen = []
    offset: object = 0
    while True:
        content = await read(root, {"path": "f", "offset": offset, "limit": 4})
        assert "sha256" not in content
        seen.append(content["content"])
        if not content["truncated"]:
            assert "next_offset" not in content
            break
        offset = content["next_offset"]
    assert ["0123", "4567", "89"] == seen


async def test_offset_at_the_size_is_an_empty_page_and_past_it_is_invalid(root: Path) -> None:
    """``offset == size`` gives zero bytes; ``size + 1`` is ``invalid_arguments``."""
    (root / "f").write_bytes(b"abc")
    at_end = await read(root, {"path": "f", "offset": 3})
    assert (0, "", False, 3) == (
        at_end["bytes"],
        at_end["content"],
        at_end["truncated"],
        at_end["total_bytes"],
    )
    past = await read(root, {"path": "f", "offset": 4})
    assert ("invalid_arguments", "offset is past the end of the file") == (
        past["code"],
        past["message"],
    )
    huge = await read(root, {"path": "f", "offset": 2**70})
    assert "invalid_arguments" == huge["code"]


async def test_an_empty_file_is_a_complete_empty_page(root: Path) -> None:
    """An empty file has a digest (of nothing) and no content."""
    (root / "empty").write_bytes(b"")
    content = await read(root, {"path": "empty"})
    assert (hashlib.sha256(b"").hexdigest(), "") == (content["sha256"], content["content"])


async def test_a_page_cut_inside_a_character_ends_at_the_previous_boundary(root: Path) -> None:
    """``a`` + a 3-byte character with limit 2 returns ``a``; the next page the character."""
    (root / "f").write_bytes("a€b".encode())
    first = await read(root, {"path": "f", "limit": 2})
    assert ("utf-8", "a", 1, 1) == (
        first["encoding"],
        first["content"],
        first["bytes"],
        first["next_offset"],
    )
    second = await read(root, {"path": "f", "offset": 1, "limit": 3})
    assert ("utf-8", "€", 4) == (second["encoding"], second["content"], second["next_offset"])


async def test_a_limit_smaller_than_the_first_character_falls_back_to_base64(root: Path) -> None:
    """A page must make progress: one byte of a 4-byte character comes as base64."""
    data = "𝄞".encode()
    (root / "f").write_bytes(data)
    content = await read(root, {"path": "f", "limit": 1})
    assert ("base64", base64.b64encode(data[:1]).decode(), 1) == (
        content["encoding"],
        content["content"],
        content["next_offset"],
    )


async def test_invalid_utf8_is_base64(root: Path) -> None:
    """Bytes that are not UTF-8 (even a cut sequence at the end of the file) are base64."""
    for data in (b"\xff\xfeabc", b"abc\xe2\x82", b"ab\xe2\x41cd"):
        (root / "f").write_bytes(data)
        content = await read(root, {"path": "f", "limit": 3 if data.startswith(b"ab\xe2") else 16})
        assert "base64" == content["encoding"]
        page = base64.b64decode(str(content["content"]))
        assert data[: len(page)] == page


async def test_rd_nul_bytes_too_many_to_escape_come_whole_as_base64(root: Path) -> None:
    """The seed's RD case (json-escape overflow, contract 12.4): 300 KiB of NUL would be
    1.8 MB escaped as JSON (``\\u0000`` each), past the payload bound: the page comes whole
    as base64, with its digest, not shortened."""
    data = b"\0" * (300 * 1024)
    (root / "zeros").write_bytes(data)
    tool = new_read(Config(root, max_read_bytes=MAXIMUM_BYTES))
    result = await tool.execute(Call("c", "read", '{"path": "zeros"}'))
    content = content_of(result)
    assert ("base64", False, len(data), data) == (
        content["encoding"],
        content["truncated"],
        content["bytes"],
        base64.b64decode(str(content["content"])),
    )
    assert "next_offset" not in content
    digest = hashlib.sha256(data).hexdigest()
    assert (digest, digest) == (content["sha256"], content["file_sha256"])
    assert answer_bytes(result.content) <= ANSWER_ROOM


async def test_nul_bytes_that_fit_escaped_stay_text(root: Path) -> None:
    """The other side of RD: 100 KiB of NUL escape to 600 KiB, within the bound: text."""
    data = b"\0" * (100 * 1024)
    (root / "zeros").write_bytes(data)
    content = await read(root, {"path": "zeros"})
    assert ("utf-8", False, "\0" * len(data)) == (
        content["encoding"],
        content["truncated"],
        content["content"],
    )


async def test_a_text_page_whose_answer_is_exactly_the_answer_bound_stays_text(
    root: Path,
) -> None:
    """An answer of exactly ``ANSWER_ROOM`` bytes is the whole page as text; one escaped
    byte more makes it the whole page as base64 (never a shorter page).

    Every NUL takes 5 bytes more than a letter (``\\u0000``), every quote 1 (``\\"``); the
    file's length stays the same, so only the escaping moves the answer's size.
    """
    length = 300 * 1024
    tool = new_read(Config(root, max_read_bytes=MAXIMUM_BYTES))

    async def answer(nuls: int, quotes: int) -> Result:
        data = b"\0" * nuls + b'"' * quotes + b"a" * (length - nuls - quotes)
        (root / "page.txt").write_bytes(data)
        return await tool.execute(Call("c", "read", '{"path": "page.txt"}'))

    more = ANSWER_ROOM - answer_bytes((await answer(0, 0)).content)
    nuls, quotes = divmod(more, 5)
    at_bound = await answer(nuls, quotes)
    assert (False, length, "utf-8", ANSWER_ROOM) == (
        content_of(at_bound)["truncated"],
        content_of(at_bound)["bytes"],
        content_of(at_bound)["encoding"],
        answer_bytes(at_bound.content),
    )
    assert content_of(at_bound) == dict(at_bound.content_object)
    past = await answer(nuls, quotes + 1)
    assert (False, length, "base64") == (
        content_of(past)["truncated"],
        content_of(past)["bytes"],
        content_of(past)["encoding"],
    )
    assert answer_bytes(past.content) <= ANSWER_ROOM


async def test_a_deep_offset_in_a_huge_sparse_file_answers_at_once(root: Path) -> None:
    """A 1 TiB sparse file read at 1 TiB - 10 gives 10 bytes (cost is the page's)."""
    size = 1 << 40
    with (root / "sparse").open("wb") as handle:
        handle.truncate(size)
    content = await read(root, {"path": "sparse", "offset": size - 10})
    assert (10, size, "\0" * 10, False) == (
        content["bytes"],
        content["total_bytes"],
        content["content"],
        content["truncated"],
    )


# ---- what is not a regular file ------------------------------------------------------------


@pytest.fixture
def specials(root: Path) -> Iterator[Path]:
    """A FIFO, a socket, a directory, /dev/zero links (absolute and relative)."""
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    (root / "zero_abs").symlink_to("/dev/zero")
    (root / "zero_rel").symlink_to("../" * 40 + "dev/zero")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = Path.cwd()
    os.chdir(root)
    try:
        server.bind("sock")
    finally:
        os.chdir(cwd)
    yield root
    server.close()


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("fifo", "not_regular"),
        ("sock", "not_regular"),
        ("dir", "not_regular"),
        (".", "invalid_arguments"),
        ("zero_abs", "path_escape"),
        ("zero_rel", "path_escape"),
        ("missing", "not_found"),
        ("missing/deeper", "not_found"),
    ],
)
async def test_special_files_are_refused_and_never_block(
    specials: Path, path: str, code: str
) -> None:
    """FIFOs, sockets, directories and device links fail at once with their code."""
    async with asyncio.timeout(5):
        content = await read(specials, {"path": path})
    assert code == content["code"]
    assert str(specials) not in json.dumps(content)


async def test_a_device_node_inside_the_root_is_not_regular(root: Path) -> None:
    """A character device in the worktree is not_regular (needs CAP_MKNOD to set up)."""
    try:
        os.mknod(root / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    async with asyncio.timeout(5):
        content = await read(root, {"path": "zero"})
    assert "not_regular" == content["code"]


# ---- progress, reporter failure, cancellation ---------------------------------------------


async def test_one_progress_report_comes_before_the_answer(root: Path) -> None:
    """Exactly one fixed progress message, with the call's id."""
    recorder = Recorder()
    await new_read(Config(root)).execute(Call("c-7", "read", '{"path": "a"}'), recorder)
    assert [Progress("c-7", PROGRESS)] == recorder.messages


@pytest.mark.parametrize(
    "error", [RuntimeError(REPORTER_TEXT), asyncio.CancelledError(REPORTER_TEXT)]
)
async def test_a_failing_reporter_is_a_definitive_retryable_execution_error(
    root: Path, error: BaseException
) -> None:
    """A reporter that raises (even CancelledError while not cancelled) is a host failure."""
    (root / "f").write_bytes(b"x")
    with pytest.raises(ExecutionError) as caught:
        await new_read(Config(root)).execute(Call("c", "read", '{"path": "f"}'), Failing(error))
    failure = caught.value
    assert (ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED, "c") == (
        failure.state,
        failure.retry,
        failure.call_id,
    )
    assert REPORTER_TEXT not in str(failure)
    assert REPORTER_TEXT not in repr(failure)
    assert failure.__cause__ is None
    assert failure.__suppress_context__


async def test_cancellation_propagates_with_a_definitive_interruption(root: Path) -> None:
    """Cancelled in the middle, the call re-raises CancelledError carrying definitive/allowed."""
    (root / "f").write_bytes(b"x")
    reporter = Blocking()
    before = len(os.listdir("/proc/self/fd")) if HAS_FD_DIR else None
    task = asyncio.create_task(
        new_read(Config(root)).execute(Call("c", "read", '{"path": "f"}'), reporter)
    )
    async with asyncio.timeout(5):
        await reporter.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(5):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert ("c", ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED, None) == (
        interruption.call_id,
        interruption.state,
        interruption.retry,
        interruption.result,
    )
    if before is not None:
        assert before == len(os.listdir("/proc/self/fd"))


async def test_many_calls_leave_no_descriptor_open(root: Path) -> None:
    """Successes and failures of every kind close all their descriptors."""
    if not HAS_FD_DIR:
        pytest.skip("counting descriptors needs /proc/self/fd")
    (root / "f").write_bytes(b"x" * 100)
    (root / "link").symlink_to("../outside")
    os.mkfifo(root / "fifo")
    tool = new_read(Config(root))
    paths = ["f", "link", "fifo", "missing", ".", "../x", "f/x"]
    await tool.execute(Call("warm", "read", '{"path": "f"}'))  # starts the worker pool
    # and, now that openat2 is probed, the loop's route (it holds the mount table open)
    await tool.execute(Call("warm", "read", '{"path": "f"}'))
    before = len(os.listdir("/proc/self/fd"))
    for index in range(40):
        path = paths[index % len(paths)]
        await tool.execute(Call("c", "read", json.dumps({"path": path, "limit": 7})))
    assert before == len(os.listdir("/proc/self/fd"))


class CancelAfterReporting:
    """A reporter that returns at once and has ``task`` cancelled at its next suspension."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Result] | None = None

    async def report(self, progress: Progress) -> None:
        """Schedule the cancellation of the calling task; the tool is then in its worker."""
        assert self.task is not None
        asyncio.get_running_loop().call_soon(self.task.cancel)


async def test_cancellation_while_the_worker_reads_settles_its_descriptors(root: Path) -> None:
    """Cancelled while the worker thread runs: definitive/allowed, and no descriptor left.

    The file is larger than ``INLINE_READ_BYTES``, so the read is a worker thread's.
    """
    (root / "f").write_bytes(b"x" * (INLINE_READ_BYTES + 1))
    tool = new_read(Config(root))
    await tool.execute(Call("warm", "read", '{"path": "f"}'))  # starts the worker pool
    # and, now that openat2 is probed, the loop's route (it holds the mount table open)
    await tool.execute(Call("warm", "read", '{"path": "f"}'))
    before = len(os.listdir("/proc/self/fd")) if HAS_FD_DIR else None
    reporter = CancelAfterReporting()
    reporter.task = asyncio.create_task(tool.execute(Call("c", "read", '{"path": "f"}'), reporter))
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(5):
            await reporter.task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED) == (
        interruption.state,
        interruption.retry,
    )
    if before is not None:
        assert before == len(os.listdir("/proc/self/fd"))


async def test_a_procfs_file_of_unknown_size_is_read_whole_under_the_default_bounds() -> None:
    """procfs says size 0 and refuses one 4 MiB read (``ENOMEM``): the read goes by chunks."""
    tool = new_read(Config("/proc/sys/kernel"))  # max_edit_bytes 4 MiB: the hash bound
    result = await tool.execute(Call("call-1", "read", json.dumps({"path": "ostype"})))
    body = json.loads(result.content)
    assert body["ok"] is True
    assert body["content"] == "Linux\n"
    assert body["file_sha256"] == hashlib.sha256(b"Linux\n").hexdigest()


@pytest.mark.parametrize(
    "count", [1, PREAD_CHUNK_BYTES, PREAD_CHUNK_BYTES + 1, 3 * PREAD_CHUNK_BYTES]
)
def test_no_single_pread_asks_for_more_than_the_chunk(tmp_path: Path, count: int) -> None:
    """Boundary: a read of ``count`` bytes is calls of at most ``PREAD_CHUNK_BYTES``."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"z" * count)
    asked: list[int] = []

    def once(fd: int, size: int, offset: int) -> bytes:
        asked.append(size)
        return os.pread(fd, size, offset)

    fd = os.open(path, os.O_RDONLY)
    try:
        assert _pread(fd, count + 1, 0, once) == b"z" * count
    finally:
        os.close(fd)
    assert max(asked) <= PREAD_CHUNK_BYTES
    assert len(asked) <= count // PREAD_CHUNK_BYTES + 2  # the chunks, then the end of file


def test_a_failing_chunk_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    """Failure: an error on a later chunk propagates; no partial bytes are taken as the file."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"z" * (2 * PREAD_CHUNK_BYTES))
    calls = 0

    def once(fd: int, size: int, offset: int) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(5, "injected")
        return os.pread(fd, size, offset)

    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError, match="injected"):
            _pread(fd, 2 * PREAD_CHUNK_BYTES, 0, once)
    finally:
        os.close(fd)
