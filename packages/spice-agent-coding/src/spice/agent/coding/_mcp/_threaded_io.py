"""Blocking reads and writes of one descriptor, off the event loop (Windows stdio).

On Windows the event loop (Proactor) cannot wait on the pipes a client hands the server
as stdin and stdout (they are not opened for overlapped I/O), so ``serve`` reads and
writes them in one daemon thread each, one call at a time: memory stays bounded by one
chunk, and the awaiting task stays cancellable (a cancelled wait abandons the call; its
result is dropped). The thread is a daemon: a read still blocked when the server stops
never holds the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Final, TypeVar, cast, final

T = TypeVar("T")

_Job = tuple[Callable[[], object], asyncio.AbstractEventLoop, "asyncio.Future[object]"]
_STOP: Final = None


def _settle(future: asyncio.Future[object], value: object, error: BaseException | None) -> None:
    if future.done():
        return  # the waiter was cancelled: the value is dropped
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


@final
class BlockingChannel:
    """One daemon thread that runs the blocking calls given to ``run``, in order."""

    __slots__ = ("_busy", "_jobs", "_name", "_thread")

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._busy = threading.Event()

    @property
    def busy(self) -> bool:
        """Whether a call is running in the thread now (for example a blocked read)."""
        return self._busy.is_set()

    async def run(self, call: Callable[[], T]) -> T:
        """Run ``call`` in the thread and return its value (or raise its exception)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._jobs.put((call, loop, future))
        return cast(T, await future)

    def close(self) -> None:
        """Let the thread end after the call it runs now (if any). Idempotent."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread = None

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            call, loop, future = job
            self._busy.set()
            value: object = None
            error: BaseException | None = None
            try:
                value = call()
            except BaseException as raised:  # noqa: BLE001 - handed to the awaiting task
                error = raised
            finally:
                self._busy.clear()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_settle, future, value, error)
