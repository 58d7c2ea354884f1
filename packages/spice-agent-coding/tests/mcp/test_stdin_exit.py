"""After the client closes stdin with nothing running, the process is gone at once (12.4).

Round 4 took 0.33 to 0.43 s (the reference server 0.01 s): measured with ``strace``, the
server reached its last ``atexit`` handler 2 to 4 ms after the end of stdin and then spent
the rest finalizing the interpreter (no wait: CPU). The console script now ends the process
itself once nothing is left to wait for (``_exit``).

The bound here does not depend on the machine's speed: what the process does after the end
of stdin. A module-level object whose finalizer writes a line shows whether the
interpreter's teardown ran (it runs only there); the ``atexit`` handlers and the last line
on stderr show that nothing owed was skipped. The other side: a thread that is not a daemon
still running keeps the ordinary exit, which waits for it.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from raw_peer import PROTOCOL_VERSION, encode, request

from spice.agent.coding._exit import still_running

EXIT_SECONDS: Final = 30.0
"""How long the test waits for the process to end (a bound, not a speed)."""
FINALIZED: Final = "finalized-by-teardown"
AT_EXIT: Final = "atexit-ran"
STOPPED: Final = "spice-coding: stopped: the client closed stdin"

WRAPPER: Final = """\
import atexit, os, sys, threading, time
from spice.agent.coding._cli import console

class Sentinel:
    def __del__(self):
        os.write(2, b"{finalized}\\n")

sentinel = Sentinel()  # finalized only by the interpreter's teardown
atexit.register(lambda: os.write(2, b"{at_exit}\\n"))
def busy():
    # Alive as long as the main thread is: until the interpreter's exit begins.
    while threading.main_thread().is_alive():
        time.sleep(0.01)

if "--busy" in sys.argv:
    sys.argv.remove("--busy")
    threading.Thread(target=busy, daemon=False).start()
console()
"""


def _serve_then_close(tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    """Start ``serve`` through the console script's function, initialize, close stdin; the
    exit code, stdout and stderr."""
    script = tmp_path / "console.py"
    script.write_text(WRAPPER.format(finalized=FINALIZED, at_exit=AT_EXIT))
    root = tmp_path / "root"
    root.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(script), "--root", str(root), "serve", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "exit-test", "version": "1"},
    }
    try:
        out, err = process.communicate(encode(request(1, "initialize", params)), EXIT_SECONDS)
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
    return process.returncode, out.decode(), err.decode()


def test_the_console_script_runs_console() -> None:
    """The installed ``spice-coding`` is the prompt exit, not bare ``main``."""
    (entry,) = (
        point
        for point in importlib.metadata.entry_points(group="console_scripts")
        if point.name == "spice-coding"
    )
    assert "spice.agent.coding._cli:console" == entry.value


def test_after_stdin_closes_the_process_exits_without_the_interpreter_teardown(
    tmp_path: Path,
) -> None:
    code, out, err = _serve_then_close(tmp_path)
    assert 0 == code
    assert 1 == json.loads(out.splitlines()[0])["id"]  # it answered, then saw the end
    lines = err.splitlines()
    assert STOPPED in lines
    assert AT_EXIT in lines  # the atexit handlers ran (logging's flush among them)
    assert FINALIZED not in lines  # no teardown: nothing was finalized


def test_a_thread_still_running_keeps_the_ordinary_exit_that_waits_for_it(
    tmp_path: Path,
) -> None:
    """The other side: a worker that is not a daemon is waited for, as the interpreter does."""
    code, _, err = _serve_then_close(tmp_path, "--busy")
    lines = err.splitlines()
    assert (0, True, True) == (code, STOPPED in lines, FINALIZED in lines)


def test_still_running_names_only_threads_the_interpreter_would_wait_for() -> None:
    import threading  # noqa: PLC0415 - local to the one test that starts threads

    before = set(still_running())
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=False)
    daemon = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    daemon.start()
    try:
        now = set(still_running()) - before
        assert {worker} == now
    finally:
        stop.set()
        worker.join(EXIT_SECONDS)
        daemon.join(EXIT_SECONDS)
    assert worker not in still_running()


@pytest.mark.parametrize("command", [["tools"]])
def test_a_one_shot_command_also_exits_promptly_with_its_output_whole(
    tmp_path: Path, command: list[str]
) -> None:
    """``tools`` prints its whole JSON before the prompt exit (stdout flushed)."""
    script = tmp_path / "console.py"
    script.write_text(WRAPPER.format(finalized=FINALIZED, at_exit=AT_EXIT))
    done = subprocess.run(
        [sys.executable, str(script), "--root", str(tmp_path), *command],
        capture_output=True,
        timeout=EXIT_SECONDS,
        check=False,
    )
    assert 0 == done.returncode
    assert {"read", "replace", "shell"} <= {t["name"] for t in json.loads(done.stdout)["tools"]}
    assert FINALIZED.encode() not in done.stderr
