"""The platform protocols a shell tool is given: resolver, launcher, process.

Failures::

    Exception
    ├── ExecutableNotFound   nothing executable matches the lookup
    ├── LaunchError          a start failed; ``process`` is what was created anyway
    └── ProcessFailure       an operation on a process failed (``operation``, ``retryable``)
"""

from __future__ import annotations

import enum
from typing import Final, Protocol, final, runtime_checkable

from ._values import Lookup, Outcome, Spec

MAXIMUM_REFUSED_HOSTS: Final = 16
"""A process's ``network_refused`` names at most this many ``host:port``; its count counts
every refusal. The one owner of the bound: the launcher keeps no more, the shell's answer
carries no more, and the answer's size bound counts this many."""


@final
class Operation(enum.StrEnum):
    """The platform operation that failed."""

    LAUNCH = "launch"
    RESOLVE = "resolve"
    RESULT = "result"
    REQUEST_STOP = "request_stop"
    FORCE_KILL = "force_kill"
    WAIT = "wait"


@final
class ExecutableNotFound(Exception):
    """Nothing executable matches the requested name in the lookup's PATH and workdir."""

    def __init__(self) -> None:
        super().__init__("no executable matches the requested name")


@final
class ProcessFailure(Exception):
    """An operation on a process failed. Unless known terminal, it counts as retryable."""

    def __init__(self, operation: Operation | str, retryable: bool = True) -> None:
        try:
            checked = Operation(operation)
        except ValueError:
            raise ValueError("operation is not a known process operation") from None
        if not isinstance(retryable, bool):
            raise ValueError("retryable must be a bool")
        super().__init__(f"process operation {checked.value} failed")
        self.operation = checked
        self.retryable = retryable

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.operation, self.retryable))


@runtime_checkable
class Process(Protocol):
    """A started process that its owner must join with ``wait`` before releasing it.

    Optional attribute (not a required member): ``cleanup_completed: bool``, read-only,
    read by the shell tool after a successful join: ``False`` when something the
    launcher made for the process (a private temporary directory, say) could not be
    removed; the result's ``managed_cleanup_completed`` is then ``false``. Absent
    counts as ``True``.

    Two more optional attributes, read after the join the same way (absent: no field):
    ``network_refused: tuple[tuple[str, ...], int]``, the ``host:port`` its sandbox's
    network refused (at most ``MAXIMUM_REFUSED_HOSTS``) and how many refusals there were,
    which become the result's ``network_refused`` and ``network_refused_count``; and ``sandbox_hint:
    str | None``, one sentence (at most 512 bytes) naming the setting that would have let
    the command through, which a result of a command that failed carries.
    """

    def done(self) -> bool:
        """True once the process has exited and its outcome is known."""
        ...

    async def wait_exit(self) -> None:
        """Wait until the process itself has exited (not its descendants)."""
        ...

    def result(self) -> Outcome:
        """The outcome; raises ``ProcessFailure(RESULT)`` before the process is done."""
        ...

    async def request_stop(self) -> None:
        """Ask the process (group) to stop (SIGTERM on POSIX)."""
        ...

    async def force_kill(self) -> None:
        """End the process (group) at once (SIGKILL on POSIX)."""
        ...

    async def wait(self) -> None:
        """The join: prove every resource of the process released, or raise ``ProcessFailure``."""
        ...


@final
class LaunchError(Exception):
    """A start failed. ``process``, when set, was created anyway and is now the caller's.

    ``reason``, when set, is the launcher's own short sentence on why nothing started
    (a refusal of its sandbox, say), for the caller's answer: at most 512 UTF-8 bytes
    and no control characters, else the caller ignores it. It never holds argv,
    environment or OS error text.
    """

    def __init__(self, process: Process | None = None, reason: str | None = None) -> None:
        super().__init__("the process could not be started")
        self.process = process
        self.reason = reason


@runtime_checkable
class ExecutableResolver(Protocol):
    """Turns a requested executable into an absolute canonical path.

    >>> class Fixed:
    ...     async def resolve(self, lookup: Lookup) -> str:
    ...         return "/usr/bin/true"
    """

    async def resolve(self, lookup: Lookup) -> str:
        """Return an absolute path, or raise ``ExecutableNotFound``."""
        ...


@runtime_checkable
class Launcher(Protocol):
    """Starts processes from a ``Spec``.

    Optional attribute (not part of the protocol's required members, so a launcher
    without it still satisfies ``isinstance``): ``contained: bool``, read-only, ``True``
    when the processes this launcher starts are confined by it (for example to the
    worktree). The shell tool reads it once per call, before the start, and reports it
    as the result's ``contained`` field; absent or not a ``bool`` counts as ``False``.
    A second optional attribute, ``containment: str``, is the launcher's own short text
    on what it confines; the shell tool puts it in its description (read once, at
    construction; at most 512 UTF-8 bytes, no control characters, else ignored). How a
    launcher confines its children is its own business.

    >>> class Contained:
    ...     contained = True
    ...
    ...     async def start(self, spec: Spec) -> Process: ...
    """

    async def start(self, spec: Spec) -> Process:
        """Start the process; raise ``LaunchError`` (carrying any partial process)."""
        ...
