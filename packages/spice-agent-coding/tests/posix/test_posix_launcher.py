"""PosixLauncher and its process, with real children (``/proc`` is the witness)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import procutil
import pytest
from procutil import Collect, Failing

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _launcher as launcher_module
from spice.agent.coding._posix import _leader as leader_module
from spice.agent.coding._posix import _process as process_module
from spice.agent.coding._posix._process import READ_CHUNK_BYTES, PosixProcess
from spice.agent.coding._posix._supervisor import _main as supervisor
from spice.agent.process import (
    LaunchError,
    Operation,
    Outcome,
    OutcomeKind,
    Process,
    ProcessFailure,
    Sink,
    Spec,
)

PYTHON: Final = os.path.normpath(sys.executable)
SH: Final = "/bin/sh"
CAT: Final = "/bin/cat"
HEAD: Final = "/usr/bin/head"
PATH: Final = "PATH=/usr/bin:/bin"
BOUND: Final = 10.0
"""Hang guard for every wait in these tests (never a timing assertion)."""

ARGV_DUMP: Final = (
    "import json, sys\n"
    "raw = open('/proc/self/cmdline', 'rb').read()\n"
    "print(json.dumps([a.decode('utf-8', 'surrogateescape') for a in raw.split(b'\\0')[:-1]]))\n"
)
ENVIRONMENT_DUMP: Final = (
    "import json\n"
    "raw = open('/proc/self/environ', 'rb').read()\n"
    "print(json.dumps(sorted(e.decode() for e in raw.split(b'\\0') if e)))\n"
)
IGNORE_TERM: Final = (
    "import os, signal\n"
    "signal.signal(signal.SIGTERM, lambda *_: os.write(1, b'term\\n'))\n"
    "os.write(1, b'ready\\n')\n"
    "while True:\n"
    "    signal.pause()\n"
)


def spec(
    executable: str,
    *arguments: str,
    workdir: str = "/",
    environment: tuple[str, ...] = (PATH,),
    stdin: bytes = b"",
    stdout: Sink | None = None,
    stderr: Sink | None = None,
) -> Spec:
    """A spec with collecting sinks unless others are given."""
    return Spec(
        executable,
        arguments,
        workdir,
        environment,
        stdin,
        Collect() if stdout is None else stdout,
        Collect() if stderr is None else stderr,
    )


def sinks(given: Spec) -> tuple[Collect, Collect]:
    """The collecting sinks of ``given``."""
    assert isinstance(given.stdout, Collect)
    assert isinstance(given.stderr, Collect)
    return given.stdout, given.stderr


_STARTED: list[PosixProcess] = []


async def start(given: Spec) -> PosixProcess:
    """Start ``given``; the test's teardown joins it even when the test fails."""
    process = await PosixLauncher().start(given)
    _STARTED.append(process)
    return process


@pytest.fixture(autouse=True)
async def join_what_tests_started() -> AsyncIterator[None]:
    """Join every process a test started, so a failing test leaks nothing."""
    yield
    started = list(_STARTED)
    _STARTED.clear()
    for process in started:
        with contextlib.suppress(ProcessFailure):
            async with asyncio.timeout(BOUND):
                await process.wait()


def bounded(**bounds: float) -> PosixLauncher:
    """A launcher whose processes get these bounds (the others are the module's)."""
    launcher = PosixLauncher()
    launcher._bounds = process_module._Bounds(**bounds)
    return launcher


async def run(given: Spec) -> tuple[PosixProcess, Collect, Collect]:
    """Start, wait for the exit, join; bounded. Sinks that are not ``Collect`` come back empty."""
    process = await start(given)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    out, err = given.stdout, given.stderr
    return (
        process,
        out if isinstance(out, Collect) else Collect(),
        err if isinstance(err, Collect) else Collect(),
    )


@pytest.fixture(params=["pidfd", "poll", "reap"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each exit watch: pidfd, waitid polling, waitpid polling without a supervisor (macOS)."""
    if request.param in {"poll", "reap"}:
        # Kernels and systems without pidfd_open (macOS, Linux < 5.3).
        monkeypatch.setattr(leader_module, "_open_pidfd", lambda _pid: None)
    if request.param == "reap":
        # CPython has no os.waitid on macOS: exits are seen by reaping. Nor is there a
        # supervisor there (no subreaper, no parent-death signal): the command leads.
        monkeypatch.setattr(leader_module, "_has_waitid", lambda: False)
        monkeypatch.setattr(launcher_module, "_supervisor_available", lambda: False)
    return str(request.param)


# -- argv, environment, stdin, outputs --------------------------------------------------------


async def test_argv_is_passed_literally_with_the_executable_as_argv0() -> None:
    """Shell syntax reaches the child as plain bytes, and argv[0] is the absolute path."""
    literal = ["$(id)", ";", "a\nb", "*", "-n", "--help", "", " spaced ", "`id`", "|", "'\""]
    _, out, err = await run(spec(PYTHON, "-c", ARGV_DUMP, *literal))
    assert b"" == bytes(err.data)
    assert [PYTHON, "-c", ARGV_DUMP, *literal] == json.loads(out.data)


async def test_the_environment_is_exactly_the_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host secrets never reach the child; only the spec's entries do."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_planted")
    monkeypatch.setenv("DATABASE_URL", "postgres://planted")
    environment = (PATH, "SPICE_MARK=a=b", "LANG=C.UTF-8")
    _, out, _ = await run(spec(PYTHON, "-c", ENVIRONMENT_DUMP, environment=environment))
    assert sorted(environment) == json.loads(out.data)
    assert b"planted" not in out.data


async def test_an_empty_environment_gives_the_child_none() -> None:
    """No entry in the spec means no variable in the child."""
    _, out, _ = await run(spec(PYTHON, "-c", ENVIRONMENT_DUMP, environment=()))
    assert [] == json.loads(out.data)


async def test_cat_without_arguments_sees_end_of_input_at_once() -> None:
    """Empty stdin is EOF: ``cat`` exits 0 with nothing to print."""
    process, out, _ = await run(spec(CAT))
    assert Outcome.exited(0) == process.result()
    assert b"" == bytes(out.data)


async def test_stdin_bytes_are_delivered_then_end_of_input() -> None:
    """A stdin larger than a pipe buffer reaches ``cat`` whole, then EOF."""
    data = bytes(range(256)) * 4096
    process, out, _ = await run(spec(CAT, stdin=data, stdout=Collect(limit=len(data))))
    assert Outcome.exited(0) == process.result()
    assert data == bytes(out.data)


async def test_stdin_a_child_never_reads_does_not_hang_the_join() -> None:
    """A child that exits without reading its stdin leaves nothing blocked."""
    before = procutil.open_descriptors()
    process, _, _ = await run(spec("/bin/true", stdin=b"x" * (1 << 20)))
    assert Outcome.exited(0) == process.result()
    assert before == procutil.open_descriptors()


async def test_stdout_and_stderr_are_both_pumped(exit_watch: str) -> None:
    """Each stream reaches its own sink."""
    _, out, err = await run(spec(SH, "-c", "echo out; echo err >&2"))
    assert (b"out\n", b"err\n") == (bytes(out.data), bytes(err.data))


async def test_output_reaches_the_sink_in_bounded_chunks() -> None:
    """8 MiB arrive whole, never in a chunk above READ_CHUNK_BYTES."""
    size = 8 << 20
    _, out, _ = await run(spec(HEAD, "-c", str(size), "/dev/zero", stdout=Collect(limit=0)))
    assert size == out.observed
    assert 0 < out.largest_chunk <= READ_CHUNK_BYTES


async def test_a_failing_sink_is_dropped_and_the_pipe_still_drains() -> None:
    """A sink that raises stops receiving; the child still finishes and is joined."""
    failing = Failing()
    process, _, err = await run(
        spec(SH, "-c", "head -c 1000000 /dev/zero; echo done >&2", stdout=failing)
    )
    assert (Outcome.exited(0), 1) == (process.result(), failing.calls)
    assert b"done\n" == bytes(err.data)


# -- outcomes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 3, 255])
async def test_the_exit_code_is_the_outcome(code: int, exit_watch: str) -> None:
    """``exit N`` gives ``Outcome.exited(N)``."""
    process, _, _ = await run(spec(SH, "-c", f"exit {code}"))
    assert Outcome.exited(code) == process.result()
    assert (code == 0) == process.result().successful


async def test_death_by_a_signal_is_a_signaled_outcome(exit_watch: str) -> None:
    """A child killed by a signal is ``signaled``."""
    process, _, _ = await run(spec(SH, "-c", "kill -KILL $$"))
    assert OutcomeKind.SIGNALED == process.result().kind


async def test_result_before_the_exit_raises_a_result_failure() -> None:
    """``result()`` of a running process raises ProcessFailure(RESULT)."""
    process = await start(spec("/bin/sleep", "60"))
    try:
        assert not process.done()
        with pytest.raises(ProcessFailure) as caught:
            process.result()
        assert (Operation.RESULT, True) == (caught.value.operation, caught.value.retryable)
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    assert process.done()


# -- stop, kill, join ---------------------------------------------------------------------------


async def test_request_stop_ends_a_child_with_sigterm(exit_watch: str) -> None:
    """SIGTERM to the group ends a child that keeps the default disposition."""
    process = await start(spec("/bin/sleep", "60"))
    await process.request_stop()
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    assert Outcome.signaled() == process.result()
    assert await procutil.group_gone(process.pid)


async def test_a_child_that_ignores_sigterm_is_ended_by_force_kill(exit_watch: str) -> None:
    """SIGTERM is handled and survived; SIGKILL is not."""
    given = spec(PYTHON, "-c", IGNORE_TERM)
    out, _ = sinks(given)
    process = await start(given)
    await out.contains(b"ready\n")
    await process.request_stop()
    await out.contains(b"term\n")
    assert not process.done()
    await process.force_kill()
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    assert Outcome.signaled() == process.result()
    assert await procutil.group_gone(process.pid)


async def test_a_background_sleeper_holding_stdout_does_not_hang_the_join(exit_watch: str) -> None:
    """``sleep 60 & echo ready``: the join returns and no sleeper is left."""
    process, out, _ = await run(spec(SH, "-c", "sleep 60 & echo ready"))
    assert (Outcome.exited(0), b"ready\n") == (process.result(), bytes(out.data))
    assert await procutil.group_gone(process.pid)


@pytest.mark.parametrize("route", ["poll", "pidfd, loop busy after the start word"])
async def test_a_command_leaving_a_child_is_joined_without_waiting_the_end_bound(
    route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sleep 60 & echo``: once the command exits, the join ends its tree without a fixed wait.

    The end bound is an hour: a join that waited for it (the leader's exit no longer
    watched once the command's exit was reported) would fail the hang guard.
    """
    if route == "poll":
        monkeypatch.setattr(leader_module, "_open_pidfd", lambda _pid: None)
    else:
        take = process_module._Report._take

        def busy_after_start(report: process_module._Report, kind: int, value: int) -> None:
            take(report, kind, value)
            if kind == supervisor.REPORT_STARTED:
                time.sleep(0.05)  # the loop is busy: the exit record is read with the start's

        monkeypatch.setattr(process_module._Report, "_take", busy_after_start)
    given = spec(SH, "-c", "sleep 60 & echo $!")
    out, _ = sinks(given)
    process = await bounded(end=3600.0, exit=3600.0).start(given)
    _STARTED.append(process)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await out.contains(b"\n")
    sleeper = int(out.data)
    assert Outcome.exited(0) == process.result()
    assert procutil.is_alive(sleeper)
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert not procutil.is_alive(sleeper)
    assert await procutil.group_gone(process.pid)


async def test_the_join_ends_a_whole_tree_in_the_group() -> None:
    """Children, grandchildren and orphans that stay in the group all end."""
    # Each sleeper prints its pid before it becomes `sleep`; the leader keeps running.
    script = "s() { sh -c 'echo $$; exec sleep 60'; }; (s &); (s & s) & s & s & wait"
    given = spec(SH, "-c", script)
    out, _ = sinks(given)
    process = await start(given)
    assert await procutil.until(lambda: out.data.count(b"\n") >= 5)
    sleepers = [int(line) for line in out.data.split()]
    assert all(procutil.is_alive(pid) for pid in sleepers)
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert await procutil.group_gone(process.pid)
    assert not any(procutil.is_alive(pid) for pid in sleepers)


async def test_request_stop_after_the_leader_exited_still_reaches_its_group() -> None:
    """The exited, unjoined leader pins its group, so a stop still reaches the sleeper."""
    given = spec(SH, "-c", "sleep 60 & echo $!")
    out, _ = sinks(given)
    process = await start(given)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
    await out.contains(b"\n")
    sleeper = int(out.data)
    assert procutil.is_alive(sleeper)
    await process.request_stop()
    assert await procutil.until(lambda: not procutil.is_alive(sleeper))
    async with asyncio.timeout(BOUND):
        await process.wait()


async def test_wait_on_a_running_child_kills_it() -> None:
    """The join is terminal: whatever of the group still runs gets SIGKILL."""
    process = await start(spec("/bin/sleep", "60"))
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert Outcome.signaled() == process.result()
    assert await procutil.group_gone(process.pid)


async def test_stop_kill_and_wait_on_an_exited_process_are_harmless(exit_watch: str) -> None:
    """After the exit, and again after the join, every operation succeeds quietly."""
    process = await start(spec("/bin/true"))
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
    await process.request_stop()
    await process.force_kill()
    async with asyncio.timeout(BOUND):
        await process.wait()
    await process.request_stop()
    await process.force_kill()
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
    assert Outcome.exited(0) == process.result()


async def test_wait_is_idempotent_and_safe_to_call_concurrently() -> None:
    """Sequential and concurrent joins all succeed; descriptors return to their count."""
    before = procutil.open_descriptors()
    process = await start(spec(SH, "-c", "sleep 60 & echo ready"))
    async with asyncio.timeout(BOUND):
        await asyncio.gather(process.wait(), process.wait(), process.wait())
        await process.wait()
    assert before == procutil.open_descriptors()
    assert await procutil.group_gone(process.pid)


async def test_the_process_satisfies_the_protocol() -> None:
    """The launcher's process is a ``spice.agent.process.Process``."""
    process = await start(spec("/bin/true"))
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert isinstance(process, Process)


async def test_no_descriptor_is_left_after_many_joins(exit_watch: str) -> None:
    """Pipes and pidfds of joined processes are all closed."""
    before = procutil.open_descriptors()
    for _ in range(20):
        await run(spec(SH, "-c", "echo x; echo y >&2"))
    assert before == procutil.open_descriptors()


# -- what leaves the group ---------------------------------------------------------------------


async def test_a_descendant_that_calls_setsid_is_ended_by_the_join() -> None:
    """A new session leaves the group, not the call: the supervisor's sweep ends it."""
    given = spec(SH, "-c", "setsid sleep 60 & echo $!")
    out, _ = sinks(given)
    process = await start(given)
    await out.contains(b"\n")
    escapee = int(out.data)
    try:
        assert await procutil.until(
            lambda: (
                (procutil.read_stat(escapee) or procutil.ProcStat(0, "", 0, 0, 0)).sid == escapee
            )
        )
        async with asyncio.timeout(BOUND):
            await process.wait()
        assert [] == procutil.alive_in_group(process.pid)
        assert await procutil.until(lambda: not procutil.is_alive(escapee))
    finally:
        await procutil.kill_escapee(escapee)


# -- launch failures -----------------------------------------------------------------------------


async def test_a_missing_executable_is_a_launch_error_without_os_text(tmp_path: Path) -> None:
    """Nothing is created, the message is fixed, and no descriptor leaks."""
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await PosixLauncher().start(spec(str(tmp_path / "missing")))
    assert caught.value.process is None
    assert "the process could not be started" == str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert before == procutil.open_descriptors()


async def test_a_file_without_execute_permission_is_a_launch_error(tmp_path: Path) -> None:
    """A non-executable file cannot be started."""
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    with pytest.raises(LaunchError) as caught:
        await PosixLauncher().start(spec(str(script)))
    assert caught.value.process is None


async def test_a_script_without_an_interpreter_line_is_a_launch_error(tmp_path: Path) -> None:
    """No shell fallback: a file the kernel cannot exec is not run by ``sh``."""
    script = tmp_path / "tool"
    script.write_text("touch ran\n")
    script.chmod(0o755)
    with pytest.raises(LaunchError):
        await PosixLauncher().start(spec(str(script), workdir=str(tmp_path)))
    assert not (tmp_path / "ran").exists()


async def test_a_directory_as_executable_is_a_launch_error(tmp_path: Path) -> None:
    """A directory cannot be started."""
    with pytest.raises(LaunchError):
        await PosixLauncher().start(spec(str(tmp_path)))


async def test_a_workdir_with_a_symlink_component_is_a_launch_error(tmp_path: Path) -> None:
    """The working directory is entered without following a symlink: none runs there."""
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    before = procutil.open_descriptors()
    for workdir in (tmp_path / "link", tmp_path / "link" / "inner"):
        with pytest.raises(LaunchError) as caught:
            await PosixLauncher().start(spec("/bin/pwd", workdir=str(workdir)))
        assert caught.value.process is None
    assert before == procutil.open_descriptors()


async def test_the_child_starts_in_the_directory_that_was_opened(tmp_path: Path) -> None:
    """The child's working directory is exactly the spec's, reached without a symlink."""
    work = await asyncio.to_thread((tmp_path / "work").resolve)
    work.mkdir()
    _, out, _ = await run(spec("/bin/pwd", "-P", workdir=str(work)))
    assert os.fsencode(work) + b"\n" == bytes(out.data)


async def test_a_missing_workdir_is_a_launch_error(tmp_path: Path) -> None:
    """The child's chdir fails: nothing runs and nothing is left."""
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await PosixLauncher().start(spec("/bin/true", workdir=str(tmp_path / "gone")))
    assert caught.value.process is None
    assert before == procutil.open_descriptors()


async def test_a_workdir_that_is_a_file_is_a_launch_error(tmp_path: Path) -> None:
    """A file is no working directory."""
    (tmp_path / "file").write_text("")
    with pytest.raises(LaunchError):
        await PosixLauncher().start(spec("/bin/true", workdir=str(tmp_path / "file")))


@pytest.mark.parametrize("late", ["before", "after"])
async def test_a_start_that_fails_after_the_child_exists_hands_it_over(
    monkeypatch: pytest.MonkeyPatch, late: str
) -> None:
    """LaunchError carries the created process, which the caller can still join."""
    real_attach = process_module._attach

    def failing_attach(process: PosixProcess) -> None:
        if late == "after":
            real_attach(process)
        raise OSError("injected")  # a late setup fault we cannot cause for real

    monkeypatch.setattr(process_module, "_attach", failing_attach)
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        # After cat has read its input the leader goes on (exec sleep): the stop, not an
        # early exit, ends it, whichever comes first on a loaded machine (D2).
        await PosixLauncher().start(
            spec(SH, "-c", "sleep 60 & cat; exec sleep 60", stdin=b"x" * 100_000)
        )
    partial = caught.value.process
    assert isinstance(partial, PosixProcess)
    assert "injected" not in str(caught.value)
    async with asyncio.timeout(BOUND):
        await partial.wait()
    assert Outcome.signaled() == partial.result()
    assert await procutil.group_gone(partial.pid)
    assert before == procutil.open_descriptors()


# -- failures of the join ------------------------------------------------------------------------


async def test_a_leader_outliving_the_exit_bound_fails_the_join_retryably(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the exit bound the join raises a retryable failure; a retry completes it."""
    monkeypatch.setattr(leader_module, "_open_pidfd", lambda _pid: None)
    process = await bounded(end=0.05, exit=0.05).start(spec("/bin/sleep", "60"))
    _STARTED.append(process)
    peek = leader_module._waitid

    def blind(pidfd: int | None, pid: int, flags: int) -> os.waitid_result | None:
        # The fault: the kernel never tells us the leader exited.
        return None if flags & os.WNOWAIT else peek(pidfd, pid, flags)

    monkeypatch.setattr(leader_module, "_waitid", blind)
    with pytest.raises(ProcessFailure) as caught:
        await process.wait()
    assert (Operation.WAIT, True) == (caught.value.operation, caught.value.retryable)
    monkeypatch.undo()
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert await procutil.group_gone(process.pid)


async def test_a_child_reaped_behind_our_back_fails_the_join_terminally() -> None:
    """Once someone else reaps the leader, the group id is not ours: nothing is signalled."""
    before = procutil.open_descriptors()
    process = await start(spec("/bin/sleep", "60"))
    # The rogue reaper (a SIGCHLD handler, a waitpid(-1) loop). The leader is killed and
    # reaped with no await in between, so the launcher's watch cannot have seen the exit
    # first, however busy the machine (with `true`, a loaded loop sometimes saw it exit).
    os.kill(process.pid, signal.SIGKILL)
    os.waitpid(process.pid, 0)  # noqa: ASYNC222 - the fault under test
    assert Outcome.unknown() == process.result()
    for operation in (process.request_stop, process.force_kill):
        with pytest.raises(ProcessFailure) as caught:
            await operation()
        assert caught.value.retryable is False
    for _ in range(2):
        with pytest.raises(ProcessFailure) as failed:
            await process.wait()
        assert (Operation.WAIT, False) == (failed.value.operation, failed.value.retryable)
    assert before == procutil.open_descriptors()


# -- cancellation --------------------------------------------------------------------------------


async def test_cancelling_wait_exit_leaves_the_process_joinable(exit_watch: str) -> None:
    """CancelledError propagates from wait_exit; the process is untouched and joins."""
    process = await start(spec("/bin/sleep", "60"))
    waiter = asyncio.create_task(process.wait_exit())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not process.done()
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert await procutil.group_gone(process.pid)


async def test_cancelling_a_join_midway_lets_a_later_join_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A join cancelled while it waits propagates CancelledError; the next one completes."""
    given = spec(SH, "-c", "setsid sleep 60 & echo $!")
    out, _ = sinks(given)
    process = await start(given)
    await out.contains(b"\n")
    escapee = int(out.data)
    # A supervisor deaf to the end request (the fault): the join waits for its bound.
    monkeypatch.setattr(supervisor, "END_SIGNAL", signal.SIGWINCH)
    try:
        join = asyncio.create_task(process.wait())
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
        await asyncio.sleep(0)
        assert not join.done()
        join.cancel()
        with pytest.raises(asyncio.CancelledError):
            await join
        monkeypatch.undo()
        async with asyncio.timeout(BOUND):
            await process.wait()
        assert [] == procutil.alive_in_group(process.pid)
        assert await procutil.until(lambda: not procutil.is_alive(escapee))
    finally:
        await procutil.kill_escapee(escapee)


async def test_a_start_cancelled_again_while_it_joins_raises_its_first_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled before the word, then again during the join: held back; the first is raised.

    The join still finishes (nothing is left), and the caller sees the cancellation it
    got first, as every tool's ``settle`` rule says.
    """
    # A supervisor deaf to the end request (the fault): the join waits its end bound.
    monkeypatch.setattr(supervisor, "END_SIGNAL", signal.SIGWINCH)
    launcher_module._code_fd()  # the sealed code is made once per process, on first use
    before = procutil.open_descriptors()
    starting = asyncio.ensure_future(bounded(end=0.5).start(spec("/bin/sleep", "60")))
    await asyncio.sleep(0)  # the start waits for its word
    starting.cancel("first")
    for _ in range(3):
        await asyncio.sleep(0)  # the first cancellation is delivered; the join runs
    assert not starting.done()
    starting.cancel("second")
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(BOUND):
            await starting
    assert ("first",) == caught.value.args
    assert await procutil.children_gone(), procutil.live_children()
    assert before == procutil.open_descriptors()


async def test_a_signal_the_child_ignores_is_not_a_stop(exit_watch: str) -> None:
    """A child that ignores SIGTERM (inherited SIG_IGN) still ends by the join."""
    given = spec(SH, "-c", "trap '' TERM; echo ready; sleep 60")
    out, _ = sinks(given)
    process = await start(given)
    await out.contains(b"ready\n")
    await process.request_stop()
    assert not process.done()
    async with asyncio.timeout(BOUND):
        await process.wait()
    assert Outcome.signaled() == process.result()
    assert await procutil.group_gone(process.pid)


# -- the supervisor's seams ------------------------------------------------------------------


def test_a_contained_launcher_needs_the_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no supervisor can run, containment is refused at construction."""
    from spice.agent.coding._posix._containment import Containment  # noqa: PLC0415

    monkeypatch.setattr(launcher_module, "_supervisor_available", lambda: False)
    with pytest.raises(ValueError, match="supervisor"):
        PosixLauncher.build(Containment("workspace", "workspace", 1), "/")
    assert PosixLauncher().contained is False


async def test_a_supervisor_that_dies_without_a_word_is_a_partial_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EOF on the report before any record: it may have started; the caller joins it."""
    monkeypatch.setattr(launcher_module, "_SUPERVISOR_FLAGS", ("-c", "raise SystemExit(3)"))
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await PosixLauncher().start(spec("/bin/true"))
    partial = caught.value.process
    assert isinstance(partial, PosixProcess)
    async with asyncio.timeout(BOUND):
        await partial.wait()
    assert Outcome.exited(3) == partial.result()
    assert before == procutil.open_descriptors()


async def test_a_supervisor_silent_past_the_start_bound_is_a_partial_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No word within the start bound: ``LaunchError(process)``, which joins like any other."""
    monkeypatch.setattr(launcher_module, "_SUPERVISOR_FLAGS", ("-c", "import time; time.sleep(60)"))
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await bounded(start=0.05).start(spec("/bin/true"))
    partial = caught.value.process
    assert isinstance(partial, PosixProcess)
    assert not partial.done()
    async with asyncio.timeout(BOUND):
        await partial.wait()
    assert await procutil.group_gone(partial.pid)
    assert before == procutil.open_descriptors()


async def test_a_supervisor_that_fails_before_its_fork_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec the supervisor cannot read (the fault): ``F``, so a bare ``LaunchError``."""
    monkeypatch.setattr(supervisor.SupervisorSpec, "encode", lambda _self: b"not-a-spec")
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await bounded(start=3600.0).start(spec("/bin/true"))
    assert caught.value.process is None
    assert await procutil.children_gone(), procutil.live_children()
    assert before == procutil.open_descriptors()


async def test_a_failed_start_word_is_a_bare_launch_error() -> None:
    """``F`` (the exec failed) is the one word that says nothing was created."""
    before = procutil.open_descriptors()
    with pytest.raises(LaunchError) as caught:
        await bounded(start=3600.0).start(spec("/nonexistent/tool"))
    assert caught.value.process is None
    assert before == procutil.open_descriptors()


async def test_a_supervised_process_says_so() -> None:
    """The process under a supervisor reports ``supervised``; its pid leads the group."""
    process, _, _ = await run(spec("/bin/true"))
    assert process.supervised is True


def _signal_masks(text: str) -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in text.splitlines() if line.startswith("Sig"))
    return {name: int(fields[name], 16) for name in ("SigBlk", "SigIgn")}


async def test_the_command_gets_the_signal_state_a_direct_child_would() -> None:
    """No signal blocked, SIGPIPE and SIGXFSZ at their defaults: the supervisor leaves none."""
    argv = ["/bin/cat", "/proc/self/status"]
    _, out, _ = await run(spec(*argv))
    direct = (await asyncio.to_thread(subprocess.check_output, argv)).decode()
    assert _signal_masks(direct) == _signal_masks(out.data.decode())
    assert 0 == _signal_masks(out.data.decode())["SigBlk"]


async def test_a_stop_reaches_a_command_that_left_the_group() -> None:
    """``setsid sleep``: the group's SIGTERM misses it; the supervisor forwards the stop."""
    process = await start(spec("/usr/bin/setsid", "/bin/sleep", "60"))
    assert await procutil.until(lambda: _command_left_the_group(process.pid))
    await process.request_stop()
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    assert Outcome.signaled() == process.result()


def _command_left_the_group(supervisor: int) -> bool:
    children = [p for p in procutil.all_processes() if p.ppid == supervisor and p.alive]
    return len(children) == 1 and children[0].pgid != supervisor
