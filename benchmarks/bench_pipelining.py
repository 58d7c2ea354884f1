"""Contract 9.5: the server's memory when a client pipelines many large requests.

A raw client starts ``spice-coding serve``, warms it up with one call, reads its idle
RSS (``VmRSS``) and peak (``VmHWM``) from ``/proc``, then pipelines
``PIPELINED_REQUESTS`` ``replace`` creates of ``PIPELINED_BYTES`` each while it reads
the answers, and reads the peak again. The bound the server keeps (the in-flight cap
and each call's data freed as it ends) is ``GROWTH_BOUND_MIB`` of peak growth; the
figure has no floor or peer (no other server holds such a cap), only that bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from _harness import (
    KIB,
    MIB,
    Figure,
    Settings,
    Unavailable,
    main_of,
    pending_reason,
    spice_coding,
    summarize,
)

SECTION: Final = "pipelining"
PIPELINED_BYTES: Final = 256 * KIB
PIPELINED_REQUESTS: Final = 2000
QUICK_REQUESTS: Final = 200
GROWTH_BOUND_MIB: Final = 192
ANSWER_SECONDS: Final = 300.0
READ_BYTES: Final = 1 << 20


def _vm(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * KIB
    raise Unavailable(f"/proc/PID/status has no {field}")


def _frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _call(ident: object, path: str, content: str) -> bytes:
    arguments = {"path": path, "content": content, "create": True}
    params = {"name": "replace", "arguments": arguments}
    return _frame({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


def _lines(fd: int, buffer: bytearray) -> list[dict[str, Any]]:
    chunk = os.read(fd, READ_BYTES)
    if not chunk:
        raise Unavailable("the server closed stdout early")
    buffer += chunk
    messages = []
    while (end := buffer.find(b"\n")) >= 0:
        messages.append(json.loads(bytes(buffer[:end])))
        del buffer[: end + 1]
    return messages


def _answer(fd: int, buffer: bytearray, ident: object) -> dict[str, Any]:
    deadline = time.monotonic() + ANSWER_SECONDS
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(deadline - time.monotonic()):
                for message in _lines(fd, buffer):
                    if message.get("id") == ident:
                        return message
    raise Unavailable("no answer within the bound")


def measure(count: int) -> dict[str, float]:
    """One run: idle RSS, idle peak, peak after ``count`` pipelined creates, and wall time."""
    root = Path(tempfile.mkdtemp(prefix="spice-bench-pipe-")).resolve()
    server = subprocess.Popen(
        [str(spice_coding()), "--root", str(root), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    into, out = server.stdin.fileno(), server.stdout.fileno()
    buffer = bytearray()
    content = "x" * PIPELINED_BYTES
    try:
        initialize = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench-pipelining", "version": "0"},
        }
        init = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": initialize}
        os.write(into, _frame(init))
        _answer(out, buffer, "init")
        os.write(into, _frame({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.stdin.write(_call("warm", "warm.txt", content))
        server.stdin.flush()
        _answer(out, buffer, "warm")
        idle_rss, idle_peak = _vm(server.pid, "VmRSS"), _vm(server.pid, "VmHWM")
        started = time.perf_counter()
        answered = _pipeline(into, out, buffer, count, content)
        seconds = time.perf_counter() - started
        peak = _vm(server.pid, "VmHWM")
        if answered != count:
            raise Unavailable(f"{answered} of {count} requests answered")
    finally:
        server.stdin.close()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
        server.stdout.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "idle_rss_mib": idle_rss / MIB,
        "peak_mib": peak / MIB,
        "growth_mib": (peak - max(idle_rss, idle_peak)) / MIB,
        "seconds": seconds,
    }


def _pipeline(into: int, out: int, buffer: bytearray, count: int, content: str) -> int:
    os.set_blocking(into, False)
    answered = 0
    sent = 0
    pending = memoryview(b"")
    deadline = time.monotonic() + ANSWER_SECONDS
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        selector.register(into, selectors.EVENT_WRITE)
        writing = True
        while answered < count and time.monotonic() < deadline:
            for key, _events in selector.select(1.0):
                if key.fd == out:
                    answered += sum("id" in m and "method" not in m for m in _lines(out, buffer))
                    continue
                if not pending and sent < count:
                    pending = memoryview(_call(sent, f"d/{sent}.txt", content))
                    sent += 1
                if pending:
                    with contextlib.suppress(BlockingIOError):
                        pending = pending[os.write(into, pending) :]
                elif writing:
                    selector.unregister(into)
                    writing = False
    os.set_blocking(into, True)
    return answered


def run(settings: Settings) -> list[Figure]:
    """Idle RSS, peak RSS and peak growth under pipelining (no reference: a bound)."""
    count = QUICK_REQUESTS if settings.quick else PIPELINED_REQUESTS
    label = f"{count} pipelined {PIPELINED_BYTES // KIB} KiB replace creates over stdio"
    samples: dict[str, list[float]] = {"idle_rss_mib": [], "peak_mib": [], "growth_mib": []}
    walls: list[float] = []
    error: str | None = None
    for _ in range(settings.memory_repeats):
        try:
            measured = measure(count)
        except (Unavailable, OSError, subprocess.SubprocessError) as failure:
            error = pending_reason(failure)
            break
        for key, values in samples.items():
            values.append(measured[key])
        walls.append(measured["seconds"])
    notes: tuple[str, ...] = (
        f"bound on the growth: {GROWTH_BOUND_MIB} MiB (contract 9.5, issue 16)",
    )
    if walls:
        notes += (f"wall: median {summarize(walls, 's').median:.2f} s",)
    return [
        Figure(
            SECTION,
            f"{label}: {name}",
            summarize(samples[key], "MiB") if error is None else None,
            "none",
            "the server's bound" if key == "growth_mib" else "",
            None,
            unavailable=error,
            ratio_applies=False,
            notes=notes,
        )
        for key, name in (
            ("idle_rss_mib", "idle RSS (after one call)"),
            ("peak_mib", "peak RSS (VmHWM)"),
            ("growth_mib", "peak RSS growth over idle"),
        )
    ]


if __name__ == "__main__":
    sys.exit(main_of(run))
