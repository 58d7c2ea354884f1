"""A directory swapped with an escaping symlink while reads run never leaks outside content."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spice.agent.tools.coding import _root
from spice.agent.tools.coding._root import PathError, open_beneath, open_root

INSIDE = b"inside\n"
SENTINEL = b"OUTSIDE-SENTINEL\n"
RENAME_EXCHANGE = 2
AT_FDCWD = -100
DEFAULT_READS = 2_000
"""Reads per route in the ordinary suite."""
SOAK_READS = 200_000
"""Reads per route under ``make soak`` (``SPICE_SOAK=1``)."""


def _exchange_function() -> Callable[..., int] | None:
    """``renameat2`` from the C library, when it has one."""
    if sys.platform != "linux":
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    exchange: Callable[..., int] = function
    return exchange


@contextlib.contextmanager
def swapping(first: Path, second: Path) -> Iterator[Counter[str]]:
    """Exchange ``first`` and ``second`` atomically in a loop until the block ends."""
    exchange = _exchange_function()
    if exchange is None:
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux-only")
    stop = threading.Event()
    counts: Counter[str] = Counter()
    a, b = os.fsencode(first), os.fsencode(second)

    def run() -> None:
        while not stop.is_set():
            if exchange(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
                counts["swaps"] += 1
            else:
                counts["failed"] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield counts
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()


def build(base: Path) -> Path:
    """``root/swap`` (a real directory) and ``root/alt`` (a symlink to outside) to exchange."""
    root = base / "root"
    for directory in (root / "swap" / "deep", base / "outside" / "deep"):
        directory.mkdir(parents=True)
    (root / "swap" / "target.txt").write_bytes(INSIDE)
    (base / "outside" / "target.txt").write_bytes(SENTINEL)
    (root / "alt").symlink_to("../outside")
    (root / "via").symlink_to("swap/deep/../target.txt")  # exercises `..` re-walks
    return root


def race(tmp_path: Path, reads: int, route: str) -> Counter[str]:
    """Read through the swapping directory ``reads`` times; count what each read saw."""
    root = build(tmp_path)
    seen: Counter[str] = Counter()
    root_fd = open_root(str(root))
    switch = _root.portable_only() if route == "portable" else contextlib.nullcontext()
    try:
        with switch, swapping(root / "swap", root / "alt") as counts:
            for index in range(reads):
                cleaned = "via" if index % 2 else "swap/target.txt"
                try:
                    fd = open_beneath(
                        root_fd, cleaned, os.O_RDONLY, follow_final=True, regular=True
                    )
                except PathError as error:
                    seen[error.code] += 1
                    continue
                try:
                    data = os.read(fd, 64)
                finally:
                    os.close(fd)
                seen[
                    "outside" if data == SENTINEL else "inside" if data == INSIDE else "other"
                ] += 1
        seen["swaps"] = counts["swaps"]
    finally:
        os.close(root_fd)
    return seen


@pytest.mark.parametrize("route", ["openat2", "portable"])
def test_swapping_a_directory_with_an_escaping_symlink_never_reads_outside(
    tmp_path: Path, route: str
) -> None:
    """Thousands of reads race thousands of exchanges; none returns the outside sentinel."""
    seen = race(tmp_path, DEFAULT_READS, route)
    assert 0 == seen["outside"]
    assert 0 == seen["other"]
    assert seen["swaps"] > 0
    assert DEFAULT_READS == sum(v for k, v in seen.items() if k != "swaps")


@pytest.mark.slow
@pytest.mark.parametrize("route", ["openat2", "portable"])
def test_the_swap_race_soaks_without_ever_reading_outside(tmp_path: Path, route: str) -> None:
    """The long variant of the race (``make soak``)."""
    reads = SOAK_READS if os.environ.get("SPICE_SOAK") == "1" else DEFAULT_READS * 5
    seen = race(tmp_path, reads, route)
    assert 0 == seen["outside"]
    assert 0 == seen["other"]
