"""Cancellation around work that cannot be taken back: one rule for every wait.

Public, so that the application's waits follow the same rule as the tools' (the MCP
server's call tasks, the composition root's cleanups). Five helpers:

* :func:`checkpoint`, the first thing every tool call does (through
  ``report_progress``): one yield to the event loop, so a cancellation that is
  scheduled but not yet delivered (a deadline already past when the call starts:
  ``asyncio.timeout_at`` in the past schedules its cancel with ``call_soon``) ends the
  call before it does anything, whichever route it would take. A call that could
  complete without ever suspending (``read`` on the event loop's route) would
  otherwise ignore it.

* :func:`deliver_cancellation`, called immediately before a tool launches something
  irreversible (a worker thread, a launcher start), and at the start of every call (a
  cancellation checkpoint, as every Trio operation is). A cancellation requested of the
  calling task but not yet delivered (``task.cancel()`` sets a flag that only the next
  suspension raises) is delivered here, so a call that was already cancelled when it
  started, or whose caller was cancelled while it reported progress, launches nothing.
  A deadline already past (``asyncio.timeout_at`` in the past) is delivered the same way.

* :func:`settle`: wait for a future (the worker, the start), bounded by a deadline,
  while the caller is being cancelled. **The policy**: every further cancellation of
  the caller's task during the wait is held back (counted, never propagated) and the
  wait goes on until the future is done or the deadline passes; afterwards the caller
  attaches its ``Interruption`` and re-raises its *first* ``CancelledError``. So a
  repeated cancel can neither make a tool misreport what its worker did nor cut the
  wait short, and no cancellation is lost (the first one ends the task).

* :func:`outlast`: the same wait for a caller that was not cancelled yet (a cleanup, a
  server waiting for its calls): it waits out the future, then re-raises the first
  cancellation that arrived meanwhile, if any.

* :func:`in_thread`: run a blocking function in the default executor and answer with
  a plain future that the thread itself completes (``call_soon_threadsafe`` from its
  own end). No task wraps it, so the loop's shutdown (``asyncio.run`` cancels every
  task) cannot mark it done while the thread still runs: "done" means "the thread has
  finished", which is what a lease or an ``Interruption`` must be decided on.

No busy loop: the wait sleeps on one private waiter that only two events complete (the
future finishing, the deadline). Each further cancellation wakes it once and it sleeps
again, so it wakes ``1 + cancellations`` times at most, whatever the timing.

**AnyIO callers.** An AnyIO cancel scope re-delivers its cancellation on every event-loop
iteration while its task lives (``CancelScope._deliver_cancellation`` reschedules itself
with ``call_soon`` as long as the task is in the scope), so a wait inside such a scope
would keep the loop busy until the worker ends. When AnyIO is loaded in the process
(this module never imports it: the product uses the standard library only), the wait
runs inside a shielded AnyIO scope (``anyio.CancelScope(shield=True)``, taken from
``sys.modules``): the task leaves the cancelled scope for the wait, nothing is
re-delivered, and the first cancellation is re-raised after it as always. Tests count
the event loop's iterations, not time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, final

__all__ = ["Settled", "checkpoint", "deliver_cancellation", "in_thread", "outlast", "settle"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


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


async def checkpoint() -> None:
    """Yield to the event loop once: a cancellation already scheduled is raised here.

    ``CancelledError`` when the current task was (or is, by a callback that runs first)
    cancelled; otherwise the call goes on after one event-loop iteration.
    """
    await asyncio.sleep(0)


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


async def settle(future: asyncio.Future[Any], seconds: float | None) -> Settled:
    """Wait until ``future`` is done or ``seconds`` passed, holding back cancellations.

    Never raises: further cancellations of the caller's task are counted in ``held``
    (see the module docstring for the policy). ``future`` is never cancelled or
    consumed; the caller reads its outcome. ``seconds=None``: no bound of its own (for
    work that bounds itself).
    """
    settled, _first = await _wait(future, seconds)
    return settled


async def outlast(future: asyncio.Future[Any], seconds: float | None = None) -> bool:
    """Wait until ``future`` is done (or ``seconds`` passed), then re-raise the first
    cancellation of the caller that arrived meanwhile; else answer whether it is done.

    The same policy as :func:`settle` for a caller that has not been cancelled yet: a
    cancellation neither cuts the wait short nor is lost. ``future`` is never cancelled
    or consumed.
    """
    settled, first = await _wait(future, seconds)
    if first is not None:
        try:
            raise first
        finally:
            del first
    return settled.done


def in_thread(
    function: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
) -> asyncio.Future[_T]:
    """Run ``function`` in the loop's default executor; a future the thread completes.

    The future is plain (no task): only the thread's own end completes it, through
    ``call_soon_threadsafe``, so it is never cancelled by the loop's shutdown and
    ``done()`` means the thread has finished. A loop already closed when the thread
    ends takes no answer (nobody waits any more). The context is copied, as
    ``asyncio.to_thread`` does.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            result = context.run(function, *args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the future, as an executor does
            _answer(loop, future, None, error)
        else:
            _answer(loop, future, result, None)

    loop.run_in_executor(None, run)
    return future


def _answer(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[_T],
    result: _T | None,
    error: BaseException | None,
) -> None:
    def complete() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # None only with an error

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(complete)


def _shield() -> contextlib.AbstractContextManager[object]:
    """A shielded AnyIO scope when AnyIO is loaded (see the module docstring), else nothing."""
    anyio = sys.modules.get("anyio")
    scope = getattr(anyio, "CancelScope", None)
    if scope is None:
        return contextlib.nullcontext()
    try:
        shielded: contextlib.AbstractContextManager[object] = scope(shield=True)
    except Exception:  # noqa: BLE001 - not an AnyIO-managed loop: nothing to shield from
        return contextlib.nullcontext()
    return shielded


async def _wait(
    future: asyncio.Future[Any], seconds: float | None
) -> tuple[Settled, asyncio.CancelledError | None]:
    """The wait of :func:`settle` and :func:`outlast`: also the first cancellation held."""
    if future.done():
        return Settled(done=True, wakeups=0, held=0), None
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_finished: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(wake)
    timer = None if seconds is None else loop.call_later(seconds, wake)
    wakeups = held = 0
    first: asyncio.CancelledError | None = None
    try:
        with _shield():
            while not waiter.done():
                try:
                    await asyncio.shield(waiter)
                except asyncio.CancelledError as cancelled:
                    held += 1  # a further cancellation: the caller re-raises its first one
                    if first is None:
                        first = cancelled
                wakeups += 1
    finally:
        if timer is not None:
            timer.cancel()
        future.remove_done_callback(wake)
    return Settled(done=future.done(), wakeups=wakeups, held=held), first
