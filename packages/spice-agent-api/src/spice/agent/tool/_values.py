"""The contract's immutable value types: definitions, calls, results, progress."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar, final

from ._bounds import (
    MAXIMUM_MESSAGE_BYTES,
    MAXIMUM_PAYLOAD_BYTES,
    canonical_json,
    json_object_text,
    parse_json,
    require_identity,
    require_text,
)
from ._enums import (
    MUTATION_CAPABLE,
    Capability,
    Effect,
    ReplaySafety,
)

_E = TypeVar("_E", Effect, ReplaySafety, Capability)


def _member(kind: type[_E], value: object, field_name: str) -> _E:
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    raise ValueError(f"{field_name} is not a known value")


def _length_prefixed(*parts: str) -> bytes:
    out = bytearray()
    for part in parts:
        encoded = part.encode("utf-8")
        out += len(encoded).to_bytes(8, "big")
        out += encoded
    return bytes(out)


@final
@dataclass(frozen=True, slots=True, init=False)
class Definition:
    """What a tool is, for a model and for policy.

    ``input_schema`` takes a mapping or the JSON text of an object and is kept as
    canonical JSON text. Capabilities are kept sorted; the combination of effect,
    replay safety and capabilities must be honest (see ``docs/architecture.md``).

    >>> d = Definition("echo", "Echo.", {"type": "object"}, "read_only", "safe", [])
    >>> d.input_schema
    '{"type":"object"}'
    """

    name: str
    description: str
    input_schema: str
    effect: Effect
    replay_safety: ReplaySafety
    capabilities: tuple[Capability, ...]

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: str | Mapping[str, object],
        effect: Effect | str,
        replay_safety: ReplaySafety | str,
        capabilities: Iterable[Capability | str] = (),
    ) -> None:
        require_identity(name, "definition name")
        require_text(description, "description", maximum=MAXIMUM_MESSAGE_BYTES)
        _, schema = json_object_text(input_schema, "input schema")
        canonical = canonical_json(schema, "input schema")
        require_text(canonical, "input schema", maximum=MAXIMUM_PAYLOAD_BYTES)
        checked_effect = _member(Effect, effect, "effect")
        replay = _member(ReplaySafety, replay_safety, "replay safety")
        if isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, Iterable):
            raise ValueError("capabilities must be a collection")
        listed = [_member(Capability, c, "capability") for c in capabilities]
        if len(set(listed)) != len(listed):
            raise ValueError("capabilities must not repeat")
        if checked_effect is Effect.READ_ONLY and replay is not ReplaySafety.SAFE:
            raise ValueError("a read-only tool must be replay-safe")
        if checked_effect is Effect.MUTATING and replay is ReplaySafety.SAFE:
            raise ValueError("a mutating tool cannot be replay-safe")
        if checked_effect is Effect.READ_ONLY and MUTATION_CAPABLE.intersection(listed):
            raise ValueError("a read-only tool cannot declare a mutation-capable capability")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "input_schema", canonical)
        object.__setattr__(self, "effect", checked_effect)
        object.__setattr__(self, "replay_safety", replay)
        object.__setattr__(self, "capabilities", tuple(sorted(listed)))

    @property
    def fingerprint(self) -> str:
        """Lowercase hex SHA-256 over the length-prefixed fields (see the contract §2)."""
        parts = (
            self.name,
            self.description,
            self.input_schema,
            self.effect.value,
            self.replay_safety.value,
            *(c.value for c in self.capabilities),
        )
        return hashlib.sha256(_length_prefixed(*parts)).hexdigest()


@final
@dataclass(frozen=True, slots=True)
class Call:
    """One request to one tool: a correlation id, the tool's name, JSON arguments."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        require_identity(self.id, "call id")
        require_identity(self.name, "tool name")
        parse_json(self.arguments, "arguments")

    def __repr__(self) -> str:
        return f"Call(id={self.id!r}, name={self.name!r}, arguments=<{len(self.arguments)} chars>)"


@final
@dataclass(frozen=True, slots=True, init=False)
class Result:
    """A tool's answer: JSON object content; ``problem`` set means a model-visible failure."""

    call_id: str
    content: str
    problem: str | None

    def __init__(
        self, call_id: str, content: str | Mapping[str, object], problem: str | None = None
    ) -> None:
        require_identity(call_id, "result call id")
        text, _ = json_object_text(content, "result content")
        if problem is not None:
            require_text(problem, "problem", maximum=MAXIMUM_MESSAGE_BYTES)
        object.__setattr__(self, "call_id", call_id)
        object.__setattr__(self, "content", text)
        object.__setattr__(self, "problem", problem)

    @property
    def is_error(self) -> bool:
        """True when the call failed in a way the model should see."""
        return self.problem is not None

    def __repr__(self) -> str:
        return (
            f"Result(call_id={self.call_id!r}, content=<{len(self.content)} chars>, "
            f"is_error={self.is_error})"
        )


@final
@dataclass(frozen=True, slots=True)
class Progress:
    """A short progress message about a running call."""

    call_id: str
    message: str

    def __post_init__(self) -> None:
        require_identity(self.call_id, "progress call id")
        require_text(self.message, "progress message", maximum=MAXIMUM_MESSAGE_BYTES)
