"""The ``shell`` tool through the real POSIX platform and a ``Dispatcher``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import procutil
import pytest

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.lifecycle import Cleanup
from spice.agent.process import ExecutableResolver, Lookup
from spice.agent.tool import Call, ExecutionState, RetryDisposition, interruption_of
from spice.agent.tools.coding import Config, new_shell

PYTHON: Final = os.path.normpath(sys.executable)
BOUND: Final = 30.0
"""Hang guard for one dispatched call (never a timing assertion)."""

CLEANUP_BOUND: Final = 30.0
MEMORY_GROWTH_BOUND_BYTES: Final = 64 << 20
GIBIBYTE: Final = 1 << 30
TEN_MB: Final = 10_000_000

ARGV_DUMP: Final = (
    "import json\n"
    "raw = open('/proc/self/cmdline', 'rb').read()\n"
    "print(json.dumps([a.decode('utf-8', 'surrogateescape') for a in raw.split(b'\\0')[:-1]]))\n"
)
ENVIRONMENT_DUMP: Final = (
    "import json\n"
    "raw = open('/proc/self/environ', 'rb').read()\n"
    "print(json.dumps(sorted(e.decode() for e in raw.split(b'\\0') if e)))\n"
)
TEN_MB_THEN_ERROR: Final = (
    "import sys\n"
    f"size = {TEN_MB}\n"
    "sys.stdout.write('HEAD' + 'x' * (size - 8) + 'TAIL')\n"
    "sys.stdout.flush()\n"
    "sys.stderr.write('error: boom\\n')\n"
    "sys.exit(1)\n"
)


@dataclass
class Shell:
    """One shell tool over the POSIX platform, reached through a dispatcher."""

    root: Path
    dispatcher: Dispatcher
    cleanup: Cleanup
    config: Config
    calls: int = 0

    async def call(self, arguments: dict[str, object]) -> dict[str, object]:
        """Dispatch one shell call (bounded) and return its content object."""
        self.calls += 1
        call = Call(f"call-{self.calls}", "shell", json.dumps(arguments))
        async with asyncio.timeout(BOUND):
            result = await self.dispatcher.dispatch(call)
        content = json.loads(result.content)
        assert isinstance(content, dict)
        assert result.is_error == (content["ok"] is False)
        return content


def make_shell(root: Path, resolver: ExecutableResolver | None = None) -> Shell:
    """A shell tool over ``root`` with the real launcher (and resolver unless given)."""
    config = Config(root)
    tool, cleanup = new_shell(config, resolver or PosixResolver(), PosixLauncher())
    return Shell(root, Dispatcher([tool]), cleanup, config)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty worktree root."""
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
async def shell(root: Path) -> AsyncIterator[Shell]:
    """The shell tool, with its Cleanup run (bounded) at teardown."""
    made = make_shell(root)
    yield made
    async with asyncio.timeout(CLEANUP_BOUND):
        await made.cleanup()


def text(content: dict[str, object], field: str) -> str:
    """A string field of a result's content."""
    value = content[field]
    assert isinstance(value, str)
    return value


# -- argv and environment ------------------------------------------------------------------------


async def test_argv_reaches_the_program_literally(shell: Shell) -> None:
    """``$(id)``, ``;``, a newline, ``*`` and a leading ``-`` are plain arguments."""
    literal = ["$(id)", ";", "a\nb", "*", "-n", "--help", "`id`", "|"]
    content = await shell.call({"argv": [PYTHON, "-c", ARGV_DUMP, *literal]})
    assert (True, 0) == (content["ok"], content["exit_code"])
    assert [PYTHON, "-c", ARGV_DUMP, *literal] == json.loads(text(content, "stdout"))


async def test_host_secrets_never_reach_the_program(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only allow-listed variables are passed; planted secrets are absent."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_planted")
    monkeypatch.setenv("DATABASE_URL", "postgres://planted")
    content = await shell.call({"argv": [PYTHON, "-c", ENVIRONMENT_DUMP]})
    seen = json.loads(text(content, "stdout"))
    names = {entry.partition("=")[0] for entry in seen}
    assert names <= set(shell.config.environment_allowlist)
    assert "planted" not in text(content, "stdout")


async def test_the_program_is_found_in_the_allowed_path(shell: Shell) -> None:
    """A bare name is resolved in the allow-listed PATH."""
    content = await shell.call({"argv": ["sh", "-c", "echo found"]})
    assert (True, "found\n") == (content["ok"], content["stdout"])


async def test_an_unknown_program_is_command_not_found(shell: Shell) -> None:
    """Nothing executable by that name: ``command_not_found``, nothing runs."""
    content = await shell.call({"argv": ["spice-no-such-program"]})
    assert (False, "command_not_found") == (content["ok"], content["code"])


async def test_cat_without_arguments_returns_at_once(shell: Shell) -> None:
    """stdin is at EOF: ``cat`` ends with nothing to print."""
    content = await shell.call({"argv": ["cat"]})
    assert (True, 0, "") == (content["ok"], content["exit_code"], content["stdout"])


# -- output --------------------------------------------------------------------------------------


async def test_ten_megabytes_then_an_error_keep_head_tail_and_stderr(shell: Shell) -> None:
    """The head, the tail and stderr are kept; every count is exact."""
    content = await shell.call({"argv": [PYTHON, "-c", TEN_MB_THEN_ERROR]})
    stdout, stderr = text(content, "stdout"), text(content, "stderr")
    budget = shell.config.max_output_bytes
    assert ("command_failed", 1, "utf-8") == (
        content["code"],
        content["exit_code"],
        content["encoding"],
    )
    assert (TEN_MB, 12) == (content["stdout_bytes"], content["stderr_bytes"])
    assert ("error: boom\n", 0, None) == (
        stderr,
        content["stderr_omitted_bytes"],
        content["stderr_omitted_at"],
    )
    assert budget - len(stderr) == len(stdout)
    omitted = content["stdout_omitted_bytes"]
    assert isinstance(omitted, int)
    assert TEN_MB == len(stdout) + omitted
    assert stdout.startswith("HEAD")
    assert stdout.endswith("TAIL")
    omitted_at = content["stdout_omitted_at"]
    assert isinstance(omitted_at, int)
    assert 0 < omitted_at < len(stdout)
    assert content["output_truncated"] is True


# Runs in a fresh interpreter so the peak RSS (ru_maxrss) belongs to the tool and platform.
MEASURE: Final = r"""
import asyncio, json, resource, sys, tempfile
from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

async def main(size):
    root = tempfile.mkdtemp()
    tool, cleanup = new_shell(Config(root), PosixResolver(), PosixLauncher())
    dispatcher = Dispatcher([tool])
    argv = ["head", "-c", str(size), "/dev/zero"]
    warm = {"argv": ["head", "-c", "1048576", "/dev/zero"]}
    await dispatcher.dispatch(Call("warm", "shell", json.dumps(warm)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await dispatcher.dispatch(Call("big", "shell", json.dumps({"argv": argv})))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    await cleanup()
    content = json.loads(result.content)
    print(json.dumps({
        "ok": content["ok"],
        "observed": content["stdout_bytes"],
        "omitted": content["stdout_omitted_bytes"],
        "growth_bytes": (after - before) * 1024,
    }))

asyncio.run(main(int(sys.argv[1])))
"""


def test_a_gibibyte_of_output_keeps_memory_bounded() -> None:
    """1 GiB through the tool: counts exact, peak RSS growth of the process < 64 MiB."""
    finished = subprocess.run(
        [PYTHON, "-c", MEASURE, str(GIBIBYTE)],
        capture_output=True,
        check=True,
        timeout=180,
    )
    report = json.loads(finished.stdout)
    assert (True, GIBIBYTE) == (report["ok"], report["observed"])
    assert GIBIBYTE > report["omitted"] > GIBIBYTE - (1 << 20)
    assert report["growth_bytes"] < MEMORY_GROWTH_BOUND_BYTES


# -- timeout and cancellation ---------------------------------------------------------------------


async def test_a_timeout_stops_the_whole_group(shell: Shell) -> None:
    """``timed_out``, and no process of the command's group is left alive."""
    content = await shell.call(
        {"argv": ["sh", "-c", "echo $$; sleep 60 & sleep 60"], "timeout_seconds": 0.5}
    )
    assert ("timed_out", True) == (content["code"], content["timed_out"])
    assert content["managed_cleanup_completed"] is True
    group = int(text(content, "stdout"))
    assert await procutil.group_gone(group)


async def test_a_program_ignoring_sigterm_is_killed_after_the_grace(shell: Shell) -> None:
    """SIGTERM is ignored, so the timeout's force kill ends the group."""
    content = await shell.call(
        {"argv": ["sh", "-c", "trap '' TERM; echo $$; sleep 60"], "timeout_seconds": 0.5}
    )
    assert ("timed_out", True) == (content["code"], content["timed_out"])
    assert await procutil.group_gone(int(text(content, "stdout")))


async def test_a_background_sleeper_does_not_hold_the_call(shell: Shell) -> None:
    """``sleep 60 & echo ready`` returns once ``sh`` exits, and no sleeper is left."""
    content = await shell.call({"argv": ["sh", "-c", "sleep 60 & echo $$"]})
    assert (True, 0) == (content["ok"], content["exit_code"])
    assert await procutil.group_gone(int(text(content, "stdout")))


async def test_cancellation_stops_the_group_and_propagates(shell: Shell, root: Path) -> None:
    """A cancelled call leaves no process alive and raises CancelledError (uncertain, never)."""
    pidfile = root / "pid"
    script = f"echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; sleep 60 & sleep 60"
    call = Call("cancelled", "shell", json.dumps({"argv": ["sh", "-c", script]}))
    task = asyncio.create_task(shell.dispatcher.dispatch(call))
    assert await procutil.until(pidfile.exists)
    group = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(BOUND):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.UNCERTAIN, RetryDisposition.NEVER) == (
        interruption.state,
        interruption.retry,
    )
    assert await procutil.group_gone(group)


async def test_cleanup_after_calls_leaves_nothing_and_closes_admission(shell: Shell) -> None:
    """After Cleanup, new calls get ``shell_closing`` and descriptors are back."""
    before = procutil.open_descriptors()
    await shell.call({"argv": ["sh", "-c", "sleep 60 & echo x"]})
    async with asyncio.timeout(CLEANUP_BOUND):
        await shell.cleanup()
    content = await shell.call({"argv": ["true"]})
    assert ("shell_closing", before) == (content["code"], procutil.open_descriptors())


# -- workdir -------------------------------------------------------------------------------------


async def test_a_nested_workdir_is_where_the_program_runs(shell: Shell, root: Path) -> None:
    """The program's working directory is the requested one."""
    (root / "a" / "b").mkdir(parents=True)
    content = await shell.call({"argv": ["pwd", "-P"], "workdir": "a/b"})
    assert (True, f"{root / 'a' / 'b'}\n") == (content["ok"], content["stdout"])


async def test_a_root_reached_through_a_symlink_still_runs_in_its_real_directory(
    root: Path,
) -> None:
    """A symlinked root (trusted configuration) works; the child starts in the real path."""
    (root / "a").mkdir()
    linked = root.parent / "linked-root"
    linked.symlink_to(root)
    made = make_shell(linked)
    try:
        content = await made.call({"argv": ["pwd", "-P"], "workdir": "a"})
    finally:
        async with asyncio.timeout(CLEANUP_BOUND):
            await made.cleanup()
    assert (True, f"{root / 'a'}\n") == (content["ok"], content["stdout"])


async def test_a_symlinked_workdir_is_a_path_escape(shell: Shell, root: Path) -> None:
    """A workdir with a symlink component, even one inside the root, is refused."""
    (root / "real").mkdir()
    (root / "link").symlink_to(root / "real")
    content = await shell.call({"argv": ["true"], "workdir": "link"})
    assert (False, "path_escape") == (content["ok"], content["code"])


async def test_a_workdir_symlinked_out_of_the_root_is_a_path_escape(
    shell: Shell, root: Path, tmp_path: Path
) -> None:
    """A symlink leading out of the root is refused."""
    (tmp_path / "outside").mkdir()
    (root / "out").symlink_to(tmp_path / "outside")
    content = await shell.call({"argv": ["true"], "workdir": "out"})
    assert (False, "path_escape") == (content["ok"], content["code"])


@pytest.mark.parametrize("workdir", ["..", "../root", "/tmp", "a/../../x"])
async def test_a_workdir_leaving_the_root_lexically_is_invalid(shell: Shell, workdir: str) -> None:
    """A workdir that names a place outside the root is ``invalid_arguments``."""
    content = await shell.call({"argv": ["true"], "workdir": workdir})
    assert (False, "invalid_arguments") == (content["ok"], content["code"])


async def test_a_workdir_that_is_a_file_is_unavailable(shell: Shell, root: Path) -> None:
    """A file is no workdir."""
    (root / "file").write_text("")
    content = await shell.call({"argv": ["true"], "workdir": "file"})
    assert (False, "workdir_unavailable") == (content["ok"], content["code"])


async def test_a_missing_workdir_is_unavailable(shell: Shell) -> None:
    """A workdir that does not exist is ``workdir_unavailable``."""
    content = await shell.call({"argv": ["true"], "workdir": "gone"})
    assert (False, "workdir_unavailable") == (content["ok"], content["code"])


class RacingResolver:
    """The real resolver, after running ``during`` (a real change racing the call)."""

    def __init__(self, during: Callable[[], None]) -> None:
        self._during = during
        self._real = PosixResolver()

    async def resolve(self, lookup: Lookup) -> str:
        """Change the file system, then resolve for real."""
        self._during()
        return await self._real.resolve(lookup)


async def test_a_workdir_deleted_before_launch_is_unavailable(root: Path) -> None:
    """The workdir removed between its check and the launch: nothing runs."""
    (root / "w").mkdir()
    marker = root / "ran"
    shell = make_shell(root, RacingResolver((root / "w").rmdir))
    try:
        content = await shell.call({"argv": ["touch", str(marker)], "workdir": "w"})
    finally:
        await shell.cleanup()
    assert (False, "workdir_unavailable") == (content["ok"], content["code"])
    assert not marker.exists()


async def test_a_workdir_swapped_for_a_symlink_before_launch_is_refused(
    root: Path, tmp_path: Path
) -> None:
    """The workdir replaced by a symlink after its first check: nothing runs."""
    (root / "w").mkdir()
    (tmp_path / "elsewhere").mkdir()
    marker = root / "ran"

    def swap() -> None:
        shutil.rmtree(root / "w")
        (root / "w").symlink_to(tmp_path / "elsewhere")

    shell = make_shell(root, RacingResolver(swap))
    try:
        content = await shell.call({"argv": ["touch", str(marker)], "workdir": "w"})
    finally:
        await shell.cleanup()
    assert content["ok"] is False
    assert content["code"] in {"path_escape", "workdir_unavailable"}
    assert not marker.exists()
