"""Section 4: peak resident memory of a 1 GiB ``shell`` call and of 10 000 ``read`` pages.

Each measurement runs in a fresh child interpreter (``python bench_memory.py
child CASE ROOT``) that sets up, warms up with one small call, reads its peak
RSS (``VmHWM``), runs the case, and reads it again. The floor cases do the same
work with the standard library alone (drain the pipes in chunks; pread pages).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from _harness import (
    GIB,
    KIB,
    MIB,
    Figure,
    Settings,
    Unavailable,
    dumps,
    peak_rss_kib,
    pending_reason,
    summarize,
)

SECTION: Final = "memory"
SHELL_OUTPUT_BYTES: Final = GIB
PAGES: Final = 10_000
PAGE_BYTES: Final = 4 * KIB
PAGE_STRIDE: Final = 64 * KIB
PAGES_FILE: Final = "pages.bin"
CHILD_TIMEOUT: Final = 300.0
SHELL_ARGV: Final = ("head", "-c", str(SHELL_OUTPUT_BYTES), "/dev/zero")


# -- the child side --------------------------------------------------------------------------


async def _ours_shell(root: Path) -> dict[str, object]:
    from bench_inprocess import CallCounter, content_of  # noqa: PLC0415

    from spice.agent.coding import PosixLauncher, PosixResolver  # noqa: PLC0415
    from spice.agent.dispatch import Dispatcher  # noqa: PLC0415
    from spice.agent.tools.coding import Config, new_shell  # noqa: PLC0415

    tool, cleanup = new_shell(Config(str(root)), PosixResolver(), PosixLauncher())
    calls = CallCounter()
    try:
        dispatcher = Dispatcher([tool])
        content_of(await dispatcher.dispatch(calls.call("shell", {"argv": ["true"]})))
        before = peak_rss_kib()
        start = time.perf_counter()
        answer = content_of(
            await dispatcher.dispatch(calls.call("shell", {"argv": list(SHELL_ARGV)}))
        )
        seconds = time.perf_counter() - start
        after = peak_rss_kib()
    finally:
        async with asyncio.timeout(30):
            await cleanup()
    return {
        "before_kib": before,
        "after_kib": after,
        "seconds": seconds,
        "observed": answer.get("stdout_bytes"),
    }


async def _floor_shell(root: Path) -> dict[str, object]:
    from _floors import floor_shell  # noqa: PLC0415

    await floor_shell(["true"], root)
    before = peak_rss_kib()
    start = time.perf_counter()
    await floor_shell(list(SHELL_ARGV), root)
    seconds = time.perf_counter() - start
    return {"before_kib": before, "after_kib": peak_rss_kib(), "seconds": seconds}


async def _ours_pages(root: Path) -> dict[str, object]:
    from bench_inprocess import CallCounter, content_of  # noqa: PLC0415

    from spice.agent.dispatch import Dispatcher  # noqa: PLC0415
    from spice.agent.tools.coding import Config, new_read  # noqa: PLC0415

    dispatcher = Dispatcher([new_read(Config(str(root)))])
    calls = CallCounter()

    async def page(index: int) -> None:
        arguments = {"path": PAGES_FILE, "offset": index * PAGE_STRIDE, "limit": PAGE_BYTES}
        result = await dispatcher.dispatch(calls.call("read", arguments))
        if result.is_error:
            content_of(result)

    await page(0)
    before = peak_rss_kib()
    start = time.perf_counter()
    for index in range(PAGES):
        await page(index)
    seconds = time.perf_counter() - start
    return {"before_kib": before, "after_kib": peak_rss_kib(), "seconds": seconds}


async def _floor_pages(root: Path) -> dict[str, object]:
    from _floors import floor_read  # noqa: PLC0415

    floor_read(root, PAGES_FILE, 0, PAGE_BYTES)
    before = peak_rss_kib()
    start = time.perf_counter()
    for index in range(PAGES):
        floor_read(root, PAGES_FILE, index * PAGE_STRIDE, PAGE_BYTES)
    seconds = time.perf_counter() - start
    return {"before_kib": before, "after_kib": peak_rss_kib(), "seconds": seconds}


CASES: Final = {
    "shell-ours": _ours_shell,
    "shell-floor": _floor_shell,
    "pages-ours": _ours_pages,
    "pages-floor": _floor_pages,
}


def child(case: str, root: Path) -> int:
    """Run one case and print its measurements as one JSON line."""
    try:
        measured = asyncio.run(CASES[case](root))
    except Exception as error:  # noqa: BLE001 - the parent reports the reason
        print(dumps({"error": pending_reason(error)}))
        return 0
    print(dumps(measured))
    return 0


# -- the parent side -------------------------------------------------------------------------


def make_pages(root: Path) -> None:
    """A sparse file with a text page at each of the ``PAGES`` offsets the cases read."""
    line = b"page of text for the memory benchmark, padded to a full page...\n"
    page = (line * (PAGE_BYTES // len(line) + 1))[:PAGE_BYTES]
    with open(root / PAGES_FILE, "wb") as handle:
        handle.truncate(PAGES * PAGE_STRIDE)
        for index in range(PAGES):
            handle.seek(index * PAGE_STRIDE)
            handle.write(page)


def measure(case: str, root: Path) -> dict[str, object]:
    """Run ``case`` in a fresh interpreter and return its measurements."""
    completed = subprocess.run(
        [sys.executable, str(Path(__file__)), "child", case, str(root)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    lines = completed.stdout.decode("utf-8", "replace").strip().splitlines()
    if completed.returncode != 0 or not lines:
        raise Unavailable(f"failed: child exit status {completed.returncode}")
    measured = json.loads(lines[-1])
    if not isinstance(measured, dict):
        raise Unavailable("failed: child answered a non-object")
    if "error" in measured:
        raise Unavailable(str(measured["error"]))
    return measured


def _mib(kib: object) -> float:
    if not isinstance(kib, int):
        raise Unavailable("failed: child answered no RSS")
    return kib / 1024


def run(settings: Settings) -> list[Figure]:
    """Peak RSS and its growth for both cases, ours beside the floor."""
    root = Path(tempfile.mkdtemp(prefix="spice-bench-mem-")).resolve()
    figures: list[Figure] = []
    try:
        make_pages(root)
        for label, prefix, floor_name in (
            (
                f"shell whose child writes {SHELL_OUTPUT_BYTES // GIB} GiB",
                "shell",
                "create_subprocess_exec+drain 64 KiB chunks",
            ),
            (
                (
                    f"read {PAGES} pages of {PAGE_BYTES // KIB} KiB of a "
                    f"{PAGES * PAGE_STRIDE // MIB} MiB file"
                ),
                "pages",
                "open+pread+json.dumps per page",
            ),
        ):
            peaks: dict[str, list[float]] = {"ours": [], "floor": []}
            growth: dict[str, list[float]] = {"ours": [], "floor": []}
            seconds: dict[str, list[float]] = {"ours": [], "floor": []}
            error: str | None = None
            for index in range(settings.memory_repeats):
                order = ("ours", "floor") if index % 2 == 0 else ("floor", "ours")
                for side in order:
                    if side == "ours" and error is not None:
                        continue
                    try:
                        measured = measure(f"{prefix}-{side}", root)
                        peak = _mib(measured["after_kib"])
                        grown = peak - _mib(measured["before_kib"])
                    except (Unavailable, OSError, subprocess.SubprocessError) as failure:
                        if side == "floor":
                            raise
                        error = pending_reason(failure)
                        continue
                    peaks[side].append(peak)
                    growth[side].append(grown)
                    elapsed = measured.get("seconds")
                    if isinstance(elapsed, float):
                        seconds[side].append(elapsed)
            notes = tuple(
                f"{side} wall: median {summarize(values, 's').median:.3f} s"
                for side, values in seconds.items()
                if values
            )
            for kind, table, ratio_applies in (
                ("peak RSS", peaks, True),
                # A growth near zero on the floor side makes a ratio meaningless.
                ("RSS growth during the work", growth, False),
            ):
                figures.append(
                    Figure(
                        SECTION,
                        f"{label}: {kind}",
                        summarize(table["ours"], "MiB") if error is None else None,
                        "floor",
                        floor_name,
                        summarize(table["floor"], "MiB"),
                        unavailable=error,
                        ratio_applies=ratio_applies,
                        notes=notes,
                    )
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "child":
        sys.exit(child(sys.argv[2], Path(sys.argv[3])))
    sys.exit("usage: bench_memory.py child CASE ROOT")
