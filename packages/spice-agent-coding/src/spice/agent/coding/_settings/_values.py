"""One parse of each sandbox setting's text: names, writable places, read rules, bounds.

Each takes the raw text as the command line, a variable or the settings file gave it and
answers the value, or raises ``SettingsError``: one fixed line naming the flag (or
variable) and never the value, but for ``--allow-read``'s, cut and escaped. ``_settings``
chooses where the text comes from; this module only reads it.

- ``allowed_names``: ``--allow-env`` names (``SPICE_AGENT_ALLOW_ENV`` comma-separated);
- ``allow_write``: ``--allow-write`` directories (``SPICE_AGENT_ALLOW_WRITE``);
- ``deny_read``: more existing absolute paths outside the worktree to hide;
- ``allow_read``: more places beneath the home to show, which a contained command
  otherwise sees only through ``_sandbox.HOME_SHOWN`` (contract 12.2);
- ``max_processes`` and ``max_memory``: one call's bounds;
- ``ca_files``: the settings file's PEM files every contained command trusts too
  (``_netpolicy._cabundle``, contract 13.4).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from .._netpolicy._cabundle import MAXIMUM_CA_FILES, ca_file_problem
from .._sandbox import DEFAULT_MAX_PROCESSES, MIN_MEMORY_BYTES, home_directory
from ._file import FileRules

_T = TypeVar("_T")

__all__ = [
    "ALLOW_ENV_FLAG",
    "ALLOW_ENV_VARIABLE",
    "ALLOW_WRITE_FLAG",
    "ALLOW_WRITE_VARIABLE",
    "MAXIMUM_ALLOWED_NAMES",
    "MAXIMUM_ALLOW_READ",
    "MAXIMUM_ALLOW_WRITE",
    "MAXIMUM_DENY_READ",
    "MAXIMUM_MEMORY_BYTES",
    "MAXIMUM_NAME_LENGTH",
    "MAXIMUM_PATH_LENGTH",
    "MAXIMUM_PROCESSES",
    "MAXIMUM_VALUE_LENGTH",
    "SettingsError",
    "allow_read",
    "allow_write",
    "allowed_names",
    "ca_files",
    "deny_read",
    "filed_writes",
    "from_file",
    "host_memory",
    "link_in_writable_place",
    "max_memory",
    "max_processes",
    "server_memory_problem",
]

ALLOW_ENV_VARIABLE: Final = "SPICE_AGENT_ALLOW_ENV"
ALLOW_WRITE_VARIABLE: Final = "SPICE_AGENT_ALLOW_WRITE"
ALLOW_ENV_FLAG: Final = "--allow-env"
ALLOW_WRITE_FLAG: Final = "--allow-write"

MAXIMUM_PROCESSES: Final = 4_194_304
"""``--max-processes`` is at most the kernel's own PID limit (``PID_MAX_LIMIT``)."""
MAXIMUM_MEMORY_BYTES: Final = 1 << 50
"""``--max-memory`` is at most 1 PiB (no huge-integer bound reaches the kernel)."""
SERVER_MEMORY_DIVISOR: Final = 2
"""The default server-wide memory bound is the host's memory divided by this (half)."""
CALL_MEMORY_DIVISOR: Final = 4
"""The default per-call bound is the host's memory divided by this (``_cgroup``)."""
MAXIMUM_ALLOW_WRITE: Final = 32
"""At most this many ``--allow-write`` directories."""
MAXIMUM_ALLOWED_NAMES: Final = 64
"""At most this many names may be added to the environment allowlist."""
MAXIMUM_NAME_LENGTH: Final = 128
"""An allowlisted environment variable name has at most this many characters."""
MAXIMUM_VALUE_LENGTH: Final = 32
"""A numeric setting's text has at most this many characters (no huge-integer parsing)."""
MAXIMUM_DENY_READ: Final = 64
"""At most this many ``--deny-read`` paths."""
MAXIMUM_ALLOW_READ: Final = 64
"""At most this many ``--allow-read`` paths."""
MAXIMUM_PATH_LENGTH: Final = 4096
"""A path's text has at most this many characters (``PATH_MAX``)."""

_MEMORY: Final = re.compile(r"([0-9]+)([KMGkmg]?)")
_UNITS: Final = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHOLE: Final = re.compile(r"[0-9]+")
_DENY_READ_FLAG: Final = "--deny-read"
_ALLOW_READ_FLAG: Final = "--allow-read"
_SHOWN_CHARACTERS: Final = 200
"""At most this many characters of a refused ``--allow-read`` value are named."""


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one fixed line without the value."""


def allowed_names(from_flags: tuple[str, ...], source: Mapping[str, str]) -> tuple[str, ...]:
    if from_flags:
        raw, origin = list(from_flags), ALLOW_ENV_FLAG
    else:
        text = source.get(ALLOW_ENV_VARIABLE, "")
        if text.strip() == "":
            return ()
        raw, origin = text.split(","), ALLOW_ENV_VARIABLE
    if len(raw) > MAXIMUM_ALLOWED_NAMES:
        raise SettingsError(f"{origin} names at most {MAXIMUM_ALLOWED_NAMES} variables")
    names: list[str] = []
    for item in raw:
        name = item.strip()
        if len(name) > MAXIMUM_NAME_LENGTH or _NAME.fullmatch(name) is None:
            raise SettingsError(
                f"{origin} takes environment variable names (letters, digits, _; "
                f"not starting with a digit; at most {MAXIMUM_NAME_LENGTH} characters)"
            )
        names.append(name)
    return tuple(names)


def allow_write(
    from_flags: tuple[str, ...],
    source: Mapping[str, str],
    root: str,
    others: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """The ``--allow-write`` directories: flags, else the variable; each checked, resolved.

    A symbolic link on the way to one that lies beneath a writable place (the root ``root``,
    another such directory, or one of ``others``: the places the settings file adds) is
    refused, never followed: a command could have made it, and the next start would then
    write where it points (contract 12.1, R4-5).
    """
    if from_flags:
        raw, origin = list(from_flags), ALLOW_WRITE_FLAG
    else:
        text = source.get(ALLOW_WRITE_VARIABLE, "")
        if text.strip() == "":
            return ()
        raw, origin = [item for item in text.split(os.pathsep) if item], ALLOW_WRITE_VARIABLE
    if len(raw) > MAXIMUM_ALLOW_WRITE:
        raise SettingsError(f"{origin} names at most {MAXIMUM_ALLOW_WRITE} directories")
    chosen: list[str] = []
    for item in raw:
        problem = _writable_problem(item)
        if problem is not None:
            shown = item[:_SHOWN_CHARACTERS].encode("unicode_escape").decode("ascii")
            raise SettingsError(
                f"{origin} {shown!r} {problem}: it takes existing absolute directories"
            )
        real = os.path.realpath(item)
        if real == os.sep:
            raise SettingsError(f"{origin} cannot be /: it would confine nothing")
        if real not in chosen:
            chosen.append(real)
    places = tuple(p for p in (os.path.realpath(root), *chosen, *others) if p != os.sep)
    for item in raw:
        link = link_in_writable_place(item, places)
        if link is not None:
            shown = link[:_SHOWN_CHARACTERS].encode("unicode_escape").decode("ascii")
            raise SettingsError(
                f"{origin}: {shown!r} is a symbolic link inside a writable place (a command "
                "could have made it): name the directory it points to"
            )
    return tuple(chosen)


def _writable_problem(item: str) -> str | None:
    """Why ``item`` cannot be an ``--allow-write`` directory (fixed words), or ``None``."""
    if len(item) > MAXIMUM_PATH_LENGTH:
        return f"is longer than {MAXIMUM_PATH_LENGTH} characters"
    if "\0" in item:
        return "holds a NUL character"
    if not os.path.isabs(item):
        return "is relative: name it from /"
    if not os.path.lexists(item):
        return "does not exist (create it first)"
    if not os.path.isdir(item):
        return "is not a directory" if os.path.exists(item) else "is a dangling symbolic link"
    return None


def link_in_writable_place(path: str, places: tuple[str, ...]) -> str | None:
    """The first symbolic link on the way to ``path`` whose own directory lies beneath one
    of ``places`` (real paths), else ``None``. Reads the links' metadata only."""
    parts = os.path.normpath(path).split(os.sep)[1:]
    current = os.sep
    for part in parts:
        current = os.path.join(current, part)
        if not os.path.islink(current):
            continue
        parent = os.path.realpath(os.path.dirname(current))
        if any(parent == place or parent.startswith(place + os.sep) for place in places):
            return current
        current = os.path.realpath(current)
    return None


def max_processes(chosen: tuple[str, str] | None) -> int:
    if chosen is None:
        return DEFAULT_MAX_PROCESSES
    text, origin = chosen[0].strip(), chosen[1]
    if len(text) > MAXIMUM_VALUE_LENGTH or _WHOLE.fullmatch(text) is None:
        raise SettingsError(f"{origin} must be a whole number of processes")
    value = int(text)
    if not 1 <= value <= MAXIMUM_PROCESSES:
        raise SettingsError(f"{origin} must be between 1 and {MAXIMUM_PROCESSES}")
    return value


def max_memory(chosen: tuple[str, str] | None) -> int | None:
    if chosen is None:
        return None
    text, origin = chosen[0].strip(), chosen[1]
    matched = _MEMORY.fullmatch(text) if len(text) <= MAXIMUM_VALUE_LENGTH else None
    if matched is None:
        raise SettingsError(f"{origin} must be a number of bytes, or with K, M or G")
    value = int(matched[1]) * _UNITS[matched[2].lower()]
    if not MIN_MEMORY_BYTES <= value <= MAXIMUM_MEMORY_BYTES:
        raise SettingsError(f"{origin} must be at least 16M and at most 1P")
    return value


def host_memory() -> int | None:
    """The host's memory in bytes (``None`` where it cannot be read)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return total if total > 0 else None


def server_memory_problem(
    per_call: tuple[int, str] | None, server: tuple[int, str] | None, host: int | None
) -> str | None:
    """Why the memory bounds do not go together (one line naming both numbers), or
    ``None``: ``(bytes, where it came from)`` of the per-call and the server-wide bound
    (``None``: the default) and the host's memory (``None``: unknown, nothing judged)."""
    if host is None:
        return None
    if server is not None and server[0] > host:
        return (
            f"{server[1]} ({server[0]} bytes) is above the host's memory ({host} bytes): "
            "calls together could ask for more than the host has"
        )
    bound, named = server if server is not None else (host // SERVER_MEMORY_DIVISOR, None)
    if per_call is not None and per_call[0] > bound:
        where = named or "the default server-wide bound, half the host's memory"
        return (
            f"{per_call[1]} ({per_call[0]} bytes) is above {where} ({bound} bytes); "
            "lower it, or raise --max-server-memory"
        )
    return None


def deny_read(from_flags: tuple[str, ...], root: str) -> tuple[str, ...]:
    """The ``--deny-read`` paths: existing, absolute, resolved; never inside the worktree."""
    if len(from_flags) > MAXIMUM_DENY_READ:
        raise SettingsError(f"{_DENY_READ_FLAG} names at most {MAXIMUM_DENY_READ} paths")
    real_root = os.path.realpath(root)
    chosen: list[str] = []
    for item in from_flags:
        if (
            len(item) > MAXIMUM_PATH_LENGTH
            or "\0" in item
            or not os.path.isabs(item)
            or not os.path.lexists(item)
        ):
            raise SettingsError(f"{_DENY_READ_FLAG} takes existing absolute paths")
        real = os.path.realpath(item)
        if real == os.sep:
            raise SettingsError(f"{_DENY_READ_FLAG} cannot be /")
        if (
            real == real_root
            or real.startswith(real_root + os.sep)
            or (real_root.startswith(real + os.sep))
        ):
            raise SettingsError(f"{_DENY_READ_FLAG} cannot hide the worktree or a path inside it")
        if real not in chosen:
            chosen.append(real)
    return tuple(chosen)


def allow_read(from_flags: tuple[str, ...], source: Mapping[str, str]) -> tuple[str, ...]:
    """The places beneath the home shown again (contract 12.2), as names relative to the
    home (``.npmrc``, ``notes/todo``): given as ``~/NAME``, an absolute path beneath the
    home, or ``NAME`` itself. The home hides all but ``HOME_SHOWN``; everything outside it
    is readable already, so a path there is refused, naming it."""
    if len(from_flags) > MAXIMUM_ALLOW_READ:
        raise SettingsError(f"{_ALLOW_READ_FLAG} names at most {MAXIMUM_ALLOW_READ} paths")
    home = home_directory(source)
    chosen: list[str] = []
    for item in from_flags:
        name = item.strip()
        if name.startswith("~/"):
            name = name[2:]
        elif os.path.isabs(name):
            inside = home is not None and os.path.normpath(name).startswith(home + os.sep)
            name = os.path.relpath(os.path.normpath(name), home) if inside and home else ""
        name = os.path.normpath(name) if name else name
        if len(name) > MAXIMUM_PATH_LENGTH or "\0" in name or not _beneath_home(name):
            shown = item[:_SHOWN_CHARACTERS].encode("unicode_escape").decode("ascii")
            raise SettingsError(
                f"{_ALLOW_READ_FLAG} {shown!r} is not a path beneath the home (~/NAME): only "
                "the home is hidden, but for the toolchain places `tools` lists"
            )
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def _beneath_home(name: str) -> bool:
    """Whether ``name`` is a normal path relative to the home that stays beneath it, in
    printable characters (``~`` alone, or ``~user``, is no such path)."""
    return (
        bool(name)
        and name.isprintable()
        and not name.startswith("~")
        and not os.path.isabs(name)
        and name not in {".", ".."}
        and not name.startswith("../")
    )


def filed_writes(given: tuple[str, ...], places: tuple[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The settings file's ``allow_write``, read as the flag's (no variable); ``places`` is
    the root and the flags' directories, beneath which no link is followed either."""
    root, flagged = places
    return allow_write(given, {}, root, flagged)


def ca_files(given: tuple[str, ...], _context: object = None) -> tuple[str, ...]:
    """The settings file's ``ca_files``: absolute paths of PEM files of public
    certificates, real paths without repeats. One that is missing, unreadable, not PEM or
    holds a private key is refused, naming it (cut and escaped: a public file's path)."""
    if len(given) > MAXIMUM_CA_FILES:
        raise SettingsError(f"ca_files names at most {MAXIMUM_CA_FILES} files")
    chosen: list[str] = []
    for item in given:
        problem = ca_file_problem(item)
        if problem is not None:
            shown = item[:_SHOWN_CHARACTERS].encode("unicode_escape").decode("ascii")
            raise SettingsError(f"ca_files {shown!r} {problem}")
        real = os.path.realpath(item)
        if real not in chosen:
            chosen.append(real)
    return tuple(chosen)


def from_file(
    rules: FileRules,
    key: str,
    reader: Callable[[tuple[str, ...], _T], tuple[str, ...]],
    context: _T,
) -> tuple[str, ...]:
    """``key``'s list of the settings file read as its flag is; a refusal names the file,
    the line and the key."""
    given = rules.values(key)
    if not given:
        return ()
    try:
        return reader(given, context)
    except SettingsError as error:
        text = str(error)
        raise SettingsError(f"{rules.where(key)}: {text.partition(' ')[2]}") from None
