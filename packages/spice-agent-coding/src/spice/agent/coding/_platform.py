"""The one place that picks the process platform: POSIX, or Windows (contract 10.4).

``default_resolver`` and ``default_launcher`` are what ``compose`` uses when none is given;
``platform_launcher`` is the launcher a ``SandboxRequest`` (the CLI's sandbox settings, as
plain values) asks for. The Windows
modules are loaded here only on Windows; every module imports on every platform (for the
tests, the type checker and ``PosixLauncher``'s place in the package's surface).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, final

from spice.agent.process import ExecutableResolver, Launcher, Process, Spec

from ._containment import DEFAULT_MODE, Containment, ContainmentUnavailable, resolve_containment
from ._network import DomainPolicy
from ._posix._cgroup import DEFAULT_MAX_PROCESSES

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


@final
@dataclass(frozen=True, slots=True)
class SandboxRequest:
    """What the settings ask of the shell's sandbox, as plain values (no ``Settings`` here:
    ``Settings.sandbox_request`` makes one, so this module never imports the settings)."""

    root: str
    """The worktree root (absolute)."""
    mode: str = DEFAULT_MODE
    """``auto``, ``workspace`` or ``off``."""
    allow_network: bool = False
    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    max_processes: int = DEFAULT_MAX_PROCESSES
    max_memory: int | None = None
    """Bytes of one call's memory bound; ``None``: a quarter of the machine's, at most 16 GiB."""
    domains: DomainPolicy = field(default_factory=DomainPolicy)
    """What ``--allow-domain`` and ``--allow-private-address`` let through the proxy."""


def platform_launcher(
    request: SandboxRequest, probe: Callable[[], int] | None = None, windows: bool = WINDOWS
) -> PlatformLauncher:
    """The launcher ``serve``, ``call`` and ``tools`` run commands with.

    POSIX: the containment of contract 9.4 and 11.1 from ``request`` (``probe`` replaces
    the kernel's Landlock answer), its start facts (the writable places held, the caches,
    the server's own code) and the call cgroups' bounds. Windows: never contained; ``auto``
    warns, ``workspace`` raises ``ContainmentUnavailable`` (a
    ``WindowsContainmentUnavailable``).
    """
    if windows:
        from ._windows._launcher import (  # noqa: PLC0415 - Windows only
            WindowsLauncher,
            windows_containment,
        )

        return WindowsLauncher(windows_containment(request.mode, request.allow_network))
    from ._posix._cgroup import resolve_cgroups  # noqa: PLC0415 - POSIX only
    from ._posix._launcher import PosixLauncher  # noqa: PLC0415 - POSIX only

    containment = resolve_containment(
        request.mode,
        request.allow_network,
        probe,
        root=request.root,
        allow_write=request.allow_write,
        domains=request.domains,
    )
    facts = None
    if containment.confined:
        from ._posix._facts import CacheUnavailable, start_facts  # noqa: PLC0415 - POSIX only

        try:
            facts = start_facts(
                request.root,
                containment.allow_write,
                bwrap=containment.namespaces.bwrap,
                deny_read=request.deny_read,
                allow_read=request.allow_read,
                cache=True,
            )
        except CacheUnavailable as error:
            raise ContainmentUnavailable(str(error)) from None
        except OSError:
            raise ContainmentUnavailable(PLACE_UNAVAILABLE) from None
    bounds = resolve_cgroups(request.max_processes, request.max_memory)
    return PosixLauncher(containment, request.root, bounds, facts)
