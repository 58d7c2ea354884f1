"""Section "exit": from the client closing stdin to the server process being gone.

Contract 12.4: after the client closes stdin with nothing running, the process is gone
within 100 ms (round 4: 0.33 to 0.43 s; the reference server 0.01 s). Each sample spawns a
server through the raw client, completes the handshake and one ``tools/list``, then times
closing stdin until the process has exited (``wait``). Ours and the peer in rotation, every
sample a fresh process. Where the time went before (``strace``): 2 to 4 ms from the end of
stdin to the last ``atexit`` handler, the rest finalizing the interpreter; the console
script now skips that teardown once nothing is left to wait for (``_exit.py``).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_exit.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Final

from _clients import PEER_NAME, RawClient, Side, ours, peer
from _harness import Figure, Settings, milliseconds, pending_reason

SECTION: Final = "exit"
FIGURE: Final = "serve: stdin closed to process exit (raw client)"
EXIT_TIMEOUT: Final = 30.0
TARGET_NOTE: Final = "contract 12.4: at most 100 ms (an absolute bound, not a ratio)"


async def _exit_seconds(side: Side) -> float:
    """One fresh server: handshake, one listing, then stdin closed until it has exited."""
    client = await RawClient.spawn(side)
    try:
        await client.initialize()
        await client.request("tools/list", {})
        process = client._process  # the bench owns the client it spawned
        assert process.stdin is not None
        start = time.perf_counter_ns()
        process.stdin.close()
        async with asyncio.timeout(EXIT_TIMEOUT):
            await process.wait()
        return (time.perf_counter_ns() - start) / 1e9
    finally:
        await client.close()


async def _samples(sides: tuple[Side, Side], repeats: int) -> list[list[float] | str]:
    samples: list[list[float] | str] = [side.error or [] for side in sides]
    for index in range(repeats + 1):  # the first round warms the caches, uncounted
        order = [0, 1] if index % 2 == 0 else [1, 0]
        for which in order:
            collected = samples[which]
            if isinstance(collected, str):
                continue
            try:
                elapsed = await _exit_seconds(sides[which])
            except Exception as error:  # noqa: BLE001 - reported as unavailable
                samples[which] = f"{sides[which].label} failed: {pending_reason(error)}"
                continue
            if index > 0:
                collected.append(elapsed)
    return samples


def run(settings: Settings) -> list[Figure]:
    base = Path(tempfile.mkdtemp(prefix="spice-bench-exit-")).resolve()
    try:
        mine, theirs = asyncio.run(_samples((ours(base), peer(base)), settings.process_repeats))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    reasons = [x for x in (mine, theirs) if isinstance(x, str)]
    return [
        Figure(
            SECTION,
            FIGURE,
            milliseconds(mine) if isinstance(mine, list) and mine else None,
            "peer",
            PEER_NAME,
            milliseconds(theirs) if isinstance(theirs, list) and theirs else None,
            unavailable="; ".join(reasons) or None,
            notes=(TARGET_NOTE,),
        )
    ]


if __name__ == "__main__":
    import sys

    from _harness import main_of

    sys.exit(main_of(run))
