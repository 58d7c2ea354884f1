"""Standard-library floors: the least work each tool's job needs, with no tool around it.

- read: ``open`` + ``fstat`` + ``pread`` + UTF-8 decode + SHA-256 (whole file) +
  ``json.dumps`` of the same answer fields;
- replace: read and hash the current file (the expected-digest check), write a
  same-directory temporary file, ``fsync``, ``rename``, ``fsync`` the directory;
- shell: ``asyncio.create_subprocess_exec`` + drain stdout/stderr in chunks + ``wait``.

This module imports nothing but the standard library and ``_harness``, so the
memory floors measure an interpreter without our packages loaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from pathlib import Path
from typing import Final

from _harness import KIB, Unavailable, dumps

DRAIN_CHUNK: Final = 64 * KIB


def floor_read(root: Path, relative: str, offset: int, limit: int) -> str:
    """The least a read must do: open, pread the page, hash a whole file, encode JSON."""
    fd = os.open(root / relative, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        total = os.fstat(fd).st_size
        data = os.pread(fd, limit, offset)
    finally:
        os.close(fd)
    end = offset + len(data)
    answer: dict[str, object] = {
        "ok": True,
        "path": relative,
        "offset": offset,
        "bytes": len(data),
        "total_bytes": total,
        "truncated": end < total,
        "encoding": "utf-8",
        "content": data.decode("utf-8"),
    }
    if end < total:
        answer["next_offset"] = end
    if offset == 0 and end == total:
        answer["sha256"] = hashlib.sha256(data).hexdigest()
    return dumps(answer)


def floor_replace(root: Path, relative: str, content: bytes, expected: str) -> str:
    """The least a durable replace must do: check, temp write, fsync, rename, fsync dir."""
    target = root / relative
    directory = target.parent
    with open(target, "rb") as current:
        if hashlib.sha256(current.read()).hexdigest() != expected:
            raise Unavailable("failed: the floor saw a stale file")
    temporary = directory / f".floor-{secrets.token_hex(16)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, target)
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
    return hashlib.sha256(content).hexdigest()


async def _drain(stream: asyncio.StreamReader | None) -> int:
    if stream is None:
        return 0
    seen = 0
    while chunk := await stream.read(DRAIN_CHUNK):
        seen += len(chunk)
    return seen


async def floor_shell(argv: list[str], workdir: Path) -> int:
    """The least a shell call must do: spawn, drain both pipes, wait."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=workdir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await asyncio.gather(_drain(process.stdout), _drain(process.stderr))
    return await process.wait()
