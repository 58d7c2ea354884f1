"""The shell tool with typed fakes of the platform: lookup, spec, outcomes, ownership."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from fakes import (
    SHELL_FIELDS,
    FakeLauncher,
    FakeProcess,
    FakeResolver,
    RecordingReporter,
    content_of,
    partial_start,
    shell_call,
)

from spice.agent.process import (
    ExecutableNotFound,
    LaunchError,
    Operation,
    Outcome,
    ProcessFailure,
)
from spice.agent.tool import (
    Capability,
    Effect,
    ExecutionError,
    ExecutionState,
    Interruption,
    ReplaySafety,
    Result,
    RetryDisposition,
    Tool,
    interruption_of,
)
from spice.agent.tools.coding import Config, new_shell
from spice.agent.tools.coding._ownership import (
    MAXIMUM_PROCESSES,
    CleanupIncomplete,
    Owner,
    Timing,
)
from spice.agent.tools.coding._results import ANSWER_ROOM, answer_bytes
from spice.agent.tools.coding._shell import build_shell

FAST = Timing(join_seconds=5.0, backoff_seconds=0.0, backoff_limit_seconds=0.0, join_attempts=3)
GRACE = 0.01
PATIENCE = 30
"""Hang guard (seconds) for waits that end at once on a working implementation."""
NEVER = RetryDisposition.NEVER

SUCCESS_KEYS = {"ok", *SHELL_FIELDS}


def make(
    root: Path,
    resolver: FakeResolver | None = None,
    launcher: FakeLauncher | None = None,
    *,
    posix: bool = True,
    **config: object,
) -> tuple[Tool, Owner]:
    """A shell over ``root`` with short bounds."""
    return build_shell(
        Config(root, **config),  # type: ignore[arg-type]
        resolver or FakeResolver(),
        launcher or FakeLauncher(),
        timing=FAST,
        grace_seconds=GRACE,
        posix=posix,
    )


def lingering() -> FakeProcess:
    """A process that runs until it is stopped."""
    return FakeProcess(exit_now=False)


def stubborn() -> FakeProcess:
    """A process that runs until it is killed (it ignores the stop request)."""
    return FakeProcess(exit_now=False, obeys_stop=False)


async def wait_for_flag(event: asyncio.Event) -> None:
    """Wait for ``event``, bounded by ``PATIENCE``."""
    async with asyncio.timeout(PATIENCE):
        await event.wait()


# -- definition and construction ---------------------------------------------------------


def test_definition_is_mutating_unsafe_with_every_capability(tmp_path: Path) -> None:
    """The definition declares the shell honestly."""
    tool, _ = make(tmp_path, command_timeout=30)
    definition = tool.definition
    assert "shell" == definition.name
    assert Effect.MUTATING == definition.effect
    assert ReplaySafety.UNSAFE == definition.replay_safety
    assert tuple(sorted(Capability)) == definition.capabilities
    assert "never through a command shell" in definition.description


def test_schema_states_every_bound(tmp_path: Path) -> None:
    """The input schema carries the argv bounds and the configured timeout as its maximum."""
    tool, _ = make(tmp_path, command_timeout=30)
    schema = json.loads(tool.definition.input_schema)
    assert ["argv"] == schema["required"]
    assert schema["additionalProperties"] is False
    assert {"argv", "workdir", "timeout_seconds", "dry_run"} == set(schema["properties"])
    argv = schema["properties"]["argv"]
    assert (1, 128) == (argv["minItems"], argv["maxItems"])
    assert {"type": "string"} == argv["items"]
    timeout = schema["properties"]["timeout_seconds"]
    assert (0, 30.0) == (timeout["exclusiveMinimum"], timeout["maximum"])


async def test_construction_performs_no_process_action(tmp_path: Path) -> None:
    """``new_shell`` resolves and launches nothing and its Cleanup has nothing to do."""
    resolver, launcher = FakeResolver(), FakeLauncher()
    tool, cleanup = new_shell(Config(tmp_path / "missing"), resolver, launcher)
    async with asyncio.timeout(PATIENCE):
        await cleanup()
    assert ([], []) == (resolver.lookups, launcher.specs)
    assert "shell" == tool.definition.name


# -- lookup and spec ---------------------------------------------------------------------


async def test_lookup_and_spec_are_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolver gets argv[0], the absolute workdir and only allow-listed variables."""
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("LANG", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-planted")
    resolver, launcher = FakeResolver("/usr/bin/printf"), FakeLauncher()
    tool, _ = make(tmp_path, resolver, launcher)
    arguments = {"argv": ["printf", "$(id)", "a;b", "*", "-n"], "workdir": "sub/./dir"}
    result = await tool.execute(shell_call(arguments))
    assert not result.is_error
    workdir = str(tmp_path / "sub" / "dir")
    environment = ("HOME=/home/someone", "PATH=/usr/bin:/bin")
    [lookup] = resolver.lookups
    assert ("printf", workdir, environment) == (
        lookup.requested_executable,
        lookup.working_directory,
        lookup.environment,
    )
    [spec] = launcher.specs
    assert "/usr/bin/printf" == spec.executable
    assert ("$(id)", "a;b", "*", "-n") == spec.arguments
    assert (workdir, environment, b"") == (spec.working_directory, spec.environment, spec.stdin)
    assert tuple(sorted(Capability)) == spec.capabilities
    assert "sub/dir" == content_of(result)["workdir"]


async def test_environment_allowlist_is_the_configured_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable reaches the child only when the configuration allows its name."""
    monkeypatch.setenv("SPICE_ALLOWED", "yes")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    resolver, launcher = FakeResolver(), FakeLauncher()
    tool, _ = make(tmp_path, resolver, launcher, environment_allowlist=["SPICE_ALLOWED"])
    await tool.execute(shell_call({"argv": ["true"]}))
    assert ("SPICE_ALLOWED=yes",) == launcher.specs[0].environment


async def test_even_an_invalid_call_reports_progress_once(tmp_path: Path) -> None:
    """The progress message comes first, before any check."""
    reporter = RecordingReporter()
    tool, _ = make(tmp_path)
    result = await tool.execute(shell_call({"argv": []}), reporter)
    assert ("invalid_arguments", 1) == (content_of(result)["code"], len(reporter.messages))


async def test_progress_is_reported_once_before_resolving(tmp_path: Path) -> None:
    """Exactly one progress message, with no argv in it."""
    reporter = RecordingReporter()
    tool, _ = make(tmp_path)
    await tool.execute(shell_call({"argv": ["true", "secret-arg"]}), reporter)
    assert 1 == len(reporter.messages)
    assert "secret-arg" not in reporter.messages[0].message


# -- outcomes ------------------------------------------------------------------------------


async def test_exit_zero_is_success_with_exact_content(tmp_path: Path) -> None:
    """A clean exit answers with every success field."""
    process = FakeProcess(stdout=[b"hello\n"], stderr=[b"warn\n"])
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    result = await tool.execute(shell_call({"argv": ["true"]}))
    expected = {
        "ok": True,
        "workdir": ".",
        "exit_code": 0,
        "stdout": "hello\n",
        "stderr": "warn\n",
        "encoding": "utf-8",
        "stdout_bytes": 6,
        "stderr_bytes": 5,
        "output_truncated": False,
        "timed_out": False,
        "managed_cleanup_completed": True,
        "stdout_omitted_bytes": 0,
        "stderr_omitted_bytes": 0,
        "stdout_omitted_at": None,
        "stderr_omitted_at": None,
        "contained": False,
    }
    assert expected == content_of(result)
    assert result.problem is None
    assert (1, 0) == (process.wait_calls, owner.owned)


@pytest.mark.parametrize(
    ("outcome", "exit_code"),
    [
        (Outcome.exited(1), 1),
        (Outcome.exited(2**32 - 1), 2**32 - 1),
        (Outcome.signaled(), -1),
        (Outcome.unknown(), -1),
    ],
)
async def test_unsuccessful_outcomes_are_command_failed_with_output(
    tmp_path: Path, outcome: Outcome, exit_code: int
) -> None:
    """Non-zero exits, signals and unknown outcomes keep the whole content and add a code."""
    process = FakeProcess(outcome=outcome, stdout=[b"out"], stderr=[b"err"])
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process))
    result = await tool.execute(shell_call({"argv": ["false"]}))
    content = content_of(result)
    assert result.is_error
    assert SUCCESS_KEYS | {"code", "message"} == set(content)
    assert (False, "command_failed", exit_code) == (
        content["ok"],
        content["code"],
        content["exit_code"],
    )
    assert ("out", "err") == (content["stdout"], content["stderr"])
    assert result.problem == content["message"]


async def test_an_outcome_the_platform_cannot_give_is_unknown(tmp_path: Path) -> None:
    """``result()`` failing after a good join is an unknown outcome, not a crash."""
    process = FakeProcess(result_failure=True)
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process))
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert ("command_failed", -1) == (content["code"], content["exit_code"])


async def test_a_failing_exit_wait_stops_joins_and_reports(tmp_path: Path) -> None:
    """When waiting for the exit fails, the process is stopped and joined all the same."""
    process = FakeProcess(exit_now=False, exit_failure=ProcessFailure(Operation.WAIT))
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert "command_failed" == content["code"]
    assert (1, 1, 0) == (process.stop_calls, process.wait_calls, owner.owned)


async def test_per_call_timeout_stops_and_joins(tmp_path: Path) -> None:
    """A per-call timeout asks the process to stop, then joins it: ``timed_out``."""
    process = lingering()
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    result = await tool.execute(shell_call({"argv": ["sleep"], "timeout_seconds": 0.01}))
    content = content_of(result)
    assert ("timed_out", True, -1) == (content["code"], content["timed_out"], content["exit_code"])
    assert (1, 0, 1, 0) == (process.stop_calls, process.kill_calls, process.wait_calls, owner.owned)


async def test_configured_timeout_applies_without_a_per_call_one(tmp_path: Path) -> None:
    """The configured command timeout bounds a call that sets none."""
    process = lingering()
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process), command_timeout=0.01)
    content = content_of(await tool.execute(shell_call({"argv": ["sleep"]})))
    assert "timed_out" == content["code"]


async def test_a_process_that_ignores_stop_is_killed_after_the_grace(tmp_path: Path) -> None:
    """Stop, grace, then force: each exactly once, then the join."""
    process = stubborn()
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    content = content_of(
        await tool.execute(shell_call({"argv": ["sleep"], "timeout_seconds": 0.01}))
    )
    assert "timed_out" == content["code"]
    assert content["managed_cleanup_completed"] is True
    assert (1, 1, 1, 0) == (process.stop_calls, process.kill_calls, process.wait_calls, owner.owned)


async def test_a_failing_stop_request_is_reported_as_incomplete_cleanup(tmp_path: Path) -> None:
    """A stop request that fails still ends in force and join; the result says so."""
    process = FakeProcess(exit_now=False, stop_failure=ProcessFailure(Operation.REQUEST_STOP))
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    content = content_of(
        await tool.execute(shell_call({"argv": ["sleep"], "timeout_seconds": 0.01}))
    )
    assert ("timed_out", False) == (content["code"], content["managed_cleanup_completed"])
    assert (1, 1, 0) == (process.kill_calls, process.wait_calls, owner.owned)


async def test_an_exit_wait_raising_cancelled_by_itself_is_not_a_cancellation(
    tmp_path: Path,
) -> None:
    """The platform's own CancelledError (no caller cancellation) is an unknown exit."""
    process = FakeProcess(exit_now=False, exit_failure=asyncio.CancelledError())
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process))
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert ("command_failed", 1) == (content["code"], process.wait_calls)


async def test_a_join_that_hangs_past_its_bound_is_uncertain(tmp_path: Path) -> None:
    """A join is bounded; past the bound the call is uncertain and the process stays owned."""
    gate = asyncio.Event()
    process = FakeProcess(join_gate=gate)
    tool, owner = build_shell(
        Config(tmp_path),
        FakeResolver(),
        FakeLauncher(lambda: process),
        timing=Timing(join_seconds=0.01, backoff_seconds=0.0, join_attempts=1),
        grace_seconds=GRACE,
        posix=True,
    )
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["true"]}))
    assert (ExecutionState.UNCERTAIN, 1) == (caught.value.state, owner.owned)
    gate.set()
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (2, 0) == (process.wait_calls, owner.owned)


# -- resolver and launcher failures ------------------------------------------------------


async def test_executable_not_found_is_command_not_found(tmp_path: Path) -> None:
    """Nothing is launched when the resolver finds nothing."""
    launcher = FakeLauncher()
    tool, owner = make(tmp_path, FakeResolver(ExecutableNotFound()), launcher)
    result = await tool.execute(shell_call({"argv": ["nope"]}))
    assert "command_not_found" == content_of(result)["code"]
    assert ([], 0) == (launcher.specs, owner.reserved)


@pytest.mark.parametrize(
    "answer",
    [RuntimeError("resolver broke /secret/path"), "usr/bin/true", "/usr/../bin/true", "//bin/x"],
)
async def test_other_resolver_failures_are_definitive_host_failures(
    tmp_path: Path, answer: str | BaseException
) -> None:
    """A broken resolver or a relative/non-canonical answer: definitive, never, no launch."""
    launcher = FakeLauncher()
    tool, owner = make(tmp_path, FakeResolver(answer), launcher)
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["x"]}))
    assert (ExecutionState.DEFINITIVE, NEVER) == (caught.value.state, caught.value.retry)
    assert "secret" not in str(caught.value)
    assert caught.value.__cause__ is None
    assert ([], 0) == (launcher.specs, owner.reserved)


async def test_a_resolver_raising_cancelled_without_cancellation_is_a_host_failure(
    tmp_path: Path,
) -> None:
    """A resolver's own CancelledError is not the caller's cancellation."""
    tool, _ = make(tmp_path, FakeResolver(asyncio.CancelledError()))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["x"]}))
    assert ExecutionState.DEFINITIVE == caught.value.state


async def test_launch_error_without_process_is_launch_failed(tmp_path: Path) -> None:
    """A start that created nothing is model-visible and frees its slot."""
    launcher = FakeLauncher(failure=LaunchError())
    tool, owner = make(tmp_path, launcher=launcher)
    result = await tool.execute(shell_call({"argv": ["x"]}))
    assert "launch_failed" == content_of(result)["code"]
    assert (0, 0) == (owner.reserved, owner.owned)


async def test_a_partial_start_is_owned_stopped_and_joined(tmp_path: Path) -> None:
    """The process inside a LaunchError is the caller's: stopped and joined before answering."""
    partial = lingering()
    tool, owner = make(tmp_path, launcher=FakeLauncher(failure=partial_start(partial)))
    result = await tool.execute(shell_call({"argv": ["x"]}))
    content = content_of(result)
    expected = ("launch_failed", "the command may have started; it was stopped")
    assert expected == (content["code"], content["message"])
    assert (1, 1, 0, 0) == (partial.stop_calls, partial.wait_calls, owner.owned, owner.reserved)


async def test_a_partial_start_whose_join_fails_is_uncertain_and_stays_owned(
    tmp_path: Path,
) -> None:
    """If the partial process cannot be joined, the call is uncertain and Cleanup retries."""
    partial = FakeProcess(joins=[ProcessFailure(Operation.WAIT)])
    tool, owner = make(tmp_path, launcher=FakeLauncher(failure=partial_start(partial)))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["x"]}))
    assert (ExecutionState.UNCERTAIN, NEVER) == (caught.value.state, caught.value.retry)
    assert 1 == owner.owned
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (2, 0) == (partial.wait_calls, owner.owned)


async def test_a_launcher_breaking_its_contract_is_uncertain(tmp_path: Path) -> None:
    """An exception other than LaunchError may hide a process: uncertain, never."""
    tool, owner = make(tmp_path, launcher=FakeLauncher(failure=OSError("fork failed")))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["x"]}))
    assert (ExecutionState.UNCERTAIN, NEVER) == (caught.value.state, caught.value.retry)
    assert 0 == owner.reserved


async def test_a_launcher_raising_cancelled_by_itself_is_uncertain(tmp_path: Path) -> None:
    """The launcher's own CancelledError (no caller cancellation) is a host failure."""
    tool, _ = make(tmp_path, launcher=FakeLauncher(failure=asyncio.CancelledError()))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["x"]}))
    assert (ExecutionState.UNCERTAIN, NEVER) == (caught.value.state, caught.value.retry)


# -- joins and Cleanup -----------------------------------------------------------------------


async def test_a_retryable_join_failure_is_uncertain_then_cleanup_retries(tmp_path: Path) -> None:
    """The call fails uncertain; the process stays owned until Cleanup's join succeeds."""
    process = FakeProcess(joins=[ProcessFailure(Operation.WAIT), ProcessFailure(Operation.WAIT)])
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["true"]}))
    assert (ExecutionState.UNCERTAIN, NEVER) == (caught.value.state, caught.value.retry)
    assert (1, 1) == (owner.owned, owner.reserved)
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (3, True, 0, 0) == (process.wait_calls, process.joined, owner.owned, owner.reserved)


async def test_a_terminal_join_is_remembered_and_cleanup_raises_every_time(
    tmp_path: Path,
) -> None:
    """A terminal join failure is never retried; Cleanup raises each time; still owned."""
    process = FakeProcess(joins=[ProcessFailure(Operation.WAIT, retryable=False)])
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    with pytest.raises(ExecutionError):
        await tool.execute(shell_call({"argv": ["true"]}))
    for _ in range(3):
        with pytest.raises(CleanupIncomplete) as caught:
            async with asyncio.timeout(PATIENCE):
                await owner.cleanup()
        assert "process" in str(caught.value)
    assert (1, 1) == (process.wait_calls, owner.owned)


async def test_cleanup_gives_up_after_bounded_attempts_and_tries_again_later(
    tmp_path: Path,
) -> None:
    """Retryable failures beyond the attempts make Cleanup raise; a later Cleanup retries."""
    failures = [ProcessFailure(Operation.WAIT) for _ in range(1 + FAST.join_attempts)]
    process = FakeProcess(joins=failures)
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    with pytest.raises(ExecutionError):
        await tool.execute(shell_call({"argv": ["true"]}))
    with pytest.raises(CleanupIncomplete):
        async with asyncio.timeout(PATIENCE):
            await owner.cleanup()
    assert 1 + FAST.join_attempts == process.wait_calls
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert 0 == owner.owned


async def test_cleanup_is_idempotent_and_safe_concurrently(tmp_path: Path) -> None:
    """Concurrent and repeated Cleanups all return once everything is released."""
    process = FakeProcess(joins=[ProcessFailure(Operation.WAIT)])
    tool, cleanup = new_shell(Config(tmp_path), FakeResolver(), FakeLauncher(lambda: process))
    with pytest.raises(ExecutionError):
        await tool.execute(shell_call({"argv": ["true"]}))
    async with asyncio.timeout(PATIENCE):
        await asyncio.gather(cleanup(), cleanup(), cleanup())
        await cleanup()
    assert (2, True) == (process.wait_calls, process.joined)


async def test_after_cleanup_new_calls_get_shell_closing(tmp_path: Path) -> None:
    """Cleanup closes admission for good; nothing is resolved for a refused call."""
    resolver = FakeResolver()
    tool, cleanup = new_shell(Config(tmp_path), resolver, FakeLauncher())
    async with asyncio.timeout(PATIENCE):
        await cleanup()
    result = await tool.execute(shell_call({"argv": ["true"]}))
    assert "shell_closing" == content_of(result)["code"]
    assert [] == resolver.lookups


async def test_cleanup_waits_for_a_running_call(tmp_path: Path) -> None:
    """Cleanup overlapping a running call: admission closes, Cleanup waits, both finish."""
    process = lingering()
    launcher = FakeLauncher(lambda: process)
    tool, owner = make(tmp_path, launcher=launcher)
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["sleep"]})))
    await wait_for_flag(process.waiting_exit)
    cleaning = asyncio.create_task(owner.cleanup())
    await asyncio.sleep(0)  # one turn of the loop: the Cleanup task takes its first step
    assert owner.closing
    refused = await tool.execute(shell_call({"argv": ["true"]}))
    assert "shell_closing" == content_of(refused)["code"]
    assert not cleaning.done()
    process.exit_with(Outcome.exited(0))
    async with asyncio.timeout(PATIENCE):
        result = await running
        await cleaning
    assert content_of(result)["ok"] is True
    assert (1, 0) == (len(launcher.specs), owner.owned)


async def test_the_129th_concurrent_call_gets_process_limit(tmp_path: Path) -> None:
    """128 running processes fill the slots; one more is refused; a freed slot admits again."""
    launcher = FakeLauncher(lingering)
    tool, owner = make(tmp_path, launcher=launcher)
    calls = [
        asyncio.create_task(tool.execute(shell_call({"argv": ["sleep"]})))
        for _ in range(MAXIMUM_PROCESSES)
    ]
    async with asyncio.timeout(PATIENCE):
        while len(launcher.started) < MAXIMUM_PROCESSES:
            await launcher.entered.wait()
            launcher.entered.clear()
        for process in launcher.started:
            await process.waiting_exit.wait()
    refused = await tool.execute(shell_call({"argv": ["true"]}))
    assert "process_limit" == content_of(refused)["code"]
    assert MAXIMUM_PROCESSES == len(launcher.specs)
    launcher.started[0].exit_with(Outcome.exited(0))
    async with asyncio.timeout(PATIENCE):
        finished, _ = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
    assert 1 == len(finished)
    admitted = asyncio.create_task(tool.execute(shell_call({"argv": ["sleep"]})))
    async with asyncio.timeout(PATIENCE):
        while len(launcher.started) <= MAXIMUM_PROCESSES:
            await launcher.entered.wait()
            launcher.entered.clear()
    for process in launcher.started:
        process.exit_with(Outcome.exited(0))
    async with asyncio.timeout(PATIENCE):
        results = await asyncio.gather(*calls, admitted)
        await owner.cleanup()
    assert all(content_of(result)["ok"] for result in results)
    assert (0, 0) == (owner.owned, owner.reserved)


# -- reporter, name, platform ------------------------------------------------------------


@pytest.mark.parametrize("failure", [RuntimeError("reporter text"), asyncio.CancelledError()])
async def test_a_failing_reporter_resolves_and_launches_nothing(
    tmp_path: Path, failure: BaseException
) -> None:
    """A reporter failure is definitive/never and happens before anything else."""
    resolver, launcher = FakeResolver(), FakeLauncher()
    tool, owner = make(tmp_path, resolver, launcher)
    with pytest.raises(ExecutionError) as caught:
        await tool.execute(shell_call({"argv": ["true"]}), RecordingReporter(failure))
    assert (ExecutionState.DEFINITIVE, NEVER) == (caught.value.state, caught.value.retry)
    assert "reporter text" not in str(caught.value)
    assert ([], [], 0) == (resolver.lookups, launcher.specs, owner.reserved)


async def test_a_call_for_another_tool_is_invalid_arguments(tmp_path: Path) -> None:
    """The tool answers only to its own name."""
    resolver = FakeResolver()
    tool, _ = make(tmp_path, resolver)
    result = await tool.execute(shell_call({"argv": ["true"]}, name="read"))
    assert "invalid_arguments" == content_of(result)["code"]
    assert [] == resolver.lookups


async def test_windows_answers_unsupported_platform(tmp_path: Path) -> None:
    """Where the platform is not POSIX, every call is refused clearly."""
    resolver = FakeResolver()
    tool, _ = make(tmp_path, resolver, posix=False)
    result = await tool.execute(shell_call({"argv": ["true"]}))
    assert "unsupported_platform" == content_of(result)["code"]
    assert [] == resolver.lookups


# -- cancellation ---------------------------------------------------------------------------


async def test_cancellation_after_start_stops_forces_and_joins_once(tmp_path: Path) -> None:
    """Cancelled while running: stop, force, join exactly once; uncertain/never attached."""
    process = stubborn()
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["sleep"]})))
    await wait_for_flag(process.waiting_exit)
    running.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(PATIENCE):
            await running
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.UNCERTAIN, NEVER, None) == (
        interruption.state,
        interruption.retry,
        interruption.result,
    )
    assert (1, 1, 1) == (process.stop_calls, process.kill_calls, process.wait_calls)
    assert (0, 0) == (owner.owned, owner.reserved)


async def test_cancellation_before_start_is_definitive(tmp_path: Path) -> None:
    """Cancelled while resolving: nothing launched, definitive/never, slot freed."""
    gate = asyncio.Event()
    resolver, launcher = FakeResolver(gate=gate), FakeLauncher()
    tool, owner = make(tmp_path, resolver, launcher)
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["true"]})))
    await wait_for_flag(resolver.entered)
    running.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(PATIENCE):
            await running
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, NEVER) == (interruption.state, interruption.retry)
    assert ([], 0) == (launcher.specs, owner.reserved)


async def _cancel_during_start(
    tmp_path: Path, launcher: FakeLauncher, gate: asyncio.Event, argv: list[str]
) -> tuple[Interruption, Owner]:
    """Cancel a call while ``launcher`` waits on ``gate``; its interruption and owner."""
    tool, owner = make(tmp_path, launcher=launcher)
    running = asyncio.create_task(tool.execute(shell_call({"argv": argv})))
    await wait_for_flag(launcher.entered)
    running.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(PATIENCE):
            await running
    interruption = interruption_of(caught.value)
    assert interruption is not None
    return interruption, owner


async def test_cancellation_during_a_start_that_succeeds_settles_the_process(
    tmp_path: Path,
) -> None:
    """Cancelled while the launcher starts: the process it returns is stopped and joined."""
    gate = asyncio.Event()
    launcher = FakeLauncher(lingering, gate=gate)
    interruption, owner = await _cancel_during_start(tmp_path, launcher, gate, ["sleep"])
    assert ExecutionState.UNCERTAIN == interruption.state
    [process] = launcher.started
    assert (1, 1, 0) == (process.stop_calls, process.wait_calls, owner.owned)


async def test_cancellation_during_a_start_that_fails_is_definitive(tmp_path: Path) -> None:
    """Cancelled while the launcher starts, and the start creates nothing: definitive."""
    gate = asyncio.Event()
    launcher = FakeLauncher(failure=LaunchError(), gate=gate)
    interruption, owner = await _cancel_during_start(tmp_path, launcher, gate, ["true"])
    assert ExecutionState.DEFINITIVE == interruption.state
    assert (0, 0) == (owner.owned, owner.reserved)


async def test_a_second_cancellation_does_not_abandon_the_stop(tmp_path: Path) -> None:
    """Cancelled twice: the stop and join still finish, tracked until Cleanup returns."""
    process = stubborn()
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["sleep"]})))
    await wait_for_flag(process.waiting_exit)
    running.cancel()
    await wait_for_flag(process.stop_requested)
    running.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(PATIENCE):
            await running
    assert interruption_of(caught.value) is not None
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (1, 1, 0) == (process.kill_calls, process.wait_calls, owner.owned)


async def test_cancellation_during_the_join_lets_the_join_finish(tmp_path: Path) -> None:
    """Cancelled while joining: the join is shielded, runs once, and the call is uncertain."""
    gate = asyncio.Event()
    process = FakeProcess(join_gate=gate)
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["true"]})))
    await wait_for_flag(process.join_entered)
    running.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(PATIENCE):
            await running
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.UNCERTAIN, NEVER) == (interruption.state, interruption.retry)
    assert (1, True, 0) == (process.wait_calls, process.joined, owner.owned)


async def test_a_cancelled_cleanup_propagates_and_can_run_again(tmp_path: Path) -> None:
    """Cleanup is bounded by its caller: cancelled, it raises; a later Cleanup completes."""
    process = lingering()
    tool, owner = make(tmp_path, launcher=FakeLauncher(lambda: process))
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["sleep"]})))
    await wait_for_flag(process.waiting_exit)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await owner.cleanup()
    assert owner.closing
    process.exit_with(Outcome.exited(0))
    async with asyncio.timeout(PATIENCE):
        await running
        await owner.cleanup()
    assert 0 == owner.owned


# -- output ---------------------------------------------------------------------------------


async def test_output_beyond_the_budget_keeps_head_and_tail_with_exact_counts(
    tmp_path: Path,
) -> None:
    """Captured output never exceeds the budget; observed = captured + omitted per stream."""
    process = FakeProcess(stdout=[b"0123456789" * 10], stderr=[b"E" * 3])
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process), max_output_bytes=10)
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert ("0123789", "EEE") == (content["stdout"], content["stderr"])
    assert (100, 93, 4) == (
        content["stdout_bytes"],
        content["stdout_omitted_bytes"],
        content["stdout_omitted_at"],
    )
    assert (0, None, True) == (
        content["stderr_omitted_bytes"],
        content["stderr_omitted_at"],
        content["output_truncated"],
    )


async def test_output_that_is_not_utf8_is_base64(tmp_path: Path) -> None:
    """Invalid UTF-8 in either stream makes both streams base64."""
    process = FakeProcess(stdout=[b"\xff\xfe"], stderr=[b"text"])
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process))
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert "base64" == content["encoding"]
    assert isinstance(content["stdout"], str)
    assert isinstance(content["stderr"], str)
    assert b"\xff\xfe" == base64.b64decode(content["stdout"])
    assert b"text" == base64.b64decode(content["stderr"])


@pytest.mark.parametrize(
    ("case", "observed", "budget", "unit"),
    [
        ("SH-25", 180 * 1024, 262_144, b"\0"),
        ("SH-26", 524_288, 524_288, b"\0"),
        ("SH-26-control", 524_288, 524_288, b"\x01"),
    ],
)
async def test_output_too_many_to_escape_comes_whole_as_base64(
    tmp_path: Path, case: str, observed: int, budget: int, unit: bytes
) -> None:
    """The seed's SH-25 and SH-26 (contract 12.4): NUL or control bytes take six characters
    each escaped as JSON, past the payload bound; base64 carries the whole capture (a
    180 KiB capture is 245,760 characters, a 512 KiB one 699,052), never shortened."""
    data = unit * (observed - 5)  # with stderr's 5 bytes, the capture is ``observed``
    process = FakeProcess(stdout=[data], stderr=[b"warn\n"], outcome=Outcome.exited(3))
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process), max_output_bytes=budget)
    result = await tool.execute(shell_call({"argv": ["true"]}))
    content = content_of(result)
    assert ("base64", "command_failed", False, 0, 0) == (
        content["encoding"],
        content["code"],
        content["output_truncated"],
        content["stdout_omitted_bytes"],
        content["stderr_omitted_bytes"],
    ), case
    assert (data, b"warn\n") == (
        base64.b64decode(str(content["stdout"])),
        base64.b64decode(str(content["stderr"])),
    )
    assert (observed - 5, 5) == (content["stdout_bytes"], content["stderr_bytes"])
    base64_chars = len(str(content["stdout"])) + len(str(content["stderr"]))
    assert 4 * (observed // 3) <= base64_chars <= 4 * (observed // 3) + 8
    assert answer_bytes(result.content) <= ANSWER_ROOM


async def test_output_beyond_the_budget_keeps_its_omission_and_is_base64(tmp_path: Path) -> None:
    """A capture the budget already shortened (the head and the tail of 1 MiB of NUL) still
    comes base64 with every captured byte: only the budget left bytes out."""
    budget = 262_144
    data = b"\0" * (1 << 20)
    process = FakeProcess(stdout=[data], outcome=Outcome.exited(0))
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process), max_output_bytes=budget)
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert ("base64", True, len(data) - budget, budget // 2, budget) == (
        content["encoding"],
        content["output_truncated"],
        content["stdout_omitted_bytes"],
        content["stdout_omitted_at"],
        len(base64.b64decode(str(content["stdout"]))),
    )


async def test_output_that_fits_the_answer_bound_is_whole(tmp_path: Path) -> None:
    """The other side: the same output, as much as fits whole, is not shortened."""
    budget = 524_288
    process = FakeProcess(stdout=[b"\x01" * 50_000], outcome=Outcome.exited(0))
    tool, _ = make(tmp_path, launcher=FakeLauncher(lambda: process), max_output_bytes=budget)
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert ("\x01" * 50_000, False) == (content["stdout"], content["output_truncated"])


async def test_the_answer_is_a_result_for_every_exit(tmp_path: Path) -> None:
    """Every answer above is a Result object (sanity of the types the fakes return)."""
    tool, _ = make(tmp_path)
    assert isinstance(await tool.execute(shell_call({"argv": ["true"]})), Result)
