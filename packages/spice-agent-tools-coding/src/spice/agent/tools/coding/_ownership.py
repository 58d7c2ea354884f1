"""Process ownership of one shell instance: admission, slots, joins and ``Cleanup``.

A process the launcher returns (also inside a ``LaunchError``) is owned at once
and released only after its ``Process.wait()`` (the join) succeeds. The states::

    admit() ──► Ticket (a slot: "starting") ──own()──► Entry (the slot: "owned")
       │                 │                                 │ join ok ──► released
       │                 └─ release_slot() (nothing        │ join retryable failure ──► kept;
       │                    was started)                   │     Cleanup retries it
       │                                                   │ join terminal failure ──► kept,
       └─ refused: shell_closing / process_limit           │     never retried; Cleanup raises

At most ``MAXIMUM_PROCESSES`` slots exist at once. ``cleanup()`` closes
admission, waits for every call and background task in flight, then joins what
is still owned (bounded attempts, non-busy backoff) and raises
``CleanupIncomplete`` when it cannot prove every process released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Final, TypeVar, final

from spice.agent.process import Process, ProcessFailure

MAXIMUM_PROCESSES: Final = 128
"""Most processes owned or starting at once per shell instance."""

JOIN_SECONDS: Final = 30.0
"""Longest one join (``Process.wait()``) may take before it counts as a retryable failure."""

CLEANUP_JOIN_ATTEMPTS: Final = 5
"""Join attempts ``Cleanup`` makes per owned process and per ``Cleanup`` call."""

CLEANUP_BACKOFF_SECONDS: Final = 0.05
"""First pause between two join attempts of ``Cleanup``; doubled after each attempt."""

CLEANUP_BACKOFF_LIMIT_SECONDS: Final = 1.0
"""Longest pause between two join attempts of ``Cleanup``."""

CLEANUP_INCOMPLETE: Final = "the shell could not prove that every process it started was released"

_T = TypeVar("_T")


@final
class CleanupIncomplete(RuntimeError):
    """``Cleanup`` could not prove every owned process released (fixed message, no details)."""

    def __init__(self) -> None:
        super().__init__(CLEANUP_INCOMPLETE)


@final
@dataclass(frozen=True, slots=True)
class Timing:
    """The bounds of one shell instance; tests shorten them, production uses the defaults."""

    join_seconds: float = JOIN_SECONDS
    backoff_seconds: float = CLEANUP_BACKOFF_SECONDS
    backoff_limit_seconds: float = CLEANUP_BACKOFF_LIMIT_SECONDS
    join_attempts: int = CLEANUP_JOIN_ATTEMPTS


@final
class Ticket:
    """An admitted call: one in-flight count, and one slot until a process is owned."""

    __slots__ = ("_left", "_owner", "_slot", "starting")

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self._slot = True
        self._left = False
        self.starting = False
        """Set once a launcher start is under way: the start, not the call, settles the slot."""

    def release_slot(self) -> None:
        """Give the slot back: nothing was (or will be) started for this ticket. Idempotent."""
        if self._slot:
            self._slot = False
            self._owner.give_back_slot()

    def take_slot(self) -> bool:
        """Hand the slot to an owned process; ``False`` when the slot was already given back."""
        held, self._slot = self._slot, False
        return held

    def leave(self) -> None:
        """The call is over. Without a start under way its slot goes back. Idempotent."""
        if not self._left:
            self._left = True
            if not self.starting:
                self.release_slot()
            self._owner.finished_one()


@final
class Entry:
    """One owned process."""

    __slots__ = ("process", "terminal")

    def __init__(self, process: Process) -> None:
        self.process = process
        self.terminal = False


@final
class Owner:
    """Admission, the owned processes and the ``Cleanup`` of one shell instance."""

    def __init__(self, timing: Timing) -> None:
        self._timing = timing
        self.closing = False
        self._reserved = 0
        self._active = 0
        self._owned: dict[int, Entry] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._join_lock: asyncio.Lock | None = None

    @property
    def reserved(self) -> int:
        """Slots taken: calls admitted that own no process yet, and owned processes."""
        return self._reserved

    def give_back_slot(self) -> None:
        """A ticket's slot goes back (nothing was, or will be, started for it)."""
        self._reserved -= 1

    @property
    def owned(self) -> int:
        """How many processes are owned (not yet proven released)."""
        return len(self._owned)

    def admit(self) -> Ticket | str:
        """A ticket for a new call, or the refusal code."""
        if self.closing:
            return "shell_closing"
        if self._reserved >= MAXIMUM_PROCESSES:
            return "process_limit"
        self._reserved += 1
        self._active += 1
        return Ticket(self)

    def own(self, ticket: Ticket, process: Process) -> Entry:
        """Own ``process`` at once, in the ticket's slot (a new one if that was given back)."""
        if not ticket.take_slot():
            self._reserved += 1
        entry = Entry(process)
        self._owned[id(entry)] = entry
        return entry

    def spawn(self, work: Coroutine[object, object, _T]) -> asyncio.Task[_T]:
        """Run ``work`` as a task that ``cleanup`` waits for (it outlives a cancelled call)."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        self._active += 1
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[_T]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # mark retrieved: every spawned task reports through its result
        self.finished_one()

    def finished_one(self) -> None:
        """One call or background task is over; wake ``cleanup`` when none is left."""
        self._active -= 1
        if self._active == 0:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def join(self, entry: Entry) -> bool:
        """One bounded join attempt; ``True`` (and released) when it proved the process gone."""
        if entry.terminal:
            return False
        try:
            async with asyncio.timeout(self._timing.join_seconds):
                await entry.process.wait()
        except ProcessFailure as failure:
            if not failure.retryable:
                entry.terminal = True
            return False
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling() > 0:
                raise
            return False  # the platform's own CancelledError: a failure not known terminal
        except Exception:  # noqa: BLE001 - anything else is a failure not known to be terminal
            return False
        self._release(entry)
        return True

    def _release(self, entry: Entry) -> None:
        if self._owned.pop(id(entry), None) is not None:
            self._reserved -= 1

    async def cleanup(self) -> None:
        """Close admission, wait for calls in flight, join what is owned; raise if any remains."""
        self.closing = True
        while self._active:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await waiter
        if self._join_lock is None:
            self._join_lock = asyncio.Lock()
        async with self._join_lock:
            remaining = 0
            for entry in list(self._owned.values()):
                if not await self._join_with_retries(entry):
                    remaining += 1
        if remaining:
            raise CleanupIncomplete

    async def _join_with_retries(self, entry: Entry) -> bool:
        pause = self._timing.backoff_seconds
        for attempt in range(self._timing.join_attempts):
            if entry.terminal:
                return False
            if attempt:
                await asyncio.sleep(pause)
                pause = min(pause * 2, self._timing.backoff_limit_seconds)
            if await self.join(entry):
                return True
        return False
