"""The one place that picks the process platform: POSIX, or Windows (contract 10.4).

``default_resolver`` and ``default_launcher`` are what ``compose`` uses when none is given;
``platform_launcher`` is the launcher the CLI's sandbox settings ask for. The Windows
modules are loaded here only on Windows; every module imports on every platform (for the
tests, the type checker and ``PosixLauncher``'s place in the package's surface).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from spice.agent.process import ExecutableResolver, Launcher, Process, Spec

from ._containment import Containment, ContainmentUnavailable, resolve_containment

if TYPE_CHECKING:
    from ._settings import Settings

PLACE_UNAVAILABLE: Final = (
    "the worktree or an --allow-write directory cannot be opened (a symbolic link in its "
    "path was resolved at start; it must stay a directory)"
)

WINDOWS: Final = sys.platform == "win32"
"""Whether this is Windows, where ``WindowsLauncher`` and ``WindowsResolver`` run commands."""


class PlatformLauncher(Protocol):
    """What the application asks of a launcher beyond ``Launcher``: its sandbox report."""

    @property
    def contained(self) -> bool: ...

    @property
    def containment(self) -> str | None: ...

    @property
    def sandbox(self) -> Containment: ...

    def report(self) -> dict[str, object]: ...

    async def start(self, spec: Spec) -> Process: ...


def default_resolver(windows: bool = WINDOWS) -> ExecutableResolver:
    """The platform's resolver."""
    if windows:
        from ._windows._resolver import WindowsResolver  # noqa: PLC0415 - Windows only

        return WindowsResolver()
    from ._posix._resolver import PosixResolver  # noqa: PLC0415 - POSIX only

    return PosixResolver()


def default_launcher(windows: bool = WINDOWS) -> Launcher:
    """The platform's launcher, uncontained."""
    if windows:
        from ._windows._launcher import WindowsLauncher  # noqa: PLC0415 - Windows only

        return WindowsLauncher()
    from ._posix._launcher import PosixLauncher  # noqa: PLC0415 - POSIX only

    return PosixLauncher()


def platform_launcher(
    settings: Settings, probe: Callable[[], int] | None = None, windows: bool = WINDOWS
) -> PlatformLauncher:
    """The launcher ``serve``, ``call`` and ``tools`` run commands with.

    POSIX: the containment of contract 9.4 from ``settings.sandbox`` and
    ``settings.allow_network`` (``probe`` replaces the kernel's Landlock answer).
    Windows: never contained; ``auto`` warns, ``workspace`` raises
    ``ContainmentUnavailable`` (a ``WindowsContainmentUnavailable``).
    """
    if windows:
        from ._windows._launcher import (  # noqa: PLC0415 - Windows only
            WindowsLauncher,
            windows_containment,
        )

        return WindowsLauncher(windows_containment(settings.sandbox, settings.allow_network))
    from ._posix._launcher import PosixLauncher  # noqa: PLC0415 - POSIX only

    containment = resolve_containment(
        settings.sandbox,
        settings.allow_network,
        probe,
        root=settings.config.root,
        allow_write=settings.allow_write,
    )
    facts = None
    if containment.confined:
        from ._posix._facts import CacheUnavailable, start_facts  # noqa: PLC0415 - POSIX only

        try:
            facts = start_facts(
                settings.config.root,
                containment.allow_write,
                bwrap=containment.namespaces.bwrap,
                deny_read=settings.deny_read,
                allow_read=settings.allow_read,
                cache=True,
            )
        except CacheUnavailable as error:
            raise ContainmentUnavailable(str(error)) from None
        except OSError:
            raise ContainmentUnavailable(PLACE_UNAVAILABLE) from None
    return PosixLauncher(containment, settings.config.root, facts)
