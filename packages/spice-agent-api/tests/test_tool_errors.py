"""Contract §2: ``ExecutionError``, ``Interruption`` and ``interruption_of``, with real asyncio."""

from __future__ import annotations

import asyncio
import copy
import pickle

import pytest

from spice.agent.tool import (
    ExecutionError,
    ExecutionState,
    Interruption,
    Result,
    RetryDisposition,
    interruption_of,
)

DEFINITIVE = ExecutionState.DEFINITIVE
UNCERTAIN = ExecutionState.UNCERTAIN
NEVER = RetryDisposition.NEVER
ALLOWED = RetryDisposition.ALLOWED

# --- ExecutionError -------------------------------------------------------------------------


def test_an_execution_error_keeps_its_attributes_and_message() -> None:
    """The four attributes are kept; ``str`` is the message; enums are normalized."""
    error = ExecutionError("c1", "uncertain", "never", "the process outcome is unknown")
    assert ("c1", UNCERTAIN, NEVER, "the process outcome is unknown") == (
        error.call_id,
        error.state,
        error.retry,
        error.message,
    )
    assert "the process outcome is unknown" == str(error)
    assert isinstance(error, Exception)


@pytest.mark.parametrize(
    ("state", "retry"), [(DEFINITIVE, NEVER), (DEFINITIVE, ALLOWED), (UNCERTAIN, NEVER)]
)
def test_every_honest_state_and_retry_pair_is_accepted(
    state: ExecutionState, retry: RetryDisposition
) -> None:
    """definitive with either retry, and uncertain with never, are accepted."""
    error = ExecutionError("c", state, retry, "failed")
    assert (state, retry) == (error.state, error.retry)


def test_an_uncertain_error_that_allows_retry_is_rejected() -> None:
    """uncertain + allowed is a ValueError, for the error and for an interruption."""
    with pytest.raises(ValueError, match="uncertain outcome can never be retried"):
        ExecutionError("c", UNCERTAIN, ALLOWED, "failed")
    with pytest.raises(ValueError, match="uncertain outcome can never be retried"):
        Interruption("c", UNCERTAIN, ALLOWED)


@pytest.mark.parametrize(
    "nested", [ValueError("raw os text"), ExecutionError("c", "definitive", "never", "x")]
)
def test_an_execution_error_never_wraps_another_exception(nested: Exception) -> None:
    """An exception passed as message (or as call id) is rejected, without its text."""
    with pytest.raises(ValueError, match="never wraps another exception") as caught:
        ExecutionError("c", DEFINITIVE, NEVER, nested)  # type: ignore[arg-type]
    assert "raw os text" not in str(caught.value)
    with pytest.raises(ValueError, match="never wraps another exception"):
        ExecutionError(nested, DEFINITIVE, NEVER, "failed")  # type: ignore[arg-type]


def test_an_execution_error_message_at_the_bound_is_accepted_and_one_past_rejected() -> None:
    """A message of 4096 UTF-8 bytes is accepted; 4097 and empty are rejected."""
    assert 4096 == len(ExecutionError("c", DEFINITIVE, NEVER, "😀" * 1024).message.encode())
    with pytest.raises(ValueError, match="exceeds 4096 bytes"):
        ExecutionError("c", DEFINITIVE, NEVER, "😀" * 1024 + "a")
    with pytest.raises(ValueError, match="must not be empty"):
        ExecutionError("c", DEFINITIVE, NEVER, "")


@pytest.mark.parametrize(
    ("call_id", "state", "retry", "rule"),
    [
        ("", DEFINITIVE, NEVER, "call id"),
        ("x" * 129, DEFINITIVE, NEVER, "call id"),
        ("c", "maybe", NEVER, "known execution state"),
        ("c", 1, NEVER, "known execution state"),
        ("c", DEFINITIVE, "sometimes", "known retry disposition"),
        ("c", DEFINITIVE, None, "known retry disposition"),
    ],
)
def test_an_execution_error_with_a_bad_field_is_rejected(
    call_id: str, state: object, retry: object, rule: str
) -> None:
    """Bad ids, states and retries are ValueErrors."""
    with pytest.raises(ValueError, match=rule):
        ExecutionError(call_id, state, retry, "failed")  # type: ignore[arg-type]


def test_an_execution_error_survives_pickle_and_copy() -> None:
    """Pickling and copying keep every attribute (errors cross process and task boundaries)."""
    error = ExecutionError("c", DEFINITIVE, ALLOWED, "the reporter failed")
    clones = [pickle.loads(pickle.dumps(error)), copy.copy(error)]  # noqa: S301 - our own bytes
    for clone in clones:
        assert (error.call_id, error.state, error.retry, error.message) == (
            clone.call_id,
            clone.state,
            clone.retry,
            clone.message,
        )
    assert "ExecutionError(call_id='c', state='definitive', retry='allowed'," in repr(error)


# --- Interruption ---------------------------------------------------------------------------


def test_an_interruption_may_carry_the_committed_result() -> None:
    """A definitive interruption carries the committed result of its own call."""
    committed = Result("c", {"ok": True})
    record = Interruption("c", "definitive", "never", committed)
    assert (DEFINITIVE, NEVER, committed) == (record.state, record.retry, record.result)
    assert Interruption("c", DEFINITIVE, ALLOWED).result is None
    assert record == pickle.loads(pickle.dumps(record))  # noqa: S301 - our own bytes
    assert record == copy.deepcopy(record)


def test_an_interruption_rejects_a_result_of_another_call() -> None:
    """A result whose call id differs from the record's is rejected."""
    with pytest.raises(ValueError, match="another call"):
        Interruption("c", DEFINITIVE, NEVER, Result("other", {}))


def test_an_uncertain_interruption_cannot_carry_a_result() -> None:
    """Only a definitive interruption says what happened."""
    with pytest.raises(ValueError, match="only a definitive interruption"):
        Interruption("c", UNCERTAIN, NEVER, Result("c", {}))


@pytest.mark.parametrize(
    ("call_id", "state", "retry", "result", "rule"),
    [
        ("", DEFINITIVE, NEVER, None, "call id"),
        ("c", "lost", NEVER, None, "known execution state"),
        ("c", DEFINITIVE, "twice", None, "known retry disposition"),
        ("c", DEFINITIVE, NEVER, {"ok": True}, "must be a Result"),
    ],
)
def test_an_interruption_with_a_bad_field_is_rejected(
    call_id: str, state: object, retry: object, result: object, rule: str
) -> None:
    """Bad ids, states, retries and results are ValueErrors."""
    with pytest.raises(ValueError, match=rule):
        Interruption(call_id, state, retry, result)  # type: ignore[arg-type]


# --- interruption_of ------------------------------------------------------------------------

RECORD = Interruption("c", DEFINITIVE, ALLOWED)


def with_attribute(exc: BaseException, record: Interruption = RECORD) -> BaseException:
    """Attach ``record`` the way a tool does: as the ``interruption`` attribute."""
    exc.interruption = record  # type: ignore[attr-defined]
    return exc


def test_interruption_of_finds_the_attribute_on_the_exception() -> None:
    """The record set as ``interruption`` on the exception itself is found."""
    assert RECORD is interruption_of(with_attribute(asyncio.CancelledError()))


def test_interruption_of_finds_the_record_among_the_args() -> None:
    """A record passed as an argument of the exception is found."""
    assert RECORD is interruption_of(asyncio.CancelledError("msg", RECORD))


def test_interruption_of_returns_none_without_a_record() -> None:
    """No record anywhere gives None; a non-record attribute is ignored."""
    assert interruption_of(asyncio.CancelledError()) is None
    plain = asyncio.CancelledError()
    plain.interruption = "not a record"  # type: ignore[attr-defined]
    assert interruption_of(plain) is None


def test_interruption_of_follows_the_cause() -> None:
    """A record on ``__cause__`` is found."""
    outer = asyncio.CancelledError()
    outer.__cause__ = with_attribute(asyncio.CancelledError())
    assert RECORD is interruption_of(outer)


def test_interruption_of_follows_the_context() -> None:
    """A record on ``__context__`` (an exception raised while handling) is found."""

    def handle_by_raising_anew() -> None:
        try:
            raise with_attribute(asyncio.CancelledError())
        except asyncio.CancelledError:
            raise asyncio.CancelledError from None

    with pytest.raises(asyncio.CancelledError) as caught:
        handle_by_raising_anew()
    assert caught.value.__cause__ is None
    assert RECORD is interruption_of(caught.value)


def test_interruption_of_prefers_the_nearest_record() -> None:
    """The exception's own record wins over one further down the chain."""
    near = Interruption("c", UNCERTAIN, NEVER)
    outer = with_attribute(asyncio.CancelledError(), near)
    outer.__context__ = with_attribute(asyncio.CancelledError())
    assert near is interruption_of(outer)


def test_interruption_of_stops_on_a_cycle() -> None:
    """A cause/context cycle without a record ends with None, not a hang."""
    first = asyncio.CancelledError()
    second = asyncio.CancelledError()
    first.__context__ = second
    second.__context__ = first
    second.__cause__ = second
    assert interruption_of(first) is None


def test_interruption_of_finds_a_record_within_the_chain_bound() -> None:
    """A record 63 links down is found."""
    head: BaseException = with_attribute(asyncio.CancelledError())
    for _ in range(63):
        link = asyncio.CancelledError()
        link.__context__ = head
        head = link
    assert RECORD is interruption_of(head)


def test_interruption_of_stops_after_a_bounded_chain() -> None:
    """A record 64 or more links down is not looked for: the walk is bounded."""
    head: BaseException = with_attribute(asyncio.CancelledError())
    for _ in range(64):
        link = asyncio.CancelledError()
        link.__context__ = head
        head = link
    assert interruption_of(head) is None


async def test_a_record_attached_inside_a_cancelled_task_is_found_from_outside() -> None:
    """A task attaches a record to its CancelledError; the awaiting caller finds it."""
    started = asyncio.Event()
    never = asyncio.Event()
    inside: list[asyncio.CancelledError] = []
    record = Interruption("c", UNCERTAIN, NEVER)

    async def tool_body() -> None:
        try:
            started.set()
            await never.wait()
        except asyncio.CancelledError as exc:
            exc.interruption = record  # type: ignore[attr-defined]
            inside.append(exc)
            raise

    task = asyncio.create_task(tool_body())
    async with asyncio.timeout(5):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(5):
            await task
    assert task.cancelled()
    assert record is interruption_of(caught.value)
    # Depending on the Python version the caller sees the task's own exception or a new one
    # whose __context__ is it; either way the record is reachable.
    assert inside[0] is caught.value or inside[0] is caught.value.__context__


def test_a_new_cancelled_error_whose_context_is_the_task_error_leads_to_the_record() -> None:
    """The shape newer asyncio versions raise (a fresh error, context = the task's) works."""
    task_error = with_attribute(asyncio.CancelledError())
    fresh = asyncio.CancelledError()
    fresh.__context__ = task_error
    assert RECORD is interruption_of(fresh)
