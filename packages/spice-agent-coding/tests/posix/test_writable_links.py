"""Which hard link to the server's own module files a call could write (contract 12.2).

``_posix._facts.writable_link`` walks the writable places for another name of a loaded
module file that has more than one link. Real files and real hard links throughout; the
module list is the function's seam (``linked``), given real files the test made.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file system facts")

from spice.agent.coding._posix import _facts  # noqa: E402 - after the platform mark


def module_with_links(tmp_path: Path, *links: Path) -> tuple[tuple[str, int, int], ...]:
    """A module file outside every place (an install), hard-linked at ``links``."""
    install = tmp_path / "install" / "site-packages" / "server"
    install.mkdir(parents=True)
    module = install / "module.py"
    module.write_text("CODE = 1\n", encoding="utf-8")
    for link in links:
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(module, link)
    info = module.stat()
    return ((str(module), info.st_dev, info.st_ino),)


def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, extra, cache = tmp_path / "root", tmp_path / "extra", tmp_path / "private-cache"
    for place in (root, extra, cache):
        place.mkdir()
    return root, extra, cache


@pytest.mark.parametrize("where", ["root", "extra", "cache"])
def test_a_link_beneath_any_writable_place_is_found(tmp_path: Path, where: str) -> None:
    root, extra, cache = places(tmp_path)
    place = {"root": root, "extra": extra, "cache": cache}[where]
    link = place / "deep" / "er" / "copy.py"
    linked = module_with_links(tmp_path, link)
    found = _facts.writable_link([str(root), str(extra), str(cache)], lambda: linked)
    assert _facts.WritableLink(linked[0][0], str(link)) == found


def test_a_link_only_in_a_cache_no_call_writes_is_not_found(tmp_path: Path) -> None:
    """uv's own cache (under the home, outside every place): the install case, contained."""
    root, extra, cache = places(tmp_path)
    (root / "big").mkdir()
    for index in range(50):
        (root / "big" / f"f{index}.py").write_text("x\n", encoding="utf-8")
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "archive-v0" / "module.py")
    assert _facts.writable_link([str(root), str(extra), str(cache)], lambda: linked) is None


def test_no_linked_module_walks_nothing(tmp_path: Path) -> None:
    """A copy install: the places are not walked at all (bound 0 would say cautious)."""
    root, _, _ = places(tmp_path)
    (root / "file").write_text("x\n", encoding="utf-8")
    assert _facts.writable_link([str(root)], lambda: (), bound=0) is None


def test_a_symlink_to_the_module_is_not_a_link(tmp_path: Path) -> None:
    """A write through a symlink is judged at its target (read-only): not followed here."""
    root, _, _ = places(tmp_path)
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    (root / "to-module.py").symlink_to(linked[0][0])
    (root / "to-install").symlink_to(tmp_path / "install", target_is_directory=True)
    assert _facts.writable_link([str(root)], lambda: linked) is None


def test_the_modules_own_name_beneath_a_place_is_not_another_link(tmp_path: Path) -> None:
    """The server's code inside a place is the read-only bind's (or the start's refusal)."""
    root, _, _ = places(tmp_path)
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    assert _facts.writable_link([str(tmp_path / "install"), str(root)], lambda: linked) is None


def test_the_entry_bound_on_both_sides(tmp_path: Path) -> None:
    """Exactly ``bound`` entries are searched; one more makes the cautious answer."""
    root, _, _ = places(tmp_path)
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    for index in range(9):
        (root / f"f{index}").write_text("x\n", encoding="utf-8")
    (root / "sub").mkdir()  # the tenth entry; empty
    assert _facts.writable_link([str(root)], lambda: linked, bound=10) is None
    cautious = _facts.writable_link([str(root)], lambda: linked, bound=9)
    assert _facts.WritableLink(linked[0][0], None) == cautious
    assert _facts.MAX_LINK_SCAN_ENTRIES >= 100_000


def test_a_vanished_place_is_skipped(tmp_path: Path) -> None:
    root, _, _ = places(tmp_path)
    link = root / "copy.py"
    linked = module_with_links(tmp_path, link)
    gone = str(tmp_path / "gone")
    assert _facts.WritableLink(linked[0][0], str(link)) == _facts.writable_link(
        [gone, str(root)], lambda: linked
    )


def test_an_unreadable_directory_of_the_servers_user_is_cautious(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory the server's user owns but cannot read (a call could chmod it open) makes
    the cautious answer; one of another user's (no call can open it) is skipped. ``scandir``
    is made to fail there: root, which runs this suite, reads every directory."""
    root, _, _ = places(tmp_path)
    closed = root / "closed"
    closed.mkdir()
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if path == str(closed):
            raise PermissionError(13, "denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    cautious = _facts.writable_link([str(root)], lambda: linked)
    assert _facts.WritableLink(linked[0][0], None) == cautious
    monkeypatch.setattr(_facts, "_owned", lambda _: False)
    assert _facts.writable_link([str(root)], lambda: linked) is None


def test_the_real_loaded_modules_of_this_environment() -> None:
    """This environment is installed with copies (make bootstrap): no linked module, so no
    walk; any module that is linked gives its real (path, device, inode)."""
    for path, device, inode in _facts.linked_module_files():
        info = os.stat(path)
        assert (device, inode) == (info.st_dev, info.st_ino)
        assert info.st_nlink > 1


names = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4)


@given(st.lists(names, min_size=1, max_size=6))
def test_outermost_places_cover_every_place_and_nest_none(paths: list[list[str]]) -> None:
    """Every place lies beneath one kept place; no kept place lies beneath another."""
    given_places = ["/" + "/".join(parts) for parts in paths]
    kept = _facts._outermost_places(given_places)

    def beneath(path: str, top: str) -> bool:
        return path == top or path.startswith(top + "/")

    assert len(set(kept)) == len(kept)
    assert all(any(beneath(os.path.realpath(p), top) for top in kept) for p in given_places)
    assert not [a for a in kept for b in kept if a != b and beneath(a, b)]


# -- a link gained after start (LinkWatch, checked before each call) ------------------------


def test_a_link_made_in_a_writable_place_after_start_is_found(tmp_path: Path) -> None:
    """The user links the server's cached file into the worktree after start (a ``uv sync``
    sharing uv's cache): the next call's check finds it; once removed, the calls go on."""
    root, _, cache = places(tmp_path)
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    watch = _facts.LinkWatch([str(root), str(cache)], lambda: linked)
    assert watch.gained() is None
    planted = root / ".venv" / "lib" / "module.py"
    planted.parent.mkdir(parents=True)
    os.link(linked[0][0], planted)
    assert _facts.WritableLink(linked[0][0], str(planted)) == watch.gained()
    assert _facts.WritableLink(linked[0][0], str(planted)) == watch.gained()  # until removed
    planted.unlink()
    assert watch.gained() is None


def test_a_link_made_outside_every_place_is_taken_as_the_new_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No writable link: the grown count is kept, so the next call walks nothing."""
    root, _, _ = places(tmp_path)
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    watch = _facts.LinkWatch([str(root)], lambda: linked)
    os.link(linked[0][0], tmp_path / "uv-cache" / "another.py")
    assert watch.gained() is None

    def walk(*_: object, **__: object) -> None:
        raise AssertionError("walked again")

    monkeypatch.setattr(_facts, "writable_link", walk)
    assert watch.gained() is None


def test_a_copy_install_watches_nothing_and_a_replaced_module_is_not_the_loaded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, _ = places(tmp_path)
    assert _facts.LinkWatch([str(root)], lambda: ()).gained() is None
    linked = module_with_links(tmp_path, tmp_path / "uv-cache" / "module.py")
    watch = _facts.LinkWatch([str(root)], lambda: linked)
    module = Path(linked[0][0])
    module.unlink()
    module.write_text("NEW = 1\n", encoding="utf-8")  # another inode at the path
    os.link(module, root / "new.py")
    assert watch.gained() is None
