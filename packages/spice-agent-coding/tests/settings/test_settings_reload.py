"""A settings file's change rebuilds the launcher off the event loop (contract 13.5).

The rebuild reads the worktree (the start facts, the guard's repair and scan, the walk for
links): on a large one that takes long. Here the real ``WatchingLauncher`` follows a real
settings file; its ``build`` seam is held on a ``threading.Event`` so that what the event
loop does meanwhile, and what a cancellation leaves, can be seen without a clock.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect

from spice.agent.coding._platform import PlatformLauncher, SandboxRequest, platform_launcher
from spice.agent.coding._settings._reload import DRY_RUN_UNAVAILABLE, WatchingLauncher, watching
from spice.agent.coding._settings._resolve import Flags, resolve_settings
from spice.agent.process import LaunchError, Spec

BOUND: Final = 30.0
"""Hang guard for one wait (never a timing assertion)."""

HELD_SECONDS: Final = 10.0
"""How long a held build waits for the loop to let it go; reached only where the build runs
on the loop itself (the loop cannot let it go): then the test fails, it does not hang."""


def _settings_file(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / "settings.toml"
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


class HeldBuild:
    """A ``build`` that waits, in whatever thread runs it, until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.released: list[bool] = []
        self.requests: list[SandboxRequest] = []

    def __call__(self, request: SandboxRequest) -> PlatformLauncher:
        self.requests.append(request)
        self.entered.set()
        self.released.append(self.go.wait(HELD_SECONDS))
        return platform_launcher(request)


def _watching(
    tmp_path: Path, build: Callable[[SandboxRequest], PlatformLauncher]
) -> tuple[WatchingLauncher, Path, Path]:
    root = tmp_path / "root"
    root.mkdir()
    path = _settings_file(tmp_path / "config", "max_processes = 500\n")
    flags = Flags(root=str(root), sandbox="off", settings=str(path))
    settings = resolve_settings(flags, {})
    launcher = watching(flags, {}, settings, platform_launcher(settings.sandbox_request()), build)
    assert isinstance(launcher, WatchingLauncher)
    return launcher, root, path


async def _true(launcher: WatchingLauncher, root: Path) -> None:
    spec = Spec("/bin/true", (), str(root), ("PATH=/usr/bin:/bin",), b"", Collect(), Collect())
    process = await launcher.start(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()


async def _entered(build: HeldBuild) -> None:
    """Wait (bounded) until the build has begun, from the loop: a thread waits for it."""
    async with asyncio.timeout(BOUND):
        await asyncio.to_thread(build.entered.wait, BOUND)


async def test_the_loop_runs_while_a_reload_builds_the_launcher(tmp_path: Path) -> None:
    """A call whose start rebuilds the launcher: meanwhile the loop still runs (it lets the
    build go itself); on the old code the build held the loop and waited out its bound."""
    build = HeldBuild()
    launcher, root, path = _watching(tmp_path, build)
    await _true(launcher, root)  # unchanged: nothing built
    assert build.requests == []
    path.write_text("max_processes = 400 # changed\n")
    call = asyncio.create_task(_true(launcher, root))
    await _entered(build)
    build.go.set()  # the loop ran while the build was held
    async with asyncio.timeout(BOUND):
        await call
    assert build.released == [True]
    assert [request.max_processes for request in build.requests] == [400]
    assert "max_processes 400 (settings file" in " ".join(
        launcher.report()["rules"]  # type: ignore[arg-type]
    )


async def test_a_cancelled_reload_leaves_the_old_launcher_and_the_next_call_looks_again(
    tmp_path: Path,
) -> None:
    build = HeldBuild()
    launcher, root, path = _watching(tmp_path, build)
    before = launcher._launcher
    path.write_text("max_processes = 300 # changed\n")
    call = asyncio.create_task(_true(launcher, root))
    await _entered(build)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(BOUND):
            await call
    assert launcher._launcher is before  # nothing half-applied
    build.go.set()
    await _true(launcher, root)  # the next call rebuilds
    assert launcher._launcher is not before
    assert [request.max_processes for request in build.requests] == [300, 300]


async def test_a_reload_that_fails_refuses_the_call_and_keeps_the_old_launcher(
    tmp_path: Path,
) -> None:
    """A rebuild that raises (the settings ask what cannot be) refuses the call with its
    message and changes nothing; the unchanged file is not rebuilt for every call."""
    build = HeldBuild()
    launcher, root, path = _watching(tmp_path, build)
    before = launcher._launcher
    path.write_text('allow_write = ["relative"]\n')
    with pytest.raises(LaunchError) as refused:
        await _true(launcher, root)
    assert refused.value.reason
    assert launcher._launcher is before
    assert build.requests == []


async def test_a_dry_run_follows_the_launcher_the_file_asks_for(tmp_path: Path) -> None:
    """The watching launcher forwards ``staged`` and ``start_dry_run`` (round 6: it did not,
    so every real server refused ``dry_run``); an unstaged launcher refuses it with the
    reason, before anything starts (the staged side: test_mcp_journal.py)."""
    launcher, root, _ = _watching(tmp_path, platform_launcher)
    assert launcher.staged is False  # sandbox off: nothing is staged
    spec = Spec("/bin/true", (), str(root), ("PATH=/usr/bin:/bin",), b"", Collect(), Collect())
    with pytest.raises(LaunchError) as refused:
        await launcher.start_dry_run(spec)
    assert refused.value.reason == DRY_RUN_UNAVAILABLE
    assert refused.value.process is None
