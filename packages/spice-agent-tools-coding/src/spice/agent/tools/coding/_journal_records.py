"""The journal's records on disk: a path's state, an entry, the place and the lock (13.2).

A journal is one directory per worktree beneath ``$XDG_STATE_HOME/spice-coding/journals/``
(default ``~/.local/state/spice-coding/journals/``), named by a digest of the worktree's
real path. It holds ``journal.json`` (the format, the worktree), ``lock`` (the ``flock``
that serialises commits and undos), ``entries/<id>.json`` (one per call that changed the
worktree, written ``pending`` before the first path is changed), ``entries/<id>.done``
(the entry's mark, written once its paths are applied and synced: the items not applied,
the store's size; see ``Mark``) and ``store/<id>/`` (what each entry replaced: ``b<n>``
the path's entry before, ``c<n>`` the call's version of a path left to the user, ``r<n>``
what a recovery took back). Every record is written whole to a temporary name, synced,
then renamed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, final

from ._changes import KINDS, Kind, valid_path

__all__ = [
    "ENTRY_MAX_BYTES",
    "FORMAT",
    "LOCK_WAIT_SECONDS",
    "Item",
    "JournalError",
    "Mark",
    "Phase",
    "Record",
    "State",
    "atomic_json",
    "checked_place",
    "journal_directory",
    "locked",
    "read_json",
    "state_at",
    "state_home",
    "state_of",
    "write_record",
]

FORMAT: Final = 1
"""The journal format this version writes; a journal of a higher one is refused."""
ENTRY_MAX_BYTES: Final = 256 * 1024 * 1024
"""The largest record read back (an entry of about a million paths)."""
LOCK_WAIT_SECONDS: Final = 30.0
"""How long a commit or an undo waits for another one on the same worktree."""
LOCK_POLL_SECONDS: Final = 0.01
APPLICATION: Final = "spice-coding"
PRIVATE_DIRECTORY: Final = 0o700
HASH_CHUNK_BYTES: Final = 1024 * 1024
_PORTABLE: Final = (
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
)
"""Flags every open of a journal file adds where the system has them (Windows has
neither ``O_NOFOLLOW`` nor ``O_CLOEXEC``; it needs ``O_BINARY``)."""
Phase = Literal["pending", "done"]


@final
class JournalError(Exception):
    """A journal that cannot be used: one fixed line naming the place, no OS text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def state_home(environ: Mapping[str, str] | None = None) -> str | None:
    """``$XDG_STATE_HOME`` when absolute, else ``~/.local/state``; ``None`` without a home."""
    environ = os.environ if environ is None else environ
    configured = environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(configured):
        return configured
    home = environ.get("HOME") or os.path.expanduser("~")
    if not os.path.isabs(home):
        return None
    return os.path.join(home, ".local", "state")


def journal_directory(home: str, root: str) -> str:
    """The journal of the worktree ``root`` (a real path) beneath the state home ``home``."""
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
    return os.path.join(home, APPLICATION, "journals", key)


def _beneath(path: str, root: str) -> bool:
    path, root = os.path.normcase(path), os.path.normcase(root)  # Windows folds case
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def checked_place(directory: str, root: str) -> str:
    """Make ``directory`` (the journal) if missing and check it is a safe place.

    Refused: a journal beneath the worktree, a journal in a directory another user may
    write (group or other write without the sticky bit, or owned by another user), a
    journal another user may write or owns. Returns the real path.
    """
    real = os.path.realpath(directory)
    if _beneath(real, root) or _beneath(root, real):
        raise JournalError(
            "journal_in_worktree", f"the journal {directory} lies within the worktree; refused"
        )
    _check_ancestors(os.path.dirname(real), directory)
    try:
        os.makedirs(real, mode=PRIVATE_DIRECTORY, exist_ok=True)
        status = os.lstat(real)
    except OSError:
        raise JournalError(
            "journal_unusable", f"the journal {directory} could not be made or opened"
        ) from None
    if not stat.S_ISDIR(status.st_mode) or not _own(status) or _open_bits(status):
        raise JournalError(
            "journal_writable",
            f"the journal {directory} may be written by another user; refused",
        )
    return real


def _open_bits(status: os.stat_result) -> int:
    """Group or other write bits (Windows has none: its ACLs are not judged here)."""
    return 0 if sys.platform == "win32" else status.st_mode & 0o022


def _own(status: os.stat_result) -> bool:
    if sys.platform == "win32":  # pragma: no cover - Windows has no owner bits here
        return True
    return status.st_uid in (os.getuid(), 0) if os.getuid() == 0 else status.st_uid == os.getuid()


def _check_ancestors(path: str, directory: str) -> None:
    """Every existing ancestor is owned by us or root, and no other user may rename in it."""
    while True:
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            status = None
        except OSError:
            raise JournalError(
                "journal_unusable", f"the journal {directory} could not be made or opened"
            ) from None
        if status is not None and sys.platform != "win32":
            mine = status.st_uid in (0, os.getuid())
            open_to_others = status.st_mode & 0o022 and not status.st_mode & stat.S_ISVTX
            if not mine or open_to_others:
                raise JournalError(
                    "journal_writable",
                    f"the journal {directory} lies in a place another user may write; refused",
                )
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


@final
@dataclass(frozen=True, slots=True)
class State:
    """A path's state: its kind, permission bits (``None`` for a link), SHA-256 of a
    file's bytes or of a link's target (``None`` for a directory)."""

    kind: Kind
    mode: int | None
    sha256: str | None

    def json(self) -> dict[str, object]:
        return {"kind": self.kind, "mode": self.mode, "sha256": self.sha256}

    @staticmethod
    def parse(value: object) -> State | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError
        kind, mode, digest = value.get("kind"), value.get("mode"), value.get("sha256")
        if kind not in KINDS or not isinstance(mode, int | None):
            raise ValueError
        if not isinstance(digest, str | None):
            raise ValueError
        return State(kind, mode, digest)


def state_at(dir_fd: int, name: str) -> State | Literal["other"] | None:
    """The state of ``name`` in ``dir_fd`` (never following a link); ``"other"`` for a
    device, FIFO or socket, or a file that cannot be read."""
    try:
        status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError:
        return "other"
    return state_of(dir_fd, name, status)


def state_of(dir_fd: int, name: str, status: os.stat_result) -> State | Literal["other"]:
    """``state_at`` of ``name`` whose ``lstat`` is ``status`` (already taken)."""
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        return State("directory", stat.S_IMODE(mode), None)
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return "other"
        return State("symlink", None, hashlib.sha256(os.fsencode(target)).hexdigest())
    if not stat.S_ISREG(mode):
        return "other"
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except OSError:
        return "other"
    try:
        return State("file", stat.S_IMODE(mode), digest_fd(fd))
    except OSError:
        return "other"
    finally:
        os.close(fd)


def digest_fd(fd: int) -> str:
    """SHA-256 of everything ``fd`` holds from where it is."""
    digest = hashlib.sha256()
    while chunk := os.read(fd, HASH_CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()


@final
@dataclass(frozen=True, slots=True)
class Item:
    """One path of an entry: its state before and after, and where the journal keeps
    what it replaced (``saved``), the call's version left to the user (``kept``), and
    for a commit that is being applied, the absolute path of the new entry (``source``)."""

    path: str
    before: State | None
    after: State | None
    saved: str | None = None
    kept: str | None = None
    source: str | None = None
    undoes: tuple[int, int] | None = None
    """For an undo's item: the entry and item it takes back."""
    whole: bool = False
    """A directory added with its whole subtree in one rename (``Change.whole``): the
    entry names the directory only, and an undo moves it whole into its store."""

    @property
    def action(self) -> str:
        if self.before is None:
            return "added"
        return "deleted" if self.after is None else "modified"

    @property
    def conflict(self) -> bool:
        return self.kept is not None

    def json(self) -> dict[str, object]:
        value: dict[str, object] = {
            "path": self.path,
            "before": None if self.before is None else self.before.json(),
            "after": None if self.after is None else self.after.json(),
            "saved": self.saved,
            "kept": self.kept,
            "source": self.source,
        }
        if self.undoes is not None:
            value["undoes"] = list(self.undoes)
        if self.whole:
            value["whole"] = True
        return value

    @staticmethod
    def parse(value: object) -> Item:
        if not isinstance(value, dict):
            raise ValueError
        path, saved, kept, source = (value.get(k) for k in ("path", "saved", "kept", "source"))
        if not isinstance(path, str) or not valid_path(path):
            raise ValueError
        for name in (saved, kept):
            if not (name is None or (isinstance(name, str) and name.isalnum())):
                raise ValueError
        if not isinstance(source, str | None):
            raise ValueError
        undoes = value.get("undoes")
        pair: tuple[int, int] | None = None
        if undoes is not None:
            if not (isinstance(undoes, list) and len(undoes) == 2):
                raise ValueError
            if not all(isinstance(number, int) for number in undoes):
                raise ValueError
            pair = (int(undoes[0]), int(undoes[1]))
        before, after = State.parse(value.get("before")), State.parse(value.get("after"))
        whole = value.get("whole", False)
        if not isinstance(whole, bool):
            raise ValueError
        if whole and "directory" not in {s.kind for s in (before, after) if s is not None}:
            raise ValueError
        return Item(path, before, after, saved, kept, source, pair, whole)


@final
@dataclass(frozen=True, slots=True)
class Record:
    """One entry: a call that changed the worktree (or an undo)."""

    id: int
    tool: str
    call_id: str | None
    time_ns: int
    phase: Phase
    items: tuple[Item, ...]
    size: int = 0
    """Bytes the entry's store holds (what the journal's bound counts)."""

    def json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "id": self.id,
            "tool": self.tool,
            "call_id": self.call_id,
            "time_ns": self.time_ns,
            "phase": self.phase,
            "size": self.size,
            "items": [item.json() for item in self.items],
        }

    @staticmethod
    def parse(value: object) -> Record:
        if not isinstance(value, dict):
            raise ValueError
        number, tool, call_id = value.get("id"), value.get("tool"), value.get("call_id")
        time_ns, phase, size = value.get("time_ns"), value.get("phase"), value.get("size")
        items = value.get("items")
        if not isinstance(number, int) or not isinstance(tool, str):
            raise ValueError
        if not isinstance(call_id, str | None) or not isinstance(time_ns, int):
            raise ValueError
        if phase not in ("pending", "done") or not isinstance(size, int):
            raise ValueError
        if not isinstance(items, list):
            raise ValueError
        parsed = tuple(Item.parse(item) for item in items)
        return Record(
            number, tool, call_id, time_ns, "done" if phase == "done" else "pending", parsed, size
        )


@final
@dataclass(frozen=True, slots=True)
class Mark:
    """An entry's ``done`` mark (``entries/<id>.done``): the entry's record stays as it
    was written ``pending``, and the mark says it was applied, which of its items were
    not (``dropped``: their indices, taken back), and the bytes its store holds.

    Rewriting the whole record ``done`` cost a second encoding and a second synced write
    of every item (about 9 ms for 1,000 paths); the mark is a few bytes. A record written
    ``done`` by an earlier version is read as it was.
    """

    id: int
    dropped: tuple[int, ...]
    size: int

    def json(self) -> dict[str, object]:
        return {"format": FORMAT, "id": self.id, "dropped": list(self.dropped), "size": self.size}

    @staticmethod
    def parse(value: object) -> Mark:
        if not isinstance(value, dict):
            raise ValueError
        number, dropped, size = value.get("id"), value.get("dropped"), value.get("size")
        if not isinstance(number, int) or not isinstance(size, int):
            raise ValueError
        if not isinstance(dropped, list) or not all(isinstance(i, int) for i in dropped):
            raise ValueError
        return Mark(number, tuple(dropped), size)

    def applied(self, record: Record) -> Record:
        """``record`` (this entry's, ``pending``) as applied: ``done``, without its
        dropped items, no item naming its source."""
        if record.id != self.id:
            raise ValueError
        dropped = set(self.dropped)
        items = tuple(
            Item(i.path, i.before, i.after, i.saved, i.kept, None, i.undoes, i.whole)
            for index, i in enumerate(record.items)
            if index not in dropped
        )
        return Record(
            record.id, record.tool, record.call_id, record.time_ns, "done", items, self.size
        )


def read_json(path: str, directory: str) -> object:
    """A record's JSON (bounded by ``ENTRY_MAX_BYTES``); ``JournalError`` when it cannot be
    read, is too large, or was written by a newer version."""
    unusable = JournalError(
        "journal_unusable", f"the journal {directory} holds an unreadable record"
    )
    try:
        fd = os.open(path, os.O_RDONLY | _PORTABLE)
    except OSError:
        raise unusable from None
    try:
        data = os.read(fd, ENTRY_MAX_BYTES + 1)
        chunks = [data]
        total = len(data)
        while data and total <= ENTRY_MAX_BYTES:
            data = os.read(fd, ENTRY_MAX_BYTES + 1 - total)
            chunks.append(data)
            total += len(data)
    except OSError:
        raise unusable from None
    finally:
        os.close(fd)
    if total > ENTRY_MAX_BYTES:
        raise unusable
    try:
        value = json.loads(b"".join(chunks))
    except ValueError:
        raise unusable from None
    if isinstance(value, dict):
        version = value.get("format")
        if isinstance(version, int) and version > FORMAT:
            raise JournalError(
                "journal_newer",
                f"the journal {directory} was written by a newer version of spice-coding",
            )
    return value


def _written(fd: int, data: bytes) -> int:
    """Write all of ``data`` to the new file ``fd``, sync it and close it; its inode."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def atomic_json(directory_fd: int, name: str, value: object) -> int:
    """Write ``name`` in ``directory_fd`` whole: a synced temporary, a rename, a synced
    directory. A crash leaves the old record or the new one. Returns the new file's
    inode (each write is a new file)."""
    temporary = f".{name}.tmp"
    data = json.dumps(value, separators=(",", ":")).encode()
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=directory_fd,
    )
    inode = _written(fd, data)
    os.rename(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    os.fsync(directory_fd)
    return inode


def write_record(directory: str, name: str, value: object) -> int:
    """``atomic_json`` of ``name`` in the directory ``directory`` (a path). On Windows,
    whose Python opens no directory by descriptor, by path: a synced temporary, then
    ``os.replace`` (NTFS logs the rename; a directory cannot be synced from Python)."""
    if sys.platform != "win32":
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return atomic_json(fd, name, value)
        finally:
            os.close(fd)
    temporary = os.path.join(directory, f".{name}.tmp")
    data = json.dumps(value, separators=(",", ":")).encode()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _PORTABLE, 0o600)
    inode = _written(fd, data)
    os.replace(temporary, os.path.join(directory, name))
    return inode


def write_new(path: str, data: bytes) -> None:
    """A new file ``path`` (never an existing one) holding ``data``, synced."""
    _written(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _PORTABLE, 0o600), data)


@contextlib.contextmanager
def locked(directory: str, shown: str, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Hold the journal's ``flock`` (bounded wait: ``JournalError`` when another commit
    or undo holds it longer than ``wait`` seconds)."""
    try:
        fd = os.open(
            os.path.join(directory, "lock"),
            os.O_RDWR | os.O_CREAT | _PORTABLE,
            0o600,
        )
    except OSError:
        raise JournalError("journal_unusable", f"the journal {shown} could not be locked") from None
    try:
        if sys.platform == "win32":
            _lock_windows(fd, shown, wait)
        else:
            _flock(fd, shown, wait)
        yield
    finally:
        _unlock_windows(fd)
        os.close(fd)


def _flock(fd: int, shown: str, wait: float) -> None:
    import fcntl  # noqa: PLC0415 - POSIX only

    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise JournalError(
                    "journal_unusable", f"the journal {shown} could not be locked"
                ) from None
        else:
            return
        if time.monotonic() >= deadline:
            raise JournalError(
                "journal_busy", f"the journal {shown} is held by another commit or undo"
            )
        time.sleep(LOCK_POLL_SECONDS)


def _lock_windows(fd: int, shown: str, wait: float) -> None:
    """The Windows counterpart of ``_flock``: a byte-range lock of the ``lock`` file's
    first byte (``_unlock_windows`` before the close), polled up to ``wait`` seconds."""
    if sys.platform != "win32":
        return
    import msvcrt  # noqa: PLC0415 - Windows only

    deadline = time.monotonic() + wait
    while True:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            pass
        else:
            return
        if time.monotonic() >= deadline:
            raise JournalError(
                "journal_busy", f"the journal {shown} is held by another commit or undo"
            )
        time.sleep(LOCK_POLL_SECONDS)


def _unlock_windows(fd: int) -> None:
    if sys.platform != "win32":
        return
    import msvcrt  # noqa: PLC0415 - Windows only

    with contextlib.suppress(OSError):
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
