"""The stage's parts on their own (contract 13.1): what ``tools`` says of it, the stages a
dead server left, the working directory's identity through the overlay, the mount made in a
process of its own, the upper layer's view, and the commit's answers when a part fails."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding._posix._stage import _commit, _stage
from spice.agent.coding._posix._stage import _upper as _upper_module
from spice.agent.coding._posix._stage._commit import StagedCall, StageResult, commit
from spice.agent.coding._posix._stage._removal import REMOVALS
from spice.agent.coding._posix._stage._stage import Stage, remove_left, stage_place, stage_report
from spice.agent.coding._posix._stage._upper import OPAQUE, View
from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._changes import After, Change, Judged
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._judge import judge

ROOT_USER: Final = hasattr(os, "geteuid") and os.geteuid() == 0
REMOVAL_BOUND: Final = 60.0
"""Hang guard for the remover to finish (never a timing assertion)."""


def test_tools_says_where_calls_are_staged_or_why_not() -> None:
    assert stage_report(None, "no overlay here") == {"staged": False, "reason": "no overlay here"}
    assert stage_report(None, None)["reason"] == _stage.NO_NAMESPACES
    staged = stage_report("/state/stages/x", None)
    assert staged["staged"] is True
    assert staged["where"] == "/state/stages/x"
    assert "not_guaranteed" in staged


def test_the_stages_a_dead_server_left_go_and_a_live_ones_stay(tmp_path: Path) -> None:
    lower = tmp_path / "root"
    lower.mkdir()
    live = Stage.make(str(tmp_path), str(lower))
    dead = tmp_path / f"{_stage.STAGE_PREFIX}999999999-1-x"
    (dead / "upper" / "deep").mkdir(parents=True)
    (dead / "work" / "work").mkdir(parents=True)
    (dead / "work" / "work").chmod(0)  # the overlay leaves its work directory so
    other = tmp_path / "unrelated"
    other.mkdir()
    assert remove_left(str(tmp_path)) == 1
    assert not dead.exists()
    assert Path(live.path).is_dir()
    assert other.is_dir()
    assert live.remove()
    assert remove_left(str(tmp_path / "missing")) == 0


def test_the_number_of_left_stages_removed_at_once_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_stage, "MAXIMUM_LEFT_STAGES", 2)
    for index in range(3):
        (tmp_path / f"{_stage.STAGE_PREFIX}999999999-{index}-x").mkdir()
    assert remove_left(str(tmp_path)) == 2
    assert remove_left(str(tmp_path)) == 1


def test_the_working_directory_is_known_through_the_overlay(tmp_path: Path) -> None:
    """The root is the upper layer's root there; a directory beneath keeps its inode."""
    lower = tmp_path / "root"
    (lower / "sub").mkdir(parents=True)
    stage = Stage.make(str(tmp_path), str(lower))
    try:
        upper = os.stat(stage.upper).st_ino
        assert stage.workdir_identity(os.stat(lower)) == f"*:{upper}".encode()
        sub = os.stat(lower / "sub")
        assert stage.workdir_identity(sub) == f"*:{sub.st_ino}".encode()
    finally:
        assert stage.remove()


def test_an_option_string_escapes_what_overlay_splits_on() -> None:
    assert _stage._escaped("/a,b:c\\d") == b"/a\\,b\\:c\\\\d"


def test_a_sync_of_a_stage_that_is_gone_is_an_error(tmp_path: Path) -> None:
    lower = tmp_path / "root"
    lower.mkdir()
    stage = Stage.make(str(tmp_path), str(lower))
    stage.sync()  # a stage that is there: synced
    assert stage.remove()
    with pytest.raises(OSError):  # noqa: PT011 - the file system's own error
        stage.sync()


ENTER: Final = """
import os, sys
from spice.agent.coding._posix._stage._stage import Stage
stage = Stage(sys.argv[1], sys.argv[2])
stage.enter()
with open(os.path.join(sys.argv[2], "made"), "w") as file:
    file.write("x")
print(sorted(os.listdir(sys.argv[2])))
"""


def test_the_mount_is_made_in_a_process_of_its_own(tmp_path: Path) -> None:
    """``Stage.enter`` (what the spawn runs) in a fresh process: the worktree seen there is
    the overlay, what it writes lands in the upper layer, the worktree itself is untouched."""
    lower = tmp_path / "root"
    lower.mkdir()
    place = stage_place(str(lower), {"HOME": str(tmp_path)}, [str(lower)])
    if place.directory is None:
        pytest.skip(f"no stage here: {place.reason}")
    (lower / "kept").write_text("k\n")
    stage = Stage.make(place.directory, str(lower))
    try:
        done = subprocess.run(
            [sys.executable, "-c", ENTER, stage.path, str(lower)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "'made'" in done.stdout
        assert not (lower / "made").exists()
        assert (Path(stage.upper) / "made").read_text() == "x"
    finally:
        assert stage.remove()


@pytest.mark.skipif(not ROOT_USER, reason="a whiteout (a 0/0 device) is made by root here")
def test_the_view_sees_through_whiteouts_and_opaque_directories(tmp_path: Path) -> None:
    """``View``: the upper first; a whiteout hides, an opaque directory hides the lower's
    entries beneath it, a non-directory of the upper hides what lies beneath its name."""
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    lower.mkdir()
    (lower / "gone").write_text("g\n")
    (lower / "dir").mkdir()
    (lower / "dir" / "old").write_text("o\n")
    (lower / "kept").write_text("k\n")
    (lower / "shadow").mkdir()
    (lower / "shadow" / "x").write_text("x\n")
    upper.mkdir()
    os.mknod(upper / "gone", stat.S_IFCHR | 0o600, 0)
    (upper / "dir").mkdir()
    os.setxattr(upper / "dir", OPAQUE, b"y")
    (upper / "dir" / "new").write_text("n\n")
    (upper / "shadow").write_text("now a file\n")
    view = View(str(lower), str(upper))
    assert view.kind("gone") is None
    assert view.kind("kept") == "file"
    assert view.read("kept", 100) == b"k\n"
    assert view.kind("dir/old") is None  # hidden by the opaque directory
    assert view.read("dir/new", 100) == b"n\n"
    assert view.kind("shadow") == "file"
    assert view.kind("shadow/x") is None
    assert view.read("dir", 100) is None
    assert view.read("gone", 100) is None
    assert view.kind("missing/deeper") is None


def _journal(tmp_path: Path, lower: Path) -> Journal:
    return Journal.open(str(lower), state_home=str(tmp_path / "state"))


def test_a_stage_that_cannot_be_read_applies_nothing_and_says_so(tmp_path: Path) -> None:
    lower = tmp_path / "root"
    lower.mkdir()
    stage = Stage.make(str(tmp_path), str(lower))
    os.rmdir(stage.upper)  # the upper layer is gone
    result = commit(StagedCall(stage, ProtectedPaths.default(), _journal(tmp_path, lower)))
    assert result.applied is False
    assert result.failure is not None
    assert result.fields()["stage_failure"] == result.failure
    assert REMOVALS.settle(REMOVAL_BOUND)  # removed after the answer
    assert not Path(stage.path).exists()


def test_a_dry_run_lists_and_a_refused_path_is_named(tmp_path: Path) -> None:
    lower = tmp_path / "root"
    lower.mkdir()
    stage = Stage.make(str(tmp_path), str(lower))
    (Path(stage.upper) / "n.txt").write_text("n\n")
    (Path(stage.upper) / ".mcp.json").write_text("{}\n")
    journal = _journal(tmp_path, lower)
    dry = commit(StagedCall(stage, ProtectedPaths.default(), journal, dry_run=True))
    said = dry.fields()
    assert said["dry_run"] is True
    assert said["changes_applied"] is False
    assert said["protected_refused"] == [".mcp.json"]
    assert not (lower / "n.txt").exists()


def test_the_answers_lists_fit_their_byte_bounds() -> None:
    long = [f"{'d' * 200}/{n}" for n in range(16)]
    result = StageResult(
        (Change("a", "added", "file", None),),
        applied=True,
        conflicts=tuple(long),
        refused=tuple(long),
        failed=tuple(long),
        entry=3,
    )
    said = result.fields()
    for key in ("conflicts", "protected_refused", "changes_failed"):
        shown = said[key]
        assert isinstance(shown, list)
        assert sum(len(p.encode()) for p in shown) <= 4096
        assert said[f"{key}_count"] == 16
    assert said["journal_entry"] == 3


def _one_change(tmp_path: Path) -> tuple[Path, Stage]:
    lower = tmp_path / "root"
    lower.mkdir()
    stage = Stage.make(str(tmp_path), str(lower))
    (Path(stage.upper) / "n.txt").write_text("n\n")
    return lower, stage


def test_a_stage_that_cannot_be_synced_applies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing sync (the fault injected at ``Stage.sync``): nothing renamed, said so."""
    lower, stage = _one_change(tmp_path)

    def failing(self: Stage) -> None:
        raise OSError(5, "injected")

    monkeypatch.setattr(Stage, "sync", failing)
    result = commit(StagedCall(stage, ProtectedPaths.default(), _journal(tmp_path, lower)))
    assert (result.applied, result.failure) == (False, _commit.UNSYNCED)
    assert not (lower / "n.txt").exists()
    assert REMOVALS.settle(REMOVAL_BOUND)  # removed after the answer
    assert not Path(stage.path).exists()


def test_a_journal_that_fails_at_the_commit_applies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lower, stage = _one_change(tmp_path)
    journal = _journal(tmp_path, lower)

    def failing(*_: object, **__: object) -> None:
        raise JournalError("journal_unusable", "the journal /x cannot be read")

    monkeypatch.setattr(journal, "commit", failing)
    result = commit(StagedCall(stage, ProtectedPaths.default(), journal))
    assert (result.applied, result.failure) == (False, "the journal /x cannot be read")
    assert not (lower / "n.txt").exists()


def test_a_stage_past_its_entry_bound_is_refused_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lower, stage = _one_change(tmp_path)
    (Path(stage.upper) / "m.txt").write_text("m\n")
    monkeypatch.setattr(_upper_module, "MAXIMUM_UPPER_ENTRIES", 1)
    result = commit(StagedCall(stage, ProtectedPaths.default(), _journal(tmp_path, lower)))
    assert (result.applied, result.failure) == (False, _commit.TOO_LARGE)
    assert list(lower.iterdir()) == []


@pytest.mark.skipif(not ROOT_USER, reason="a whiteout (a 0/0 device) is made by root here")
def test_an_upper_layer_made_by_hand_reads_as_the_kernels_would(tmp_path: Path) -> None:
    """Every shape the reader turns into changes, on layers laid out as overlayfs lays them:
    a whiteout with and without a lower entry, an opaque directory over a lower one, kinds
    that change both ways, a copy-up with the same bytes, another mode, other bytes of the
    same size, a link to the same target, and a rename the supervisor left unfinished."""
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    for directory in (lower, upper):
        directory.mkdir()
    (lower / "gone").write_text("g\n")
    (lower / "opaque").mkdir()
    (lower / "opaque" / "old").write_text("o\n")
    (lower / "opaque" / "kept").write_text("k\n")
    (lower / "was_file").write_text("f\n")
    (lower / "was_dir").mkdir()
    (lower / "same").write_text("s\n")
    (lower / "mode").write_text("m\n")
    (lower / "bytes").write_text("aa\n")
    (lower / "link").symlink_to("same")
    os.mknod(upper / "gone", stat.S_IFCHR | 0o600, 0)
    os.mknod(upper / "never", stat.S_IFCHR | 0o600, 0)  # a whiteout over nothing
    (upper / "opaque").mkdir()
    os.setxattr(upper / "opaque", OPAQUE, b"y")
    (upper / "opaque" / "kept").write_text("k2\n")
    (upper / "was_file").mkdir()
    (upper / "was_dir").write_text("now a file\n")
    (upper / "same").write_text("s\n")
    (upper / "mode").write_text("m\n")
    (upper / "mode").chmod(0o755)
    (upper / "bytes").write_text("bb\n")
    (upper / "link").symlink_to("same")
    (upper / ".spice-rename-1").mkdir()
    read = _upper_module.read_upper(str(lower), str(upper))
    shown = {change.shown for change in read.changes}
    assert shown == {
        "D gone",
        "M opaque/kept",
        "D opaque/old",
        "M was_file/",
        "M was_dir",
        "M mode",
        "M bytes",
    }
    assert read.refused == ()


def test_the_stage_is_synced_while_the_policy_judges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync starts once the read found a change, before the judge ends (on main it
    started after: the judge below, waiting for it, failed its bounded wait)."""
    lower, stage = _one_change(tmp_path)
    started = threading.Event()
    real_sync, real_judge = Stage.sync, judge

    def sync(self: Stage) -> None:
        started.set()
        real_sync(self)

    def judging(
        policy: ProtectedPaths, place: str, changes: Sequence[Change], after: After
    ) -> Judged:
        assert started.wait(REMOVAL_BOUND), "the stage's sync had not started"
        return real_judge(policy, place, changes, after)

    monkeypatch.setattr(Stage, "sync", sync)
    monkeypatch.setattr(_commit, "judge", judging)
    result = commit(StagedCall(stage, ProtectedPaths.default(), _journal(tmp_path, lower)))
    assert result.applied
    assert (lower / "n.txt").exists()


def test_a_failed_sync_leaves_no_entry_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal has read the paths' states when the sync fails: its entry goes, so
    the next commit is entry 1 and nothing is pending."""
    lower, stage = _one_change(tmp_path)
    journal = _journal(tmp_path, lower)

    def failing(self: Stage) -> None:
        raise OSError(5, "injected")

    monkeypatch.setattr(Stage, "sync", failing)
    result = commit(StagedCall(stage, ProtectedPaths.default(), journal))
    assert result.failure == _commit.UNSYNCED
    assert os.listdir(os.path.join(journal.directory, "store")) == []
    assert os.listdir(os.path.join(journal.directory, "entries")) == []
    assert journal.recover() == ()
    monkeypatch.undo()
    (tmp_path / "again").mkdir()
    lower, again = _one_change(tmp_path / "again")
    journal = _journal(tmp_path / "again", lower)
    assert commit(StagedCall(again, ProtectedPaths.default(), journal)).entry == 1
