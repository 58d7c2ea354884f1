"""Where an open directory lies beneath the root, as the kernel resolved it (POSIX).

``replace`` opens a parent through symbolic links beneath the root, so the path the model
sent (``link/config``) may reach a protected one (``.git/config``). ``real_relative``
tells the directory's own path beneath the root: from ``/proc/self/fd`` where it is
(Linux), else by walking up through ``..`` and finding each directory's name in its
parent by its identity (at most ``MAXIMUM_DEPTH`` levels, ``MAXIMUM_ENTRIES`` names read
per level). ``None`` when it cannot be told: the caller refuses then.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

__all__ = ["MAXIMUM_DEPTH", "MAXIMUM_ENTRIES", "real_relative"]

MAXIMUM_DEPTH: Final = 2048
"""Most levels the walk climbs (a 4096-byte path has at most 2048 components)."""

MAXIMUM_ENTRIES: Final = 1_000_000
"""Most names the walk reads in one parent before it gives up."""

_PROC: Final = "/proc/self/fd"
# POSIX-only flags with a default: the module imports on Windows, which never calls it.
_DIRECTORY: Final = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _proc_path(fd: int) -> str | None:
    try:
        path = os.readlink(f"{_PROC}/{fd}")
    except OSError:
        return None
    return path if path.startswith("/") and not path.endswith(" (deleted)") else None


def _proc_relative(root_fd: int, dir_fd: int) -> str | None:
    root, here = _proc_path(root_fd), _proc_path(dir_fd)
    if root is None or here is None:
        return None
    if here == root:
        return "."
    prefix = root.rstrip("/") + "/"
    return here[len(prefix) :] if here.startswith(prefix) else None


def _name_in(parent: int, identity: tuple[int, int]) -> str | None:
    """The name of the directory ``identity`` in ``parent`` (bounded), else ``None``."""
    with os.scandir(parent) as entries:
        for count, entry in enumerate(entries):
            if count >= MAXIMUM_ENTRIES:
                return None
            if entry.inode() != identity[1]:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) == identity:
                return entry.name
    return None


def walked_relative(root_fd: int, dir_fd: int) -> str | None:
    """The walk up through ``..`` (see the module docstring)."""
    root = os.fstat(root_fd)
    top = (root.st_dev, root.st_ino)
    names: list[str] = []
    fd = os.dup(dir_fd)
    try:
        for _ in range(MAXIMUM_DEPTH):
            info = os.fstat(fd)
            identity = (info.st_dev, info.st_ino)
            if identity == top:
                return "/".join(reversed(names)) or "."
            parent = os.open("..", _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == identity:
                return None  # the file system's top: the root was not above
            name = _name_in(fd, identity)
            if name is None:
                return None
            names.append(name)
        return None
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def real_relative(root_fd: int, dir_fd: int) -> str | None:
    """The ``/``-separated path of ``dir_fd`` beneath ``root_fd`` (``"."`` for the root)."""
    found = _proc_relative(root_fd, dir_fd)
    return found if found is not None else walked_relative(root_fd, dir_fd)
