"""The event loop never waits on an open a file-access monitor holds (10.3, N9, B9, B16).

A real ``FAN_OPEN_PERM`` listener (what an on-access scanner installs), made with
``fanotify_init``/``fanotify_mark`` through ``ctypes``, holds every open beneath the
worktree for ``LISTENER_SECONDS``. Which route a read took is counted through the loop's
default executor, as in ``test_read_inline``; the listener counts the opens it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import select
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import pytest
from test_read_inline import Counting, on_the_loop, read, warm

from spice.agent.tools.coding import _cached, _regular
from spice.agent.tools.coding._cached import (
    SLOW_OPEN_PAUSE_SECONDS,
    SLOW_OPEN_SECONDS,
    open_cached_regular,
    waited,
)
from spice.agent.tools.coding._read import INLINE_READ_BYTES

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the event-loop route needs Linux (openat2, RWF_NOWAIT)"
)

LISTENER_SECONDS: Final = 0.5
"""How long the listener holds each open (far above ``SLOW_OPEN_SECONDS``)."""
PING_SECONDS: Final = 0.05
"""The contract's bound for an answer while a held read is in flight."""
NOBODY: Final = 65534

_FAN_CLOEXEC: Final = 0x01
_FAN_CLASS_CONTENT: Final = 0x04
_FAN_MARK_ADD: Final = 0x01
_FAN_OPEN_PERM: Final = 0x00010000
_FAN_EVENT_ON_CHILD: Final = 0x08000000
_FAN_ALLOW: Final = 0x01
_AT_FDCWD: Final = -100
_METADATA: Final = struct.Struct("IBBHQii")
_RESPONSE: Final = struct.Struct("iI")


class Listener:
    """A fanotify permission listener on one directory, answering from its own thread."""

    def __init__(self, directory: Path, delay: float) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_mark.argtypes = [
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_char_p,
        ]
        fd = libc.fanotify_init(_FAN_CLASS_CONTENT | _FAN_CLOEXEC, os.O_RDONLY)
        if fd < 0:
            number = ctypes.get_errno()
            pytest.skip(f"fanotify permission events are not available ({errno.errorcode[number]})")
        mask = _FAN_OPEN_PERM | _FAN_EVENT_ON_CHILD
        if libc.fanotify_mark(fd, _FAN_MARK_ADD, mask, _AT_FDCWD, os.fsencode(directory)) < 0:
            os.close(fd)
            pytest.skip("fanotify_mark refused the directory")
        self.fd = fd
        self.delay = delay
        self.opens = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._answer, daemon=True)
        self._thread.start()

    def _answer(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.fd], [], [], 0.02)[0]:
                continue
            buffer = os.read(self.fd, 4096)
            offset = 0
            while offset + _METADATA.size <= len(buffer):
                length, _, _, _, _, event_fd, _pid = _METADATA.unpack_from(buffer, offset)
                self.opens += 1
                time.sleep(self.delay)
                os.write(self.fd, _RESPONSE.pack(event_fd, _FAN_ALLOW))
                os.close(event_fd)
                offset += length

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        os.close(self.fd)  # any event still pending is allowed by the kernel


@pytest.fixture
async def executor() -> AsyncIterator[Counting]:
    counting = Counting()
    asyncio.get_running_loop().set_default_executor(counting)
    yield counting
    counting.shutdown(wait=True)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A worktree; the route's pause is restored after the test (it is process-wide)."""
    monkeypatch.setattr(_cached, "_paused_until", 0.0)
    worktree = tmp_path / "root"
    worktree.mkdir()
    (worktree / "small.txt").write_text("small\n")
    (worktree / "big.bin").write_bytes(b"b" * (INLINE_READ_BYTES + 1))
    return worktree


@contextlib.contextmanager
def listening(directory: Path, delay: float = LISTENER_SECONDS) -> Iterator[Listener]:
    if os.geteuid() != 0:
        pytest.skip("fanotify permission events need CAP_SYS_ADMIN")
    listener = Listener(directory, delay)
    try:
        yield listener
    finally:
        listener.close()


async def test_a_held_open_turns_the_loops_route_off_and_the_loop_keeps_answering(
    root: Path, executor: Counting
) -> None:
    """First held read: on the loop (it cannot know), then the route is off; the next
    held read goes to a worker, and a ping scheduled during it is answered at once."""
    await on_the_loop(root, {"path": "small.txt"}, executor)  # the route runs here
    with listening(root) as listener:
        before = executor.submitted
        first = await read(root, {"path": "small.txt"})
        assert (before, 1) == (executor.submitted, listener.opens)  # held once, on the loop
        assert _cached.paused()
        loop = asyncio.get_running_loop()
        answers: list[str] = []

        async def reading() -> None:
            await read(root, {"path": "small.txt"})
            answers.append("read")

        async def ping() -> float:
            sent = loop.time()
            await asyncio.sleep(0)
            answers.append("ping")
            return loop.time() - sent

        task = asyncio.ensure_future(reading())
        await asyncio.sleep(0)  # the read is under way (in its worker, held)
        latency = await ping()
        await task
        assert before + 1 == executor.submitted  # the worker's route
        assert ["ping", "read"] == answers
        assert latency < PING_SECONDS
    assert json.loads(first.content)["content"] == "small\n"


async def test_a_file_too_large_for_the_loop_is_opened_once(root: Path, executor: Counting) -> None:
    """The size comes from the ``O_PATH`` look: a large file is opened by the worker only."""
    await warm(root, "big.bin")
    await on_the_loop(root, {"path": "small.txt"}, executor)
    with listening(root, delay=0.0) as listener:
        before = executor.submitted
        await read(root, {"path": "big.bin", "limit": 10})
        assert (before + 1, 1) == (executor.submitted, listener.opens)


async def test_the_pause_ends_after_its_bound(
    root: Path, executor: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both sides of ``SLOW_OPEN_PAUSE_SECONDS``: off just before, on again just after."""
    await on_the_loop(root, {"path": "small.txt"}, executor)
    now = time.monotonic()
    monkeypatch.setattr(_cached, "_clock", lambda: now)
    monkeypatch.setattr(_cached, "_paused_until", now + SLOW_OPEN_PAUSE_SECONDS)
    monkeypatch.setattr(_cached, "_clock", lambda: now + SLOW_OPEN_PAUSE_SECONDS - 0.001)
    assert open_cached_regular(str(root), "small.txt") is None
    monkeypatch.setattr(_cached, "_clock", lambda: now + SLOW_OPEN_PAUSE_SECONDS)
    for _ in range(3):
        fd = open_cached_regular(str(root), "small.txt")
        if fd is not None:
            os.close(fd)
            break
        await warm(root, "small.txt")
    else:
        pytest.fail("the route stayed off after its pause")


@pytest.mark.parametrize(
    ("seconds", "sleeps", "expected"),
    [
        (SLOW_OPEN_SECONDS, 1, True),
        (SLOW_OPEN_SECONDS * 0.99, 1, False),
        (10.0, 0, False),  # preempted by a busy machine, never asleep: no wait
        (SLOW_OPEN_SECONDS, -1, True),  # switches unknown: time alone decides
    ],
)
def test_a_wait_is_a_sleep_of_at_least_the_bound(
    seconds: float, sleeps: int, expected: bool
) -> None:
    assert expected == waited(seconds, sleeps)


async def test_a_read_on_the_loop_writes_no_access_time(root: Path, executor: Counting) -> None:
    """B9: ``O_NOATIME``; with ``relatime`` an atime older than the mtime would be updated."""
    path = root / "small.txt"
    for _ in range(3):
        await warm(root, "small.txt")
        seen = path.stat()
        os.utime(path, ns=(seen.st_mtime_ns - 10**9, seen.st_mtime_ns))
        before = executor.submitted
        await read(root, {"path": "small.txt"})
        if before == executor.submitted:
            break
    else:
        pytest.fail("the read went to a worker thread every time")
    assert seen.st_mtime_ns - 10**9 == path.stat().st_atime_ns


def test_a_file_of_another_user_is_declined_to_the_worker() -> None:
    """``O_NOATIME`` is refused (``EPERM``) for a file the runner does not own: declined.

    A forked child as ``nobody`` (real ``setresuid``) opens a root-owned readable file
    and one of its own, both warm: only its own is opened on the loop's route.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to make files of two owners")
    base = Path(tempfile.mkdtemp(prefix="spice-noatime-"))
    try:
        base.chmod(0o755)  # searchable by nobody, below the world-searchable /tmp
        (base / "small.txt").write_text("small\n")
        mine = base / "mine.txt"
        mine.write_text("mine\n")
        os.chown(mine, NOBODY, NOBODY)
        for name in ("small.txt", "mine.txt"):
            asyncio.run(warm(base, name))
        assert [False, True] == _as_nobody(base, ["small.txt", "mine.txt"])
    finally:
        shutil.rmtree(base)


def _as_nobody(root: Path, names: list[str]) -> list[bool]:
    """Which of ``names`` a forked child as ``nobody`` opens on the loop's route."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(reader)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            answers = []
            for name in names:
                opened = None
                for _ in range(3):
                    opened = open_cached_regular(str(root), name)
                    if opened is not None:
                        os.close(opened)
                        break
                    time.sleep(0.02)
                answers.append(opened is not None)
            os.write(writer, json.dumps(answers).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert 0 == os.waitstatus_to_exitcode(status)
    decoded = json.loads(answer)
    assert isinstance(decoded, list)
    return [bool(item) for item in decoded]


async def test_a_failing_look_on_the_loop_falls_back_to_the_worker(
    root: Path, executor: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B16: an ``OSError`` from the ``fstat`` of the look is a refusal, not a host failure."""
    await on_the_loop(root, {"path": "small.txt"}, executor)
    real = _regular._OsCalls.fstat
    failures = [OSError(errno.EIO, "injected")]

    def fstat(self: object, fd: int) -> os.stat_result:
        if failures:
            raise failures.pop()
        return real(self, fd)  # type: ignore[arg-type]

    monkeypatch.setattr(_regular._OsCalls, "fstat", fstat)
    before = executor.submitted
    result = await read(root, {"path": "small.txt"})
    assert (before + 1, []) == (executor.submitted, failures)
    assert json.loads(result.content)["content"] == "small\n"
