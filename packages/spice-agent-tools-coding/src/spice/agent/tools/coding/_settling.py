"""Cancellation around work that cannot be taken back: one rule for every tool.

Two helpers, used by ``read``, ``replace`` and ``shell``:

* :func:`deliver_cancellation`, called immediately before a tool launches something
  irreversible (a worker thread, a launcher start). A cancellation requested of the
  calling task but not yet delivered (``task.cancel()`` sets a flag that only the next
  suspension raises) is delivered here, so a call that was already cancelled when it
  started, or whose caller was cancelled while it reported progress, launches nothing.

* :func:`settle`: wait for a future (the worker, the start), bounded by a deadline,
  while the caller is being cancelled. **The policy**: every further cancellation of
  the caller's task during the wait is held back (counted, never propagated) and the
  wait goes on until the future is done or the deadline passes; afterwards the caller
  attaches its ``Interruption`` and re-raises its *first* ``CancelledError``. So a
  repeated cancel can neither make a tool misreport what its worker did nor cut the
  wait short, and no cancellation is lost (the first one ends the task).

No busy loop: the wait sleeps on one private waiter that only two events complete (the
future finishing, the deadline). Each further cancellation wakes it once and it sleeps
again, so it wakes ``1 + cancellations`` times at most, whatever the timing. An AnyIO
cancel scope re-delivers cancellation on every event-loop iteration while its task is
alive (``CancelScope._deliver_cancellation`` reschedules itself with ``call_soon``); no
code inside such a scope can avoid being woken each time, so the MCP server must run
the call in a shielded scope (or outside the SDK's scope) to keep the loop idle. That
is the application's duty; this module's is to add no wake-up of its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, final

__all__ = ["Settled", "deliver_cancellation", "settle"]


@final
@dataclass(frozen=True, slots=True)
class Settled:
    """How a :func:`settle` wait ended.

    ``done``: the future finished within the bound. ``wakeups``: how often the wait
    resumed (``held + 1`` at most). ``held``: further cancellations held back.
    """

    done: bool
    wakeups: int
    held: int


async def deliver_cancellation() -> None:
    """Raise a cancellation already requested of the current task, before a launch.

    ``task.cancelling()`` counts requests not yet withdrawn; when there is one, one
    ``sleep(0)`` lets the event loop deliver it (``CancelledError`` raised here). A
    count left by a cancellation that was delivered and caught without ``uncancel()``
    raises nothing: the call goes on. Without a request this costs nothing.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > 0:
        await asyncio.sleep(0)


async def settle(future: asyncio.Future[Any], seconds: float) -> Settled:
    """Wait until ``future`` is done or ``seconds`` passed, holding back cancellations.

    Never raises: further cancellations of the caller's task are counted in ``held``
    (see the module docstring for the policy). ``future`` is never cancelled or
    consumed; the caller reads its outcome.
    """
    if future.done():
        return Settled(done=True, wakeups=0, held=0)
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_finished: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(wake)
    timer = loop.call_later(seconds, wake)
    wakeups = held = 0
    try:
        while not waiter.done():
            try:
                await asyncio.shield(waiter)
            except asyncio.CancelledError:
                held += 1  # a further cancellation: the caller re-raises its first one
            wakeups += 1
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return Settled(done=future.done(), wakeups=wakeups, held=held)
