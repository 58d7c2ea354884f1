"""The worktrees' private caches: held by running servers, listed, cleaned, expired (12.2).

Real directories, real ``flock`` locks, and a real second process holding a cache (a
server's start does the same ``claim``); the one fault faked is an unreadable directory
where the suite runs as root (root reads every directory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the POSIX sandbox's caches")

from cache_support import HOLDER_SECONDS, holding  # noqa: E402 - after the platform mark

from spice.agent.coding import _sandbox  # noqa: E402
from spice.agent.coding._posix import _caches, _facts  # noqa: E402

DAY: Final = _caches.SECONDS_PER_DAY


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def make_cache(tmp_path: Path, environ: dict[str, str], name: str, size: int = 10) -> Path:
    """A worktree ``name`` and its cache with ``size`` bytes in its uv directory, recorded."""
    root = tmp_path / "worktrees" / name
    root.mkdir(parents=True)
    cache = Path(str(_facts.cache_directory(str(root), environ)))
    (cache / "uv").mkdir(parents=True)
    (cache / "uv" / "wheel").write_bytes(b"x" * size)
    Path(_caches.lock_path(str(cache))).write_text(json.dumps({"root": str(root)}))
    return cache


def age(cache: Path, days: float) -> None:
    """Make ``cache`` last used ``days`` ago (its record's time)."""
    when = time.time() - days * DAY
    os.utime(_caches.lock_path(str(cache)), (when, when))


def test_list_names_each_root_its_size_and_last_use(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    old = make_cache(tmp_path, environ, "old", size=100)
    new = make_cache(tmp_path, environ, "new", size=7)
    age(old, 3)
    listed, truncated = _caches.list_caches(environ)
    assert not truncated
    assert [str(new), str(old)] == [entry.cache for entry in listed]
    first = listed[0].to_json()
    assert str(tmp_path / "worktrees" / "new") == first["root"]
    assert (7, True, False) == (first["size_bytes"], first["size_complete"], first["in_use"])
    assert str(first["last_use"]).endswith("Z")
    assert 100 == listed[1].size_bytes
    assert abs(listed[1].last_use - (time.time() - 3 * DAY)) < DAY


def test_a_cache_older_than_records_is_listed_with_no_root(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    cache = make_cache(tmp_path, environ, "before")
    os.unlink(_caches.lock_path(str(cache)))
    [entry] = _caches.list_caches(environ)[0]
    assert (str(cache), None, False) == (entry.cache, entry.root, entry.in_use)
    assert entry.last_use == cache.stat().st_mtime


def test_a_claim_by_a_running_server_shows_in_use_and_is_never_removed(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """A second process holds one cache (as a running server does): list says in_use, clean
    and expiry leave it whole; once that process is killed its cache is removable."""
    held = make_cache(tmp_path, environ, "held")
    free = make_cache(tmp_path, environ, "free")
    age(held, 400)
    age(free, 400)
    with holding(held, tmp_path / "worktrees" / "held") as process:
        in_use = {entry.cache: entry.in_use for entry in _caches.list_caches(environ)[0]}
        assert {str(held): True, str(free): False} == in_use
        assert [str(free)] == _caches.expire(environ, 30)
        assert _caches.Removal.IN_USE == _caches.remove_cache(str(held))
        assert (held / "uv" / "wheel").is_file()
        process.kill()
        process.wait(HOLDER_SECONDS)
    assert _caches.Removal.REMOVED == _caches.remove_cache(str(held))
    assert not held.exists()
    assert not os.path.lexists(_caches.lock_path(str(held)))


def test_a_claim_writes_the_record_and_a_clean_between_starts_does_not_break_the_next(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """The claim runs in a child (this process keeps no lock); after a clean removed the
    cache and its lock file, the next claim makes both again."""
    root = tmp_path / "worktrees" / "w"
    root.mkdir(parents=True)
    cache = str(_facts.cache_directory(str(root), environ))
    script = (
        "import sys\nfrom spice.agent.coding._posix import _caches\n_caches.claim(*sys.argv[1:])"
    )
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", script, cache, str(root)], timeout=HOLDER_SECONDS, check=False
        )
        assert 0 == done.returncode
        assert {"root": str(root)} == json.loads(Path(_caches.lock_path(cache)).read_text())
        os.makedirs(cache, exist_ok=True)
        assert _caches.Removal.REMOVED == _caches.remove_cache(cache)
    assert _caches.Removal.ABSENT == _caches.remove_cache(cache)


def test_a_directory_planted_at_the_lock_path_fails_the_claim(tmp_path: Path) -> None:
    cache = tmp_path / "spice-coding" / ("0" * 16)
    os.makedirs(_caches.lock_path(str(cache)))
    with pytest.raises(_caches.ClaimFailed, match="cannot be held"):
        _caches.claim(str(cache), str(tmp_path))


def test_symlinks_are_neither_followed_nor_removed_beyond_their_name(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """A link inside a cache to a directory outside: not counted, removed as a name only;
    a link in the caches' directory named like a cache: not listed, not removed."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_bytes(b"y" * 1000)
    cache = make_cache(tmp_path, environ, "w", size=5)
    (cache / "uv" / "escape").symlink_to(precious, target_is_directory=True)
    planted = cache.parent / ("f" * 16)
    planted.symlink_to(precious, target_is_directory=True)
    [entry] = _caches.list_caches(environ)[0]
    assert (str(cache), 5) == (entry.cache, entry.size_bytes)
    assert _caches.Removal.REMOVED == _caches.remove_cache(str(cache))
    assert _caches.Removal.FAILED == _caches.remove_cache(str(planted))
    assert (precious / "data").read_bytes() == b"y" * 1000
    assert planted.is_symlink()


def test_an_unreadable_directory_in_a_cache(
    tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its size is what could be read (said incomplete), and the clean still removes it
    whole (its owner's rwx given back). As root the unreadability is faked for the size."""
    cache = make_cache(tmp_path, environ, "w", size=3)
    closed = cache / "npm" / "closed"
    closed.mkdir(parents=True)
    (closed / "secret").write_bytes(b"z" * 50)
    closed.chmod(0)
    if os.geteuid() == 0:
        real = os.scandir

        def scandir(path: str) -> object:
            if path == str(closed):
                raise PermissionError(13, "denied")
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
    [entry] = _caches.list_caches(environ)[0]
    assert (3, False) == (entry.size_bytes, entry.size_complete)
    monkeypatch.undo()
    assert _caches.Removal.REMOVED == _caches.remove_cache(str(cache))
    assert not cache.exists()


def test_a_record_that_is_not_json_lists_no_root(tmp_path: Path, environ: dict[str, str]) -> None:
    cache = make_cache(tmp_path, environ, "w")
    Path(_caches.lock_path(str(cache))).write_bytes(b"\xff not json")
    [entry] = _caches.list_caches(environ)[0]
    assert entry.root is None


def test_the_listing_bound_on_both_sides(
    tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(3):
        make_cache(tmp_path, environ, f"w{index}")
    monkeypatch.setattr(_caches, "MAX_CACHES_LISTED", 3)
    assert (3, False) == (len(_caches.list_caches(environ)[0]), _caches.list_caches(environ)[1])
    monkeypatch.setattr(_caches, "MAX_CACHES_LISTED", 2)
    assert (2, True) == (len(_caches.list_caches(environ)[0]), _caches.list_caches(environ)[1])


def test_the_size_bound_on_both_sides(
    tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = make_cache(tmp_path, environ, "w", size=1)  # entries: uv, uv/wheel
    (cache / "pip").mkdir()  # the third entry
    monkeypatch.setattr(_caches, "MAX_SIZE_ENTRIES", 3)
    assert [(1, True)] == [(e.size_bytes, e.size_complete) for e in _caches.list_caches(environ)[0]]
    monkeypatch.setattr(_caches, "MAX_SIZE_ENTRIES", 2)
    assert [False] == [e.size_complete for e in _caches.list_caches(environ)[0]]


def test_expiry_removes_only_what_is_older_than_the_age(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """Exactly at the age is kept, a second older goes; 0 turns the expiry off."""
    now = time.time()
    at = make_cache(tmp_path, environ, "at")
    older = make_cache(tmp_path, environ, "older")
    for cache, seconds in ((at, 30 * DAY), (older, 30 * DAY + 1)):
        os.utime(_caches.lock_path(str(cache)), (now - seconds, now - seconds))
    assert [] == _caches.expire(environ, 0, now)
    assert [str(older)] == _caches.expire(environ, 30, now)
    assert at.is_dir()
    assert 30 == _sandbox.DEFAULT_CACHE_MAX_AGE_DAYS


def test_expiry_removes_at_most_its_bound_per_start(
    tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(3):
        age(make_cache(tmp_path, environ, f"w{index}"), 100)
    monkeypatch.setattr(_caches, "MAX_EXPIRED_PER_START", 2)
    assert 2 == len(_caches.expire(environ, 30))
    assert 1 == len(_caches.expire(environ, 30))
    assert [] == _caches.list_caches(environ)[0]


def test_without_a_home_there_is_nothing_to_list_or_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user with no home anywhere (faked: this one has a password entry)."""
    environ = {"HOME": "relative"}
    monkeypatch.setattr(_sandbox, "home_directory", lambda _environ: None)
    assert ([], False) == _caches.list_caches(environ)
    assert [] == _caches.expire(environ, 30)


def test_a_start_waits_for_a_clean_of_its_cache_at_most_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a clean holds the exclusive lock the claim waits, and past the bound it fails
    (a start error) rather than make the cache under the removal."""
    import fcntl  # noqa: PLC0415 - POSIX only, like this file

    cache = str(tmp_path / "spice-coding" / ("a" * 16))
    os.makedirs(os.path.dirname(cache))
    cleaner = os.open(_caches.lock_path(cache), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(cleaner, fcntl.LOCK_EX)
        monkeypatch.setattr(_caches, "CLAIM_WAIT_SECONDS", 0.2)
        with pytest.raises(_caches.ClaimFailed):
            _caches.claim(cache, str(tmp_path))
        fcntl.flock(cleaner, fcntl.LOCK_UN)
        _caches.claim(cache, str(tmp_path))
        os.makedirs(cache)
        assert _caches.Removal.IN_USE == _caches.remove_cache(cache)
        assert _caches._in_use(_caches.lock_path(cache))
    finally:
        os.close(cleaner)
        held = _caches._HELD.pop(cache, None)
        if held is not None:
            os.close(held)
    assert not _caches._in_use(_caches.lock_path(cache))
