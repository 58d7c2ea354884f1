"""The edit rule of ``replace`` (contracts 9.2, 10.2): pure, text in, text or a typed failure out.

An edit names an ``old_text`` (non-empty) and its ``new_text``. Edits apply in order,
each to the result of the previous ones, matching exactly (no whitespace or Unicode
normalisation). The text is valid UTF-8, so matching characters is matching bytes: a
UTF-8 sequence never starts inside another one.

Line endings (contract 10.2): when an ``old_text`` is not found as written, the file's
line endings are all CRLF (it has at least one ``\\n`` and every ``\\n`` follows a
``\\r``; "the file" is the text the call read, before any edit) and ``old_text`` has a
bare LF (a ``\\n`` after no ``\\r``), the edit is translated: every bare LF of
``old_text`` and of ``new_text`` becomes CRLF, and the translated edit follows the same
rules (uniqueness, ``replace_all``, the bound). Lines no edit touches stay byte for byte.

How occurrences count (``docs/decisions.md``, "Edits"):

- *Ambiguity* counts every position where ``old_text`` starts, overlapping ones
  included: ``"aa"`` occurs twice in ``"aaa"``. An edit without ``replace_all`` must
  name exactly one place; two overlapping matches are two places.
- *replace_all* replaces the non-overlapping occurrences, left to right, as
  ``str.replace`` does (``"aa"`` -> ``"X"`` in ``"aaa"`` gives ``"Xa"``), and counts
  those replacements.
- ``edits_applied`` is the number of replacements made, over all edits.

Every intermediate result is bounded by ``limit`` bytes (the edit bound): an edit that
would grow the text past it fails at once, so memory stays bounded whatever a
``replace_all`` multiplies.

An edit that is not found gets a hint (:func:`similar_passage`): the line where the file
holds the most similar passage and what differs there (whitespace, line endings, or the
text), with at most ``SIMILAR_QUOTE_BYTES`` of the file quoted. The search does at most
``SIMILAR_WORK_BOUND`` units of work (characters scanned, candidate lines weighed) and
gives no hint rather than run past it.

The diff (:func:`unified_diff`) is a unified diff with ``DIFF_CONTEXT_LINES`` lines of
context in at most ``MAXIMUM_DIFF_BYTES`` bytes. Lines end at ``\\n`` only, so a CRLF
file shows its ``\\r`` as part of each line, as ``git diff`` does. A cut diff ends at a
hunk boundary or between whole change blocks (never between a change's ``-`` and ``+``
rows), and its last hunk has as much leading as trailing context, so ``patch`` applies it.
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

SIMILAR_QUOTE_BYTES: Final = 1024
"""Most UTF-8 bytes of the file an ``edit_not_found`` answer quotes."""
SIMILAR_WORK_BOUND: Final = 1 << 26
"""Most units of work (characters scanned, votes weighed) the search for a similar
passage does; a 4 MiB file with a 64-line ``old_text`` stays well within it."""
SIMILAR_PREFIX_CHARACTERS: Final = 256
"""Longest prefix of ``old_text``'s first line the prefix search looks for."""
SIMILAR_MINIMUM_CHARACTERS: Final = 8
"""A shared prefix shorter than this (not counting surrounding whitespace) is no hint."""

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
class Similar:
    """Where the file holds a passage like a missing ``old_text``, and what differs."""

    line: int
    """1-based line number where the passage starts."""
    difference: str
    """``whitespace``, ``line_endings`` or ``text``."""
    quote: str = field(repr=False)
    """The passage as the file has it, at most ``SIMILAR_QUOTE_BYTES`` UTF-8 bytes."""
    work: int
    """Units of work the search took (at most its bound)."""


@final
@dataclass(frozen=True, slots=True)
class EditFailure:
    """Why edit ``index`` (0-based) could not apply; ``message`` is model-safe."""

    code: str
    message: str
    index: int
    occurrences: int
    similar: Similar | None = None


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


def all_crlf(text: str) -> bool:
    """Whether ``text`` has line endings and every one is CRLF (no ``\\n`` without ``\\r``)."""
    lf = text.count("\n")
    return lf > 0 and text.count("\r\n") == lf


def has_bare_lf(text: str) -> bool:
    """Whether ``text`` has a ``\\n`` that follows no ``\\r``."""
    return text.count("\n") > text.count("\r\n")


def to_crlf(text: str) -> str:
    """``text`` with every bare LF made CRLF (CRLF and lone CR stay as they are)."""
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


_DIFFERENCE_WORDS: Final = {
    "whitespace": "its whitespace differs",
    "line_endings": "its line endings differ",
    "text": "its text differs",
}


def _not_found(index: int, similar: Similar | None) -> EditFailure:
    message = f"edit {index}: old_text occurs 0 times (not found)"
    if similar is None:
        message += (
            "; read the file again and copy the text exactly, with its whitespace and line endings"
        )
    else:
        message += (
            f"; the most similar passage starts at line {similar.line} and "
            f"{_DIFFERENCE_WORDS[similar.difference]} (similar_text quotes the file there); "
            "copy old_text exactly from the file"
        )
    return EditFailure(NOT_FOUND, message, index, 0, similar)


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


def apply_edits(
    text: str, size: int, edits: Sequence[Edit], limit: int, *, hint: bool = True
) -> EditOutcome:
    """Apply ``edits`` in order to ``text`` (``size`` UTF-8 bytes); at most ``limit`` bytes.

    ``hint``: look for a similar passage when an edit is not found.
    """
    replacements = 0
    crlf: bool | None = None  # the file's line endings, looked at once, when first needed
    original = text
    for index, edit in enumerate(edits):
        old, new = edit.old_text, edit.new_text
        first = text.find(old)
        if first < 0 and has_bare_lf(old):
            if crlf is None:
                crlf = all_crlf(original)
            if crlf:
                old, new = to_crlf(old), to_crlf(new)
                first = text.find(old)
        if first < 0:
            return _not_found(index, similar_passage(text, old) if hint else None)
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


# -- the hint for an edit that is not found ------------------------------------------


def _key(line: str) -> str:
    """A line without any whitespace (``\\r`` included): what whitespace cannot change."""
    return "".join(line.split())


def _quote(lines: Sequence[str], start: int, count: int) -> str:
    """``count`` lines from ``start`` as in the file (with their line ends), cut to
    ``SIMILAR_QUOTE_BYTES`` at a character boundary."""
    text = "\n".join(lines[start : start + count])
    if start + count < len(lines):
        text += "\n"
    data = text.encode("utf-8")[:SIMILAR_QUOTE_BYTES]
    return data.decode("utf-8", errors="ignore")


def _differs_by(found: Sequence[str], wanted: Sequence[str]) -> str:
    """What separates the file's ``found`` lines from ``old_text``'s ``wanted`` lines.

    The first wanted line may be the end of a file line, the last one its start.
    """

    def same(file_lines: Sequence[str], old_lines: Sequence[str]) -> bool:
        if len(file_lines) != len(old_lines):
            return False
        if len(old_lines) == 1:
            return old_lines[0] in file_lines[0]
        return (
            file_lines[0].endswith(old_lines[0])
            and file_lines[-1].startswith(old_lines[-1])
            and list(file_lines[1:-1]) == list(old_lines[1:-1])
        )

    def strip_cr(lines: Sequence[str]) -> list[str]:
        return [line.removesuffix("\r") for line in lines]

    if same(strip_cr(found), strip_cr(wanted)):
        return "line_endings"
    if same([_key(line) for line in found], [_key(line) for line in wanted]):
        return "whitespace"
    return "text"


def similar_passage(text: str, old: str, bound: int = SIMILAR_WORK_BOUND) -> Similar | None:
    """The passage of ``text`` most like ``old`` (which does not occur), or ``None``.

    Lines vote for where ``old`` would start when they equal one of its lines up to
    whitespace; the start with the most votes wins if at least half of ``old``'s
    non-blank lines agree. Otherwise the longest prefix of ``old``'s first line (at most
    ``SIMILAR_PREFIX_CHARACTERS``, at least ``SIMILAR_MINIMUM_CHARACTERS``) that occurs
    marks the place. Work: the text's length for the vote, one unit per vote, the text's
    length per prefix probe; past ``bound`` the search gives up (``None``).
    """
    work = len(text) + len(old)
    if work > bound:
        return None
    lines = text.split("\n")
    wanted = old.split("\n")
    if len(wanted) > 1 and not wanted[-1]:
        wanted.pop()  # old_text ends with a line end: it spans whole lines
    keys = [_key(line) for line in wanted]
    voters = {key for key in keys if key}
    where: dict[str, list[int]] = {}
    for number, line in enumerate(lines):
        key = _key(line)
        if key in voters:
            where.setdefault(key, []).append(number)
    votes: dict[int, int] = {}
    for offset, key in enumerate(keys):
        for number in where.get(key, ()) if key else ():
            work += 1
            if work > bound:
                return None
            start = number - offset
            if start >= 0:
                votes[start] = votes.get(start, 0) + 1
    if votes:
        start, count = min(votes.items(), key=lambda item: (-item[1], item[0]))
        if 2 * count >= sum(1 for key in keys if key):
            found = lines[start : start + len(wanted)]
            quote = _quote(lines, start, len(wanted))
            return Similar(start + 1, _differs_by(found, wanted), quote, work)
    head = wanted[0][:SIMILAR_PREFIX_CHARACTERS]
    low, high = 0, len(head)
    while low < high:
        middle = (low + high + 1) // 2
        work += len(text)
        if work > bound:
            return None
        if head[:middle] in text:
            low = middle
        else:
            high = middle - 1
    prefix = head[:low]
    if len(prefix.strip()) < SIMILAR_MINIMUM_CHARACTERS:
        return None
    number = text.count("\n", 0, text.find(prefix))
    return Similar(number + 1, "text", _quote(lines, number, len(wanted)), work)


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
    group: tuple[_Block, ...] = ()
    """The change blocks the hunk shows."""


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


def _trail(a: Sequence[str], b: Sequence[str], last: _Block) -> int:
    """Equal lines after ``last`` (at most ``DIFF_CONTEXT_LINES``): its trailing context."""
    trail = 0
    while (
        trail < DIFF_CONTEXT_LINES
        and last.i2 + trail < len(a)
        and last.j2 + trail < len(b)
        and a[last.i2 + trail] == b[last.j2 + trail]
    ):
        trail += 1
    return trail


def _hunk(
    a: Sequence[str], b: Sequence[str], group: Sequence[_Block], lead: int | None = None
) -> _Hunk:
    """The hunk of ``group``: ``lead`` lines of leading context (default: up to the usual)."""
    first, last = group[0], group[-1]
    most = min(DIFF_CONTEXT_LINES, first.i1)  # lines before a block are equal on both sides
    lead = most if lead is None else min(lead, most)
    rows = _rows(" ", a[first.i1 - lead : first.i1])
    previous = first.i1
    for block in group:
        rows += _rows(" ", a[previous : block.i1])
        rows += _rows("-", a[block.i1 : block.i2])
        rows += _rows("+", b[block.j1 : block.j2])
        previous = block.i2
    rows += _rows(" ", a[last.i2 : last.i2 + _trail(a, b, last)])
    return _Hunk(first.i1 - lead, first.j1 - lead, rows, tuple(group))


def _cut_hunk(
    a: Sequence[str], b: Sequence[str], group: Sequence[_Block], room: int
) -> tuple[str, list[str]] | None:
    """The longest prefix of whole blocks of ``group`` whose hunk fits in ``room`` bytes.

    The cut hunk ends with the context after its last block and has no more leading
    than trailing context (``patch`` reads fewer trailing lines as "at the end of the
    file"). ``None`` when not even the first block fits. One pass over the rows.
    """
    first = group[0]
    most = min(DIFF_CONTEXT_LINES, first.i1)
    lead_sizes = [_utf8_size(row) for row in _rows(" ", a[first.i1 - most : first.i1])]
    body_size = old = new = 0
    previous = first.i1
    best: tuple[int, int] | None = None  # (blocks kept, leading context)
    for kept, block in enumerate(group, start=1):
        for kind, lines in (
            (" ", a[previous : block.i1]),
            ("-", a[block.i1 : block.i2]),
            ("+", b[block.j1 : block.j2]),
        ):
            body_size += sum(_utf8_size(row) for row in _rows(kind, lines))
            old += len(lines) if kind != "+" else 0
            new += len(lines) if kind != "-" else 0
        previous = block.i2
        if body_size > room:
            break
        trail = _trail(a, b, block)
        lead = min(trail, most)
        trail_rows = _rows(" ", a[block.i2 : block.i2 + trail])
        size = sum(lead_sizes[most - lead :]) + body_size + sum(map(_utf8_size, trail_rows))
        start = _Hunk(first.i1 - lead, first.j1 - lead, [])
        header = _span_header(start, old + lead + trail, new + lead + trail)
        if _utf8_size(header) + size > room:
            break
        best = kept, lead
    if best is None:
        return None
    hunk = _hunk(a, b, group[: best[0]], best[1])
    return _header(hunk, hunk.rows), hunk.rows


def _span(start: int, count: int) -> str:
    if count == 1:
        return str(start + 1)
    if count == 0:
        return f"{start},0"
    return f"{start + 1},{count}"


def _header(hunk: _Hunk, rows: Sequence[str]) -> str:
    old = sum(1 for row in rows if row[0] != "+")
    new = sum(1 for row in rows if row[0] != "-")
    return _span_header(hunk, old, new)


def _span_header(hunk: _Hunk, old: int, new: int) -> str:
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
    before_lines, after_lines = _lines(before), _lines(after)
    for hunk in _hunks(before_lines, after_lines, limit):
        sizes = [_utf8_size(row) for row in hunk.rows]
        header = _header(hunk, hunk.rows)
        if used + _utf8_size(header) + sum(sizes) <= limit:
            out += [header, *hunk.rows]
            used += _utf8_size(header) + sum(sizes)
            continue
        cut = _cut_hunk(before_lines, after_lines, hunk.group, limit - used)
        if cut is not None:
            out += [cut[0], *cut[1]]
        return "".join(out), True
    return "".join(out), False
