"""``judge``: the one protected-paths policy applied to a list of changes (13.1).

Every writer asks it: a staged call's commit (the stage's list) and ``replace`` (a list
of the file and the directories it makes). What it refuses is not applied; a kept git
directory ``config`` may be kept with other bytes (``Judged.rewritten``).

- A change whose path the policy protects (``ProtectedPaths.protects``, and the
  directories the worktree's own ``core.hooksPath`` names) is refused; so is a change
  beneath a protected directory (the policy protects everything beneath it).
- A deleted directory (or a directory the call made something else) is refused as a
  whole when a protected path lies beneath it in the worktree, or when that cannot be
  told within ``DELETION_ENTRIES`` entries: a deletion takes its subtree, which the
  list does not name.
- Two protected names are judged by the git-directory rule instead of by name: a ``.git``
  that is a directory (a repository, not a redirect) and the ``config`` a call adds to a
  git directory (kept by the allow-list of 12.1, as ``git init`` needs).
- The git-directory rule (``_gitdir``): in each directory git would open as a
  repository after the changes (any name, any depth, the root included) that holds a
  change, what runs a program is refused (``RUNNING``, a todo list with ``exec`` and its
  state directory); its added or changed ``config`` is kept by the allow-list. Where the
  changes *make* one (add its ``HEAD``, ``objects`` or ``refs``) and it would still keep
  a ``config`` the allow-list does not keep whole, or one of ``RUNNING``, the changes
  that make it are refused, whatever the order they were made in.

Everything beneath a refused directory change is refused with it.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Sequence
from typing import Final

from ._changes import After, Change, Judged, Kind
from ._gitconfig import MAXIMUM_CONFIG_BYTES, filtered
from ._gitdir import (
    MARKERS,
    RUNNING,
    TODO_BYTES,
    TODOS,
    git_directory,
    hooks_directories,
    inside,
    joined,
    runs_a_command,
)
from ._protected import ProtectedPaths

__all__ = ["DELETION_ENTRIES", "judge", "protected_by_name"]

DELETION_ENTRIES: Final = 10_000
"""Worktree entries one ``judge`` looks at in all beneath deleted directories; a deletion
that reaches the bound is refused (what lies beneath could not all be told)."""

_CONFIG: Final = "config"


def _ancestors(path: str) -> list[str]:
    """The directories above ``path``, the root (``""``) first."""
    parts = path.split("/")
    return ["", *("/".join(parts[:depth]) for depth in range(1, len(parts)))]


def _hooked(hooks: Sequence[str], path: str) -> bool:
    return any(inside(path, hook) for hook in hooks)


def protected_by_name(
    policy: ProtectedPaths, place: str, path: str, hooks: Sequence[str] = ()
) -> bool:
    """Whether ``path`` beneath ``place`` is protected by the policy's names or lies in a
    directory the worktree's ``core.hooksPath`` names (``hooks``), unless given back."""
    if policy.protects(place, path):
        return True
    return policy.standard and _hooked(hooks, path) and not policy.given_back(place, path)


class _Judge:
    def __init__(
        self, policy: ProtectedPaths, place: str, changes: Sequence[Change], after: After
    ) -> None:
        self.policy = policy
        self.place = place
        self.changes = changes
        self.after = after
        self.listed = {change.path: change for change in changes}
        self.refused: set[str] = set()
        self.rewritten: dict[str, bytes] = {}
        self.kinds: dict[str, Kind | None] = {}
        self.budget = DELETION_ENTRIES
        self.hooks = hooks_directories(place) if policy.standard else ()
        self.above: dict[str, tuple[str, ...]] = {}

    def kind(self, path: str) -> Kind | None:
        if path not in self.kinds:
            self.kinds[path] = self.after.kind(path)
        return self.kinds[path]

    def otherwise_protected(self, directory: str) -> bool:
        """Whether ``directory``'s entries are protected whatever their names (it lies in
        a protected directory, or the application protects it)."""
        return protected_by_name(self.policy, self.place, joined(directory, "objects"), self.hooks)

    def by_name(self, change: Change) -> bool:
        path = change.path
        removes_tree = change.before == "directory" and change.kind != "directory"
        if removes_tree and self._protected_on_disk(path):
            return True
        if not protected_by_name(self.policy, self.place, path, self.hooks):
            return False
        parent, name = posixpath.split(path)
        if (
            change.kind == "directory"
            and ProtectedPaths.names_git_directory(name)
            and not self.otherwise_protected(path)
        ):
            return False  # a repository's directory, judged by the git-directory rule
        return not (
            name == _CONFIG
            and change.action == "added"
            and change.kind == "file"
            and git_directory(self.kind, parent)
            and not self.otherwise_protected(parent)
        )  # a new git directory's config: kept by the allow-list

    def _protected_on_disk(self, path: str) -> bool:
        """Whether the worktree's ``path`` (a directory the change removes) holds a
        protected path, or that cannot be told within the budget."""
        top = os.path.join(self.place, *path.split("/"))
        try:
            if not stat.S_ISDIR(os.lstat(top).st_mode):
                return False
        except OSError:
            return False
        pending = [(top, path)]
        while pending:
            directory, relative = pending.pop()
            try:
                with os.scandir(directory) as listing:
                    entries = list(listing)
            except OSError:
                return True
            for entry in entries:
                self.budget -= 1
                if self.budget < 0:
                    return True
                child = f"{relative}/{entry.name}"
                if protected_by_name(self.policy, self.place, child, self.hooks):
                    return True
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, child))
        return False

    def ancestors(self, path: str) -> tuple[str, ...]:
        """``_ancestors(path)``, computed once per parent directory (a commit's paths
        share few)."""
        parent = path.rpartition("/")[0]
        found = self.above.get(parent)
        if found is None:
            found = self.above[parent] = tuple(_ancestors(path))
        return found

    def git_directories(self) -> set[str]:
        candidates: set[str] = set()
        for change in self.changes:
            if change.kind is None:
                continue
            candidates.update(self.ancestors(change.path))
            if change.kind == "directory":
                candidates.add(change.path)
        return {directory for directory in candidates if git_directory(self.kind, directory)}

    def refuse(self, path: str) -> None:
        self.refused.add(path)

    def run(self) -> Judged:
        for change in self.changes:
            if self.by_name(change):
                self.refuse(change.path)
        gits = self.git_directories()
        states: dict[tuple[str, str, str], list[str]] = {}
        for change in self.changes if gits else ():
            if change.kind is None:
                continue
            for directory in self.ancestors(change.path):
                if directory not in gits:
                    continue
                relative = change.path[len(directory) + 1 :] if directory else change.path
                if any(inside(relative, name) for name in RUNNING):
                    self.refuse(change.path)
                for state, todo in TODOS:
                    if inside(relative, state):
                        states.setdefault((directory, state, todo), []).append(change.path)
        for (directory, state, todo), paths in states.items():
            if self._runs(joined(directory, f"{state}/{todo}")):
                self.refused.update(paths)
        for directory in sorted(gits):
            self._config_and_making(directory)
        self._close()
        kept = tuple(change for change in self.changes if change.path not in self.refused)
        refused = tuple(change.path for change in self.changes if change.path in self.refused)
        rewritten = {
            path: data for path, data in self.rewritten.items() if path not in self.refused
        }
        return Judged(kept, refused, rewritten)

    def _runs(self, todo: str) -> bool:
        """Whether the todo list at ``todo`` after the changes runs a command (or is not
        a file that can be read within ``TODO_BYTES``)."""
        if self.kind(todo) is None:
            return False
        data = self.after.read(todo, TODO_BYTES + 1)
        return data is None or len(data) > TODO_BYTES or runs_a_command(data)

    def _safe_config(self, path: str) -> bytes | None:
        """The allow-list's form of the ``config`` at ``path`` after the changes (``None``:
        not a regular file that can be read)."""
        data = self.after.read(path, MAXIMUM_CONFIG_BYTES + 1)
        if data is None:
            return None
        return filtered(data.decode("utf-8", "replace")).encode()

    def _config_and_making(self, directory: str) -> None:
        config = joined(directory, _CONFIG)
        change = self.listed.get(config)
        safe = True
        if change is not None and change.kind is not None and config not in self.refused:
            kept = self._safe_config(config) if change.kind == "file" else None
            if kept is None:
                self.refuse(config)
                safe = change.action == "added"
            elif kept != self.after.read(config, MAXIMUM_CONFIG_BYTES + 1):
                self.rewritten[config] = kept
        elif change is not None and config in self.refused:
            safe = change.action == "added"
        elif change is None and self.kind(config) is not None:
            data = self.after.read(config, MAXIMUM_CONFIG_BYTES + 1)
            safe = data is not None and self._safe_config(config) == data
        making = [
            path
            for path in (joined(directory, name) for name in MARKERS)
            if path in self.listed and _makes(self.listed[path])
        ]
        if not making:
            return  # it was a git directory before: the user's own
        if not safe or any(self._remains(joined(directory, name)) for name in RUNNING):
            self.refused.update(making)

    def _remains(self, path: str) -> bool:
        """Whether ``path`` exists once the refused changes are left out."""
        change = self.listed.get(path)
        if change is not None and path in self.refused and change.action == "added":
            return False
        return self.kind(path) is not None

    def _close(self) -> None:
        """Refuse everything beneath a refused directory change."""
        tops = {
            path
            for path in self.refused
            if path in self.listed
            and "directory" in (self.listed[path].kind, self.listed[path].before)
        }
        if not tops:
            return
        for change in self.changes:
            if any(directory in tops for directory in self.ancestors(change.path)[1:]):
                self.refused.add(change.path)


def _makes(change: Change) -> bool:
    """Whether ``change`` makes its path what it is (added, or its kind changed)."""
    return change.action == "added" or change.before != change.kind


def judge(policy: ProtectedPaths, place: str, changes: Sequence[Change], after: After) -> Judged:
    """The policy's verdict on ``changes`` beneath ``place`` (the worktree's root or an
    ``--allow-write`` directory, absolute), given the worktree as it would be ``after``
    them (see the module docstring). A policy that protects nothing keeps everything."""
    if policy.empty:
        return Judged(tuple(changes))
    return _Judge(policy, place, changes, after).run()
