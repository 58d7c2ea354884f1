"""Optional ``dishka`` integration (install the ``spice-agent-coding[dishka]`` extra).

``coding_providers()`` turns the autoconfigure record into dishka providers.
Each fallback bean lives in the dishka component named after it (``"read"``,
``"replace"``, ``"shell"``) and provides ``Tool`` there; the default component
provides ``ExecutableResolver``/``Launcher`` (POSIX fallbacks), takes ``Config``
from the container's context, and provides the one ``Dispatcher``. An
application replaces a fallback with ``override=True`` in that component, which
dishka checks under ``STRICT_VALIDATION``::

    class MyRead(Provider):
        component = "read"
        scope = Scope.APP

        @provide(override=True)
        def read(self) -> Tool:
            return MyReadTool()

    container = make_async_container(
        *coding_providers(), MyRead(),
        context={Config: config}, validation_settings=STRICT_VALIDATION,
    )
    dispatcher = await container.get(Dispatcher)
    ...
    await container.close()  # runs the shell's Cleanup (shielded, bounded)

Only this module imports ``dishka``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Final

from dishka import FromComponent, Provider, Scope

from spice.agent.dispatch import Dispatcher
from spice.agent.process import ExecutableResolver, Launcher
from spice.agent.starter import AutoBean, AutoConfiguration
from spice.agent.tool import Tool
from spice.agent.tools.coding import Config
from spice.agent.tools.coding.autoconfigure import spice_auto_configuration

from ._compose import CLEANUP_INCOMPLETE, _Platform, build_bean, settle
from ._platform import default_launcher, default_resolver

BEAN_NAMES: Final = ("read", "replace", "shell")
"""The dishka components the fallback beans live in, one per bean name."""


def _read_like(bean: AutoBean) -> Callable[..., Tool]:
    def factory(
        config: Annotated[Config, FromComponent()],
        resolver: Annotated[ExecutableResolver, FromComponent()],
        launcher: Annotated[Launcher, FromComponent()],
    ) -> Tool:
        tool, cleanup = build_bean(bean, _Platform(config, resolver, launcher))
        if cleanup is not None:
            raise TypeError("a fallback without a cleanup handed one back")
        return tool

    return factory


def _shell_like(bean: AutoBean) -> Callable[..., AsyncIterator[Tool]]:
    async def factory(
        config: Annotated[Config, FromComponent()],
        resolver: Annotated[ExecutableResolver, FromComponent()],
        launcher: Annotated[Launcher, FromComponent()],
    ) -> AsyncIterator[Tool]:
        tool, cleanup = build_bean(bean, _Platform(config, resolver, launcher))
        try:
            yield tool
        finally:
            # The finalizer: runs when the container closes, shielded and bounded.
            if cleanup is not None and not await settle([cleanup]):
                raise RuntimeError(CLEANUP_INCOMPLETE)

    return factory


def _dispatcher(
    read: Annotated[Tool, FromComponent("read")],
    replace: Annotated[Tool, FromComponent("replace")],
    shell: Annotated[Tool, FromComponent("shell")],
) -> Dispatcher:
    return Dispatcher([read, replace, shell])


def _resolver() -> ExecutableResolver:
    return default_resolver()


def _launcher() -> Launcher:
    return default_launcher()


def coding_providers(defaults: AutoConfiguration | None = None) -> tuple[Provider, ...]:
    """The dishka providers for the record (``spice_auto_configuration()`` by default).

    One provider per bean, in the component named after it, plus one in the
    default component for the platform, ``Config`` (from context) and the
    ``Dispatcher``. All scopes are ``Scope.APP``.
    """
    record = spice_auto_configuration() if defaults is None else defaults
    if sorted(b.name for b in record.beans) != sorted(BEAN_NAMES):
        raise ValueError("the record must name exactly the read, replace and shell beans")
    providers: list[Provider] = []
    for bean in record.beans:
        provider = Provider(scope=Scope.APP, component=bean.name)
        factory: Callable[..., Any] = (
            _shell_like(bean) if bean.name == "shell" else _read_like(bean)
        )
        provider.provide(factory, provides=Tool)
        providers.append(provider)
    core = Provider(scope=Scope.APP)
    core.from_context(provides=Config)
    core.provide(_resolver, provides=ExecutableResolver)
    core.provide(_launcher, provides=Launcher)
    core.provide(_dispatcher, provides=Dispatcher)
    providers.append(core)
    return tuple(providers)


__all__ = ["BEAN_NAMES", "coding_providers"]
