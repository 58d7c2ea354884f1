"""Execution errors and interruption records.

The error tree of a call is small on purpose::

    BaseException
    ├── asyncio.CancelledError      caller cancellation; always propagates unchanged,
    │                               may carry an ``Interruption`` (see ``interruption_of``)
    └── Exception
        └── ExecutionError          host or reporting failure, correlated to one call

Everything else a tool meets is a model-visible ``Result``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from ._bounds import MAXIMUM_MESSAGE_BYTES, require_identity, require_text
from ._enums import ExecutionState, RetryDisposition
from ._values import Result

_CHAIN_LIMIT: Final = 64
"""How many links of ``__cause__``/``__context__`` ``interruption_of`` follows."""


def _state(value: object) -> ExecutionState:
    if isinstance(value, str) and value in ExecutionState.__members__.values():
        return ExecutionState(value)
    raise ValueError("state is not a known execution state")


def _retry(value: object) -> RetryDisposition:
    if isinstance(value, str) and value in RetryDisposition.__members__.values():
        return RetryDisposition(value)
    raise ValueError("retry is not a known retry disposition")


def _check_pair(state: ExecutionState, retry: RetryDisposition) -> None:
    if state is ExecutionState.UNCERTAIN and retry is not RetryDisposition.NEVER:
        raise ValueError("an uncertain outcome can never be retried")


@final
class ExecutionError(Exception):
    """A host or reporting failure of one call, with a fixed bounded message.

    ``uncertain`` requires ``never``. The message is the project's own words, never
    lower-level text; an ``ExecutionError`` never wraps another one.
    """

    __slots__ = ("call_id", "message", "retry", "state")

    call_id: str
    state: ExecutionState
    retry: RetryDisposition
    message: str

    def __init__(
        self,
        call_id: str,
        state: ExecutionState | str,
        retry: RetryDisposition | str,
        message: str,
    ) -> None:
        if isinstance(message, BaseException) or isinstance(call_id, BaseException):
            raise ValueError("an execution error never wraps another exception")
        checked_state = _state(state)
        checked_retry = _retry(retry)
        _check_pair(checked_state, checked_retry)
        require_identity(call_id, "execution error call id")
        require_text(message, "execution error message", maximum=MAXIMUM_MESSAGE_BYTES)
        super().__init__(message)
        self.call_id = call_id
        self.state = checked_state
        self.retry = checked_retry
        self.message = message

    def __repr__(self) -> str:
        return (
            f"ExecutionError(call_id={self.call_id!r}, state={self.state.value!r}, "
            f"retry={self.retry.value!r}, message={self.message!r})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.call_id, self.state, self.retry, self.message))


@final
@dataclass(frozen=True, slots=True, init=False)
class Interruption:
    """What a cancelled call left behind.

    ``definitive`` + ``result=None``: the effect did not happen. ``definitive`` + a
    ``Result``: the effect happened and this is its answer. ``uncertain`` (always with
    ``never``): nobody can tell. A tool attaches the record to the propagating
    ``CancelledError`` as its ``interruption`` attribute; find it with
    ``interruption_of``.
    """

    call_id: str
    state: ExecutionState
    retry: RetryDisposition
    result: Result | None

    def __init__(
        self,
        call_id: str,
        state: ExecutionState | str,
        retry: RetryDisposition | str,
        result: Result | None = None,
    ) -> None:
        require_identity(call_id, "interruption call id")
        checked_state = _state(state)
        checked_retry = _retry(retry)
        _check_pair(checked_state, checked_retry)
        if result is not None:
            if not isinstance(result, Result):
                raise ValueError("interruption result must be a Result")
            if result.call_id != call_id:
                raise ValueError("interruption result belongs to another call")
            if checked_state is not ExecutionState.DEFINITIVE:
                raise ValueError("only a definitive interruption carries a result")
        object.__setattr__(self, "call_id", call_id)
        object.__setattr__(self, "state", checked_state)
        object.__setattr__(self, "retry", checked_retry)
        object.__setattr__(self, "result", result)


def _record_on(exc: BaseException) -> Interruption | None:
    attached = getattr(exc, "interruption", None)
    if isinstance(attached, Interruption):
        return attached
    for arg in exc.args:
        if isinstance(arg, Interruption):
            return arg
    return None


def interruption_of(exc: BaseException) -> Interruption | None:
    """Find the ``Interruption`` on ``exc`` or along its cause/context chain.

    The record is looked for as the exception's ``interruption`` attribute or among
    its ``args``; the chain is followed ``__cause__`` first, then ``__context__``,
    at most ``_CHAIN_LIMIT`` links and never around a cycle.

    >>> import asyncio
    >>> err = asyncio.CancelledError()
    >>> interruption_of(err) is None
    True
    """
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending and len(seen) < _CHAIN_LIMIT:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        record = _record_on(current)
        if record is not None:
            return record
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None
