"""The ``replace`` tool (placeholder until its issue lands)."""

from __future__ import annotations

from spice.agent.tool import Tool

from ._config import Config


def new_replace(config: Config) -> Tool:
    """Build the ``replace`` tool for ``config``; performs no filesystem action."""
    raise NotImplementedError
