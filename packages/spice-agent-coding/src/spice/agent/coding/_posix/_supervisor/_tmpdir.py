"""The removal of a call's private ``TMPDIR``, which its command may have made hard to remove.

Standard library only and free of package imports but ``_landlock``: the supervisor runs
it (compiled at the server's start) when the server dies before its join could.
"""

from __future__ import annotations

import os

if __package__:
    from ._landlock import suppress
else:  # the supervisor: ``BOOTSTRAP`` put the module, compiled at start, in sys.modules
    from _landlock import suppress  # type: ignore[import-not-found,no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


# -- the call's TMPDIR -------------------------------------------------------------------

# POSIX-only flags with a default: the module imports on Windows, which never runs this.
_NO_FOLLOW_DIRECTORY: Final = (
    getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
_TREE_FLAGS: Final = os.O_RDONLY | _NO_FOLLOW_DIRECTORY
_O_PATH: Final = getattr(os, "O_PATH", 0)
_HOLD_FLAGS: Final = _O_PATH | _NO_FOLLOW_DIRECTORY
_OWNER_ALL: Final = 0o700


def remove_tree(path: str | bytes) -> bool:
    """Remove the directory ``path`` and everything beneath it; ``True`` once it is gone.

    For the call's ``TMPDIR``, which its command may have made hard to remove. No
    symlink is ever followed: each level is opened ``O_NOFOLLOW`` beneath the one
    above, and a symlink is removed as a name. A directory the command made
    unreadable or unwritable (``chmod 000``) gets its owner's ``rwx`` back first, as
    ``tempfile.TemporaryDirectory`` does, through a descriptor of that very directory
    (``O_PATH`` on Linux), so no other file's mode can change. Never raises: what
    cannot be removed makes the answer ``False``.
    """
    parent, name = os.path.split(os.fsencode(path).rstrip(b"/"))
    try:
        parent_fd = os.open(parent or b"/", _TREE_FLAGS)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        with suppress(OSError, RecursionError):
            _remove_entry(parent_fd, name)
        try:
            os.lstat(name, dir_fd=parent_fd)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return False
    finally:
        os.close(parent_fd)


def _remove_entry(parent: int, name: str | bytes) -> None:
    try:
        mode = os.lstat(name, dir_fd=parent).st_mode
    except FileNotFoundError:
        return
    if (mode & 0o170000) != 0o040000:  # not a directory (S_ISDIR without ``stat``)
        os.unlink(name, dir_fd=parent)
        return
    directory = _open_own_directory(parent, name)
    try:
        for entry in os.listdir(directory):
            _remove_entry(directory, entry)
    finally:
        os.close(directory)
    os.rmdir(name, dir_fd=parent)


def _open_own_directory(parent: int, name: str | bytes) -> int:
    """Open ``name`` (a directory, never a symlink) with its owner's ``rwx`` restored."""
    try:
        directory = os.open(name, _TREE_FLAGS, dir_fd=parent)
    except PermissionError:
        if not _O_PATH:
            raise  # only Linux can hold a directory it cannot read
        held = os.open(name, _HOLD_FLAGS, dir_fd=parent)
        try:
            mode = os.fstat(held).st_mode
            os.chmod(f"/proc/self/fd/{held}", (mode & 0o7777) | _OWNER_ALL)
        finally:
            os.close(held)
        directory = os.open(name, _TREE_FLAGS, dir_fd=parent)
    mode = os.fstat(directory).st_mode
    if mode & _OWNER_ALL != _OWNER_ALL:
        try:
            os.fchmod(directory, (mode & 0o7777) | _OWNER_ALL)
        except BaseException:
            os.close(directory)
            raise
    return directory
