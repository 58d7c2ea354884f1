"""The rules every tool keeps for progress and cancellation, before it touches anything.

A call reports one progress message first (``report_progress``); a cancellation that
propagates out of a call carries an ``Interruption`` (``attach``) that says what the call
did, for ``spice.agent.tool.interruption_of`` to find.
"""

from __future__ import annotations

import asyncio
from typing import Final

from spice.agent.tool import (
    Call,
    ExecutionError,
    ExecutionState,
    Interruption,
    Progress,
    Reporter,
    RetryDisposition,
)

from .settling import checkpoint

__all__ = ["REPORTER_FAILED", "attach", "report_progress"]

REPORTER_FAILED: Final = "the progress reporter failed; the call did nothing"


async def report_progress(
    call: Call, reporter: Reporter | None, message: str, retry: RetryDisposition
) -> None:
    """A cancellation checkpoint, then one progress message, before the tool touches anything.

    The checkpoint (``settling.checkpoint``) comes first: a call whose cancellation is
    scheduled but not yet delivered (a deadline already past) ends here, definitive,
    with nothing done. A reporter that raises, even ``CancelledError`` while the
    caller's own task is not being cancelled, is a reporter failure:
    ``ExecutionError(definitive, retry)`` raised ``from None``. Real caller cancellation
    propagates with a definitive ``Interruption`` attached (nothing has happened yet).
    """
    try:
        await checkpoint()
    except asyncio.CancelledError as cancelled:
        attach(cancelled, Interruption(call.id, ExecutionState.DEFINITIVE, retry))
        raise
    if reporter is None:
        return
    task = asyncio.current_task()
    try:
        await reporter.report(Progress(call.id, message))
    except asyncio.CancelledError as cancelled:
        if task is not None and task.cancelling() > 0:
            attach(cancelled, Interruption(call.id, ExecutionState.DEFINITIVE, retry))
            raise
        raise ExecutionError(call.id, ExecutionState.DEFINITIVE, retry, REPORTER_FAILED) from None
    except Exception:  # noqa: BLE001 - any reporter failure has one meaning
        raise ExecutionError(call.id, ExecutionState.DEFINITIVE, retry, REPORTER_FAILED) from None


def attach(cancelled: BaseException, interruption: Interruption) -> None:
    """Attach ``interruption`` to a propagating cancellation (``interruption_of`` finds it)."""
    cancelled.interruption = interruption  # type: ignore[attr-defined]
