"""What the shell reads of a process it did not make (``_shell_launcher``): each optional
attribute is used only when it is of the expected type, and a failing read says nothing."""

from __future__ import annotations

import pytest

from spice.agent.tools.coding._shell_launcher import (
    MAXIMUM_CONTAINMENT_BYTES,
    launcher_text,
    process_cleaned_up,
    process_hint,
)


class Joined:
    """A joined process whose two optional attributes are given, or raise when read."""

    def __init__(self, hint: object = None, cleaned: object = True, fail: bool = False) -> None:
        self._hint, self._cleaned, self._fail = hint, cleaned, fail

    @property
    def sandbox_hint(self) -> object:
        if self._fail:
            raise RuntimeError("the launcher's property failed")
        return self._hint

    @property
    def cleanup_completed(self) -> object:
        if self._fail:
            raise RuntimeError("the launcher's property failed")
        return self._cleaned


def test_a_usable_hint_is_read_and_anything_else_is_none() -> None:
    assert "give --allow-write /x" == process_hint(Joined(hint=" give --allow-write /x "))
    assert process_hint(Joined(hint=None)) is None
    assert process_hint(Joined(hint=42)) is None
    assert process_hint(Joined(hint="a\x07bell")) is None
    assert process_hint(Joined(fail=True)) is None
    assert process_hint(object()) is None


def test_a_hint_at_the_bound_is_read_and_one_byte_more_is_not() -> None:
    assert launcher_text("x" * MAXIMUM_CONTAINMENT_BYTES) is not None
    assert launcher_text("x" * (MAXIMUM_CONTAINMENT_BYTES + 1)) is None
    assert launcher_text("   ") is None


@pytest.mark.parametrize(
    ("process", "cleaned"),
    [
        (Joined(cleaned=True), True),
        (Joined(cleaned=False), False),
        (Joined(cleaned=1), False),
        (Joined(fail=True), False),
        (object(), True),
    ],
)
def test_only_a_true_cleanup_or_none_said_counts_as_cleaned(process: object, cleaned: bool) -> None:
    assert cleaned is process_cleaned_up(process)
