"""A raw JSON-RPC peer of a real ``spice-coding serve`` subprocess (newline-delimited JSON).

It writes frames byte for byte (valid or not) and reads what comes back, every wait
bounded; ``pipeline`` keeps writing while it reads, as a client that pipelines does.
On POSIX it waits on the pipes with a selector; Windows cannot select on pipes, so there a
daemon thread reads stdout into a queue and ``pipeline`` writes from a second thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, final

SERVER: Final = Path(sys.executable).parent / "spice-coding"
ANSWER_SECONDS: Final = 30.0
"""How long the peer waits for an answer it expects (a bound, not a speed)."""

EXIT_SECONDS: Final = 30.0
PROTOCOL_VERSION: Final = "2025-06-18"
READ_BYTES: Final = 1 << 20
THREADED: Final = sys.platform == "win32"
"""Whether stdout is read in a thread (Windows: no selector waits on a pipe)."""


def request(ident: object, method: str, params: object | None = None) -> dict[str, Any]:
    """A JSON-RPC request object (``params`` left out when ``None``)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        message["params"] = params
    return message


def tool_call(ident: object, name: str, arguments: object, **meta: object) -> dict[str, Any]:
    """A ``tools/call`` request; ``meta`` becomes its ``_meta`` (e.g. ``progressToken``)."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = dict(meta)
    return request(ident, "tools/call", params)


def encode(message: object) -> bytes:
    """One frame: the message as compact JSON and a newline."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def pump(fd: int, put: Callable[[bytes], None]) -> None:
    """Read ``fd`` to its end in the calling (reading) thread: each chunk goes to ``put``,
    then ``b""`` (also when the read fails, as when the end was closed)."""
    chunk = b"-"
    while chunk:
        try:
            chunk = os.read(fd, READ_BYTES)
        except OSError:
            chunk = b""
        put(chunk)


def vm_bytes(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field (``VmHWM``, ``VmRSS``) in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


@final
class RawPeer:
    """One ``spice-coding serve`` subprocess and the raw ends of its stdin and stdout."""

    def __init__(self, root: Path, *arguments: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [str(SERVER), "--root", str(root), "serve", *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        self._buffer = b""
        self.last_line_bytes = 0
        """Bytes of the last message line read (its newline included)."""
        self._selector = selectors.DefaultSelector()
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._ended = False
        if THREADED:
            threading.Thread(target=self._read_all, name="raw-peer", daemon=True).start()
        else:
            self._selector.register(self._out, selectors.EVENT_READ)

    def _read_all(self) -> None:
        """The reading thread (Windows): every chunk of stdout, then ``b""`` at its end."""
        pump(self._out, self._chunks.put)

    def _next_chunk(self, seconds: float) -> bytes | None:
        """The next chunk of stdout, ``b""`` at its end, ``None`` when ``seconds`` pass."""
        if self._ended:
            return b""
        if THREADED:
            try:
                chunk = self._chunks.get(timeout=max(seconds, 0.0))
            except queue.Empty:
                return None
        elif not self._selector.select(seconds):
            return None
        else:
            chunk = os.read(self._out, READ_BYTES)
        self._ended = not chunk
        return chunk

    @property
    def pid(self) -> int:
        return self.process.pid

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def write(self, data: bytes) -> None:
        """Write ``data`` whole (blocking)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def send(self, *messages: object) -> None:
        self.write(b"".join(encode(message) for message in messages))

    def initialize(self) -> dict[str, Any]:
        """The handshake; returns the ``initialize`` answer."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw-peer", "version": "0"},
        }
        self.send(request("init", "initialize", params))
        answer = self.answer("init")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def messages(self, seconds: float = ANSWER_SECONDS) -> Iterator[dict[str, Any]]:
        """Messages from the server until EOF or ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                self.last_line_bytes = len(line) + 1  # what a client buffers, newline included
                yield json.loads(line)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            chunk = self._next_chunk(remaining)
            if not chunk:
                return
            self._buffer += chunk

    def answer(self, ident: object, seconds: float = ANSWER_SECONDS) -> dict[str, Any]:
        """The answer to ``ident`` (messages before it are dropped); fails if none comes."""
        for message in self.messages(seconds):
            if "method" not in message and message.get("id") == ident:
                return message
        raise AssertionError("no answer came within the bound")

    def pipeline(
        self, frames: Sequence[bytes], on_message: Callable[[dict[str, Any]], None]
    ) -> int:
        """Write every frame while reading; returns how many answers (id-carrying) came.

        Reads until as many answers as frames have come (or the bound passes).
        """
        if THREADED:
            return self._pipeline_threaded(frames, on_message)
        os.set_blocking(self._in, False)
        selector = selectors.DefaultSelector()
        selector.register(self._out, selectors.EVENT_READ)
        selector.register(self._in, selectors.EVENT_WRITE)
        pending = iter(frames)
        current = memoryview(b"")
        answers = 0
        deadline = time.monotonic() + ANSWER_SECONDS + len(frames)
        try:
            while answers < len(frames) and time.monotonic() < deadline:
                for key, _events in selector.select(1.0):
                    if key.fd == self._out:
                        answers += self._drain(on_message)
                        continue
                    if not current:
                        current = memoryview(next(pending, b""))
                    if not current:
                        selector.unregister(self._in)
                        continue
                    with contextlib.suppress(BlockingIOError):
                        current = current[os.write(self._in, current) :]
        finally:
            selector.close()
            os.set_blocking(self._in, True)
        return answers

    def _pipeline_threaded(
        self, frames: Sequence[bytes], on_message: Callable[[dict[str, Any]], None]
    ) -> int:
        """``pipeline`` on Windows: a thread writes the frames (blocking) while this reads."""
        writer = threading.Thread(
            target=self._write_frames, args=(frames,), name="raw-peer-writer", daemon=True
        )
        writer.start()
        answers = 0
        deadline = time.monotonic() + ANSWER_SECONDS + len(frames)
        while answers < len(frames) and time.monotonic() < deadline:
            chunk = self._next_chunk(1.0)
            if chunk is not None:
                answers += self._take(chunk, on_message)
        writer.join(max(deadline - time.monotonic(), 0.0))
        return answers

    def _write_frames(self, frames: Sequence[bytes]) -> None:
        with contextlib.suppress(OSError):  # the server went away: the answers tell
            for data in frames:
                self.write(data)

    def _drain(self, on_message: Callable[[dict[str, Any]], None]) -> int:
        return self._take(os.read(self._out, READ_BYTES), on_message)

    def _take(self, chunk: bytes, on_message: Callable[[dict[str, Any]], None]) -> int:
        """Take one chunk of stdout; hand on each whole message; how many were answers."""
        if not chunk:
            raise AssertionError("the server closed stdout early")
        self._buffer += chunk
        answers = 0
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            answers += "id" in message and "method" not in message
            on_message(message)
        return answers

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        if not self.process.stdin.closed:
            self.process.stdin.close()

    def finish(self, seconds: float = EXIT_SECONDS) -> tuple[list[dict[str, Any]], int, str]:
        """Close stdin; every message still to come, the exit code and stderr (bounded)."""
        self.close_stdin()
        rest = list(self.messages(seconds))
        code = self.process.wait(seconds)
        assert self.process.stderr is not None
        return rest, code, self.process.stderr.read().decode("utf-8", "replace")

    def stop(self) -> None:
        """End the server whatever state it is in (for cleanup)."""
        self.close_stdin()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(EXIT_SECONDS)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self._selector.close()
