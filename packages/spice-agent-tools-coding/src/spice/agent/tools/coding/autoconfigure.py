"""Opt-in defaults: the three coding tools as fallback beans.

Importing this module registers nothing and changes no global state; it only
describes defaults. An application reads the record and decides::

    record = spice_auto_configuration()
    provided = {"read"}  # names the application builds itself
    missing = [bean for bean in record.beans if bean.name not in provided]

Each bean is a ``fallback``: it fills a name only when the application
provides no bean of that name, and it is never ``primary``. Importing
``spice.agent.tools.coding`` does not import this module.
"""

from __future__ import annotations

from typing import Final

from spice.agent.lifecycle import Cleanup
from spice.agent.process import ExecutableResolver, Launcher
from spice.agent.starter import AutoBean, AutoConfiguration
from spice.agent.tool import Tool

from ._config import Config
from ._read import new_read
from ._replace import new_replace
from ._shell import new_shell

REVIEW: Final = "docs/dependency-review.md"
"""The document that reviewed these defaults."""


def default_read(config: Config) -> Tool:
    """The default ``read`` bean: ``new_read(config)``."""
    return new_read(config)


def default_replace(config: Config) -> Tool:
    """The default ``replace`` bean: ``new_replace(config)``."""
    return new_replace(config)


def default_shell(
    config: Config, resolver: ExecutableResolver, launcher: Launcher
) -> tuple[Tool, Cleanup]:
    """The default ``shell`` bean and its ``Cleanup``: ``new_shell(config, resolver, launcher)``."""
    return new_shell(config, resolver, launcher)


def spice_auto_configuration() -> AutoConfiguration:
    """The declarative record: three fallback beans, ``read``, ``replace``, ``shell``."""
    return AutoConfiguration(
        review=REVIEW,
        beans=(
            AutoBean("read", default_read),
            AutoBean("replace", default_replace),
            AutoBean("shell", default_shell),
        ),
    )


__all__ = ["default_read", "default_replace", "default_shell", "spice_auto_configuration"]
