"""The Windows side of ``bench_windows``: run under Windows Python (Wine or Windows).

Prints one JSON object: seconds per ``shell`` call of ``cmd /c exit 0`` through a
``Dispatcher`` with ``WindowsResolver``/``WindowsLauncher``, and per floor (a direct
``subprocess.run`` of the same command), sampled in rotation after a warm-up.

usage: python _windows_probe.py WARMUP REPEATS ROOT
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from spice.agent.coding._windows_launcher import WindowsLauncher
from spice.agent.coding._windows_resolver import WindowsResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

ARGV = ["cmd", "/c", "exit 0"]


async def main(warmup: int, repeats: int, root: str) -> dict[str, list[float]]:
    tool, cleanup = new_shell(Config(root), WindowsResolver(), WindowsLauncher())
    dispatcher = Dispatcher([tool])
    call = Call("bench", "shell", json.dumps({"argv": ARGV}))
    comspec = os.environ["COMSPEC"]

    async def ours() -> None:
        result = await dispatcher.dispatch(call)
        if result.problem is not None:
            raise RuntimeError("the benchmarked call failed")

    def floor() -> None:
        subprocess.run([comspec, "/c", "exit 0"], check=True, cwd=root)

    samples: dict[str, list[float]] = {"shell": [], "floor": []}
    try:
        for index in range(warmup + repeats):
            for name in ("shell", "floor"):
                start = time.perf_counter()
                if name == "shell":
                    await ours()
                else:
                    floor()
                if index >= warmup:
                    samples[name].append(time.perf_counter() - start)
    finally:
        await cleanup()
    return samples


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))))
