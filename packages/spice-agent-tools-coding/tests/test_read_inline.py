"""Where ``read`` does its file work: on the event loop when nothing can wait, else in a
worker thread, with the same answer either way.

Which route a call took is seen through the event loop's own seam: its default executor
(``loop.set_default_executor``), which counts the work handed to a thread. The files,
the page cache, the second mount and the non-local file system are real; only faults
the machine cannot produce on demand (``preadv`` failing) are injected, at ``os``.
That a cancelled call starts neither route is tested with the other cancellation cases
(``test_cancellation_load.test_a_read_cancelled_before_it_starts_its_worker_starts_none``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import errno
import json
import mmap
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Final

import pytest
from coding_strategies import byte_content
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.tool import (
    Call,
    ExecutionError,
    ExecutionState,
    Result,
    interruption_of,
)
from spice.agent.tools.coding import Config, _cached, _read, _root, new_read
from spice.agent.tools.coding._config import DEFAULT_BYTES
from spice.agent.tools.coding._read import INLINE_READ_BYTES, LOOKAHEAD_BYTES, UNEXPECTED

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the event-loop route needs Linux (openat2, RWF_NOWAIT)"
)

CACHE_ATTEMPTS = 3
"""Tries of a read that must stay on the loop, re-warmed in between: ``RESOLVE_CACHED``
gives up on anything the kernel's RCU walk cannot do (see ``test_root_cached``)."""
BIG_WRITE_BOUND = 2 * INLINE_READ_BYTES
"""A ``max_write_bytes`` above the inline bound, so whole-file hashing meets it first."""


class Counting(concurrent.futures.ThreadPoolExecutor):
    """A default executor that counts what it is given (the worker-thread route)."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(  # type: ignore[override]
        self, fn: Callable[..., object], /, *args: object, **kwargs: object
    ) -> concurrent.futures.Future[object]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
async def executor() -> AsyncIterator[Counting]:
    """The running loop's default executor, counting, for the test."""
    counting = Counting()
    asyncio.get_running_loop().set_default_executor(counting)
    yield counting
    counting.shutdown(wait=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    worktree = tmp_path / "root"
    worktree.mkdir()
    return worktree


async def read(
    root: Path | str, arguments: dict[str, object], max_write_bytes: int = DEFAULT_BYTES
) -> Result:
    # The tests name the hash bound as the write bound: files up to it get file_sha256.
    config = Config(str(root), max_write_bytes=max_write_bytes, max_edit_bytes=max_write_bytes)
    tool = new_read(config)
    return await tool.execute(Call("call-1", "read", json.dumps(arguments)))


async def warm(root: Path | str, path: str) -> None:
    """One read by the worker's route: the fast path is probed and the caches are warm."""
    with _root.portable_only():
        await read(root, {"path": path})
    fd = _root.open_root(str(root))
    try:
        os.close(_root.open_beneath(fd, path, os.O_RDONLY, follow_final=True, regular=True))
    finally:
        os.close(fd)


async def on_the_loop(
    root: Path | str,
    arguments: dict[str, object],
    executor: Counting,
    max_write_bytes: int = DEFAULT_BYTES,
) -> Result:
    """A read that must not hop to a thread with warm caches; its result."""
    path = arguments["path"]
    assert isinstance(path, str)
    for _ in range(CACHE_ATTEMPTS):
        await warm(root, path)
        before = executor.submitted
        result = await read(root, arguments, max_write_bytes)
        if before == executor.submitted:
            return result
    pytest.fail("the read went to a worker thread every time")


async def both_routes(
    root: Path | str, arguments: dict[str, object], max_write_bytes: int = DEFAULT_BYTES
) -> Result:
    """The call's result, after checking that the worker's route gives the same."""
    result = await read(root, arguments, max_write_bytes)
    with _root.portable_only():  # the portable walk in a worker thread: the authority
        authority = await read(root, arguments, max_write_bytes)
    assert (authority.content, authority.is_error) == (result.content, result.is_error)
    return result


async def test_a_small_cached_file_is_read_on_the_loop(root: Path, executor: Counting) -> None:
    """Positive: no thread, and the answer the worker's route gives."""
    (root / "f.txt").write_text("hello\n")
    result = await on_the_loop(root, {"path": "f.txt"}, executor)
    assert json.loads(result.content)["content"] == "hello\n"
    await both_routes(root, {"path": "f.txt"})


@pytest.mark.parametrize(
    ("size", "inline"), [(INLINE_READ_BYTES, True), (INLINE_READ_BYTES + 1, False)]
)
async def test_a_hashed_file_at_the_bound_is_inline_and_one_byte_more_is_not(
    root: Path, executor: Counting, size: int, inline: bool
) -> None:
    """Boundary: the whole file is read for its digest, so its size meets the bound."""
    (root / "f.bin").write_bytes(b"a" * size)
    if inline:
        result = await on_the_loop(root, {"path": "f.bin"}, executor, BIG_WRITE_BOUND)
    else:
        await warm(root, "f.bin")
        before = executor.submitted
        result = await read(root, {"path": "f.bin"}, max_write_bytes=BIG_WRITE_BOUND)
        assert before + 1 == executor.submitted
    assert "file_sha256" in json.loads(result.content)
    await both_routes(root, {"path": "f.bin"}, max_write_bytes=BIG_WRITE_BOUND)


@pytest.mark.parametrize(
    ("limit", "inline"),
    [(INLINE_READ_BYTES - LOOKAHEAD_BYTES, True), (INLINE_READ_BYTES - LOOKAHEAD_BYTES + 1, False)],
)
async def test_a_page_of_a_large_file_at_the_bound_is_inline_and_one_byte_more_is_not(
    root: Path, executor: Counting, limit: int, inline: bool
) -> None:
    """Boundary: a file past the write bound is not hashed; the page and lookahead count."""
    (root / "big.bin").write_bytes(b"b" * (4 * INLINE_READ_BYTES))
    arguments: dict[str, object] = {"path": "big.bin", "offset": 5, "limit": limit}
    if inline:
        result = await on_the_loop(root, arguments, executor, INLINE_READ_BYTES)
    else:
        await warm(root, "big.bin")
        before = executor.submitted
        result = await read(root, arguments, max_write_bytes=INLINE_READ_BYTES)
        assert before + 1 == executor.submitted
    assert json.loads(result.content)["bytes"] == limit
    assert "file_sha256" not in json.loads(result.content)
    await both_routes(root, arguments, max_write_bytes=INLINE_READ_BYTES)


EVICTION_ATTEMPTS: Final = 5
"""How often the cold-read test asks the kernel to drop a file's pages before it skips."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
_libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def _resident(fd: int, size: int) -> bool:
    """Whether any page of the file is in the page cache (``mincore`` on a mapping that is
    never touched: unlike a probing read, it starts no readahead)."""
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    try:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vector = ctypes.create_string_buffer(pages)
        if _libc.mincore(address, size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return any(byte & 1 for byte in vector.raw)
    finally:
        _libc.munmap(address, size)


def _evicted(path: Path) -> bool:
    """Drop ``path``'s clean pages (``POSIX_FADV_DONTNEED``, advice the kernel may ignore)
    and check that none is left in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        size = os.fstat(fd).st_size
        for _ in range(EVICTION_ATTEMPTS):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not _resident(fd, size):
                return True
        return False
    finally:
        os.close(fd)


COLD_READ_ATTEMPTS: Final = 5
"""Evict-then-read rounds: the kernel may bring a page back between the check and the read."""


async def test_data_not_in_the_page_cache_goes_to_a_worker(
    root: Path, executor: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RWF_NOWAIT`` says the bytes need I/O: the worker reads them; same answer.

    Eviction is advice and the page can come back before the read (seen once under CI's
    load), so each round evicts again. A ``RWF_NOWAIT`` read of an evicted page may also
    start the kernel's readahead and answer from it when that I/O completes at once (seen
    five rounds in a row in a quiet fresh-clone run): nothing blocked, and the loop keeps
    the read. When no round reached the worker that way, the kernel's own answer for bytes
    that need I/O (``EAGAIN``, and only to a ``RWF_NOWAIT`` read) is injected through
    ``os.preadv``: a read that did not ask for ``RWF_NOWAIT``, or ignored its answer,
    still fails. No confirmed eviction at all skips."""
    path = root / "cold.txt"
    path.write_bytes(b"cold data\n" * 100)
    await warm(root, "cold.txt")
    evicted = 0
    for _ in range(COLD_READ_ATTEMPTS):
        if not _evicted(path):
            continue
        evicted += 1
        before = executor.submitted
        result = await read(root, {"path": "cold.txt"})
        assert json.loads(result.content)["content"] == "cold data\n" * 100
        if before + 1 == executor.submitted:
            return
    if not evicted:
        pytest.skip("the kernel kept the file's pages cached (advice only; a busy machine)")
    real = os.preadv

    def uncached(fd: int, buffers: Sequence[bytearray], offset: int, flags: int = 0) -> int:
        if flags & getattr(os, "RWF_NOWAIT", 0):
            raise OSError(errno.EAGAIN, "needs I/O")
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", uncached)
    before = executor.submitted
    result = await read(root, {"path": "cold.txt"})
    assert before + 1 == executor.submitted
    assert json.loads(result.content)["content"] == "cold data\n" * 100


async def test_a_file_in_another_mount_goes_to_a_worker(executor: Counting) -> None:
    """The root ``/`` and a file on the ``/dev/shm`` mount: never opened on the loop."""
    if not _separate_mount("/dev/shm"):
        pytest.skip("/dev/shm is not a separate mount here")
    with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="spice-inline-") as handle:
        handle.write(b"shared\n")
        handle.flush()
        relative = str(Path(handle.name).relative_to("/"))
        await warm("/", relative)
        before = executor.submitted
        result = await read("/", {"path": relative})
        assert before + 1 == executor.submitted
        assert json.loads(result.content)["content"] == "shared\n"


def _separate_mount(directory: str) -> bool:
    return os.path.isdir(directory) and os.stat(directory).st_dev != os.stat("/").st_dev


async def test_a_file_system_that_is_not_local_goes_to_a_worker(executor: Counting) -> None:
    """``/proc`` stands for NFS, FUSE and the rest: an open there might wait on a server."""
    await warm("/proc/sys/kernel", "ostype")
    before = executor.submitted
    result = await read("/proc/sys/kernel", {"path": "ostype"})
    assert before + 1 == executor.submitted
    assert json.loads(result.content)["content"] == "Linux\n"


@pytest.mark.parametrize("path", ["missing.txt", "fifo", "escape", "sub"])
async def test_failures_are_the_workers_answers(root: Path, executor: Counting, path: str) -> None:
    """Negative: every failure is answered by the authority, word for word."""
    os.mkfifo(root / "fifo")
    (root / "escape").symlink_to("/etc/hostname")
    (root / "sub").mkdir()
    (root / "ok.txt").write_text("ok")
    await warm(root, "ok.txt")  # the route is on; these still go to the worker
    before = executor.submitted
    result = await both_routes(root, {"path": path})
    assert result.is_error
    assert before + 2 == executor.submitted  # this call's and the authority's


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=byte_content,
    offset=st.integers(min_value=0, max_value=96),
    limit=st.one_of(st.none(), st.integers(min_value=1, max_value=96)),
)
def test_any_content_and_page_gives_the_workers_answer(
    root: Path, data: bytes, offset: int, limit: int | None
) -> None:
    """Text, binary, cut characters, offsets past the end: the two routes agree exactly,
    and the loop's route did answer (no executor submission for that call)."""
    (root / "f").write_bytes(data)
    arguments: dict[str, object] = {"path": "f", "offset": offset}
    if limit is not None:
        arguments["limit"] = limit

    async def compare() -> None:
        counting = Counting()
        asyncio.get_running_loop().set_default_executor(counting)
        try:
            result = await on_the_loop(root, arguments, counting, max_write_bytes=64)
            with _root.portable_only():  # the portable walk in a worker thread: the authority
                authority = await read(root, arguments, max_write_bytes=64)
            assert (authority.content, authority.is_error) == (result.content, result.is_error)
        finally:
            counting.shutdown(wait=True)

    asyncio.run(compare())


async def test_a_failing_cached_read_falls_back_to_the_worker(
    root: Path, executor: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failure: ``preadv`` refusing (EIO here) sends the call to the worker, which reads."""
    (root / "f.txt").write_text("recovered\n")
    await warm(root, "f.txt")

    def preadv(fd: int, buffers: object, offset: int, flags: int = 0) -> int:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "preadv", preadv)
    before = executor.submitted
    result = await read(root, {"path": "f.txt"})
    assert before + 1 == executor.submitted
    assert json.loads(result.content)["content"] == "recovered\n"


async def test_a_fault_in_the_loops_route_is_a_host_failure(
    root: Path, executor: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug on the loop's route is an ``ExecutionError``, definitive, with a fixed text."""
    (root / "f.txt").write_text("x")

    def broken(*args: object) -> None:
        raise RuntimeError("a secret-looking bug text")

    monkeypatch.setattr(_read, "_read_inline", broken)
    with pytest.raises(ExecutionError) as caught:
        await read(root, {"path": "f.txt"})
    assert (UNEXPECTED, ExecutionState.DEFINITIVE) == (caught.value.message, caught.value.state)
    assert "secret" not in str(caught.value)
    assert caught.value.__cause__ is None


HAS_FD_DIR = os.path.isdir("/proc/self/fd")


@pytest.mark.skipif(not HAS_FD_DIR, reason="counting descriptors needs /proc/self/fd")
async def test_many_inline_reads_leave_no_descriptor_open(root: Path) -> None:
    """Answered on the loop or declined to a worker, every descriptor is closed."""
    (root / "f.txt").write_text("x" * 100)
    (root / "big.bin").write_bytes(b"y" * (INLINE_READ_BYTES + 1))
    os.mkfifo(root / "fifo")
    await warm(root, "f.txt")
    assert _cached._cached_route_enabled()  # its one mount-table descriptor is held from here
    before = len(os.listdir("/proc/self/fd"))
    for index in range(30):
        path = ("f.txt", "big.bin", "fifo", "missing")[index % 4]
        await read(root, {"path": path, "limit": 9})
    assert before == len(os.listdir("/proc/self/fd"))


async def test_a_deadline_already_past_ends_a_warm_loop_read_before_anything(
    root: Path, executor: Counting
) -> None:
    """TC-11: the loop's route is warm (a normal call runs there), yet a call under a
    deadline already past ends with ``TimeoutError``: no answer, no thread."""
    (root / "f.txt").write_text("hello\n")
    await on_the_loop(root, {"path": "f.txt"}, executor)  # the route runs for this file
    loop = asyncio.get_running_loop()
    before = executor.submitted
    with pytest.raises(TimeoutError):
        async with asyncio.timeout_at(loop.time() - 1):
            await read(root, {"path": "f.txt"})
    assert before == executor.submitted


async def test_a_cancellation_scheduled_before_a_warm_loop_read_ends_it(
    root: Path, executor: Counting
) -> None:
    """A ``task.cancel`` scheduled (``call_soon``) but not yet delivered when the call
    starts: the call is cancelled, definitive, nothing read, no thread."""
    (root / "f.txt").write_text("hello\n")
    await on_the_loop(root, {"path": "f.txt"}, executor)
    task = asyncio.current_task()
    assert task is not None
    before = executor.submitted
    asyncio.get_running_loop().call_soon(task.cancel)
    with pytest.raises(asyncio.CancelledError) as caught:
        await read(root, {"path": "f.txt"})
    assert 0 == task.uncancel()
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, None) == (interruption.state, interruption.result)
    assert before == executor.submitted


async def test_a_call_with_time_left_is_answered_on_the_loop(
    root: Path, executor: Counting
) -> None:
    """Boundary: a deadline not yet reached changes nothing; the loop's route answers."""
    (root / "f.txt").write_text("hello\n")
    await on_the_loop(root, {"path": "f.txt"}, executor)
    loop = asyncio.get_running_loop()
    before = executor.submitted
    async with asyncio.timeout_at(loop.time() + 60):
        result = await read(root, {"path": "f.txt"})
    assert json.loads(result.content)["content"] == "hello\n"
    assert before == executor.submitted
