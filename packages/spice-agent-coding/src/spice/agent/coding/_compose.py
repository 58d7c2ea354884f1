"""The composition root: one ``Config``, the platform, the tools, one ``Dispatcher``.

The three coding tools come from the declarative fallback record of
``spice.agent.tools.coding.autoconfigure``; a tool the application provides
under the same name wins, and the fallback fills only what is missing. The
shell's ``Cleanup`` runs on every exit path, shielded and bounded.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, final

from spice.agent.dispatch import Dispatcher, Interceptor
from spice.agent.lifecycle import Cleanup
from spice.agent.process import ExecutableResolver, Launcher
from spice.agent.starter import AutoBean, AutoConfiguration
from spice.agent.tool import Tool
from spice.agent.tools.coding import Config
from spice.agent.tools.coding.autoconfigure import spice_auto_configuration
from spice.agent.tools.coding.settling import outlast

from ._platform import default_launcher, default_resolver

CLEANUP_TIMEOUT_SECONDS: Final = 10.0
"""How long one ``Cleanup`` may take on the way out before it is abandoned."""

CLEANUP_INCOMPLETE: Final = "the tools' cleanup did not complete"
UNUSABLE_ROOT: Final = "the worktree root is not a usable path"

_logger = logging.getLogger("spice.agent.coding")


def resolve_config(
    root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Build the ``Config``: ``root`` if given, else ``SPICE_AGENT_WORKTREE``, else the cwd.

    The root is made absolute (relative to the current directory) and is not
    touched on disk; an empty ``SPICE_AGENT_WORKTREE`` counts as unset.
    Raises ``ValueError`` (fixed text) when no usable root results.
    """
    source = os.environ if environ is None else environ
    chosen: str | os.PathLike[str] | None = root
    if chosen is None or os.fspath(chosen) == "":
        chosen = Config.root_in(source)  # the product's rule: empty counts as unset
    try:
        return Config(os.path.abspath(os.curdir if chosen is None else chosen))
    except (OSError, ValueError, TypeError):
        raise ValueError(UNUSABLE_ROOT) from None


@final
@dataclass(frozen=True, slots=True)
class _Platform:
    """What a fallback factory may ask for, by parameter name."""

    config: Config
    resolver: ExecutableResolver
    launcher: Launcher


_BEAN_ARGUMENTS: Final[Mapping[str, tuple[str, ...]]] = {
    "read": ("config",),
    "replace": ("config",),
    "shell": ("config", "resolver", "launcher"),
}
"""The parameters each known fallback bean's factory takes, in order."""


def build_bean(bean: AutoBean, platform: _Platform) -> tuple[Tool, Cleanup | None]:
    """Call one fallback bean's factory; return its tool and the cleanup it hands back."""
    names = _BEAN_ARGUMENTS.get(bean.name)
    if names is None:
        raise ValueError("the fallback record names a bean this application does not know")
    built = bean.factory(*(getattr(platform, name) for name in names))
    cleanup: Cleanup | None = None
    if isinstance(built, tuple):
        if len(built) != 2 or not callable(built[1]):
            raise TypeError("a fallback factory returned an unexpected shape")
        built, cleanup = built[0], built[1]
    if not isinstance(built, Tool):
        raise TypeError("a fallback factory did not return a tool")
    if built.definition.name != bean.name:
        raise ValueError("a fallback tool's name differs from its bean's name")
    return built, cleanup


def _by_name(tools: Iterable[Tool]) -> dict[str, Tool]:
    provided: dict[str, Tool] = {}
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError("an application tool must implement the Tool protocol")
        name = tool.definition.name
        if name in provided:
            raise ValueError("two application tools share one name")
        provided[name] = tool
    return provided


async def _cleanup_all(cleanups: Sequence[Cleanup]) -> bool:
    """Run every cleanup, each bounded; one failing does not stop the others."""
    completed = True
    for cleanup in cleanups:
        try:
            async with asyncio.timeout(CLEANUP_TIMEOUT_SECONDS):
                await cleanup()
        except TimeoutError:
            completed = False
            _logger.warning("a cleanup did not finish within its bound")
        except Exception:  # noqa: BLE001 - recorded; the next cleanup still runs
            completed = False
            _logger.warning("a cleanup failed")
    return completed


async def settle(cleanups: Sequence[Cleanup]) -> bool:
    """Run ``cleanups`` to the end even if the caller is cancelled meanwhile.

    The work runs in its own task (each cleanup bounded by
    ``CLEANUP_TIMEOUT_SECONDS``, so the wait is bounded too); cancellations of the
    caller are held back until the work is done, then the first is re-raised: the
    product's one rule, ``settling.outlast``.
    """
    if not cleanups:
        return True
    work = asyncio.get_running_loop().create_task(_cleanup_all(tuple(cleanups)))
    await outlast(work)
    return work.result()


@asynccontextmanager
async def compose(
    config: Config,
    *,
    tools: Iterable[Tool] = (),
    resolver: ExecutableResolver | None = None,
    launcher: Launcher | None = None,
    interceptors: Iterable[Interceptor] = (),
    defaults: AutoConfiguration | None = None,
) -> AsyncIterator[Dispatcher]:
    """Compose the application and yield its one ``Dispatcher``.

    ``tools`` are the application's own; each of ``read``, ``replace`` and
    ``shell`` it does not provide is built from its autoconfigure fallback,
    with the platform's resolver and launcher (``PosixResolver``/``PosixLauncher``,
    or ``WindowsResolver``/``WindowsLauncher`` on Windows) unless others are given
    (``defaults`` replaces the record, e.g. for a reviewed subset). Every
    ``Cleanup`` a fallback handed back runs when the block exits, on every
    path (shielded, each bounded by ``CLEANUP_TIMEOUT_SECONDS``)::

        async with compose(resolve_config()) as dispatcher:
            result = await dispatcher.dispatch(Call("1", "read", '{"path": "README.md"}'))
    """
    if not isinstance(config, Config):
        raise TypeError("compose takes a Config")
    provided = _by_name(tools)
    cleanups: list[Cleanup] = []
    platform: _Platform | None = None
    try:
        composed = dict(provided)
        record = spice_auto_configuration() if defaults is None else defaults
        for bean in record.beans:
            if bean.name in provided:
                continue
            if platform is None:
                platform = _Platform(
                    config,
                    default_resolver() if resolver is None else resolver,
                    default_launcher() if launcher is None else launcher,
                )
            tool, cleanup = build_bean(bean, platform)
            if cleanup is not None:
                cleanups.append(cleanup)
            composed[bean.name] = tool
        dispatcher = Dispatcher(composed.values(), interceptors)
        yield dispatcher
    except BaseException:
        await settle(cleanups)
        raise
    if not await settle(cleanups):
        raise RuntimeError(CLEANUP_INCOMPLETE)
