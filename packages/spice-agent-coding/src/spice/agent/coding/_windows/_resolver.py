"""``WindowsResolver``: executable lookup on Windows with the lookup's PATH and PATHEXT only.

Rules (see ``docs/platform.md``):

- A name with a path separator (``\\`` or ``/``) or a drive (``C:``) is never searched
  for: an absolute name stays as it is, a relative one is taken relative to the lookup's
  working directory (``.\\tool.exe``, as ``./tool`` on POSIX).
- A bare name is searched in the absolute entries of the lookup's own ``PATH``, in order
  (``os.environ`` is never read; empty and relative entries are ignored). Never in the
  current directory, which Windows itself searches first: the model chooses the workdir.
- A bare name with an extension listed in ``PATHEXT`` is tried as it is; otherwise each
  ``PATHEXT`` extension is appended in turn. Without ``PATHEXT`` the default is
  ``.COM;.EXE``. Batch extensions (``.BAT``, ``.CMD``) are never appended: a bare name never
  resolves to a batch file, and a batch file named outright is refused by the launcher
  (its arguments cannot be passed to ``cmd.exe`` safely).
- A candidate matches when it is an existing regular file. The result is absolute and
  lexically normalised (``ntpath.normpath``); links are kept, not resolved.
"""

from __future__ import annotations

import asyncio
import ntpath
import os
import stat
from typing import Final, final

from spice.agent.process import ExecutableNotFound, Lookup

PATH_VARIABLE: Final = "PATH"
PATHEXT_VARIABLE: Final = "PATHEXT"
DEFAULT_PATHEXT: Final = (".COM", ".EXE")
"""Extensions tried when the lookup's environment has no ``PATHEXT``."""
BATCH_EXTENSIONS: Final = frozenset({".BAT", ".CMD"})
"""Extensions run through ``cmd.exe``, whose argument parsing cannot be made safe."""
MAXIMUM_PATHEXT_ENTRIES: Final = 32
"""Most ``PATHEXT`` entries used; the rest are ignored (a bound on the lookup's cost)."""


def _variable(environment: tuple[str, ...], wanted: str) -> str | None:
    """A variable of the lookup's environment; Windows names are case-insensitive."""
    for entry in environment:
        name, _, value = entry.partition("=")
        if name.upper() == wanted:
            return value
    return None


def is_batch(path: str) -> bool:
    """Whether Windows would run ``path`` through ``cmd.exe`` (``.bat``/``.cmd``).

    Trailing dots and spaces, which Windows strips from a file name, do not hide it.
    """
    return ntpath.splitext(path.rstrip(". "))[1].upper() in BATCH_EXTENSIONS


def extensions(environment: tuple[str, ...]) -> tuple[str, ...]:
    """The ``PATHEXT`` extensions a bare name may take, upper case, batch files left out."""
    value = _variable(environment, PATHEXT_VARIABLE)
    found = DEFAULT_PATHEXT if value is None else tuple(value.split(";"))
    chosen: list[str] = []
    for entry in found[:MAXIMUM_PATHEXT_ENTRIES]:
        extension = entry.strip().upper()
        if (
            extension.startswith(".")
            and len(extension) > 1
            and extension not in BATCH_EXTENSIONS
            and not any(c in extension for c in "\\/:")
            and extension not in chosen
        ):
            chosen.append(extension)
    return tuple(chosen)


def _has_path(requested: str) -> bool:
    return "\\" in requested or "/" in requested or ntpath.splitdrive(requested)[0] != ""


def _names(requested: str, environment: tuple[str, ...]) -> list[str]:
    allowed = extensions(environment)
    names = [requested] if ntpath.splitext(requested)[1].upper() in allowed else []
    names.extend(requested + extension for extension in allowed)
    return names


def candidates(lookup: Lookup) -> list[str]:
    """Every path the lookup may resolve to, in the order they are tried."""
    requested = lookup.requested_executable
    if _has_path(requested):
        return [ntpath.normpath(ntpath.join(lookup.working_directory, requested))]
    search_path = _variable(lookup.environment, PATH_VARIABLE)
    if search_path is None:
        return []
    found: list[str] = []
    for raw in search_path.split(";"):
        entry = raw.strip().strip('"')
        # Absolute entries only: "C:\x" (a drive-relative "C:x" and "\x" depend on the cwd).
        if not (ntpath.isabs(entry) and ntpath.splitdrive(entry)[0]):
            continue
        found.extend(
            ntpath.normpath(ntpath.join(entry, name))
            for name in _names(requested, lookup.environment)
        )
    return found


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def resolve_blocking(lookup: Lookup) -> str:
    """The lookup itself (blocking file-system checks); ``resolve`` runs it in a thread."""
    for candidate in candidates(lookup):
        if _is_file(candidate):
            return candidate
    raise ExecutableNotFound


@final
class WindowsResolver:
    """Resolves an executable with the lookup's own PATH, PATHEXT and workdir only."""

    async def resolve(self, lookup: Lookup) -> str:
        """Return the absolute path of the executable, or raise ``ExecutableNotFound``."""
        return await asyncio.to_thread(resolve_blocking, lookup)
