"""The contract's immutable value types: definitions, calls, results, progress."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar, final

from ._bounds import (
    MAXIMUM_MESSAGE_BYTES,
    MAXIMUM_PAYLOAD_BYTES,
    canonical_json,
    compact_json,
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


class _Decoded:
    """Holds a ``Result``'s decoded content beside its fields (not a field itself).

    A copy or an unpickled result has only the fields; it decodes its text on first use.
    """

    __slots__ = ("_decoded",)
    _decoded: dict[str, object]


@final
@dataclass(frozen=True, slots=True, init=False)
class Result(_Decoded):
    """A tool's answer: JSON object content; ``problem`` set means a model-visible failure.

    ``Result(call_id, content, problem)`` validates content that comes from elsewhere:
    JSON text is parsed (and kept exactly as given), a mapping is stored as canonical
    JSON. ``Result.from_content`` is the path for content a tool builds itself: encoded
    once, compact, in the mapping's own key order, and never parsed again. Either way
    ``content_object`` is the decoded object, so no caller needs to parse ``content``.

    >>> r = Result.from_content("1", {"ok": True, "path": "a.txt"})
    >>> r.content
    '{"ok":true,"path":"a.txt"}'
    >>> r.content_object["path"]
    'a.txt'
    """

    call_id: str
    content: str
    problem: str | None

    def __init__(
        self, call_id: str, content: str | Mapping[str, object], problem: str | None = None
    ) -> None:
        require_identity(call_id, "result call id")
        text, parsed = json_object_text(content, "result content")
        self._assign(call_id, text, parsed, problem)

    @classmethod
    def from_content(
        cls, call_id: str, content: Mapping[str, object], problem: str | None = None
    ) -> Result:
        """A result of content the tool built itself: one encoding, no parse.

        ``content`` (a mapping with string keys at every level, of JSON values) is
        encoded once as compact JSON in its own key order (``ensure_ascii=False``, no
        NaN or infinity) and checked against ``MAXIMUM_PAYLOAD_BYTES``; the result keeps
        a snapshot of its top level as ``content_object``. What ``content`` holds must
        not change afterwards. Invalid content raises ``ValueError`` as the constructor
        does.
        """
        require_identity(call_id, "result call id")
        if not isinstance(content, Mapping):
            raise ValueError("result content must be a JSON object or its text")
        text, snapshot = compact_json(content, "result content")
        require_text(text, "result content", maximum=MAXIMUM_PAYLOAD_BYTES)
        result = object.__new__(cls)
        result._assign(call_id, text, snapshot, problem)
        return result

    def _assign(
        self, call_id: str, text: str, parsed: dict[str, object], problem: str | None
    ) -> None:
        if problem is not None:
            require_text(problem, "problem", maximum=MAXIMUM_MESSAGE_BYTES)
        object.__setattr__(self, "call_id", call_id)
        object.__setattr__(self, "content", text)
        object.__setattr__(self, "problem", problem)
        object.__setattr__(self, "_decoded", parsed)

    @property
    def content_object(self) -> Mapping[str, object]:
        """The content as a read-only mapping: what ``json.loads(content)`` would give."""
        try:
            decoded: dict[str, object] = self._decoded
        except AttributeError:
            _, decoded = json_object_text(self.content, "result content")
            object.__setattr__(self, "_decoded", decoded)
        return MappingProxyType(decoded)

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
