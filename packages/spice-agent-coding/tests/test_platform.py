"""``_platform``: the one place that picks the resolver and launcher for each platform."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spice.agent.coding import PosixLauncher, PosixResolver, compose
from spice.agent.coding._platform import (
    WINDOWS,
    default_launcher,
    default_resolver,
    platform_launcher,
)
from spice.agent.coding._sandbox import ContainmentUnavailable
from spice.agent.coding._settings._resolve import Settings
from spice.agent.coding._windows._launcher import (
    AUTO_ON_WINDOWS,
    NO_SANDBOX,
    WindowsContainmentUnavailable,
    WindowsLauncher,
    windows_containment,
)
from spice.agent.coding._windows._resolver import WindowsResolver
from spice.agent.tools.coding import Config


def test_the_platform_is_this_one() -> None:
    assert (sys.platform == "win32") == WINDOWS


def test_each_platform_gets_its_own_resolver_and_launcher() -> None:
    assert isinstance(default_resolver(windows=True), WindowsResolver)
    assert isinstance(default_launcher(windows=True), WindowsLauncher)
    assert isinstance(default_resolver(windows=False), PosixResolver)
    assert isinstance(default_launcher(windows=False), PosixLauncher)


def test_the_defaults_follow_this_platform() -> None:
    expected = (WindowsResolver, WindowsLauncher) if WINDOWS else (PosixResolver, PosixLauncher)
    assert (type(default_resolver()), type(default_launcher())) == expected


@pytest.mark.parametrize(
    ("mode", "warning"), [("auto", AUTO_ON_WINDOWS), ("off", None), (" OFF ", None)]
)
def test_on_windows_auto_warns_off_is_quiet_and_nothing_is_contained(
    tmp_path: Path, mode: str, warning: str | None
) -> None:
    launcher = platform_launcher(
        Settings(Config(str(tmp_path)), mode.strip().lower()).sandbox_request(), windows=True
    )
    assert (False, None, warning, "off") == (
        launcher.contained,
        launcher.containment,
        launcher.sandbox.warning,
        launcher.sandbox.mode,
    )
    report = launcher.report()
    assert (False, ["everything"]) == (report["contained"], report["not_confined"])
    assert "Job Object" in str(report["process_lifetime"])


def test_on_windows_workspace_refuses_with_its_own_reason(tmp_path: Path) -> None:
    with pytest.raises(ContainmentUnavailable) as raised:
        platform_launcher(
            Settings(Config(str(tmp_path)), "workspace").sandbox_request(), windows=True
        )
    assert isinstance(raised.value, WindowsContainmentUnavailable)
    assert NO_SANDBOX == str(raised.value)


def test_an_unknown_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="sandbox mode"):
        windows_containment("sandboxed")


def test_the_windows_launcher_refuses_a_contained_policy() -> None:
    from spice.agent.coding._posix._containment import Containment  # noqa: PLC0415

    with pytest.raises(TypeError, match="no shell sandbox"):
        WindowsLauncher(Containment("workspace", "workspace", 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        WindowsLauncher("off")  # type: ignore[arg-type]


async def test_compose_builds_the_shell_with_this_platforms_launcher(tmp_path: Path) -> None:
    async with compose(Config(str(tmp_path))) as dispatcher:
        names = [definition.name for definition in dispatcher.definitions]
    assert ["read", "replace", "shell"] == names
