"""``ProtectedPaths``: the one policy of paths beneath a root that no agent may change.

Contract 12.1. A frozen value, pure: it never touches the disk. ``ProtectedPaths()``
protects nothing (the seed's behaviour); ``ProtectedPaths.standard()`` protects, at any
depth beneath a place (the worktree root or an ``--allow-write`` directory):

- in every git directory (``.git``, and each one under ``.git/modules/**`` and
  ``.git/worktrees/*``): ``config``, ``config.worktree``, ``hooks/``, ``info/``,
  ``commondir``, ``gitdir`` and ``objects/info/alternates`` (``GIT_DIRECTORY_FILES``,
  ``GIT_DIRECTORY_TREES``);
- every ``.git`` itself where it is a file (a gitdir redirect: a path whose last
  component is ``.git``) and every ``.gitmodules``;
- the agent and editor settings and hook managers' files of ``SETTINGS`` (``.mcp.json``,
  ``.claude/``, ``opencode.json``, ``.husky/``, ``lefthook.yml``, ...);
- the absolute paths the application adds (``extra``: its own files);

less each path given back (``unprotect``, with everything beneath it).

The matcher compares components the way any file system the tools run on could read
them, so that no spelling of a protected path escapes: ``/`` and ``\\`` both separate,
``.`` and empty components are skipped, ``..`` goes up (never above the place), and a
name is folded (Unicode NFKC and case folding, the code points HFS+ ignores removed,
trailing dots and spaces and an NTFS stream suffix ``:...`` dropped, and an 8.3 short
name ``GITMOD~1`` taken for every name it may abbreviate). So it protects more spellings
than one file system has (``.GIT/Config`` on a case-sensitive one); it never protects
fewer.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, final

__all__ = [
    "GIT_DIRECTORY_FILES",
    "GIT_DIRECTORY_TREES",
    "MAXIMUM_EXTRA_PATHS",
    "PLAIN_SETTINGS",
    "PROTECTED",
    "SETTINGS",
    "ProtectedPaths",
    "fold",
]

GIT_DIRECTORY_FILES: Final = (
    "config",
    "config.worktree",
    "commondir",
    "gitdir",
    "objects/info/alternates",
)
"""Files of a git directory that say what git runs or where its config lies."""

GIT_DIRECTORY_TREES: Final = ("hooks", "info")
"""Directories of a git directory protected with everything beneath them."""

SETTINGS: Final = (
    ".gitmodules",
    ".mcp.json",
    ".claude",
    ".gemini",
    ".codex",
    ".cursor",
    ".vscode",
    ".idea",
    ".envrc",
    ".direnv",
    # contract 13.1: more agents' and editors' settings
    "opencode.json",
    ".opencode",
    ".zed",
    ".continue",
    ".amazonq",
    ".kiro",
    ".roo",
    ".windsurf",
    ".aider.conf.yml",
    ".devcontainer",
    ".nvim.lua",
    ".exrc",
    "mise.toml",
    ".mise.toml",
    # hook managers: their files say what runs at the user's next commit
    ".husky",
    ".githooks",
    ".pre-commit-config.yaml",
    "lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yml",
    ".lefthook.yaml",
    "lefthook-local.yml",
    "lefthook-local.yaml",
)
"""Names protected (with everything beneath them) wherever they appear: the agents' and
editors' settings, which run programs when a tool next opens the worktree, the hook
managers' files and usual ``core.hooksPath`` directories (``.husky/``, ``.githooks/``,
``.pre-commit-config.yaml``, ``lefthook.yml``: they say what the user's next ``git
commit`` runs), and ``.gitmodules`` (it names where git clones and checks out)."""

PLAIN_SETTINGS: Final = frozenset(name for name in SETTINGS if not name.startswith("."))
"""The names of ``SETTINGS`` that do not begin with a dot (a scan that looks only at
dotted names looks at these too)."""

DOT_GIT: Final = ".git"

MAXIMUM_EXTRA_PATHS: Final = 256
"""At most this many ``extra`` and this many ``unprotect`` paths in one policy."""

FOLD_CACHE: Final = 4096
"""Folded names kept (``fold`` is pure; a scan asks about the same names again)."""

UNPROTECT_FLAG: Final = "--unprotect"
"""The application's flag that gives a protected path back (named in refusals)."""

PROTECTED: Final = (
    "the path is protected: git's config, hooks and redirects, agent and editor settings "
    "and the server's own files run or are obeyed later, outside any sandbox; the user "
    f"can give one back with {UNPROTECT_FLAG} PATH"
)
"""The model-visible reason ``replace`` gives for a protected path (code
``path_unavailable``); fixed, with no path of the machine in it."""

_IGNORABLE: Final = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
"""Code points HFS+ ignores in names (so ``.g\u200cit`` is ``.git`` there)."""
_SHORT: Final = re.compile(r"^([^~.]{1,6})~[0-9]+(?:\.[^.]{0,3})?$")
"""An NTFS 8.3 short name: up to six characters, ``~``, a number, an optional extension."""


@functools.lru_cache(maxsize=FOLD_CACHE)
def fold(component: str) -> str:
    """One name as the most forgiving file system reads it (see the module docstring).

    >>> fold(".GIT. ")
    '.git'
    >>> fold("Config::$DATA")
    'config'
    """
    name = _IGNORABLE.sub("", unicodedata.normalize("NFKC", component)).casefold()
    name = name.partition(":")[0]
    return name.rstrip(". ") if name.strip(". ") else name.strip(" ")


def _same(folded: str, name: str) -> bool:
    """Whether the folded component may name ``name`` (exactly, or by an 8.3 short name)."""
    if folded == name:
        return True
    if "~" not in folded:
        return False
    short = _SHORT.match(folded)
    return short is not None and name.replace(".", "").startswith(short.group(1))


def _components(relative: str, *, windows: bool) -> list[str]:
    """The folded components of ``relative`` after ``.``, empty and ``..`` are resolved.

    ``windows``: ``\\`` separates too, and a component that is only dots and spaces is
    ``..`` when it begins with two dots, else ``.`` (Win32 drops trailing dots and
    spaces). A ``..`` above the place stays at the place.
    """
    parts = relative.replace("\\", "/").split("/") if windows else relative.split("/")
    kept: list[str] = []
    for raw in parts:
        bare = raw.strip(". ") == "" if windows else raw in {"", ".", ".."}
        if bare:
            parent = raw.rstrip(" ").startswith("..") if windows else raw == ".."
            if parent and kept:
                kept.pop()
            continue
        kept.append(fold(raw))
    return kept


def _git_tail(rest: Sequence[str]) -> bool:
    """Whether ``rest`` (beneath a ``.git``) names a protected path of some git directory."""
    if not rest:
        return False
    for tree in GIT_DIRECTORY_TREES:
        if _same(rest[0], tree):
            return True
    for file in GIT_DIRECTORY_FILES:
        names = file.split("/")
        if len(rest) >= len(names) and all(
            _same(part, name) for part, name in zip(rest, names, strict=False)
        ):
            return True
    if _same(rest[0], "modules"):
        # A submodule's name may hold slashes: every depth may be its git directory.
        return any(_git_tail(rest[start:]) for start in range(2, len(rest)))
    if _same(rest[0], "worktrees"):
        return _git_tail(rest[2:])
    return False


@functools.lru_cache(maxsize=FOLD_CACHE)
def _setting(part: str) -> bool:
    """Whether the folded component may name one of ``SETTINGS`` (a commit asks about the
    same directory names for each of its paths)."""
    return any(_same(part, name) for name in SETTINGS)


def _standard_match(parts: Sequence[str]) -> bool:
    """The 12.1 default set, on folded components relative to a place."""
    for index, part in enumerate(parts):
        if _setting(part):
            return True
        if _same(part, DOT_GIT) and (index == len(parts) - 1 or _git_tail(parts[index + 1 :])):
            return True
    return False


def _absolute(path: str) -> str:
    """A normalised absolute path (``ValueError`` for a relative one or one with NUL)."""
    if not isinstance(path, str) or "\0" in path or not os.path.isabs(path):
        raise ValueError("a protected or unprotected path must be absolute")
    return os.path.normpath(path)


def _paths(value: Iterable[str], field: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{field} must be a collection of absolute paths")
    paths = tuple(sorted({_absolute(path) for path in value}))
    if len(paths) > MAXIMUM_EXTRA_PATHS:
        raise ValueError(f"{field} holds more than {MAXIMUM_EXTRA_PATHS} paths")
    return paths


def _folded_absolute(path: str) -> tuple[str, ...]:
    """An absolute path's folded components, under both readings (separators kept apart)."""
    return tuple(_components(path, windows=True))


def _beneath(path: Sequence[str], top: Sequence[str]) -> bool:
    return len(path) >= len(top) and tuple(path[: len(top)]) == tuple(top)


@final
@dataclass(frozen=True, slots=True, init=False)
class ProtectedPaths:
    """Which paths beneath a place no agent may change (see the module docstring).

    ``standard``: whether the 12.1 default set applies; ``extra``: more absolute paths
    protected (with everything beneath); ``unprotect``: absolute paths given back (with
    everything beneath), which win over both.

    >>> ProtectedPaths().protects("/w", ".git/config")
    False
    >>> ProtectedPaths.default().protects("/w", "sub/.GIT/modules/a/b/hooks/x")
    True
    >>> ProtectedPaths.default(unprotect=["/w/.vscode"]).protects("/w", ".vscode/a")
    False
    """

    standard: bool
    extra: tuple[str, ...]
    unprotect: tuple[str, ...]

    def __init__(
        self,
        *,
        standard: bool = False,
        extra: Iterable[str] = (),
        unprotect: Iterable[str] = (),
    ) -> None:
        if not isinstance(standard, bool):
            raise ValueError("standard must be a boolean")
        object.__setattr__(self, "standard", standard)
        object.__setattr__(self, "extra", _paths(extra, "extra"))
        object.__setattr__(self, "unprotect", _paths(unprotect, "unprotect"))

    @classmethod
    def default(cls, extra: Iterable[str] = (), unprotect: Iterable[str] = ()) -> ProtectedPaths:
        """The 12.1 default set, with the application's ``extra`` and ``unprotect``."""
        return cls(standard=True, extra=extra, unprotect=unprotect)

    @property
    def empty(self) -> bool:
        """Whether this policy protects nothing at all."""
        return not self.standard and not self.extra

    @staticmethod
    def names_git_directory(name: str) -> bool:
        """Whether the one component ``name`` may be read as ``.git`` (in any spelling)."""
        return "/" not in name and "\\" not in name and _same(fold(name), DOT_GIT)

    def matches_standard(self, relative: str) -> bool:
        """Whether ``relative`` (beneath any place) is in the default set, in any spelling."""
        if not self.standard:
            return False
        return _standard_match(_components(relative, windows=False)) or _standard_match(
            _components(relative, windows=True)
        )

    def given_back(self, place: str, relative: str) -> bool:
        """Whether ``place/relative`` lies at or beneath an ``unprotect`` path."""
        if not self.unprotect:
            return False
        target = _folded_absolute(posixpath.join(place, relative) if relative else place)
        return any(_beneath(target, _folded_absolute(path)) for path in self.unprotect)

    def protects(self, place: str, relative: str) -> bool:
        """Whether no agent may change ``relative`` (``/``-separated) beneath ``place``."""
        if self.empty:
            return False
        if not self.matches_standard(relative) and not self._extra(place, relative):
            return False
        return not self.given_back(place, relative)

    def _extra(self, place: str, relative: str) -> bool:
        if not self.extra:
            return False
        target = _folded_absolute(posixpath.join(place, relative) if relative else place)
        return any(_beneath(target, _folded_absolute(path)) for path in self.extra)
