"""Evidence for the server: an AnyIO cancel scope wakes a settling wait on every iteration.

The product's ``_settling.settle`` adds no wake-up of its own (one per cancellation).
Inside a cancelled AnyIO scope (the MCP SDK runs each request in one) AnyIO
re-delivers the cancellation on every event-loop iteration while the task lives, so
the wait wakes once per iteration: the loop spins until the worker ends. A shielded
scope stops the re-delivery. Counted in loop iterations, never in time.
"""

from __future__ import annotations

import asyncio
from typing import Final

import anyio

from spice.agent.tools.coding._settling import Settled, settle

ITERATIONS: Final = 100
"""Event-loop iterations until the awaited future finishes."""


async def _finish_after_iterations(future: asyncio.Future[None]) -> None:
    for _ in range(ITERATIONS):
        await asyncio.sleep(0)
    future.set_result(None)


async def _settle_in_a_cancelled_scope(*, shielded: bool) -> Settled:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    finisher = asyncio.ensure_future(_finish_after_iterations(future))
    settled: Settled | None = None
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await asyncio.sleep(1)  # the first delivery, like a tool's worker await
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=shielded):
                settled = await settle(future, 5.0)
            raise
    await finisher
    assert settled is not None
    return settled


async def test_an_unshielded_anyio_scope_wakes_the_wait_on_every_iteration() -> None:
    """Unshielded: about one held-back cancellation per iteration (the spin)."""
    settled = await _settle_in_a_cancelled_scope(shielded=False)
    assert settled.done is True
    assert settled.held >= ITERATIONS // 2


async def test_a_shielded_anyio_scope_lets_the_wait_sleep() -> None:
    """Shielded: one wake-up, when the future finishes."""
    settled = await _settle_in_a_cancelled_scope(shielded=True)
    assert Settled(done=True, wakeups=1, held=0) == settled
