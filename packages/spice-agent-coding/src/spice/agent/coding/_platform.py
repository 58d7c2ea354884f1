"""The one place that picks the process platform: POSIX, or Windows (contract 10.4).

The only module outside ``_posix/`` and ``_windows/`` that imports them (contract 12.5;
``tests/test_import_graph.py`` holds it to that). ``default_resolver`` and
``default_launcher`` are what ``compose`` uses when none is given; ``platform_launcher`` is
the launcher a ``SandboxRequest`` (the CLI's sandbox settings, as plain values) asks for;
``harden`` readies the server's own process before it runs anything; ``clean_cache``
removes a worktree's private cache. The platform modules are loaded here on first use;
every module imports on every platform (for the tests, the type checker and
``PosixLauncher``'s place in the package's surface).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, final

from spice.agent.process import ExecutableResolver, Launcher, Process, Spec
from spice.agent.tools.coding import ProtectedPaths

from ._netpolicy._domains import DomainPolicy
from ._posix._launcher import PosixLauncher
from ._posix._resolver import PosixResolver
from ._sandbox import DEFAULT_MAX_PROCESSES, DEFAULT_MODE, ContainmentUnavailable, SandboxReport

__all__ = [
    "WINDOWS",
    "PlatformLauncher",
    "PosixLauncher",
    "PosixResolver",
    "SandboxRequest",
    "clean_cache",
    "create_private",
    "default_launcher",
    "default_resolver",
    "harden",
    "judge_private",
    "platform_launcher",
    "release_caches",
]

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
    def sandbox(self) -> SandboxReport: ...

    def report(self) -> dict[str, object]: ...

    async def start(self, spec: Spec) -> Process: ...


def default_resolver(windows: bool = WINDOWS) -> ExecutableResolver:
    """The platform's resolver."""
    if windows:
        from ._windows._resolver import WindowsResolver  # noqa: PLC0415 - Windows only

        return WindowsResolver()
    return PosixResolver()


def default_launcher(windows: bool = WINDOWS) -> Launcher:
    """The platform's launcher, uncontained."""
    if windows:
        from ._windows._launcher import WindowsLauncher  # noqa: PLC0415 - Windows only

        return WindowsLauncher()
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
    unprotect: tuple[str, ...] = ()
    """The protected paths given back (--unprotect and the settings file's ``unprotect``),
    as given; ``protected`` is what they make of the policy."""
    protected: ProtectedPaths = ProtectedPaths.default()  # noqa: RUF009 - a frozen value
    """The paths no agent may change (contract 12.1): the same value as the tools'
    ``Config.protected_paths``, obeyed by the sandbox's plan and its join."""
    max_server_memory: int | None = None
    """Bytes all calls together may use; ``None``: half the machine's memory."""
    ca_files: tuple[str, ...] = ()
    """The settings file's PEM files: the commands' CA bundle joins them to the host's
    store (contract 13.4)."""


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
    from ._posix._containment import resolve_containment  # noqa: PLC0415 - POSIX only

    containment = resolve_containment(
        request.mode,
        request.allow_network,
        probe,
        root=request.root,
        allow_write=request.allow_write,
        domains=request.domains,
    )
    from ._posix._facts import CacheUnavailable  # noqa: PLC0415 - POSIX only

    bounds = resolve_cgroups(
        request.max_processes, request.max_memory, server_memory=request.max_server_memory
    )
    try:
        return PosixLauncher.build(
            containment,
            request.root,
            bounds,
            deny_read=request.deny_read,
            allow_read=request.allow_read,
            cache=True,
            protected=request.protected,
            ca_files=request.ca_files,
        )
    except CacheUnavailable as error:
        raise ContainmentUnavailable(str(error)) from None
    except OSError:
        raise ContainmentUnavailable(PLACE_UNAVAILABLE) from None


def harden() -> None:
    """Before ``serve`` or ``call`` runs anything: non-dumpable, and the orphans' reaper.

    Non-dumpable: a child running as the same (non-root) user cannot read this
    process's ``/proc/PID/environ`` or memory. Subreaper: descendants orphaned by a
    killed supervisor come back here and are ended at their call's join. Each step
    answers for itself where the platform has no such thing.
    """
    from ._posix import _launcher  # noqa: PLC0415 - POSIX only (every module imports)
    from ._posix._supervisor import _landlock  # noqa: PLC0415 - POSIX only (every module imports)

    _landlock.set_dumpable(False)
    _launcher.adopt_orphans()


def clean_cache(root: str) -> tuple[str | None, str]:
    """Remove the private cache directory of the worktree ``root`` (``cache clean``).

    Answers the cache's path (``None`` when no home or cache directory is known for the
    server's user) and what became of it: ``removed``, ``absent``, ``in_use`` (a running
    server holds it: left whole) or ``failed`` (not removed whole).
    """
    from ._posix import _caches  # noqa: PLC0415 - only for this command

    cache = _caches.cache_directory(root, os.environ)
    if cache is None:
        return None, _caches.Removal.ABSENT
    return cache, _caches.remove_cache(cache)


def list_caches() -> tuple[list[dict[str, object]], bool]:
    """Every worktree's private cache (``cache list``): root, size, last use, in use; and
    whether more were there than one listing shows. None on Windows (no sandbox, no
    private caches)."""
    if WINDOWS:
        return [], False
    from ._posix import _caches  # noqa: PLC0415 - only for this command

    listed, truncated = _caches.list_caches(os.environ)
    return [entry.to_json() for entry in listed], truncated


def clean_all_caches() -> dict[str, list[str]]:
    """Remove every worktree's private cache that no running server holds (``cache clean
    --all``): the caches ``removed``, left ``in_use``, and ``failed``."""
    outcome: dict[str, list[str]] = {"removed": [], "in_use": [], "failed": []}
    if WINDOWS:
        return outcome
    from ._posix import _caches  # noqa: PLC0415 - only for this command

    for entry in _caches.list_caches(os.environ)[0]:
        result = _caches.remove_cache(entry.cache)
        if result != _caches.Removal.ABSENT:
            outcome[result].append(entry.cache)
    return outcome


def release_caches() -> None:
    """Let go of the worktree caches this process holds (``main`` ends: in process, as the
    tests run it, the next command must find them free). Nothing when none was held."""
    held = sys.modules.get(f"{__package__}._posix._caches")
    if held is not None:
        held.release_all()


def expire_caches(max_age_days: int) -> list[str]:
    """At a server's start: remove the private caches unused for more than
    ``max_age_days`` days (0: none), a bounded number per start; the caches removed."""
    if WINDOWS:
        return []
    from ._posix import _caches  # noqa: PLC0415 - only at serve's start

    return _caches.expire(os.environ, max_age_days)


def judge_private(fd: int) -> tuple[bool, bool]:
    """Windows: whether the open file ``fd`` is the user's, and whether others may open it
    (``_windows._private.judge``; ``OSError`` when its security cannot be read)."""
    from ._windows import _private  # noqa: PLC0415 - Windows only

    return _private.judge(fd)


def create_private(path: str, flags: int) -> int:
    """Windows: open ``path``, made with the user's protected access list when absent."""
    from ._windows import _private  # noqa: PLC0415 - Windows only

    return _private.create_private(path, flags)
