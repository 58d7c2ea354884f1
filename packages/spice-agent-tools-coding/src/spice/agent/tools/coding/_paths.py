"""The lexical half of root confinement: a model's path checked and cleaned as text.

``clean_path`` turns what a model sent into the ``/``-separated display path beneath the
worktree root (or refuses it as ``invalid_arguments``); ``split_parent`` splits that into
the directory and the leaf; ``PathError`` is the one model-visible failure every part of
the confinement raises. Nothing here opens a file: ``_root`` opens the cleaned path
beneath the root's descriptor (its module docstring tells the whole story).
"""

from __future__ import annotations

import os
import posixpath
import unicodedata
from typing import Final, final

MAXIMUM_PATH_BYTES: Final = 4096
"""Longest path (UTF-8 bytes) ``clean_path`` accepts (POSIX ``PATH_MAX``)."""

MAXIMUM_NAME_BYTES: Final = 255
"""Longest single component (UTF-8 bytes) ``clean_path`` accepts (``NAME_MAX``)."""

# Fixed, model-safe problem texts.
_EMPTY: Final = "path must not be empty"
_NUL: Final = "path must not contain NUL"
_CONTROL: Final = "path must not contain control characters"
_WHITESPACE: Final = "path must not start or end with whitespace"
ABSOLUTE_ELSEWHERE: Final = "an absolute path must lie beneath the worktree root"
LEAVES: Final = "path must not leave the worktree root"
TOO_LONG: Final = "path is too long"
_NAME_TOO_LONG: Final = "a path component is too long"
_NAMES_ROOT: Final = "path names the worktree root itself"


@final
class PathError(Exception):
    """A model-visible path failure.

    ``code`` is one of ``invalid_arguments``, ``root_unavailable``, ``not_found``,
    ``path_unavailable``, ``path_escape``, ``not_regular``; ``str(error)`` is a fixed,
    model-safe text with no path of the machine (but the configured root, which the
    refusal of an absolute path outside it names) and no OS error text. ``changed`` marks
    a race (the object changed while it was being opened), which ``open_beneath`` and
    ``open_directory`` retry with a fresh resolution; the decision never reads the text.
    """

    def __init__(self, code: str, message: str, *, changed: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.changed = changed
        """The object changed under the resolution (a race): a fresh resolution may succeed."""


def invalid(message: str) -> PathError:
    return PathError("invalid_arguments", message)


def clean_path(raw: str, *, root: str | None = None, names_root: bool = True) -> str:
    """Lexically check and clean a path; return the ``/``-separated relative display path.

    Raises ``PathError("invalid_arguments")`` for an empty path, NUL, surrounding
    whitespace, a path whose cleaned form leaves the root, and an absolute path that
    does not lie beneath the root. The root itself cleans to ``"."``; with
    ``names_root=False`` (``read`` and ``replace``, which need a file) it is refused.
    Control characters (Unicode ``Cc``) are rejected; backslashes are ordinary
    characters; no Unicode normalization.

    An absolute path is accepted only when ``root`` (the configured root, absolute and
    normalized as ``Config`` keeps it) is given and the path, cleaned lexically, is the
    root or lies beneath it: as configured, or as resolved (``os.path.realpath``, which
    is computed only when the configured form does not match, so the common cases touch
    no disk). It then means the relative remainder. The check is purely lexical: the
    remainder is opened beneath the root descriptor like any relative path.

    >>> clean_path("src/./pkg//mod.py")
    'src/pkg/mod.py'
    >>> clean_path("a/..")
    '.'
    >>> clean_path("/work/tree/src//a.py", root="/work/tree")
    'src/a.py'
    """
    if not isinstance(raw, str) or not raw:
        raise invalid(_EMPTY)
    if "\0" in raw:
        raise invalid(_NUL)
    if raw != raw.strip():
        raise invalid(_WHITESPACE)
    if any(unicodedata.category(char) == "Cc" for char in raw):
        raise invalid(_CONTROL)
    try:
        size = len(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid("path must be valid Unicode text") from None
    if size > MAXIMUM_PATH_BYTES:
        raise invalid(TOO_LONG)
    relative = raw if not raw.startswith("/") else _beneath_root(raw, root)
    kept: list[str] = []
    for part in relative.split("/"):
        if part in {"", "."}:
            continue
        if part == "..":
            if not kept:
                raise invalid(LEAVES)
            kept.pop()
            continue
        if len(part.encode("utf-8")) > MAXIMUM_NAME_BYTES:
            raise invalid(_NAME_TOO_LONG)
        kept.append(part)
    cleaned = "/".join(kept) if kept else "."
    if cleaned != cleaned.strip():
        # "a /" or "x/.. b" would clean to a path with surrounding whitespace: refuse it
        # as the raw form would be, so cleaning stays idempotent.
        raise invalid(_WHITESPACE)
    if cleaned == "." and not names_root:
        raise invalid(_NAMES_ROOT)
    return cleaned


def _lexical_absolute(path: str) -> str:
    """``path`` (absolute) cleaned by text alone, with exactly one leading ``/``."""
    cleaned = posixpath.normpath(path)
    return "/" + cleaned.lstrip("/")


def _remainder(cleaned: str, root: str) -> str | None:
    """What of the cleaned absolute path lies below ``root``: ``"."`` for the root itself."""
    if cleaned == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    if cleaned.startswith(prefix):
        return cleaned[len(prefix) :]
    return None


def _beneath_root(raw: str, root: str | None) -> str:
    """The relative remainder of an absolute ``raw`` beneath ``root``, or invalid_arguments.

    Beneath means: lexically (as configured, or as resolved), or its resolved directory
    lies beneath the resolved root, so a symlinked spelling of the root works (contract
    10.2); only the directory is resolved, never the final name. The disk is touched
    (``os.path.realpath``) only when the lexical forms do not match. The remainder is
    still opened beneath the root's descriptor, so resolving here confines nothing.
    """
    if root is None:
        raise invalid(ABSOLUTE_ELSEWHERE)
    cleaned = _lexical_absolute(raw)
    configured = _lexical_absolute(root)
    remainder = _remainder(cleaned, configured)
    if remainder is None:
        resolved = _lexical_absolute(os.path.realpath(configured))
        remainder = _remainder(cleaned, resolved)
        if remainder is None:
            directory, _, name = cleaned.rpartition("/")
            below = _remainder(_lexical_absolute(os.path.realpath(directory or "/")), resolved)
            if below is not None:
                remainder = name if below == "." else f"{below}/{name}"
            elif _lexical_absolute(os.path.realpath(cleaned)) == resolved:
                remainder = "."  # the root itself, spelled through a link
    if remainder is None:
        raise invalid(f"{ABSOLUTE_ELSEWHERE} ({configured})")
    return remainder


def split_parent(cleaned: str) -> tuple[str, str]:
    """Split a cleaned path into (parent, leaf); the parent of a top-level name is ``"."``.

    The root itself (``"."``) has no leaf: ``PathError("invalid_arguments")``.

    >>> split_parent("a/b/c.txt")
    ('a/b', 'c.txt')
    >>> split_parent("c.txt")
    ('.', 'c.txt')
    """
    if cleaned == ".":
        raise invalid(_NAMES_ROOT)
    parent, _, leaf = cleaned.rpartition("/")
    return (parent or "."), leaf
