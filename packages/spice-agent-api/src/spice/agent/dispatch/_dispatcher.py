"""The dispatcher: the one route from a caller to a tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, Protocol, final

from spice.agent.tool import (
    MAXIMUM_PAYLOAD_BYTES,
    Call,
    Definition,
    Effect,
    ExecutionError,
    ExecutionState,
    Reporter,
    Result,
    RetryDisposition,
    Tool,
)


class Proceed(Protocol):
    """Continues a dispatched call with the next interceptor, then the tool.

    ``call`` may carry rewritten arguments, but never another id or tool name.
    """

    def __call__(self, call: Call | None = None, /) -> Awaitable[Result]: ...


Interceptor = Callable[[Call, Definition, Proceed], Awaitable[Result]]
"""``async (call, definition, proceed) -> Result``: audit, deny or pass a call on."""

SHOWN_NAME_CHARS: Final = 64
"""Most characters of an unknown tool's name that its answer shows (it is model input)."""
LISTED_NAMES_CHARS: Final = 1024
"""Most characters of the tool names an ``unknown_tool`` answer lists; the rest are counted."""
_WRONG_ANSWER: Final = "the tool answered with a result that does not belong to the call"
_TOOL_FAILED: Final = "the tool failed in an unexpected way"
_INTERCEPTOR_CHANGED_CALL: Final = "an interceptor changed the call's id or tool name"
"""Raised from ``proceed``: the next interceptor or the tool is not reached."""


def _unknown_tool(call: Call, names: Sequence[str]) -> Result:
    """``unknown_tool``, naming the call's tool (shortened, non-printable characters as
    ``?``) and the tools there are (up to ``LISTED_NAMES_CHARS``)."""
    name = call.name
    shown = "".join(c if c.isprintable() else "?" for c in name[:SHOWN_NAME_CHARS])
    shown = f"'{shown}'" + ("..." if len(name) > SHOWN_NAME_CHARS else "")
    listed: list[str] = []
    for each in names:
        if sum(len(item) + 2 for item in listed) + len(each) > LISTED_NAMES_CHARS:
            listed.append(f"and {len(names) - len(listed)} more")
            break
        listed.append(each)
    tools = f"the tools are: {', '.join(listed)}" if names else "there are no tools"
    problem = f"no tool named {shown} is available; {tools}"
    content = {"ok": False, "code": "unknown_tool", "message": problem}
    return Result.from_content(call.id, content, problem)


def _failure(call: Call, definition: Definition, message: str) -> ExecutionError:
    if definition.effect is Effect.MUTATING:
        return ExecutionError(call.id, ExecutionState.UNCERTAIN, RetryDisposition.NEVER, message)
    return ExecutionError(call.id, ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED, message)


@final
class Dispatcher:
    """Routes calls to tools through ordered interceptors and checks every answer.

    The definitions are snapshotted at construction; two tools of one name are
    rejected. Unknown names are a model-visible ``unknown_tool`` result.
    ``asyncio.CancelledError`` passes through unchanged.

    >>> import asyncio
    >>> asyncio.run(Dispatcher([]).dispatch(Call("1", "missing"))).is_error
    True
    """

    __slots__ = ("_definitions", "_interceptors", "_tools")

    def __init__(self, tools: Iterable[Tool], interceptors: Iterable[Interceptor] = ()) -> None:
        entries: dict[str, tuple[Tool, Definition]] = {}
        for tool in tools:
            definition = tool.definition
            if not isinstance(definition, Definition):
                raise ValueError("a tool's definition must be a Definition")
            if definition.name in entries:
                raise ValueError("two tools share one name")
            entries[definition.name] = (tool, definition)
        self._tools = entries
        self._definitions = tuple(entries[name][1] for name in sorted(entries))
        checked = tuple(interceptors)
        if not all(callable(interceptor) for interceptor in checked):
            raise ValueError("interceptors must be callables")
        self._interceptors: tuple[Interceptor, ...] = checked

    @property
    def definitions(self) -> Sequence[Definition]:
        """The snapshotted definitions, sorted by name."""
        return self._definitions

    async def dispatch(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Run ``call`` through the interceptors and its tool; check the answer."""
        if not isinstance(call, Call):
            raise TypeError("dispatch takes a Call")
        entry = self._tools.get(call.name)
        if entry is None:
            return _unknown_tool(call, [definition.name for definition in self._definitions])
        tool, definition = entry

        try:
            result = await _chain(
                self._interceptors, 0, call, _Target(call, definition, tool, reporter)
            )
        except ExecutionError as error:
            if error.call_id != call.id:
                raise _failure(call, definition, _WRONG_ANSWER) from None
            raise
        except Exception:  # noqa: BLE001 - a tool bug must not escape as raw text
            raise _failure(call, definition, _TOOL_FAILED) from None
        if not isinstance(result, Result) or result.call_id != call.id:
            raise _failure(call, definition, _WRONG_ANSWER)
        if not _within_payload(result.content):
            raise _failure(call, definition, _WRONG_ANSWER)
        return result


@final
class _Target:
    """What every link of one call's interceptor chain needs: the call and where it goes."""

    __slots__ = ("call", "definition", "reporter", "tool")

    def __init__(
        self, call: Call, definition: Definition, tool: Tool, reporter: Reporter | None
    ) -> None:
        self.call = call
        self.definition = definition
        self.tool = tool
        self.reporter = reporter


async def _chain(
    interceptors: tuple[Interceptor, ...], index: int, current: Call, target: _Target
) -> Result:
    """Run the interceptors from ``index`` on, then the tool.

    A module function rather than a closure that calls itself: such a closure is a
    reference cycle that would keep the call (and its arguments, up to the payload
    bound) alive after the call ends, until a garbage collection.
    """
    if index == len(interceptors):
        return await target.tool.execute(current, target.reporter)
    interceptor = interceptors[index]

    def proceed(next_call: Call | None = None, /) -> Awaitable[Result]:
        forwarded = current if next_call is None else next_call
        call = target.call
        if (
            not isinstance(forwarded, Call)
            or forwarded.id != call.id
            or forwarded.name != call.name
        ):
            raise _failure(call, target.definition, _INTERCEPTOR_CHANGED_CALL)
        return _chain(interceptors, index + 1, forwarded, target)

    return await interceptor(current, target.definition, proceed)


def _within_payload(content: object) -> bool:
    # A Result checks its own bound; this re-check guards against a forged one.
    # Four UTF-8 bytes per character at most, so short text needs no encoding.
    if not isinstance(content, str):
        return False
    if len(content) * 4 <= MAXIMUM_PAYLOAD_BYTES:
        return True
    if content.isascii():  # constant time: one byte per character
        return len(content) <= MAXIMUM_PAYLOAD_BYTES
    try:
        return len(content.encode("utf-8")) <= MAXIMUM_PAYLOAD_BYTES
    except UnicodeEncodeError:
        return False
