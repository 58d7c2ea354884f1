"""A commit's plan: the judged changes turned into the journal's operations (13.1, 13.2).

Each kept change becomes one operation (``Op``) and one item of the entry (``Item``): its
state before (kind, mode, SHA-256, read once through the applier's held directories), its
state after (a file's SHA-256 read once from the stage, or from the bytes the policy
rewrote), and whether another writer got there first (``conflicts``: the user's edits win).

A whole added directory (``Change.whole``: the call added it and everything beneath it,
and the stage's directory holds exactly that) becomes one operation and one item: one
rename of the stage's directory, however many paths lie beneath it. It is collapsed only
when the policy kept all of it (no path at or beneath it refused, no file beneath it
rewritten); otherwise each path is applied on its own, as any other. The changes beneath
a collapsed directory stay in the plan (``Planned.beneath``) so that the commit says
truthfully which paths were applied, failed or left to the user.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

from ._changes import Change, Judged
from ._journal_apply import Applier, Op, Refusal
from ._journal_records import Item, State, digest_fd

__all__ = ["Plan", "Planned", "after_state", "beneath", "collapsible", "plan"]


def beneath(path: str, ancestor: str) -> bool:
    """Whether ``path`` lies beneath the directory ``ancestor`` (not ``ancestor`` itself)."""
    return path.startswith(ancestor + "/")


@final
@dataclass(frozen=True, slots=True)
class Planned:
    """One operation of a plan: the change it applies, its item, and the changes beneath
    it that it applies too (a whole directory's; else empty)."""

    op: Op
    change: Change
    item: Item
    beneath: tuple[Change, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the operation applies, its own first."""
        return (self.change.path, *(change.path for change in self.beneath))


@final
@dataclass(frozen=True, slots=True)
class Plan:
    """The operations in order, and the paths left to the user (``conflicts``)."""

    steps: tuple[Planned, ...]
    conflicts: tuple[str, ...]


def collapsible(change: Change, inner: Sequence[Change], judged: Judged) -> bool:
    """Whether the whole directory ``change`` (with ``inner``, the kept changes beneath
    it) is applied by one rename: nothing at or beneath it refused or rewritten."""
    if not change.whole or change.source is None:
        return False
    top = change.path

    def within(path: str) -> bool:
        return path == top or beneath(path, top)

    if any(within(path) for path in judged.refused):
        return False
    if any(within(path) for path in judged.rewritten):
        return False
    return all(beneath(inner_change.path, top) for inner_change in inner)


def plan(applier: Applier, judged: Judged, opened_ns: int, walk_limit: int) -> Plan:
    """The plan of ``judged`` on the worktree the applier holds (``walk_limit``: entries
    beneath a deleted directory looked at for another writer's change)."""
    kept = judged.kept
    steps: list[Planned] = []
    conflicted: list[str] = []
    position = 0
    while position < len(kept):
        index, change = position, kept[position]
        position += 1
        inner: tuple[Change, ...] = ()
        whole = False
        if change.whole:
            end = position
            while end < len(kept) and beneath(kept[end].path, change.path):
                end += 1
            if collapsible(change, kept[position:end], judged):
                whole, inner, position = True, kept[position:end], end
        data = judged.rewritten.get(change.path)
        after = None if change.kind is None else after_state(change, data)
        # A directory's source is moved only when it is applied whole.
        source = change.source if whole or change.kind != "directory" else None
        op = Op(index, change.path, after, source, data, change.link)
        ancestor = any(beneath(change.path, path) for path in conflicted)
        status = applier.exists(change.path)
        if change.action == "added":
            conflict = ancestor or status is not None
        else:
            conflict = ancestor or applier.changed_since(change.path, opened_ns, walk_limit, status)
        before: State | None = None
        if change.before is not None and status is not None:
            before = applier.state(change.path, status)
        dir_mode_only = (
            before is not None
            and before.kind == "directory"
            and after is not None
            and after.kind == "directory"
        )
        saved = None if before is None or dir_mode_only else f"b{index}"
        if conflict:
            item = Item(change.path, before, after, None, f"c{index}", source, whole=whole)
        else:
            item = Item(change.path, before, after, saved, None, source, whole=whole)
        step = Planned(op, change, item, inner)
        steps.append(step)
        if conflict:
            conflicted.extend(step.paths)
    return Plan(tuple(steps), tuple(conflicted))


def after_state(change: Change, data: bytes | None) -> State:
    """What ``change`` makes its path (``data``: the bytes the policy wrote instead of
    the source's); a file's bytes are read once. ``Refusal`` without a source."""
    if change.kind is None:
        raise Refusal
    if change.kind == "directory":
        return State("directory", change.mode, None)
    if data is not None:
        return State("file", change.mode, hashlib.sha256(data).hexdigest())
    source = change.source
    if source is None:
        raise Refusal
    if change.kind == "symlink":
        return State("symlink", None, hashlib.sha256(os.fsencode(os.readlink(source))).hexdigest())
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return State("file", change.mode, digest_fd(fd))
    finally:
        os.close(fd)
