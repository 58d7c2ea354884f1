"""Section "windows": what ``shell``, ``read`` and ``replace`` cost under Wine (issue 22).

Under Wine (the environment ``make test-windows`` builds in ``.windows-env``), Windows
CPython runs ``_windows_probe.py``: ``shell`` of ``cmd /c exit 0`` through the Job Object
launcher, beside its floor (a direct ``subprocess.run`` of it). On Linux, in this process,
the same probe: ``shell`` of ``true`` through ``PosixLauncher``, beside its floor. Each
cross figure divides the Wine figure by the Linux one. **Wine is not Windows**: process
creation and file calls under Wine go through ``wineserver`` and cost what they cost
there, not what they cost on Windows; the ratio says how the port behaves on this machine,
not how fast Windows is.

``read`` and ``replace`` (the handle-relative Windows root) are measured the same way,
each beside its floor (``open().read()``; a temporary written, flushed and renamed).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_windows.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import _windows_probe
from _harness import REPOSITORY, Figure, Settings, main_of, milliseconds, unavailable

SECTION: Final = "windows"
STATE: Final = Path(os.environ.get("SPICE_WINDOWS_ENV", REPOSITORY / ".windows-env"))
PYTHON_TAG: Final = "313"
TIMEOUT_SECONDS: Final = 600
WINE_CAVEAT: Final = (
    "Wine is not Windows: process creation goes through wineserver; the ratio describes "
    "this machine under Wine 8, not Windows"
)


def _wine_samples(settings: Settings) -> dict[str, list[float]] | str:
    """The Windows side's samples, or why there are none."""
    prefix = STATE / "prefix"
    python = prefix / "drive_c" / f"python{PYTHON_TAG}" / "python.exe"
    if shutil.which("wine") is None or not python.is_file():
        return "no Wine environment: run `make test-windows` once to build it"
    subprocess.run(
        [
            str(REPOSITORY / "scripts" / "windows" / "build-env.sh"),
            str(REPOSITORY),
            str(STATE),
            "sync",
        ],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
    )
    environment = {**os.environ, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all"}
    root = prefix / "drive_c" / "bench-root"
    root.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            "wine",
            f"C:\\python{PYTHON_TAG}\\python.exe",
            "C:\\src\\benchmarks\\_windows_probe.py",
            str(settings.warmup),
            str(_repeats(settings)),
            "C:\\bench-root",
        ],
        cwd=prefix / "drive_c",
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,  # pipes: Windows CPython under Wine aborts on a regular file
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        return "the Windows probe failed under Wine"
    samples: dict[str, list[float]] = json.loads(done.stdout.decode().splitlines()[-1])
    return samples


def _linux_samples(settings: Settings) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as root:
        return asyncio.run(_windows_probe.main(settings.warmup, _repeats(settings), root))


def _repeats(settings: Settings) -> int:
    return settings.process_repeats * 3


LABELS: Final = {
    "shell": ("shell `cmd /c exit 0`", "shell `true`", "subprocess.run of the same command"),
    "read": ("read 4 KiB", "read 4 KiB", "open().read()"),
    "replace": ("replace 4 KiB", "replace 4 KiB", "write, fsync, os.replace"),
}


def run(settings: Settings) -> list[Figure]:
    """The Wine figures beside their floors and beside Linux."""
    linux = _linux_samples(settings)
    wine = _wine_samples(settings)
    figures: list[Figure] = []
    for key, (wine_name, linux_name, floor_name) in LABELS.items():
        linux_subject = milliseconds(linux[key])
        figures.append(
            Figure(
                SECTION,
                f"Linux: {linux_name}",
                linux_subject,
                "floor",
                floor_name,
                milliseconds(linux[f"{key}_floor"]),
            )
        )
        if isinstance(wine, str):
            figures.append(unavailable(SECTION, f"Wine: {wine_name}", wine))
            continue
        wine_subject = milliseconds(wine[key])
        figures += [
            Figure(
                SECTION,
                f"Wine: {wine_name}",
                wine_subject,
                "floor",
                f"{floor_name}, under Wine",
                milliseconds(wine[f"{key}_floor"]),
                notes=(WINE_CAVEAT,),
            ),
            Figure(
                SECTION,
                f"Wine {wine_name} / Linux {linux_name}",
                wine_subject,
                "peer",
                f"Linux {linux_name} (this run)",
                linux_subject,
                notes=(WINE_CAVEAT,),
            ),
        ]
    return figures


if __name__ == "__main__":
    raise SystemExit(main_of(run))
