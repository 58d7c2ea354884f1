"""Hypothesis strategies for the contract's values: identities, JSON, capabilities, definitions."""

from __future__ import annotations

import unicodedata

from hypothesis import strategies as st

from spice.agent.tool import (
    MAXIMUM_IDENTITY_BYTES,
    Capability,
    Definition,
    Effect,
    ReplaySafety,
)

MUTATION_CAPABLE = frozenset(
    {
        Capability.FILESYSTEM_WRITE,
        Capability.PROCESS_EXECUTE,
        Capability.NETWORK_ACCESS,
        Capability.ENVIRONMENT_WRITE,
    }
)
"""Written out here on purpose: the tests restate the contract instead of importing it."""

SECRET_MARK = "\u2603"  # noqa: S105 - a marker, not a password
"""A character no fixed message of the contract contains; secrets in invalid input carry it."""

_PRINTABLE = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"))


def _is_identity(text: str) -> bool:
    return (
        bool(text)
        and text == text.strip()
        and len(text.encode("utf-8")) <= MAXIMUM_IDENTITY_BYTES
        and not any(unicodedata.category(c) in {"Cc", "Cs"} for c in text)
    )


def identities() -> st.SearchStrategy[str]:
    """Valid tool names and call ids: non-empty, bounded, no controls or surrounding space."""
    return st.text(_PRINTABLE, min_size=1, max_size=MAXIMUM_IDENTITY_BYTES).filter(_is_identity)


def secrets() -> st.SearchStrategy[str]:
    """Text that must never appear in a diagnostic: it always contains ``SECRET_MARK``."""
    return st.text(st.characters(codec="ascii", categories=("L", "N")), max_size=16).map(
        lambda tail: SECRET_MARK + tail
    )


def invalid_identities() -> st.SearchStrategy[str]:
    """Identities that break exactly one rule, each carrying a secret."""
    too_long = secrets().map(lambda s: s + "x" * (MAXIMUM_IDENTITY_BYTES + 1 - len(s.encode())))
    return st.one_of(
        too_long,
        secrets().map(lambda s: " " + s),
        secrets().map(lambda s: s + "\t"),
        st.tuples(secrets(), st.sampled_from(["\0", "\n", "\x1b", "\x7f"])).map("".join),
        secrets().map(lambda s: s + "\ud800"),
    )


def json_scalars() -> st.SearchStrategy[object]:
    """JSON scalars that survive a round trip: no NaN, no infinity, no lone surrogate."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec="utf-8"), max_size=20),
    )


def json_values() -> st.SearchStrategy[object]:
    """Any JSON value (small, nested)."""
    keys = st.text(st.characters(codec="utf-8"), max_size=8)
    return st.recursive(
        json_scalars(),
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=12,
    )


def json_objects() -> st.SearchStrategy[dict[str, object]]:
    """Any JSON object (small, nested)."""
    keys = st.text(st.characters(codec="utf-8"), max_size=8)
    return st.dictionaries(keys, json_values(), max_size=5)


def capabilities(effect: Effect | None = None) -> st.SearchStrategy[list[Capability]]:
    """Unique capabilities in any order; only honest ones for a read-only ``effect``."""
    pool = sorted(Capability)
    if effect is Effect.READ_ONLY:
        pool = [c for c in pool if c not in MUTATION_CAPABLE]
    return st.lists(st.sampled_from(pool), unique=True).flatmap(st.permutations)


def _replay_for(effect: Effect) -> st.SearchStrategy[ReplaySafety]:
    if effect is Effect.READ_ONLY:
        return st.just(ReplaySafety.SAFE)
    return st.sampled_from([ReplaySafety.IDEMPOTENT, ReplaySafety.UNSAFE])


@st.composite
def definitions(draw: st.DrawFn) -> Definition:
    """Any valid ``Definition``."""
    effect = draw(st.sampled_from(list(Effect)))
    return Definition(
        draw(identities()),
        draw(st.text(_PRINTABLE, min_size=1, max_size=40)),
        draw(json_objects()),
        effect,
        draw(_replay_for(effect)),
        draw(capabilities(effect)),
    )
