"""Process platform protocols: how a tool asks for a process without starting one itself."""

from __future__ import annotations

from ._platform import MAXIMUM_REFUSED_HOSTS as MAXIMUM_REFUSED_HOSTS
from ._platform import ExecutableNotFound as ExecutableNotFound
from ._platform import ExecutableResolver as ExecutableResolver
from ._platform import Launcher as Launcher
from ._platform import LaunchError as LaunchError
from ._platform import Operation as Operation
from ._platform import Process as Process
from ._platform import ProcessFailure as ProcessFailure
from ._values import Lookup as Lookup
from ._values import Outcome as Outcome
from ._values import OutcomeKind as OutcomeKind
from ._values import Sink as Sink
from ._values import Spec as Spec

__all__ = [
    "MAXIMUM_REFUSED_HOSTS",
    "ExecutableNotFound",
    "ExecutableResolver",
    "LaunchError",
    "Launcher",
    "Lookup",
    "Operation",
    "Outcome",
    "OutcomeKind",
    "Process",
    "ProcessFailure",
    "Sink",
    "Spec",
]
