"""What the start fixes for every call's plan (``_posix._facts``), on real directories.

The home and the cache directory from the environment (and the password database), the
empty templates masks are bound from, and each refusal of a place they cannot be made in.
"""

from __future__ import annotations

import hashlib
import os
import pwd
from pathlib import Path

import pytest

from spice.agent.coding._posix._facts import (
    CACHE_APPLICATION,
    ROOT_HASH_CHARACTERS,
    CacheUnavailable,
    cache_directory,
    open_no_follow,
    start_facts,
    user_cache_directory,
)
from spice.agent.coding._sandbox import home_directory


def test_an_absolute_home_is_taken_as_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert str((tmp_path / "real").resolve()) == home_directory({"HOME": str(tmp_path / "link")})


@pytest.mark.parametrize("home", ["", "relative/home", "~"])
def test_without_an_absolute_home_the_password_database_says(home: str) -> None:
    expected = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    found = home_directory({"HOME": home} if home else {})
    assert (None if expected == os.sep else expected) == found


def test_a_home_of_slash_is_no_home() -> None:
    assert home_directory({"HOME": "/"}) is None


def test_the_cache_base_is_xdg_when_absolute_else_the_home_cache(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    assert str(xdg) == user_cache_directory({"XDG_CACHE_HOME": str(xdg)}, "/home/u")
    assert "/home/u/.cache" == user_cache_directory({"XDG_CACHE_HOME": "rel"}, "/home/u")
    assert user_cache_directory({}, None) is None


def test_the_cache_is_named_by_the_roots_real_path(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (tmp_path / "alias").symlink_to(root)
    environ = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    digest = hashlib.sha256(os.fsencode(str(root.resolve()))).hexdigest()[:ROOT_HASH_CHARACTERS]
    expected = str(tmp_path / "c" / CACHE_APPLICATION / digest)
    assert expected == cache_directory(str(root), environ)
    assert expected == cache_directory(str(tmp_path / "alias"), environ)
    assert cache_directory(str(root), {"HOME": "/"}) is None  # no home, no XDG: none


def test_the_cache_and_the_templates_are_made_once_and_kept(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    environ = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    facts = start_facts(str(root), cache=True, bwrap="/usr/bin/bwrap", environ=environ)
    again = start_facts(str(root), cache=True, bwrap="/usr/bin/bwrap", environ=environ)
    assert facts.cache is not None
    assert (facts.cache, facts.empty_directory) == (again.cache, again.empty_directory)
    assert facts.empty_directory is not None
    assert facts.empty_file is not None
    assert [] == os.listdir(facts.empty_directory)
    assert 0 == os.path.getsize(facts.empty_file)


def test_a_template_that_is_not_empty_refuses_the_start(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    environ = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    facts = start_facts(str(root), bwrap="/usr/bin/bwrap", environ=environ)
    assert facts.empty_file is not None
    os.chmod(facts.empty_file, 0o644)
    Path(facts.empty_file).write_bytes(b"planted")
    with pytest.raises(CacheUnavailable, match="must be an empty file"):
        start_facts(str(root), bwrap="/usr/bin/bwrap", environ=environ)


def test_a_cache_that_cannot_be_made_is_a_clear_start_error(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")
    environ = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(blocked)}
    with pytest.raises(CacheUnavailable, match="cannot be made"):
        start_facts(str(root), cache=True, environ=environ)
    with pytest.raises(CacheUnavailable, match="cannot be made"):
        start_facts(str(root), bwrap="/usr/bin/bwrap", environ=environ)


def test_no_home_and_no_cache_base_refuses_a_cache(tmp_path: Path) -> None:
    with pytest.raises(CacheUnavailable, match="no home or cache directory"):
        start_facts(str(tmp_path), cache=True, environ={"HOME": "/"})
    with pytest.raises(CacheUnavailable, match="no home or cache directory"):
        start_facts(str(tmp_path), bwrap="/usr/bin/bwrap", environ={"HOME": "/"})


@pytest.mark.parametrize("name", ["/abs", "../up", "a/../b", "", ".", "a//b"])
def test_an_allow_read_name_that_leaves_the_home_or_is_not_normal_is_refused(
    tmp_path: Path, name: str
) -> None:
    """``allow_read`` holds normal paths relative to the home, nothing else."""
    with pytest.raises(ValueError, match="relative to the home"):
        start_facts(str(tmp_path), allow_read=[name], environ={"HOME": str(tmp_path)})


def test_an_allow_read_name_beneath_the_home_is_kept(tmp_path: Path) -> None:
    """Any place beneath the home, a default credential or not."""
    facts = start_facts(
        str(tmp_path), allow_read=[".bashrc", "notes/a"], environ={"HOME": str(tmp_path)}
    )
    assert (".bashrc", "notes/a") == facts.allow_read


def test_the_hosts_ca_files_and_path_directories_beneath_the_home_are_shown(
    tmp_path: Path,
) -> None:
    """``SSL_CERT_FILE`` (anywhere) and ``PATH`` entries beneath the home; never the home,
    an absent one or a relative one."""
    home = tmp_path / "home"
    (home / "tools" / "bin").mkdir(parents=True)
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    environ = {
        "HOME": str(home),
        "SSL_CERT_FILE": str(ca),
        "NODE_EXTRA_CA_CERTS": str(tmp_path / "absent.pem"),
        "PATH": os.pathsep.join([str(home / "tools" / "bin"), str(home), "rel", "/usr/bin"]),
    }
    facts = start_facts(str(tmp_path), environ=environ)
    assert {str(ca), str(home / "tools" / "bin")} <= set(facts.shown)
    assert not {str(home), str(tmp_path / "absent.pem"), "/usr/bin"} & set(facts.shown)


def test_a_path_directory_that_holds_a_credential_place_is_not_shown(tmp_path: Path) -> None:
    """``~/.config`` on ``PATH`` would show ``~/.config/rclone``: only the narrow ones are."""
    home = tmp_path / "home"
    for name in (".config", ".local", ".local/share", ".local/bin", ".config/tool/bin"):
        (home / name).mkdir(parents=True, exist_ok=True)
    entries = [home / ".config", home / ".local", home / ".local/bin", home / ".config/tool/bin"]
    environ = {"HOME": str(home), "PATH": os.pathsep.join(map(str, entries))}
    shown = set(start_facts(str(tmp_path), environ=environ).shown)
    assert {str(home / ".local/bin"), str(home / ".config/tool/bin")} <= shown
    assert not {str(home / ".config"), str(home / ".local")} & shown


def test_the_no_follow_walk_refuses_a_link_and_a_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    (tmp_path / "file").write_bytes(b"")
    fd = open_no_follow(str(tmp_path / "dir"))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "dir"))
    finally:
        os.close(fd)
    for bad in ("link", "file", "missing"):
        with pytest.raises(OSError):  # noqa: PT011 - ELOOP, ENOTDIR, ENOENT: any refusal
            open_no_follow(str(tmp_path / bad))


def test_the_path_directories_shown_are_bounded(tmp_path: Path) -> None:
    """``MAXIMUM_PATH_DIRECTORIES`` of them, in ``PATH``'s order; the rest are not shown."""
    from spice.agent.coding._posix._facts import MAXIMUM_PATH_DIRECTORIES  # noqa: PLC0415

    home = tmp_path / "home"
    directories = [home / f"d{n}" for n in range(MAXIMUM_PATH_DIRECTORIES + 1)]
    for directory in directories:
        directory.mkdir(parents=True)
    environ = {"HOME": str(home), "PATH": os.pathsep.join(map(str, directories))}
    shown = start_facts(str(tmp_path), environ=environ).shown
    assert [str(d) for d in directories[:MAXIMUM_PATH_DIRECTORIES]] == [
        path for path in shown if path.startswith(str(home))
    ]
