"""The Windows side of ``bench_windows`` (run under Windows Python: Wine or Windows), and
the same measurement on POSIX for the Linux side.

Prints one JSON object of seconds per call, sampled in rotation after a warm-up: ``shell``
of ``cmd /c exit 0`` (``true`` on POSIX) through a ``Dispatcher``, ``read`` of a 4 KiB
file, ``replace`` of it (alternating two contents by digest), and each one's floor: a direct
``subprocess.run``, ``open().read()``, and a temporary file written, flushed to disk and
renamed over the target.

usage: python _windows_probe.py WARMUP REPEATS ROOT
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from spice.agent.coding._platform import default_launcher, default_resolver
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read, new_replace, new_shell

WINDOWS = sys.platform == "win32"
FILE_BYTES = 4096
CONTENTS = ("a" * FILE_BYTES, "b" * FILE_BYTES)


def _floor_replace(path: str, text: str) -> None:
    temporary = path + ".floor.tmp"
    with open(temporary, "wb") as file:
        file.write(text.encode())
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


async def main(warmup: int, repeats: int, root: str) -> dict[str, list[float]]:
    config = Config(root)
    shell, cleanup = new_shell(config, default_resolver(), default_launcher())
    dispatcher = Dispatcher([shell, new_read(config), new_replace(config)])
    target = os.path.join(root, "bench.txt")
    _floor_replace(target, CONTENTS[0])
    argv = ["cmd", "/c", "exit 0"] if WINDOWS else ["true"]
    command = [os.environ["COMSPEC"], "/c", "exit 0"] if WINDOWS else ["/bin/true"]
    turn = [0]

    async def call(name: str, arguments: dict[str, object]) -> None:
        result = await dispatcher.dispatch(Call("bench", name, json.dumps(arguments)))
        if result.problem is not None:
            raise RuntimeError("the benchmarked call failed")

    async def replace() -> None:
        current, following = CONTENTS[turn[0] % 2], CONTENTS[(turn[0] + 1) % 2]
        digest = hashlib.sha256(current.encode()).hexdigest()
        await call(
            "replace", {"path": "bench.txt", "content": following, "expected_sha256": digest}
        )
        turn[0] += 1

    async def floor_shell() -> None:
        subprocess.run(command, check=True, cwd=root)  # noqa: ASYNC221 - the floor

    async def floor_read() -> None:
        with open(target, "rb") as file:  # noqa: ASYNC230 - the floor
            file.read()

    async def floor_replace() -> None:
        _floor_replace(target, CONTENTS[turn[0] % 2])

    probes: dict[str, Callable[[], Awaitable[None]]] = {
        "shell": lambda: call("shell", {"argv": argv}),
        "shell_floor": floor_shell,
        "read": lambda: call("read", {"path": "bench.txt"}),
        "read_floor": floor_read,
        "replace": replace,
        "replace_floor": floor_replace,
    }
    samples: dict[str, list[float]] = {name: [] for name in probes}
    try:
        for index in range(warmup + repeats):
            for name, probe in probes.items():
                start = time.perf_counter()
                await probe()
                if index >= warmup:
                    samples[name].append(time.perf_counter() - start)
    finally:
        await cleanup()
    return samples


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))))
