"""Hypothesis strategies of the coding tools' tests: paths, JSON arguments, byte content.

(Named ``coding_strategies`` and not ``strategies``: every package's ``tests/`` is on
``sys.path`` and ``spice-agent-api`` already has a ``strategies`` module.)
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

SEGMENT_ALPHABET = st.sampled_from(
    ["a", "b", "Z", "0", "-", "_", ".", " ", "\\", "~", "é", "\u2603", "\t", "\n", "\0", "\x7f"]
)
"""Characters of path segments: ordinary, tricky (space, backslash, dot) and forbidden."""

segments = st.one_of(
    st.sampled_from(["", ".", "..", "...", "a", "sub", "file.txt", "link", "outside"]),
    st.text(SEGMENT_ALPHABET, min_size=1, max_size=8),
)
"""One component of a relative path, including ``.``/``..`` and empty ones."""

relative_paths = st.lists(segments, min_size=0, max_size=8).map("/".join)
"""Paths joined from segments: relative, absolute (a leading empty segment), empty, escaping."""

path_strings = st.one_of(
    relative_paths,
    st.text(max_size=64),
    relative_paths.map(lambda p: "/" + p),
    relative_paths.map(lambda p: " " + p),
    relative_paths.map(lambda p: "../" + p),
)
"""Every kind of path string a model might send."""

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=16),
)

json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value, nested a little."""


def argument_objects(*names: str) -> st.SearchStrategy[dict[str, object]]:
    """JSON objects mixing the tool's own property ``names`` (with any values) and others."""
    keys = st.one_of(st.sampled_from(names), st.text(max_size=8))
    return st.dictionaries(keys, json_values, max_size=5)


def read_argument_texts() -> st.SearchStrategy[str]:
    """JSON argument texts for ``read``: plausible objects, odd values, and non-objects."""
    plausible = st.fixed_dictionaries(
        {"path": path_strings},
        optional={
            "offset": st.one_of(st.integers(-3, 2**65), json_values),
            "limit": st.one_of(st.integers(-3, 2**20), json_values),
        },
    )
    objects = st.one_of(plausible, argument_objects("path", "offset", "limit"))
    texts = objects.map(json.dumps)
    return st.one_of(
        texts, json_values.map(json.dumps), texts.map(lambda t: t + " x"), st.just("{}")
    )


byte_content = st.one_of(
    st.binary(max_size=256),
    st.text(max_size=128).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\xef\xbb\xbfBOM\r\n", b"\xe2\x82", b"\xff\xfe", "é€𝄞".encode()]),
)
"""File contents: arbitrary bytes, UTF-8 text, BOM/CRLF, and cut or invalid sequences."""
