"""The settings file applied to a running server's next call (contract 12.2).

An MCP stdio server lives inside its client's configuration: every change of a flag meant
editing it and restarting the agent. ``WatchingLauncher`` wraps the platform's launcher;
before each call it asks the settings file for its rules (one ``stat``; the file is read
again only when that changed, ``_settings._file.SettingsFile``). On a change it resolves the
settings again, from the start's flags and environment and the file's new rules, and:

- where the sandbox they ask for differs (writable places, read rules, domains, bounds),
  builds the launcher again from them (``_platform.platform_launcher``), exactly as a
  start would, in a worker thread: the build reads the worktree (the facts, the guard's
  repair and scan, the walk for links) and the event loop meanwhile answers every other
  request. Calls through this launcher wait for it (one rebuild at a time); one cancelled
  meanwhile leaves the launcher as it was, and the next call looks again;
- sets the command's environment to the new allow-list: names the file adds are taken
  from the server's environment, names it took away are dropped.

A file that cannot be used (it does not parse, names an unknown key, holds a wrong type,
lies where it may not, is gone) or rules that cannot be applied refuse the call with the
message (``LaunchError``), and the next call looks again: nothing is silently widened.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Final, final

from spice.agent.process import LaunchError, Process, Spec
from spice.agent.tools.coding._shell_launcher import DryRunLauncher, launcher_dry_runs

from .._platform import PlatformLauncher, SandboxRequest, platform_launcher
from .._sandbox import ContainmentUnavailable, SandboxReport
from ._file import FileRules, SettingsFile, SettingsFileError
from ._protection import with_extra
from ._resolve import Flags, Settings, resolve_settings
from ._values import SettingsError

__all__ = ["WatchingLauncher", "kept_extra", "watching"]


def watching(
    flags: Flags,
    environ: Mapping[str, str],
    settings: Settings,
    launcher: PlatformLauncher,
    build: Callable[[SandboxRequest], PlatformLauncher] = platform_launcher,
) -> PlatformLauncher:
    """``launcher`` itself where no settings file is watched, else a ``WatchingLauncher``."""
    if settings.settings_file is None:
        return launcher
    places = (settings.config.root, *settings.allow_write)
    file = SettingsFile(settings.settings_file, settings.config.root, places)
    return WatchingLauncher(flags, environ, settings, launcher, file, build)


def kept_extra(settings: Settings, start: Settings) -> Settings:
    """``settings`` whose protected paths keep the start's own files (the HTTP server's
    token file and audit log: contract 12.1), which no settings file names."""
    extra = start.config.protected_paths.extra
    if not extra:
        return settings
    policy = with_extra(settings.config.protected_paths, extra)
    config = dataclasses.replace(settings.config, protected_paths=policy)
    return dataclasses.replace(settings, config=config)


DRY_RUN_UNAVAILABLE: Final = (
    "dry_run needs a staged worktree, and the sandbox the settings file asks for runs "
    "commands unstaged (see tools)"
)


@final
class WatchingLauncher:
    """A platform launcher whose sandbox follows the settings file (module docstring)."""

    __slots__ = (
        "_build",
        "_environ",
        "_file",
        "_flags",
        "_launcher",
        "_lock",
        "_rules",
        "_settings",
        "_start",
    )

    def __init__(
        self,
        flags: Flags,
        environ: Mapping[str, str],
        settings: Settings,
        launcher: PlatformLauncher,
        file: SettingsFile,
        build: Callable[[SandboxRequest], PlatformLauncher] = platform_launcher,
    ) -> None:
        self._flags = flags
        self._environ = dict(environ)
        self._settings = settings
        self._start = settings
        self._launcher = launcher
        self._file = file
        self._build = build
        self._rules: FileRules | None = None
        self._lock = asyncio.Lock()

    @property
    def contained(self) -> bool:
        return self._launcher.contained

    @property
    def containment(self) -> str | None:
        return self._launcher.containment

    @property
    def sandbox(self) -> SandboxReport:
        return self._launcher.sandbox

    def report(self) -> dict[str, object]:
        """The launcher's report, and each rule with where it came from."""
        report = self._launcher.report()
        report["settings_file"] = self._settings.settings_file
        report["rules"] = [f"{rule} ({origin})" for rule, origin in self._settings.origins]
        return report

    async def _follow(self) -> None:
        """Apply the file's rules if they changed (the rebuild in a worker thread);
        ``LaunchError`` when they cannot be. A cancellation leaves everything as it was."""
        try:
            rules = self._file.current()
        except SettingsFileError as error:
            raise LaunchError(reason=str(error)) from None
        if rules is self._rules:
            return
        settings, launcher = await asyncio.to_thread(self._rebuilt)
        self._settings, self._launcher, self._rules = settings, launcher, rules

    def _rebuilt(self) -> tuple[Settings, PlatformLauncher]:
        """The settings the file's rules make and the launcher they ask for (blocking)."""
        try:
            settings = kept_extra(
                resolve_settings(self._flags, self._environ, self._file), self._start
            )
            request = settings.sandbox_request()
            launcher = (
                self._launcher
                if request == self._settings.sandbox_request()
                else self._build(request)
            )
        except (SettingsError, ContainmentUnavailable) as error:
            raise LaunchError(reason=str(error)) from None
        return settings, launcher

    def _environment(self, spec: Spec) -> Spec:
        """``spec`` with the environment the current allow-list gives."""
        before = set(self._start.config.environment_allowlist)
        now = set(self._settings.config.environment_allowlist)
        if before == now:
            return spec
        kept = [e for e in spec.environment if e.partition("=")[0] not in before - now]
        present = {entry.partition("=")[0] for entry in kept}
        added = [
            f"{name}={self._environ[name]}"
            for name in sorted(now - before)
            if name in self._environ and name not in present
        ]
        return Spec(
            spec.executable,
            spec.arguments,
            spec.working_directory,
            (*kept, *added),
            spec.stdin,
            spec.stdout,
            spec.stderr,
            spec.capabilities,
        )

    @property
    def staged(self) -> bool:
        """Whether the current launcher stages its calls, so ``dry_run`` runs (13.2)."""
        return launcher_dry_runs(self._launcher)

    async def start(self, spec: Spec) -> Process:
        """Follow the settings file, then start ``spec`` with the launcher it asks for."""
        launcher, spec = await self._current(spec)
        return await launcher.start(spec)

    async def start_dry_run(self, spec: Spec) -> Process:
        """``start`` on a stage that is listed and never applied, where the launcher the
        settings file asks for stages its calls; else ``LaunchError`` saying why."""
        launcher, spec = await self._current(spec)
        if not (launcher_dry_runs(launcher) and isinstance(launcher, DryRunLauncher)):
            raise LaunchError(reason=DRY_RUN_UNAVAILABLE)
        return await launcher.start_dry_run(spec)

    async def _current(self, spec: Spec) -> tuple[PlatformLauncher, Spec]:
        """The launcher the settings file asks for now, and ``spec`` with its environment."""
        async with self._lock:
            await self._follow()
            return self._launcher, self._environment(spec)
