"""``WindowsLauncher``: Job Objects, pipes, exit codes, cleanup (contract 10.4).

Real processes under Windows Python: these run under Wine in ``make test-windows`` and on
windows-latest in the portability workflow; elsewhere they are skipped. Every test that
makes a grandchild asks Windows itself, after the join, whether it still runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Final

import pytest
from windows_support import gone, kill, running, under_wine

from spice.agent.coding._windows import _api as api
from spice.agent.coding._windows._launcher import (
    TERMINATED_EXIT_CODE,
    WindowsLauncher,
    WindowsProcess,
)
from spice.agent.coding._windows._resolver import WindowsResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.process import LaunchError, Outcome, Spec
from spice.agent.tool import Call, ExecutionState, interruption_of
from spice.agent.tools.coding import Config, new_shell

pytestmark = pytest.mark.skipif(
    sys.platform != "win32",
    reason="Windows only (runs under Wine in make test-windows, and on windows-latest)",
)

WINDOWS_NAMES: Final = ("COMSPEC", "PATH", "PATHEXT", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP")


class Collect:
    """A sink that keeps every byte (the tests' outputs are bounded)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.line = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.data.extend(data)
        if b"\n" in data:
            self.line.set()


class Count:
    """A sink that only counts, for large outputs."""

    def __init__(self) -> None:
        self.count = 0

    def write(self, data: bytes) -> None:
        self.count += len(data)


def environment() -> tuple[str, ...]:
    return tuple(f"{name}={os.environ[name]}" for name in WINDOWS_NAMES if name in os.environ)


def python_spec(
    code: str, workdir: Path, stdout: object = None, stderr: object = None, stdin: bytes = b""
) -> Spec:
    return Spec(
        sys.executable,
        ["-I", "-S", "-c", textwrap.dedent(code)],
        str(workdir),
        environment(),
        stdin,
        stdout if stdout is not None else Collect(),  # type: ignore[arg-type]
        stderr if stderr is not None else Collect(),  # type: ignore[arg-type]
    )


GRANDCHILD: Final = """
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(120)"])
    print(child.pid, flush=True)
    {after}
"""


async def run(spec: Spec) -> tuple[WindowsProcess, Outcome]:
    process = await WindowsLauncher().start(spec)
    await process.wait_exit()
    await process.wait()
    return process, process.result()


async def test_exit_codes_are_reported(tmp_path: Path) -> None:
    # ExitProcess takes the whole DWORD (3.11's sys.exit cannot pass more than INT_MAX).
    exit_with = "import ctypes; ctypes.windll.kernel32.ExitProcess(ctypes.c_uint({}))"
    for code in (0, 3, 255, 2**31 + 5, 2**32 - 1):
        _, outcome = await run(python_spec(exit_with.format(code), tmp_path))
        assert Outcome.exited(code) == outcome


async def test_output_and_input_pass_whole(tmp_path: Path) -> None:
    out, err = Collect(), Collect()
    data = bytes(range(256)) * 4096  # 1 MiB
    code = """
        import sys
        data = sys.stdin.buffer.read()
        sys.stdout.buffer.write(data)
        sys.stderr.buffer.write(b"done")
    """
    _, outcome = await run(python_spec(code, tmp_path, out, err, data))
    assert outcome.successful
    assert data == bytes(out.data)
    assert b"done" == bytes(err.data)


async def test_large_output_on_both_streams_at_once(tmp_path: Path) -> None:
    out, err = Count(), Count()
    code = """
        import sys, threading
        def write(stream, n):
            chunk = b"x" * 65536
            for _ in range(n):
                stream.write(chunk)
            stream.flush()
        t = threading.Thread(target=write, args=(sys.stderr.buffer, 64))
        t.start()
        write(sys.stdout.buffer, 256)
        t.join()
    """
    _, outcome = await run(python_spec(code, tmp_path, out, err))
    assert outcome.successful
    assert (256 * 65536, 64 * 65536) == (out.count, err.count)


async def test_the_working_directory_is_the_specs(tmp_path: Path) -> None:
    out = Collect()
    _, outcome = await run(python_spec("import os; print(os.getcwd())", tmp_path, out))
    assert outcome.successful
    assert os.path.normcase(str(tmp_path)) == os.path.normcase(out.data.decode().strip())


async def test_only_the_specs_environment_reaches_the_command(tmp_path: Path) -> None:
    out = Collect()
    spec = python_spec("import os, json; print(json.dumps(sorted(os.environ)))", tmp_path, out)
    spec = Spec(
        spec.executable,
        spec.arguments,
        spec.working_directory,
        (*spec.environment, "SPICE_ONLY=1"),
        b"",
        out,
        Collect(),
    )
    _, outcome = await run(spec)
    assert outcome.successful
    names = set(json.loads(out.data))
    assert "SPICE_ONLY" in names
    # Wine adds SYSTEMROOT, SYSTEMDRIVE and WINE* names of its own; nothing of ours leaks.
    leaked = {n for n in names - {n.upper() for n in WINDOWS_NAMES} if not n.startswith("WINE")}
    assert {"SPICE_ONLY"} == leaked - {"SYSTEMROOT", "SYSTEMDRIVE"}


async def test_a_grandchild_ends_with_the_call(tmp_path: Path) -> None:
    """The command exits, its grandchild sleeps on: the join ends it (the job is emptied)."""
    out = Collect()
    process, outcome = await run(python_spec(GRANDCHILD.format(after=""), tmp_path, out))
    assert outcome.successful
    grandchild = int(out.data.split()[0])
    assert gone(grandchild)
    assert process.done()


async def test_stop_terminates_the_whole_tree(tmp_path: Path) -> None:
    out = Collect()
    code = GRANDCHILD.format(after="import time; time.sleep(120)")
    process = await WindowsLauncher().start(python_spec(code, tmp_path, out))
    await out.line.wait()
    grandchild = int(out.data.split()[0])
    await process.request_stop()
    await process.wait_exit()
    await process.wait()
    assert Outcome.exited(TERMINATED_EXIT_CODE) == process.result()
    assert gone(grandchild)
    assert gone(process.pid)


async def test_force_kill_and_the_join_are_idempotent(tmp_path: Path) -> None:
    process = await WindowsLauncher().start(python_spec("import time; time.sleep(120)", tmp_path))
    await process.force_kill()
    await process.force_kill()
    await process.wait_exit()
    await process.wait()
    await process.wait()
    await process.request_stop()  # after the join: nothing to do, no failure
    assert Outcome.exited(TERMINATED_EXIT_CODE) == process.result()


async def test_breakaway_from_the_job_is_refused(tmp_path: Path) -> None:
    out = Collect()
    code = f"""
        import subprocess, sys
        try:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", "import time; time.sleep(120)"],
                creationflags={api.CREATE_BREAKAWAY_FROM_JOB},
            )
        except OSError as error:
            print("refused", getattr(error, "winerror", None))
        else:
            print("escaped", child.pid)
    """
    _, outcome = await run(python_spec(code, tmp_path, out))
    assert outcome.successful
    words = out.data.decode().split()
    if words[0] == "escaped":  # fail, and do not leave the escaped process behind
        kill(int(words[1]))
    assert ["refused", "5"] == words


def test_the_job_kills_on_close_and_allows_no_breakaway() -> None:
    job = api.Job.create()
    try:
        limits = job.limits()
    finally:
        job.close()
    assert job.closed
    job.close()  # idempotent
    with pytest.raises(OSError):  # noqa: PT011 - a closed job refuses every operation
        job.terminate(1)
    if limits == 0 and under_wine():
        pytest.skip("Wine 8 answers a job's limits with 0 (the behaviour is tested above)")
    assert limits & api.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    breakaway = api.JOB_OBJECT_LIMIT_BREAKAWAY_OK | api.JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK
    assert 0 == limits & breakaway


async def test_a_batch_file_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "build.bat"
    script.write_text("@echo off\r\necho ran\r\n", encoding="ascii")
    for name in ("build.bat", "build.BAT", "build.cmd"):
        spec = Spec(
            str(tmp_path / name),
            [],
            str(tmp_path),
            environment(),
            b"",
            Collect(),
            Collect(),
        )
        with pytest.raises(LaunchError) as raised:
            await WindowsLauncher().start(spec)
        assert raised.value.process is None


async def test_a_missing_executable_is_a_launch_error_with_nothing_created(tmp_path: Path) -> None:
    spec = Spec(
        str(tmp_path / "missing.exe"), [], str(tmp_path), environment(), b"", Collect(), Collect()
    )
    with pytest.raises(LaunchError) as raised:
        await WindowsLauncher().start(spec)
    assert raised.value.process is None


async def test_a_cancelled_wait_leaves_the_process_owned_and_joinable(tmp_path: Path) -> None:
    out = Collect()
    process = await WindowsLauncher().start(
        python_spec(GRANDCHILD.format(after="import time; time.sleep(120)"), tmp_path, out)
    )
    waiting = asyncio.ensure_future(process.wait_exit())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await out.line.wait()
    await process.force_kill()
    await process.wait()
    assert gone(int(out.data.split()[0]))


SERVER: Final = """
import asyncio, os, sys
from spice.agent.coding._windows._launcher import WindowsLauncher
from spice.agent.process import Spec

class Out:
    def write(self, data):
        sys.stdout.buffer.write(data)
        sys.stdout.flush()

async def main():
    names = ("PATH", "SYSTEMROOT", "SYSTEMDRIVE")
    environment = [f"{n}={os.environ[n]}" for n in names if n in os.environ]
    arguments = ["-I", "-S", "-c", sys.argv[1]]
    spec = Spec(sys.executable, arguments, sys.argv[2], environment, b"", Out(), Out())
    process = await WindowsLauncher().start(spec)
    print(process.pid, flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


def test_a_killed_server_takes_every_command_with_it(tmp_path: Path) -> None:
    """TerminateProcess on the server: its job handle closes, kill-on-close ends the tree."""
    code = textwrap.dedent(GRANDCHILD.format(after="import time; time.sleep(120)"))
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, code, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        command = int(server.stdout.readline())
        grandchild = int(server.stdout.readline())
        assert running(command)
        assert running(grandchild)
    finally:
        server.kill()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()
    assert gone(command)
    assert gone(grandchild)


async def test_a_cancelled_shell_call_ends_the_tree_and_says_uncertain(tmp_path: Path) -> None:
    """Through the shell tool: the caller's cancellation ends the command and its grandchild."""
    root = tmp_path / "root"
    root.mkdir()
    marker = root / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-I', '-S', '-c', 'import time; time.sleep(120)']); "
        f"open({str(marker)!r}, 'w').write(str(c.pid)); time.sleep(120)"
    )
    tool, cleanup = new_shell(Config(str(root)), WindowsResolver(), WindowsLauncher())
    call = Call("c1", "shell", json.dumps({"argv": [sys.executable, "-c", code]}))
    task = asyncio.ensure_future(Dispatcher([tool]).dispatch(call))
    async with asyncio.timeout(60):
        while not marker.exists() or not marker.read_text():  # noqa: ASYNC110 - a file appears
            await asyncio.sleep(0.02)
    grandchild = int(marker.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as raised:
        await task
    interruption = interruption_of(raised.value)
    assert interruption is not None
    assert ExecutionState.UNCERTAIN == interruption.state
    await cleanup()
    assert gone(grandchild)
