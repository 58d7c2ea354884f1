"""Section 3a: wall time of one-shot ``spice-coding`` commands beside ``python -c pass``.

The floor is the same interpreter starting and doing nothing; the difference is
what importing and composing the application costs a one-shot caller.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from _harness import (
    Figure,
    Settings,
    Unavailable,
    milliseconds,
    number,
    pending_reason,
    spice_coding,
    write_text,
)

SECTION: Final = "startup"
COMMAND_TIMEOUT: Final = 60.0
FLOOR_NAME: Final = "python -c pass (same interpreter)"
STDLIB_IMPORTS: Final = "import argparse, asyncio, json"
"""What any asyncio command line pays before its own code: the second floor, in notes."""


def wall(argv: list[str], cwd: Path) -> float:
    """Seconds from spawn to exit of ``argv``; a non-zero exit stops the figure."""
    start = time.perf_counter_ns()
    completed = subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    elapsed = (time.perf_counter_ns() - start) / 1e9
    if completed.returncode != 0:
        raise Unavailable(f"failed: exit status {completed.returncode}")
    return elapsed


def run(settings: Settings) -> list[Figure]:
    """``call read`` and ``tools`` beside ``python -c pass``, in rotation."""
    root = Path(tempfile.mkdtemp(prefix="spice-bench-cli-")).resolve()
    write_text(root / "a.txt", 4096)
    script = str(spice_coding())
    cases = (
        (
            "spice-coding call read (4 KiB)",
            [script, "--root", str(root), "call", "read", '{"path":"a.txt"}'],
        ),
        ("spice-coding tools", [script, "--root", str(root), "tools"]),
    )
    floor_argv = [sys.executable, "-c", "pass"]
    stdlib_argv = [sys.executable, "-c", STDLIB_IMPORTS]
    figures: list[Figure] = []
    try:
        for name, argv in cases:
            # Slot 0 is ours, 1 the floor, 2 the stdlib-imports floor; the floors run
            # every round, ours until it fails (a stub exits non-zero).
            commands = (argv, floor_argv, stdlib_argv)
            samples: tuple[list[float], list[float], list[float]] = ([], [], [])
            error: str | None = None
            for index in range(settings.process_repeats + 1):
                shift = index % len(commands)
                for which in (*range(shift, len(commands)), *range(shift)):
                    if which == 0 and error is not None:
                        continue
                    try:
                        elapsed = wall(commands[which], root)
                    except (Unavailable, OSError, subprocess.SubprocessError) as failure:
                        if which != 0:
                            raise
                        error = pending_reason(failure)
                        continue
                    if index > 0:
                        samples[which].append(elapsed)
            stdlib = milliseconds(samples[2])
            note = f"python -c '{STDLIB_IMPORTS}': {number(stdlib.median)} ms"
            if error is None:
                note += f", ours/that {milliseconds(samples[0]).median / stdlib.median:.2f}x"
            figures.append(
                Figure(
                    SECTION,
                    name,
                    milliseconds(samples[0]) if error is None else None,
                    "floor",
                    FLOOR_NAME,
                    milliseconds(samples[1]),
                    unavailable=error,
                    notes=(note,),
                )
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures
