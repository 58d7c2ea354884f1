"""The join's guard (``_posix._guard``) and a new repository's config filter
(``_gitconfig``) on real files: bounds on both sides, links never followed, records."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._posix import _guard, _scan
from spice.agent.coding._posix._facts import place_of
from spice.agent.coding._posix._guard import SHOWN_BYTES, Guard, server_guard, shown
from spice.agent.coding._posix._plan import StartFacts
from spice.agent.coding._posix._putback import put_back
from spice.agent.coding._posix._scan import ENTRY_BYTES, GIT_DEPTH, SCAN_DEPTH, Known, scan
from spice.agent.tools.coding import ProtectedPaths, _gitconfig
from spice.agent.tools.coding._gitconfig import filtered, ordinary_url

STANDARD = ProtectedPaths.default()

# -- the config filter ----------------------------------------------------------------------

GIT_INIT = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    "\tlogallrefupdates = true\n"
)


def test_git_init_and_remote_add_are_kept() -> None:
    text = (
        GIT_INIT + '[remote "origin"]\n\turl = https://example.org/r.git\n'
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
        '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n'
        "[user]\n\tname = A\n\temail = a@example.org\n"
    )
    assert filtered(text) == text


@pytest.mark.parametrize(
    "planted",
    [
        "[core]\n\tfsmonitor = touch /x\n",
        "[core]\n\thooksPath = /tmp\n",
        "[core]\n\tsshCommand = touch /x\n",
        "[core]\n\tpager = touch /x\n",
        "[core]\n\teditor = touch /x\n",
        "[core]\n\tworktree = /elsewhere\n",
        '[filter "x"]\n\tclean = touch /x\n',
        "[diff]\n\texternal = touch /x\n",
        "[include]\n\tpath = /elsewhere/config\n",
        '[includeIf "gitdir:/"]\n\tpath = /elsewhere/config\n',
        '[remote "e"]\n\turl = ext::sh -c touch% /x\n',
        '[remote "e"]\n\turl = fd::3\n',
        '[remote "e"]\n\turl = --upload-pack=touch /x\n',
        '[remote "e"]\n\tuploadpack = touch /x\n',
        '[remote "e"]\n\tvcs = x\n',
        '[submodule "s"]\n\tupdate = !touch /x\n',
        "[alias]\n\tst = !touch /x\n",
        "[core.fsmonitor]\n\tx = 1\n",
        "[core]\n\tfsmonitor = \\\n\ttouch /x\n",
        '[core]\n\tfsmonitor = "touch /x"\n',
        "[user]\n\tname = a\n[core]\nfsmonitor=touch /x\n",
        "[user] name = a\n",
    ],
)
def test_what_runs_a_program_is_dropped(planted: str) -> None:
    kept = filtered(GIT_INIT + planted)
    assert kept.startswith(GIT_INIT)
    assert "touch" not in kept
    assert "elsewhere" not in kept
    assert "ext::" not in kept


def test_a_config_beyond_the_bound_is_dropped_whole() -> None:
    padding = "#" * (_gitconfig.MAXIMUM_CONFIG_BYTES - len(GIT_INIT))
    assert filtered(GIT_INIT + padding) == GIT_INIT
    assert filtered(GIT_INIT + padding + "#") == ""


def test_ordinary_urls() -> None:
    for url in ("https://h/r", "ssh://h/r", "git@h:r.git", "../r", "/srv/r", "file:///srv/r"):
        assert ordinary_url(url), url
    for url in ("", "ext::x", "fd::1", "foo::https://h/r", "-u", "gopher://h/r"):
        assert not ordinary_url(url), url


@given(st.text(max_size=400))
def test_the_filter_keeps_only_listed_keys_and_is_idempotent(text: str) -> None:
    kept = filtered(text)
    assert filtered(kept) == kept
    section = ""
    for line in kept.splitlines():
        if line.startswith("["):
            section = line[1:].split()[0].strip("]")
            assert section in _gitconfig.ALLOWED
            continue
        key = line.strip().split(" ", 1)[0]
        allowed = _gitconfig.ALLOWED[section]
        assert allowed is None or key in allowed


# -- the scan -------------------------------------------------------------------------------


def _tree(root: Path, relative: str, data: bytes = b"x") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_the_scan_sees_protected_paths_to_its_depth_and_no_deeper(tmp_path: Path) -> None:
    at_bound = "/".join(f"d{index}" for index in range(SCAN_DEPTH)) + "/.envrc"
    beyond = "/".join(f"d{index}" for index in range(SCAN_DEPTH + 1)) + "/.envrc"
    _tree(tmp_path, at_bound)
    _tree(tmp_path, beyond)
    _tree(tmp_path, "src/a.py")
    found = scan([str(tmp_path)], STANDARD)
    assert str(tmp_path / at_bound) in found.entries
    assert str(tmp_path / beyond) not in found.entries
    assert str(tmp_path / "src/a.py") not in found.entries


def test_inside_git_the_scan_follows_modules_to_its_depth(tmp_path: Path) -> None:
    names = "/".join(f"m{index}" for index in range(GIT_DEPTH - 2))
    at_bound = f".git/modules/{names}/config"
    _tree(tmp_path, at_bound)
    _tree(tmp_path, ".git/objects/ab/config")  # objects are never entered
    _tree(tmp_path, ".git/objects/info/alternates")
    _tree(tmp_path, ".git/refs/heads/config")
    found = scan([str(tmp_path)], STANDARD)
    assert str(tmp_path / at_bound) in found.entries
    assert str(tmp_path / ".git/objects/info/alternates") in found.entries
    assert str(tmp_path / ".git/objects/ab/config") not in found.entries
    assert str(tmp_path / ".git/refs/heads/config") not in found.entries
    deeper = f".git/modules/{names}/n/o/config"
    _tree(tmp_path, deeper)
    assert str(tmp_path / deeper) not in scan([str(tmp_path)], STANDARD).entries


def test_the_entry_bound_makes_the_scan_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(10):
        _tree(tmp_path, f"f{index}")
    monkeypatch.setattr(_scan, "SCAN_ENTRIES", 10)
    assert scan([str(tmp_path)], STANDARD).complete
    monkeypatch.setattr(_scan, "SCAN_ENTRIES", 9)
    assert not scan([str(tmp_path)], STANDARD).complete


def test_a_file_beyond_entry_bytes_keeps_its_digest_and_is_removed_if_changed(
    tmp_path: Path,
) -> None:
    small = _tree(tmp_path, ".mcp.json", b"a" * ENTRY_BYTES)
    large = _tree(tmp_path, ".envrc", b"b" * (ENTRY_BYTES + 1))
    baseline = scan([str(tmp_path)], STANDARD)
    assert baseline.entries[str(small)].data is not None
    assert baseline.entries[str(large)].data is None
    small.write_bytes(b"changed")
    large.write_bytes(b"changed")
    put_back(baseline, scan([str(tmp_path)], STANDARD))
    assert small.read_bytes() == b"a" * ENTRY_BYTES
    assert not large.exists()


def test_put_back_never_follows_a_link(tmp_path: Path) -> None:
    """A command swapped ``.claude`` for a link to a directory outside: the put-back
    writes into a real ``.claude`` again, nothing outside changes."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    settings = _tree(root, ".claude/settings.json", b"{}")
    baseline = scan([str(root)], STANDARD)
    (root / ".claude").rename(tmp_path / "moved")
    (root / ".claude").symlink_to(outside)
    restored = put_back(baseline, scan([str(root)], STANDARD))
    assert str(root / ".claude") in restored
    assert (root / ".claude").is_dir()
    assert not (root / ".claude").is_symlink()
    assert settings.read_bytes() == b"{}"
    assert list(outside.iterdir()) == []


def test_modes_are_put_back(tmp_path: Path) -> None:
    hook = _tree(tmp_path, ".git/hooks/pre-commit", b"#!/bin/sh\n")
    hook.chmod(0o644)
    baseline = scan([str(tmp_path)], STANDARD)
    hook.chmod(0o755)
    assert put_back(baseline, scan([str(tmp_path)], STANDARD)) == [str(hook)]
    assert hook.stat().st_mode & 0o777 == 0o644


def test_an_empty_policy_scans_nothing(tmp_path: Path) -> None:
    _tree(tmp_path, ".mcp.json")
    assert scan([str(tmp_path)], ProtectedPaths()).entries == {}
    guard = Guard([str(tmp_path)], ProtectedPaths())
    assert (guard.begin(), guard.end(), guard.repair()) == ((), (), ())


# -- the record -----------------------------------------------------------------------------


def test_a_broken_or_foreign_record_is_dropped_harmlessly(tmp_path: Path) -> None:
    root = tmp_path / "root"
    records = tmp_path / "records"
    records.mkdir()
    settings = _tree(root, ".mcp.json", b"{}")
    (records / "1-0.json").write_bytes(b"not json")
    (records / "x-0.json").write_text(json.dumps({"places": [], "entries": {}}))
    (records / "other.txt").write_text("kept")
    Guard([str(root)], STANDARD, str(records)).repair()
    assert settings.read_bytes() == b"{}"
    assert sorted(os.listdir(records)) == ["other.txt", "x-0.json"]


def test_a_live_servers_record_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    records = tmp_path / "records"
    records.mkdir()
    _tree(root, ".git/HEAD", b"ref: refs/heads/main\n")
    first = Guard([str(root)], STANDARD, str(records))
    first.begin()
    planted = _tree(root, ".git/commondir", b"../evil\n")
    # Another server (another pid would be live): this process's record is not its own.
    second = Guard([str(root)], STANDARD, str(records))
    second._record_name = "other.json"
    second.repair()
    assert planted.exists()
    assert first.end() == (str(planted),)
    assert not planted.exists()
    assert os.listdir(records) == []


def test_shown_names_paths_within_their_bounds() -> None:
    assert shown(["/r/a/.envrc", "/w/.mcp.json"], "/r") == ("a/.envrc", "/w/.mcp.json")
    assert shown(["/r/" + "x" * 2000, "/r/a\nb"], "/r") == ("...", "...")
    many = shown([f"/r/{'y' * 1000}{index}" for index in range(3)], "/r")
    assert len(many) == 2
    assert sum(len(name) for name in many) <= SHOWN_BYTES


def test_what_did_not_change_is_not_read_again_and_every_change_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``known``, an unchanged directory is not listed again and an unchanged file
    not read again; a change (the change time moves, whatever the command does to the
    other times) is seen: a rewrite of the same size with its old mtime, a new file."""
    monkeypatch.setattr(_scan, "RACY_NS", -1)  # trust every status for this test
    _tree(tmp_path, "a/b/x.py")
    mcp = _tree(tmp_path, ".mcp.json", b"{}")
    known = Known()
    first = scan([str(tmp_path)], STANDARD, known=known)
    listed: list[object] = []
    real = os.scandir

    def counted(path: str) -> object:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", counted)
    again = scan([str(tmp_path)], STANDARD, known=known)
    assert listed == []
    assert again.entries == first.entries
    before = mcp.stat()
    mcp.write_bytes(b"[]")
    os.utime(mcp, ns=(before.st_atime_ns, before.st_mtime_ns))
    _tree(tmp_path, "a/b/.envrc")
    changed = scan([str(tmp_path)], STANDARD, known=known)
    assert changed.entries[str(mcp)].data == b"[]"
    assert str(tmp_path / "a/b/.envrc") in changed.entries


def test_a_recent_change_is_read_again_whatever_its_status(tmp_path: Path) -> None:
    """Within ``RACY_NS`` of a change the status is not trusted (a clock tick may hide a
    second change): the file is read again."""
    mcp = _tree(tmp_path, ".mcp.json", b"{}")
    known = Known()
    scan([str(tmp_path)], STANDARD, known=known)
    status, entry = known.entries[str(mcp)]
    assert entry is not None
    known.entries[str(mcp)] = (status, dataclasses.replace(entry, data=b"stale"))
    assert scan([str(tmp_path)], STANDARD, known=known).entries[str(mcp)].data == b"{}"


def test_a_removed_records_directory_is_made_again_and_an_unwritable_one_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    _tree(root, ".mcp.json", b"{}")
    records = tmp_path / "records"
    guard = Guard([str(root)], STANDARD, str(records))
    guard.begin()
    assert len(os.listdir(records)) == 1  # made again, the record in it
    assert guard.end() == ()
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    stuck = Guard([str(root)], STANDARD, str(blocked / "records"))
    for _ in range(2):
        stuck.begin()  # the call goes on without a record
        (root / ".mcp.json").write_bytes(b"planted")
        assert stuck.end() == (str(root / ".mcp.json"),)
    assert (root / ".mcp.json").read_bytes() == b"{}"
    assert [record.getMessage() for record in caplog.records] == [_guard.UNRECORDED]


def test_a_defect_in_the_put_back_still_ends_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of calls and the record never outlive a call whose put-back failed."""
    root = tmp_path / "root"
    _tree(root, ".mcp.json", b"{}")
    records = tmp_path / "records"
    guard = Guard([str(root)], STANDARD, str(records))
    guard.begin()

    def broken(_baseline: object, _now: object) -> list[str]:
        raise RuntimeError("defect")

    monkeypatch.setattr(_guard, "put_back", broken)
    with pytest.raises(RuntimeError):
        guard.end()
    assert os.listdir(records) == []
    assert guard.end() == ()  # no baseline left: nothing to end twice


def test_the_bound_cuts_the_deepest_and_last_never_the_places_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breadth first, git directories first: a large directory beside them exhausts the
    entry bound after the place's ``.git/config``, its submodule's and ``.mcp.json``."""
    for index in range(40):
        _tree(tmp_path, f"big/sub{index}/f")
    _tree(tmp_path, ".mcp.json")
    _tree(tmp_path, ".git/config")
    _tree(tmp_path, ".git/modules/s/config")
    monkeypatch.setattr(_scan, "SCAN_ENTRIES", 12)
    found = scan([str(tmp_path)], STANDARD)
    assert not found.complete
    for name in (".mcp.json", ".git/config", ".git/modules/s/config"):
        assert str(tmp_path / name) in found.entries, name


def test_a_second_server_adopts_a_running_servers_baseline(tmp_path: Path) -> None:
    """Two servers on one root: the second begins while the first one's command has
    planted ``.mcp.json`` and made ``.envrc``; the first's join puts them back, and the
    second's join must not plant them again. What did not change stays the second's own."""
    root = tmp_path / "root"
    mcp = _tree(root, ".mcp.json", b"{}")
    kept = _tree(root, ".claude/settings.json", b"mine")
    records = tmp_path / "records"
    first = Guard([str(root)], STANDARD, str(records))
    second = Guard([str(root)], STANDARD, str(records))
    second._record_name = "999999999-0.json"  # another server (this process is the first)
    first.begin()
    mcp.write_bytes(b"planted")
    _tree(root, ".envrc", b"planted")
    second.begin()
    assert set(first.end()) == {str(mcp), str(root / ".envrc")}
    assert second.end() == ()
    assert mcp.read_bytes() == b"{}"
    assert not (root / ".envrc").exists()
    assert kept.read_bytes() == b"mine"


# -- one guard per process and root, across a reload's rebuild -------------------------------


def _facts_of(root: Path, records: Path, policy: ProtectedPaths = STANDARD) -> StartFacts:
    return StartFacts((place_of(str(root)),), protected=policy, records=str(records))


def test_a_rebuilt_launchers_guard_is_the_servers_one(tmp_path: Path) -> None:
    """A reload builds the launcher again: its guard is the one already guarding this root
    (one record per process), so the old launcher's last join never drops the record of a
    call the new one started; a server killed then still has its plant put back."""
    root = tmp_path / "root"
    mcp = _tree(root, ".mcp.json", b"{}")
    records = tmp_path / "records"
    before = server_guard(_facts_of(root, records), tuple)
    after = server_guard(_facts_of(root, records), tuple)  # the reload's rebuild
    before.begin()  # a call of the old launcher, still running
    after.begin()  # a call of the new launcher
    assert before.end() == ()  # the old launcher's call ends first
    assert len(os.listdir(records)) == 1  # the running call's record is kept
    mcp.write_bytes(b"planted")  # the running call plants; then the server is killed
    record = records / os.listdir(records)[0]
    record.rename(records / "999999999-0.json")  # as a dead server's record
    Guard([str(root)], STANDARD, str(records)).repair()  # the next server's start
    assert mcp.read_bytes() == b"{}"
    assert after.end() == ()  # the join of the killed server's call, never reached


def test_a_guard_follows_the_newest_policy_once_its_calls_ended(tmp_path: Path) -> None:
    """The shared guard keeps the baseline's places and policy while a call runs (a join
    compares like with like) and takes the rebuilt launcher's once the last call ended."""
    root = tmp_path / "root"
    other = tmp_path / "other"
    _tree(root, ".mcp.json", b"{}")
    envrc = _tree(other, ".envrc", b"mine")
    records = tmp_path / "records"
    guard = server_guard(_facts_of(root, records), tuple)
    guard.begin()
    wider = StartFacts(
        (place_of(str(root)), place_of(str(other))), protected=STANDARD, records=str(records)
    )
    assert server_guard(wider, tuple) is guard
    assert guard.places == (str(root),)  # a call runs: its baseline's places stay
    assert guard.end() == ()  # and the other place's existing .envrc is not "made"
    assert envrc.read_bytes() == b"mine"
    assert set(guard.places) == {str(root), str(other)}  # the last join: the newest places
    none = _facts_of(root, records, ProtectedPaths())
    assert server_guard(none, tuple) is guard
    assert not guard.active  # nothing runs: at once


def test_guards_of_two_roots_are_two(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = server_guard(_facts_of(tmp_path / "a", tmp_path / "records"), tuple)
    second = server_guard(_facts_of(tmp_path / "b", tmp_path / "records"), tuple)
    assert first is not second
    assert server_guard(None, tuple) is not server_guard(None, tuple)  # uncontained: none
