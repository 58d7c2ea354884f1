"""An strace harness for replace: run one call in a child process under ``strace``.

The child imports everything, builds its event loop with a one-thread executor and
allows any process to trace it (``PR_SET_PTRACER_ANY``, so Yama's ``ptrace_scope=1``
lets a sibling ``strace`` attach), then waits. ``strace -f -p`` attaches, the child
runs the call, and the worker thread that does the file work is a new tracee whose
syscall counters start at zero. strace counts ``when=N`` per syscall and per tracee,
so ``inject=NAME:when=N`` hits exactly the worker's N-th ``NAME``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

STRACE: Final = shutil.which("strace")
DEADLINE_SECONDS: Final = 30.0
"""Bound on each child and tracer (generous: the machine is shared)."""

CHILD: Final = """\
import asyncio
import ctypes
import sys
from concurrent.futures import ThreadPoolExecutor

from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_replace

PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)

root, arguments = sys.argv[1], sys.argv[2]
tool = new_replace(Config(root))
loop = asyncio.new_event_loop()
loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
ctypes.CDLL(None).prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)
print("ready", flush=True)
sys.stdin.readline()
result = loop.run_until_complete(tool.execute(Call("crash", "replace", arguments)))
print(result.content, flush=True)
"""

FILE_SYSCALLS: Final = frozenset(
    {
        "openat",
        "openat2",
        "read",
        "write",
        "close",
        "fsync",
        "fdatasync",
        "fchmod",
        "fchown",
        "newfstatat",
        "fstat",
        "statx",
        "mkdirat",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "unlink",
        "unlinkat",
    }
)
"""The syscalls of the worker thread that a crash sweep kills at."""

_LINE: Final = re.compile(r"^(\d+)\s+(\w+)\(")


@final
@dataclass(frozen=True, slots=True)
class Traced:
    """One traced child: its exit status, its result content (if printed), its trace."""

    returncode: int
    content: dict[str, object] | None
    trace: str
    pid: int

    def worker_calls(self) -> list[tuple[str, str]]:
        """``(syscall, line)`` of the worker thread(s), in order, file syscalls only."""
        calls: list[tuple[str, str]] = []
        for line in self.trace.splitlines():
            match = _LINE.match(line)
            if match is None or int(match.group(1)) == self.pid:
                continue
            if match.group(2) in FILE_SYSCALLS:
                calls.append((match.group(2), line))
        return calls


def _read_line(fd: int, deadline: float) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no line in time")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError("no line in time")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


def traced_call(
    workdir: Path, root: Path, arguments: Mapping[str, object], options: Sequence[str]
) -> Traced:
    """Run one replace call on ``root`` in a child traced with ``strace -f`` and ``options``."""
    assert STRACE is not None
    script = workdir / "replace_child.py"
    if not script.exists():
        script.write_text(CHILD)
    trace = workdir / "trace.txt"
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    deadline = time.monotonic() + DEADLINE_SECONDS
    child = subprocess.Popen(
        [sys.executable, str(script), str(root), json.dumps(arguments)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=environment,
    )
    tracer: subprocess.Popen[bytes] | None = None
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert b"ready\n" == _read_line(child.stdout.fileno(), deadline)
        tracer = subprocess.Popen(
            [STRACE, "-f", "-o", str(trace), "-p", str(child.pid), *options],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert tracer.stderr is not None
        attached = _read_line(tracer.stderr.fileno(), deadline)
        assert b"attached" in attached, attached.decode(errors="replace")
        # An injected kill counts the child's calls from the attach: when the child made
        # more of them while it waited (a busy machine), the kill can land before "go".
        with contextlib.suppress(BrokenPipeError):
            child.stdin.write(b"go\n")
            child.stdin.flush()
        out, _ = child.communicate(timeout=max(0.1, deadline - time.monotonic()))
        tracer.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for process in (child, tracer):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        for pipe in (child.stdin, child.stdout, None if tracer is None else tracer.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()
    lines = out.decode().splitlines()
    content = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    return Traced(child.returncode, content, trace.read_text(), child.pid)
