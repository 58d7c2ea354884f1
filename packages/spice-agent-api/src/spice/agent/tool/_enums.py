"""The contract's enumerations; each value is its wire spelling."""

from __future__ import annotations

import enum
from typing import final


@final
class Effect(enum.StrEnum):
    """Whether a tool may change anything outside itself."""

    READ_ONLY = "read_only"
    MUTATING = "mutating"


@final
class ReplaySafety(enum.StrEnum):
    """What repeating a call may do: nothing new, the same effect once, or anything."""

    SAFE = "safe"
    IDEMPOTENT = "idempotent"
    UNSAFE = "unsafe"


@final
class Capability(enum.StrEnum):
    """An authority a tool declares; disclosure for policy, never a sandbox."""

    FILESYSTEM_READ = "filesystem.read"
    FILESYSTEM_WRITE = "filesystem.write"
    PROCESS_EXECUTE = "process.execute"
    NETWORK_ACCESS = "network.access"
    SECRETS_READ = "secrets.read"
    ENVIRONMENT_READ = "environment.read"
    ENVIRONMENT_WRITE = "environment.write"


MUTATION_CAPABLE: frozenset[Capability] = frozenset(
    {
        Capability.FILESYSTEM_WRITE,
        Capability.PROCESS_EXECUTE,
        Capability.NETWORK_ACCESS,
        Capability.ENVIRONMENT_WRITE,
    }
)


@final
class ExecutionState(enum.StrEnum):
    """Whether the effect of an interrupted or failed call is known."""

    DEFINITIVE = "definitive"
    UNCERTAIN = "uncertain"


@final
class RetryDisposition(enum.StrEnum):
    """Whether the caller may repeat the call."""

    NEVER = "never"
    ALLOWED = "allowed"
