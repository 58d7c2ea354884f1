"""Section "windows": what a ``shell`` call costs under Wine, beside Linux (issue 22).

Under Wine (the environment ``make test-windows`` builds in ``.windows-env``), Windows
CPython runs ``_windows_probe.py``: ``shell`` of ``cmd /c exit 0`` through the Job Object
launcher, beside its floor (a direct ``subprocess.run`` of it). On Linux, in this process:
``shell`` of ``true`` through ``PosixLauncher``, beside its floor. The cross figure divides
the Wine ``shell`` by the Linux one. **Wine is not Windows**: process creation under Wine
goes through ``wineserver`` and costs what it costs there, not what it costs on Windows;
the ratio says how the port behaves on this machine, not how fast Windows is.

``read`` and ``replace`` answer ``unsupported_platform`` on Windows until the
handle-relative root lands: their figures say "unavailable" and why.

Run alone: ``uv run --locked --no-sync python benchmarks/bench_windows.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

from _harness import REPOSITORY, Figure, Settings, main_of, milliseconds, unavailable

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

SECTION: Final = "windows"
STATE: Final = Path(os.environ.get("SPICE_WINDOWS_ENV", REPOSITORY / ".windows-env"))
PYTHON_TAG: Final = "313"
TIMEOUT_SECONDS: Final = 600
WINE_CAVEAT: Final = (
    "Wine is not Windows: process creation goes through wineserver; the ratio describes "
    "this machine under Wine 8, not Windows"
)
NO_ROOT: Final = (
    "read and replace answer unsupported_platform on Windows until the handle-relative "
    "root (contract 10.4) lands"
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
            str(settings.process_repeats * 3),
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


async def _linux_samples(settings: Settings) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as root:
        tool, cleanup = new_shell(Config(root), PosixResolver(), PosixLauncher())
        dispatcher = Dispatcher([tool])
        call = Call("bench", "shell", json.dumps({"argv": ["true"]}))
        samples: dict[str, list[float]] = {"shell": [], "floor": []}
        try:
            for index in range(settings.warmup + settings.process_repeats * 3):
                start = time.perf_counter()
                if (await dispatcher.dispatch(call)).problem is not None:
                    raise RuntimeError("the benchmarked call failed")
                middle = time.perf_counter()
                subprocess.run(["/bin/true"], check=True, cwd=root)  # noqa: ASYNC221 - the floor
                end = time.perf_counter()
                if index >= settings.warmup:
                    samples["shell"].append(middle - start)
                    samples["floor"].append(end - middle)
        finally:
            await cleanup()
    return samples


def run(settings: Settings) -> list[Figure]:
    """The Wine figures beside their floor and beside Linux."""
    linux = asyncio.run(_linux_samples(settings))
    linux_shell = milliseconds(linux["shell"])
    wine = _wine_samples(settings)
    figures = [
        Figure(
            SECTION,
            "Linux: shell `true`",
            linux_shell,
            "floor",
            "subprocess.run(['/bin/true'])",
            milliseconds(linux["floor"]),
        )
    ]
    if isinstance(wine, str):
        figures.append(unavailable(SECTION, "Wine: shell `cmd /c exit 0`", wine))
    else:
        wine_shell = milliseconds(wine["shell"])
        figures += [
            Figure(
                SECTION,
                "Wine: shell `cmd /c exit 0`",
                wine_shell,
                "floor",
                "subprocess.run([COMSPEC, '/c', 'exit 0']) under Wine",
                milliseconds(wine["floor"]),
                notes=(WINE_CAVEAT,),
            ),
            Figure(
                SECTION,
                "Wine shell `cmd /c exit 0` / Linux shell `true`",
                wine_shell,
                "peer",
                "Linux shell `true` (this run)",
                linux_shell,
                notes=(WINE_CAVEAT,),
            ),
        ]
    figures += [
        unavailable(SECTION, "Wine: read", NO_ROOT),
        unavailable(SECTION, "Wine: replace", NO_ROOT),
    ]
    return figures


if __name__ == "__main__":
    raise SystemExit(main_of(run))
