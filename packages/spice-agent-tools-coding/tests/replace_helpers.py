"""Helpers of the replace tests: a recording and faulting syscall seam, calls, digests.

The seam wraps the real calls (every test touches real files); it only adds what
cannot be caused for real without root: a failing ``close``, ``unlink``, ``rename``...
and a blocking checkpoint that opens a deterministic window in the worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final, final

import pytest

from spice.agent.tool import Call, Reporter, Result
from spice.agent.tools.coding import Config, _replace
from spice.agent.tools.coding._commit import POSIX, Checkpoint, CommitGate, is_temporary_name
from spice.agent.tools.coding._config import DEFAULT_BYTES, DEFAULT_EDIT_BYTES
from spice.agent.tools.coding._replace import ReplaceTool

WAIT_SECONDS: Final = 5.0
SUCCESS_KEYS: Final = frozenset(
    {
        "ok",
        "call_id",
        "path",
        "bytes",
        "sha256",
        "created",
        "changed",
        "committed",
        "durable",
        "temporary_cleaned",
        "hard_links_split",
        "owner_changed",
    }
)
"""The fields of every successful replace answer (the edit form adds its own three)."""
EDIT_SUCCESS_KEYS: Final = SUCCESS_KEYS | {"edits_applied", "diff", "diff_truncated"}
"""Bound on every wait of a test for the worker thread."""
INJECTED: Final = "injected fault"


def digest(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def temporaries(root: Path) -> list[Path]:
    """Every replace temporary file (and anything shaped like one) under ``root``."""
    return sorted(
        p for p in root.rglob("*") if p.name.startswith(".spice-replace-") or p.suffix == ".tmp"
    )


def strays(directory: Path, expected: Iterable[str]) -> list[str]:
    """Names in ``directory`` that are neither expected nor temporary-shaped."""
    known = set(expected)
    return sorted(n for n in os.listdir(directory) if n not in known and not is_temporary_name(n))


@final
class Pause:
    """Holds the worker thread at one checkpoint until the test releases it (bounded)."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        """Run in the worker thread at the checkpoint."""
        self.reached.set()
        if not self.release.wait(WAIT_SECONDS):
            raise RuntimeError("the test never released the pause")

    async def wait_reached(self) -> None:
        """Wait (bounded) until the worker is held here."""
        assert await asyncio.to_thread(self.reached.wait, WAIT_SECONDS), "checkpoint not reached"


@final
class Recording:
    """A :class:`~spice.agent.tools.coding._commit.Syscalls` that counts and injects faults.

    ``failures`` maps an operation to the invocation numbers (1-based) that fail with
    ``EIO`` (``EPERM`` for ``fchown``). Operations: ``open``, ``open_temporary`` (an
    ``open`` with ``O_CREAT``), ``read``, ``write``, ``fsync``, ``fchmod``, ``fchown``,
    ``close``, ``close_temporary`` (closing the descriptor ``open_temporary`` returned),
    ``lstat``, ``fstat``, ``rename``, ``link``, ``unlink``. ``write_limit`` caps what one
    ``write`` writes (``0`` makes it write nothing). ``hooks`` run in the worker thread
    at a checkpoint; ``slow`` maps ``(operation, number)`` to a hook run in the worker
    thread just before that invocation (a slow ``fsync``, for example).
    """

    def __init__(
        self,
        *,
        failures: Mapping[str, Iterable[int]] | None = None,
        write_limit: int | None = None,
        hooks: Mapping[Checkpoint, Callable[[], None]] | None = None,
        slow: Mapping[tuple[str, int], Callable[[], None]] | None = None,
    ) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.checkpoints: list[Checkpoint] = []
        self._failures = {op: frozenset(numbers) for op, numbers in (failures or {}).items()}
        self._write_limit = write_limit
        self._hooks = dict(hooks or {})
        self._slow = dict(slow or {})
        self._temporary_fds: set[int] = set()
        self._lock = threading.Lock()

    def _count(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1
            number = self.calls[operation]
        hook = self._slow.get((operation, number))
        if hook is not None:
            hook()
        if number in self._failures.get(operation, frozenset()):
            raise OSError(errno.EPERM if operation == "fchown" else errno.EIO, INJECTED)

    def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
        """Count, maybe fail, then open for real."""
        creating = bool(flags & os.O_CREAT)
        self._count("open_temporary" if creating else "open")
        fd = POSIX.open(name, flags, mode, dir_fd)
        if creating:
            self._temporary_fds.add(fd)
        return fd

    def read(self, fd: int, size: int) -> bytes:
        """Count, maybe fail, then read for real."""
        self._count("read")
        return POSIX.read(fd, size)

    def write(self, fd: int, data: memoryview) -> int:
        """Count, maybe fail, then write (at most ``write_limit`` bytes) for real."""
        self._count("write")
        if self._write_limit is not None:
            data = data[: self._write_limit]
            if not data:
                return 0
        return POSIX.write(fd, data)

    def fsync(self, fd: int) -> None:
        """Count, maybe fail, then sync for real."""
        self._count("fsync")
        POSIX.fsync(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        """Count, maybe fail, then chmod for real."""
        self._count("fchmod")
        POSIX.fchmod(fd, mode)

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        """Count, maybe fail (``EPERM`` for ``fchown``: not allowed), then chown for real."""
        self._count("fchown")
        POSIX.fchown(fd, uid, gid)

    def close(self, fd: int) -> None:
        """Count, close for real, then maybe report a failure (the fd is gone either way)."""
        temporary = fd in self._temporary_fds
        self._temporary_fds.discard(fd)
        POSIX.close(fd)
        self._count("close")
        if temporary:
            self._count("close_temporary")

    def lstat(self, name: str, dir_fd: int) -> os.stat_result:
        """Count, maybe fail, then lstat for real."""
        self._count("lstat")
        return POSIX.lstat(name, dir_fd)

    def fstat(self, fd: int) -> os.stat_result:
        """Count, maybe fail, then fstat for real."""
        self._count("fstat")
        return POSIX.fstat(fd)

    def rename(self, source: str, target: str, dir_fd: int) -> None:
        """Count, maybe fail, then rename for real."""
        self._count("rename")
        POSIX.rename(source, target, dir_fd)

    def link(self, source: str, target: str, dir_fd: int) -> None:
        """Count, maybe fail, then link for real."""
        self._count("link")
        POSIX.link(source, target, dir_fd)

    def unlink(self, name: str, dir_fd: int) -> None:
        """Count, maybe fail, then unlink for real."""
        self._count("unlink")
        POSIX.unlink(name, dir_fd)

    def checkpoint(self, point: Checkpoint) -> None:
        """Record the point and run its hook."""
        self.checkpoints.append(point)
        hook = self._hooks.get(point)
        if hook is not None:
            hook()


def watch_cancellation(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when a replace call asks its worker to stop (``CommitGate.cancel``).

    A :class:`Pause` whose ``release`` is this event lets the worker go on only after the
    cancellation reached it, so the test knows which side of the commit point it is on.
    """
    called = threading.Event()

    @final
    class _WatchedGate:
        def __init__(self) -> None:
            self._gate = CommitGate()

        def cancel(self) -> bool:
            passed = self._gate.cancel()
            called.set()
            return passed

        @property
        def cancelled(self) -> bool:
            return self._gate.cancelled

        @property
        def entered(self) -> bool:
            return self._gate.entered

        def enter(self) -> bool:
            return self._gate.enter()

    monkeypatch.setattr(_replace, "CommitGate", _WatchedGate)
    return called


def make_tool(
    root: Path,
    syscalls: Recording | None = None,
    *,
    max_write_bytes: int = DEFAULT_BYTES,
    max_edit_bytes: int = DEFAULT_EDIT_BYTES,
) -> ReplaceTool:
    """A replace tool over ``root`` (the real calls unless ``syscalls`` is given)."""
    config = Config(str(root), max_write_bytes=max_write_bytes, max_edit_bytes=max_edit_bytes)
    if syscalls is None:
        return ReplaceTool(config)
    return ReplaceTool(config, syscalls=syscalls)


def make_call(arguments: Mapping[str, object], call_id: str = "call-1") -> Call:
    """A ``replace`` call with ``arguments`` as JSON."""
    return Call(call_id, "replace", json.dumps(arguments))


async def run(
    tool: ReplaceTool,
    arguments: Mapping[str, object],
    reporter: Reporter | None = None,
    call_id: str = "call-1",
) -> tuple[Result, dict[str, object]]:
    """Execute one call (bounded); return the result and its decoded content."""
    async with asyncio.timeout(WAIT_SECONDS * 2):
        result = await tool.execute(make_call(arguments, call_id), reporter)
    return result, content_of(result)


def content_of(result: Result) -> dict[str, object]:
    """The decoded content object of ``result``."""
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value


def replace_arguments(path: str, content: str, expected: bytes) -> dict[str, object]:
    """Arguments replacing a file whose current bytes are ``expected``."""
    return {"path": path, "content": content, "expected_sha256": digest(expected)}


def create_arguments(path: str, content: str) -> dict[str, object]:
    """Arguments creating a new file."""
    return {"path": path, "content": content, "create": True}


def current_umask() -> int:
    """The process umask (tests are single-threaded when they ask)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
