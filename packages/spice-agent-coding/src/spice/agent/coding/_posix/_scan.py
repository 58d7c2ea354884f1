"""The scan of the join's guard: which protected paths exist beneath the writable places.

``scan`` walks each place, not following a symbolic link, breadth first to ``SCAN_DEPTH``
levels outside git directories and ``GIT_DEPTH`` inside them, never into a git
directory's objects (but ``objects/info/alternates``), refs or logs; each protected path
it meets (``ProtectedPaths``) is kept as an ``Entry`` with its bytes (``ENTRY_BYTES``
each, ``SNAPSHOT_BYTES`` in all; a larger one keeps its digest).

No bound an agent can fill skips a git directory's files (contract 13.1): each place's
own ``.git`` is looked up by name before anything is listed, and in every git directory
met the files that run or redirect (``config``, ``commondir``, ``hooks/``, ...) are looked
up by name, not found by a listing; git directories are walked before the rest with
their own bounds (``GIT_ENTRIES`` entries, ``GIT_RECORDS`` kept), and the protected trees
met outside them (``.claude/``) are recorded only after every git directory, within
``SCAN_ENTRIES`` and ``SNAPSHOT_ENTRIES``. ``also`` names paths looked up by name
whatever the bounds (the baseline's, so a join compares every one of them).

With ``Known`` it remembers what it read: a directory whose status and change time are
those of its last listing is not listed again, a file whose status is unchanged is not
read again (a command cannot set a change time), unless the change lies within
``RACY_NS``.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._gitdir import TODOS
from spice.agent.tools.coding._protected import (
    GIT_DIRECTORY_FILES,
    GIT_DIRECTORY_TREES,
    PLAIN_SETTINGS,
    SETTINGS,
    fold,
)

__all__ = [
    "ENTRY_BYTES",
    "GIT_DEPTH",
    "GIT_ENTRIES",
    "GIT_RECORDS",
    "RACY_NS",
    "SCAN_DEPTH",
    "SCAN_ENTRIES",
    "SNAPSHOT_BYTES",
    "SNAPSHOT_ENTRIES",
    "Entry",
    "Known",
    "Snapshot",
    "scan",
]

SCAN_DEPTH: Final = 64
"""Directory levels below a writable place the scan looks at outside git directories
(breadth first: the entry bound cuts the deepest first)."""

GIT_DEPTH: Final = 16
"""Directory levels the scan looks at inside a git directory (submodules nest)."""

SCAN_ENTRIES: Final = 50_000
"""Directory entries one scan reads in all outside git directories; beyond it the scan is
incomplete."""

GIT_ENTRIES: Final = 50_000
"""Directory entries one scan reads in all inside git directories (a budget of their own:
a flood outside them never cuts them)."""

GIT_RECORDS: Final = 4096
"""Protected entries inside git directories one baseline keeps (beside
``SNAPSHOT_ENTRIES``)."""

_PROBED: Final = (*GIT_DIRECTORY_FILES, *GIT_DIRECTORY_TREES)
"""What is looked up by name in every git directory the scan meets."""

ENTRY_BYTES: Final = 1024 * 1024
"""A protected file's bytes kept; a larger one keeps its digest and is removed if changed."""

SNAPSHOT_BYTES: Final = 16 * 1024 * 1024
"""Bytes of protected files one baseline keeps in all (the rest: digests only)."""

SNAPSHOT_ENTRIES: Final = 4096
"""Protected entries one baseline keeps; beyond it the scan is incomplete."""

RACY_NS: Final = 2_000_000_000
"""A file changed less than this long before a scan is read again whatever its status
says (a change within the file system's clock tick keeps the same times)."""

Status = tuple[int, int, int, int, int, int]
"""Device, inode, mode, size, modification and change times (ns) of a path."""
Visit = tuple[str, str, str, int, int]
"""A directory the scan looks at: its place, path, path beneath the place, depth and git
level (0 outside a git directory)."""
Action = tuple[str, str, str, int]
"""What a scan does with one entry: ``walk``, ``record``, ``alternates``, ``file``
(nothing: one for all of a directory's such entries, their number in the last field) or
``truncated`` (the listing stopped at ``SCAN_ENTRIES``); its path, its path beneath the
place, and a walk's git level."""


@final
@dataclass(slots=True)
class Known:
    """What earlier scans read, by path: each entry's status and what was made of it,
    each directory's status and what its listing said to do."""

    entries: dict[str, tuple[Status, Entry | None]] = field(default_factory=dict)
    directories: dict[str, tuple[Status, list[Action]]] = field(default_factory=dict)


DOT_GIT: Final = ".git"

_GIT_SKIPPED: Final = frozenset({"objects", "refs", "logs", "lfs", "rr-cache", "svn"})
"""Directories of a git directory the scan never enters (``objects/info`` is looked at)."""


@final
@dataclass(frozen=True, slots=True)
class Entry:
    """A protected path as it was: ``kind`` file, directory or link; its mode; a file's
    bytes (``None`` when larger than ``ENTRY_BYTES``) or a link's target; their digest."""

    kind: str
    mode: int
    data: bytes | None = field(default=None, repr=False)
    digest: str = ""

    def same(self, other: Entry | None) -> bool:
        return (
            other is not None
            and (self.kind, self.digest) == (other.kind, other.digest)
            and (self.kind == "link" or self.mode == other.mode)
        )


@final
@dataclass(slots=True)
class Snapshot:
    """The protected paths found (absolute), the outermost of them, whether the scan saw
    everything within its bounds, and the protected directories it could not keep whole
    (``overfull``: a join removes such a tree and puts back what the baseline had)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    tops: list[str] = field(default_factory=list)
    complete: bool = True
    kept_bytes: int = 0
    overfull: set[str] = field(default_factory=set)
    """Protected directories whose entries were not all kept (a bound cut them)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@final
class _Scanner:
    def __init__(
        self, policy: ProtectedPaths, ignored: frozenset[str], known: Known | None = None
    ) -> None:
        self.policy = policy
        self.ignored = ignored
        self.snapshot = Snapshot()
        self.read = 0
        self.git_read = 0
        self.git_records = 0
        self.visited: set[str] = set()
        self.deferred: collections.deque[str] = collections.deque()
        self.expanded: set[str] = set()
        self.known: dict[str, tuple[Status, Entry | None]] = {} if known is None else known.entries
        self.directories = {} if known is None else known.directories
        self.seen: dict[str, tuple[Status, Entry | None]] = {}
        self.seen_directories: dict[str, tuple[Status, list[Action]]] = {}
        self.now = time.time_ns()

    def _budget(self, entries: int = 1, *, git: bool = False) -> bool:
        if git:
            self.git_read += entries
            exceeded = self.git_read > GIT_ENTRIES
        else:
            self.read += entries
            exceeded = self.read > SCAN_ENTRIES
        if exceeded:
            self.snapshot.complete = False
        return not exceeded

    def run(self, places: Sequence[str]) -> None:
        """Every place, breadth first: each place's own ``.git`` and every git directory
        before the rest, then the protected trees met, then the plain directories; the
        bounds cut the deepest and the last, never a git directory's files."""
        git: collections.deque[Visit] = collections.deque()
        plain: collections.deque[Visit] = collections.deque()
        for place in places:
            own = os.path.join(place, DOT_GIT)
            try:
                info = os.lstat(own)
            except OSError:
                info = None
            if info is not None and stat.S_ISDIR(info.st_mode):
                git.append((place, own, DOT_GIT, 1, 1))
            elif info is not None and self.policy.protects(place, DOT_GIT):
                self.record(own, top=True)
            plain.append((place, place, "", 0, 0))
            for name in SETTINGS:
                path = os.path.join(place, name)
                # each place's own settings, by name and before any listing; their
                # entries after the git directories
                if (
                    self.policy.protects(place, name)
                    and os.path.lexists(path)
                    and self._room(git=False)
                    and self._keep(path, top=True) is not None
                ):
                    self.deferred.append(path)
        plain_open = True
        while git or self.deferred or (plain and plain_open):
            if git:
                visit = git.popleft()
            elif self.deferred:
                self.record(self.deferred.popleft(), top=True)
                continue
            else:
                visit = plain.popleft()
            if visit[1] in self.visited:
                continue
            self.visited.add(visit[1])
            for walk in self.visit(*visit):
                if walk is None:
                    plain_open = plain_open and bool(visit[4])
                    continue  # this budget is spent: what it would walk is not
                (git if walk[4] else plain).append(walk)

    def visit(
        self, place: str, directory: str, relative: str, depth: int, git: int
    ) -> list[Visit | None]:
        """Look at one directory's entries, from ``known`` when the directory's status is
        the one an earlier scan listed (no entry was added, removed or renamed since: its
        change time would differ), else by listing it again; the directories to visit
        next (``None``: the entry bound was reached)."""
        try:
            info = os.lstat(directory)
        except OSError:
            return []
        status = (info.st_dev, info.st_ino, info.st_mode, 0, info.st_mtime_ns, info.st_ctime_ns)
        found = self.directories.get(directory)
        if found is not None and found[0] == status and self.now - info.st_ctime_ns > RACY_NS:
            actions = found[1]
        else:
            actions = self._list(place, directory, relative, depth, git)
        self.seen_directories[directory] = (status, actions)
        walks: list[Visit | None] = []
        if git:
            self._probe(place, directory, relative)
        for action, path, child, level in actions:
            if not self._budget(level if action == "file" else 1, git=bool(git)):
                walks.append(None)
                break
            if path in self.ignored or action == "file":
                continue
            if action == "truncated":
                self.snapshot.complete = False
            elif action == "record" and git:
                self.record(path, top=True, git=True)
            elif action == "record":
                self.deferred.append(path)
            elif action == "alternates":
                self._alternates(place, path, child)
            else:
                walks.append((place, path, child, depth + 1, level))
        return walks

    def _list(
        self, place: str, directory: str, relative: str, depth: int, git: int
    ) -> list[Action]:
        actions: list[Action] = []
        try:
            listing = os.scandir(directory)
        except OSError:
            return actions
        files = 0
        with listing:
            for count, item in enumerate(listing):
                if count >= SCAN_ENTRIES:
                    actions.append(("truncated", directory, relative, 0))
                    break
                found = self._look(place, item, relative, depth, git)
                if found and found[0][0] == "file":
                    files += 1  # nothing to do: only counted, once for them all
                else:
                    actions += found
        if files:
            actions.append(("file", directory, relative, files))
        return actions

    def _look(
        self, place: str, item: os.DirEntry[str], relative: str, depth: int, git: int
    ) -> list[Action]:
        """What the scan does with one entry (the same whenever it is listed again)."""
        name = item.name
        child = f"{relative}/{name}" if relative else name
        try:
            is_directory = item.is_dir(follow_symlinks=False)
        except OSError:
            return []
        if is_directory and not git and ProtectedPaths.names_git_directory(name):
            return [("walk", item.path, child, 1)]
        candidate = (
            git
            or not name.isascii()
            or name.startswith(".")
            or "~" in name
            or fold(name) in PLAIN_SETTINGS
        )
        if candidate and self.policy.protects(place, child):
            return [("record", item.path, child, 0)]
        if not is_directory:
            return [("file", item.path, child, 0)]  # counted, nothing done
        if git:
            lowered = name.lower()
            found: list[Action] = []
            if lowered == "objects":
                found.append(("alternates", item.path, child, 0))
            if lowered not in _GIT_SKIPPED and git < GIT_DEPTH:
                found.append(("walk", item.path, child, git + 1))
            return found
        if depth < SCAN_DEPTH:
            return [("walk", item.path, child, 0)]
        return [("file", item.path, child, 0)]

    def _probe(self, place: str, directory: str, relative: str) -> None:
        """Look up by name, not by a listing, what runs or redirects in a git directory."""
        for name in _PROBED:
            path = os.path.join(directory, *name.split("/"))
            if path in self.ignored or not self.policy.protects(place, f"{relative}/{name}"):
                continue
            with contextlib.suppress(OSError):
                os.lstat(path)
                self.record(path, top=True, git=True)
        for state, todo in TODOS:
            # an in-progress rebase's or sequencer's todo list: kept to be judged (13.1)
            path = os.path.join(directory, state, todo)
            if path not in self.ignored and os.path.lexists(path) and self._room(git=True):
                self._keep(path, top=False)

    def _alternates(self, place: str, objects: str, relative: str) -> None:
        path = os.path.join(objects, "info", "alternates")
        if self.policy.protects(place, f"{relative}/info/alternates"):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.lstat(path)
                self.record(path, top=True, git=True)

    def _room(self, git: bool | None, *, peek: bool = False) -> bool:
        """Whether one more entry may be kept (``None``: unbounded, a path named by
        ``also``); ``peek``: only ask."""
        if git is None:
            return True
        if git:
            self.git_records += 0 if peek else 1
            kept = self.git_records + (1 if peek else 0) <= GIT_RECORDS
        else:
            kept = len(self.snapshot.entries) - self.git_records < SNAPSHOT_ENTRIES
        if not kept:
            self.snapshot.complete = False
        return kept

    def record(self, path: str, *, top: bool, git: bool | None = False) -> None:
        """Keep ``path`` (``git``: counted inside git directories; ``None``: named by
        ``also``, kept whatever the bounds, its children left to the walk); a directory's
        entries are kept too, each once."""
        if path in self.ignored:
            return
        entry = self.snapshot.entries.get(path)
        if entry is None:
            if not self._room(git):
                return
            entry = self._keep(path, top=top)
        if entry is None or entry.kind != "directory" or git is None:
            return
        if path in self.expanded:
            return
        self.expanded.add(path)
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            if not self._budget(git=git) or not self._room(git, peek=True):
                self.snapshot.overfull.add(path)
                return
            self.record(os.path.join(path, name), top=False, git=git)

    def _keep(self, path: str, *, top: bool) -> Entry | None:
        snapshot = self.snapshot
        try:
            info = os.lstat(path)
        except OSError:
            return None
        key = (
            info.st_dev,
            info.st_ino,
            info.st_mode,
            info.st_size,
            info.st_mtime_ns,
            info.st_ctime_ns,
        )
        found = self.known.get(path)
        if found is not None and found[0] == key and self.now - info.st_ctime_ns > RACY_NS:
            entry: Entry | None = found[1]  # unchanged since it was read: not read again
            if entry is not None and entry.kind == "file" and entry.data is not None:
                snapshot.kept_bytes += len(entry.data)
        else:
            entry = self._entry(path, info)
        if entry is None:
            return None
        self.seen[path] = (key, entry)
        snapshot.entries[path] = entry
        if top:
            snapshot.tops.append(path)
        return entry

    def _entry(self, path: str, info: os.stat_result) -> Entry | None:
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            return Entry("directory", mode)
        if stat.S_ISLNK(info.st_mode):
            try:
                target = os.fsencode(os.readlink(path))
            except OSError:
                return None
            return Entry("link", mode, target, _digest(target))
        if not stat.S_ISREG(info.st_mode):
            return Entry("other", mode, None, f"{info.st_dev}:{info.st_ino}")
        try:
            data = _read(path, info.st_size)
        except OSError:
            return None
        digest = _digest(data)
        keep = len(data) <= ENTRY_BYTES and self.snapshot.kept_bytes + len(data) <= SNAPSHOT_BYTES
        if keep:
            self.snapshot.kept_bytes += len(data)
        return Entry("file", mode, data if keep else None, digest)


def _read(path: str, size: int) -> bytes:
    """A regular file's bytes, opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        while chunk := os.read(fd, max(size, 65536)):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def scan(
    places: Sequence[str],
    policy: ProtectedPaths,
    ignored: Iterable[str] = (),
    known: Known | None = None,
    also: Iterable[str] = (),
) -> Snapshot:
    """The protected paths beneath ``places`` now (see the module docstring); ``ignored``:
    paths never looked at (the launcher's live mount points). ``known``: what an earlier
    scan read, by path and status (device, inode, mode, size, times): an entry whose
    status is the same, and whose change time is older than ``RACY_NS``, is taken from
    there instead of being read again; it is replaced by what this scan saw. ``also``:
    paths looked up by name first, whatever the bounds (a baseline's)."""
    scanner = _Scanner(policy, frozenset(ignored), known)
    if policy.empty:
        return scanner.snapshot
    for path in sorted(also):
        scanner.record(path, top=False, git=None)
    scanner.run(places)
    for path in policy.extra:
        if any(path == place or path.startswith(place.rstrip("/") + "/") for place in places):
            scanner.record(path, top=True)
    if known is not None:
        known.entries = scanner.seen
        known.directories = scanner.seen_directories
    return scanner.snapshot
