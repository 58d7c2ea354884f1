"""The edit rule of ``replace`` (contract 9.2): pure, text in, text or a typed failure out.

An edit names an ``old_text`` (non-empty) and its ``new_text``. Edits apply in order,
each to the result of the previous ones, matching exactly (no line-ending, whitespace or
Unicode normalisation). The text is valid UTF-8, so matching characters is matching
bytes: a UTF-8 sequence never starts inside another one.

How occurrences count (``docs/decisions.md``, "Edits"):

- *Ambiguity* counts every position where ``old_text`` starts, overlapping ones
  included: ``"aa"`` occurs twice in ``"aaa"``. An edit without ``replace_all`` must
  name exactly one place; two overlapping matches are two places.
- *replace_all* replaces the non-overlapping occurrences, left to right, as
  ``str.replace`` does (``"aa"`` -> ``"X"`` in ``"aaa"`` gives ``"Xa"``), and counts
  those replacements.
- ``edits_applied`` is the number of replacements made, over all edits.

Every intermediate result is bounded by ``limit`` bytes (the write bound): an edit that
would grow the text past it fails at once, so memory stays bounded whatever a
``replace_all`` multiplies.

The diff (:func:`unified_diff`) is a unified diff with ``DIFF_CONTEXT_LINES`` lines of
context, cut at a line boundary to at most ``MAXIMUM_DIFF_BYTES`` bytes. Lines end at
``\\n`` only, so a CRLF file shows its ``\\r`` as part of each line, as ``git diff`` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias, final

MAXIMUM_EDITS: Final = 64
"""Most edits one call may carry."""
MAXIMUM_DIFF_BYTES: Final = 16 * 1024
"""Most UTF-8 bytes of the diff a successful edit returns."""
DIFF_CONTEXT_LINES: Final = 3
"""Unchanged lines shown around each change."""
DIFF_WINDOW_LINES: Final = 128
"""How far ahead (in lines, on each side) a change looks for the next common line."""
NO_NEWLINE: Final = "\\ No newline at end of file\n"

NOT_FOUND: Final = "edit_not_found"
AMBIGUOUS: Final = "edit_ambiguous"
TOO_LARGE: Final = "file_too_large"


@final
@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``old_text`` (once, or everywhere with ``replace_all``) by ``new_text``."""

    old_text: str = field(repr=False)
    new_text: str = field(repr=False)
    replace_all: bool = False


@final
@dataclass(frozen=True, slots=True)
class Edited:
    """The text after every edit, and the number of replacements made."""

    text: str = field(repr=False)
    size: int
    """UTF-8 bytes of ``text``."""
    replacements: int


@final
@dataclass(frozen=True, slots=True)
class EditFailure:
    """Why edit ``index`` (0-based) could not apply; ``message`` is model-safe."""

    code: str
    message: str
    index: int
    occurrences: int


EditOutcome: TypeAlias = Edited | EditFailure


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def count_positions(text: str, old: str) -> int:
    """Every position where ``old`` starts in ``text``, overlapping ones included."""
    count = 0
    position = text.find(old)
    while position >= 0:
        count += 1
        position = text.find(old, position + 1)
    return count


def _not_found(index: int) -> EditFailure:
    return EditFailure(
        NOT_FOUND,
        f"edit {index}: old_text occurs 0 times (not found); read the file again and copy "
        "the text exactly, with its whitespace and line endings",
        index,
        0,
    )


def _ambiguous(index: int, occurrences: int) -> EditFailure:
    return EditFailure(
        AMBIGUOUS,
        f"edit {index}: old_text occurs {occurrences} times; include more surrounding "
        "text to name one place, or pass replace_all: true",
        index,
        occurrences,
    )


def _too_large(index: int, limit: int) -> EditFailure:
    return EditFailure(
        TOO_LARGE, f"edit {index}: the result would be larger than {limit} bytes", index, 0
    )


def apply_edits(text: str, size: int, edits: Sequence[Edit], limit: int) -> EditOutcome:
    """Apply ``edits`` in order to ``text`` (``size`` UTF-8 bytes); at most ``limit`` bytes."""
    replacements = 0
    for index, edit in enumerate(edits):
        old, new = edit.old_text, edit.new_text
        first = text.find(old)
        if first < 0:
            return _not_found(index)
        if edit.replace_all:
            count = text.count(old)
        elif text.find(old, first + 1) >= 0:
            return _ambiguous(index, count_positions(text, old))
        else:
            count = 1
        grown = size + count * (_utf8_size(new) - _utf8_size(old))
        if grown > limit:
            return _too_large(index, limit)
        if edit.replace_all:
            text = text.replace(old, new)
        else:
            text = text[:first] + new + text[first + len(old) :]
        size = grown
        replacements += count
    return Edited(text, size, replacements)


def _lines(text: str) -> list[str]:
    """Lines that end at ``\\n`` only (each keeps it; the last one may lack it)."""
    lines = text.split("\n")
    last = lines.pop()
    out = [line + "\n" for line in lines]
    if last:
        out.append(last)
    return out


@final
@dataclass(frozen=True, slots=True)
class _Block:
    """Lines ``a[i1:i2]`` became ``b[j1:j2]`` (one side may be empty)."""

    i1: int
    i2: int
    j1: int
    j2: int


def _resync(a: Sequence[str], b: Sequence[str], i: int, j: int) -> tuple[int, int]:
    """The nearest ``(di, dj)`` (smallest ``di + dj``) with ``a[i+di] == b[j+dj]``.

    Looks at most ``DIFF_WINDOW_LINES`` lines ahead on each side; with no common line
    in the window, the whole window counts as changed.
    """
    first: dict[str, int] = {}
    for offset, line in enumerate(b[j : j + DIFF_WINDOW_LINES + 1]):
        first.setdefault(line, offset)
    best: tuple[int, int] | None = None
    for di, line in enumerate(a[i : i + DIFF_WINDOW_LINES + 1]):
        if best is not None and di >= best[0] + best[1]:
            break
        dj = first.get(line)
        if dj is not None and (best is None or di + dj < best[0] + best[1]):
            best = (di, dj)
    if best is None:
        return min(DIFF_WINDOW_LINES, len(a) - i), min(DIFF_WINDOW_LINES, len(b) - j)
    return best


def _blocks(a: Sequence[str], b: Sequence[str]) -> Iterator[_Block]:
    """The changed blocks of ``a`` -> ``b``, in order, lazily.

    A forward scan: equal lines advance both sides, a difference looks for the nearest
    common line (:func:`_resync`). The result is always a correct diff, not always a
    minimal one; its cost is linear in the lines scanned plus a bounded window per
    block, never quadratic in the file (``difflib`` can be).
    """
    i = j = 0
    while True:
        while i < len(a) and j < len(b) and a[i] == b[j]:
            i, j = i + 1, j + 1
        if i == len(a) or j == len(b):
            if i < len(a) or j < len(b):
                yield _Block(i, len(a), j, len(b))
            return
        di, dj = _resync(a, b, i, j)
        yield _Block(i, i + di, j, j + dj)
        i, j = i + di, j + dj


@final
@dataclass(frozen=True, slots=True)
class _Hunk:
    """A hunk: where it starts on each side (0-based) and its rows (`` ``/``-``/``+`` + line)."""

    start_a: int
    start_b: int
    rows: list[str] = field(repr=False)


def _rows(kind: str, lines: Sequence[str]) -> list[str]:
    return [kind + line if line.endswith("\n") else f"{kind}{line}\n{NO_NEWLINE}" for line in lines]


def _hunks(a: Sequence[str], b: Sequence[str], limit: int) -> Iterator[_Hunk]:
    """Hunks with ``DIFF_CONTEXT_LINES`` of context; a hunk of over ``limit // 2`` rows
    (which can never fit, each row being at least 2 bytes) ends the diff there."""
    context = DIFF_CONTEXT_LINES
    group: list[_Block] = []
    rows_in_group = 0
    for block in _blocks(a, b):
        if group and block.i1 - group[-1].i2 > 2 * context:
            yield _hunk(a, b, group)
            group, rows_in_group = [], 0
        equal = block.i1 - group[-1].i2 if group else min(context, block.i1)
        group.append(block)
        rows_in_group += equal + (block.i2 - block.i1) + (block.j2 - block.j1)
        if rows_in_group > limit // 2:
            break
    if group:
        yield _hunk(a, b, group)


def _hunk(a: Sequence[str], b: Sequence[str], group: Sequence[_Block]) -> _Hunk:
    first, last = group[0], group[-1]
    lead = min(DIFF_CONTEXT_LINES, first.i1)  # lines before a block are equal on both sides
    rows = _rows(" ", a[first.i1 - lead : first.i1])
    previous = first.i1
    for block in group:
        rows += _rows(" ", a[previous : block.i1])
        rows += _rows("-", a[block.i1 : block.i2])
        rows += _rows("+", b[block.j1 : block.j2])
        previous = block.i2
    trail = 0
    while (
        trail < DIFF_CONTEXT_LINES
        and last.i2 + trail < len(a)
        and last.j2 + trail < len(b)
        and a[last.i2 + trail] == b[last.j2 + trail]
    ):
        trail += 1
    rows += _rows(" ", a[last.i2 : last.i2 + trail])
    return _Hunk(first.i1 - lead, first.j1 - lead, rows)


def _span(start: int, count: int) -> str:
    if count == 1:
        return str(start + 1)
    if count == 0:
        return f"{start},0"
    return f"{start + 1},{count}"


def _header(hunk: _Hunk, rows: Sequence[str]) -> str:
    old = sum(1 for row in rows if row[0] != "+")
    new = sum(1 for row in rows if row[0] != "-")
    return f"@@ -{_span(hunk.start_a, old)} +{_span(hunk.start_b, new)} @@\n"


def unified_diff(
    path: str, before: str, after: str, limit: int = MAXIMUM_DIFF_BYTES
) -> tuple[str, bool]:
    """The unified diff of ``before`` -> ``after`` in at most ``limit`` UTF-8 bytes.

    Returns the diff and whether it was cut. A cut keeps whole rows, and the last hunk's
    header counts only the rows kept, so every hunk shown is consistent. Identical
    texts give ``("", False)``; a ``limit`` below the two file header lines gives
    ``("", True)``.
    """
    if before == after:
        return "", False
    out = [f"--- a/{path}\n", f"+++ b/{path}\n"]
    used = sum(map(_utf8_size, out))
    if used > limit:
        return "", True
    for hunk in _hunks(_lines(before), _lines(after), limit):
        sizes = [_utf8_size(row) for row in hunk.rows]
        header = _header(hunk, hunk.rows)
        if used + _utf8_size(header) + sum(sizes) <= limit:
            out += [header, *hunk.rows]
            used += _utf8_size(header) + sum(sizes)
            continue
        kept: list[str] = []
        room = limit - used
        for row, size in zip(hunk.rows, sizes, strict=True):
            if size > room:
                break
            kept.append(row)
            room -= size
        while kept and used + _utf8_size(_header(hunk, kept)) + sum(map(_utf8_size, kept)) > limit:
            kept.pop()
        if any(row[0] != " " for row in kept):
            out += [_header(hunk, kept), *kept]
        return "".join(out), True
    return "".join(out), False
