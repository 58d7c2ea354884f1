"""What a write decides before it writes, written once for both platforms (review D10).

The values both write engines answer with (:class:`Outcome`, its fixed texts), what the
look at the target found (:class:`Current`, :class:`Absent`, :class:`Occupied`), one
write's :class:`Request`, and the ladder from what was found to what is done:
``decide``. ``_commit`` (POSIX, on a held directory descriptor) and ``_windows._commit``
(on a held NT handle) each look at the target their own way and ask ``decide``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias, final

__all__ = [
    "ABORTED",
    "CLEANUP_INCOMPLETE",
    "CLOSE_FAILED",
    "CREATE_FAILED",
    "DIRECTORIES_LEFT",
    "DURABILITY_UNCONFIRMED",
    "EDIT_NOT_FOUND",
    "EXISTS",
    "EXISTS_SAME",
    "JOURNAL_FAILED",
    "NOTHING_CHANGED",
    "NOT_FOUND",
    "NOT_REGULAR",
    "PATH_UNAVAILABLE",
    "READ_FAILED",
    "REPLACE_FAILED",
    "STALE",
    "STALE_SAME",
    "SYNC_FAILED",
    "TARGET_TOO_LARGE",
    "TEMPORARY_FAILED",
    "WRITE_FAILED",
    "Absent",
    "Current",
    "Found",
    "Journaling",
    "Occupied",
    "Outcome",
    "Request",
    "decide",
    "exists_outcome",
    "stale_outcome",
]


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """What the engine did. ``code`` is ``None`` for success; ``aborted`` for cancellation."""

    code: str | None = None
    message: str = ""
    committed: bool = False
    changed: bool = False
    created: bool = False
    durable: bool = False
    temporary_cleaned: bool = True
    hard_links_split: bool = False
    owner_changed: bool = False
    current_sha256: str | None = None
    aborted: bool = False
    directories_cleaned: bool = True


ABORTED: Final = Outcome(aborted=True)

# Fixed problem texts.
NOT_FOUND: Final = "the file does not exist; pass create: true to create it"
EDIT_NOT_FOUND: Final = "the file does not exist; to create it, use content with create: true"
"""The edit form's answer for a missing file (``create`` with ``edits`` is refused)."""
NOT_REGULAR: Final = (
    "the target is not a regular file; symlinks, directories and special files are never replaced"
)
TARGET_TOO_LARGE: Final = (
    "the current file is larger than the bound of this form "
    "(max_write_bytes for content, max_edit_bytes for edits)"
)
PATH_UNAVAILABLE: Final = "the target could not be inspected"
READ_FAILED: Final = "the current file could not be read"
STALE: Final = "the file does not have the expected sha256; read it again and retry"
STALE_SAME: Final = (
    "the file does not have the expected sha256, but it already holds exactly the requested content"
)
EXISTS: Final = "something already exists at the path; create never overwrites"
EXISTS_SAME: Final = "the file already exists and already holds exactly the requested content"
NOTHING_CHANGED: Final = "; nothing was changed"
"""How every pre-commit failure text ends (``_replace`` withdraws it when that is untrue)."""
DIRECTORIES_LEFT: Final = "; parent directories this call made could not all be removed"
TEMPORARY_FAILED: Final = "the temporary file could not be created or prepared; nothing was changed"
WRITE_FAILED: Final = "the temporary file could not be written; nothing was changed"
SYNC_FAILED: Final = "the temporary file could not be synced to storage; nothing was changed"
CLOSE_FAILED: Final = "the temporary file could not be closed; nothing was changed"
REPLACE_FAILED: Final = "the file could not be replaced; nothing was changed"
CREATE_FAILED: Final = "the file could not be created; nothing was changed"
JOURNAL_FAILED: Final = (
    "the worktree's journal could not keep what this write replaces, so it could not be "
    "undone; nothing was changed"
)
DURABILITY_UNCONFIRMED: Final = (
    "the change was committed, but syncing it to storage failed: it may not survive a crash"
)
CLEANUP_INCOMPLETE: Final = "the change was committed, but the temporary file could not be removed"


@final
@dataclass(frozen=True, slots=True)
class Current:
    """A regular file found at the target."""

    device: int
    inode: int
    mode: int
    links: int
    uid: int
    gid: int
    sha256: str
    data: bytes = dataclasses.field(default=b"", repr=False)
    """The bytes read (the edit form of ``replace`` edits them)."""


@final
@dataclass(frozen=True, slots=True)
class Absent:
    """Nothing at the target."""


@final
@dataclass(frozen=True, slots=True)
class Occupied:
    """Something that is not a readable regular file within the bound."""

    code: str
    message: str
    symlink: bool = False


Found: TypeAlias = Current | Absent | Occupied


class Journaling(Protocol):
    """What keeps a write undoable (``_journal_write.PendingWrite``): called at the commit
    point, under the commit lock, after the last check and before the rename or link."""

    def begin(self, dir_fd: int, leaf: str, replaced: int | None, sha256: str, fd: int) -> None:
        """Keep ``leaf`` (inode ``replaced``; ``None``: a create) and write the entry;
        ``fd`` is the new file. ``OSError`` when it cannot: the write is not committed."""
        ...

    def begin_bytes(self, before: bytes | None, sha256: str) -> None:
        """Windows' ``begin``: keep ``before`` (the replaced bytes the last check read;
        ``None``: a create) and write the entry. ``OSError``: the write is not committed."""
        ...


@final
@dataclass(frozen=True, slots=True)
class Request:
    """One write: ``expected`` is the digest to replace, or ``None`` to create;
    ``journal``: the worktree's journal's entry for it (``None``: not journaled)."""

    leaf: str
    data: bytes
    sha256: str
    expected: str | None
    limit: int
    journal: Journaling | None = None


def decide(found: Found, request: Request) -> Outcome | Current | None:
    """The ladder both engines climb once the target was looked at: an :class:`Outcome` to
    answer at once (nothing written), else what the write replaces (the :class:`Current`
    file), or ``None`` for a create of an absent target."""
    if request.expected is None:
        if isinstance(found, Occupied) and found.code == "path_unavailable":
            return Outcome(found.code, found.message)
        if not isinstance(found, Absent):
            return exists_outcome(found, request)
        return None
    if isinstance(found, Absent):
        return Outcome("not_found", NOT_FOUND)
    if isinstance(found, Occupied):
        return Outcome(found.code, found.message)
    if found.sha256 != request.expected:
        return stale_outcome(found.sha256, request)
    if request.sha256 == request.expected:
        # The same content: a successful no-op. Nothing was written, so nothing needed
        # syncing (or flushing): the file on disk is exactly as durable as before.
        return Outcome(durable=True)
    return found


def exists_outcome(found: Current | Absent | Occupied | object, request: Request) -> Outcome:
    """The answer to a create whose target exists (the same bytes say so); both engines'."""
    if isinstance(found, Current):
        same = found.sha256 == request.sha256
        return Outcome(
            "already_exists", EXISTS_SAME if same else EXISTS, current_sha256=found.sha256
        )
    return Outcome("already_exists", EXISTS)


def stale_outcome(digest: str, request: Request) -> Outcome:
    """The answer to a write whose target's digest is not the expected one; both engines'."""
    same = digest == request.sha256
    return Outcome("stale", STALE_SAME if same else STALE, current_sha256=digest)
