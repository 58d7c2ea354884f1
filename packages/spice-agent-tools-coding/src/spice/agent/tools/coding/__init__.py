"""The Spice Agent coding tools: ``read``, ``replace`` and ``shell``.

Importing this package activates nothing. Build the tools you want from a
``Config`` and reach them through a ``spice.agent.dispatch.Dispatcher``::

    config = Config("/abs/worktree")
    dispatcher = Dispatcher([new_read(config), new_replace(config)])
"""

from __future__ import annotations

from ._config import SECURITY_WARNING as SECURITY_WARNING
from ._config import Config as Config
from ._protected import ProtectedPaths as ProtectedPaths
from ._read import new_read as new_read
from ._replace import new_replace as new_replace
from ._results import MAXIMUM_ANSWER_BYTES as MAXIMUM_ANSWER_BYTES
from ._shell import new_shell as new_shell

__all__ = [
    "MAXIMUM_ANSWER_BYTES",
    "SECURITY_WARNING",
    "Config",
    "ProtectedPaths",
    "new_read",
    "new_replace",
    "new_shell",
]
