"""The shell's answer: every field of one call's result, built in one place.

Each step of a call ends in an :class:`Ended` (a refusal before anything ran, a start
that failed, or a command that ran); :func:`answer` turns it into the ``Result`` the
model receives. Every answer, success or failure, carries the same shell fields:
``workdir``, ``exit_code``, ``timed_out``, ``managed_cleanup_completed``, ``contained``,
the sandbox's fields when the launcher gave any, and the bounded output
(:func:`_output_fields`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tool import Call, ExecutionState, Result, RetryDisposition

from ._capture import Capture, Captured
from ._results import answer_fits, encode, failure, success

__all__ = ["Ended", "answer"]

_RETRY: Final = RetryDisposition.NEVER


@final
@dataclass(frozen=True, slots=True)
class Ended:
    """How one call ended, before it is an answer.

    The defaults are those of a command that did not run: no workdir known (the arguments
    were not decoded), no exit code (-1), no output, no timeout, no completed managed
    cleanup, nothing the call did (``definitive``).
    """

    workdir: str | None
    problem: tuple[str, str] | None
    """``(code, message)``; ``None`` for a command that ran and succeeded."""
    state: ExecutionState = ExecutionState.DEFINITIVE
    capture: Capture | None = None
    exit_code: int = -1
    timed_out: bool = False
    managed_cleanup_completed: bool = False
    sandbox_hint: str | None = None
    sandbox: Mapping[str, object] | None = None
    """``network_refused``, ``protected_restored``: ``_sandbox_fields``."""


def answer(call: Call, ended: Ended, *, contained: bool) -> Result:
    """The model's answer for ``ended``; ``contained`` is the launcher's, read once per call."""
    content: dict[str, object] = {
        "workdir": ended.workdir,
        "exit_code": ended.exit_code,
        "timed_out": ended.timed_out,
        "managed_cleanup_completed": ended.managed_cleanup_completed,
        "contained": contained,
    }
    if ended.sandbox_hint is not None:
        content["sandbox_hint"] = ended.sandbox_hint
    if ended.sandbox:
        content.update(ended.sandbox)
        if "changes" in ended.sandbox:  # a staged call: named as replace names its calls
            content["call_id"] = call.id
    content.update(_output_fields(ended.capture or Capture(1), ended.problem, content))
    if ended.problem is None:
        return success(call, content, ended.state, _RETRY)
    code, problem = ended.problem
    return failure(call, code, problem, ended.state, _RETRY, content)


def _output_fields(
    capture: Capture, problem: tuple[str, str] | None, content: Mapping[str, object]
) -> dict[str, object]:
    """Text when both streams are UTF-8 and their JSON-escaped text keeps the answer within
    the bound; else base64 of the whole capture (the seed's rule, contract 12.4).

    Output of NUL or control bytes escapes to six times its size: base64 (4 characters for
    3 bytes) carries it whole instead, so a capture is never shortened where base64 fits;
    with ``max_output_bytes`` at most 512 KiB it always does. Only a base64 answer still
    past the bound keeps less of each stream's middle: the largest capture budget whose
    answer fits, found by bisection (at most ``log2(max_output_bytes) + 1`` encodings).
    """
    captured = capture.finish()

    def fields_of(captured: Captured, *, text: bool) -> tuple[dict[str, object], bool]:
        fields = captured.fields(text=text)
        whole: dict[str, object] = {"ok": problem is None, **content, **fields}
        if problem is not None:
            whole.update(code=problem[0], message=problem[1])
        return fields, answer_fits(encode(whole))

    fields, fits = fields_of(captured, text=True)
    if fits:
        return fields
    if fields["encoding"] == "utf-8":
        fields, fits = fields_of(captured, text=False)
        if fits:
            return fields
    low, high = 0, captured.stdout.captured + captured.stderr.captured - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fields_of(capture.finish(middle), text=False)[1]:
            low = middle
        else:
            high = middle - 1
    return fields_of(capture.finish(low), text=False)[0]
