"""``replace`` asks the one policy's ``judge`` (13.1): a list of one file and the
directories its create made, judged against the worktree as it would be after the write.

So four creates can never make a git directory that runs code, in whatever order they
come: the create that would complete one (or write its ``config`` with a key the
allow-list does not keep) is refused with the protected-path code. A ``config`` the
judge would keep with other bytes is refused too: ``replace`` writes the bytes it was
given or nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Final, final

from ._changes import After, Change, Kind
from ._config import Config
from ._judge import judge

__all__ = ["DiskAfter", "refused_by_judge"]

_READ: Final = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NONBLOCK", 0)
)


@final
class DiskAfter:
    """The worktree beneath ``root_fd`` with the file ``path`` holding ``data``."""

    def __init__(self, root_fd: int, path: str, data: bytes) -> None:
        self._root_fd = root_fd
        self._path = path
        self._data = data

    def kind(self, path: str) -> Kind | None:
        if path == self._path:
            return "file"
        try:
            mode = os.lstat(path, dir_fd=self._root_fd).st_mode
        except (OSError, ValueError):
            return None
        if stat.S_ISDIR(mode):
            return "directory"
        if stat.S_ISLNK(mode):
            return "symlink"
        return "file"

    def read(self, path: str, limit: int) -> bytes | None:
        if path == self._path:
            return self._data[:limit]
        try:
            fd = os.open(path, _READ, dir_fd=self._root_fd)
        except (OSError, ValueError):
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks: list[bytes] = []
            size = 0
            while size < limit and (chunk := os.read(fd, min(65536, limit - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)


def refused_by_judge(
    config: Config, after: After, relative: str, data: bytes, creating: bool, made: int
) -> bool:
    """Whether the policy's ``judge`` refuses writing ``data`` at ``relative`` (the real
    path beneath the root, ``/``-separated, in git's spelling on a case-insensitive file
    system: ``git_spelling``) after the create made the last ``made`` directories above
    it, or would keep it with other bytes; ``after`` is the worktree with ``data`` there
    (``DiskAfter`` on POSIX, ``_windows._after.WindowsAfter`` on Windows)."""
    policy = config.protected_paths
    if policy.empty:
        return False
    parts = relative.split("/")
    made_paths: Sequence[str] = [
        "/".join(parts[:depth]) for depth in range(max(1, len(parts) - made), len(parts))
    ]
    changes = [Change(path, "added", "directory", None) for path in made_paths]
    if creating:
        changes.append(Change(relative, "added", "file", None))
    else:
        changes.append(Change(relative, "modified", "file", "file"))
    judged = judge(policy, config.root, changes, after)
    rewritten = judged.rewritten.get(relative)
    return bool(judged.refused) or (rewritten is not None and rewritten != data)
