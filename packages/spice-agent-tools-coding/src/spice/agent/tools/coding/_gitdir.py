"""The git-directory rule (contract 13.1): what git would open as a repository runs nothing.

Git opens any directory as a repository whose ``HEAD`` names a ref or an object, whose
``objects`` and whose ``refs`` it may enter (``setup.c``, ``is_git_directory``): under any
name, at any depth, the worktree's root included. ``HEAD`` may be a symbolic link, and
``objects`` and ``refs`` may be links to directories, so this module takes any entry of
those three names for one (``git_directory``): it never misses a repository git opens.

Such a directory that a list of changes makes or changes keeps only what runs nothing:

- its ``config`` by the allow-list of 12.1 (``_gitconfig.filtered``);
- none of ``RUNNING`` (``hooks/``, ``info/``, ``commondir``, ``gitdir``,
  ``objects/info/alternates``, ``config.worktree``);
- no in-progress rebase or sequencer whose todo list holds ``exec`` (``TODOS``;
  ``rebase-apply/``, git's ``am`` and apply backend, keeps patches and no command list).

``hooks_directories`` reads a worktree's own ``core.hooksPath`` (bounded), so that the
directory it names (``.githooks/``, husky's ``.husky/``) is protected like ``hooks/``.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable
from typing import Final

from ._gitconfig import MAXIMUM_CONFIG_BYTES, hooks_paths

__all__ = [
    "MARKERS",
    "RUNNING",
    "TODOS",
    "TODO_BYTES",
    "git_directory",
    "git_spelling",
    "hooks_directories",
    "inside",
    "joined",
    "runs_a_command",
]

MARKERS: Final = ("HEAD", "objects", "refs")
"""The entries that make a directory one git opens as a repository."""

RUNNING: Final = (
    "hooks",
    "info",
    "commondir",
    "gitdir",
    "objects/info/alternates",
    "config.worktree",
)
"""What a git directory never keeps from a call: each runs a program, or says where git
reads more config, objects or attributes from."""

TODOS: Final = (("rebase-merge", "git-rebase-todo"), ("sequencer", "todo"))
"""An in-progress rebase's and cherry-pick's (or revert's) state directory and the todo
list in it that ``git rebase --continue`` or ``git cherry-pick --continue`` executes."""

TODO_BYTES: Final = 1024 * 1024
"""A todo list larger than this is never read: its state directory is refused."""

_GIT_NAMES: Final = {
    name.casefold(): name
    for name in (
        *MARKERS,
        "config",
        "hooks",
        "info",
        "commondir",
        "gitdir",
        "alternates",
        "config.worktree",
        *(part for pair in TODOS for part in pair),
    )
}
"""The names git reads in a git directory, by their case-folded spelling."""

_EXEC: Final = frozenset({"x", "exec"})
"""The todo command that runs a shell command, as git spells it (``sequencer.c``)."""

_STEP: Final = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_READ: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def git_spelling(path: str) -> str:
    """``path`` (``/``-separated) with each component git reads in a git directory spelled
    as git spells it: on a case-insensitive file system (Windows) ``src/CONFIG`` is the
    ``src/config`` git reads, so the rule must judge it under that name."""
    return "/".join(_GIT_NAMES.get(part.casefold(), part) for part in path.split("/"))


def joined(directory: str, name: str) -> str:
    """``directory/name`` as a change's path (``directory`` ``""`` is the root)."""
    return f"{directory}/{name}" if directory else name


def inside(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies beneath it (``""``: everything)."""
    return not directory or path == directory or path.startswith(f"{directory}/")


def git_directory(kind: Callable[[str], object], directory: str) -> bool:
    """Whether git would open ``directory`` as a repository, given ``kind(path)``, the
    kind of a path (``None``: nothing there). Any kind of ``HEAD``, ``objects`` and
    ``refs`` counts (a link may lead to what git accepts)."""
    return all(kind(joined(directory, name)) is not None for name in MARKERS)


def runs_a_command(todo: bytes) -> bool:
    """Whether a rebase or sequencer todo list holds a command that runs a program
    (``exec``/``x``, in any case and after any indentation).

    >>> runs_a_command(b"pick 1234 a\\n  X touch m\\n"), runs_a_command(b"# exec x\\n")
    (True, False)
    """
    for line in todo.splitlines():
        words = line.split(maxsplit=1)
        if words and words[0].decode("utf-8", "replace").casefold() in _EXEC:
            return True
    return False


def _read_bounded(fd: int) -> bytes | None:
    """All of the open regular file ``fd``, at most ``MAXIMUM_CONFIG_BYTES``."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= MAXIMUM_CONFIG_BYTES and (chunk := os.read(fd, 65536)):
            chunks.append(chunk)
            size += len(chunk)
        return None if size > MAXIMUM_CONFIG_BYTES else b"".join(chunks)
    except OSError:
        return None


def _config_by_descriptor(place: str) -> bytes | None:
    """``place/.git/config``, each step opened beneath the last without following a link."""
    try:
        fd = os.open(place, _STEP)
    except OSError:
        return None
    try:
        git = os.open(".git", _STEP, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        config = os.open("config", _READ, dir_fd=git)
    except OSError:
        return None
    finally:
        os.close(git)
    try:
        return _read_bounded(config)
    finally:
        os.close(config)


def _linked(found: os.stat_result) -> bool:
    """A symbolic link, or on Windows any reparse point (a junction too)."""
    reparse = getattr(found, "st_file_attributes", 0) & getattr(
        stat, "FILE_ATTRIBUTE_REPARSE_POINT", 0
    )
    return stat.S_ISLNK(found.st_mode) or bool(reparse)


def _config_by_path(place: str) -> bytes | None:
    """``place/.git/config`` where directories cannot be opened by descriptor (Windows):
    each step is looked at without following a link or reparse point, and the file opened
    must be the one looked at (same device and file index), else nothing is read."""
    git = os.path.join(place, ".git")
    config = os.path.join(git, "config")
    try:
        steps = (os.lstat(place), os.lstat(git), os.lstat(config))
    except OSError:
        return None
    if any(_linked(step) for step in steps) or not (
        stat.S_ISDIR(steps[0].st_mode) and stat.S_ISDIR(steps[1].st_mode)
    ):
        return None
    try:
        fd = os.open(config, _READ | getattr(os, "O_BINARY", 0))
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (steps[2].st_dev, steps[2].st_ino):
            return None  # replaced between the look and the open
        return _read_bounded(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def hooks_directories(place: str) -> tuple[str, ...]:
    """The directories ``place``'s own repository names by ``core.hooksPath`` in its
    ``place/.git/config`` (read without following a link, ``MAXIMUM_CONFIG_BYTES`` at
    most), relative to ``place``, ``/``-separated; husky's ``.husky/_`` also names its
    parent (its wrappers run ``.husky/<hook>``). One outside ``place`` is not named.
    Where directories cannot be opened by descriptor (Windows), the path route is taken."""
    by_descriptor = os.open in os.supports_dir_fd
    data = _config_by_descriptor(place) if by_descriptor else _config_by_path(place)
    if data is None:
        return ()
    found: list[str] = []
    for value in hooks_paths(data.decode("utf-8", "replace")):
        if value.startswith("~"):
            continue  # the user's home: outside the worktree
        absolute = posixpath.normpath(posixpath.join(place, value))
        relative = posixpath.relpath(absolute, place)
        if relative == "." or relative.startswith("../") or relative == "..":
            continue
        found.append(relative)
        parent, name = posixpath.split(relative)
        if name == "_" and parent:
            found.append(parent)
    return tuple(dict.fromkeys(found))
