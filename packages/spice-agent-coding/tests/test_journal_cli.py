"""``spice-coding history`` and ``undo`` (13.2): exit codes, JSON, a real journal."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from spice.agent.coding._cli import run
from spice.agent.coding._settings._journal_bounds import JournalBounds
from spice.agent.coding._settings._resolve import Flags, resolve_settings
from spice.agent.coding._settings._values import SettingsError
from spice.agent.tools.coding._changes import Change, Judged
from spice.agent.tools.coding._journal import Journal
from spice.agent.tools.coding._journal_records import FORMAT, journal_directory


def test_history_and_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, stage, state = tmp_path / "w", tmp_path / "s", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    (stage / "new.py").write_text("x\n")
    journal = Journal.open(str(root))
    journal.commit(
        "shell",
        "c1",
        Judged((Change("new.py", "added", "file", None, 0o644, str(stage / "new.py")),)),
        0,
    )
    assert run(["--root", str(root), "history", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert [(e["id"], e["tool"], e["paths"], e["undone"]) for e in entries] == [
        (1, "shell", ["A new.py"], False)
    ]
    assert run(["--root", str(root), "undo", "99"]) == 2
    assert "no entry 99" in capsys.readouterr().err
    (root / "new.py").write_text("user\n")
    assert run(["--root", str(root), "undo", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["refused"] == ["new.py"]
    assert run(["--root", str(root), "undo", "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["restored"] == ["new.py"]
    assert not (root / "new.py").exists()


# -- replace, undone by the real command line ----------------------------------------------

SCRIPT = Path(sys.executable).parent / "spice-coding"
WAIT_SECONDS = 60.0


def spice(state: Path, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``spice-coding`` in a child process, its journal beneath ``state``."""
    environ = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [str(SCRIPT), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=environ,
        timeout=WAIT_SECONDS,
        check=False,
    )


def tree_of(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, b"" if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_a_replace_edit_and_create_undone_with_to_by_the_real_cli(tmp_path: Path) -> None:
    root, state = tmp_path / "w", tmp_path / "state"
    root.mkdir()
    (root / "a.py").write_bytes(b"print('old')\n")
    (root / "a.py").chmod(0o751)
    before = tree_of(root)
    old = hashlib.sha256(b"print('old')\n").hexdigest()
    edit = {"path": "a.py", "content": "print('new')\n", "expected_sha256": old}
    create = {"path": "pkg/sub/new.py", "content": "x = 1\n", "create": True}
    for arguments in (edit, create):
        done = spice(state, "--root", str(root), "call", "replace", json.dumps(arguments))
        assert 0 == done.returncode, done.stderr
        assert "cli-1" == json.loads(done.stdout)["call_id"]
    assert before != tree_of(root)
    history = spice(state, "--root", str(root), "history", "--json")
    entries = json.loads(history.stdout)["entries"]
    assert ["replace", "replace"] == [entry["tool"] for entry in entries]
    undone = spice(state, "--root", str(root), "undo", "--to", str(entries[-1]["id"]), "--json")
    assert (0, []) == (undone.returncode, json.loads(undone.stdout)["refused"])
    assert before == tree_of(root)
    again = spice(state, "--root", str(root), "undo", "--json")  # the undo undone
    assert 0 == again.returncode
    assert b"print('new')\n" == (root / "a.py").read_bytes()
    assert b"x = 1\n" == (root / "pkg/sub/new.py").read_bytes()


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_a_journal_that_cannot_be_opened_is_said_once_and_replace_still_writes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "w"
    root.mkdir()
    state = root / ".state"  # beneath the worktree: refused
    tools = spice(state, "--root", str(root), "--sandbox", "off", "tools")
    assert 0 == tools.returncode
    report = json.loads(tools.stdout)["journal"]
    assert "not journaled" == report["replace"]
    lines = [line for line in tools.stderr.splitlines() if "journal" in line]
    assert 1 == len(lines)
    assert "lies within the worktree" in lines[0]
    assert str(state) in lines[0]
    created = spice(
        state,
        "--root",
        str(root),
        "call",
        "replace",
        '{"path": "n.txt", "content": "n", "create": true}',
    )
    assert b"n" == (root / "n.txt").read_bytes(), created.stderr
    assert not (state / "spice-coding" / "journals").exists()


# -- bad input: one line naming it, exit 2, nothing changed --------------------------------


def _journaled(root: Path, state: Path) -> Journal:
    (root / "f.txt").write_text("before\n")
    stage = root.parent / "stage"
    stage.mkdir(exist_ok=True)
    (stage / "f.txt").write_text("after\n")
    journal = Journal.open(str(root), state_home=str(state))
    change = Change("f.txt", "modified", "file", "file", 0o644, str(stage / "f.txt"))
    opened = max(journal.opening(), (root / "f.txt").lstat().st_ctime_ns + 1)
    assert journal.commit("shell", "c1", Judged((change,)), opened).entry == 1
    return journal


@dataclass(frozen=True)
class Served:
    """A worktree ``root`` whose journal beneath ``state`` (``$XDG_STATE_HOME``) holds one
    entry: ``f.txt`` from ``before`` to ``after``."""

    root: Path
    state: Path
    journal: Journal


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Served:
    root, state = tmp_path / "w", tmp_path / "state"
    root.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return Served(root, state, _journaled(root, state))


def _refused(root: Path, state: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    code = run(["--root", str(root), *argv])
    captured = capsys.readouterr()
    assert (2, "") == (code, captured.out)
    return captured.err.splitlines()


@pytest.mark.parametrize("command", [("undo", "7"), ("undo", "--to", "7"), ("undo", "0")])
def test_an_id_not_in_the_journal(
    served: Served,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
) -> None:
    root, state = served.root, served.state
    lines = _refused(root, state, capsys, *command)
    assert [f"spice-coding: no entry {command[-1]} in the journal"] == [
        line.partition(" in the journal")[0] + " in the journal" for line in lines
    ]
    assert "after\n" == (root / "f.txt").read_text()


def test_a_journal_written_by_a_newer_version(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    root, state = served.root, served.state
    journal = served.journal
    entry = Path(journal.directory, "entries", f"{1:012d}.json")
    value = json.loads(entry.read_text())
    entry.write_text(json.dumps({**value, "format": FORMAT + 1}))
    for command in (("undo",), ("history",)):
        lines = _refused(root, state, capsys, *command)
        assert 1 == len(lines)
        assert "was written by a newer version of spice-coding" in lines[0]
        assert journal_directory(str(state), str(root.resolve())) in lines[0]
    assert "after\n" == (root / "f.txt").read_text()


def test_a_journal_beneath_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "f.txt").write_text("mine\n")
    state = root / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    lines = _refused(root, state, capsys, "undo")
    assert 1 == len(lines)
    assert "lies within the worktree; refused" in lines[0]
    assert not state.exists()
    assert "mine\n" == (root / "f.txt").read_text()


def test_a_journal_in_a_place_others_may_write(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    root, state = served.root, served.state
    state.chmod(0o777)  # no sticky bit: another user may rename the journal away
    lines = _refused(root, state, capsys, "undo")
    assert 1 == len(lines)
    assert "lies in a place another user may write; refused" in lines[0]
    assert "after\n" == (root / "f.txt").read_text()
    state.chmod(0o1777)  # sticky: others may not rename what is not theirs
    assert 0 == run(["--root", str(root), "undo"])
    assert "before\n" == (root / "f.txt").read_text()


def test_a_journal_another_user_may_write(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    root, state = served.root, served.state
    journal = served.journal
    Path(journal.directory).chmod(0o770)
    lines = _refused(root, state, capsys, "undo")
    assert [
        f"spice-coding: the journal {journal.directory} may be written by another user; refused"
    ] == lines
    assert "after\n" == (root / "f.txt").read_text()
    Path(journal.directory).chmod(0o700)
    assert 0 == run(["--root", str(root), "undo"])


# -- the bounds: flags and the settings file, both sides -----------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("1M", 1024**2),
        ("1048576", 1024**2),
        ("1T", 1024**4),
        ("2g", 2 * 1024**3),
        ("1048575", None),
        ("1025G", None),
        ("", None),
        ("-1", None),
        ("1.5G", None),
        ("9" * 40, None),
    ],
)
def test_journal_max_bytes_flag_both_sides(given: str, expected: int | None) -> None:
    flags = Flags(root="/w", journal_max_bytes=given)
    if expected is None:
        with pytest.raises(SettingsError) as raised:
            resolve_settings(flags, {"HOME": "/nonexistent"})
        assert str(raised.value).startswith("--journal-max-bytes must be")
        assert given not in str(raised.value) or not given
        return
    assert expected == resolve_settings(flags, {"HOME": "/nonexistent"}).journal.max_bytes


@pytest.mark.parametrize(
    ("given", "expected"),
    [("1", 1), ("3650", 3650), ("7", 7), ("0", None), ("3651", None), ("x", None)],
)
def test_journal_max_age_flag_both_sides(given: str, expected: int | None) -> None:
    flags = Flags(root="/w", journal_max_age=given)
    if expected is None:
        with pytest.raises(SettingsError, match=r"^--journal-max-age must be"):
            resolve_settings(flags, {"HOME": "/nonexistent"})
        return
    assert expected == resolve_settings(flags, {"HOME": "/nonexistent"}).journal.max_age_days


def test_the_defaults_and_the_flag_over_the_file(tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text('journal_max_bytes = "2M"\njournal_max_age = 30\n')
    settings.chmod(0o600)
    environ = {"HOME": "/nonexistent"}
    plain = resolve_settings(Flags(root="/w"), environ)
    assert JournalBounds(1024**3, 7) == plain.journal
    filed = resolve_settings(Flags(root="/w", settings=str(settings)), environ)
    assert JournalBounds(2 * 1024**2, 30) == filed.journal
    flagged = resolve_settings(
        Flags(root="/w", settings=str(settings), journal_max_age="2"), environ
    )
    assert JournalBounds(2 * 1024**2, 2) == flagged.journal


@pytest.mark.parametrize(
    ("text", "key", "what"),
    [
        ("journal_max_bytes = 1048575\n", "journal_max_bytes", "must be at least 1M"),
        ('journal_max_bytes = "2P"\n', "journal_max_bytes", "must be a number of bytes"),
        ("journal_max_bytes = true\n", "journal_max_bytes", "must be a whole number of bytes"),
        ("journal_max_age = 0\n", "journal_max_age", "must be between 1 and 3650"),
        ("journal_max_age = 3651\n", "journal_max_age", "must be between 1 and 3650"),
        ('journal_max_age = "7"\n', "journal_max_age", "must be a whole number"),
    ],
)
def test_the_settings_files_bounds_refused_by_file_line_and_key(
    tmp_path: Path, text: str, key: str, what: str
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("# the journal\n" + text)
    settings.chmod(0o600)
    with pytest.raises(SettingsError) as raised:
        resolve_settings(Flags(root="/w", settings=str(settings)), {"HOME": "/nonexistent"})
    assert str(raised.value).startswith(f"settings file {settings}, line 2: {key}")
    assert what in str(raised.value)


def test_history_and_undo_take_the_flags(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    root = served.root
    assert 0 == run(["--root", str(root), "history", "--journal-max-age", "1", "--json"])
    assert 1 == len(json.loads(capsys.readouterr().out)["entries"])
    assert 2 == run(["--root", str(root), "history", "--journal-max-age", "0"])
    assert "--journal-max-age must be between 1 and 3650" in capsys.readouterr().err


# -- cache list and cache clean -----------------------------------------------------------

_HOLDER = """
import sys
from spice.agent.coding._journal_cli import open_served_journal
from spice.agent.coding._settings._journal_bounds import JournalBounds
served = open_served_journal(sys.argv[1], JournalBounds())
sys.stdout.write("held\\n"); sys.stdout.flush()
sys.stdin.read()
"""


def test_cache_list_shows_the_journal_and_clean_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, state = tmp_path / "w", tmp_path / "state"
    root.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    journal = _journaled(root, state)
    assert 0 == run(["cache", "list"])
    listed = json.loads(capsys.readouterr().out)
    rows = [(j["journal"], j["root"], j["in_use"]) for j in listed["journals"]]
    assert [(journal.directory, str(root.resolve()), False)] == rows
    assert journal.size() == listed["journals"][0]["size_bytes"] > 0
    # A running server holds it: never removed, and said so.
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )
    try:
        assert holder.stdout is not None
        assert b"held\n" == holder.stdout.readline()
        assert 2 == run(["--root", str(root), "cache", "clean"])
        assert "is in use by a running server" in capsys.readouterr().err
        assert 0 == run(["cache", "clean", "--all"])
        assert [journal.directory] == json.loads(capsys.readouterr().out)["journals"]["in_use"]
        assert Path(journal.directory).is_dir()
    finally:
        holder.communicate(b"", timeout=WAIT_SECONDS)
    assert 0 == run(["--root", str(root), "cache", "clean"])
    answer = json.loads(capsys.readouterr().out)
    assert (journal.directory, journal.directory) == (answer["journal"], answer["journal_removed"])
    assert not Path(journal.directory).exists()
    assert 0 == run(["--root", str(root), "cache", "clean"])
    assert json.loads(capsys.readouterr().out)["journal_removed"] is None


def test_history_in_words_names_each_entry_and_what_was_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--json``: one line an entry, newest first, an undone one marked; and an undo
    in words names what came back."""
    root, stage, state = tmp_path / "w", tmp_path / "s", tmp_path / "state"
    root.mkdir()
    stage.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    (stage / "a.py").write_text("a\n")
    journal = Journal.open(str(root))
    journal.commit(
        "shell",
        None,
        Judged((Change("a.py", "added", "file", None, 0o644, str(stage / "a.py")),)),
        0,
    )
    assert run(["--root", str(root), "undo"]) == 0
    assert "a.py" in capsys.readouterr().out
    assert run(["--root", str(root), "history"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "undo" in lines[0]
    assert "shell" in lines[1]
    assert "(undone)" in lines[1]
    assert not (root / "a.py").exists()
