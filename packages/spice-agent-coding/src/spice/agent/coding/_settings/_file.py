"""The settings file (contract 12.2): rules a running server reads again before each call.

``--settings FILE`` (else ``SPICE_AGENT_SETTINGS``, else
``$XDG_CONFIG_HOME/spice-coding/settings.toml``): TOML with the keys of ``KEYS`` at the
top and in per-worktree tables ``[worktree."/absolute/root"]`` (the table of the served
root adds to the top). The command line's flags add to it (``_settings``).

- **Where it may lie** (``placement_problem``): a regular file outside the worktree and
  every writable place, owned by the server's user, not writable by group or others, in
  a directory that is the user's (or root's) and not writable by group or others; else
  the server does not start (exit 2), and a later read refuses calls.
- **What it may say** (``parse_rules``): only ``KEYS``, each of its type; anything else
  (a file that does not parse, an unknown key, a wrong type) is a ``SettingsFileError``
  naming the file, the line and the key, never the value; nothing of such a file is used.
- **Read before each call** (``SettingsFile.current``): a ``stat`` compared with the last
  one; only a change is read again (at most ``MAXIMUM_SETTINGS_BYTES``). A file that was
  there and is gone refuses calls too: its denials would silently go with it.

Standard library only (``tomllib``); platform-neutral but for the owner check, which
holds where ``os.geteuid`` exists.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, final

__all__ = [
    "DEFAULT_BENEATH",
    "DEFAULT_RELATIVE",
    "KEYS",
    "MAXIMUM_LIST_ITEMS",
    "MAXIMUM_SETTINGS_BYTES",
    "SETTINGS_VARIABLE",
    "FileRules",
    "SettingsFile",
    "SettingsFileError",
    "checked_rules",
    "default_settings_path",
    "lies_beneath",
    "open_settings_file",
    "parse_rules",
    "placement_problem",
    "settings_path",
]

SETTINGS_VARIABLE: Final = "SPICE_AGENT_SETTINGS"
"""Where the settings file is when no ``--settings`` names it."""

DEFAULT_RELATIVE: Final = os.path.join("spice-coding", "settings.toml")
"""The settings file beneath ``$XDG_CONFIG_HOME`` (else ``~/.config``)."""

MAXIMUM_SETTINGS_BYTES: Final = 65_536
"""A settings file is at most this large (a larger one refuses calls)."""

DEFAULT_BENEATH: Final = (
    "the settings file %s lies beneath the worktree or a writable place: a command could "
    "write it, so it is not used; name one outside with --settings"
)
"""The warning when the *default* settings path lies where a command could write it (a
HOME inside the worktree): that file is ignored; a named one there stops the start."""

MAXIMUM_LIST_ITEMS: Final = 256
"""A list in the settings file has at most this many items."""

MAXIMUM_SHOWN_KEY: Final = 64
"""At most this many characters of an unknown key are named (escaped)."""

_LIST: Final = "list"
_BOOL: Final = "bool"
_WHOLE: Final = "whole"
_SIZE: Final = "size"

KEYS: Final[Mapping[str, str]] = {
    "allow_domains": _LIST,
    "allow_private_address": _BOOL,
    "allow_write": _LIST,
    "deny_read": _LIST,
    "allow_read": _LIST,
    "allow_env": _LIST,
    "unprotect": _LIST,
    "max_processes": _WHOLE,
    "max_memory": _SIZE,
    "journal_max_bytes": _SIZE,
    "journal_max_age": _WHOLE,
    "ca_files": _LIST,
}
"""The keys a settings file (and each of its worktree tables) may hold, and their kinds:
a list of strings, a boolean, a whole number, or a size (a whole number of bytes or a
string such as ``"2G"``)."""

_WORKTREE: Final = "worktree"
_TYPE_WORDS: Final = {
    _LIST: "a list of strings",
    _BOOL: "true or false",
    _WHOLE: "a whole number",
    _SIZE: 'a whole number of bytes or a string such as "2G"',
}
_POSITION: Final = re.compile(r"\(at line (\d+), column \d+\)")


class SettingsFileError(ValueError):
    """The settings file cannot be used; the message names the file, the line and the key
    (never a value)."""


@final
@dataclass(frozen=True, slots=True)
class FileRules:
    """What the settings file says for one root: the top and that root's table, joined
    (lists: the top's, then the table's; scalars: the table's wins)."""

    path: str | None = None
    """The file, ``None`` when there is none."""
    lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    allow_private_address: bool = False
    max_processes: int | None = None
    max_memory: str | None = None
    lines: Mapping[str, int] = field(default_factory=dict)
    journal_max_bytes: str | None = None
    """The journal's bound in bytes as written (``_journal_bounds`` reads it)."""
    journal_max_age: int | None = None
    """The line that sets each key (the worktree table's where it sets one)."""

    def values(self, key: str) -> tuple[str, ...]:
        """The list ``key`` holds (empty when absent)."""
        return self.lists.get(key, ())

    def where(self, key: str) -> str:
        """``settings file PATH, line N: KEY``: where ``key`` was set, for messages."""
        return f"settings file {self.path}, line {self.lines.get(key, 1)}: {key}"


def settings_path(
    given: str | None, environ: Mapping[str, str], home: str | None
) -> tuple[str | None, bool]:
    """The settings file to read and whether it was named (``--settings``, else
    ``SETTINGS_VARIABLE``), else the default (``None`` without a home)."""
    if given is not None:
        return given, True
    named = environ.get(SETTINGS_VARIABLE, "")
    if named.strip():
        return named, True
    return default_settings_path(environ, home), False


def default_settings_path(environ: Mapping[str, str], home: str | None) -> str | None:
    """``$XDG_CONFIG_HOME/spice-coding/settings.toml`` (else ``~/.config/...``)."""
    chosen = environ.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(chosen):
        return os.path.join(chosen, DEFAULT_RELATIVE)
    return None if home is None else os.path.join(home, ".config", DEFAULT_RELATIVE)


def _shown(key: str) -> str:
    return key[:MAXIMUM_SHOWN_KEY].encode("unicode_escape").decode("ascii")


def _line_of(text: str, table: str | None, key: str) -> int:
    """The line that sets ``key`` in ``table`` (``None``: the top), 1-based; else the table's
    header line, else 1. A reading for messages only (``tomllib`` gives no positions)."""
    current: str | None = None
    header = 1
    pattern = re.compile(r"\s*(?:\"" + re.escape(key) + r"\"|" + re.escape(key) + r")\s*=")
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            current = stripped.strip("[] ")
            if table is not None and table in current:
                header = number
            continue
        in_table = current is None if table is None else (current is not None and table in current)
        if in_table and pattern.match(line):
            return number
    return header


def _error(path: str, line: int, key: str, what: str) -> SettingsFileError:
    return SettingsFileError(f"settings file {path}, line {line}: {_shown(key)} {what}")


def _judge(
    path: str, text: str, table: str | None, values: Mapping[str, object]
) -> dict[str, object]:
    """The known keys of one table, each checked against its kind."""
    judged: dict[str, object] = {}
    for key, value in values.items():
        kind = KEYS.get(key)
        if kind is None:
            raise _error(path, _line_of(text, table, key), key, "is not a setting: the "
                         "settings are " + ", ".join(KEYS))  # fmt: skip
        ok = (
            (
                kind == _LIST
                and isinstance(value, list)
                and len(value) <= MAXIMUM_LIST_ITEMS
                and all(isinstance(item, str) for item in value)
            )
            or (kind == _BOOL and isinstance(value, bool))
            or (kind == _WHOLE and isinstance(value, int) and not isinstance(value, bool))
            or (
                kind == _SIZE
                and (
                    isinstance(value, str)
                    or (isinstance(value, int) and not isinstance(value, bool))
                )
            )
        )
        if not ok:
            bound = f" of at most {MAXIMUM_LIST_ITEMS}" if kind == _LIST else ""
            raise _error(
                path, _line_of(text, table, key), key, f"must be {_TYPE_WORDS[kind]}{bound}"
            )
        judged[key] = value
    return judged


def parse_rules(path: str, text: str, root: str) -> FileRules:
    """The rules ``text`` (the file at ``path``) gives the worktree ``root``;
    ``SettingsFileError`` naming the line and the key for anything not understood."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        found = _POSITION.search(str(error))
        line = int(found.group(1)) if found else max(1, len(text.splitlines()))
        raise SettingsFileError(
            f"settings file {path}, line {line}: does not parse as TOML"
        ) from None
    worktrees = document.pop(_WORKTREE, {})
    top = _judge(path, text, None, document)
    if not isinstance(worktrees, dict):
        raise _error(path, _line_of(text, None, _WORKTREE), _WORKTREE, 'must hold tables '
                     '[worktree."/absolute/root"]')  # fmt: skip
    chosen: dict[str, object] = {}
    chosen_name: str | None = None
    for name, table in worktrees.items():
        where = f'{_WORKTREE}."{name}"'
        if not isinstance(table, dict) or not os.path.isabs(name):
            raise _error(path, _line_of(text, None, _WORKTREE), where, "must be a table named "
                         "by an absolute root")  # fmt: skip
        judged = _judge(path, text, name, table)
        if os.path.normpath(name) == os.path.normpath(root):
            chosen, chosen_name = judged, name
    lists = {
        key: (*top.get(key, ()), *chosen.get(key, ()))  # type: ignore[misc]
        for key, kind in KEYS.items()
        if kind == _LIST and (key in top or key in chosen)
    }
    merged = {**top, **chosen}
    lines = {key: _line_of(text, None, key) for key in top}
    lines |= {key: _line_of(text, chosen_name, key) for key in chosen}
    processes = merged.get("max_processes")
    memory = merged.get("max_memory")
    journal_bytes, journal_age = merged.get("journal_max_bytes"), merged.get("journal_max_age")
    return FileRules(
        path,
        {key: tuple(str(item) for item in value) for key, value in lists.items()},
        bool(top.get("allow_private_address", False) or chosen.get("allow_private_address", False)),
        processes if isinstance(processes, int) else None,
        None if memory is None else str(memory),
        lines,
        None if journal_bytes is None else str(journal_bytes),
        journal_age if isinstance(journal_age, int) else None,
    )


def _beneath(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip(os.sep) + os.sep)


def lies_beneath(path: str, places: tuple[str, ...]) -> bool:
    """Whether ``path`` (links resolved) is one of ``places`` or beneath one."""
    real = os.path.realpath(path)
    return any(_beneath(real, os.path.realpath(place)) for place in places)


def placement_problem(path: str, places: tuple[str, ...]) -> str | None:
    """Why the settings file at ``path`` may not be used (``None``: it may): beneath one of
    ``places`` (the root, the writable places), not a regular file, not the user's, or
    writable by group or others (it or its directory)."""
    real = os.path.realpath(path)
    if lies_beneath(path, places):
        return f"the settings file {path} lies beneath the worktree or a writable place"
    try:
        info = os.stat(real)
        parent = os.stat(os.path.dirname(real))
    except OSError:
        return f"the settings file {path} cannot be read"
    if not stat.S_ISREG(info.st_mode):
        return f"the settings file {path} is not a regular file"
    user = os.geteuid() if hasattr(os, "geteuid") else None
    if user is not None and info.st_uid != user:
        return f"the settings file {path} is not owned by the server's user"
    if user is not None and parent.st_uid not in {user, 0}:
        return f"the directory of the settings file {path} is not the server's user's"
    if info.st_mode & 0o022 or parent.st_mode & 0o022:
        return (
            f"the settings file {path} (or its directory) may be written by group or "
            "others (chmod go-w it)"
        )
    return None


@final
class SettingsFile:
    """The settings file of one server: read at start, again before each call on a change.

    ``current()`` answers the rules, or raises ``SettingsFileError`` (a file that cannot
    be used refuses the call, never widens it). ``places``: the root and the writable
    places it must lie outside.
    """

    __slots__ = ("_key", "_outcome", "_seen", "path", "places", "root")

    def __init__(self, path: str, root: str, places: tuple[str, ...]) -> None:
        self.path = path
        self.root = root
        self.places = places
        self._key: tuple[int, ...] | None = None
        self._seen = False
        self._outcome: FileRules | SettingsFileError = FileRules()

    def _stat_key(self) -> tuple[int, ...] | None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError:
            return (-1,)
        return (
            info.st_dev,
            info.st_ino,
            info.st_size,
            info.st_mtime_ns,
            info.st_ctime_ns,
            info.st_mode,
            info.st_uid,
        )

    def current(self) -> FileRules:
        """The rules now (read again only when the file's ``stat`` changed)."""
        key = self._stat_key()
        if key != self._key or not self._seen:
            self._outcome = self._read(key)
            self._key = key
            self._seen = True
        if isinstance(self._outcome, SettingsFileError):
            raise self._outcome
        return self._outcome

    def _read(self, key: tuple[int, ...] | None) -> FileRules | SettingsFileError:
        if key is None:
            if self._seen and self._outcome != FileRules():
                return SettingsFileError(
                    f"the settings file {self.path} is gone (restore it or restart the server)"
                )
            return FileRules()
        problem = placement_problem(self.path, self.places)
        if problem is not None:
            return SettingsFileError(problem)
        try:
            with open(self.path, "rb") as file:
                data = file.read(MAXIMUM_SETTINGS_BYTES + 1)
        except OSError:
            return SettingsFileError(f"the settings file {self.path} cannot be read")
        if len(data) > MAXIMUM_SETTINGS_BYTES:
            return SettingsFileError(
                f"the settings file {self.path} is larger than {MAXIMUM_SETTINGS_BYTES} bytes"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return SettingsFileError(f"settings file {self.path}, line 1: is not UTF-8")
        try:
            return parse_rules(self.path, text, self.root)
        except SettingsFileError as error:
            return error


def open_settings_file(
    path: str | None, named: bool, places: tuple[str, ...]
) -> SettingsFile | None:
    """The settings file to watch (``None``: none is named and the default does not exist).
    ``SettingsFileError`` (the start stops) for a named one that is not an absolute path or
    is missing, and for one that lies where it may not (``placement_problem``)."""
    if path is None or not os.path.isabs(path):
        if named:
            raise SettingsFileError("--settings takes an absolute path")
        return None
    if not os.path.lexists(path):
        if named:
            raise SettingsFileError(f"the settings file {path} does not exist")
        return None
    problem = placement_problem(path, places)
    if problem is not None:
        raise SettingsFileError(problem)
    return SettingsFile(path, places[0], places)


def checked_rules(file: SettingsFile | None) -> FileRules:
    """``file``'s rules now, its place judged against the writable places it names too."""
    if file is None:
        return FileRules()
    rules = file.current()
    if rules.path is None:
        return rules  # no file (yet): nothing to place
    problem = placement_problem(file.path, (*file.places, *rules.values("allow_write")))
    if problem is not None:
        raise SettingsFileError(problem)
    return rules
