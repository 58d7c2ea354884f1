"""The Spice Agent tool contract: what a tool is, what a call and its answer are.

Values are immutable and validated at construction (``ValueError`` with a bounded
message). See ``docs/architecture.md`` for the rules every tool keeps.
"""

from __future__ import annotations

from ._bounds import (
    MAXIMUM_IDENTITY_BYTES as MAXIMUM_IDENTITY_BYTES,
)
from ._bounds import (
    MAXIMUM_MESSAGE_BYTES as MAXIMUM_MESSAGE_BYTES,
)
from ._bounds import (
    MAXIMUM_PAYLOAD_BYTES as MAXIMUM_PAYLOAD_BYTES,
)
from ._enums import Capability as Capability
from ._enums import Effect as Effect
from ._enums import ExecutionState as ExecutionState
from ._enums import ReplaySafety as ReplaySafety
from ._enums import RetryDisposition as RetryDisposition
from ._errors import ExecutionError as ExecutionError
from ._errors import Interruption as Interruption
from ._errors import interruption_of as interruption_of
from ._protocols import Reporter as Reporter
from ._protocols import Tool as Tool
from ._values import Call as Call
from ._values import Definition as Definition
from ._values import Progress as Progress
from ._values import Result as Result

__all__ = [
    "MAXIMUM_IDENTITY_BYTES",
    "MAXIMUM_MESSAGE_BYTES",
    "MAXIMUM_PAYLOAD_BYTES",
    "Call",
    "Capability",
    "Definition",
    "Effect",
    "ExecutionError",
    "ExecutionState",
    "Interruption",
    "Progress",
    "ReplaySafety",
    "Reporter",
    "Result",
    "RetryDisposition",
    "Tool",
    "interruption_of",
]
