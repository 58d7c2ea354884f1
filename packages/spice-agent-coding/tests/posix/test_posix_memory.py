"""Memory stays bounded whatever a child writes: 1 GiB through the launcher, measured in a child."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Final

MEMORY_GROWTH_BOUND_BYTES: Final = 64 << 20
OUTPUT_BYTES: Final = 1 << 30
CHILD_BOUND_SECONDS: Final = 120

# Runs in a fresh interpreter so the peak RSS (ru_maxrss) belongs to the launcher alone.
MEASURE: Final = r"""
import asyncio, json, resource, sys
from spice.agent.coding import PosixLauncher
from spice.agent.process import Spec

class Count:
    def __init__(self):
        self.observed = 0
    def write(self, data):
        self.observed += len(data)

async def run(size):
    out, err = Count(), Count()
    spec = Spec("/usr/bin/head", ["-c", str(size), "/dev/zero"], "/", [], b"", out, err)
    process = await PosixLauncher().start(spec)
    await process.wait_exit()
    await process.wait()
    return out.observed

async def main(size):
    await run(1 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    observed = await run(size)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"observed": observed, "growth_bytes": (after - before) * 1024}))

asyncio.run(main(int(sys.argv[1])))
"""


def test_a_gibibyte_of_output_keeps_the_peak_rss_growth_bounded() -> None:
    """1 GiB of stdout is counted whole while the launcher's peak RSS grows < 64 MiB."""
    finished = subprocess.run(
        [sys.executable, "-c", MEASURE, str(OUTPUT_BYTES)],
        capture_output=True,
        check=True,
        timeout=CHILD_BOUND_SECONDS,
    )
    report = json.loads(finished.stdout)
    assert OUTPUT_BYTES == report["observed"]
    assert report["growth_bytes"] < MEMORY_GROWTH_BOUND_BYTES
