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
    pending_reason,
    spice_coding,
    write_text,
)

SECTION: Final = "startup"
COMMAND_TIMEOUT: Final = 60.0
FLOOR_NAME: Final = "python -c pass (same interpreter)"


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
    """``call read`` and ``tools`` beside ``python -c pass``, alternating."""
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
    figures: list[Figure] = []
    try:
        for name, argv in cases:
            subject: list[float] = []
            reference: list[float] = []
            error: str | None = None
            for index in range(settings.process_repeats + 1):
                # The floor runs every round, first or second in turn; the subject until
                # it fails (a stub exits non-zero), so the floor is reported either way.
                order = (True, False) if index % 2 == 0 else (False, True)
                for is_subject in order:
                    if is_subject and error is not None:
                        continue
                    try:
                        elapsed = wall(argv if is_subject else floor_argv, root)
                    except (Unavailable, OSError, subprocess.SubprocessError) as failure:
                        if not is_subject:
                            raise
                        error = pending_reason(failure)
                        continue
                    if index > 0:
                        (subject if is_subject else reference).append(elapsed)
            figures.append(
                Figure(
                    SECTION,
                    name,
                    milliseconds(subject) if error is None else None,
                    "floor",
                    FLOOR_NAME,
                    milliseconds(reference),
                    unavailable=error,
                )
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures
