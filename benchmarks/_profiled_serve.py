"""``spice-coding serve`` under ``cProfile``, with imports done before the profiler starts.

Usage (by ``profiling.py --serve``): ``python _profiled_serve.py OUTPUT ARGS...``. The MCP
SDK and our packages are imported first, so the profile shows serving, not start-up; it
is written to OUTPUT when the server exits (the client closes stdin). Only the main
thread is profiled: a read's or replace's worker thread is not in it.
"""

from __future__ import annotations

import cProfile
import sys

import spice.agent.coding._mcp._stdio  # noqa: F401 - the SDK loads before the profiler starts
from spice.agent.coding._cli import main


def profiled() -> int:
    """Run the CLI's ``main`` with ``sys.argv[2:]`` under cProfile; dump to ``sys.argv[1]``."""
    output = sys.argv[1]
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return main(sys.argv[2:])
    finally:
        profiler.disable()
        profiler.dump_stats(output)


if __name__ == "__main__":
    sys.exit(profiled())
