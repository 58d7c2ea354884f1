"""Section "reload": a settings file's change rebuilds the launcher off the event loop (13.5).

``serve --settings`` on a worktree of ``FILES`` files. Each round sends a ``shell`` call
(``true``) and at once a ``read`` of a small file, and times the ``read``'s answer. In the
subject's rounds the settings file changed just before (its ``max_processes``), so the
shell call's start builds the launcher again: the start facts, the guard's repair and scan,
the watch of linked modules. The reference's rounds leave the file alone. Rounds alternate,
so drift lands on both. The target: the ``read`` during a reload within 1.2x of without
(contract 13.5; on 5692b09, before the rebuild left the loop, it was 100 ms against 5-21).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_reload.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Final

from _harness import Figure, Settings, Target, main_of, milliseconds, spice_coding, unavailable

SECTION: Final = "reload"
FILES: Final = 100_000
DIRECTORIES: Final = 500
VISIBLE: Final = "/var/tmp"  # noqa: S108 - outside the private /tmp of the namespace path
ANSWER_SECONDS: Final = 120.0
"""Hang guard for one answer (never a timing assertion)."""
DURING: Final = "read during a settings reload beside read without (100,000 files)"
TARGETS: Final = (Target(SECTION, DURING, most=1.2, source="contract 13.5"),)
"""A ``read`` while the launcher is rebuilt waits at most 1.2x one without a rebuild."""

_ENVIRONMENT: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


def _worktree(base: Path) -> Path:
    root = base / "worktree"
    for index in range(FILES):
        directory = root / f"d{index % DIRECTORIES}"
        if index < DIRECTORIES:
            directory.mkdir(parents=True)
        (directory / f"f{index}.txt").write_bytes(b"x\n")
    (root / "a").write_text("a\n")
    (root / ".mcp.json").write_text("{}\n")  # a protected path for the guard to scan
    return root.resolve()


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, 0o600)


class _Server:
    """``serve`` over stdio, spoken to line by line (one answer per id)."""

    def __init__(self, root: Path, settings: Path) -> None:
        environment = {name: os.environ[name] for name in _ENVIRONMENT if name in os.environ}
        self.process = subprocess.Popen(
            [str(spice_coding()), "--root", str(root), "--settings", str(settings), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**environment, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        self.next_id = 1
        self._send(
            {
                "jsonrpc": "2.0",
                "id": self._id(),
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "bench-reload", "version": "1"},
                },
            }
        )
        self._line()
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:
            raise RuntimeError("the server's pipes are gone")
        return stdin, stdout

    def _send(self, message: dict[str, object]) -> None:
        stdin, _ = self._pipes()
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()

    def _line(self) -> dict[str, object]:
        _, stdout = self._pipes()
        line = stdout.readline()
        if not line:
            raise RuntimeError("the server closed its output")
        answer: dict[str, object] = json.loads(line)
        return answer

    def _call(self, name: str, arguments: dict[str, object]) -> int:
        ident = self._id()
        params = {"name": name, "arguments": arguments}
        self._send({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})
        return ident

    def round(self) -> float:
        """A shell call and at once a read; the seconds the read's answer took."""
        self._call("shell", {"argv": ["true"]})
        started = time.perf_counter()
        read = self._call("read", {"path": "a", "limit": 1})
        waited: float | None = None
        for _ in range(2):
            answer = self._line()
            if answer.get("id") == read:
                waited = time.perf_counter() - started
            result = answer.get("result")
            if not isinstance(result, dict) or result.get("isError"):
                raise RuntimeError("a benchmarked call failed")
        if waited is None:
            raise RuntimeError("no answer to the read")
        return waited

    def close(self) -> None:
        stdin, _ = self._pipes()
        stdin.close()
        try:
            self.process.wait(ANSWER_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    if not spice_coding().exists():
        return [unavailable(SECTION, DURING, "the spice-coding script is not installed")]
    visible = VISIBLE if os.access(VISIBLE, os.W_OK) else os.getcwd()
    base = Path(tempfile.mkdtemp(prefix="spice-bench-reload-", dir=visible))
    during: list[float] = []
    without: list[float] = []
    try:
        root = _worktree(base)
        config = base / "config"
        config.mkdir(mode=0o700)
        path = config / "settings.toml"
        _write(path, "max_processes = 500\n")
        server = _Server(root, path)
        try:
            rounds = settings.warmup + settings.slow_repeats
            for index in range(rounds):
                _write(path, f"max_processes = {400 - index}\n")  # the next call rebuilds
                changed = server.round()
                unchanged = server.round()
                if index >= settings.warmup:
                    during.append(changed)
                    without.append(unchanged)
        finally:
            server.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return [
        Figure(
            SECTION,
            DURING,
            milliseconds(during),
            "peer",
            "read, settings unchanged",
            milliseconds(without),
            notes=(
                "the shell call's start rebuilds the launcher in a worker thread",
                f"{FILES:,} files in {DIRECTORIES} directories; sandbox auto",
            ),
        )
    ]


if __name__ == "__main__":
    raise SystemExit(main_of(run))
