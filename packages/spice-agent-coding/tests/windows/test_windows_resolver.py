"""``WindowsResolver``: PATH and PATHEXT only, never the current directory, no batch files.

The candidate rules are pure (``ntpath``) and run on every platform; the lookups against
real files run under Windows Python (Wine in ``make test-windows``, or windows-latest).
"""

from __future__ import annotations

import ntpath
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._windows._resolver import (
    DEFAULT_PATHEXT,
    MAXIMUM_PATHEXT_ENTRIES,
    WindowsResolver,
    candidates,
    extensions,
    is_batch,
)
from spice.agent.process import ExecutableNotFound, Lookup

windows_only = pytest.mark.skipif(
    sys.platform != "win32",
    reason="Windows only (runs under Wine in make test-windows, and on windows-latest)",
)

PATHEXT = "PATHEXT=.COM;.EXE;.BAT;.CMD;.VBS"
WORKDIR = "C:\\work" if sys.platform != "win32" else os.path.abspath("\\work")


def lookup(name: str, *environment: str, workdir: str = WORKDIR) -> Lookup:
    if sys.platform != "win32":
        # Lookup checks its working directory with the host's path rules; the candidate
        # rules only need the text, so build the value without the check.
        value = object.__new__(Lookup)
        object.__setattr__(value, "requested_executable", name)
        object.__setattr__(value, "working_directory", workdir)
        object.__setattr__(value, "environment", tuple(sorted(environment)))
        return value
    return Lookup(name, workdir, environment)


def test_pathext_gives_the_extensions_in_order_without_batch_files() -> None:
    assert (".COM", ".EXE", ".VBS") == extensions((PATHEXT,))
    assert DEFAULT_PATHEXT == extensions(())
    assert (".EXE",) == extensions(("PathExt=.exe;;exe;.;.E\\X;.EXE",))


def test_pathext_entries_past_the_bound_are_ignored() -> None:
    many = ";".join(f".E{i}" for i in range(MAXIMUM_PATHEXT_ENTRIES + 5))
    found = extensions((f"PATHEXT={many}",))
    assert MAXIMUM_PATHEXT_ENTRIES == len(found)
    assert ".E0" == found[0]


@pytest.mark.parametrize(
    ("name", "batch"),
    [
        ("a.bat", True),
        ("a.CMD", True),
        ("a.bat.", True),
        ("a.cmd . ", True),
        ("C:\\x\\b.Bat", True),
        ("a.exe", False),
        ("bat", False),
        ("a.bat.exe", False),
        ("a.batch", False),
    ],
)
def test_batch_files_are_recognised(name: str, batch: bool) -> None:
    assert batch == is_batch(name)


def test_a_bare_name_is_searched_in_absolute_path_entries_only() -> None:
    found = candidates(
        lookup("tool", 'PATH=C:\\bin;;relative;\\rooted;C:drive;"D:\\quoted"', PATHEXT)
    )
    assert [
        "C:\\bin\\tool.COM",
        "C:\\bin\\tool.EXE",
        "C:\\bin\\tool.VBS",
        "D:\\quoted\\tool.COM",
        "D:\\quoted\\tool.EXE",
        "D:\\quoted\\tool.VBS",
    ] == found


def test_a_name_with_an_executable_extension_is_tried_as_it_is_first() -> None:
    found = candidates(lookup("tool.exe", "PATH=C:\\bin", PATHEXT))
    assert "C:\\bin\\tool.exe" == found[0]
    assert "C:\\bin\\tool.txt.EXE" in candidates(lookup("tool.txt", "PATH=C:\\bin", PATHEXT))
    assert "C:\\bin\\tool.txt" not in candidates(lookup("tool.txt", "PATH=C:\\bin", PATHEXT))


def test_a_name_with_a_path_is_taken_relative_to_the_workdir_and_never_searched() -> None:
    assert ["C:\\work\\tool.exe"] == candidates(lookup(".\\tool.exe", "PATH=C:\\bin"))
    assert ["C:\\work\\sub\\tool.exe"] == candidates(lookup("sub/tool.exe", "PATH=C:\\bin"))
    assert ["D:\\x\\tool.exe"] == candidates(lookup("D:\\x\\tool.exe", "PATH=C:\\bin"))


def test_without_path_a_bare_name_has_no_candidate() -> None:
    assert [] == candidates(lookup("tool", PATHEXT))


@given(
    name=st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\\/:"),
        min_size=1,
        max_size=20,
    ),
    entries=st.lists(
        st.sampled_from(["C:\\bin", "", ".", "rel", "\\x", "E:y", "D:\\t"]), max_size=6
    ),
)
def test_a_bare_name_never_resolves_in_the_workdir(name: str, entries: list[str]) -> None:
    """Whatever PATH holds, a bare name's candidates lie in absolute PATH entries only."""
    found = candidates(lookup(name, f"PATH={';'.join(entries)}", PATHEXT))
    absolute = {entry for entry in entries if entry in {"C:\\bin", "D:\\t"}}
    for candidate in found:
        assert any(candidate.startswith(entry) for entry in absolute)
        assert not is_batch(candidate) or is_batch(name)


@windows_only
async def test_pathext_finds_an_executable_in_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tool.exe").write_bytes(b"MZ")
    (bin_dir / "other.com").write_bytes(b"MZ")
    path = f"PATH={bin_dir}"
    resolver = WindowsResolver()
    tool = await resolver.resolve(Lookup("tool", str(tmp_path), [path, PATHEXT]))
    other = await resolver.resolve(Lookup("other", str(tmp_path), [path, PATHEXT]))
    # Windows environment names are case-insensitive.
    again = await resolver.resolve(
        Lookup("tool", str(tmp_path), [f"Path={bin_dir}", "PathExt=.EXE"])
    )
    # File names are case-insensitive too: the extension keeps PATHEXT's case.
    assert [os.path.normcase(bin_dir / "tool.exe")] * 2 == [
        os.path.normcase(tool),
        os.path.normcase(again),
    ]
    assert os.path.normcase(bin_dir / "other.com") == os.path.normcase(other)


@windows_only
async def test_the_current_directory_is_never_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tool.exe").write_bytes(b"MZ")
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ExecutableNotFound):
        await WindowsResolver().resolve(Lookup("tool", str(tmp_path), [f"PATH={empty}", PATHEXT]))
    # Named with its path, it is found, relative to the lookup's workdir.
    found = await WindowsResolver().resolve(Lookup(".\\tool.exe", str(tmp_path), [PATHEXT]))
    assert str(tmp_path / "tool.exe") == found


@windows_only
async def test_a_bare_name_never_resolves_to_a_batch_file(tmp_path: Path) -> None:
    (tmp_path / "build.bat").write_text("@echo off\r\n", encoding="ascii")
    (tmp_path / "build.cmd").write_text("@echo off\r\n", encoding="ascii")
    with pytest.raises(ExecutableNotFound):
        await WindowsResolver().resolve(
            Lookup("build", str(tmp_path), [f"PATH={tmp_path}", PATHEXT])
        )


@windows_only
async def test_a_directory_is_not_an_executable(tmp_path: Path) -> None:
    (tmp_path / "tool.exe").mkdir()
    with pytest.raises(ExecutableNotFound):
        await WindowsResolver().resolve(
            Lookup("tool", str(tmp_path), [f"PATH={tmp_path}", PATHEXT])
        )


@windows_only
async def test_cmd_is_found_through_the_systems_path() -> None:
    found = await WindowsResolver().resolve(
        Lookup("cmd", os.environ["SYSTEMROOT"], [f"PATH={os.environ['PATH']}", PATHEXT])
    )
    assert "cmd.exe" == ntpath.basename(found).lower()
