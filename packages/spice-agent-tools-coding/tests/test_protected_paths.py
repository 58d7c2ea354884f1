"""``ProtectedPaths``: the 12.1 set, ``extra`` and ``unprotect``, and no spelling escapes."""

from __future__ import annotations

import dataclasses
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.tools.coding import Config, ProtectedPaths
from spice.agent.tools.coding._protected import (
    MAXIMUM_EXTRA_PATHS,
    PROTECTED,
    SETTINGS,
    fold,
)

PLACE = "C:\\w" if sys.platform == "win32" else "/w"
"""A place (a worktree root): absolute on this platform."""
STANDARD = ProtectedPaths.default()

PROTECTED_PATHS = (
    ".git/config",
    ".git/config.worktree",
    ".git/hooks/pre-commit",
    ".git/hooks",
    ".git/info/exclude",
    ".git/commondir",
    ".git/gitdir",
    ".git/objects/info/alternates",
    ".git/modules/sub/config",
    ".git/modules/sub/hooks/post-checkout",
    ".git/modules/a/b/c/config",
    ".git/modules/sub/modules/inner/config",
    ".git/worktrees/wt/commondir",
    ".git/worktrees/wt/gitdir",
    ".git/worktrees/wt/config.worktree",
    ".git/modules/sub/worktrees/wt/commondir",
    "vendor/lib/.git/config",
    "vendor/lib/.git",
    ".git",
    ".gitmodules",
    "sub/.gitmodules",
    ".mcp.json",
    "pkg/.mcp.json",
    ".claude/settings.json",
    ".claude/commands/x.md",
    ".gemini/settings.json",
    ".codex/config.toml",
    ".cursor/mcp.json",
    ".vscode/tasks.json",
    ".idea/workspace.xml",
    ".envrc",
    ".direnv/bin/x",
)

OPEN_PATHS = (
    "src/a.py",
    "Makefile",
    ".gitignore",
    ".gitattributes",
    ".github/workflows/ci.yml",
    ".git/HEAD",
    ".git/index",
    ".git/refs/heads/main",
    ".git/logs/HEAD",
    ".git/objects/ab/cdef",
    ".git/objects/info/packs",
    ".git/objects/info/commit-graph",
    ".git/COMMIT_EDITMSG",
    ".git/modules/sub/HEAD",
    ".git/worktrees/wt/HEAD",
    "config",
    "hooks/pre-commit",
    "info/x",
    "docs/.vscode-notes",
    ".claude-notes",
    ".envrc.example",
)


@pytest.mark.parametrize("relative", PROTECTED_PATHS)
def test_the_standard_set_protects(relative: str) -> None:
    """Every path of 12.1's list, at the top and at depth, is protected."""
    assert STANDARD.protects(PLACE, relative)


@pytest.mark.parametrize("relative", OPEN_PATHS)
def test_what_runs_nothing_stays_open(relative: str) -> None:
    """Objects, refs, index, logs, HEAD, build files and look-alike names stay open."""
    assert not STANDARD.protects(PLACE, relative)


@pytest.mark.parametrize("relative", PROTECTED_PATHS)
def test_the_default_value_protects_nothing(relative: str) -> None:
    """``ProtectedPaths()`` (and so ``Config``'s default) is the seed: nothing protected."""
    nothing = ProtectedPaths()
    assert nothing.empty
    assert not nothing.protects(PLACE, relative)
    assert Config(PLACE).protected_paths == nothing


def test_extra_and_unprotect() -> None:
    """``extra`` protects an absolute path and what is beneath; ``unprotect`` wins."""
    policy = ProtectedPaths.default(
        extra=[f"{PLACE}/secrets/token"], unprotect=[f"{PLACE}/.vscode", f"{PLACE}/.git/hooks"]
    )
    assert policy.protects(PLACE, "secrets/token")
    assert policy.protects(PLACE, "SECRETS/token/x")
    assert not policy.protects(PLACE, "secrets/other")
    assert not policy.protects(PLACE, ".vscode/tasks.json")
    assert not policy.protects(PLACE, ".git/hooks/pre-commit")
    assert policy.protects(PLACE, ".git/config")
    assert policy.given_back(PLACE, ".VSCODE/a")
    only_extra = ProtectedPaths(extra=[f"{PLACE}/x"])
    assert not only_extra.empty
    assert only_extra.protects(PLACE, "x")
    assert not only_extra.protects(PLACE, ".git/config")


def test_construction_is_validated() -> None:
    """Relative, NUL or too many paths, a lone string, a non-boolean: ``ValueError``."""
    for bad in (["relative"], ["/a\0b"], "/as/a/string"):
        with pytest.raises(ValueError, match="path"):
            ProtectedPaths(extra=bad)
        with pytest.raises(ValueError, match="path"):
            ProtectedPaths(unprotect=bad)
    many = [f"{PLACE}/p/{index}" for index in range(MAXIMUM_EXTRA_PATHS + 1)]
    with pytest.raises(ValueError, match="more than"):
        ProtectedPaths(extra=many)
    assert len(ProtectedPaths(extra=many[:-1]).extra) == MAXIMUM_EXTRA_PATHS
    with pytest.raises(ValueError, match="boolean"):
        ProtectedPaths(standard=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ProtectedPaths"):
        Config(PLACE, protected_paths="all")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        STANDARD.standard = False  # type: ignore[misc]


def test_the_refusal_names_the_flag_and_no_path() -> None:
    """The reason says the path is protected and names the flag; it is one fixed text."""
    assert "the path is protected" in PROTECTED
    assert "--unprotect PATH" in PROTECTED


def test_fold() -> None:
    """Case, NFKC, HFS+ ignorables, trailing dots and spaces, an NTFS stream suffix."""
    assert fold(".GIT") == ".git"
    assert fold(".g\u200cit") == ".git"
    assert fold(".git. . ") == ".git"
    assert fold("config::$DATA") == "config"
    assert fold("\uff0egit") == ".git"  # a fullwidth full stop
    assert fold("...") == "..."


_IGNORABLES = st.sampled_from(["\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\ufeff"])


@st.composite
def respelled(draw: st.DrawFn) -> str:
    """A protected path spelled as some file system may also read it."""
    prefix = draw(st.lists(st.sampled_from(["src", "a", "vendor", "x y"]), max_size=3))
    path = draw(st.sampled_from(PROTECTED_PATHS))
    parts: list[str] = []
    for part in [*prefix, *path.split("/")]:
        word = "".join(char.upper() if draw(st.booleans()) else char for char in part)
        if draw(st.booleans()) and len(word) > 1:
            at = draw(st.integers(1, len(word) - 1))
            word = word[:at] + draw(_IGNORABLES) + word[at:]
        word += draw(st.sampled_from(["", "", ".", " ", ". ", "::$DATA"]))
        detour = draw(st.sampled_from(["", ".", "", "zz/..", "./."]))
        if detour:
            parts.append(detour)
        parts.append(word)
    separator = draw(st.sampled_from(["/", "\\", "//", "/./"]))
    return separator.join(parts)


@given(respelled())
def test_no_spelling_of_a_protected_path_escapes(spelled: str) -> None:
    """Case, separators, ``.``/``..``, trailing dots and spaces, streams, ignorables."""
    assert STANDARD.protects(PLACE, spelled)


@given(st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)))
def test_names_without_a_dot_are_never_protected(parts: list[str]) -> None:
    """No false alarm on ordinary names (no protected name lacks its leading dot)."""
    assert not STANDARD.protects(PLACE, "/".join(parts))


@given(st.sampled_from(SETTINGS), st.lists(st.sampled_from(["a", "b.txt"]), max_size=3))
def test_settings_are_protected_with_what_is_beneath(name: str, beneath: list[str]) -> None:
    assert STANDARD.protects(PLACE, "/".join(["deep", name, *beneath]))


def test_short_names() -> None:
    """An 8.3 short name stands for every name it may abbreviate."""
    assert STANDARD.protects(PLACE, "GIT~1/config")
    assert STANDARD.protects(PLACE, "GITMOD~1")
    assert STANDARD.protects(PLACE, ".git/CONFIG~1.WOR")
    assert not STANDARD.protects(PLACE, "SRC~1/config")


def test_above_the_place_stays_at_the_place() -> None:
    assert STANDARD.protects(PLACE, "../../.git/config")
    assert STANDARD.protects(PLACE, "..\\.git\\config")
