"""Shell fidelity (contract 9.1) and ``contained`` (9.4, product side), with typed fakes.

Every shell result, success or failure, has the same fields with ``ok`` first; a
launcher that breaks its protocol is a host failure whose ``Cleanup`` still completes;
``new_shell`` refuses collaborators that cannot do their part; ``contained`` is what the
launcher's optional attribute says, read once per call before the start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from fakes import (
    SHELL_FIELDS,
    TRUE,
    AnsweringLauncher,
    ContainedLauncher,
    FakeLauncher,
    FakeProcess,
    FakeResolver,
    HalfProcess,
    content_of,
    partial_start,
    shell_call,
)

from spice.agent.lifecycle import Cleanup
from spice.agent.process import (
    ExecutableNotFound,
    ExecutableResolver,
    Launcher,
    LaunchError,
    Lookup,
    Outcome,
    Process,
    Spec,
)
from spice.agent.tool import (
    ExecutionError,
    ExecutionState,
    Result,
    RetryDisposition,
    Tool,
    interruption_of,
)
from spice.agent.tools.coding import Config, new_shell
from spice.agent.tools.coding._ownership import Owner, Timing
from spice.agent.tools.coding._shell import build_shell
from spice.agent.tools.coding._shell_launcher import launcher_contained

FAST = Timing(join_seconds=5.0, backoff_seconds=0.0, backoff_limit_seconds=0.0, join_attempts=3)
PATIENCE = 30
"""Hang guard (seconds) for waits that end at once on a working implementation."""


NOTHING_RAN = {
    "exit_code": -1,
    "stdout": "",
    "stderr": "",
    "encoding": "utf-8",
    "stdout_bytes": 0,
    "stderr_bytes": 0,
    "output_truncated": False,
    "timed_out": False,
    "managed_cleanup_completed": False,
    "stdout_omitted_bytes": 0,
    "stderr_omitted_bytes": 0,
    "stdout_omitted_at": None,
    "stderr_omitted_at": None,
}
"""The shell fields of a command that never ran."""


def make(
    root: Path,
    launcher: Launcher | None = None,
    resolver: ExecutableResolver | None = None,
    *,
    posix: bool = True,
) -> tuple[Tool, Owner]:
    """A shell over ``root`` with short bounds."""
    return build_shell(
        Config(root),
        resolver or FakeResolver(),
        launcher or FakeLauncher(),
        timing=FAST,
        grace_seconds=0.01,
        posix=posix,
    )


async def execute(tool: Tool, arguments: dict[str, object] | str, name: str = "shell") -> Result:
    """One call, bounded."""
    async with asyncio.timeout(PATIENCE):
        return await tool.execute(shell_call(arguments, name=name))


def assert_shell_shape(content: dict[str, object]) -> None:
    """``ok`` first, then the failure's code and message, then exactly the shell fields."""
    keys = list(content)
    head = ["ok"] if content["ok"] is True else ["ok", "code", "message"]
    assert head == keys[: len(head)]
    assert sorted(SHELL_FIELDS) == sorted(keys[len(head) :])


# -- one field set for every result -------------------------------------------------------


Scenario = Callable[[Path], Awaitable[Result]]


async def _success(root: Path) -> Result:
    return await execute(make(root)[0], {"argv": ["true"]})


async def _command_failed(root: Path) -> Result:
    launcher = FakeLauncher(lambda: FakeProcess(outcome=Outcome.exited(3)))
    return await execute(make(root, launcher)[0], {"argv": ["false"]})


async def _timed_out(root: Path) -> Result:
    launcher = FakeLauncher(lambda: FakeProcess(exit_now=False))
    return await execute(make(root, launcher)[0], {"argv": ["sleep"], "timeout_seconds": 0.01})


async def _invalid(root: Path) -> Result:
    return await execute(make(root)[0], {"argv": []})


async def _malformed(root: Path) -> Result:
    return await execute(make(root)[0], "[1, 2]")


async def _wrong_tool(root: Path) -> Result:
    return await execute(make(root)[0], {"argv": ["true"]}, name="read")


async def _unsupported(root: Path) -> Result:
    return await execute(make(root, posix=False)[0], {"argv": ["true"]})


async def _closing(root: Path) -> Result:
    tool, owner = make(root)
    await owner.cleanup()
    return await execute(tool, {"argv": ["true"]})


async def _not_found(root: Path) -> Result:
    resolver = FakeResolver(ExecutableNotFound())
    return await execute(make(root, resolver=resolver)[0], {"argv": ["nope"]})


async def _no_workdir(root: Path) -> Result:
    return await execute(make(root)[0], {"argv": ["true"], "workdir": "missing"})


async def _launch_failed(root: Path) -> Result:
    return await execute(make(root, FakeLauncher(failure=LaunchError()))[0], {"argv": ["x"]})


async def _partial(root: Path) -> Result:
    launcher = FakeLauncher(failure=partial_start(FakeProcess(exit_now=False)))
    return await execute(make(root, launcher)[0], {"argv": ["x"]})


SCENARIOS: dict[str, tuple[Scenario, str | None]] = {
    "success": (_success, None),
    "command_failed": (_command_failed, "command_failed"),
    "timed_out": (_timed_out, "timed_out"),
    "invalid_arguments": (_invalid, "invalid_arguments"),
    "malformed": (_malformed, "invalid_arguments"),
    "wrong_tool": (_wrong_tool, "invalid_arguments"),
    "unsupported_platform": (_unsupported, "unsupported_platform"),
    "shell_closing": (_closing, "shell_closing"),
    "command_not_found": (_not_found, "command_not_found"),
    "workdir_unavailable": (_no_workdir, "workdir_unavailable"),
    "launch_failed": (_launch_failed, "launch_failed"),
    "partial_start": (_partial, "launch_failed"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_shell_result_has_the_same_fields_with_ok_first(
    tmp_path: Path, name: str
) -> None:
    """Success and every failure: ``ok`` first, then the same shell fields."""
    scenario, code = SCENARIOS[name]
    result = await scenario(tmp_path)
    content = content_of(result)
    assert code == content.get("code")
    assert_shell_shape(content)
    assert (result.problem is None) == (code is None)


@pytest.mark.parametrize("name", ["invalid_arguments", "malformed", "wrong_tool"])
async def test_a_call_refused_before_its_workdir_is_known_has_workdir_null(
    tmp_path: Path, name: str
) -> None:
    """When the arguments were never decoded, the workdir is unknown: ``null``."""
    content = content_of(await SCENARIOS[name][0](tmp_path))
    assert {**NOTHING_RAN, "workdir": None, "contained": False} == {
        key: content[key] for key in SHELL_FIELDS
    }


async def test_launch_failed_carries_every_shell_field_of_a_command_that_never_ran(
    tmp_path: Path,
) -> None:
    """The exact content of a start that created nothing (contract 9.1)."""
    (tmp_path / "sub").mkdir()
    launcher = ContainedLauncher(value=True, inner=FakeLauncher(failure=LaunchError()))
    tool, owner = make(tmp_path, launcher)
    result = await execute(tool, {"argv": ["x"], "workdir": "sub"})
    expected = {
        "ok": False,
        "code": "launch_failed",
        "message": "the command could not be started",
        "workdir": "sub",
        **NOTHING_RAN,
        "contained": True,
    }
    assert expected == content_of(result)
    assert (0, 0) == (owner.owned, owner.reserved)


async def test_a_partial_start_is_launch_failed_with_every_field_after_its_join(
    tmp_path: Path,
) -> None:
    """The partial process is stopped and joined; the answer still says nothing ran."""
    partial = FakeProcess(exit_now=False)
    tool, owner = make(tmp_path, FakeLauncher(failure=partial_start(partial)))
    content = content_of(await execute(tool, {"argv": ["x"]}))
    assert {**NOTHING_RAN, "workdir": ".", "contained": False} == {
        key: content[key] for key in SHELL_FIELDS
    }
    assert (1, 1, 0) == (partial.stop_calls, partial.wait_calls, owner.owned)


# -- the process's own word on its cleanup ---------------------------------------------


class _LeftSomething:
    """A process whose launcher says (``cleanup_completed``) what its join removed."""

    def __init__(self, answer: object) -> None:
        self.inner = FakeProcess()
        self._answer = answer

    @property
    def cleanup_completed(self) -> object:
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer

    def done(self) -> bool:
        return self.inner.done()

    async def wait_exit(self) -> None:
        await self.inner.wait_exit()

    def result(self) -> Outcome:
        return self.inner.result()

    async def request_stop(self) -> None:
        await self.inner.request_stop()

    async def force_kill(self) -> None:
        await self.inner.force_kill()

    async def wait(self) -> None:
        await self.inner.wait()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [(True, True), (False, False), (1, False), (None, False), (OSError("x"), False)],
)
async def test_the_processs_cleanup_completed_is_part_of_managed_cleanup(
    tmp_path: Path, answer: object, expected: bool
) -> None:
    """``cleanup_completed`` other than ``True`` (or failing) makes the cleanup incomplete."""
    process = _LeftSomething(answer)
    tool, owner = make(tmp_path, AnsweringLauncher(process))
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert (True, expected) == (content["ok"], content["managed_cleanup_completed"])
    assert (1, 0) == (process.inner.wait_calls, owner.owned)


# -- a launcher that breaks its protocol ---------------------------------------------------


@pytest.mark.parametrize(
    "answer", [None, 42, "pid 1", object(), HalfProcess()], ids=lambda a: type(a).__name__
)
async def test_a_start_that_returns_no_process_is_an_uncertain_host_failure(
    tmp_path: Path, answer: object
) -> None:
    """It may have started something nobody can join: uncertain, never; Cleanup is clean."""
    launcher = AnsweringLauncher(answer)
    tool, owner = make(tmp_path, launcher)
    with pytest.raises(ExecutionError) as caught:
        await execute(tool, {"argv": ["x"]})
    assert (ExecutionState.UNCERTAIN, RetryDisposition.NEVER) == (
        caught.value.state,
        caught.value.retry,
    )
    assert caught.value.__cause__ is None
    assert 1 == len(launcher.specs)
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (0, 0) == (owner.owned, owner.reserved)


@pytest.mark.parametrize("answer", [42, object(), HalfProcess()], ids=lambda a: type(a).__name__)
async def test_a_launch_error_carrying_no_process_is_an_uncertain_host_failure(
    tmp_path: Path, answer: object
) -> None:
    """``LaunchError(process=<not a process>)``: nothing to own, uncertain, clean Cleanup."""
    failure = LaunchError()
    failure.process = answer  # type: ignore[assignment]
    tool, owner = make(tmp_path, FakeLauncher(failure=failure))
    with pytest.raises(ExecutionError) as caught:
        await execute(tool, {"argv": ["x"]})
    assert ExecutionState.UNCERTAIN == caught.value.state
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (0, 0) == (owner.owned, owner.reserved)


@pytest.mark.parametrize(
    "failure", [TypeError("bad"), RuntimeError("bad"), OSError(12, "no memory"), KeyError("x")]
)
async def test_a_start_raising_something_else_is_uncertain_and_cleanup_is_clean(
    tmp_path: Path, failure: Exception
) -> None:
    """Not a ``LaunchError``: a process may exist. No raw exception, none of its text."""
    tool, owner = make(tmp_path, FakeLauncher(failure=failure))
    with pytest.raises(ExecutionError) as caught:
        await execute(tool, {"argv": ["x"]})
    assert (ExecutionState.UNCERTAIN, RetryDisposition.NEVER) == (
        caught.value.state,
        caught.value.retry,
    )
    assert "bad" not in str(caught.value)
    assert "no memory" not in str(caught.value)
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (0, 0) == (owner.owned, owner.reserved)


async def test_a_cancelled_start_that_returns_no_process_settles_and_cleans_up(
    tmp_path: Path,
) -> None:
    """Cancelled while a broken start runs: uncertain interruption, then a clean Cleanup."""
    gate = asyncio.Event()
    launcher = AnsweringLauncher(None, gate=gate)
    tool, owner = make(tmp_path, launcher)
    running = asyncio.create_task(tool.execute(shell_call({"argv": ["x"]})))
    async with asyncio.timeout(PATIENCE):
        await launcher.entered.wait()
    running.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(PATIENCE):
            await running
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert ExecutionState.UNCERTAIN == interruption.state
    async with asyncio.timeout(PATIENCE):
        await owner.cleanup()
    assert (0, 0) == (owner.owned, owner.reserved)


async def test_a_second_call_after_a_broken_start_still_runs(tmp_path: Path) -> None:
    """The slot of the broken start went back; the next call of a new shell is unaffected."""
    broken, _ = make(tmp_path, AnsweringLauncher(None))
    with pytest.raises(ExecutionError):
        await execute(broken, {"argv": ["x"]})
    working, owner = make(tmp_path)
    assert content_of(await execute(working, {"argv": ["true"]}))["ok"] is True
    assert (0, 0) == (owner.owned, owner.reserved)


# -- construction -----------------------------------------------------------------------------


class _NoStart:
    """Looks like a launcher by name only."""

    start = None


class _StartNotCallable:
    """``start`` is there but is no method."""

    start = "start"


class _MinimalLauncher:
    """A third-party launcher with nothing but ``start``: no ``contained`` attribute."""

    def __init__(self) -> None:
        self.inner = FakeLauncher()

    async def start(self, spec: Spec) -> Process:
        """Start through a fake."""
        return await self.inner.start(spec)


class _MinimalResolver:
    """A third-party resolver with nothing but ``resolve``."""

    async def resolve(self, lookup: Lookup) -> str:
        """Always ``/usr/bin/true``."""
        del lookup
        return TRUE


@pytest.mark.parametrize("resolver", [None, object(), _NoStart(), "resolver", FakeLauncher()])
def test_new_shell_refuses_a_resolver_that_cannot_resolve(tmp_path: Path, resolver: object) -> None:
    """``None`` or an object without a callable ``resolve``: ``TypeError`` at construction."""
    with pytest.raises(TypeError, match="resolver"):
        new_shell(Config(tmp_path), resolver, FakeLauncher())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "launcher", [None, object(), _NoStart(), _StartNotCallable(), FakeResolver()]
)
def test_new_shell_refuses_a_launcher_that_cannot_start(tmp_path: Path, launcher: object) -> None:
    """``None`` or an object without a callable ``start``: ``TypeError`` at construction."""
    with pytest.raises(TypeError, match="launcher"):
        new_shell(Config(tmp_path), FakeResolver(), launcher)  # type: ignore[arg-type]


async def test_minimal_third_party_collaborators_are_accepted_and_not_contained(
    tmp_path: Path,
) -> None:
    """Only ``resolve`` and ``start`` are required; ``contained`` is optional (false)."""
    launcher = _MinimalLauncher()
    tool, cleanup = new_shell(Config(tmp_path), _MinimalResolver(), launcher)
    content = content_of(await execute(tool, {"argv": ["true"]}))
    await _clean(cleanup)
    assert (True, False) == (content["ok"], content["contained"])
    assert TRUE == launcher.inner.specs[0].executable


async def _clean(cleanup: Cleanup) -> None:
    async with asyncio.timeout(PATIENCE):
        await cleanup()


# -- contained ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, False), ("yes", False), (None, False), ([True], False)],
)
async def test_contained_is_true_only_when_the_launcher_says_true(
    tmp_path: Path, value: object, *, expected: bool
) -> None:
    """A ``bool`` attribute is reported; anything else counts as not contained."""
    tool, _ = make(tmp_path, ContainedLauncher(value))
    content = content_of(await execute(tool, {"argv": ["true"]}))
    assert (True, expected) == (content["ok"], content["contained"])


async def test_a_contained_attribute_that_fails_to_be_read_counts_as_false(
    tmp_path: Path,
) -> None:
    """A raising property is a launcher that says nothing: false, and the call still runs."""
    launcher = ContainedLauncher(failure=RuntimeError("secret launcher text"))
    tool, _ = make(tmp_path, launcher)
    result = await execute(tool, {"argv": ["true"]})
    assert (True, False) == (content_of(result)["ok"], content_of(result)["contained"])
    assert "secret" not in result.content


async def test_contained_is_read_once_per_call_before_the_start(tmp_path: Path) -> None:
    """One read per call, made before the launcher's start is entered."""
    launcher = ContainedLauncher(value=True)
    tool, _ = make(tmp_path, launcher)
    for _ in range(3):
        await execute(tool, {"argv": ["true"]})
    assert (3, [1, 2, 3]) == (launcher.reads, launcher.reads_at_start)


async def test_each_call_reports_the_value_it_read(tmp_path: Path) -> None:
    """A launcher whose containment changes is reported call by call."""
    launcher = ContainedLauncher(value=True)
    tool, _ = make(tmp_path, launcher)
    first = content_of(await execute(tool, {"argv": ["true"]}))
    launcher.value = False
    second = content_of(await execute(tool, {"argv": ["true"]}))
    assert (True, False) == (first["contained"], second["contained"])


@pytest.mark.parametrize("name", ["invalid_arguments", "command_not_found", "launch_failed"])
async def test_failures_carry_contained_too(tmp_path: Path, name: str) -> None:
    """Refusals before the start and failed starts report the launcher's containment."""
    failing = FakeLauncher(failure=LaunchError()) if name == "launch_failed" else FakeLauncher()
    resolver = FakeResolver(ExecutableNotFound()) if name == "command_not_found" else None
    tool, _ = make(tmp_path, ContainedLauncher(value=True, inner=failing), resolver)
    arguments: dict[str, object] = {"argv": [] if name == "invalid_arguments" else ["x"]}
    content = content_of(await execute(tool, arguments))
    assert (name, True) == (content["code"], content["contained"])


def test_launcher_contained_reads_only_a_real_bool() -> None:
    """The helper's whole table, without a call."""
    assert launcher_contained(ContainedLauncher(value=True)) is True
    assert launcher_contained(ContainedLauncher(value=False)) is False
    assert launcher_contained(ContainedLauncher(1)) is False
    assert launcher_contained(FakeLauncher()) is False
    assert launcher_contained(ContainedLauncher(failure=ValueError("x"))) is False
