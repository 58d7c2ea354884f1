"""A second process that holds a worktree's private cache, as a running server does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

HOLDER_SECONDS: Final = 60
"""Bound on each wait for a holder process."""

_SCRIPT: Final = (
    "import sys\n"
    "from spice.agent.coding._posix import _caches\n"
    "_caches.claim(sys.argv[1], sys.argv[2])\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def holding(cache: Path | str, root: Path | str) -> Iterator[subprocess.Popen[str]]:
    """A process that claims ``cache`` for ``root`` (``_caches.claim``, a server's start)
    until the block ends (or the test kills it)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(cache), str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "held\n" == process.stdout.readline()
        yield process
    finally:
        process.kill()
        process.wait(HOLDER_SECONDS)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
