"""``PosixResolver``: POSIX executable lookup with the lookup's own PATH and workdir only.

Rules (see ``docs/platform.md``):

- A name containing ``/`` is never searched for: an absolute name stays as it is, a
  relative one is taken relative to the lookup's working directory.
- Any other name is searched in the entries of the lookup's own ``PATH`` (from
  ``lookup.environment``; ``os.environ`` is never read), in order. Empty entries (which
  POSIX reads as "the current directory") and relative entries are ignored: they would
  make the result depend on the child's working directory, which the model chooses.
  No ``PATH`` at all means only names with a ``/`` can be found.
- A candidate matches when it is a regular file (after following symlinks) on which we
  have execute permission (``os.access(X_OK)``).
- The result is absolute and canonical in the contract's sense: lexically normalised
  (``os.path.normpath``, ``..`` resolved by text), but symlinks are kept, not resolved.
  Programs that dispatch on their name (busybox, ``/etc/alternatives``) depend on it, and
  the path that was checked is exactly the path the launcher executes.
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Final, final

from spice.agent.process import ExecutableNotFound, Lookup

PATH_VARIABLE: Final = "PATH"


def _search_path(environment: tuple[str, ...]) -> str | None:
    for entry in environment:
        name, _, value = entry.partition("=")
        if name == PATH_VARIABLE:
            return value
    return None


def _canonical(path: str) -> str:
    cleaned = os.path.normpath(path)
    # POSIX keeps a leading "//" (implementation-defined); the contract wants one "/".
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def _is_executable_file(path: str) -> bool:
    try:
        status = os.stat(path)
        return stat.S_ISREG(status.st_mode) and os.access(path, os.X_OK)
    except (OSError, ValueError):
        # Missing, unreadable, too long, or not encodable as a file name: no match.
        return False


def _candidates(lookup: Lookup) -> list[str]:
    requested = lookup.requested_executable
    if "/" in requested:
        return [_canonical(os.path.join(lookup.working_directory, requested))]
    search_path = _search_path(lookup.environment)
    if search_path is None:
        return []
    return [
        _canonical(os.path.join(entry, requested))
        for entry in search_path.split(":")
        if entry and os.path.isabs(entry)
    ]


def resolve_blocking(lookup: Lookup) -> str:
    """The lookup itself (blocking file-system checks); ``resolve`` runs it in a thread."""
    for candidate in _candidates(lookup):
        if _is_executable_file(candidate):
            return candidate
    raise ExecutableNotFound


@final
class PosixResolver:
    """Resolves an executable with the lookup's own PATH and workdir only.

    >>> import asyncio
    >>> from spice.agent.process import Lookup
    >>> lookup = Lookup("sh", "/", ["PATH=/usr/bin:/bin"])
    >>> asyncio.run(PosixResolver().resolve(lookup)).endswith("/sh")
    True
    """

    async def resolve(self, lookup: Lookup) -> str:
        """Return the absolute path of the executable, or raise ``ExecutableNotFound``.

        The checks are ``stat``/``access`` calls, usually instant, but a stale network
        mount in ``PATH`` can block for long: they run in a worker thread so the event
        loop never waits on them. Cancelling abandons the (side-effect free) search.
        """
        return await asyncio.to_thread(resolve_blocking, lookup)
