"""What the shell reads of a launcher and of a process it did not make.

The product does not know how a launcher contains its children; it reports only what the
launcher says, through its optional parts (one protocol each, ``_optional``) read
defensively: each is used only when it is of the expected type and shape, and a missing or
failing one counts as saying nothing.
"""

from __future__ import annotations

import inspect
import unicodedata
from typing import Final, Protocol, TypeGuard, runtime_checkable

from spice.agent.process import Process, Spec

from ._optional import describes_containment, hints_sandbox, reports_cleanup, says_contained


@runtime_checkable
class DryRunLauncher(Protocol):
    """A launcher that can run a command on a stage and list its changes without applying
    them (contract 13.2's ``dry_run``): ``staged`` says whether its calls are staged now."""

    @property
    def staged(self) -> bool:
        """Whether this launcher's calls are staged (a dry run is possible)."""
        ...

    async def start_dry_run(self, spec: Spec) -> Process:
        """``start``, with the call's changes listed at the join and none applied."""
        ...


def launcher_dry_runs(launcher: object) -> bool:
    """Whether ``launcher`` can run a command dry now (a ``DryRunLauncher`` whose calls
    are staged); a failing property counts as no."""
    if not _dry_runs(launcher):
        return False
    try:
        return launcher.staged is True
    except Exception:  # noqa: BLE001 - a failing property is a launcher saying nothing
        return False


def _dry_runs(launcher: object) -> TypeGuard[DryRunLauncher]:
    """``isinstance(launcher, DryRunLauncher)`` without reading ``staged``: its method
    and its property looked up statically (as ``_optional``'s guards do)."""
    return all(
        inspect.getattr_static(launcher, name, None) is not None
        for name in ("staged", "start_dry_run")
    )


MAXIMUM_CONTAINMENT_BYTES: Final = 768
"""Longest text a launcher's optional ``containment`` attribute may give the description."""


def launcher_containment(launcher: object) -> str | None:
    """The launcher's optional ``containment`` text for the description, when usable.

    A launcher that confines its processes may say what it confines in one short text
    (read once, at construction). It is used only when it is a ``str`` of 1 to
    ``MAXIMUM_CONTAINMENT_BYTES`` UTF-8 bytes without control characters; anything else
    (absent, ``None``, another type, a property that raises) is ignored.
    """
    try:
        value = launcher.containment if describes_containment(launcher) else None
    except Exception:  # noqa: BLE001 - a failing property is a launcher saying nothing
        return None
    return launcher_text(value)


def launcher_text(value: object) -> str | None:
    """A launcher's own short sentence (a ``LaunchError.reason``, a ``sandbox_hint``),
    when usable: a ``str`` of 1 to ``MAXIMUM_CONTAINMENT_BYTES`` UTF-8 bytes without
    control characters; anything else is ignored (``None``)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    if not 0 < size <= MAXIMUM_CONTAINMENT_BYTES:
        return None
    if any(unicodedata.category(char) == "Cc" for char in text):
        return None
    return text


def launcher_contained(launcher: object) -> bool:
    """The launcher's optional ``contained`` attribute: ``True`` only when it is ``True``.

    The product does not know how a launcher contains its children; it only reports what
    the launcher says. An attribute that is absent, not a ``bool``, or fails to be read
    counts as ``False`` (not contained).
    """
    try:
        value = launcher.contained if says_contained(launcher) else False
    except Exception:  # noqa: BLE001 - a failing property is a launcher saying nothing
        return False
    return value is True


def process_hint(process: object) -> str | None:
    """The joined process's optional ``sandbox_hint`` (``launcher_text`` rules), if usable.

    A launcher that confines its processes may say, after the join of a command that
    failed, which of its flags would allow what its sandbox refused (contract 11.1).
    """
    try:
        value = process.sandbox_hint if hints_sandbox(process) else None
    except Exception:  # noqa: BLE001 - a failing property is a launcher saying nothing
        return None
    return launcher_text(value)


def process_cleaned_up(process: object) -> bool:
    """The joined process's optional ``cleanup_completed``; absent counts as ``True``.

    A launcher that makes something for a call besides the process (``PosixLauncher``:
    a private ``TMPDIR``) says there whether its join removed it. Present, anything but
    ``True`` (or a failing read) counts as ``False``: the cleanup was not complete.
    """
    try:
        value = process.cleanup_completed if reports_cleanup(process) else True
    except Exception:  # noqa: BLE001 - a failing property cannot vouch for the cleanup
        return False
    return value is True
