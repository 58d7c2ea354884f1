"""The join's guard: protected paths a contained call changed or made, put back (12.1).

One ``Guard`` per server obeys the same ``ProtectedPaths`` as ``replace``. When the first
of the server's calls begins it takes a *baseline*: a bounded scan of each writable
place finds the protected paths that exist (``scan``: ``SCAN_DEPTH`` levels outside git
directories, ``GIT_DEPTH`` inside them, never into a git directory's objects, refs or
logs, ``SCAN_ENTRIES`` entries in all) and keeps their bytes (``ENTRY_BYTES`` each,
``SNAPSHOT_BYTES`` in all). The namespace path binds the existing ones read-only
(``tops``); at every join the scan runs again and whatever differs is put back before
the answer: a changed or removed file gets its pre-call bytes and mode again, a path
the call made is removed, except a git directory's new ``config``, which keeps what the
allow-list keeps (``_gitconfig``: so ``git init``, ``add``, ``commit`` and ``remote add``
work). Concurrent calls share the baseline; the last join drops it.

The baseline is also written to a record outside every writable place (the server's
private state directory) before the first call starts, and removed after the last join.
A record left by a server that died (its pid gone or reused) is applied by the next
server's start or call (``repair``): nothing a killed call planted stays.

Paths are put back without following a symbolic link (each directory opened from ``/``
with ``O_NOFOLLOW``; a link or file where a directory was is removed first).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths

from .._gitconfig import filtered
from ._plan import StartFacts

__all__ = [
    "ENTRY_BYTES",
    "GIT_DEPTH",
    "MAXIMUM_RESTORED",
    "RECORD_BYTES",
    "SCAN_DEPTH",
    "SCAN_ENTRIES",
    "SHOWN_BYTES",
    "SHOWN_PATH_BYTES",
    "SNAPSHOT_BYTES",
    "SNAPSHOT_ENTRIES",
    "Entry",
    "Guard",
    "Known",
    "Snapshot",
    "ender",
    "put_back",
    "scan",
    "server_guard",
    "shown",
]

SCAN_DEPTH: Final = 4
"""Directory levels below a writable place the scan looks at outside git directories
(``a/b/c/.mcp.json`` is seen; a protected name deeper is not)."""

GIT_DEPTH: Final = 16
"""Directory levels the scan looks at inside a git directory (submodules nest)."""

SCAN_ENTRIES: Final = 50_000
"""Directory entries one scan reads in all; beyond it the scan is incomplete."""

ENTRY_BYTES: Final = 1024 * 1024
"""A protected file's bytes kept; a larger one keeps its digest and is removed if changed."""

SNAPSHOT_BYTES: Final = 16 * 1024 * 1024
"""Bytes of protected files one baseline keeps in all (the rest: digests only)."""

SNAPSHOT_ENTRIES: Final = 4096
"""Protected entries one baseline keeps; beyond it the scan is incomplete."""

RECORD_BYTES: Final = 32 * 1024 * 1024
"""The largest record read back (a baseline's bytes in base64 and their names)."""

RECORD_FILES: Final = 64
"""Records read from the private directory at one repair, at most."""

MAXIMUM_RESTORED: Final = 16
"""Paths an answer names in ``protected_restored`` (the count says how many in all)."""

RACY_NS: Final = 2_000_000_000
"""A file changed less than this long before a scan is read again whatever its status
says (a change within the file system's clock tick keeps the same times)."""

Status = tuple[int, int, int, int, int, int]
"""Device, inode, mode, size, modification and change times (ns) of a path."""
Action = tuple[str, str, str, int]
"""What a scan does with one entry: ``walk``, ``record``, ``alternates``, ``file``
(nothing) or ``truncated`` (the listing stopped at ``SCAN_ENTRIES``); its path, its path
beneath the place, and a walk's git level."""


@final
@dataclass(slots=True)
class Known:
    """What earlier scans read, by path: each entry's status and what was made of it,
    each directory's status and what its listing said to do."""

    entries: dict[str, tuple[Status, Entry | None]] = field(default_factory=dict)
    directories: dict[str, tuple[Status, list[Action]]] = field(default_factory=dict)


_GIT_SKIPPED: Final = frozenset({"objects", "refs", "logs", "lfs", "rr-cache", "svn"})
"""Directories of a git directory the scan never enters (``objects/info`` is looked at)."""

_STEP: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RECORD_SUFFIX: Final = ".json"
_LOG: Final = logging.getLogger("spice.agent.coding")
UNRECORDED: Final = (
    "the protected paths' record cannot be written: a call cut short by a killed server "
    "will not be repaired by the next start"
)
_TEMPORARY: Final = ".spice-guard-"


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
    """The protected paths found (absolute), the outermost of them, and whether the scan
    saw everything within its bounds."""

    entries: dict[str, Entry] = field(default_factory=dict)
    tops: list[str] = field(default_factory=list)
    complete: bool = True
    kept_bytes: int = 0


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
        self.known: dict[str, tuple[Status, Entry | None]] = {} if known is None else known.entries
        self.directories = {} if known is None else known.directories
        self.seen: dict[str, tuple[Status, Entry | None]] = {}
        self.seen_directories: dict[str, tuple[Status, list[Action]]] = {}
        self.now = time.time_ns()

    def _budget(self) -> bool:
        self.read += 1
        if self.read > SCAN_ENTRIES:
            self.snapshot.complete = False
            return False
        return True

    def walk(self, place: str, directory: str, relative: str, depth: int, git: int) -> None:
        """Look at one directory's entries: from ``known`` when the directory's status is
        the one an earlier scan listed (no entry was added, removed or renamed since: its
        change time would differ), else by listing it again."""
        try:
            info = os.lstat(directory)
        except OSError:
            return
        status = (info.st_dev, info.st_ino, info.st_mode, 0, info.st_mtime_ns, info.st_ctime_ns)
        found = self.directories.get(directory)
        if found is not None and found[0] == status and self.now - info.st_ctime_ns > RACY_NS:
            actions = found[1]
        else:
            actions = self._list(place, directory, relative, depth, git)
        self.seen_directories[directory] = (status, actions)
        for action, path, child, level in actions:
            if not self._budget():
                return
            if path in self.ignored:
                continue
            if action == "file":
                continue
            if action == "truncated":
                self.snapshot.complete = False
                return
            if action == "record":
                self.record(path, top=True)
            elif action == "alternates":
                self._alternates(place, path, child)
            else:
                self.walk(place, path, child, depth + 1, level)

    def _list(
        self, place: str, directory: str, relative: str, depth: int, git: int
    ) -> list[Action]:
        actions: list[Action] = []
        try:
            listing = os.scandir(directory)
        except OSError:
            return actions
        with listing:
            for item in listing:
                if len(actions) >= SCAN_ENTRIES:
                    actions.append(("truncated", directory, relative, 0))
                    break
                actions += self._look(place, item, relative, depth, git)
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
        candidate = git or not name.isascii() or name.startswith(".") or "~" in name
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

    def _alternates(self, place: str, objects: str, relative: str) -> None:
        path = os.path.join(objects, "info", "alternates")
        if self.policy.protects(place, f"{relative}/info/alternates"):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.lstat(path)
                self.record(path, top=True)

    def record(self, path: str, *, top: bool) -> None:
        snapshot = self.snapshot
        if path in snapshot.entries or path in self.ignored:
            return
        if len(snapshot.entries) >= SNAPSHOT_ENTRIES:
            snapshot.complete = False
            return
        try:
            info = os.lstat(path)
        except OSError:
            return
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
            return
        self.seen[path] = (key, entry)
        snapshot.entries[path] = entry
        if top:
            snapshot.tops.append(path)
        if entry.kind == "directory":
            try:
                names = sorted(os.listdir(path))
            except OSError:
                return
            for name in names:
                if not self._budget():
                    return
                self.record(os.path.join(path, name), top=False)

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
) -> Snapshot:
    """The protected paths beneath ``places`` now (see the module docstring); ``ignored``:
    paths never looked at (the launcher's live mount points). ``known``: what an earlier
    scan read, by path and status (device, inode, mode, size, times): an entry whose
    status is the same, and whose change time is older than ``RACY_NS``, is taken from
    there instead of being read again; it is replaced by what this scan saw."""
    scanner = _Scanner(policy, frozenset(ignored), known)
    if policy.empty:
        return scanner.snapshot
    for place in places:
        scanner.walk(place, place, "", 0, 0)
    for path in policy.extra:
        if any(path == place or path.startswith(place.rstrip("/") + "/") for place in places):
            scanner.record(path, top=True)
    if known is not None:
        known.entries = scanner.seen
        known.directories = scanner.seen_directories
    return scanner.snapshot


def _is_git_config(path: str) -> bool:
    parts = path.split("/")
    return (
        len(parts) > 1
        and parts[-1] == "config"
        and any(ProtectedPaths.names_git_directory(part) for part in parts[:-1])
    )


def _open_directory(path: str, *, create: bool) -> int:
    """The directory ``path`` opened from ``/`` without following a link; with ``create``
    a missing one is made and a link or file where it should be is removed first."""
    fd = os.open("/", _STEP)
    try:
        for name in path.split("/"):
            if not name:
                continue
            try:
                step = os.open(name, _STEP, dir_fd=fd)
            except OSError as error:
                if not create or error.errno not in {errno.ENOENT, errno.ELOOP, errno.ENOTDIR}:
                    raise
                if error.errno != errno.ENOENT:
                    os.unlink(name, dir_fd=fd)
                os.mkdir(name, 0o755, dir_fd=fd)
                step = os.open(name, _STEP, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove(path: str) -> bool:
    """Remove ``path`` (a whole directory too) without following a link; whether it is gone."""
    parent, name = os.path.split(path)
    try:
        fd = _open_directory(parent, create=False)
    except OSError:
        return True  # no real directory leads there: nothing is at this path
    try:
        info = os.lstat(name, dir_fd=fd)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _write(path: str, entry: Entry) -> bool:
    """Put ``entry`` back at ``path`` (made anew, renamed over what is there)."""
    parent, name = os.path.split(path)
    try:
        fd = _open_directory(parent, create=True)
    except OSError:
        return False
    try:
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(name, dir_fd=fd)
            wrong = stat.S_ISDIR(info.st_mode) != (entry.kind == "directory")
            if wrong and stat.S_ISDIR(info.st_mode):
                shutil.rmtree(name, dir_fd=fd)
            elif wrong:
                os.unlink(name, dir_fd=fd)
        if entry.kind == "directory":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, entry.mode, dir_fd=fd)
            os.chmod(name, entry.mode, dir_fd=fd, follow_symlinks=False)
            return True
        temporary = f"{_TEMPORARY}{os.getpid()}-{threading.get_ident()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=fd)
        if entry.kind == "link":
            assert entry.data is not None  # noqa: S101 - a link keeps its target
            os.symlink(entry.data, temporary, dir_fd=fd)
        else:
            assert entry.data is not None  # noqa: S101 - checked by the caller
            made = os.open(
                temporary,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=fd,
            )
            try:
                view = memoryview(entry.data)
                while view:
                    view = view[os.write(made, view) :]
                os.fchmod(made, entry.mode)
            finally:
                os.close(made)
        os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def put_back(baseline: Snapshot, now: Snapshot) -> list[str]:
    """Make the protected paths of ``now`` what ``baseline`` had; the paths put back.

    A path the call made is removed, but a git directory's new ``config``, which keeps
    what the allow-list keeps; a changed or removed one gets its bytes and mode again
    (one larger than ``ENTRY_BYTES`` is removed, its bytes were not kept).
    """
    restored: list[str] = []
    removed: list[str] = []
    for path in sorted(now.entries):
        if path in baseline.entries or any(path.startswith(f"{gone}/") for gone in removed):
            continue
        entry = now.entries[path]
        if _is_git_config(path) and entry.kind == "file" and entry.data is not None:
            kept = filtered(entry.data.decode("utf-8", "replace")).encode()
            if kept != entry.data:
                _write(path, Entry("file", entry.mode & 0o666, kept, _digest(kept)))
                restored.append(path)
            continue
        _remove(path)
        removed.append(path)
        restored.append(path)
    for path in sorted(baseline.entries):
        entry = baseline.entries[path]
        if entry.same(now.entries.get(path)) or entry.kind == "other":
            continue
        if entry.kind == "file" and entry.data is None:
            _remove(path)
        else:
            _write(path, entry)
        restored.append(path)
    return restored


def _encode(snapshot: Snapshot, places: Sequence[str]) -> bytes:
    entries = {
        path: [
            entry.kind,
            entry.mode,
            None if entry.data is None else base64.b64encode(entry.data).decode(),
            entry.digest,
        ]
        for path, entry in snapshot.entries.items()
    }
    return json.dumps({"places": list(places), "entries": entries}).encode()


def _decode(data: bytes) -> tuple[list[str], Snapshot] | None:
    try:
        value = json.loads(data)
        places = [str(place) for place in value["places"]]
        snapshot = Snapshot()
        for path, (kind, mode, raw, digest) in value["entries"].items():
            content = None if raw is None else base64.b64decode(raw, validate=True)
            snapshot.entries[str(path)] = Entry(str(kind), int(mode), content, str(digest))
    except (ValueError, KeyError, TypeError):
        return None
    return places, snapshot


def _start_time(pid: int) -> str | None:
    """A process's start time (``/proc/<pid>/stat`` field 22), ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


@final
class Guard:
    """One server's guard (see the module docstring); thread-safe."""

    def __init__(
        self,
        places: Sequence[str],
        policy: ProtectedPaths,
        records: str | None = None,
        ignored: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self.places = tuple(places)
        self.policy = policy
        self.records = records
        self._ignored = ignored
        self._lock = threading.Lock()
        self._users = 0
        self._baseline: Snapshot | None = None
        self._known = Known()
        self._unrecorded = False
        self._pid = os.getpid()
        self._record_name = f"{self._pid}-{_start_time(self._pid) or 0}{_RECORD_SUFFIX}"

    @property
    def active(self) -> bool:
        """Whether the policy protects anything (else begin and end do nothing)."""
        return not self.policy.empty

    def report(self) -> dict[str, object]:
        """How the sandbox holds the protected paths, for ``tools`` (``_protection`` says
        which they are)."""
        if not self.active:
            return {"how": "nothing is protected"}
        return {
            "how": (
                "with namespaces what exists when a call starts is read-only to the "
                "command; at every join whatever a call changed or made is put back "
                "before the answer (protected_restored); a new repository keeps its "
                "objects, refs, index, logs, HEAD and the config keys that run nothing"
            ),
            "scan": (
                f"{SCAN_DEPTH} levels below each writable place, {GIT_DEPTH} inside git "
                f"directories, {SCAN_ENTRIES} entries in all"
            ),
            "record": self.records
            or "none (no private directory outside the writable places): a call cut short "
            "by a killed server is not repaired",
        }

    def begin(self) -> tuple[str, ...]:
        """A call begins: repair what dead servers left, take (or share) the baseline,
        write the record; the existing protected paths to bind read-only."""
        if not self.active:
            return ()
        with self._lock:
            if self._users == 0 or self._baseline is None:
                self._repair_locked()
                taken = scan(self.places, self.policy, self._ignored(), self._known)
                self._write_record(taken)
                self._baseline = taken
            self._users += 1
            baseline = self._baseline
            return tuple(path for path in baseline.tops if baseline.entries[path].kind != "link")

    def end(self) -> tuple[str, ...]:
        """A call's join: put back what differs from the baseline; the paths put back."""
        if not self.active:
            return ()
        with self._lock:
            baseline = self._baseline
            if baseline is None:
                return ()
            now = scan(self.places, self.policy, self._ignored(), self._known)
            restored = put_back(baseline, now)
            self._users -= 1
            if self._users == 0:
                self._baseline = None
                self._drop_record()
            return tuple(restored)

    def repair(self) -> tuple[str, ...]:
        """At start: apply the records of servers that died, then read what is protected
        now (so the first call only looks at what changed since); the paths put back."""
        if not self.active:
            return ()
        with self._lock:
            restored = self._repair_locked()
            scan(self.places, self.policy, self._ignored(), self._known)
            return tuple(restored)

    def _repair_locked(self) -> list[str]:
        if self.records is None:
            return []
        try:
            names = sorted(os.listdir(self.records))[:RECORD_FILES]
        except OSError:
            return []
        restored: list[str] = []
        for name in names:
            if not name.endswith(_RECORD_SUFFIX) or name == self._record_name:
                continue
            pid_text, _, start = name.removesuffix(_RECORD_SUFFIX).partition("-")
            if not pid_text.isdigit():
                continue
            if _start_time(int(pid_text)) == start:
                continue  # its server still runs
            path = os.path.join(self.records, name)
            decoded = _decode(_read_bounded(path))
            if decoded is not None:
                places, baseline = decoded
                restored += put_back(baseline, scan(places, self.policy, self._ignored()))
            with contextlib.suppress(OSError):
                os.unlink(path)
        return restored

    def _write_record(self, baseline: Snapshot) -> None:
        """The baseline in the private directory (made again if it was removed). One that
        cannot be written leaves the call without a record: said once in the log."""
        if self.records is None:
            return
        path = os.path.join(self.records, self._record_name)
        temporary = f"{path}.tmp"
        try:
            os.makedirs(self.records, mode=0o700, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(temporary, flags, 0o600)
            try:
                view = memoryview(_encode(baseline, self.places))
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(temporary, path)
        except OSError:
            if not self._unrecorded:
                self._unrecorded = True
                _LOG.warning(UNRECORDED)

    def _drop_record(self) -> None:
        if self.records is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.records, self._record_name))


def _read_bounded(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        if os.fstat(fd).st_size > RECORD_BYTES:
            return b""
        chunks: list[bytes] = []
        read = 0
        while read <= RECORD_BYTES and (chunk := os.read(fd, 1024 * 1024)):
            chunks.append(chunk)
            read += len(chunk)
        return b"" if read > RECORD_BYTES else b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


SHOWN_PATH_BYTES: Final = 1024
"""The longest put-back path an answer names (``protected_restored``); a longer one is
named ``...``."""

SHOWN_BYTES: Final = 2048
"""The put-back paths an answer names have at most this many bytes in all; the ones
beyond are counted (``protected_restored_count``), not named."""


def shown(paths: Iterable[str], root: str) -> tuple[str, ...]:
    """Paths as an answer names them: beneath the root relative to it, else absolute; a
    longer one than ``SHOWN_PATH_BYTES`` or one with a control character as ``...``."""
    prefix = root.rstrip("/") + "/"
    shown: list[str] = []
    total = 0
    for path in paths:
        name = path.removeprefix(prefix) if path.startswith(prefix) else path
        printable = name.isprintable() and len(os.fsencode(name)) <= SHOWN_PATH_BYTES
        name = name if printable else "..."
        size = len(os.fsencode(name))
        if total + size <= SHOWN_BYTES:
            total += size
            shown.append(name)
    return tuple(shown)


def server_guard(facts: StartFacts | None, ignored: Callable[[], Iterable[str]]) -> Guard:
    """The server's guard of protected paths (uncontained: one that guards nothing); what
    the call of a killed server planted is put back here, at start (its record)."""
    if facts is None:
        return Guard((), ProtectedPaths())
    places = [place.path for place in facts.places]
    guard = Guard(places, facts.protected, facts.records, ignored=ignored)
    guard.repair()
    return guard


def ender(guard: Guard, root: str) -> Callable[[], tuple[str, ...]]:
    """The join's end of one call's guard, the paths put back as the answer names them."""
    return lambda: shown(guard.end(), root)
