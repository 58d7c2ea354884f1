"""The ``shell`` tool (placeholder until its issue lands)."""

from __future__ import annotations

from spice.agent.lifecycle import Cleanup
from spice.agent.process import ExecutableResolver, Launcher
from spice.agent.tool import Tool

from ._config import Config


def new_shell(
    config: Config, resolver: ExecutableResolver, launcher: Launcher
) -> tuple[Tool, Cleanup]:
    """Build the ``shell`` tool and its ``Cleanup``; performs no process action."""
    raise NotImplementedError
