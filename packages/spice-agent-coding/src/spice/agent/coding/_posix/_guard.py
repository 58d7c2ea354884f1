"""The join's guard: protected paths a contained call changed or made, put back (12.1).

One ``Guard`` per server obeys the same ``ProtectedPaths`` as ``replace``. When the first
of the server's calls begins it takes a *baseline*: a bounded scan of each writable
place finds the protected paths that exist and keeps their bytes (``_scan``). The
namespace path binds the existing ones read-only (``tops``); at every join the scan runs
again and whatever differs is put back before the answer (``_putback``): a changed or
removed file gets its pre-call bytes and mode again, a path the call made is removed,
except a git directory's new ``config``, which keeps what the allow-list keeps
(``_gitconfig``: so ``git init``, ``add``, ``commit`` and ``remote add`` work).
Concurrent calls share the baseline; the last join drops it.

The baseline is also written to a record outside every writable place (the server's
private state directory) before the first call starts, and removed after the last join.
A record left by a server that died (its pid gone or reused) is applied by the next
server's start or call (``repair``): nothing a killed call planted stays.

The record is named after the process, so a process has one guard per root
(``server_guard``): a launcher built again on a settings file's change shares it, and takes
its places and policy once the calls running under the old ones have ended (``follow``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths

from ._plan import StartFacts
from ._putback import put_back
from ._scan import (
    GIT_DEPTH,
    GIT_ENTRIES,
    SCAN_DEPTH,
    SCAN_ENTRIES,
    Entry,
    Known,
    Snapshot,
    scan,
)

__all__ = [
    "MAXIMUM_RESTORED",
    "RECORD_BYTES",
    "RECORD_FILES",
    "SHOWN_BYTES",
    "SHOWN_PATH_BYTES",
    "UNRECORDED",
    "Guard",
    "ender",
    "server_guard",
    "shown",
]

RECORD_BYTES: Final = 32 * 1024 * 1024
"""The largest record read back (a baseline's bytes in base64 and their names)."""

RECORD_FILES: Final = 64
"""Records read from the private directory at one repair, at most."""

MAXIMUM_RESTORED: Final = 16
"""Paths an answer names in ``protected_restored`` (the count says how many in all)."""

_RECORD_SUFFIX: Final = ".json"
_LOG: Final = logging.getLogger("spice.agent.coding")
UNRECORDED: Final = (
    "the protected paths' record cannot be written: a call cut short by a killed server "
    "will not be repaired by the next start"
)


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
        self._next: tuple[tuple[str, ...], ProtectedPaths, str | None] | None = None
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
        """How the sandbox holds the protected paths, for ``tools`` (``_settings._protection`` says
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
                "each place's .git and settings, and every git directory's config, "
                "commondir, gitdir, hooks, info, alternates and todo lists, looked up by "
                f"name first; then {SCAN_DEPTH} levels below each writable place, breadth "
                f"first, {GIT_DEPTH} inside git directories, {SCAN_ENTRIES} entries outside "
                f"them and {GIT_ENTRIES} inside"
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
                self._adopt_locked(taken)
                self._write_record(taken)
                self._baseline = taken
            self._users += 1
            baseline = self._baseline
            return tuple(path for path in baseline.tops if baseline.entries[path].kind != "link")

    def follow(self, places: Sequence[str], policy: ProtectedPaths, records: str | None) -> None:
        """A launcher built again for this root: its places, policy and records directory,
        at once when no call runs, else once the last running call has ended (its join
        compares with a baseline taken under the old ones)."""
        with self._lock:
            self._next = (tuple(places), policy, records)
            if self._users == 0:
                self._take_next_locked()

    def _take_next_locked(self) -> None:
        if self._next is not None:
            self.places, self.policy, self.records = self._next
            self._next = None

    def end(self) -> tuple[str, ...]:
        """A call's join: put back what differs from the baseline; the paths put back."""
        if not self.active:
            return ()
        with self._lock:
            baseline = self._baseline
            if baseline is None:
                return ()
            try:
                now = scan(self.places, self.policy, self._ignored(), self._known, baseline.entries)
                return tuple(put_back(baseline, now))
            finally:
                # The call is over whatever happened (the put-back handles every OS error
                # itself); the last call's end drops the baseline and its record.
                self._users -= 1
                if self._users == 0:
                    self._baseline = None
                    self._drop_record()
                    self._take_next_locked()

    def repair(self) -> tuple[str, ...]:
        """At start: apply the records of servers that died, then read what is protected
        now (so the first call only looks at what changed since); the paths put back."""
        if not self.active:
            return ()
        with self._lock:
            restored = self._repair_locked()
            scan(self.places, self.policy, self._ignored(), self._known)
            return tuple(restored)

    def _others(self) -> list[tuple[str, bool]]:
        """The other servers' records: each path and whether its server still runs."""
        if self.records is None:
            return []
        try:
            names = sorted(os.listdir(self.records))[:RECORD_FILES]
        except OSError:
            return []
        found: list[tuple[str, bool]] = []
        for name in names:
            if not name.endswith(_RECORD_SUFFIX) or name == self._record_name:
                continue
            pid_text, _, start = name.removesuffix(_RECORD_SUFFIX).partition("-")
            if pid_text.isdigit():
                live = _start_time(int(pid_text)) == start
                found.append((os.path.join(self.records, name), live))
        return found

    def _repair_locked(self) -> list[str]:
        restored: list[str] = []
        for path, live in self._others():
            if live:
                continue  # its server still runs
            decoded = _decode(_read_bounded(path))
            if decoded is not None:
                places, baseline = decoded
                now = scan(places, self.policy, self._ignored(), also=baseline.entries)
                restored += put_back(baseline, now)
            with contextlib.suppress(OSError):
                os.unlink(path)
        return restored

    def _adopt_locked(self, taken: Snapshot) -> None:
        """Another server on this root with a call running: where a protected path changed
        after that server took its baseline (the change time says so, and a command cannot
        set it), its baseline is ours, so that our join never takes its command's plant for
        the user's. What did not change since stays as we read it."""
        for path, live in self._others():
            decoded = _decode(_read_bounded(path)) if live else None
            try:
                stamp = os.stat(path).st_mtime_ns if decoded is not None else 0
            except OSError:
                continue
            if decoded is None:
                continue
            places, theirs = decoded
            for name in list(taken.entries):
                if _within(name, places) and _changed_since(name, stamp):
                    if name in theirs.entries:
                        taken.entries[name] = theirs.entries[name]
                    else:
                        del taken.entries[name]  # made during their call: not the user's
            for name, entry in theirs.entries.items():
                if name not in taken.entries and self._protects(name):
                    taken.entries[name] = entry  # removed during their call
            taken.tops = [name for name in taken.tops if name in taken.entries]

    def _protects(self, path: str) -> bool:
        """Whether this server's policy protects the absolute ``path`` in one of its places."""
        for place in self.places:
            if _within(path, [place]) and path != place:
                return self.policy.protects(place, path[len(place.rstrip("/")) + 1 :])
        return False

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


def _changed_since(path: str, stamp: int) -> bool:
    """Whether ``path`` changed (or was made) at or after ``stamp`` (ns), or is gone."""
    try:
        return os.lstat(path).st_ctime_ns >= stamp
    except OSError:
        return True


def _within(path: str, places: Sequence[str]) -> bool:
    return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)


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


_GUARDS: Final[weakref.WeakValueDictionary[str, Guard]] = weakref.WeakValueDictionary()
"""This process's guard of each root, while a launcher holds it."""
_GUARDS_LOCK: Final = threading.Lock()


def server_guard(facts: StartFacts | None, ignored: Callable[[], Iterable[str]]) -> Guard:
    """The process's guard of the root's protected paths (uncontained: one that guards
    nothing): made on the root's first launcher, shared by the ones built again (it
    ``follow``s their facts); what the call of a killed server planted is put back here,
    at start (its record)."""
    if facts is None:
        return Guard((), ProtectedPaths())
    places = [place.path for place in facts.places]
    with _GUARDS_LOCK:
        guard = _GUARDS.get(facts.root)
        if guard is None:
            guard = Guard(places, facts.protected, facts.records, ignored=ignored)
            _GUARDS[facts.root] = guard
        else:
            guard.follow(places, facts.protected, facts.records)
    guard.repair()
    return guard


def ender(guard: Guard, root: str) -> Callable[[], tuple[str, ...]]:
    """The join's end of one call's guard, the paths put back as the answer names them."""
    return lambda: shown(guard.end(), root)
