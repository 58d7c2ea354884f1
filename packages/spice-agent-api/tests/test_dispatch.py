"""Contract §3: the ``Dispatcher``: snapshot, unknown tools, interceptors, checks, cancel."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Awaitable, Callable

import pytest
from api_fakes import (
    FakeTool,
    RecordingReporter,
    ShiftingTool,
    mutating_definition,
    read_only_definition,
)

from spice.agent.dispatch import Dispatcher, Interceptor, Proceed
from spice.agent.tool import (
    MAXIMUM_PAYLOAD_BYTES,
    Call,
    Definition,
    ExecutionError,
    ExecutionState,
    Interruption,
    Reporter,
    Result,
    RetryDisposition,
    interruption_of,
)

UNCERTAIN_NEVER = (ExecutionState.UNCERTAIN, RetryDisposition.NEVER)
DEFINITIVE_ALLOWED = (ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED)


def answering(
    result: Callable[[Call], object],
) -> Callable[[Call, Reporter | None], Awaitable[Result]]:
    """A tool behaviour that returns whatever ``result`` builds (even a wrong answer)."""

    async def behaviour(call: Call, _reporter: Reporter | None) -> Result:
        return result(call)  # type: ignore[return-value]

    return behaviour


def raising(error: BaseException) -> Callable[[Call, Reporter | None], Awaitable[Result]]:
    """A tool behaviour that raises ``error``."""

    async def behaviour(_call: Call, _reporter: Reporter | None) -> Result:
        raise error

    return behaviour


def forged_result(call_id: str, content: object) -> Result:
    """A Result whose content was replaced after validation (a fault no real tool can make)."""
    result = Result(call_id, "{}")
    object.__setattr__(result, "content", content)
    return result


# --- construction ---------------------------------------------------------------------------


def test_definitions_are_sorted_by_name() -> None:
    """The snapshot lists definitions by name, whatever order the tools came in."""
    names = ["shell", "read", "replace"]
    dispatcher = Dispatcher(FakeTool(read_only_definition(n)) for n in names)
    assert ["read", "replace", "shell"] == [d.name for d in dispatcher.definitions]


def test_definitions_are_snapshotted_at_construction() -> None:
    """A tool whose definition changes later is still dispatched under the first one."""
    tool = ShiftingTool(read_only_definition("first"), read_only_definition("later"))
    dispatcher = Dispatcher([tool])
    assert 1 == tool.reads
    assert ("first",) == tuple(d.name for d in dispatcher.definitions)
    assert isinstance(dispatcher.definitions, tuple)


async def test_the_dispatcher_is_usable_after_its_tool_iterable_is_exhausted() -> None:
    """Tools given as a one-shot generator are read once and kept."""
    dispatcher = Dispatcher(FakeTool(read_only_definition(n)) for n in ["a", "b"])
    assert '{"x":1}' == (await dispatcher.dispatch(Call("1", "b", '{"x":1}'))).content


def test_two_tools_with_one_name_are_rejected() -> None:
    """Duplicate tool names are a ValueError at construction."""
    tools = [FakeTool(read_only_definition("read")), FakeTool(mutating_definition("read"))]
    with pytest.raises(ValueError, match="two tools share one name"):
        Dispatcher(tools)


def test_a_tool_without_a_real_definition_is_rejected() -> None:
    """A tool whose definition is not a ``Definition`` is rejected."""
    tool = FakeTool(read_only_definition())
    tool._definition = {"name": "x"}  # type: ignore[assignment]
    with pytest.raises(ValueError, match="must be a Definition"):
        Dispatcher([tool])


def test_an_interceptor_that_is_not_callable_is_rejected() -> None:
    """Interceptors must be callables."""
    with pytest.raises(ValueError, match="interceptors must be callables"):
        Dispatcher([], ["not callable"])  # type: ignore[list-item]


def test_an_empty_dispatcher_has_no_definitions() -> None:
    """No tools, no definitions."""
    assert () == tuple(Dispatcher([]).definitions)


# --- dispatch -------------------------------------------------------------------------------


async def test_a_call_reaches_its_tool_with_the_reporter() -> None:
    """The named tool gets the call and the caller's reporter; the answer is returned."""
    tool = FakeTool(read_only_definition("echo"))
    other = FakeTool(read_only_definition("other"))
    reporter = RecordingReporter()
    call = Call("1", "echo", '{"a":1}')
    result = await Dispatcher([tool, other]).dispatch(call, reporter)
    assert Result("1", '{"a":1}') == result
    assert [call] == tool.calls
    assert [reporter] == tool.reporters
    assert [] == other.calls


async def test_an_unknown_tool_is_a_model_visible_failure() -> None:
    """An unknown name is an ``unknown_tool`` result; no tool and no interceptor runs."""
    tool = FakeTool(read_only_definition("read"))
    seen: list[Call] = []

    async def audit(call: Call, _definition: Definition, proceed: Proceed) -> Result:
        seen.append(call)
        return await proceed()

    result = await Dispatcher([tool], [audit]).dispatch(Call("9", "reed"))
    content = json.loads(result.content)
    assert "9" == result.call_id
    assert result.is_error
    assert {"ok": False, "code": "unknown_tool"} == {k: content[k] for k in ("ok", "code")}
    assert result.problem == content["message"]
    assert "no tool named 'reed' is available; the tools are: read" == content["message"]
    assert [] == tool.calls
    assert [] == seen


async def test_an_unknown_tool_s_name_is_shown_cut_and_printable() -> None:
    """Contract 11.3: the name is model input: at most 64 characters, format characters
    (here a right-to-left override) as ``?``; with no tools, it says so."""
    name = "x" * 100 + "\u202e"
    result = await Dispatcher([]).dispatch(Call("1", "a\u202eb"))
    assert "no tool named 'a?b' is available; there are no tools" == result.problem
    result = await Dispatcher([]).dispatch(Call("1", name))
    assert f"no tool named '{'x' * 64}'... is available; there are no tools" == result.problem


async def test_the_listed_tools_are_bounded() -> None:
    """A dispatcher of many tools lists about a kilobyte of names and counts the rest."""
    tools = [FakeTool(read_only_definition(f"tool_{n:03d}_{'y' * 40}")) for n in range(100)]
    result = await Dispatcher(tools).dispatch(Call("1", "missing"))
    problem = str(result.problem)
    assert problem.endswith(" more")
    assert "tool_000_" in problem
    assert "tool_099_" not in problem
    assert 1024 < len(problem) < 1300


async def test_dispatch_takes_only_a_call() -> None:
    """Anything but a ``Call`` is a TypeError before any tool runs."""
    with pytest.raises(TypeError, match="dispatch takes a Call"):
        await Dispatcher([]).dispatch({"id": "1"})  # type: ignore[arg-type]


# --- interceptors ---------------------------------------------------------------------------


def recorder(label: str, log: list[str]) -> Interceptor:
    """An interceptor that logs before and after passing the call on."""

    async def interceptor(call: Call, definition: Definition, proceed: Proceed) -> Result:
        log.append(f"{label}:before:{call.id}:{definition.name}")
        result = await proceed()
        log.append(f"{label}:after")
        return result

    return interceptor


async def test_interceptors_run_in_order_around_the_tool() -> None:
    """The first interceptor is outermost; the tool runs in the middle."""
    log: list[str] = []

    async def tool_body(call: Call, _reporter: Reporter | None) -> Result:
        log.append("tool")
        return Result(call.id, {})

    dispatcher = Dispatcher(
        [FakeTool(read_only_definition("t"), tool_body)],
        [recorder("a", log), recorder("b", log), recorder("c", log)],
    )
    await dispatcher.dispatch(Call("1", "t"))
    assert [
        "a:before:1:t",
        "b:before:1:t",
        "c:before:1:t",
        "tool",
        "c:after",
        "b:after",
        "a:after",
    ] == log


async def test_an_interceptor_can_deny_with_its_own_result() -> None:
    """A denying interceptor's result is returned; later interceptors and the tool never run."""
    log: list[str] = []
    tool = FakeTool(mutating_definition("write"))

    async def deny(call: Call, _definition: Definition, _proceed: Proceed) -> Result:
        return Result(call.id, {"ok": False, "code": "denied"}, "not permitted")

    result = await Dispatcher([tool], [deny, recorder("later", log)]).dispatch(Call("1", "write"))
    assert Result("1", {"ok": False, "code": "denied"}, "not permitted") == result
    assert [] == tool.calls
    assert [] == log


async def test_an_interceptor_may_rewrite_the_arguments() -> None:
    """``proceed(call)`` with new arguments, same id and name, reaches the tool."""
    tool = FakeTool(read_only_definition("echo"))

    async def rewrite(call: Call, _definition: Definition, proceed: Proceed) -> Result:
        return await proceed(Call(call.id, call.name, '{"rewritten":true}'))

    seen: list[str] = []

    async def after(call: Call, _definition: Definition, proceed: Proceed) -> Result:
        seen.append(call.arguments)
        return await proceed()

    result = await Dispatcher([tool], [rewrite, after]).dispatch(Call("1", "echo", "{}"))
    assert '{"rewritten":true}' == result.content
    assert ['{"rewritten":true}'] == seen
    assert [Call("1", "echo", '{"rewritten":true}')] == tool.calls


@pytest.mark.parametrize(
    ("definition", "expected"),
    [(mutating_definition("t"), UNCERTAIN_NEVER), (read_only_definition("t"), DEFINITIVE_ALLOWED)],
)
@pytest.mark.parametrize("changed", [Call("2", "t"), Call("1", "other"), {"id": "1", "name": "t"}])
async def test_an_interceptor_may_not_change_the_call_id_or_name(
    definition: Definition, expected: tuple[ExecutionState, RetryDisposition], changed: object
) -> None:
    """Another id, another name or a non-Call passed on is an ExecutionError; no tool runs."""
    tool = FakeTool(definition)

    async def hijack(_call: Call, _definition: Definition, proceed: Proceed) -> Result:
        return await proceed(changed)  # type: ignore[arg-type]

    with pytest.raises(ExecutionError) as caught:
        await Dispatcher([tool], [hijack]).dispatch(Call("1", "t"))
    assert "1" == caught.value.call_id
    assert expected == (caught.value.state, caught.value.retry)
    assert [] == tool.calls


async def test_an_interceptor_that_raises_is_mapped_to_an_execution_error() -> None:
    """An interceptor bug becomes a fixed ExecutionError without its text."""

    async def broken(_call: Call, _definition: Definition, _proceed: Proceed) -> Result:
        raise KeyError("policy-secret")

    with pytest.raises(ExecutionError) as caught:
        await Dispatcher([FakeTool(read_only_definition("t"))], [broken]).dispatch(Call("1", "t"))
    assert "policy-secret" not in repr(caught.value)
    assert caught.value.__cause__ is None


async def test_an_interceptor_answer_for_another_call_is_rejected() -> None:
    """The dispatcher checks the interceptors' answer just like the tool's."""

    async def wrong(_call: Call, _definition: Definition, _proceed: Proceed) -> Result:
        return Result("other", {})

    dispatcher = Dispatcher([FakeTool(mutating_definition("t"))], [wrong])
    with pytest.raises(ExecutionError) as caught:
        await dispatcher.dispatch(Call("1", "t"))
    assert ("1", *UNCERTAIN_NEVER) == (caught.value.call_id, caught.value.state, caught.value.retry)


# --- answer checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "expected"),
    [(mutating_definition("t"), UNCERTAIN_NEVER), (read_only_definition("t"), DEFINITIVE_ALLOWED)],
)
@pytest.mark.parametrize(
    "answer",
    [
        lambda call: Result("foreign", {}),
        lambda call: {"ok": True},
        lambda call: None,
        lambda call: forged_result(call.id, '{"k":"' + "a" * MAXIMUM_PAYLOAD_BYTES + '"}'),
        lambda call: forged_result(call.id, '{"k":"' + "€" * (MAXIMUM_PAYLOAD_BYTES // 3) + '"}'),
        lambda call: forged_result(
            call.id, '{"k":"' + "\ud800" * (MAXIMUM_PAYLOAD_BYTES // 3) + '"}'
        ),
        lambda call: forged_result(call.id, b"{}"),
    ],
    ids=[
        "foreign-id",
        "mapping",
        "none",
        "oversized",
        "oversized-multibyte",
        "surrogates",
        "bytes",
    ],
)
async def test_a_wrong_answer_is_an_execution_error_by_effect(
    definition: Definition,
    expected: tuple[ExecutionState, RetryDisposition],
    answer: Callable[[Call], object],
) -> None:
    """Foreign ids, non-Results and results past the payload bound raise, by the tool's effect."""
    dispatcher = Dispatcher([FakeTool(definition, answering(answer))])
    with pytest.raises(ExecutionError) as caught:
        await dispatcher.dispatch(Call("1", "t"))
    assert "1" == caught.value.call_id
    assert expected == (caught.value.state, caught.value.retry)


async def test_an_answer_exactly_at_the_payload_bound_is_passed_on() -> None:
    """A result of exactly 1 MiB of multi-byte text passes the dispatcher's own check."""
    body = "€" * ((MAXIMUM_PAYLOAD_BYTES - 8) // 3)
    content = '{"k":"' + body + "a" * (MAXIMUM_PAYLOAD_BYTES - 8 - 3 * len(body)) + '"}'
    assert MAXIMUM_PAYLOAD_BYTES == len(content.encode())
    dispatcher = Dispatcher(
        [FakeTool(read_only_definition("t"), answering(lambda c: Result(c.id, content)))]
    )
    assert content == (await dispatcher.dispatch(Call("1", "t"))).content


async def test_an_ascii_answer_exactly_at_the_payload_bound_is_passed_on() -> None:
    """A result of exactly 1 MiB of ASCII passes; its size is its length (no encoding)."""
    content = '{"k":"' + "a" * (MAXIMUM_PAYLOAD_BYTES - 8) + '"}'
    assert MAXIMUM_PAYLOAD_BYTES == len(content.encode())
    dispatcher = Dispatcher(
        [FakeTool(read_only_definition("t"), answering(lambda c: Result(c.id, content)))]
    )
    assert content == (await dispatcher.dispatch(Call("1", "t"))).content


async def test_a_model_visible_failure_is_passed_on_unchanged() -> None:
    """A tool's failure result is the caller's answer, not an exception."""
    failure = Result("1", {"ok": False, "code": "not_found"}, "no such file")
    dispatcher = Dispatcher([FakeTool(read_only_definition("t"), answering(lambda _c: failure))])
    assert failure is await dispatcher.dispatch(Call("1", "t"))


@pytest.mark.parametrize(
    ("definition", "expected"),
    [(mutating_definition("t"), UNCERTAIN_NEVER), (read_only_definition("t"), DEFINITIVE_ALLOWED)],
)
@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("secret /home/user/file"),
        OSError(13, "secret denied"),
        ExceptionGroup("secret", [ValueError("secret")]),
    ],
)
async def test_an_unexpected_tool_exception_is_mapped_without_its_text(
    definition: Definition, expected: tuple[ExecutionState, RetryDisposition], error: Exception
) -> None:
    """Any other exception becomes a fixed ExecutionError raised from None."""
    with pytest.raises(ExecutionError) as caught:
        await Dispatcher([FakeTool(definition, raising(error))]).dispatch(Call("1", "t"))
    assert "secret" not in str(caught.value)
    assert "secret" not in repr(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert ("1", *expected) == (caught.value.call_id, caught.value.state, caught.value.retry)


async def test_an_execution_error_of_the_call_passes_unchanged() -> None:
    """The tool's own ExecutionError for this call reaches the caller as the same object."""
    error = ExecutionError("1", ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED, "reporter")
    with pytest.raises(ExecutionError) as caught:
        await Dispatcher([FakeTool(mutating_definition("t"), raising(error))]).dispatch(
            Call("1", "t")
        )
    assert error is caught.value


async def test_an_execution_error_of_another_call_is_remapped() -> None:
    """An ExecutionError with a foreign call id becomes one for this call, by effect."""
    error = ExecutionError("other", ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED, "x")
    with pytest.raises(ExecutionError) as caught:
        await Dispatcher([FakeTool(mutating_definition("t"), raising(error))]).dispatch(
            Call("1", "t")
        )
    assert ("1", *UNCERTAIN_NEVER) == (caught.value.call_id, caught.value.state, caught.value.retry)
    assert caught.value.__cause__ is None


# --- cancellation ---------------------------------------------------------------------------


async def test_cancelling_a_dispatched_call_propagates_the_same_cancelled_error() -> None:
    """Mid-flight cancellation reaches the tool, passes every layer unchanged, keeps the record."""
    started = asyncio.Event()
    never = asyncio.Event()
    from_tool: list[BaseException] = []
    seen_by_interceptor: list[BaseException] = []
    record = Interruption("1", ExecutionState.UNCERTAIN, RetryDisposition.NEVER)

    async def tool_body(_call: Call, _reporter: Reporter | None) -> Result:
        try:
            started.set()
            await never.wait()
        except asyncio.CancelledError as exc:
            exc.interruption = record  # type: ignore[attr-defined]
            from_tool.append(exc)
            raise
        raise AssertionError("unreachable")

    async def watch(_call: Call, _definition: Definition, proceed: Proceed) -> Result:
        try:
            return await proceed()
        except BaseException as exc:
            seen_by_interceptor.append(exc)
            raise

    dispatcher = Dispatcher([FakeTool(mutating_definition("t"), tool_body)], [watch])
    task = asyncio.create_task(dispatcher.dispatch(Call("1", "t")))
    async with asyncio.timeout(5):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(5):
            await task
    assert task.cancelled()
    assert 1 == len(from_tool)
    assert from_tool == seen_by_interceptor
    assert from_tool[0] is caught.value or from_tool[0] is caught.value.__context__
    assert not isinstance(caught.value, ExecutionError)
    assert record is interruption_of(caught.value)


async def test_a_cancelled_error_raised_by_a_tool_is_never_converted() -> None:
    """A CancelledError from the tool (even with no cancellation requested) passes through as is."""
    error = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError) as caught:
        await Dispatcher([FakeTool(mutating_definition("t"), raising(error))]).dispatch(
            Call("1", "t")
        )
    assert error is caught.value


async def test_a_timeout_around_dispatch_still_works() -> None:
    """asyncio.timeout around a dispatched call turns the cancellation into TimeoutError."""
    never = asyncio.Event()

    async def tool_body(call: Call, _reporter: Reporter | None) -> Result:
        await never.wait()
        return Result(call.id, {})

    dispatcher = Dispatcher([FakeTool(read_only_definition("t"), tool_body)])
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await dispatcher.dispatch(Call("1", "t"))


@pytest.mark.parametrize("interceptors", [0, 2])
async def test_a_finished_dispatch_leaves_no_reference_cycle_holding_the_call(
    interceptors: int,
) -> None:
    """With and without interceptors, a call leaves no cyclic garbage: it is freed as it ends."""
    log: list[str] = []
    dispatcher = Dispatcher(
        [FakeTool(read_only_definition("t"), answering(lambda call: Result(call.id, {})))],
        [recorder(str(n), log) for n in range(interceptors)],
    )
    gc.collect()
    gc.disable()
    try:
        await dispatcher.dispatch(Call("1", "t", '{"big":"' + "x" * 1024 + '"}'))
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert 0 == unreachable
    assert 2 * interceptors == len(log)
