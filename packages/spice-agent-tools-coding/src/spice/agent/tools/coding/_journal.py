"""The worktree's journal: every call's changes applied under it, and taken back (13.2).

``Journal.open`` finds (or makes) the journal of a worktree beneath the state home and
refuses an unsafe or newer one (``JournalError``: one fixed line naming the place).
``commit`` applies a judged list of changes: the entry is written and synced first
(``pending``), each path is applied (``_journal_apply``), the directories written in are
synced, and the entry is marked ``done`` (a small synced ``Mark`` beside the record).
``recover`` takes back every entry a killed server left ``pending``: the worktree ends
as before it, never between. ``undo`` returns paths to their state before a call, in an
entry of its own (tool ``undo``), so an undo can be undone. A lock (``flock`` on the
journal's ``lock``) serialises commits, undos and recoveries; its wait is bounded.

The user's edits win: a path whose change time is at or after ``opened_ns`` (a time of
the file system's clock at the stage's opening: ``Journal.opening``), or, for a deleted
directory, anything beneath it, or a path that appeared for an addition, is not
written; the call's version is kept in the store and the path is in ``conflicts``.

On Windows only ``replace`` is journaled (``shell`` is never staged there): the records,
the index, the bounds and the lock (a byte-range lock there) are the same; records are
written by path, and ``undo`` and ``recover`` take paths back through
``_windows._restore`` (beneath the root handle, never through a reparse point) instead
of the descriptor-based ``_journal_apply``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from ._changes import Change, Judged
from ._journal_apply import Applier, Op, Refusal
from ._journal_index import EntryIndex
from ._journal_plan import beneath, plan
from ._journal_records import (
    PRIVATE_DIRECTORY,
    Item,
    JournalError,
    Mark,
    Record,
    State,
    checked_place,
    journal_directory,
    locked,
    read_json,
    state_at,
    state_home,
    write_new,
    write_record,
)
from ._journal_write import PendingWrite
from ._root import PathError, open_root

__all__ = [
    "MAX_AGE_DAYS",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "WALK_LIMIT",
    "Committed",
    "History",
    "Journal",
    "JournalError",
    "Summary",
    "Undone",
]

MAX_BYTES: Final = 1024**3
"""``--journal-max-bytes``: what the stores of all entries hold at most (1 GiB)."""
MAX_AGE_DAYS: Final = 7
"""``--journal-max-age``: entries older than this many days go."""
MAX_ENTRIES: Final = 10_000
"""Entries a journal keeps at most (the oldest go first)."""
WALK_LIMIT: Final = 1_000_000
"""Entries beneath a deleted directory looked at for another writer's change; beyond,
the directory counts as changed (the user's edits win)."""
DAY_NS: Final = 86_400 * 1_000_000_000


@final
@dataclass(frozen=True, slots=True)
class Committed:
    """What a commit did: its entry (``None`` when nothing changed), the changes applied,
    the paths left to the user (``conflicts``) and those that could not be applied
    (``failed``), and whether some bytes were copied rather than renamed."""

    entry: int | None
    applied: tuple[Change, ...]
    conflicts: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    copied: bool = False


@final
@dataclass(frozen=True, slots=True)
class Summary:
    """One entry as ``history`` shows it."""

    id: int
    tool: str
    call_id: str | None
    time_ns: int
    paths: tuple[str, ...]
    undone: bool

    def json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "tool": self.tool,
            "call_id": self.call_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.time_ns / 1e9)),
            "paths": list(self.paths),
            "undone": self.undone,
        }


@final
@dataclass(frozen=True, slots=True)
class History:
    """The entries, newest first, and how many of the oldest the bounds dropped."""

    entries: tuple[Summary, ...]
    dropped: int


@final
@dataclass(frozen=True, slots=True)
class Undone:
    """What an undo did: its own entry, the paths taken back, and those left (changed
    since the call; taken back with ``force``)."""

    entry: int | None
    restored: tuple[str, ...]
    refused: tuple[str, ...]


def _shown(item: Item) -> str:
    letter = {"added": "A", "modified": "M", "deleted": "D"}[item.action]
    kind = (item.after or item.before or State("file", None, None)).kind
    return f"{letter} {item.path}{'/' if kind == 'directory' else ''}"


@final
class Journal:
    """The journal of one worktree; see the module docstring."""

    def __init__(self, root: str, directory: str, shown: str, max_bytes: int, max_age: int) -> None:
        self.root = root
        self.directory = directory
        self._shown = shown
        self._max_bytes = max_bytes
        self._max_age_days = max_age
        self._index = EntryIndex(os.path.join(directory, "entries"), shown, self._read)

    @classmethod
    def open(
        cls,
        root: str,
        *,
        state_home: str | None = None,
        max_bytes: int = MAX_BYTES,
        max_age_days: int = MAX_AGE_DAYS,
    ) -> Journal:
        """The journal of ``root``; ``JournalError`` for an unusable or unsafe one."""
        real_root = os.path.realpath(root)
        home = state_home if state_home is not None else _default_home()
        shown = journal_directory(home, real_root)
        directory = checked_place(shown, real_root)
        meta = os.path.join(directory, "journal.json")
        if os.path.lexists(meta):
            value = read_json(meta, shown)
            if not isinstance(value, dict) or value.get("root") != real_root:
                raise JournalError(
                    "journal_unusable", f"the journal {shown} names another worktree"
                )
        else:
            try:
                for name in ("entries", "store"):
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(os.path.join(directory, name), PRIVATE_DIRECTORY)
                write_record(directory, "journal.json", {"format": 1, "root": real_root})
            except OSError:
                raise JournalError(
                    "journal_unusable", f"the journal {shown} could not be made or opened"
                ) from None
        return cls(real_root, directory, shown, max_bytes, max_age_days)

    # -- reading -------------------------------------------------------------------

    def _ids(self) -> list[int]:
        return [entry.id for entry in self._index.scan()]

    def _read(self, number: int) -> Record:
        try:
            record = Record.parse(read_json(self._entry_path(number), self._shown))
            mark = self._mark_path(number)
            if record.phase == "pending" and os.path.lexists(mark):
                return Mark.parse(read_json(mark, self._shown)).applied(record)
            return record
        except ValueError:
            raise JournalError(
                "journal_unusable", f"the journal {self._shown} holds an unreadable record"
            ) from None

    def _entry_path(self, number: int) -> str:
        return os.path.join(self.directory, "entries", f"{number:012d}.json")

    def _mark_path(self, number: int) -> str:
        return os.path.join(self.directory, "entries", f"{number:012d}.done")

    def _store(self, number: int) -> str:
        return os.path.join(self.directory, "store", str(number))

    def _dropped(self) -> tuple[int, int]:
        path = os.path.join(self.directory, "dropped.json")
        if not os.path.lexists(path):
            return 0, 0
        value = read_json(path, self._shown)
        if not isinstance(value, dict):
            return 0, 0
        count, through = value.get("count", 0), value.get("through", 0)
        return (count, through) if isinstance(count, int) and isinstance(through, int) else (0, 0)

    def _done(self) -> list[Record]:
        return [record for record in map(self._read, self._ids()) if record.phase == "done"]

    @staticmethod
    def _undone_items(records: Iterable[Record]) -> set[tuple[int, int]]:
        return {item.undoes for record in records for item in record.items if item.undoes}

    def history(self) -> History:
        """The entries, newest first, and how many of the oldest the bounds dropped."""
        records = self._done()
        taken = self._undone_items(records)
        entries = []
        for record in reversed(records):
            applied = [i for i, item in enumerate(record.items) if not item.conflict]
            undone = bool(applied) and all((record.id, i) in taken for i in applied)
            paths = tuple(_shown(item) for item in record.items)
            entries.append(
                Summary(record.id, record.tool, record.call_id, record.time_ns, paths, undone)
            )
        return History(tuple(entries), self._dropped()[0])

    def size(self) -> int:
        """Bytes the journal holds (records and stores)."""
        if sys.platform == "win32":
            return _walked_size(self.directory)
        total = 0
        for top, _dirs, files, top_fd in os.fwalk(self.directory, follow_symlinks=False):
            del top
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.stat(name, dir_fd=top_fd, follow_symlinks=False).st_size
        return total

    def opening(self) -> int:
        """A time of the file system's clock, now: what a stage's ``opened_ns`` is."""
        path = os.path.join(self.directory, ".opening")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            return os.fstat(fd).st_ctime_ns
        finally:
            os.close(fd)

    # -- writing -------------------------------------------------------------------

    def commit(
        self,
        tool: str,
        call_id: str | None,
        judged: Judged,
        opened_ns: int,
        *,
        dry_run: bool = False,
        synced: bool = False,
        ready: Callable[[], None] | None = None,
    ) -> Committed:
        """Apply what ``judged`` keeps under a new entry (none when nothing changes);
        ``synced``: the worktree's file system was synced just before (a staged commit),
        so the directories written in may be synced by one ``syncfs`` (``_journal_sync``).
        ``ready`` is called once the paths' states are read, before the entry is written
        and anything is changed (a staged commit waits there for its stage's sync); what
        it raises is raised, nothing applied and no entry left."""
        if dry_run or not judged.kept:
            return Committed(None, ())
        with locked(self.directory, self._shown):
            self._recover_locked()
            root_fd = self._open_root()
            try:
                return self._commit(
                    tool, call_id, judged, opened_ns, root_fd, synced=synced, ready=ready
                )
            finally:
                os.close(root_fd)

    def _open_root(self) -> int:
        try:
            return open_root(self.root)
        except PathError:
            raise JournalError("root_unavailable", "the worktree cannot be opened") from None

    def _next_id(self) -> int:
        """The id of a new entry; a store a server killed before writing its entry left
        under that id (no record names it) is removed first."""
        ids = self._ids()
        number = max([*ids, self._dropped()[1]], default=0) + 1
        shutil.rmtree(self._store(number), ignore_errors=True)
        return number

    def _commit(
        self,
        tool: str,
        call_id: str | None,
        judged: Judged,
        opened_ns: int,
        root_fd: int,
        *,
        synced: bool,
        ready: Callable[[], None] | None,
    ) -> Committed:
        number = self._next_id()
        store = self._store(number)
        os.mkdir(store, PRIVATE_DIRECTORY)
        store_fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        applier = Applier(root_fd, store_fd, number, synced=synced)
        try:
            planned = plan(applier, judged, opened_ns, WALK_LIMIT)
            if ready is not None:
                try:
                    ready()
                except BaseException:
                    self._discard(number)
                    raise
            items = tuple(step.item for step in planned.steps)
            record = Record(number, tool, call_id, time.time_ns(), "pending", items)
            self._write(record)
            failed: list[str] = []
            applied: list[Change] = []
            dropped: list[int] = []
            for position, step in enumerate(planned.steps):
                op, change, item = step.op, step.change, step.item
                if item.kept is not None:
                    with contextlib.suppress(OSError, Refusal):
                        applier.keep(op, item.kept)
                    continue
                if any(beneath(change.path, path) for path in failed):
                    failed.extend(step.paths)
                    dropped.append(position)
                    continue
                try:
                    applier.apply(op, item.saved)
                except (OSError, Refusal):
                    with contextlib.suppress(OSError):
                        applier.rollback(item, op.index, f"r{op.index}")
                    failed.extend(step.paths)
                    dropped.append(position)
                    continue
                applied.append(change)
                applied.extend(step.beneath)
            applier.close()
            copied = applier.copied
        except BaseException:
            applier.close(sync=False)
            raise
        finally:
            os.close(store_fd)
        conflicted = planned.conflicts
        if not applied:
            self._discard(number)
            return Committed(None, (), conflicted, tuple(failed), copied)
        self._finish(record, dropped, _tree_size(store))
        self._prune()
        return Committed(number, tuple(applied), conflicted, tuple(failed), copied)

    def _write(self, record: Record) -> None:
        """Write ``record`` whole (a ``pending`` one first drops a mark a discarded entry
        of the same id may have left)."""
        entries = os.path.join(self.directory, "entries")
        if record.phase == "pending":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(entries, f"{record.id:012d}.done"))
        inode = write_record(entries, f"{record.id:012d}.json", record.json())
        self._index.note(record, inode)

    def _finish(self, record: Record, dropped: Sequence[int], size: int) -> None:
        """Mark the ``pending`` entry ``record`` applied: its items but ``dropped`` (their
        indices), its store holding ``size`` bytes (``Mark``, written whole and synced)."""
        mark = Mark(record.id, tuple(dropped), size)
        entries = os.path.join(self.directory, "entries")
        write_record(entries, f"{record.id:012d}.done", mark.json())
        inode = os.lstat(os.path.join(entries, f"{record.id:012d}.json")).st_ino
        self._index.note(mark.applied(record), inode)

    def _discard(self, number: int) -> None:
        self._index.forget(number)
        for path in (self._mark_path(number), self._entry_path(number)):  # the mark first
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        shutil.rmtree(self._store(number), ignore_errors=True)

    @contextlib.contextmanager
    def replacing(
        self, call_id: str | None, path: str, made: Sequence[tuple[str, int | None]] = ()
    ) -> Iterator[PendingWrite]:
        """Hold the journal for one ``replace`` of ``path`` (its real path beneath the
        root; ``made``: the directories its create made, with their modes). The write
        engine calls ``begin`` before its commit and ``finish`` after it; an entry not
        finished as committed is discarded on the way out."""
        with locked(self.directory, self._shown):
            self._recover_locked()
            number = self._next_id()
            pending = PendingWrite(
                number,
                self._store(number),
                call_id,
                path,
                made,
                self._write,
                self._finish,
                self._discard,
                self._prune,
            )
            try:
                yield pending
            finally:
                pending.finish(committed=False)

    # -- recovery ------------------------------------------------------------------

    def recover(self) -> tuple[int, ...]:
        """Take back every entry a killed server left pending; the ids taken back."""
        with locked(self.directory, self._shown):
            return self._recover_locked()

    def _recover_locked(self) -> tuple[int, ...]:
        pending = [self._read(e.id) for e in self._index.scan() if e.phase == "pending"]
        if not pending:
            return ()
        if sys.platform == "win32":
            self._recover_windows(pending)
            return tuple(record.id for record in pending)
        root_fd = self._open_root()
        try:
            for record in reversed(pending):
                store = self._store(record.id)
                os.makedirs(store, PRIVATE_DIRECTORY, exist_ok=True)
                store_fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                applier = Applier(root_fd, store_fd, record.id)
                try:
                    for index in reversed(range(len(record.items))):
                        item = record.items[index]
                        if item.kept is None:
                            applier.rollback(item, index, f"r{index}")
                finally:
                    applier.close()
                    os.close(store_fd)
                self._discard(record.id)
        finally:
            os.close(root_fd)
        return tuple(record.id for record in pending)

    # -- undo ----------------------------------------------------------------------

    def undo(
        self, entry: int | None = None, *, to: int | None = None, force: bool = False
    ) -> Undone:
        """Return every path of entry ``entry`` (default: the newest not undone), or of
        every entry from the newest down to ``to``, to its state before the call."""
        with locked(self.directory, self._shown):
            self._recover_locked()
            records = self._done()
            known = {record.id: record for record in records}
            for asked in (entry, to):
                if asked is not None and asked not in known:
                    raise JournalError(
                        "unknown_entry", f"no entry {asked} in the journal {self._shown}"
                    )
            taken = self._undone_items(records)
            targets = _targets(records, taken, entry, to)
            if sys.platform == "win32":
                return self._undo_windows(targets, taken, force)
            root_fd = self._open_root()
            try:
                return self._undo(targets, taken, force, root_fd)
            finally:
                os.close(root_fd)

    def _undo(
        self, targets: list[Record], taken: set[tuple[int, int]], force: bool, root_fd: int
    ) -> Undone:
        number = self._next_id()
        store = self._store(number)
        os.mkdir(store, PRIVATE_DIRECTORY)
        store_fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        applier = Applier(root_fd, store_fd, number)
        restored: list[str] = []
        refused: list[str] = []
        dropped: list[int] = []
        record: Record | None = None
        try:
            plan: list[tuple[Op, Item]] = []
            planned: set[str] = set()
            # What a path will hold once the steps planned so far are applied: an older
            # entry's step on it is checked against that, not against the worktree now.
            leaves: dict[str, State | None] = {}
            given_up: set[str] = set()  # refused at a newer step: every older one too
            for target in targets:
                for index in reversed(range(len(target.items))):
                    item = target.items[index]
                    if item.kept is not None or (target.id, index) in taken:
                        continue
                    if item.path in given_up:
                        continue
                    if item.path in leaves:
                        current = leaves[item.path]
                        changed = current != item.after
                    else:
                        found = _current(root_fd, item.path)
                        if isinstance(found, str):  # a device, FIFO or socket: never replaced
                            refused.append(item.path)
                            given_up.add(item.path)
                            continue
                        current = found
                        changed = current != item.after or (
                            target.tool != "undo"
                            and not item.whole
                            and _holds_more(root_fd, item, planned)
                        )
                    if changed and not force:
                        refused.append(item.path)
                        given_up.add(item.path)
                        continue
                    leaves[item.path] = item.before
                    source = None
                    if item.saved is not None:
                        source = os.path.join(self._store(target.id), item.saved)
                    k = len(plan)
                    op = Op(k, item.path, item.before, source)
                    dir_mode_only = (
                        current is not None
                        and current.kind == "directory"
                        and item.before is not None
                        and item.before.kind == "directory"
                        and source is None
                    )
                    saved = None if current is None or dir_mode_only else f"b{k}"
                    planned.add(item.path)
                    plan.append(
                        (
                            op,
                            Item(
                                item.path,
                                current,
                                item.before,
                                saved,
                                None,
                                source,
                                (target.id, index),
                                item.whole,
                            ),
                        )
                    )
            if plan:
                record = Record(
                    number, "undo", None, time.time_ns(), "pending", tuple(i for _, i in plan)
                )
                self._write(record)
                for position, (op, item) in enumerate(plan):
                    try:
                        applier.apply(op, item.saved)
                    except (OSError, Refusal):
                        with contextlib.suppress(OSError):
                            applier.rollback(item, op.index, f"r{op.index}")
                        refused.append(item.path)
                        dropped.append(position)
                        continue
                    restored.append(item.path)
            applier.close()
        except BaseException:
            applier.close(sync=False)
            raise
        finally:
            os.close(store_fd)
        if not restored or record is None:
            self._discard(number)
            return Undone(None, (), tuple(refused))
        self._finish(record, dropped, _tree_size(store))
        self._prune()
        return Undone(number, tuple(restored), tuple(refused))

    # -- Windows -------------------------------------------------------------------

    def _open_root_windows(self) -> int:
        from ._windows import _restore as wr  # noqa: PLC0415 - the Windows modules load only here

        try:
            return wr.open_root(self.root)
        except PathError:
            raise JournalError("root_unavailable", "the worktree cannot be opened") from None

    def _recover_windows(self, pending: list[Record]) -> None:
        """Take back, newest first, each path of a pending entry that holds what the
        entry made of it (the commit happened); the rest were never changed by it."""
        from ._windows import _restore as wr  # noqa: PLC0415 - the Windows modules load only here

        root = self._open_root_windows()
        try:
            for record in reversed(pending):
                store = self._store(record.id)
                for item in reversed(record.items):
                    found = wr.look(root, item.path)
                    if item.kept is None and found != "other" and wr.same(found.state, item.after):
                        source = None if item.saved is None else os.path.join(store, item.saved)
                        wr.apply(root, item.path, found, item.before, source)
                self._discard(record.id)
        finally:
            wr.close(root)

    def _undo_windows(
        self, targets: list[Record], taken: set[tuple[int, int]], force: bool
    ) -> Undone:
        """``_undo`` on Windows: what each path holds now is kept in the undo's own store
        (a file's bytes), the entry is written ``pending``, each path is taken back, the
        entry is marked ``done``. A created directory is removed only when empty."""
        from ._windows import _restore as wr  # noqa: PLC0415 - the Windows modules load only here

        root = self._open_root_windows()
        try:
            number = self._next_id()
            store = self._store(number)
            os.mkdir(store, PRIVATE_DIRECTORY)
            refused: list[str] = []
            plan: list[tuple[Item, wr.Found]] = []
            planned: dict[str, wr.Found] = {}  # what a path will hold after the steps so far
            for target in targets:
                for index in reversed(range(len(target.items))):
                    item = target.items[index]
                    if item.kept is not None or (target.id, index) in taken:
                        continue
                    found = planned.get(item.path) or wr.look(root, item.path)
                    if found == "other" or not (force or wr.same(found.state, item.after)):
                        refused.append(item.path)
                        continue
                    saved = None
                    if found.data is not None:
                        saved = f"b{len(plan)}"
                        try:
                            write_new(os.path.join(store, saved), found.data)
                        except OSError:  # what is there cannot be kept: not taken back
                            refused.append(item.path)
                            continue
                    source = None
                    if item.saved is not None:
                        source = os.path.join(self._store(target.id), item.saved)
                    taking = Item(
                        item.path, found.state, item.before, saved, None, source, (target.id, index)
                    )
                    plan.append((taking, found))
                    before = item.before
                    kept = None if source is None or before is None else wr.stored(source)
                    planned[item.path] = wr.Found(before, kept)
            dropped: list[int] = []
            restored: list[str] = []
            record: Record | None = None
            if plan:
                record = Record(
                    number, "undo", None, time.time_ns(), "pending", tuple(i for i, _ in plan)
                )
                self._write(record)
                for position, (item, found) in enumerate(plan):
                    if wr.apply(root, item.path, found, item.after, item.source):
                        restored.append(item.path)
                    else:
                        refused.append(item.path)
                        dropped.append(position)
        finally:
            wr.close(root)
        if not restored or record is None:
            self._discard(number)
            return Undone(None, (), tuple(refused))
        self._finish(record, dropped, _tree_size(store))
        self._prune()
        return Undone(number, tuple(restored), tuple(refused))

    # -- bounds --------------------------------------------------------------------

    def _prune(self) -> None:
        """Drop the oldest entries beyond the bounds (bytes, age, count)."""
        records = [entry for entry in self._index.scan() if entry.phase == "done"]
        total = sum(record.size for record in records)
        oldest_kept = time.time_ns() - self._max_age_days * DAY_NS
        count, through = self._dropped()
        dropped = 0
        for position, record in enumerate(records):
            left = len(records) - position
            if total <= self._max_bytes and record.time_ns >= oldest_kept and left <= MAX_ENTRIES:
                break
            self._discard(record.id)
            total -= record.size
            dropped += 1
            through = max(through, record.id)
        if dropped:
            write_record(
                self.directory, "dropped.json", {"count": count + dropped, "through": through}
            )


def _default_home() -> str:
    home = state_home()
    if home is None:
        raise JournalError("journal_unusable", "no state directory is known for this user")
    return home


def _current(root_fd: int, path: str) -> State | str | None:
    from ._root import open_directory  # noqa: PLC0415

    parent, _, leaf = path.rpartition("/")
    if not parent:
        return state_at(root_fd, leaf)
    try:
        fd = open_directory(root_fd, parent, follow_symlinks=False)
    except PathError:
        return None
    try:
        return state_at(fd, leaf)
    finally:
        os.close(fd)


def _holds_more(root_fd: int, item: Item, planned: set[str]) -> bool:
    """A directory the call added that now holds entries another writer put there (not
    one this undo takes back: ``planned``)."""
    if item.before is not None or item.after is None or item.after.kind != "directory":
        return False
    try:
        fd = os.open(item.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    except OSError:
        return False
    try:
        return any(f"{item.path}/{name}" not in planned for name in os.listdir(fd))
    finally:
        os.close(fd)


def _targets(
    records: list[Record], taken: set[tuple[int, int]], entry: int | None, to: int | None
) -> list[Record]:
    def open_items(record: Record) -> bool:
        return any(
            item.kept is None and (record.id, i) not in taken for i, item in enumerate(record.items)
        )

    newest_first = list(reversed(records))
    if entry is not None and to is None:
        return [record for record in newest_first if record.id == entry]
    if to is not None:
        chosen = [r for r in newest_first if r.id >= to and (entry is None or r.id <= entry)]
        return [record for record in chosen if open_items(record)]
    for record in newest_first:
        if open_items(record):
            return [record]
    return []


def _walked_size(path: str) -> int:
    """Bytes of the regular files beneath ``path`` (Windows: no ``fwalk``)."""
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                status = os.lstat(os.path.join(top, name))
                if stat.S_ISREG(status.st_mode):
                    total += status.st_size
    return total


def _tree_size(path: str) -> int:
    if sys.platform == "win32":
        return _walked_size(path)
    total = 0
    for _top, _dirs, files, top_fd in os.fwalk(path, follow_symlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                status = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
                if stat.S_ISREG(status.st_mode):
                    total += status.st_size
    return total


def settings_bounds(values: Mapping[str, object]) -> tuple[int, int]:
    """``(max_bytes, max_age_days)`` from settings values, the defaults where unset."""
    max_bytes = values.get("journal_max_bytes", MAX_BYTES)
    max_age = values.get("journal_max_age", MAX_AGE_DAYS)
    return (
        max_bytes if isinstance(max_bytes, int) else MAX_BYTES,
        max_age if isinstance(max_age, int) else MAX_AGE_DAYS,
    )
