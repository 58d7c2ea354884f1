"""An edit that is not found says where the file holds a similar passage (contract 10.2)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.tools.coding._edits import (
    MAXIMUM_EDITS,
    SIMILAR_MINIMUM_CHARACTERS,
    SIMILAR_QUOTE_BYTES,
    SIMILAR_WORK_BOUND,
    Edit,
    EditFailure,
    apply_edits,
    similar_passage,
)

SOURCE = "".join(
    [
        "import os\n",
        "\n",
        "def first(x):\n",
        "    return x + 1\n",
        "\n",
        "def second(y):\n",
        "    total = y * 2\n",
        "    return total\n",
    ]
)


def _failure(text: str, old: str, index: int = 0) -> EditFailure:
    edits = [Edit("import os", "import os")] * index + [Edit(old, "new")]
    outcome = apply_edits(text, len(text.encode()), edits, 1 << 20)
    assert isinstance(outcome, EditFailure)
    return outcome


def test_a_whitespace_difference_names_the_line_and_quotes_the_file() -> None:
    """Two-space indentation where the file has four: line 6, whitespace, the file's text."""
    failure = _failure(SOURCE, "def second(y):\n  total = y * 2\n", index=2)
    assert failure.similar is not None
    assert (6, "whitespace") == (failure.similar.line, failure.similar.difference)
    assert "def second(y):\n    total = y * 2\n" == failure.similar.quote
    assert failure.message.startswith("edit 2: old_text occurs 0 times")
    assert "line 6" in failure.message
    assert "whitespace" in failure.message


def test_a_line_ending_difference_is_named_as_such() -> None:
    """CRLF in old_text where the file has LF: line endings differ."""
    failure = _failure(SOURCE, "def first(x):\r\n    return x + 1\r\n")
    assert failure.similar is not None
    assert (3, "line_endings") == (failure.similar.line, failure.similar.difference)


def test_a_text_difference_points_at_the_passage() -> None:
    """One word changed in a three-line passage: most lines agree, so the text differs there."""
    failure = _failure(SOURCE, "def second(y):\n    total = y * 3\n    return total\n")
    assert failure.similar is not None
    assert (6, "text") == (failure.similar.line, failure.similar.difference)
    assert "text differs" in failure.message


def test_a_shared_prefix_points_at_a_single_line() -> None:
    """A one-line old_text that shares its start with a line: that line, the text differs."""
    failure = _failure(SOURCE, "    total = y * 22 + other")
    assert failure.similar is not None
    assert (7, "text") == (failure.similar.line, failure.similar.difference)


def test_nothing_similar_gives_no_hint() -> None:
    """Negative: nothing alike (and a prefix below the minimum) gives the plain message."""
    short = "def " + "q" * SIMILAR_MINIMUM_CHARACTERS
    for old in ("completely unrelated words", short):
        failure = _failure(SOURCE, old)
        assert failure.similar is None
        assert "read the file again" in failure.message


def test_the_quote_is_at_most_one_kib_and_whole_characters() -> None:
    """Boundary: a long passage of 2-byte characters is cut to 1 KiB at a character."""
    text = "".join(f"\u00e9\u00e9 {n} " + "\u00e9" * 100 + "\n" for n in range(40))
    old = text[:3000].replace(" ", "  ")
    similar = similar_passage(text, old)
    assert similar is not None
    assert similar.difference == "whitespace"
    assert SIMILAR_QUOTE_BYTES - 1 <= len(similar.quote.encode("utf-8")) <= SIMILAR_QUOTE_BYTES
    assert text.startswith(similar.quote)


def test_the_work_bound_holds_on_both_sides() -> None:
    """The search that needs exactly ``bound`` units answers; one unit less, it gives up."""
    old = "def second(y):\n  total = y * 2\n"
    found = similar_passage(SOURCE, old)
    assert found is not None
    assert similar_passage(SOURCE, old, bound=found.work) == found
    assert similar_passage(SOURCE, old, bound=found.work - 1) is None


def test_a_prefix_search_is_bounded_too() -> None:
    """The prefix probes count against the bound as well."""
    found = similar_passage(SOURCE, "    total = y * 22 + other")
    assert found is not None
    assert similar_passage(SOURCE, "    total = y * 22 + other", bound=found.work - 1) is None


def test_a_four_mib_file_with_64_edits_stays_within_the_work_bound() -> None:
    """The worst the issue names: 4 MiB of repetitive lines, 64 edits, the last not found."""
    lines = [f"    value_{n % 512} = compute({n % 7})\n" for n in range(4 * 1024 * 1024 // 32)]
    text = "".join(lines)
    edits = [Edit(lines[n], lines[n]) for n in range(MAXIMUM_EDITS - 1)]
    edits = [
        Edit(e.old_text + lines[n + 1], e.new_text + lines[n + 1]) for n, e in enumerate(edits)
    ]
    missing = "".join(line.replace("    ", "  ") for line in lines[600:664])
    outcome = apply_edits(text, len(text), [*edits[:63], Edit(missing, "")], 1 << 24)
    assert isinstance(outcome, EditFailure)
    assert outcome.code in {"edit_not_found", "edit_ambiguous"}
    found = similar_passage(text, missing)
    assert found is None or found.work <= SIMILAR_WORK_BOUND


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["a b\n", "c\n", "  d e\n", "\r\n", "fgh ij\n"]), max_size=20
    ).map("".join),
    old=st.lists(
        st.sampled_from(["a", "b", " ", "\n", "d", "e", "\r\n", "x"]), min_size=1, max_size=12
    ).map("".join),
)
def test_a_hint_always_quotes_the_file_at_the_line_it_names(text: str, old: str) -> None:
    """Whatever the texts, a hint's quote is the file's own text from the line it names."""
    similar = similar_passage(text, old)
    if similar is None:
        return
    lines = text.split("\n")
    assert 1 <= similar.line <= len(lines)
    assert "\n".join(lines[similar.line - 1 :]).startswith(similar.quote)
    assert similar.difference in {"whitespace", "line_endings", "text"}
    assert similar.work <= SIMILAR_WORK_BOUND


def test_no_repr_or_message_shows_the_files_text() -> None:
    """The quote lives in its own field, out of every repr and of the message (the message
    is also the result's problem, which the CLI prints)."""
    text = "def secret_function(x):\n    return x\n"
    failure = _failure(text, "def secret_function(x):\n  return x\n")
    assert failure.similar is not None
    assert "secret_function" in failure.similar.quote
    for shown in (repr(failure), repr(failure.similar), failure.message):
        assert "secret_function" not in shown


def test_no_hint_is_looked_for_when_not_asked() -> None:
    """``hint=False``: the plain not-found answer, without any search."""
    outcome = apply_edits(
        SOURCE, len(SOURCE), [Edit("def second(y):\n  total", "x")], 1 << 20, hint=False
    )
    assert isinstance(outcome, EditFailure)
    assert outcome.similar is None
