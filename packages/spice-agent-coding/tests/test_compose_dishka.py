"""The optional dishka integration: fallbacks, strict overrides, the shell's finalizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from app_fakes import CleanupRecorder, EchoTool, FakeRecord
from dishka import (
    STRICT_VALIDATION,
    AsyncContainer,
    Provider,
    Scope,
    make_async_container,
    provide,
)
from dishka.exception_base import DishkaError
from dishka.exceptions import ExitError

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding._compose import CLEANUP_INCOMPLETE
from spice.agent.coding.dishka import BEAN_NAMES, coding_providers
from spice.agent.dispatch import Dispatcher
from spice.agent.process import ExecutableResolver
from spice.agent.starter import AutoBean, AutoConfiguration
from spice.agent.tool import Call, Tool
from spice.agent.tools.coding import Config

MINE = EchoTool("read")


class MyRead(Provider):
    """The application's own read tool, declared as an override."""

    component = "read"
    scope = Scope.APP

    @provide(override=True)
    def read(self) -> Tool:
        return MINE


class ImplicitRead(Provider):
    """The application's own read tool, without saying it overrides anything."""

    component = "read"
    scope = Scope.APP

    @provide
    def read(self) -> Tool:
        return MINE


class NeedlessOverride(Provider):
    """An override of a name nothing provides."""

    component = "grep"
    scope = Scope.APP

    @provide(override=True)
    def grep(self) -> Tool:
        return EchoTool("grep")  # pragma: no cover


def container(fake: FakeRecord, config: Config, *extra: Provider) -> AsyncContainer:
    return make_async_container(
        *coding_providers(fake.record()),
        *extra,
        context={Config: config},
        validation_settings=STRICT_VALIDATION,
    )


async def test_fallbacks_are_used_when_nothing_is_provided(tmp_path: Path) -> None:
    """With no application provider, the dispatcher serves the three fallbacks."""
    fake = FakeRecord()
    app = container(fake, Config(tmp_path))
    try:
        dispatcher = await app.get(Dispatcher)
        assert list(BEAN_NAMES) == [d.name for d in dispatcher.definitions]
    finally:
        await app.close()
    assert ["read", "replace", "shell"] == sorted(fake.built)


async def test_the_fallback_platform_is_posix(tmp_path: Path) -> None:
    """The default component's resolver and launcher are the POSIX ones."""
    fake = FakeRecord()
    app = container(fake, Config(tmp_path))
    try:
        await app.get(Dispatcher)
        assert isinstance(await app.get(ExecutableResolver), PosixResolver)
    finally:
        await app.close()
    [(resolver, launcher)] = fake.platform
    assert (PosixResolver, PosixLauncher) == (type(resolver), type(launcher))


async def test_an_override_wins_under_strict_validation(tmp_path: Path) -> None:
    """An application provider with override=True replaces the fallback of that name."""
    fake = FakeRecord()
    app = container(fake, Config(tmp_path), MyRead())
    try:
        dispatcher = await app.get(Dispatcher)
        await dispatcher.dispatch(Call("1", "read", "{}"))
    finally:
        await app.close()
    assert "read" not in fake.built
    assert MINE.calls


def test_a_silent_replacement_is_refused_under_strict_validation(tmp_path: Path) -> None:
    """Providing a bean's name without override=True is an error under strict validation."""
    with pytest.raises(DishkaError):
        container(FakeRecord(), Config(tmp_path), ImplicitRead())


def test_an_override_of_nothing_is_refused_under_strict_validation(tmp_path: Path) -> None:
    """override=True where no fallback exists is an error under strict validation."""
    with pytest.raises(DishkaError):
        container(FakeRecord(), Config(tmp_path), NeedlessOverride())


async def test_closing_the_container_runs_the_shells_cleanup(tmp_path: Path) -> None:
    """The shell's Cleanup is the finalizer: it runs once, when the container closes."""
    fake = FakeRecord()
    app = container(fake, Config(tmp_path))
    await app.get(Dispatcher)
    assert 0 == fake.cleanup.calls
    await app.close()
    assert 1 == fake.cleanup.finished


async def test_a_failing_cleanup_surfaces_when_the_container_closes(tmp_path: Path) -> None:
    """A cleanup that fails is not silent: closing the container raises."""
    fake = FakeRecord(CleanupRecorder(fail=True))
    app = container(fake, Config(tmp_path))
    await app.get(Dispatcher)
    with pytest.raises(ExitError) as raised:
        await app.close()
    [inner] = raised.value.exceptions
    assert (RuntimeError, CLEANUP_INCOMPLETE) == (type(inner), str(inner))
    assert 1 == fake.cleanup.calls


async def test_an_unused_shell_needs_no_cleanup(tmp_path: Path) -> None:
    """When nothing asked for the shell, closing builds nothing and cleans nothing."""
    fake = FakeRecord()
    app = container(fake, Config(tmp_path))
    await app.close()
    assert ([], 0) == (fake.built, fake.cleanup.calls)


def test_a_record_with_other_names_is_refused() -> None:
    """The provider serves exactly read, replace and shell."""
    fake = FakeRecord()
    record = AutoConfiguration(review="r", beans=(AutoBean("read", fake.read),))
    with pytest.raises(ValueError, match="exactly"):
        coding_providers(record)


def test_the_default_record_builds_providers() -> None:
    """Without an argument the providers come from spice_auto_configuration()."""
    assert 4 == len(coding_providers())


def test_the_application_package_does_not_import_dishka() -> None:
    """Importing spice.agent.coding (and its CLI) loads neither dishka nor the MCP SDK."""
    code = (
        "import sys, spice.agent.coding, spice.agent.coding._cli\n"
        "print(sorted(m for m in ('dishka', 'mcp') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "[]" == out.stdout.strip()
