"""An overlay's upper layer read as the exact list of a call's changes (contract 13.1).

The kernel wrote the upper layer while the call ran: every path the call created,
changed, deleted or renamed is there, and nothing else is (staging-notes §4). Reading it
is O(changes), never a scan of the worktree, and it has no bound an agent can fill to
hide a change: past ``MAXIMUM_UPPER_ENTRIES`` the whole stage is refused (nothing of it
is applied), never cut.

What the upper holds, and the change it is:

- a *whiteout* (a character device 0/0): the lower path is deleted;
- an *opaque* directory (``user.overlay.opaque`` = ``y``): the lower directory's entries
  the upper does not hold are deleted;
- a regular file or a symbolic link: added where the lower has nothing, else modified
  when its bytes, target, kind or mode differ (a copy-up of a file whose content and mode
  are unchanged, by a ``touch`` or an open for writing, is no change);
- a directory: added where the lower has none, modified where its mode or kind differs,
  and read further down; an added directory whose stage subtree holds nothing but the
  changes listed beneath it (no whiteout, no refused node, no leftover of a rename, no
  overlay attribute on a directory) is ``Change.whole``: the commit may move it in one
  rename;
- any other node (a FIFO, a socket, a device): never applied, listed as refused;
- a directory rename the supervisor was carrying out when the call ended
  (``RENAME_LEFTOVER``): never applied.

Files of the upper that share an inode were made as hard links of one another by the
call: they share ``Change.link``. The overlay's own ``user.overlay.*`` attributes never
reach a change. Nothing here follows a symbolic link: entries are looked at with
``lstat`` relative to directories opened without following links.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding._changes import Change, Kind, sorted_changes

from .._supervisor._renames import TEMPORARY_PREFIX

__all__ = [
    "COMPARED_BYTES",
    "MAXIMUM_UPPER_ENTRIES",
    "OPAQUE",
    "StageTooLarge",
    "UpperRead",
    "View",
    "is_whiteout",
    "read_upper",
]

MAXIMUM_UPPER_ENTRIES: Final = 1_000_000
"""Entries of an upper layer read at most; a larger stage is refused whole."""

COMPARED_BYTES: Final = 1 << 20
"""A copied-up file is compared with its lower in reads of this size."""

OPAQUE: Final = "user.overlay.opaque"
RENAME_LEFTOVER: Final = TEMPORARY_PREFIX
"""The supervisor's copy of a directory it renames for the command; one left by an ended
call is never applied."""
"""The attribute an unprivileged overlay (``userxattr``) marks an opaque directory with."""


class StageTooLarge(Exception):
    """The upper layer holds more than ``MAXIMUM_UPPER_ENTRIES`` entries."""


def is_whiteout(info: os.stat_result) -> bool:
    """Whether an upper entry is a whiteout: a character device numbered 0/0 (by type and
    device number, never by link count: whiteouts share one inode)."""
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _kind(info: os.stat_result) -> Kind | None:
    if stat.S_ISREG(info.st_mode):
        return "file"
    if stat.S_ISDIR(info.st_mode):
        return "directory"
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    return None


def _lstat(directory: int | None, name: str) -> os.stat_result | None:
    if directory is None:
        return None
    try:
        return os.lstat(name, dir_fd=directory)
    except OSError:
        return None


def _open_directory(directory: int | None, name: str) -> int | None:
    if directory is None:
        return None
    try:
        return os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory
        )
    except OSError:
        return None


def _opaque(directory: int, name: str) -> bool:
    try:
        path = f"/proc/self/fd/{directory}/{name}"
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _overlay_marked(directory: int, name: str) -> bool:
    """Whether ``name`` carries an attribute of the overlay's own (``user.overlay.*``,
    ``trusted.overlay.*``): such a directory is never moved into the worktree whole."""
    try:
        names = os.listxattr(f"/proc/self/fd/{directory}/{name}", follow_symlinks=False)
    except OSError:
        return True
    return any(n.startswith(("user.overlay.", "trusted.overlay.")) for n in names)


def _same_file(upper: int, lower: int, name: str, size: int) -> bool:
    """Whether two regular files (``name`` beneath both directories) hold the same bytes."""
    try:
        a = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upper)
    except OSError:
        return False
    try:
        try:
            b = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=lower)
        except OSError:
            return False
        try:
            done = 0
            while done < size:
                left, right = os.read(a, COMPARED_BYTES), os.read(b, COMPARED_BYTES)
                if left != right:
                    return False
                if not left:
                    return done == size
                done += len(left)
            return not os.read(a, 1) and not os.read(b, 1)
        finally:
            os.close(b)
    finally:
        os.close(a)


@final
@dataclass(frozen=True, slots=True)
class UpperRead:
    """The stage's changes (sorted), and the paths of nodes that are never applied."""

    changes: tuple[Change, ...]
    refused: tuple[str, ...]


@final
class _Reader:
    def __init__(self, upper_root: str) -> None:
        self.upper_root = upper_root
        self.changes: list[Change] = []
        self.refused: list[str] = []
        self.entries = 0
        self.links: dict[tuple[int, int], int] = {}
        self.counted: dict[tuple[int, int], int] = {}
        self.skipped = 0
        """Upper entries that are not a change (a whiteout over nothing, a leftover)."""

    def _count(self) -> None:
        self.entries += 1
        if self.entries > MAXIMUM_UPPER_ENTRIES:
            raise StageTooLarge

    def walk(self, upper: int, lower: int | None, prefix: str, *, hiding: bool) -> None:
        """Compare one upper directory with the lower one at the same path (``None``: the
        lower has no directory there). ``hiding``: this directory or one above it is
        opaque, so the lower entries the upper lacks are deleted."""
        names = sorted(os.listdir(upper))
        for name in names:
            self._count()
            if name.startswith(RENAME_LEFTOVER):
                self.skipped += 1
                continue  # a rename the supervisor was carrying out when the call ended
            path = f"{prefix}{name}"
            info = os.lstat(name, dir_fd=upper)
            below = _lstat(lower, name)
            was = None if below is None else (_kind(below) or "file")
            if is_whiteout(info):
                if was is not None:
                    self.changes.append(Change(path, "deleted", None, was))
                else:
                    self.skipped += 1
                continue
            kind = _kind(info)
            if kind is None:
                self.refused.append(path)
                continue
            if kind == "directory":
                self._directory(upper, lower, name, path, info, below, was, hiding=hiding)
                continue
            mode = None if kind == "symlink" else stat.S_IMODE(info.st_mode)
            source = os.path.join(self.upper_root, path)
            if was is None:
                link = self._link(info)
                self.changes.append(Change(path, "added", kind, None, mode, source, link))
                continue
            if kind == was and self._unchanged(upper, lower, name, info, below):
                continue
            link = self._link(info)
            self.changes.append(Change(path, "modified", kind, was, mode, source, link))
        if hiding and lower is not None:
            held = set(names)
            for name in sorted(os.listdir(lower)):
                if name in held:
                    continue
                self._count()
                below = _lstat(lower, name)
                if below is not None:
                    was = _kind(below) or "file"
                    self.changes.append(Change(f"{prefix}{name}", "deleted", None, was))

    def _directory(
        self,
        upper: int,
        lower: int | None,
        name: str,
        path: str,
        info: os.stat_result,
        below: os.stat_result | None,
        was: Kind | None,
        *,
        hiding: bool,
    ) -> None:
        mode = stat.S_IMODE(info.st_mode)
        inner_lower: int | None = None
        added = len(self.changes)
        marks = (self.skipped, len(self.refused))
        if was is None:
            self.changes.append(Change(path, "added", "directory", None, mode))
            if _overlay_marked(upper, name):
                self.skipped += 1
        elif was != "directory":
            self.changes.append(Change(path, "modified", "directory", was, mode))
        else:
            if below is not None and stat.S_IMODE(below.st_mode) != mode:
                self.changes.append(Change(path, "modified", "directory", "directory", mode))
            inner_lower = _open_directory(lower, name)
        child = _open_directory(upper, name)
        if child is None:
            raise OSError(errno.EIO, "an upper directory cannot be opened")
        try:
            self.walk(child, inner_lower, f"{path}/", hiding=hiding or _opaque(upper, name))
        finally:
            os.close(child)
            if inner_lower is not None:
                os.close(inner_lower)
        if was is None and (self.skipped, len(self.refused)) == marks:
            source = os.path.join(self.upper_root, path)
            self.changes[added] = Change(path, "added", "directory", None, mode, source, whole=True)

    def _unchanged(
        self,
        upper: int,
        lower: int | None,
        name: str,
        info: os.stat_result,
        below: os.stat_result | None,
    ) -> bool:
        if lower is None or below is None:
            return False
        if stat.S_ISLNK(info.st_mode):
            try:
                return os.readlink(name, dir_fd=upper) == os.readlink(name, dir_fd=lower)
            except OSError:
                return False
        if stat.S_IMODE(info.st_mode) != stat.S_IMODE(below.st_mode):
            return False
        if info.st_size != below.st_size:
            return False
        return _same_file(upper, lower, name, info.st_size)

    def _link(self, info: os.stat_result) -> int | None:
        if info.st_nlink < 2 or not stat.S_ISREG(info.st_mode):
            return None
        key = (info.st_dev, info.st_ino)
        return self.links.setdefault(key, len(self.links) + 1)


def read_upper(lower: str, upper: str) -> UpperRead:
    """The changes the upper layer ``upper`` makes to the worktree ``lower`` (both real
    absolute paths of directories). ``StageTooLarge`` past ``MAXIMUM_UPPER_ENTRIES``;
    ``OSError`` when the layers cannot be read. A hard-link group of one member (its other
    names lie outside the upper: the lower's) is no group."""
    reader = _Reader(upper)
    top = os.open(upper, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        bottom = os.open(lower, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            reader.walk(top, bottom, "", hiding=False)
        finally:
            os.close(bottom)
    finally:
        os.close(top)
    counts: dict[int, int] = {}
    for change in reader.changes:
        if change.link is not None:
            counts[change.link] = counts.get(change.link, 0) + 1
    changes = (
        c if c.link is None or counts[c.link] > 1 else dataclasses.replace(c, link=None)
        for c in reader.changes
    )
    return UpperRead(sorted_changes(changes), tuple(reader.refused))


@final
class View:
    """The worktree as it would be after the stage's changes (``_changes.After``): the
    upper first, then the lower where no whiteout, opaque directory or non-directory of
    the upper hides it. No symbolic link is followed, on either layer."""

    def __init__(self, lower: str, upper: str) -> None:
        self.lower = lower
        self.upper = upper

    def _layers(self, path: str) -> Iterator[tuple[str, bool]]:
        """Where ``path`` is to be looked at, in order: ``(layer root, is upper)``."""
        parts = path.split("/")
        lower_visible = True
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            info = _path_lstat(self.upper, prefix)
            if info is not None:
                if is_whiteout(info) or not stat.S_ISDIR(info.st_mode):
                    return
                if _path_opaque(self.upper, prefix):
                    lower_visible = False
            elif lower_visible:
                below = _path_lstat(self.lower, prefix)
                if below is None or not stat.S_ISDIR(below.st_mode):
                    return
        yield self.upper, True
        if lower_visible:
            yield self.lower, False

    def kind(self, path: str) -> Kind | None:
        for root, upper in self._layers(path):
            info = _path_lstat(root, path)
            if info is None:
                continue
            if upper and is_whiteout(info):
                return None
            return _kind(info)
        return None

    def read(self, path: str, limit: int) -> bytes | None:
        for root, upper in self._layers(path):
            info = _path_lstat(root, path)
            if info is None:
                continue
            if (upper and is_whiteout(info)) or not stat.S_ISREG(info.st_mode):
                return None
            try:
                fd = os.open(os.path.join(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                return None
            try:
                return os.read(fd, limit)
            finally:
                os.close(fd)
        return None


def _path_lstat(root: str, path: str) -> os.stat_result | None:
    try:
        return os.lstat(os.path.join(root, path))
    except OSError:
        return None


def _path_opaque(root: str, path: str) -> bool:
    try:
        return os.getxattr(os.path.join(root, path), OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False
