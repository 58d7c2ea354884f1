"""Immutable process values: what to look up, what to start, how it ended."""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol, final, runtime_checkable

from spice.agent.tool import Capability

MAXIMUM_EXIT_CODE: Final = 2**32 - 1


@runtime_checkable
class Sink(Protocol):
    """Receives a child's output in bounded chunks.

    A failing sink (its ``write`` raises) is the sink's own failure, never the process's:
    the launcher gives that sink nothing more (the rest of that stream is cut), goes on
    reading the pipe to its end (so the child never blocks on a full pipe) and delivers
    the other stream as before; the process's outcome and its join are unchanged. Whoever
    owns the sink saw it raise and says in its answer that the output was cut. Every
    platform's launcher follows this rule.

    >>> class Collect:
    ...     def __init__(self) -> None:
    ...         self.data = bytearray()
    ...     def write(self, data: bytes) -> None:
    ...         self.data += data
    """

    def write(self, data: bytes) -> None:
        """Take one chunk; must not block (raising cuts this stream: see the class)."""
        ...


def _plain(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty string")
    if "\0" in value:
        raise ValueError(f"{field} must not contain NUL")
    return value


def _absolute(text: str) -> bool:
    """Whether ``text`` is absolute; on Windows that needs a drive (``C:``) or a UNC share.

    Before Python 3.13, ``ntpath.isabs`` also took ``\\work``, which is relative to the
    current drive.
    """
    return os.path.isabs(text) and (os.name != "nt" or bool(os.path.splitdrive(text)[0]))


def _absolute_canonical(value: object, field: str) -> str:
    text = _plain(value, field)
    if not _absolute(text) or os.path.normpath(text) != text or text.startswith("//"):
        raise ValueError(f"{field} must be an absolute, canonical path")
    return text


def _environment(entries: object) -> tuple[str, ...]:
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise ValueError("environment must be a collection of NAME=value entries")
    names: set[str] = set()
    checked: list[str] = []
    for entry in entries:
        if not isinstance(entry, str) or "\0" in entry:
            raise ValueError("environment entries must be strings without NUL")
        name, separator, _ = entry.partition("=")
        if not separator or not name:
            raise ValueError("environment entries must have the form NAME=value")
        if name in names:
            raise ValueError("environment names must be unique")
        names.add(name)
        checked.append(entry)
    return tuple(sorted(checked, key=lambda e: e.partition("=")[0]))


@final
@dataclass(frozen=True, slots=True, init=False)
class Lookup:
    """What the resolver gets: the executable as requested, the workdir, the environment.

    The working directory is absolute and canonical; the environment is a tuple of
    ``NAME=value`` sorted by name and unique by name. ``repr`` shows no value.
    """

    requested_executable: str
    working_directory: str
    environment: tuple[str, ...]

    def __init__(
        self, requested_executable: str, working_directory: str, environment: Iterable[str] = ()
    ) -> None:
        object.__setattr__(
            self, "requested_executable", _plain(requested_executable, "requested executable")
        )
        object.__setattr__(
            self, "working_directory", _absolute_canonical(working_directory, "working directory")
        )
        object.__setattr__(self, "environment", _environment(environment))

    def __repr__(self) -> str:
        return f"Lookup(<redacted>, environment=<{len(self.environment)} entries>)"


@final
@dataclass(frozen=True, slots=True, repr=False, init=False)
class Spec:
    """What the launcher gets: the resolved executable and everything it starts with."""

    executable: str
    arguments: tuple[str, ...]
    working_directory: str
    environment: tuple[str, ...]
    stdin: bytes
    stdout: Sink
    stderr: Sink
    capabilities: tuple[Capability, ...]

    def __init__(
        self,
        executable: str,
        arguments: Iterable[str],
        working_directory: str,
        environment: Iterable[str],
        stdin: bytes,
        stdout: Sink,
        stderr: Sink,
        capabilities: Iterable[Capability | str] = (Capability.PROCESS_EXECUTE,),
    ) -> None:
        _absolute_canonical(executable, "executable")
        if isinstance(arguments, (str, bytes)) or not isinstance(arguments, Iterable):
            raise ValueError("arguments must be a collection of strings")
        checked_arguments = tuple(arguments)
        for argument in checked_arguments:
            if not isinstance(argument, str) or "\0" in argument:
                raise ValueError("arguments must be strings without NUL")
        _absolute_canonical(working_directory, "working directory")
        if not isinstance(stdin, bytes):
            raise ValueError("stdin must be bytes")
        for sink in (stdout, stderr):
            if not isinstance(sink, Sink):
                raise ValueError("stdout and stderr must be sinks")
        if isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, Iterable):
            raise ValueError("capabilities must be a collection")
        try:
            checked_capabilities = tuple(sorted({Capability(c) for c in capabilities}))
        except ValueError:
            raise ValueError("capabilities must be known capabilities") from None
        if Capability.PROCESS_EXECUTE not in checked_capabilities:
            raise ValueError("a process spec must declare process.execute")
        object.__setattr__(self, "executable", executable)
        object.__setattr__(self, "arguments", checked_arguments)
        object.__setattr__(self, "working_directory", working_directory)
        object.__setattr__(self, "environment", _environment(environment))
        object.__setattr__(self, "stdin", stdin)
        object.__setattr__(self, "stdout", stdout)
        object.__setattr__(self, "stderr", stderr)
        object.__setattr__(self, "capabilities", checked_capabilities)

    def __repr__(self) -> str:
        return (
            f"Spec(<redacted>, arguments=<{len(self.arguments)}>, "
            f"environment=<{len(self.environment)} entries>, stdin=<{len(self.stdin)} bytes>)"
        )


@final
class OutcomeKind(enum.StrEnum):
    """How a process ended, as far as the platform can tell."""

    EXITED = "exited"
    SIGNALED = "signaled"
    UNKNOWN = "unknown"


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """How a process ended. Build with ``exited``, ``signaled`` or ``unknown``."""

    kind: OutcomeKind
    exit_code: int | None = None

    def __post_init__(self) -> None:
        kind = OutcomeKind(self.kind)
        if kind is OutcomeKind.EXITED:
            code = self.exit_code
            if isinstance(code, bool) or not isinstance(code, int):
                raise ValueError("an exit code must be an integer")
            if not 0 <= code <= MAXIMUM_EXIT_CODE:
                raise ValueError("an exit code must be within 0..2**32-1")
        elif self.exit_code is not None:
            raise ValueError("only an exited outcome has an exit code")
        object.__setattr__(self, "kind", kind)

    @classmethod
    def exited(cls, code: int) -> Outcome:
        """The process exited with ``code``."""
        return cls(OutcomeKind.EXITED, code)

    @classmethod
    def signaled(cls) -> Outcome:
        """The process was ended by a signal."""
        return cls(OutcomeKind.SIGNALED)

    @classmethod
    def unknown(cls) -> Outcome:
        """The platform cannot tell how the process ended."""
        return cls(OutcomeKind.UNKNOWN)

    @property
    def successful(self) -> bool:
        """True only for an exit with code 0."""
        return self.kind is OutcomeKind.EXITED and self.exit_code == 0
