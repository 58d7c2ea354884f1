"""PosixResolver: POSIX lookup with the lookup's own PATH and workdir, on real files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.coding import PosixResolver
from spice.agent.coding._posix._resolver import resolve_blocking
from spice.agent.process import ExecutableNotFound, Lookup


def executable(path: Path, mode: int = 0o755) -> Path:
    """Create a small script at ``path`` with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


def lookup(name: str, workdir: Path | str, path: str | None) -> Lookup:
    """A lookup whose environment holds ``PATH`` only when ``path`` is given."""
    environment = [] if path is None else [f"PATH={path}"]
    return Lookup(name, os.fspath(workdir), environment)


def is_absolute_canonical(path: str) -> bool:
    """The contract's form: absolute, normalised, no leading ``//``."""
    return os.path.isabs(path) and os.path.normpath(path) == path and not path.startswith("//")


async def test_the_first_matching_path_entry_wins(tmp_path: Path) -> None:
    """Entries are searched in order and the first executable match is returned."""
    first = executable(tmp_path / "a" / "tool")
    executable(tmp_path / "b" / "tool")
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert str(first) == await PosixResolver().resolve(lookup("tool", tmp_path, search))


async def test_a_later_entry_is_used_when_earlier_ones_lack_the_name(tmp_path: Path) -> None:
    """A name missing from the first entry is found in a later one."""
    (tmp_path / "a").mkdir()
    second = executable(tmp_path / "b" / "tool")
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert str(second) == await PosixResolver().resolve(lookup("tool", tmp_path, search))


@pytest.mark.parametrize("search", ["", ":", "::", "."])
async def test_empty_entries_never_mean_the_working_directory(tmp_path: Path, search: str) -> None:
    """An empty PATH entry (POSIX: the current directory) is ignored."""
    executable(tmp_path / "tool")
    with pytest.raises(ExecutableNotFound):
        await PosixResolver().resolve(lookup("tool", tmp_path, search))


@pytest.mark.parametrize("entry", ["bin", "./bin", "../w/bin", "bin/"])
async def test_relative_entries_are_ignored(tmp_path: Path, entry: str) -> None:
    """A relative PATH entry is ignored even when it would match from the workdir."""
    workdir = tmp_path / "w"
    executable(workdir / "bin" / "tool")
    with pytest.raises(ExecutableNotFound):
        await PosixResolver().resolve(lookup("tool", workdir, entry))


async def test_an_absolute_entry_after_ignored_ones_is_still_searched(tmp_path: Path) -> None:
    """Ignoring empty and relative entries does not stop the search."""
    workdir = tmp_path / "w"
    executable(workdir / "bin" / "tool")
    wanted = executable(tmp_path / "abs" / "tool")
    search = f"::bin:./bin:{tmp_path / 'abs'}"
    assert str(wanted) == await PosixResolver().resolve(lookup("tool", workdir, search))


async def test_a_file_without_execute_permission_is_skipped(tmp_path: Path) -> None:
    """A regular file with no execute bit is not a match."""
    executable(tmp_path / "a" / "tool", mode=0o644)
    wanted = executable(tmp_path / "b" / "tool")
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert str(wanted) == await PosixResolver().resolve(lookup("tool", tmp_path, search))


async def test_a_directory_is_skipped(tmp_path: Path) -> None:
    """A directory with the name (directories have execute bits) is not a match."""
    (tmp_path / "a" / "tool").mkdir(parents=True)
    wanted = executable(tmp_path / "b" / "tool")
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert str(wanted) == await PosixResolver().resolve(lookup("tool", tmp_path, search))


async def test_a_fifo_is_skipped(tmp_path: Path) -> None:
    """A FIFO with execute bits is not a regular file, so not a match."""
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / "tool", 0o755)
    wanted = executable(tmp_path / "b" / "tool")
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert str(wanted) == await PosixResolver().resolve(lookup("tool", tmp_path, search))


async def test_a_name_with_a_slash_is_relative_to_the_workdir(tmp_path: Path) -> None:
    """``sub/tool`` is taken from the workdir, never searched in PATH."""
    wanted = executable(tmp_path / "w" / "sub" / "tool")
    executable(tmp_path / "p" / "sub" / "tool")
    found = await PosixResolver().resolve(lookup("sub/tool", tmp_path / "w", str(tmp_path / "p")))
    assert str(wanted) == found


async def test_dot_slash_and_dot_dot_are_normalised_lexically(tmp_path: Path) -> None:
    """``./x`` and ``../y/x`` give normalised absolute paths."""
    here = executable(tmp_path / "w" / "tool")
    beside = executable(tmp_path / "y" / "tool")
    resolver = PosixResolver()
    assert str(here) == await resolver.resolve(lookup("./tool", tmp_path / "w", None))
    assert str(beside) == await resolver.resolve(lookup("../y/tool", tmp_path / "w", None))


async def test_a_name_with_a_slash_that_is_not_executable_is_not_found(tmp_path: Path) -> None:
    """A slash name is never searched elsewhere when its own file does not match."""
    executable(tmp_path / "tool", mode=0o600)
    executable(tmp_path / "p" / "tool")
    with pytest.raises(ExecutableNotFound):
        await PosixResolver().resolve(lookup("./tool", tmp_path, str(tmp_path / "p")))


async def test_an_absolute_name_stays_absolute(tmp_path: Path) -> None:
    """An absolute name is checked as it is, whatever the workdir and PATH."""
    wanted = executable(tmp_path / "abs" / "tool")
    found = await PosixResolver().resolve(lookup(str(wanted), "/", None))
    assert str(wanted) == found


async def test_a_symlink_is_kept_not_resolved(tmp_path: Path) -> None:
    """The result is the symlink's path (multi-call programs dispatch on their name)."""
    target = executable(tmp_path / "real" / "busybox")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ls").symlink_to(target)
    found = await PosixResolver().resolve(lookup("ls", tmp_path, str(tmp_path / "bin")))
    assert str(tmp_path / "bin" / "ls") == found


async def test_a_dangling_symlink_is_skipped(tmp_path: Path) -> None:
    """A symlink to nothing is not a match."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tool").symlink_to(tmp_path / "missing")
    wanted = executable(tmp_path / "b" / "tool")
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert str(wanted) == await PosixResolver().resolve(lookup("tool", tmp_path, search))


async def test_a_double_slash_entry_gives_a_canonical_path(tmp_path: Path) -> None:
    """A ``//`` prefix or trailing slashes in PATH are normalised away."""
    wanted = executable(tmp_path / "a" / "tool")
    found = await PosixResolver().resolve(lookup("tool", tmp_path, f"/{tmp_path}/a//"))
    assert str(wanted) == found
    assert is_absolute_canonical(found)


async def test_nothing_found_raises_executable_not_found(tmp_path: Path) -> None:
    """A name in no entry raises ExecutableNotFound."""
    (tmp_path / "a").mkdir()
    with pytest.raises(ExecutableNotFound):
        await PosixResolver().resolve(lookup("tool", tmp_path, str(tmp_path / "a")))


async def test_without_path_only_slash_names_resolve(tmp_path: Path) -> None:
    """A lookup with no PATH finds no bare name, but still finds ``./name``."""
    executable(tmp_path / "tool")
    resolver = PosixResolver()
    with pytest.raises(ExecutableNotFound):
        await resolver.resolve(lookup("tool", tmp_path, None))
    assert str(tmp_path / "tool") == await resolver.resolve(lookup("./tool", tmp_path, None))


async def test_the_lookup_path_is_used_never_the_host_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's PATH is neither searched nor needed: only the lookup's counts."""
    host = executable(tmp_path / "host" / "tool")
    given_path = executable(tmp_path / "given" / "other")
    monkeypatch.setenv("PATH", str(host.parent))
    resolver = PosixResolver()
    with pytest.raises(ExecutableNotFound):
        await resolver.resolve(lookup("tool", tmp_path, str(given_path.parent)))
    monkeypatch.delenv("PATH")
    assert str(given_path) == await resolver.resolve(
        lookup("other", tmp_path, str(given_path.parent))
    )


async def test_a_name_too_long_for_the_system_is_not_found(tmp_path: Path) -> None:
    """A name past NAME_MAX is a miss, not an OS error."""
    with pytest.raises(ExecutableNotFound):
        await PosixResolver().resolve(lookup("x" * 4096, tmp_path, str(tmp_path)))


async def test_a_name_that_cannot_be_encoded_is_not_found(tmp_path: Path) -> None:
    """A lone surrogate that no file name can hold is a miss, not a UnicodeError."""
    with pytest.raises(ExecutableNotFound):
        await PosixResolver().resolve(lookup("tool\ud800", tmp_path, str(tmp_path)))


async def test_cancelling_a_resolve_propagates_cancellation(tmp_path: Path) -> None:
    """A cancelled resolve raises CancelledError, never a result or another error."""
    executable(tmp_path / "tool")
    task = asyncio.create_task(PosixResolver().resolve(lookup("tool", tmp_path, str(tmp_path))))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


PATH_ALPHABET = st.sampled_from(["/", ":", ".", "..", "usr", "bin", "a", "", " ", "\udcff", "é"])
PATH_TEXT = st.one_of(
    st.lists(PATH_ALPHABET, max_size=24).map("".join),
    st.text(st.characters(exclude_characters="\0"), max_size=64),
)
NAMES = st.one_of(
    st.sampled_from(["sh", "true", "./sh", "/bin/sh", "..", ".", "bin/sh", "/", "sh/"]),
    st.text(st.characters(exclude_characters="\0"), min_size=1, max_size=32),
)


@settings(max_examples=300, deadline=None)
@given(search=st.one_of(st.none(), PATH_TEXT), name=NAMES)
def test_any_path_string_gives_a_canonical_path_or_not_found(search: str | None, name: str) -> None:
    """Whatever PATH and name hold, the lookup is an absolute canonical path or a miss."""
    try:
        found = resolve_blocking(lookup(name, "/", search))
    except ExecutableNotFound:
        return
    assert is_absolute_canonical(found)
    assert os.access(found, os.X_OK)
