"""The ``read`` tool (placeholder until its issue lands)."""

from __future__ import annotations

from spice.agent.tool import Tool

from ._config import Config


def new_read(config: Config) -> Tool:
    """Build the ``read`` tool for ``config``; performs no filesystem action."""
    raise NotImplementedError
