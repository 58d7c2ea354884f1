"""The two small interfaces of the contract: ``Tool`` and ``Reporter``."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._values import Call, Definition, Progress, Result


@runtime_checkable
class Reporter(Protocol):
    """Receives progress of a running call.

    >>> class Printer:
    ...     async def report(self, progress: Progress) -> None:
    ...         print(progress.message)
    """

    async def report(self, progress: Progress) -> None:
        """Deliver one progress message; raising makes the call fail definitively."""
        ...


@runtime_checkable
class Tool(Protocol):
    """An agent tool: a definition and one ``execute`` coroutine.

    Reach a tool only through ``spice.agent.dispatch.Dispatcher``::

        result = await Dispatcher([new_read(config)]).dispatch(Call("1", "read", args))
    """

    @property
    def definition(self) -> Definition:
        """The tool's immutable definition."""
        ...

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Run one call; return a ``Result`` or raise ``ExecutionError``/``CancelledError``."""
        ...
