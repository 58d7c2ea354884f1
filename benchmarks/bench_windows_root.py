"""What one ``read`` and one ``replace`` cost on this platform, beside a plain floor.

Runs unchanged on Linux and on Windows (or under Wine, with Windows CPython): on each it
times the product's tools in process (``new_read``/``new_replace`` through ``execute``,
the call's JSON included) and a floor written with the standard library alone (read:
open, read, sha256; replace: read and hash the current file, write a temporary, flush,
``os.replace``). Subject and floor run in rotation, one of each per round. It prints one
JSON object: the platform, the medians in microseconds and the ratios.

Compare two runs (``--compare LINUX.json WINDOWS.json``) for the Windows/Linux ratio of
each figure. Under Wine the Windows figures are Wine's (an NT layer emulated in a Unix
process on a Linux file system), not Windows': they show the cost of the code path (the
number of NT calls), not what NTFS and Defender make of it on a real machine.

    uv run --locked --no-sync python benchmarks/bench_windows_root.py > linux.json
    (Windows Python) python benchmarks\\bench_windows_root.py > windows.json
    uv run --locked --no-sync python benchmarks/bench_windows_root.py \\
        --compare linux.json windows.json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read, new_replace

ROUNDS: Final = 200
"""Rounds of subject and floor (each round one of each, order alternating)."""

WARMUP: Final = 20
"""Rounds run first and not counted."""

FILE_BYTES: Final = 4096
"""Size of the file read and replaced."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _timed(subject: Callable[[], Awaitable[object]]) -> int:
    start = time.perf_counter_ns()
    await subject()
    return time.perf_counter_ns() - start


async def _rotate(
    subject: Callable[[], Awaitable[object]], floor: Callable[[], Awaitable[object]]
) -> tuple[float, float]:
    ours: list[int] = []
    plain: list[int] = []
    for index in range(WARMUP + ROUNDS):
        pair = [(subject, ours), (floor, plain)]
        if index % 2:
            pair.reverse()
        for function, sink in pair:
            elapsed = await _timed(function)
            if index >= WARMUP:
                sink.append(elapsed)
    return statistics.median(ours) / 1000, statistics.median(plain) / 1000


async def _measure(root: Path) -> dict[str, object]:
    config = Config(str(root))
    read_tool, replace_tool = new_read(config), new_replace(config)
    data = bytes(range(97, 123)) * (FILE_BYTES // 26) + b"\n" * (FILE_BYTES % 26)
    (root / "r.txt").write_bytes(data)
    (root / "w.txt").write_bytes(data)
    (root / "f.txt").write_bytes(data)
    read_call = Call("c", "read", json.dumps({"path": "r.txt"}))

    async def read_ours() -> object:
        result = await read_tool.execute(read_call)
        assert result.problem is None
        return result

    async def read_floor() -> object:
        with (root / "r.txt").open("rb") as handle:
            body = handle.read()
        return json.dumps({"content": body.decode(), "sha256": _digest(body)})

    versions = [data, data.upper()]
    state = {"ours": 0, "floor": 0}

    async def replace_ours() -> object:
        current = versions[state["ours"] % 2]
        new = versions[(state["ours"] + 1) % 2]
        arguments = {"path": "w.txt", "content": new.decode(), "expected_sha256": _digest(current)}
        result = await replace_tool.execute(Call("c", "replace", json.dumps(arguments)))
        assert result.problem is None, result.content
        state["ours"] += 1
        return result

    async def replace_floor() -> object:
        new = versions[(state["floor"] + 1) % 2]
        target = root / "f.txt"
        _digest(target.read_bytes())
        temporary = root / ".floor.tmp"
        with temporary.open("wb") as handle:
            handle.write(new)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
        state["floor"] += 1
        return None

    read_us, read_floor_us = await _rotate(read_ours, read_floor)
    replace_us, replace_floor_us = await _rotate(replace_ours, replace_floor)
    return {
        "platform": sys.platform,
        "python": sys.version.split()[0],
        "file_bytes": FILE_BYTES,
        "rounds": ROUNDS,
        "read_us": round(read_us, 1),
        "read_floor_us": round(read_floor_us, 1),
        "read_ratio": round(read_us / read_floor_us, 2),
        "replace_us": round(replace_us, 1),
        "replace_floor_us": round(replace_floor_us, 1),
        "replace_ratio": round(replace_us / replace_floor_us, 2),
    }


def _compare(linux_path: str, windows_path: str) -> dict[str, object]:
    linux = json.loads(Path(linux_path).read_text())
    windows = json.loads(Path(windows_path).read_text())
    answer: dict[str, object] = {}
    for key in ("read_us", "read_floor_us", "replace_us", "replace_floor_us"):
        answer[f"{key.removesuffix('_us')}_windows_over_linux"] = round(
            float(windows[key]) / float(linux[key]), 2
        )
    answer["caveat"] = "under Wine: the cost of the code path, not of Windows and NTFS"
    return answer


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        print(json.dumps(_compare(sys.argv[2], sys.argv[3]), indent=1))
        return
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory).resolve() / "root"
        root.mkdir()
        print(json.dumps(asyncio.run(_measure(root))))


if __name__ == "__main__":
    main()
