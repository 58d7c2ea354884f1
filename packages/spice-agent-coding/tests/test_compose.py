"""The composition root: config resolution, fallbacks, the application's own tools, cleanup."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from app_fakes import CleanupRecorder, EchoTool, FakeRecord
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding import PosixLauncher, PosixResolver, compose, resolve_config
from spice.agent.coding._compose import CLEANUP_INCOMPLETE, _Platform, build_bean, settle
from spice.agent.dispatch import Dispatcher
from spice.agent.starter import AutoBean, AutoConfiguration
from spice.agent.tool import Call
from spice.agent.tools.coding import Config


def test_resolve_config_prefers_the_flag(tmp_path: Path) -> None:
    """A root given as a flag wins over the environment and the current directory."""
    config = resolve_config(tmp_path, {"SPICE_AGENT_WORKTREE": "/elsewhere"})
    assert str(tmp_path) == config.root


def test_resolve_config_uses_the_environment_without_a_flag() -> None:
    """Without a flag, SPICE_AGENT_WORKTREE names the root."""
    assert "/srv/tree" == resolve_config(None, {"SPICE_AGENT_WORKTREE": "/srv/tree"}).root


def test_resolve_config_falls_back_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a flag or the variable (or with it empty), the current directory is the root."""
    monkeypatch.chdir(tmp_path)
    assert os.getcwd() == resolve_config(None, {}).root
    assert os.getcwd() == resolve_config(None, {"SPICE_AGENT_WORKTREE": ""}).root


def test_resolve_config_makes_a_relative_root_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative root is taken relative to the current directory."""
    monkeypatch.chdir(tmp_path)
    assert str(tmp_path / "sub") == resolve_config("sub", {}).root


def test_resolve_config_rejects_a_root_with_nul() -> None:
    """A root containing NUL is refused with a fixed message."""
    with pytest.raises(ValueError, match="not a usable path"):
        resolve_config("bad\0root", {})


@given(st.text(alphabet=st.characters(blacklist_characters="\0"), min_size=1, max_size=40))
def test_resolve_config_always_gives_an_absolute_root(name: str) -> None:
    """Any NUL-free root becomes an absolute, normalized root or a ValueError, never else."""
    try:
        config = resolve_config(name, {})
    except ValueError:
        return
    assert os.path.isabs(config.root)
    assert os.path.normpath(config.root) == config.root


async def test_fallbacks_fill_every_missing_name(tmp_path: Path) -> None:
    """With no application tools, the three fallback beans are built and dispatched to."""
    fake = FakeRecord()
    async with compose(Config(tmp_path), defaults=fake.record()) as dispatcher:
        assert ["read", "replace", "shell"] == [d.name for d in dispatcher.definitions]
        result = await dispatcher.dispatch(Call("1", "read", '{"text":"hi"}'))
    assert ["read", "replace", "shell"] == fake.built
    assert '{"ok":true,"echo":"hi"}' == result.content


async def test_the_shell_fallback_gets_the_posix_platform_by_default(tmp_path: Path) -> None:
    """Unless the application passes its own, the shell fallback gets the POSIX platform."""
    fake = FakeRecord()
    async with compose(Config(tmp_path), defaults=fake.record()):
        pass
    [(resolver, launcher)] = fake.platform
    assert isinstance(resolver, PosixResolver)
    assert isinstance(launcher, PosixLauncher)


async def test_the_applications_own_tool_wins(tmp_path: Path) -> None:
    """A tool the application provides under a bean's name replaces that fallback."""
    fake = FakeRecord()
    mine = EchoTool("read")
    async with compose(Config(tmp_path), tools=[mine], defaults=fake.record()) as dispatcher:
        await dispatcher.dispatch(Call("1", "read", "{}"))
    assert ["replace", "shell"] == fake.built
    assert 1 == len(mine.calls)


async def test_an_application_shell_means_no_fallback_cleanup(tmp_path: Path) -> None:
    """When the application provides the shell, it owns the cleanup; none of ours runs."""
    fake = FakeRecord()
    async with compose(
        Config(tmp_path), tools=[EchoTool("shell")], defaults=fake.record()
    ) as dispatcher:
        assert 3 == len(dispatcher.definitions)
    assert 0 == fake.cleanup.calls


async def test_extra_application_tools_are_served_beside_the_fallbacks(tmp_path: Path) -> None:
    """Tools of other names join the three fallbacks in the one dispatcher."""
    fake = FakeRecord()
    async with compose(
        Config(tmp_path), tools=[EchoTool("echo")], defaults=fake.record()
    ) as dispatcher:
        assert ["echo", "read", "replace", "shell"] == [d.name for d in dispatcher.definitions]


async def test_two_application_tools_of_one_name_are_rejected(tmp_path: Path) -> None:
    """Two application tools with one name are a composition error, before anything is built."""
    fake = FakeRecord()
    with pytest.raises(ValueError, match="share one name"):
        async with compose(
            Config(tmp_path), tools=[EchoTool("x"), EchoTool("x")], defaults=fake.record()
        ):
            pass  # pragma: no cover
    assert [] == fake.built


async def test_cleanup_runs_once_on_a_normal_exit(tmp_path: Path) -> None:
    """Leaving the block runs the shell's cleanup exactly once."""
    fake = FakeRecord()
    async with compose(Config(tmp_path), defaults=fake.record()):
        assert 0 == fake.cleanup.calls
    assert 1 == fake.cleanup.finished


async def test_cleanup_runs_when_the_body_raises(tmp_path: Path) -> None:
    """An exception in the body still runs the cleanup, and the exception propagates."""
    fake = FakeRecord()
    with pytest.raises(LookupError):
        async with compose(Config(tmp_path), defaults=fake.record()):
            raise LookupError
    assert 1 == fake.cleanup.finished


async def test_cleanup_runs_when_the_body_is_cancelled(tmp_path: Path) -> None:
    """Cancelling the task inside the block runs the cleanup, then cancellation propagates."""
    fake = FakeRecord()
    entered = asyncio.Event()

    async def body() -> None:
        async with compose(Config(tmp_path), defaults=fake.record()):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(body())
    async with asyncio.timeout(5):
        await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 1 == fake.cleanup.finished


async def test_cleanup_runs_when_a_later_factory_fails(tmp_path: Path) -> None:
    """A factory failing after the shell was built still runs the shell's cleanup."""
    fake = FakeRecord()

    def broken(config: Config) -> EchoTool:
        raise OSError("factory failed")

    record = AutoConfiguration(
        review="docs/dependency-review.md",
        beans=(AutoBean("shell", fake.shell), AutoBean("read", broken)),
    )
    with pytest.raises(OSError, match="factory failed"):
        async with compose(Config(tmp_path), defaults=record):
            pass  # pragma: no cover
    assert 1 == fake.cleanup.finished


async def test_a_failing_cleanup_is_reported_after_a_normal_exit(tmp_path: Path) -> None:
    """A cleanup that fails turns a normal exit into a fixed RuntimeError."""
    fake = FakeRecord(CleanupRecorder(fail=True))
    with pytest.raises(RuntimeError, match=CLEANUP_INCOMPLETE):
        async with compose(Config(tmp_path), defaults=fake.record()):
            pass
    assert 1 == fake.cleanup.calls


async def test_a_failing_cleanup_never_masks_the_bodys_exception(tmp_path: Path) -> None:
    """When the body raised, a failing cleanup is logged and the body's exception wins."""
    fake = FakeRecord(CleanupRecorder(fail=True))
    with pytest.raises(LookupError):
        async with compose(Config(tmp_path), defaults=fake.record()):
            raise LookupError


async def test_settle_runs_every_cleanup_even_after_one_fails() -> None:
    """One failing cleanup does not stop the next; the answer says not all completed."""
    failing, fine = CleanupRecorder(fail=True), CleanupRecorder()
    assert False is await settle([failing, fine])
    assert (1, 1) == (failing.calls, fine.finished)


async def test_settle_abandons_a_hanging_cleanup_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cleanup that never returns is abandoned at the named bound."""
    monkeypatch.setattr("spice.agent.coding._compose.CLEANUP_TIMEOUT_SECONDS", 0.01)
    hanging, fine = CleanupRecorder(hang=True), CleanupRecorder()
    assert False is await settle([hanging, fine])
    assert (1, 0, 1) == (hanging.calls, hanging.finished, fine.finished)


async def test_settle_finishes_its_work_before_a_cancellation_propagates() -> None:
    """Cancelling the caller mid-cleanup waits for the cleanup, then re-raises."""
    gate = asyncio.Event()
    done: list[str] = []

    async def slow_cleanup() -> None:
        await gate.wait()
        done.append("cleaned")

    task = asyncio.create_task(settle([slow_cleanup]))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ["cleaned"] == done


async def test_settle_holds_back_repeated_cancellations_and_re_raises_the_first() -> None:
    """Cancelled three times mid-cleanup: the cleanup ends, the first cancellation surfaces."""
    gate = asyncio.Event()

    async def slow_cleanup() -> None:
        await gate.wait()

    task = asyncio.create_task(settle([slow_cleanup]))
    await asyncio.sleep(0)
    for message in ("first", "second", "third"):
        task.cancel(message)
        await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError) as caught:
        await task
    assert ("first",) == caught.value.args


async def test_settle_with_nothing_to_do_completes() -> None:
    """No cleanups is trivially complete."""
    assert True is await settle([])


def test_build_bean_rejects_an_unknown_bean_name(tmp_path: Path) -> None:
    """A record naming a bean this application does not know is refused."""
    fake = FakeRecord()
    platform_args = (Config(tmp_path), PosixResolver(), PosixLauncher())
    with pytest.raises(ValueError, match="does not know"):
        build_bean(AutoBean("grep", fake.read), _Platform(*platform_args))


def test_build_bean_rejects_a_factory_that_returns_no_tool(tmp_path: Path) -> None:
    """A factory answering something that is not a Tool is refused."""
    platform = _Platform(Config(tmp_path), PosixResolver(), PosixLauncher())
    with pytest.raises(TypeError):
        build_bean(AutoBean("read", lambda config: object()), platform)
    with pytest.raises(TypeError):
        build_bean(AutoBean("read", lambda config: (EchoTool("read"), 1)), platform)
    with pytest.raises(ValueError, match="differs"):
        build_bean(AutoBean("read", lambda config: EchoTool("other")), platform)


async def test_compose_rejects_a_non_config(tmp_path: Path) -> None:
    """Compose takes a Config, not a path."""
    with pytest.raises(TypeError):
        async with compose(str(tmp_path)):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_compose_rejects_a_non_tool(tmp_path: Path) -> None:
    """An application tool must implement the Tool protocol."""
    with pytest.raises(TypeError):
        async with compose(Config(tmp_path), tools=[object()]):  # type: ignore[list-item]
            pass  # pragma: no cover


async def test_compose_yields_a_dispatcher(tmp_path: Path) -> None:
    """What the block gets is the one Dispatcher."""
    async with compose(Config(tmp_path), defaults=FakeRecord().record()) as dispatcher:
        assert isinstance(dispatcher, Dispatcher)


def _imported_modules(module: str) -> set[str]:
    """The package modules ``module`` imports (``from .x import`` or ``from ..x import``,
    named from the application's top), type-checking ones too."""
    import ast  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec(f"spice.agent.coding.{module}")
    assert spec is not None
    assert spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    depth = module.count(".") + 1
    return {
        node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == depth
    }


def test_the_composition_root_knows_nothing_of_settings_or_the_sandbox_modes() -> None:
    """``_compose`` imports neither ``_settings`` nor ``_containment`` (one way only)."""
    assert set() == _imported_modules("_compose") & {"_settings", "_containment", "_cli"}
    assert "_compose" in _imported_modules("_settings._resolve")
    import spice.agent.coding._compose as composition  # noqa: PLC0415

    assert not hasattr(composition, "launcher_for")
