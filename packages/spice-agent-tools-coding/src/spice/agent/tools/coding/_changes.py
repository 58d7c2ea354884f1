"""A call's changes to a worktree: the exact list a commit judges and applies (13.1, 13.2).

A staged call's stage (an overlay's upper layer on the namespace path) yields one ``Change``
per path the call added, modified or deleted, made by the kernel and complete by
construction. The protected-paths policy judges that list (``Judged``), and the commit
applies what it keeps under the worktree's journal. ``replace`` makes a list of one.

Paths are relative to the root, ``/``-separated, with no empty, ``.`` or ``..`` component,
and never the root itself. A list is sorted by path (``sorted_changes``), so a directory
comes before what lies beneath it. A deleted directory is one change that takes its whole
subtree; nothing beneath it is listed. ``modified`` says the path existed before and exists
after, whatever its kind was and is (a file made a directory is one ``modified`` change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, final

__all__ = [
    "ACTIONS",
    "KINDS",
    "SHOWN_CHANGES",
    "Action",
    "After",
    "Change",
    "Judged",
    "Kind",
    "shown_changes",
    "sorted_changes",
    "valid_path",
]

Action = Literal["added", "modified", "deleted"]
Kind = Literal["file", "directory", "symlink"]
ACTIONS: Final[tuple[Action, ...]] = ("added", "modified", "deleted")
KINDS: Final[tuple[Kind, ...]] = ("file", "directory", "symlink")

SHOWN_CHANGES: Final = 32
"""Paths an answer's ``changes`` names at most (``"A src/new.py"``); the counts stay whole."""

_LETTER: Final[Mapping[Action, str]] = {"added": "A", "modified": "M", "deleted": "D"}


def valid_path(path: str) -> bool:
    """Whether ``path`` is a change's path: relative, ``/``-separated, no empty, ``.`` or
    ``..`` component, no NUL, not the root."""
    if not path or "\0" in path or path.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


@final
@dataclass(frozen=True, slots=True)
class Change:
    """One path a call changed.

    - ``kind``: what the path is after the call (``None`` when deleted);
    - ``before``: what it was before the call (``None`` when added);
    - ``mode``: its permission bits after (``stat.S_IMODE``), ``None`` when deleted and
      for a symbolic link;
    - ``source``: where the new entry lies in the stage, an absolute path (a file's bytes,
      a link's target, a ``whole`` directory), else ``None`` (a directory, a deletion);
    - ``link``: files the call made as hard links of one another share one number (the
      commit makes them links again), else ``None``;
    - ``whole``: an added directory whose whole subtree the call added and whose stage
      directory holds exactly the changes listed beneath it (``source`` is that stage
      directory): the commit may move it with one rename. The changes beneath it are
      still listed (the answer counts every path); only the apply is collapsed.
    """

    path: str
    action: Action
    kind: Kind | None
    before: Kind | None
    mode: int | None = None
    source: str | None = field(default=None, repr=False)
    link: int | None = None
    whole: bool = False

    def __post_init__(self) -> None:
        if not valid_path(self.path):
            raise ValueError("a change's path must be relative and normal")
        if self.action not in ACTIONS:
            raise ValueError("a change's action is added, modified or deleted")
        if (self.kind is None) != (self.action == "deleted"):
            raise ValueError("a change has a kind unless it is a deletion")
        if (self.before is None) != (self.action == "added"):
            raise ValueError("a change had a kind before unless it is an addition")
        if not {self.kind, self.before} <= {None, *KINDS}:
            raise ValueError("a change's kind is file, directory or symlink")
        if self.whole and (
            self.action != "added" or self.kind != "directory" or self.source is None
        ):
            raise ValueError("a whole change is an added directory with its source")

    @property
    def shown(self) -> str:
        """The answer's spelling: ``"A src/new.py"``, ``"M a.txt"``, ``"D build/"``
        (a directory ends with ``/``)."""
        directory = (self.kind or self.before) == "directory"
        return f"{_LETTER[self.action]} {self.path}{'/' if directory else ''}"


def sorted_changes(changes: Iterable[Change]) -> tuple[Change, ...]:
    """The changes by path, component by component (``a/b`` before ``a.b``), so a
    directory comes before everything beneath it."""
    return tuple(sorted(changes, key=lambda change: change.path.split("/")))


def shown_changes(changes: Iterable[Change]) -> dict[str, object]:
    """The answer's ``changes``: whole counts, and at most ``SHOWN_CHANGES`` paths."""
    counts: dict[str, int] = dict.fromkeys(ACTIONS, 0)
    paths: list[str] = []
    for change in changes:
        counts[change.action] += 1
        if len(paths) < SHOWN_CHANGES:
            paths.append(change.shown)
    return {**counts, "paths": paths}


class After(Protocol):
    """The worktree as it would be once a list of changes is applied: what the policy
    looks at to judge them (a git directory is judged by what it would hold)."""

    def kind(self, path: str) -> Kind | None:
        """The kind of ``path`` (relative, as a change's) after the changes, or ``None``."""
        ...

    def read(self, path: str, limit: int) -> bytes | None:
        """The first ``limit`` bytes of the file ``path`` after the changes, or ``None``
        when it is not a regular file there or cannot be read."""
        ...


@final
@dataclass(frozen=True, slots=True)
class Judged:
    """The policy's verdict on a list of changes.

    - ``kept``: the changes to apply, in order;
    - ``refused``: the paths the policy refused (nothing of them is applied);
    - ``rewritten``: for a kept file, the bytes to write instead of its source's (a git
      directory's ``config`` reduced to what runs nothing).
    """

    kept: tuple[Change, ...]
    refused: tuple[str, ...] = ()
    rewritten: Mapping[str, bytes] = field(default_factory=dict)
