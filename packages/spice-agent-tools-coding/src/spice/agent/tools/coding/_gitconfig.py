"""A new repository's ``config`` kept only where it runs nothing (contract 12.1).

The product's git-directory rule (``_gitdir``, contract 13.1) and the application's
join both keep a git directory's ``config`` by it. A contained command may make a
repository (``git init``, ``git remote add``); at the join
its ``config`` is rewritten from the entries an allow-list keeps (``ALLOWED``): git's
defaults that run nothing, ``user.*``, ``init.defaultbranch``, a remote's ``url``,
``pushurl``, ``fetch``, ``push``, ``tagopt``, ``prune`` and ``mirror`` (a URL only on an
ordinary transport: never ``ext::``, another ``helper::``, nor one that begins with
``-``), ``branch.<name>``'s ``remote``, ``merge``, ``rebase``, ``pushremote`` and
``description``, and a submodule's ``url`` and ``active``. Never a key that names a
program, a hook path, a filter, a pager, an editor, an include or a worktree elsewhere:
they are not on the list, and whatever is not on the list is dropped.

Pure: ``filtered(text)`` answers the kept text (canonical form). Anything the small
reader does not understand (a continued line, an unfinished quote, a section header it
cannot read) drops the entry, or all that follows up to the next header it can read.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ALLOWED",
    "MAXIMUM_CONFIG_BYTES",
    "MAXIMUM_HOOKS_PATHS",
    "filtered",
    "hooks_paths",
    "ordinary_url",
]

MAXIMUM_CONFIG_BYTES: Final = 1024 * 1024
"""A new repository's ``config`` larger than this is dropped whole."""

MAXIMUM_HOOKS_PATHS: Final = 16
"""``core.hooksPath`` values one config yields at most (git obeys the last)."""

ALLOWED: Final = {
    "core": frozenset(
        {
            "repositoryformatversion",
            "filemode",
            "bare",
            "logallrefupdates",
            "ignorecase",
            "precomposeunicode",
            "symlinks",
            "autocrlf",
            "eol",
            "safecrlf",
            "quotepath",
        }
    ),
    "extensions": frozenset({"objectformat", "refstorage"}),
    "init": frozenset({"defaultbranch"}),
    "user": None,
    "remote": frozenset({"url", "pushurl", "fetch", "push", "tagopt", "prune", "mirror"}),
    "branch": frozenset({"remote", "merge", "rebase", "pushremote", "description"}),
    "submodule": frozenset({"url", "active"}),
}
"""Section (lower case) to the keys kept (lower case); ``None``: every key of the section
without a subsection (``user.*``). ``remote``, ``branch`` and ``submodule`` need a
subsection; the others must not have one."""

_NEEDS_SUBSECTION: Final = frozenset({"remote", "branch", "submodule"})
_URL_KEYS: Final = frozenset({"url", "pushurl"})
_HEADER: Final = re.compile(
    r'^\[\s*([A-Za-z0-9.-]+)\s*(?:"((?:[^"\\\n]|\\.)*)")?\s*\]\s*(?:[#;].*)?$'
)
_ENTRY: Final = re.compile(r"^([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")
_SAFE_VALUE: Final = re.compile(r'^[^"\\;#\n\r\0]*$')
_SAFE_SUBSECTION: Final = re.compile(r'^[^"\\\n\r\0]*$')
_TRANSPORT: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SCHEMES: Final = ("https://", "http://", "ssh://", "git://", "file://", "git+ssh://", "ssh+git://")


def ordinary_url(url: str) -> bool:
    """Whether ``url`` goes through an ordinary transport (no remote helper, no option).

    >>> ordinary_url("https://example.org/r.git"), ordinary_url("ext::sh -c x")
    (True, False)
    """
    if not url or url.startswith("-") or _TRANSPORT.match(url):
        return False
    lowered = url.lower()
    if "://" in lowered:
        return lowered.startswith(_SCHEMES)
    return True  # scp-like (user@host:path) or a local path


def _value(raw: str) -> str | None:
    """A value kept as written: no quote, escape, comment or continuation in it."""
    value = raw.strip()
    return value if _SAFE_VALUE.match(value) else None


def _kept(section: str, subsection: str | None, key: str, value: str | None) -> bool:
    allowed = ALLOWED.get(section, frozenset())
    if section in _NEEDS_SUBSECTION:
        if subsection is None or not _SAFE_SUBSECTION.match(subsection):
            return False
    elif subsection is not None:
        return False
    if allowed is not None and key not in allowed:
        return False
    if value is None:
        return section in {"core", "user"}  # a bare boolean
    return not (key in _URL_KEYS and not ordinary_url(value))


def filtered(text: str) -> str:
    """The entries of ``text`` the allow-list keeps, in canonical form (see the module)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAXIMUM_CONFIG_BYTES:
        return ""
    kept: dict[tuple[str, str | None], list[str]] = {}
    section: tuple[str, str | None] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            header = _HEADER.match(stripped)
            section = None
            if header is not None and "." not in header.group(1):
                sub = header.group(2)
                section = (header.group(1).lower(), sub)
            continue
        if section is None:
            continue
        entry = _ENTRY.match(stripped)
        if entry is None:
            continue
        key = entry.group(1).lower()
        value = None if entry.group(2) is None else _value(entry.group(2))
        if entry.group(2) is not None and value is None:
            continue
        if _kept(section[0], section[1], key, value):
            kept.setdefault(section, []).append(key if value is None else f"{key} = {value}")
    lines: list[str] = []
    for (name, sub), entries in kept.items():
        lines.append(f"[{name}]" if sub is None else f'[{name} "{sub}"]')
        lines += [f"\t{entry}" for entry in entries]
    return "".join(f"{line}\n" for line in lines)


def _unquoted(raw: str) -> str | None:
    """A value in git's simplest quoting: one pair of double quotes around it, or none;
    ``None`` for an escape or a quote inside (such a value is not read)."""
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value if _SAFE_VALUE.match(value) else None


def hooks_paths(text: str) -> tuple[str, ...]:
    """The ``core.hooksPath`` values of ``text`` (a repository's ``config``), in order, at
    most ``MAXIMUM_HOOKS_PATHS``; a value the small reader cannot read is skipped (the
    caller protects the usual hooks directories whatever this says).

    >>> hooks_paths('[core]\\n\\thooksPath = .githooks\\n')
    ('.githooks',)
    """
    found: list[str] = []
    core = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            header = _HEADER.match(stripped)
            core = header is not None and header.group(1).lower() == "core" and not header.group(2)
            continue
        entry = _ENTRY.match(stripped) if core else None
        if entry is None or entry.group(1).lower() != "hookspath" or entry.group(2) is None:
            continue
        value = _unquoted(entry.group(2))
        if value and len(found) < MAXIMUM_HOOKS_PATHS:
            found.append(value)
    return tuple(found)
