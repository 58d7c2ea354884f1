"""Windows name rules (``_windows._names``): a pure function, so these run on every platform."""

from __future__ import annotations

import pytest
from coding_strategies import path_strings
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spice.agent.tools.coding._root import MAXIMUM_NAME_BYTES, PathError, clean_path
from spice.agent.tools.coding._windows._names import (
    FORBIDDEN_CHARACTERS,
    RESERVED_NAMES,
    SHORT_NAME_BASE,
    SHORT_NAME_EXTENSION,
    check_component,
    clean_windows_path,
    is_short_name_shape,
)

ROOT = "C:\\work\\tree"


def code_of(raw: str, root: str | None = ROOT) -> str | None:
    """``None`` when the path is accepted, else the error's code."""
    try:
        clean_windows_path(raw, root=root, names_root=False)
    except PathError as error:
        return error.code
    return None


# ---- positive -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("a.txt", "a.txt"),
        ("src\\pkg\\mod.py", "src/pkg/mod.py"),
        ("src/pkg\\mod.py", "src/pkg/mod.py"),
        ("a\\.\\b\\..\\c", "a/c"),
        (".git/config", ".git/config"),
        ("file.txt~", "file.txt~"),
        ("x~", "x~"),
        ("CONSOLE.txt", "CONSOLE.txt"),
        ("com10", "com10"),
        ("C:\\work\\tree\\a.txt", "a.txt"),
        ("c:/WORK/Tree/sub/../b.txt", "b.txt"),
    ],
)
def test_accepted_names_clean_to_slash_form(raw: str, cleaned: str) -> None:
    """Both separators are accepted; answers use ``/``; a drive path beneath the root is
    its remainder (compared without regard to case)."""
    assert cleaned == clean_windows_path(raw, root=ROOT, names_root=False)


# ---- negative -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "D:\\other\\a.txt",  # another drive
        "C:\\work\\treehouse\\a",  # a sibling whose name starts like the root
        "C:\\work\\tree\\..\\x",  # leaves the root lexically
        "C:a.txt",  # drive-relative
        "\\a.txt",  # rooted, no drive
        "/a.txt",
        "\\\\server\\share\\a.txt",  # UNC
        "//server/share/a.txt",
        "\\\\?\\C:\\work\\tree\\a.txt",  # the Win32 file namespace
        "\\\\.\\C:\\work\\tree\\a.txt",  # the device namespace
        "a.txt:hidden",  # an alternate data stream
        "a.txt::$DATA",
        "dir\\a:b",
        "a<b",
        "a|b",
        "a?",
        "a*",
        'a"b',
        "CON",
        "con",
        "nul.txt",
        "Aux.tar.gz",
        "com1",
        "LPT9.log",
        "COM\u00b9",
        "conin$",
        "sub\\PRN\\x",
        "a.",
        "a..",
        "sub.\\x",
        "a \\x",
        "...",
        "PROGRA~1",
        "progra~1\\x",
        "AVERYL~1.TXT",
        "AB12~1",
        "AVER~DAC.TXT",  # Wine's form
        "..\\a",
        "a\\..\\..\\b",
    ],
)
def test_names_windows_would_read_otherwise_are_invalid(raw: str) -> None:
    """Prefixes, streams, device names, trailing dots/spaces and 8.3 shapes are refused."""
    assert "invalid_arguments" == code_of(raw)


def test_a_drive_path_without_a_root_is_invalid() -> None:
    """Without a configured root no absolute path is accepted."""
    assert "invalid_arguments" == code_of("C:\\work\\tree\\a.txt", root=None)


def test_the_root_itself_is_refused_for_read_and_replace() -> None:
    """A drive path naming the root cleans to ``.``, which read and replace refuse."""
    assert "invalid_arguments" == code_of("C:\\work\\tree\\")
    assert "." == clean_windows_path("C:\\work\\tree", root=ROOT)


# ---- boundaries -----------------------------------------------------------------------------


def test_short_name_shape_bounds() -> None:
    """Base of at most eight, extension of at most three: one more is not an 8.3 shape."""
    assert is_short_name_shape("A" * (SHORT_NAME_BASE - 2) + "~1")
    assert not is_short_name_shape("A" * (SHORT_NAME_BASE - 1) + "~1")
    assert is_short_name_shape("AB~1." + "T" * SHORT_NAME_EXTENSION)
    assert not is_short_name_shape("AB~1." + "T" * (SHORT_NAME_EXTENSION + 1))
    assert not is_short_name_shape("AB~")  # nothing after the tilde
    assert not is_short_name_shape("~")
    assert is_short_name_shape("~1")


def test_component_length_bound_is_clean_paths() -> None:
    """The component bound is the POSIX one (255 bytes), on both sides of it."""
    assert "a" * MAXIMUM_NAME_BYTES == clean_windows_path("a" * MAXIMUM_NAME_BYTES)
    assert "invalid_arguments" == code_of("a" * (MAXIMUM_NAME_BYTES + 1))


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_every_reserved_name_with_any_extension_and_case(name: str) -> None:
    """Every reserved device name is refused bare, with an extension, and in lower case."""
    for spelled in (name, name.lower(), f"{name}.txt", f"{name.lower()}.tar.gz", f"{name} .x"):
        with pytest.raises(PathError):
            check_component(spelled)


# ---- properties -----------------------------------------------------------------------------

_SAFE = st.text(
    st.characters(
        codec="utf-8",
        categories=("L", "N"),
        exclude_characters="~",
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_SAFE, min_size=1, max_size=6))
def test_plain_names_are_accepted_and_joined_with_slashes(parts: list[str]) -> None:
    """Letters and digits only: accepted unless a component is a device name; both
    separators give the same ``/`` answer."""
    assume(all(p.split(".", 1)[0].upper() not in RESERVED_NAMES for p in parts))
    assume(len("/".join(parts).encode()) < 4096)
    expected = "/".join(parts)
    assert expected == clean_windows_path("\\".join(parts))
    assert expected == clean_windows_path("/".join(parts))


@settings(max_examples=300, deadline=None)
@given(path_strings)
def test_windows_cleaning_is_never_looser_than_posix_cleaning(raw: str) -> None:
    """Whatever the Windows rule accepts, the POSIX rule accepts in ``/`` form, with the
    same answer, and the answer has no backslash, no forbidden character, no device name,
    no trailing dot or space: cleaning is idempotent."""
    if code_of(raw, root=None) is not None:
        assert "invalid_arguments" == code_of(raw, root=None)
        return
    cleaned = clean_windows_path(raw)
    assert "\\" not in cleaned
    assert cleaned == clean_path(raw.replace("\\", "/"))
    assert cleaned == clean_windows_path(cleaned)
    for component in cleaned.split("/") if cleaned != "." else []:
        assert not FORBIDDEN_CHARACTERS & set(component)
        assert not component.endswith((".", " "))
        assert component.split(".", 1)[0].rstrip(" ").upper() not in RESERVED_NAMES


@settings(max_examples=200, deadline=None)
@given(_SAFE, st.sampled_from(sorted(FORBIDDEN_CHARACTERS)), _SAFE)
def test_a_forbidden_character_anywhere_is_invalid(left: str, char: str, right: str) -> None:
    """``:`` (streams) and ``< > " | ? *`` are refused wherever they stand."""
    assert "invalid_arguments" == code_of(f"sub/{left}{char}{right}")


@settings(max_examples=200, deadline=None)
@given(_SAFE, st.sampled_from([".", " ", "..", ". "]))
def test_a_trailing_dot_or_space_is_invalid(name: str, tail: str) -> None:
    """Win32 would strip it and name another file."""
    assert "invalid_arguments" == code_of(f"{name}{tail}/x")
