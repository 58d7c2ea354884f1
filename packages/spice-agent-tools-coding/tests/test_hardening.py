"""Round-3 leftovers of the product (B14): one shape for temporary names, the owner's
slot count changed only by the owner, and the edit form's missing-file text."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from replace_helpers import WAIT_SECONDS, make_tool, replace_arguments, run
from test_replace_edits import edit, edit_arguments

from spice.agent.tools.coding._commit import (
    TEMPORARY_NAME,
    TEMPORARY_PREFIX,
    TEMPORARY_SUFFIX,
    is_temporary_name,
    temporary_name,
)
from spice.agent.tools.coding._ownership import Owner, Timing


def test_the_temporary_name_is_one_compiled_pattern() -> None:
    """Positive, negative and boundary shapes, against the one pattern."""
    assert isinstance(TEMPORARY_NAME, re.Pattern)
    assert is_temporary_name(temporary_name())
    hex32 = "0123456789abcdef" * 2
    assert is_temporary_name(f"{TEMPORARY_PREFIX}{hex32}{TEMPORARY_SUFFIX}")
    for name in (
        f"{TEMPORARY_PREFIX}{hex32[:-1]}{TEMPORARY_SUFFIX}",  # 31 digits
        f"{TEMPORARY_PREFIX}{hex32}0{TEMPORARY_SUFFIX}",  # 33 digits
        f"{TEMPORARY_PREFIX}{hex32.upper()}{TEMPORARY_SUFFIX}",
        f"{TEMPORARY_PREFIX}{hex32}{TEMPORARY_SUFFIX}\n",
        f"x{TEMPORARY_PREFIX}{hex32}{TEMPORARY_SUFFIX}",
        f"{TEMPORARY_PREFIX}{hex32}",
    ):
        assert not is_temporary_name(name)


@given(st.text(max_size=60))
def test_any_name_is_a_temporary_exactly_when_it_has_the_shape(name: str) -> None:
    token = name.removeprefix(TEMPORARY_PREFIX).removesuffix(TEMPORARY_SUFFIX)
    shaped = (
        name.startswith(TEMPORARY_PREFIX)
        and name.endswith(TEMPORARY_SUFFIX)
        and len(token) == 32
        and all(char in "0123456789abcdef" for char in token)
    )
    assert shaped == is_temporary_name(name)


async def test_the_slot_count_is_the_owners_own() -> None:
    """Read-only from outside; a ticket gives its slot back through the owner."""
    owner = Owner(Timing())
    ticket = owner.admit()
    assert not isinstance(ticket, str)
    assert 1 == owner.reserved
    with pytest.raises(AttributeError):
        owner.reserved = 0  # type: ignore[misc]
    ticket.leave()
    ticket.leave()  # idempotent
    assert 0 == owner.reserved


OLD = b"Helo\n"


async def test_an_edit_of_a_missing_file_says_to_use_content_with_create(tmp_path: Path) -> None:
    """The edit form cannot create (``create`` with ``edits`` is refused): its text says
    what can; the content form keeps its own text."""
    tool = make_tool(tmp_path)
    async with asyncio.timeout(WAIT_SECONDS):
        _, edited = await run(tool, edit_arguments([edit("Helo", "Hello")], OLD, "missing.py"))
        _, whole = await run(tool, replace_arguments("missing.py", "x", OLD))
    assert ("not_found", "not_found") == (edited["code"], whole["code"])
    assert "use content with create: true" in str(edited["message"])
    assert "pass create: true" in str(whole["message"])
    assert not (tmp_path / "missing.py").exists()
