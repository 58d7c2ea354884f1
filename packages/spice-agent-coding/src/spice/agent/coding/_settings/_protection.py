"""The application's protected-paths policy (contract 12.1): ``--unprotect`` judged at
start, and what ``tools`` says is protected.

One ``ProtectedPaths`` value (the product's) is made here from the settings; the
``replace`` tool (through ``Config.protected_paths``) and the sandbox (through the
start facts) obey that same value.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from typing import Final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._gitdir import hooks_directories

from ._file import FileRules
from ._values import link_in_writable_place

__all__ = [
    "MAXIMUM_UNPROTECT",
    "STANDARD_NAMES",
    "UNPROTECT_FLAG",
    "UnprotectError",
    "add_unprotect",
    "hooks_paths_of",
    "policy_of",
    "protection_report",
    "settings_policy",
    "with_extra",
]

UNPROTECT_FLAG: Final = "--unprotect"
MAXIMUM_UNPROTECT: Final = 64
"""At most this many ``--unprotect`` paths."""
NAMED_CHARACTERS: Final = 200
"""At most this many characters of a refused ``--unprotect`` value are named."""

STANDARD_NAMES: Final = (
    (
        "in every git directory at any depth (.git, .git/modules/**, .git/worktrees/*): "
        "config, config.worktree, hooks/, info/, commondir, gitdir, objects/info/alternates"
    ),
    "every .git that is a file, every .gitmodules",
    (
        ".mcp.json, .claude/, .gemini/, .codex/, .cursor/, .vscode/, .idea/, .envrc, "
        ".direnv/, opencode.json, .opencode/, .zed/, .continue/, .amazonq/, .kiro/, .roo/, "
        ".windsurf/, .aider.conf.yml, .devcontainer/, .nvim.lua, .exrc, mise.toml, "
        ".mise.toml at any depth"
    ),
    (
        "hooks: .husky/, .githooks/, .pre-commit-config.yaml, lefthook.yml (and its "
        "spellings) at any depth, and the directory the repository's core.hooksPath names"
    ),
    (
        "in every directory git would open as a repository (HEAD, objects/, refs/; any "
        "name, any depth): hooks/, info/, commondir, gitdir, objects/info/alternates, a "
        "rebase or sequencer todo that runs exec, and a config key off the allow-list"
    ),
)
"""The standard set as ``tools`` names it."""

STAYS_OPEN: Final = (
    "build files and scripts (Makefile, package.json, pyproject.toml, CI workflows, ...) "
    "and every other file: they run when someone runs them; review them"
)


class UnprotectError(ValueError):
    """An ``--unprotect`` path that cannot be given back; one line naming it."""


def _named(path: str) -> str:
    shown = path if len(path) <= NAMED_CHARACTERS else path[:NAMED_CHARACTERS] + "..."
    return repr(shown)


def _beneath(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip(os.sep) + os.sep)


def _given_back(raw: str, root: str, places: Sequence[str], standard: ProtectedPaths) -> str:
    if not raw or "\0" in raw:
        raise UnprotectError(f"{UNPROTECT_FLAG} needs a path")
    path = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(root, raw))
    holding = [place for place in (root, *places) if _beneath(path, place)]
    if not holding:
        raise UnprotectError(
            f"{UNPROTECT_FLAG} {_named(raw)} lies outside the worktree and every "
            "--allow-write directory"
        )
    real = tuple(os.path.realpath(place) for place in (root, *places))
    link = link_in_writable_place(path, real)
    if link is not None:
        raise UnprotectError(
            f"{UNPROTECT_FLAG} {_named(link)} is a symbolic link inside a writable place "
            "(a command could have made it): name the path it points to"
        )
    place = max(holding, key=len)
    relative = os.path.relpath(path, place).replace(os.sep, "/")
    if path == place or not standard.protects(place, relative):
        raise UnprotectError(
            f"{UNPROTECT_FLAG} {_named(raw)} is not protected (`tools` lists what is)"
        )
    return path


def policy_of(
    unprotect: Iterable[str],
    root: str,
    places: Sequence[str] = (),
    extra: Iterable[str] = (),
) -> ProtectedPaths:
    """The standard set with the application's ``extra`` files, less each ``--unprotect``
    path (absolute, or relative to the root); ``UnprotectError`` for one that is not
    protected, lies outside the root and the writable ``places``, or is reached through a
    symbolic link inside one of them (13.1: a link a call made is never followed)."""
    raw = list(unprotect)
    if len(raw) > MAXIMUM_UNPROTECT:
        raise UnprotectError(f"{UNPROTECT_FLAG} is given more than {MAXIMUM_UNPROTECT} times")
    standard = ProtectedPaths.default()
    given = [_given_back(path, root, places, standard) for path in raw]
    # The sandbox names the places by their real paths: both spellings are given back.
    return ProtectedPaths.default(
        extra=[*extra, *hooks_paths_of((root, *places))],
        unprotect=[*given, *(os.path.realpath(path) for path in given)],
    )


def hooks_paths_of(places: Sequence[str]) -> list[str]:
    """The directories each place's own repository names by ``core.hooksPath`` (13.1),
    absolute, as given and as real paths: protected like ``.git/hooks`` by every
    writer, the join's put-back included."""
    found: list[str] = []
    for place in places:
        for relative in hooks_directories(place):
            path = os.path.join(place, *relative.split("/"))
            found += [path, os.path.realpath(path)]
    return list(dict.fromkeys(found))


def settings_policy(
    flagged: tuple[str, ...], rules: FileRules, root: str, places: tuple[str, ...]
) -> ProtectedPaths:
    """The one policy of the settings: the standard set less what ``--unprotect`` and the
    settings file's ``unprotect`` give back; ``UnprotectError`` for one that cannot be
    given back (one from the file names the file, its line and the key)."""
    filed = rules.values("unprotect")
    try:
        policy_of(filed, root, places)
    except UnprotectError as error:
        where = rules.where("unprotect")
        raise UnprotectError(f"{where}: {str(error).partition(' ')[2]}") from None
    return policy_of((*flagged, *filed), root, places)


def with_extra(policy: ProtectedPaths, paths: Iterable[str | None]) -> ProtectedPaths:
    """``policy`` that also protects ``paths`` (the server's own files, as given and as
    their real paths); ``None`` entries are skipped."""
    given = [os.path.abspath(path) for path in paths if path]
    extra = (*policy.extra, *given, *(os.path.realpath(path) for path in given))
    return ProtectedPaths(standard=policy.standard, extra=extra, unprotect=policy.unprotect)


def add_unprotect(parser: argparse.ArgumentParser, dest: str, default: object) -> None:
    """Add ``--unprotect PATH`` (repeatable) to ``parser``."""
    parser.add_argument(
        UNPROTECT_FLAG,
        metavar="PATH",
        action="append",
        dest=dest,
        default=default,
        help="give one protected path back to agents, such as .vscode (repeatable; "
        "`tools` lists what is protected)",
    )


def protection_report(policy: ProtectedPaths) -> dict[str, object]:
    """What ``tools`` says is protected, what was given back, and what stays open."""
    return {
        "protected": list(STANDARD_NAMES) if policy.standard else [],
        "also_protected": list(policy.extra),
        "given_back": list(policy.unprotect),
        "stays_open": STAYS_OPEN,
        "refused": "replace answers path_unavailable; a contained command's change is put "
        "back at its join (protected_restored)",
    }
