"""The POSIX process platform (placeholder until the shell issue lands)."""

from __future__ import annotations

from typing import final

from spice.agent.process import Lookup, Process, Spec


@final
class PosixResolver:
    """Resolves an executable with the lookup's own PATH and workdir only."""

    async def resolve(self, lookup: Lookup) -> str:
        """Return the absolute path of the executable, or raise ``ExecutableNotFound``."""
        raise NotImplementedError


@final
class PosixLauncher:
    """Starts each child in its own session and process group."""

    async def start(self, spec: Spec) -> Process:
        """Start ``spec``; raise ``LaunchError`` carrying any partial process."""
        raise NotImplementedError
