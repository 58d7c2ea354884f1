"""A cut diff (review finding B5): whole change blocks only, and real ``patch`` applies it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.tools.coding._edits import unified_diff

_HUNK: Final = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@$")
_PATCH: Final = shutil.which("patch")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_the_reviewed_cut_shows_no_deletion_that_was_a_replacement() -> None:
    """B5's reproduction: the one change does not fit, so only the file headers are shown."""
    before = "".join(f"line {i}\n" for i in range(1, 11))
    after = before.replace("line 5\n", "line 5 rewritten " + "y" * 60 + "\n")
    assert ("--- a/f.txt\n+++ b/f.txt\n", True) == unified_diff("f.txt", before, after, limit=80)


def test_a_cut_between_two_changes_keeps_the_first_whole_with_balanced_context() -> None:
    """Two changes, room for the first: its hunk ends with its trailing context, and the
    leading context is no longer than the trailing one."""
    before = "".join(f"line {i}\n" for i in range(1, 11))
    after = before.replace("line 5\n", "LINE 5\n").replace("line 7\n", "LINE 7 " + "y" * 50 + "\n")
    diff, cut = unified_diff("f.txt", before, after, limit=120)
    assert cut is True
    assert "--- a/f.txt\n+++ b/f.txt\n@@ -4,3 +4,3 @@\n line 4\n-line 5\n+LINE 5\n line 6\n" == diff


def _rows_pair_whole(diff: str, before: str, after: str) -> None:
    """Every '-' run of the cut diff is followed by the '+' run of the full diff."""
    full, _ = unified_diff("p.txt", before, after, limit=1 << 22)
    for row_block in re.findall(r"(?:^-.*\n)+(?:^\\.*\n)?(?:^\+.*\n)*", diff, flags=re.M):
        assert row_block in full


_line = st.sampled_from(["x\n", "y\n", "z\r\n", "\n", "\u00e9\n", "w\n", "long line " * 3 + "\n"])
_texts = st.lists(_line, max_size=40).map("".join)


@pytest.mark.skipif(
    _PATCH is None, reason="GNU patch is not installed (make bootstrap installs it)"
)
@settings(max_examples=150, deadline=None)
@given(before=_texts, after=_texts, limit=st.integers(16, 400), final=st.booleans())
def test_random_cut_diffs_apply_with_real_patch(
    before: str, after: str, limit: int, final: bool
) -> None:
    """``patch --dry-run`` (no fuzz, binary) accepts every cut diff at its stated lines."""
    if final:
        after += "tail"  # no final newline on one side
    diff, _ = unified_diff("p.txt", before, after, limit)
    assert _size(diff) <= limit
    if not any(_HUNK.match(row) for row in diff.split("\n")):
        return
    _rows_pair_whole(diff, before, after)
    assert _PATCH is not None
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "p.txt").write_bytes(before.encode("utf-8"))
        done = subprocess.run(
            [_PATCH, "--dry-run", "--binary", "-F", "0", "-p1", "-d", directory],
            input=diff.encode("utf-8"),
            capture_output=True,
            check=False,
            timeout=30,
        )
    report = done.stdout.decode("utf-8", "replace")
    assert 0 == done.returncode, report
    assert "offset" not in report
    assert "fuzz" not in report
