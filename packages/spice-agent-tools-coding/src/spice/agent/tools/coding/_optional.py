"""The optional parts of a launcher and of a process it made, as protocols (review D15).

The contract's ``Launcher`` and ``Process`` require only their methods; a launcher that
confines its processes may say more through read-only attributes, each optional on its own
(``spice.agent.process``'s ``Process`` docstring). Each part is one runtime-checkable
protocol here, and one guard asks for it (``reports_cleanup(process)``, ...) before the
shell reads a typed attribute, instead of ``getattr`` with a name in a string. A guard is
``isinstance`` without running the property (``inspect.getattr_static``, as Python 3.12
checks; 3.11's ``isinstance`` calls ``hasattr``, which would read a part twice, and the
shell reads ``contained`` exactly once per call). A part's value is still judged by its
reader (``_shell_launcher``, ``_sandbox_fields``): present is not the same as usable, and
a property that raises counts as saying nothing.
"""

from __future__ import annotations

import inspect
from typing import Final, Protocol, TypeGuard, runtime_checkable

__all__ = [
    "DescribesContainment",
    "HintsSandbox",
    "ReportsCleanup",
    "ReportsNetworkRefused",
    "ReportsProtectedRestored",
    "ReportsStage",
    "SaysContained",
    "describes_containment",
    "hints_sandbox",
    "reports_cleanup",
    "reports_network_refused",
    "reports_protected_restored",
    "reports_stage",
    "says_contained",
]

_ABSENT: Final = object()


@runtime_checkable
class SaysContained(Protocol):
    """A launcher's ``contained``: ``True`` when it confines what it starts."""

    @property
    def contained(self) -> object: ...


@runtime_checkable
class DescribesContainment(Protocol):
    """A launcher's ``containment``: one short text on what it confines, or ``None``."""

    @property
    def containment(self) -> object: ...


@runtime_checkable
class HintsSandbox(Protocol):
    """A joined process's ``sandbox_hint``: the setting that would have let it through."""

    @property
    def sandbox_hint(self) -> object: ...


@runtime_checkable
class ReportsCleanup(Protocol):
    """A joined process's ``cleanup_completed``: whether what its launcher made is gone."""

    @property
    def cleanup_completed(self) -> object: ...


@runtime_checkable
class ReportsNetworkRefused(Protocol):
    """A joined process's ``network_refused``: the ``host:port`` refused, and their count."""

    @property
    def network_refused(self) -> object: ...


@runtime_checkable
class ReportsProtectedRestored(Protocol):
    """A joined process's ``protected_restored``: the paths put back, and their count."""

    @property
    def protected_restored(self) -> object: ...


@runtime_checkable
class ReportsStage(Protocol):
    """A joined process's ``stage_fields``: what its stage changed and what its commit did
    (contract 13.1: ``staged``, ``changes``, ``changes_applied``, ...), as answer fields."""

    @property
    def stage_fields(self) -> object: ...


def _has(value: object, part: type) -> bool:
    """Whether ``value`` has every member of the protocol ``part``, looked up without
    running a property or ``__getattr__`` (``inspect.getattr_static``)."""
    members = [name for name, member in vars(part).items() if isinstance(member, property)]
    return bool(members) and all(
        inspect.getattr_static(value, name, _ABSENT) is not _ABSENT for name in members
    )


def says_contained(value: object) -> TypeGuard[SaysContained]:
    """``isinstance(value, SaysContained)`` without reading it."""
    return _has(value, SaysContained)


def describes_containment(value: object) -> TypeGuard[DescribesContainment]:
    """``isinstance(value, DescribesContainment)`` without reading it."""
    return _has(value, DescribesContainment)


def hints_sandbox(value: object) -> TypeGuard[HintsSandbox]:
    """``isinstance(value, HintsSandbox)`` without reading it."""
    return _has(value, HintsSandbox)


def reports_cleanup(value: object) -> TypeGuard[ReportsCleanup]:
    """``isinstance(value, ReportsCleanup)`` without reading it."""
    return _has(value, ReportsCleanup)


def reports_network_refused(value: object) -> TypeGuard[ReportsNetworkRefused]:
    """``isinstance(value, ReportsNetworkRefused)`` without reading it."""
    return _has(value, ReportsNetworkRefused)


def reports_protected_restored(value: object) -> TypeGuard[ReportsProtectedRestored]:
    """``isinstance(value, ReportsProtectedRestored)`` without reading it."""
    return _has(value, ReportsProtectedRestored)


def reports_stage(value: object) -> TypeGuard[ReportsStage]:
    """``isinstance(value, ReportsStage)`` without reading it."""
    return _has(value, ReportsStage)
