"""The ``shell`` tool: one program, discrete argv, a checked workdir, bounded output.

A call goes through four rooms, each once, and the answer is built in one place::

    progress (``_progress``) ─► arguments (``_shell_arguments``)
      ─► the command's life (``_shell_run``: admission, workdir, resolve, start, wait,
         stop, join) ─► the answer (``_shell_answer``)

Every step ends in an ``Ended``; every answer, success or failure, carries the same shell
fields, among them ``contained``: the launcher's optional attribute, read once per call.
"""

from __future__ import annotations

import os
from typing import Final, final

from spice.agent.lifecycle import Cleanup
from spice.agent.process import ExecutableResolver, Launcher
from spice.agent.tool import (
    Call,
    Capability,
    Definition,
    Effect,
    ReplaySafety,
    Reporter,
    Result,
    RetryDisposition,
    Tool,
)

from ._arguments import ArgumentError
from ._config import Config
from ._ownership import Owner, Timing
from ._progress import report_progress
from ._shell_answer import Ended, answer
from ._shell_arguments import parse, schema
from ._shell_description import shell_description
from ._shell_launcher import launcher_contained, launcher_containment, launcher_dry_runs
from ._shell_problems import PROBLEMS as _PROBLEMS
from ._shell_run import CommandRunner

NAME: Final = "shell"
GRACE_SECONDS: Final = 2.0
"""How long a process has to exit after the stop request before it is force-killed."""

PROGRESS: Final = "starting a command"
_RETRY: Final = RetryDisposition.NEVER


def _capabilities() -> tuple[Capability, ...]:
    return tuple(Capability)


def _definition(config: Config, launcher: Launcher) -> Definition:
    """``shell``'s definition: its description states the bounds and the launcher's text."""
    return Definition(
        NAME,
        shell_description(
            config, launcher_containment(launcher), dry_run=launcher_dry_runs(launcher)
        ),
        schema(config),
        Effect.MUTATING,
        ReplaySafety.UNSAFE,
        _capabilities(),
    )


@final
class _Shell:
    """The ``shell`` tool of one ``new_shell`` call."""

    __slots__ = ("_config", "_definition", "_launcher", "_posix", "_runner")

    def __init__(
        self, config: Config, launcher: Launcher, runner: CommandRunner, *, posix: bool
    ) -> None:
        self._config = config
        self._launcher = launcher
        self._runner = runner
        self._posix = posix
        self._definition = _definition(config, launcher)

    @property
    def definition(self) -> Definition:
        """``shell``: mutating, unsafe, all seven capabilities."""
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Run one command; see the module docstring for the route."""
        await report_progress(call, reporter, PROGRESS, _RETRY)
        # Read once per call, before anything can fail, so every answer carries it.
        contained = launcher_contained(self._launcher)
        if call.name != NAME:
            ended = Ended(None, ("invalid_arguments", _PROBLEMS["wrong_tool"]))
        elif not self._posix:
            ended = Ended(None, ("unsupported_platform", _PROBLEMS["unsupported_platform"]))
        else:
            try:
                arguments = parse(call.arguments, self._config)
            except ArgumentError as error:
                ended = Ended(None, ("invalid_arguments", str(error)))
            else:
                ended = await self._runner.run(call.id, arguments, contained=contained)
        return answer(call, ended, contained=contained)


def _posix_platform() -> bool:
    """Whether the shell runs here: POSIX, and Windows (with its own workdir check)."""
    return os.name in {"posix", "nt"}


def _require(value: object, protocol: type, method: str, role: str) -> None:
    """Refuse, at construction, a collaborator that cannot do its part (``TypeError``)."""
    if value is None:
        raise TypeError(f"new_shell needs a {role}; got None")
    if not isinstance(value, protocol) or not callable(getattr(value, method, None)):
        raise TypeError(f"the {role} must implement {protocol.__name__} (a {method} method)")


def build_shell(
    config: Config,
    resolver: ExecutableResolver,
    launcher: Launcher,
    *,
    timing: Timing | None = None,
    grace_seconds: float = GRACE_SECONDS,
    posix: bool | None = None,
) -> tuple[_Shell, Owner]:
    """``new_shell`` with its bounds exposed (tests shorten the grace period and backoff)."""
    _require(resolver, ExecutableResolver, "resolve", "resolver")
    _require(launcher, Launcher, "start", "launcher")
    owner = Owner(timing or Timing())
    runner = CommandRunner(
        config,
        resolver,
        launcher,
        owner,
        capabilities=_capabilities(),
        grace_seconds=grace_seconds,
    )
    shell = _Shell(config, launcher, runner, posix=_posix_platform() if posix is None else posix)
    return shell, owner


def new_shell(
    config: Config, resolver: ExecutableResolver, launcher: Launcher
) -> tuple[Tool, Cleanup]:
    """Build the ``shell`` tool and its ``Cleanup``; performs no process action.

    ``resolver`` and ``launcher`` are required: ``None``, or an object without a callable
    ``resolve`` / ``start``, is a ``TypeError`` here rather than a failure of every call.
    A launcher may have the optional read-only attribute ``contained: bool``; every shell
    result reports it (absent or not a ``bool`` counts as ``False``).

    >>> tool, cleanup = new_shell(Config("/work/tree"), resolver, launcher)  # doctest: +SKIP
    >>> result = await Dispatcher([tool]).dispatch(Call("1", "shell", '{"argv":["ls"]}'))
    """
    shell, owner = build_shell(config, resolver, launcher)
    return shell, owner.cleanup
