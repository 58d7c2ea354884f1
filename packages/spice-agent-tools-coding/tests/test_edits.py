"""The pure edit rule of replace: against a plain-Python model, and its diff."""

from __future__ import annotations

import re
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.tools.coding import _edits as edits_module
from spice.agent.tools.coding._edits import (
    MAXIMUM_DIFF_BYTES,
    NO_NEWLINE,
    Edit,
    Edited,
    EditFailure,
    apply_edits,
    count_positions,
    unified_diff,
)

LIMIT: Final = 1 << 20
_HUNK: Final = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n$")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _apply(text: str, edits: list[Edit], limit: int = LIMIT) -> Edited | EditFailure:
    return apply_edits(text, _size(text), edits, limit)


# -- the model ------------------------------------------------------------------------


def _positions(text: str, old: str) -> list[int]:
    """Every start of ``old`` in ``text``, by brute force."""
    return [p for p in range(len(text) - len(old) + 1) if text[p : p + len(old)] == old]


def _bare_lf_at(text: str, index: int) -> bool:
    return text[index] == "\n" and (index == 0 or text[index - 1] != "\r")


def _crlf_file(text: str) -> bool:
    """Plainly: some line ending, and none of them a bare LF."""
    return "\n" in text and not any(_bare_lf_at(text, i) for i in range(len(text)))


def _as_crlf(text: str) -> str:
    """Plainly: each bare LF written as CRLF, character by character."""
    return "".join("\r\n" if _bare_lf_at(text, i) else c for i, c in enumerate(text))


def _model(text: str, edits: list[Edit], limit: int) -> tuple[object, ...]:
    """The rule written plainly: ('ok', text, replacements) or (code, index, count)."""
    total = 0
    crlf_file = _crlf_file(text)
    for index, asked in enumerate(edits):
        edit = asked
        positions = _positions(text, edit.old_text)
        bare = any(_bare_lf_at(edit.old_text, i) for i in range(len(edit.old_text)))
        if not positions and crlf_file and bare:
            edit = Edit(_as_crlf(edit.old_text), _as_crlf(edit.new_text), edit.replace_all)
            positions = _positions(text, edit.old_text)
        if not positions:
            return ("edit_not_found", index, 0)
        if not edit.replace_all and len(positions) > 1:
            return ("edit_ambiguous", index, len(positions))
        chosen: list[int] = []
        for position in positions:
            if not chosen or position >= chosen[-1] + len(edit.old_text):
                chosen.append(position)
        pieces: list[str] = []
        last = 0
        for position in chosen:
            pieces += [text[last:position], edit.new_text]
            last = position + len(edit.old_text)
        result = "".join([*pieces, text[last:]])
        if _size(result) > limit:
            return ("file_too_large", index, 0)
        text = result
        total += len(chosen)
    return ("ok", text, total)


def _observed(outcome: Edited | EditFailure) -> tuple[object, ...]:
    if isinstance(outcome, EditFailure):
        return (outcome.code, outcome.index, outcome.occurrences)
    return ("ok", outcome.text, outcome.replacements)


_alphabet = st.sampled_from(["a", "b", "\n", "\r\n", "\u00e9", "\U0001d11e", " "])
_texts = st.lists(_alphabet, max_size=40).map("".join)
_olds = st.lists(_alphabet, min_size=1, max_size=4).map("".join)
_edits = st.lists(
    st.builds(Edit, _olds, _texts.map(lambda t: t[:6]), st.booleans()), min_size=1, max_size=5
)


@settings(max_examples=400, deadline=None)
@given(text=_texts, edits=_edits, limit=st.integers(0, 80))
def test_the_rule_agrees_with_a_plain_model(text: str, edits: list[Edit], limit: int) -> None:
    """Random texts and edit lists: the same text, count or failure as the brute-force model."""
    assert _model(text, edits, limit) == _observed(_apply(text, edits, limit))


@settings(max_examples=200, deadline=None)
@given(text=_texts, edits=_edits)
def test_a_successful_result_reports_its_utf8_size(text: str, edits: list[Edit]) -> None:
    """The size carried along equals the UTF-8 size of the final text."""
    outcome = _apply(text, edits)
    if isinstance(outcome, Edited):
        assert _size(outcome.text) == outcome.size


# -- examples -------------------------------------------------------------------------


def test_edits_apply_in_order_each_to_the_previous_result() -> None:
    """The second edit sees what the first one wrote."""
    outcome = _apply("alpha\n", [Edit("alpha", "beta"), Edit("beta", "gamma")])
    assert Edited("gamma\n", 6, 2) == outcome


def test_crlf_is_matched_exactly_and_kept() -> None:
    """A CRLF file is matched byte for byte when old_text has CRLF itself."""
    text = "one\r\ntwo\r\n"
    assert Edited("one\r\n2\r\n", 8, 1) == _apply(text, [Edit("two\r\n", "2\r\n")])


def test_a_lf_edit_of_a_crlf_file_matches_and_writes_crlf() -> None:
    """Contract 10.2: LF in old_text reads as CRLF in an all-CRLF file; new_text gets CRLF."""
    text = "head\r\none\r\ntwo\r\ntail\r\n"
    outcome = _apply(text, [Edit("one\ntwo\n", "1\n2\n3\n")])
    assert Edited("head\r\n1\r\n2\r\n3\r\ntail\r\n", 21, 1) == outcome


def test_a_lf_edit_of_a_mixed_file_is_not_translated() -> None:
    """Negative: a file with one bare LF is not all CRLF, so LF stays LF (not found)."""
    text = "one\r\ntwo\nthree\r\n"
    assert ("edit_not_found", 0, 0) == _observed(_apply(text, [Edit("one\ntwo", "x")]))


def test_a_translated_edit_keeps_the_uniqueness_rule() -> None:
    """Two CRLF places match the translated text: ambiguous, or both with replace_all."""
    text = "a\r\nb\r\na\r\nb\r\n"
    assert ("edit_ambiguous", 0, 2) == _observed(_apply(text, [Edit("a\nb", "c\nd")]))
    every = _apply(text, [Edit("a\nb", "c\nd", replace_all=True)])
    assert Edited("c\r\nd\r\nc\r\nd\r\n", 12, 2) == every


def test_an_edit_found_as_written_is_never_translated() -> None:
    """Boundary: an LF old_text with no line ending to cross matches as written, new_text too."""
    assert Edited("x\ny\r\n", 5, 1) == _apply("a\r\n", [Edit("a", "x\ny")])


_eol_texts = st.lists(
    st.sampled_from(["a", "b", " ", "\r\n", "\r\n", "\n", "\r", "\u00e9"]), max_size=30
).map("".join)
_eol_edits = st.lists(
    st.builds(
        Edit,
        st.lists(st.sampled_from(["a", "b", "\n", "\r\n", " "]), min_size=1, max_size=5).map(
            "".join
        ),
        st.lists(st.sampled_from(["x", "\n", "\r\n", "\r"]), max_size=4).map("".join),
        st.booleans(),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=500, deadline=None)
@given(text=_eol_texts, edits=_eol_edits, crlf=st.booleans())
def test_line_ending_mixes_agree_with_the_plain_model(
    text: str, edits: list[Edit], crlf: bool
) -> None:
    """Random texts with LF, CRLF and lone CR mixes (half of them made all CRLF first)."""
    if crlf:
        text = _as_crlf(text)
    assert _model(text, edits, LIMIT) == _observed(_apply(text, edits))


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["a", "b", "ab", "", " "]), min_size=2, max_size=12),
    data=st.data(),
)
def test_a_lf_edit_of_a_crlf_file_leaves_every_line_crlf(
    lines: list[str], data: st.DataObject
) -> None:
    """An LF edit spanning lines of an all-CRLF file leaves no bare LF; other lines stay."""
    lines = [f"<{number}>{line}" for number, line in enumerate(lines)]  # each line unique
    text = "".join(line + "\r\n" for line in lines)
    start = data.draw(st.integers(0, len(lines) - 2))
    end = data.draw(st.integers(start + 1, len(lines) - 1))
    old = "\n".join(lines[start : end + 1])
    new = data.draw(st.lists(st.sampled_from(["x", "\n", "y"]), max_size=5).map("".join))
    outcome = _apply(text, [Edit(old, new, replace_all=True)])
    assert isinstance(outcome, Edited)
    assert _crlf_file(outcome.text + "\r\n")
    assert outcome.text.startswith("".join(line + "\r\n" for line in lines[:start]))
    assert outcome.text.endswith("".join(line + "\r\n" for line in lines[end + 1 :]))


def test_non_ascii_text_is_matched_and_sized_in_bytes() -> None:
    """Characters of 2 and 4 bytes are matched and counted in UTF-8 bytes."""
    outcome = _apply("caf\u00e9 \U0001d11e\n", [Edit("\u00e9", "e\u0301")])
    assert Edited("cafe\u0301 \U0001d11e\n", 12, 1) == outcome


def test_a_new_text_that_contains_the_old_text_is_applied_once() -> None:
    """Replacing x by xx never loops: once, or once per original occurrence."""
    assert Edited("xx-y", 4, 1) == _apply("x-y", [Edit("x", "xx")])
    assert Edited("xx-xx", 5, 2) == _apply("x-x", [Edit("x", "xx", replace_all=True)])


def test_overlapping_occurrences_are_ambiguous_and_replace_all_takes_them_left_to_right() -> None:
    """ "aa" starts twice in "aaa": ambiguous; replace_all replaces the first pair only."""
    ambiguous = _apply("aaa", [Edit("aa", "X")])
    assert ("edit_ambiguous", 0, 2) == _observed(ambiguous)
    assert Edited("Xa", 2, 1) == _apply("aaa", [Edit("aa", "X", replace_all=True)])
    assert Edited("XX", 2, 2) == _apply("aaaa", [Edit("aa", "X", replace_all=True)])


def test_failures_name_the_edit_index_and_the_count() -> None:
    """The message says which edit (0-based) failed and how often its text occurs."""
    missing = _apply("a b", [Edit("a", "c"), Edit("zzz", "y")])
    ambiguous = _apply("a b b b", [Edit("a", "c"), Edit("b", "y")])
    assert isinstance(missing, EditFailure)
    assert isinstance(ambiguous, EditFailure)
    assert ("edit_not_found", 1) == (missing.code, missing.index)
    assert missing.message.startswith("edit 1: old_text occurs 0 times")
    assert ("edit_ambiguous", 1, 3) == (ambiguous.code, ambiguous.index, ambiguous.occurrences)
    assert ambiguous.message.startswith("edit 1: old_text occurs 3 times")


def test_a_replace_all_that_matches_nothing_is_not_found() -> None:
    """replace_all needs at least one occurrence too."""
    assert ("edit_not_found", 0, 0) == _observed(_apply("abc", [Edit("z", "", replace_all=True)]))


def test_the_result_may_reach_the_limit_but_not_pass_it() -> None:
    """A result of exactly limit bytes is fine; one byte more is file_too_large."""
    assert Edited("\u00e9\u00e9", 4, 1) == _apply("\u00e9x", [Edit("x", "\u00e9")], limit=4)
    over = _apply("\u00e9x", [Edit("x", "\u00e9a")], limit=4)
    assert ("file_too_large", 0, 0) == _observed(over)


def test_an_intermediate_result_past_the_limit_fails_even_if_a_later_edit_shrinks_it() -> None:
    """Each step is bounded, so a replace_all cannot blow memory up before a later edit."""
    edits = [Edit("a", "a" * 100, replace_all=True), Edit("a" * 400, "")]
    assert ("file_too_large", 0, 0) == _observed(_apply("aaaa", edits, limit=100))


def test_count_positions_counts_overlapping_starts() -> None:
    """The ambiguity count includes overlapping matches."""
    assert (3, 1, 0) == (
        count_positions("aaaa", "aa"),
        count_positions("abab", "aba"),
        count_positions("ab", "c"),
    )


def test_the_repr_shows_no_text() -> None:
    """Edits and results never show file content or argument text in a repr."""
    assert "secret" not in repr(Edit("secret", "secret")) + repr(Edited("secret", 6, 1))


# -- the diff -------------------------------------------------------------------------


def _patch(before: str, diff: str) -> str:
    """Apply a unified diff to ``before`` (a small reader of our own output)."""
    lines = before.split("\n")
    source = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    rows = diff.split("\n")[:-1]
    assert rows[0].startswith("--- a/")
    assert rows[1].startswith("+++ b/")
    out: list[str] = []
    cursor = 0
    index = 2
    while index < len(rows):
        match = _HUNK.match(rows[index] + "\n")
        assert match is not None, rows[index]
        start = int(match.group(1)) - (0 if match.group(2) == "0" else 1)
        out += source[cursor:start]
        cursor = start
        index += 1
        body = [row for row in rows[index:] if not row.startswith("\\")]
        body = body[: next((k for k, row in enumerate(body) if row.startswith("@@ ")), len(body))]
        old_count = int(match.group(2) or 1)
        new_count = int(match.group(4) or 1)
        assert old_count == sum(1 for row in body if row[0] != "+")
        assert new_count == sum(1 for row in body if row[0] != "-")
        while index < len(rows) and not rows[index].startswith("@@ "):
            row = rows[index]
            if row + "\n" == NO_NEWLINE:
                if rows[index - 1][0] != "-":  # the marker belongs to the row before
                    out[-1] = out[-1].removesuffix("\n")
            elif row[0] == " ":
                assert source[cursor].removesuffix("\n") == row[1:]
                out.append(row[1:] + "\n")
                cursor += 1
            elif row[0] == "-":
                assert source[cursor].removesuffix("\n") == row[1:]
                cursor += 1
            else:
                assert "+" == row[0]
                out.append(row[1:] + "\n")
            index += 1
    out += source[cursor:]
    return "".join(out)


_lines_text = st.lists(
    st.sampled_from(["x\n", "y\n", "z\r\n", "\n", "\u00e9\n", "x", "w\n"]), max_size=30
).map("".join)


@settings(max_examples=400, deadline=None)
@given(before=_lines_text, after=_lines_text)
def test_the_diff_turns_before_into_after(before: str, after: str) -> None:
    """Applying the whole (untruncated) diff to the old text gives the new text."""
    diff, truncated = unified_diff("p.txt", before, after)
    assert truncated is False
    assert ("" == diff) == (before == after)
    if diff:
        assert after == _patch(before, diff)


@settings(max_examples=300, deadline=None)
@given(before=_lines_text, after=_lines_text, limit=st.integers(1, 200))
def test_a_cut_diff_stays_within_the_bound_and_its_hunks_still_apply(
    before: str, after: str, limit: int
) -> None:
    """A diff over the bound keeps whole rows, says so, and every hunk shown is consistent."""
    full, _ = unified_diff("p.txt", before, after)
    cut, truncated = unified_diff("p.txt", before, after, limit)
    assert _size(cut) <= limit
    assert truncated == (cut != full)
    if cut:
        _patch(before, cut)  # asserts each header's counts and each row against the source
        assert cut.endswith("\n")


def _diff_work(lines: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Line comparisons and hashes of a whole (uncut) diff with every other line changed."""
    work = [0]

    class Counted(str):
        __slots__ = ()

        def __eq__(self, other: object) -> bool:
            work[0] += 1
            return str.__eq__(self, other)

        def __hash__(self) -> int:
            work[0] += 1
            return str.__hash__(self)

    real = edits_module._lines
    monkeypatch.setattr(edits_module, "_lines", lambda text: [Counted(line) for line in real(text)])
    before = "".join(f"l{n}\n" for n in range(lines))
    after = "".join(f"l{n}\n" if n % 2 else "x\n" for n in range(lines))
    _diff, truncated = unified_diff("f", before, after, limit=10**9)
    assert truncated is False
    return work[0]


def test_a_pathological_change_is_diffed_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other line of a large file changed: bounded output, and work that doubles
    (not quadruples) when the file doubles. A quadratic diff fails the ratio."""
    before = "".join(f"l{n}\n" for n in range(50_000))
    after = "".join(f"l{n}\n" if n % 2 else "x\n" for n in range(50_000))
    diff, truncated = unified_diff("f", before, after)
    assert truncated is True
    assert MAXIMUM_DIFF_BYTES >= _size(diff) > MAXIMUM_DIFF_BYTES - 16
    assert diff.startswith("--- a/f\n+++ b/f\n@@ -1,")
    small, large = _diff_work(2_000, monkeypatch), _diff_work(4_000, monkeypatch)
    assert large <= 2.2 * small


def test_the_work_count_tells_a_quadratic_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measure itself can fail: an unbounded look-ahead window makes the same diff
    quadratic, and the ratio shows it."""
    monkeypatch.setattr(edits_module, "DIFF_WINDOW_LINES", 10**9)
    small, large = _diff_work(2_000, monkeypatch), _diff_work(4_000, monkeypatch)
    assert large > 3 * small


def test_a_long_replaced_block_finds_the_common_lines_after_it() -> None:
    """A block longer than the look-ahead window is still a correct diff."""
    before = "".join(f"old {n}\n" for n in range(300)) + "tail\n"
    after = "".join(f"new {n}\n" for n in range(200)) + "tail\n"
    diff, truncated = unified_diff("f", before, after, limit=1 << 20)
    assert truncated is False
    assert after == _patch(before, diff)


def test_the_diff_has_three_lines_of_context_and_real_line_numbers() -> None:
    """A change in line 50 of 100 shows lines 47..53 and the header says so."""
    before = "".join(f"line {n}\n" for n in range(1, 101))
    after = before.replace("line 50\n", "LINE 50\n")
    diff, truncated = unified_diff("src/m.py", before, after)
    expected = (
        "--- a/src/m.py\n+++ b/src/m.py\n@@ -47,7 +47,7 @@\n"
        " line 47\n line 48\n line 49\n-line 50\n+LINE 50\n line 51\n line 52\n line 53\n"
    )
    assert (expected, False) == (diff, truncated)


def test_a_missing_final_newline_is_marked() -> None:
    """Adding a final newline shows the old last line with the no-newline marker."""
    diff, _ = unified_diff("f", "a\nb", "a\nb\n")
    assert "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n" + NO_NEWLINE + "+b\n" == diff


def test_crlf_lines_keep_their_carriage_return_in_the_diff() -> None:
    """A CRLF file's lines end in \\r in the diff (lines split at \\n only)."""
    diff, _ = unified_diff("f", "a\r\nb\r\n", "a\r\nc\r\n")
    assert diff.endswith("-b\r\n+c\r\n")


def _diff_of_size(size: int) -> tuple[str, str]:
    """Texts whose diff is exactly ``size`` bytes: one line replaced by a long one."""
    header = len("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x\n+\n")
    return "x\n", "y" * (size - header) + "\n"


@pytest.mark.parametrize(
    ("size", "truncated"),
    [(MAXIMUM_DIFF_BYTES, False), (MAXIMUM_DIFF_BYTES + 1, True)],
    ids=["at", "over"],
)
def test_the_diff_bound_is_exactly_16_kib(size: int, truncated: bool) -> None:
    """A diff of exactly MAXIMUM_DIFF_BYTES is whole; one byte more is cut."""
    before, after = _diff_of_size(size)
    diff, cut = unified_diff("f", before, after)
    assert truncated == cut
    if truncated:  # the one change does not fit: only the file headers (review B5)
        assert "--- a/f\n+++ b/f\n" == diff
    else:
        assert size == _size(diff)
        assert after == _patch(before, diff)


def test_a_bound_below_the_file_headers_gives_an_empty_cut_diff() -> None:
    """Nothing fits: the diff is empty and says it was cut."""
    assert ("", True) == unified_diff("\u00e9\u00e9\u00e9", "a\n", "b\n", limit=8)


def test_a_line_longer_than_the_bound_leaves_only_the_file_headers() -> None:
    """Rows are never cut inside: a change on one huge line shows the headers, cut."""
    assert ("--- a/f\n+++ b/f\n", True) == unified_diff("f", "a" * 100, "b" * 100, limit=60)
