"""The session guard in the root ``conftest.py`` fails a run that leaks a process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import procutil

ROOT_CONFTEST: Final = Path(__file__).resolve().parents[4] / "conftest.py"
PLATFORM_SKIPS: Final = (
    Path(__file__).resolve().parents[4] / "packages/spice-agent-api/tests/platform_skips.py"
)
INNER_BOUND_SECONDS: Final = 120

LEAKING_TEST: Final = """
import subprocess

def test_leaks_a_sleeper_in_a_new_session():
    '''Leave a sleeper behind, detached into its own session (the worst escape).'''
    subprocess.run(
        ["/bin/sh", "-c", "setsid /bin/sleep 60 >/dev/null 2>&1 & echo $! > {pidfile}"],
        check=True,
    )
"""

CLEAN_TEST: Final = """
import subprocess

def test_runs_a_child_and_collects_it():
    '''Start and collect one child.'''
    subprocess.run(["/bin/sh", "-c", "sleep 0 & wait"], check=True)
"""


def run_inner(directory: Path, test: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on one test file in ``directory`` with a copy of the root conftest."""
    shutil.copy(ROOT_CONFTEST, directory / "conftest.py")
    shutil.copy(PLATFORM_SKIPS, directory / "platform_skips.py")  # the conftest's plugin
    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "test_inner.py").write_text(test)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:asyncio",
            f"--basetemp={directory / 'tmp'}",
            str(directory / "test_inner.py"),
        ],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=INNER_BOUND_SECONDS,
        env={"PATH": "/usr/bin:/bin", "SPICE_LEAK_BOUND_SECONDS": "0.5"},
        check=False,
    )


async def test_a_run_that_leaks_a_detached_process_fails_and_kills_it(tmp_path: Path) -> None:
    """A sleeper left in a new session fails the run, which then kills it."""
    pidfile = tmp_path / "pid"
    finished = run_inner(tmp_path, LEAKING_TEST.format(pidfile=pidfile))
    leaked = int(pidfile.read_text())
    try:
        assert 0 != finished.returncode
        assert "the test run leaked 1 process(es)" in finished.stdout
        assert await procutil.until(lambda: not procutil.is_alive(leaked))
    finally:
        await procutil.kill_escapee(leaked)


def test_a_run_that_collects_its_children_passes(tmp_path: Path) -> None:
    """A run whose children are all collected passes the guard."""
    finished = run_inner(tmp_path, CLEAN_TEST)
    assert (0, "") == (finished.returncode, finished.stderr)
