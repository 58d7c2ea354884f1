"""The staged worktree against the real kernel (contract 13.1): each contained call on the
namespace path writes to a stage, nothing of it is visible outside before its commit, and
the commit applies the exact list of its changes, the user's concurrent edits winning.

The reader is checked on a real overlay (``bwrap`` spawned with the stage entered, as the
launcher does); the commit through the launcher with real commands and real git.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _bwrap, _facts
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._stage import _upper
from spice.agent.coding._posix._stage._stage import Stage, stage_place
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import LaunchError, Spec
from spice.agent.tools.coding._sandbox_fields import stage_fields

BOUND: Final = 60.0
"""Hang guard for one command (never a timing assertion)."""
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
GIT: Final = shutil.which("git")

pytestmark = pytest.mark.skipif(
    not NAMESPACES.made or landlock_abi() < 1, reason="staging needs namespaces and Landlock"
)


def _environment(home: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.invalid",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }


@pytest.fixture
def policy() -> Containment:
    return dataclasses.replace(resolve_containment("workspace"), namespaces=NAMESPACES)


def _launcher(policy: Containment, root: Path, home: Path) -> PosixLauncher:
    facts = _facts.start_facts(
        str(root), (), bwrap=policy.namespaces.bwrap, environ={"HOME": str(home)}, cache=True
    )
    if facts.stages is None:
        pytest.skip(f"no stage here: {facts.unstaged}")
    return PosixLauncher.build(policy, str(root), facts=facts)


async def _run(
    chosen: PosixLauncher, root: Path, home: Path, script: str
) -> tuple[str, dict[str, object]]:
    """One contained ``sh -c script``: its output and the answer's stage fields."""
    out, err = Collect(), Collect()
    environment = tuple(f"{k}={v}" for k, v in _environment(home).items())
    spec = Spec("/bin/sh", ("-c", script), str(root), environment, b"", out, err)
    process = await chosen.start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return out.data.decode() + err.data.decode(), stage_fields(process)


def _stage_read(root: Path, home: Path, script: str) -> _upper.UpperRead:
    """Run ``script`` in ``bwrap`` over a stage entered as the launcher does; its read."""
    place = stage_place(str(root), {"HOME": str(home)}, [str(root)])
    if place.directory is None:
        pytest.skip(f"no stage here: {place.reason}")
    stage = Stage.make(place.directory, str(root))
    assert NAMESPACES.bwrap is not None
    argv = [NAMESPACES.bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--bind", str(root), str(root)]
    argv += ["--chdir", str(root), "--", "/bin/sh", "-c", script]
    try:
        done = subprocess.run(
            argv, preexec_fn=stage.enter, capture_output=True, timeout=BOUND, check=False
        )
        assert done.returncode == 0, done.stderr
        return stage.read()
    finally:
        assert stage.remove()


def _tree(root: Path) -> None:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "empty").mkdir()
    (root / "a.txt").write_text("a\n")
    (root / "same.txt").write_text("same\n")
    (root / "pkg" / "m.py").write_text("m\n")
    (root / "pkg" / "sub" / "s").write_text("s\n")
    (root / "lib" / "l.py").write_text("l\n")


def test_the_upper_is_the_exact_list_of_changes(root: Path, home: Path) -> None:
    """Every kind of change, and a copy-up that changed nothing is no change."""
    _tree(root)
    script = (
        "echo b >> a.txt; mkdir new; echo n > new/n; ln new/n new/n2; ln -s a.txt link; "
        "rm -rf lib; mkdir lib; echo x > lib/x.py; rm pkg/sub/s; chmod +x same.txt; "
        "touch pkg/m.py; rmdir empty"
    )
    read = _stage_read(root, home, script)
    shown = {change.shown: change for change in read.changes}
    assert set(shown) == {
        "M a.txt",
        "A new/",
        "A new/n",
        "A new/n2",
        "A link",
        "D lib/l.py",
        "A lib/x.py",
        "D pkg/sub/s",
        "M same.txt",
        "D empty/",
    }
    assert shown["M same.txt"].mode == 0o755
    assert shown["A new/n"].link is not None
    assert shown["A new/n"].link == shown["A new/n2"].link
    assert shown["A link"].kind == "symlink"
    assert read.refused == ()
    assert (root / "a.txt").read_text() == "a\n"  # the worktree itself is untouched
    assert (root / "lib" / "l.py").exists()


def test_a_node_that_is_no_file_is_refused(root: Path, home: Path) -> None:
    read = _stage_read(root, home, "mkfifo pipe; echo x > kept")
    assert read.refused == ("pipe",)
    assert [change.shown for change in read.changes] == ["A kept"]


def test_a_stage_past_the_entry_bound_is_refused_whole(
    root: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No bound an agent can fill hides a change: past it, the stage is refused whole."""
    monkeypatch.setattr(_upper, "MAXIMUM_UPPER_ENTRIES", 5)
    assert len(_stage_read(root, home, "touch a b c d e").changes) == 5
    with pytest.raises(_upper.StageTooLarge):
        _stage_read(root, home, "touch a b c d e f")


async def test_a_call_commits_its_changes_and_says_them(
    policy: Containment, root: Path, home: Path
) -> None:
    _tree(root)
    chosen = _launcher(policy, root, home)
    text, fields = await _run(
        chosen,
        root,
        home,
        "echo b >> a.txt; mkdir -p new/deep; echo n > new/deep/n; "
        "rm -rf pkg; chmod +x same.txt; ln -s a.txt link; echo DONE",
    )
    assert "DONE" in text
    assert fields["staged"] is True
    assert fields["changes_applied"] is True
    assert fields["changes"] == {
        "added": 4,
        "modified": 2,
        "deleted": 1,
        "paths": [
            "M a.txt",
            "A link",
            "A new/",
            "A new/deep/",
            "A new/deep/n",
            "D pkg/",
            "M same.txt",
        ],
    }
    assert (root / "a.txt").read_text() == "a\nb\n"
    assert (root / "new" / "deep" / "n").read_text() == "n\n"
    assert not (root / "pkg").exists()
    assert stat.S_IMODE((root / "same.txt").stat().st_mode) == 0o755
    assert os.readlink(root / "link") == "a.txt"


async def test_a_call_that_changes_nothing_says_so(
    policy: Containment, root: Path, home: Path
) -> None:
    _tree(root)
    _, fields = await _run(_launcher(policy, root, home), root, home, "cat a.txt; touch a.txt")
    assert fields["changes"] == {"added": 0, "modified": 0, "deleted": 0, "paths": []}
    assert fields["changes_applied"] is False


class _Gate:
    """A FIFO the test holds open for reading and writing: the command's ``read`` from it
    blocks until the test writes a line (never on time)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDWR)

    def open(self) -> None:
        os.write(self.fd, b"go\n")

    def close(self) -> None:
        os.close(self.fd)


async def _gated(
    chosen: PosixLauncher, root: Path, home: Path, script: str, gate: _Gate, meanwhile: object
) -> tuple[str, dict[str, object]]:
    """Run ``script``, which prints READY then reads the gate; ``meanwhile()`` runs
    outside while it waits; then the gate opens and the call ends."""
    out, err = Collect(), Collect()
    environment = tuple(f"{k}={v}" for k, v in _environment(home).items())
    spec = Spec("/bin/sh", ("-c", script), str(root), environment, b"", out, err)
    process = await chosen.start(spec)
    try:
        await out.contains(b"READY", BOUND)
        assert callable(meanwhile)
        meanwhile()
        gate.open()
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
        gate.close()
    return out.data.decode() + err.data.decode(), stage_fields(process)


async def test_nothing_of_a_call_is_visible_outside_before_its_commit(
    policy: Containment, root: Path, home: Path, visible_path: Path
) -> None:
    """The command writes, then waits on a gate the test holds: the worktree outside has
    nothing of it until the call ends (R6-8: no plant is live while the call runs)."""
    gate = _Gate(visible_path / "gate")

    def outside() -> None:
        assert not (root / "written").exists()
        assert not (root / "d").exists()

    script = f"echo x > written; mkdir d; echo READY; read line < {gate.path}; echo DONE"
    text, fields = await _gated(_launcher(policy, root, home), root, home, script, gate, outside)
    assert "DONE" in text
    assert (root / "written").read_text() == "x\n"
    assert (root / "d").is_dir()
    assert fields["changes_applied"] is True


async def test_the_users_edit_made_during_the_call_wins(
    policy: Containment, root: Path, home: Path, visible_path: Path
) -> None:
    """R6-10: the call rewrites a.txt and b.txt; meanwhile the user edits a.txt outside.
    The user's a.txt stays and is listed in ``conflicts``; b.txt is the call's."""
    _tree(root)
    (root / "b.txt").write_text("b\n")
    gate = _Gate(visible_path / "gate")

    def edit() -> None:
        (root / "a.txt").write_text("user\n")

    script = f"echo READY; read line < {gate.path}; echo call > a.txt; echo call > b.txt"
    _, fields = await _gated(_launcher(policy, root, home), root, home, script, gate, edit)
    assert (root / "a.txt").read_text() == "user\n"
    assert (root / "b.txt").read_text() == "call\n"
    assert fields["conflicts"] == ["a.txt"]
    assert fields["conflicts_count"] == 1


@pytest.mark.skipif(GIT is None, reason="needs git")
async def test_a_filled_bound_does_not_keep_a_planted_commondir(
    policy: Containment, root: Path, home: Path, visible_path: Path
) -> None:
    """R6-1: 4,100 files in a new ``.claude/`` beside a ``.git/commondir`` pointing at a
    copy with a planted ``core.fsmonitor``; the user's git runs outside afterwards."""
    assert GIT is not None
    env = _environment(home)
    subprocess.run(  # noqa: ASYNC221 - before the call, nothing else runs
        [GIT, "init", "-q", "-b", "main"], cwd=root, env=env, check=True
    )
    (root / "a.txt").write_text("a\n")
    marker = visible_path / "MARKER"
    script = (
        "mkdir .claude && cd .claude && seq 1 4100 | xargs touch && cd .. && "
        "cp -r .git evil && "
        f"printf '[core]\\n\\tfsmonitor = touch {marker}; false\\n' >> evil/config && "
        f"echo {root}/evil > .git/commondir; echo DONE"
    )
    text, fields = await _run(_launcher(policy, root, home), root, home, script)
    assert "DONE" in text
    assert not (root / ".git" / "commondir").exists()
    assert not (root / ".claude").exists()
    subprocess.run(  # noqa: ASYNC221 - after the call: the user's git, outside
        [GIT, "status"], cwd=root, env=env, capture_output=True, check=False
    )
    assert not marker.exists()
    refused = fields["protected_refused"]
    assert isinstance(refused, list)
    assert ".git/commondir" in refused
    assert ".claude" in refused
    assert not any(path.startswith(".claude/") for path in refused)


def test_the_stage_is_on_the_worktrees_device_or_says_why(root: Path, home: Path) -> None:
    """A state directory beneath the worktree cannot hold its stages."""
    inside = stage_place(str(root), {"XDG_STATE_HOME": str(root / "state")}, [str(root)])
    assert inside.directory is None
    assert inside.reason is not None
    assert "writable place" in inside.reason
    relative = stage_place(str(root), {"XDG_STATE_HOME": "state", "HOME": str(home)}, [str(root)])
    assert relative.directory is not None
    assert relative.directory.startswith(str(home))
    assert sys.platform.startswith("linux")


async def test_a_staged_call_is_journaled_and_undone_byte_for_byte(
    policy: Containment, root: Path, home: Path
) -> None:
    """Contract 13.2 through a real staged call: its answer's ``journal_entry`` is the
    journal's entry, and undoing it puts back every path, mode for mode."""
    _tree(root)
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    before = _snapshot(root)
    chosen = _launcher(policy, root, home)
    _, fields = await _run(chosen, root, home, "rm -rf pkg run.sh; echo z > a.txt; mkdir n")
    assert fields["changes_applied"] is True
    entry = fields["journal_entry"]
    assert isinstance(entry, int)
    journal = chosen._facts.journal if chosen._facts is not None else None
    assert journal is not None
    assert [summary.id for summary in journal.history().entries] == [entry]
    undone = journal.undo(entry)
    assert undone.refused == ()
    assert _snapshot(root) == before


def _snapshot(root: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every path beneath ``root``: its mode and its bytes (a link's target)."""
    seen: dict[str, tuple[int, bytes | str | None]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            content: bytes | str | None = os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        else:
            content = None
        seen[str(path.relative_to(root))] = (info.st_mode, content)
    return seen


async def test_a_journal_that_cannot_be_written_refuses_the_call_before_it_runs(
    policy: Containment, root: Path, home: Path, visible_path: Path
) -> None:
    """Issue 44's bad input: the journal's place is writable by others; the call is refused
    with one line naming the place, and its command never runs."""
    state = home / ".local" / "state"
    state.mkdir(parents=True)
    state.chmod(0o777)  # another user could write where the journal lies
    facts = _facts.start_facts(
        str(root), (), bwrap=policy.namespaces.bwrap, environ={"HOME": str(home)}, cache=True
    )
    assert facts.journal is None
    assert facts.journal_refusal is not None
    assert str(state) in facts.journal_refusal
    chosen = PosixLauncher.build(policy, str(root), facts=facts)
    marker = visible_path / "ran"
    out, err = Collect(), Collect()
    spec = Spec("/bin/sh", ("-c", f"touch {marker}"), str(root), (), b"", out, err)
    with pytest.raises(LaunchError) as refused:
        await chosen.start(spec)
    assert refused.value.reason == facts.journal_refusal
    assert not marker.exists()


@pytest.mark.skipif(GIT is None, reason="needs git")
async def test_git_mv_of_a_tracked_directory_works_in_a_stage(
    policy: Containment, root: Path, home: Path
) -> None:
    """Contract 13.1: renaming a directory that existed before the call works as outside
    (an unprivileged overlay answers EXDEV; the supervisor carries the rename out), with
    real git, ``mv`` and ``os.rename``; the worktree outside has the result after."""
    assert GIT is not None
    env = _environment(home)
    _tree(root)
    for arguments in (("init", "-q", "-b", "main"), ("add", "."), ("commit", "-q", "-m", "a")):
        subprocess.run(  # noqa: ASYNC221 - before the call, nothing else runs
            [GIT, *arguments], cwd=root, env=env, check=True, capture_output=True
        )
    script = (
        "git mv pkg pkg2 && mv lib lib2 && "
        'python3 -c \'import os; os.rename("empty", "empty2")\' && '
        "git add -A && git commit -q -m moved && echo DONE"
    )
    text, fields = await _run(_launcher(policy, root, home), root, home, script)
    assert "DONE" in text, text
    assert fields["changes_applied"] is True
    assert (root / "pkg2" / "sub" / "s").read_text() == "s\n"
    assert (root / "lib2" / "l.py").read_text() == "l\n"
    assert (root / "empty2").is_dir()
    assert not (root / "pkg").exists()
    status = subprocess.run(  # noqa: ASYNC221 - after the call: the user's git, outside
        [GIT, "status", "--porcelain"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.stdout == ""


async def test_a_dry_run_lists_the_changes_and_applies_none(
    policy: Containment, root: Path, home: Path
) -> None:
    """Contract 13.2's ``dry_run``: the command runs on its stage, the answer lists what it
    changed, the worktree is identical after, and the journal has no entry."""
    _tree(root)
    before = _snapshot(root)
    chosen = _launcher(policy, root, home)
    assert chosen.staged
    out, err = Collect(), Collect()
    environment = tuple(f"{k}={v}" for k, v in _environment(home).items())
    script = "rm -rf pkg; echo new > n.txt; echo more >> a.txt"
    spec = Spec("/bin/sh", ("-c", script), str(root), environment, b"", out, err)
    process = await chosen.start_dry_run(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    fields = stage_fields(process)
    assert fields["dry_run"] is True
    assert fields["changes_applied"] is False
    assert fields["changes"] == {
        "added": 1,
        "modified": 1,
        "deleted": 1,
        "paths": ["M a.txt", "A n.txt", "D pkg/"],
    }
    assert "journal_entry" not in fields
    assert _snapshot(root) == before
    journal = chosen._facts.journal if chosen._facts is not None else None
    assert journal is not None
    assert journal.history().entries == ()


async def test_a_dry_run_where_calls_are_not_staged_is_refused_before_it_runs(
    policy: Containment, root: Path, home: Path, visible_path: Path
) -> None:
    facts = _facts.start_facts(
        str(root), (), bwrap=policy.namespaces.bwrap, environ={"HOME": str(home)}, cache=True
    )
    unstaged = PosixLauncher.build(
        policy, str(root), facts=dataclasses.replace(facts, stages=None, unstaged="test")
    )
    assert not unstaged.staged
    marker = visible_path / "ran"
    spec = Spec("/bin/sh", ("-c", f"touch {marker}"), str(root), (), b"", Collect(), Collect())
    with pytest.raises(LaunchError) as refused:
        await unstaged.start_dry_run(spec)
    assert refused.value.reason is not None
    assert "dry_run" in refused.value.reason
    assert not marker.exists()


def test_a_directory_added_whole_is_marked_whole(root: Path, home: Path) -> None:
    """``Change.whole``: an added directory whose stage subtree is exactly what is listed
    beneath it (the commit may move it by one rename); its paths are all still listed."""
    _tree(root)
    read = _stage_read(
        root,
        home,
        "mkdir -p venv/lib/pkg venv/empty; echo x > venv/lib/pkg/m.py; "
        "ln -s m.py venv/lib/pkg/l; echo t > venv/gone; rm venv/gone; "
        "mkdir lib/new; echo y > lib/new/y; echo z > pkg/z",
    )
    shown = {change.shown: change for change in read.changes}
    assert set(shown) == {
        "A venv/",
        "A venv/lib/",
        "A venv/lib/pkg/",
        "A venv/lib/pkg/m.py",
        "A venv/lib/pkg/l",
        "A venv/empty/",
        "A lib/new/",
        "A lib/new/y",
        "A pkg/z",
    }
    whole = {change.path for change in read.changes if change.whole}
    assert whole == {"venv", "venv/lib", "venv/lib/pkg", "venv/empty", "lib/new"}
    venv = shown["A venv/"]
    assert venv.source is not None
    assert venv.source.endswith("/upper/venv")


def test_a_fifo_or_a_recreated_directory_is_not_whole(root: Path, home: Path) -> None:
    """A refused node inside an added directory keeps it from moving whole (the FIFO
    would go with it); a directory deleted and made again is no addition."""
    _tree(root)
    read = _stage_read(
        root,
        home,
        "mkdir -p new/deep; mkfifo new/deep/pipe; echo k > new/k; "
        "rm -rf lib; mkdir lib; echo x > lib/x.py",
    )
    assert read.refused == ("new/deep/pipe",)
    assert not any(change.whole for change in read.changes)


async def test_a_new_tree_is_committed_whole_and_said_path_by_path(
    policy: Containment, root: Path, home: Path
) -> None:
    """Through a real staged call: a new ``.venv`` is one item of the entry, the answer
    lists its every path, and undo takes it back."""
    _tree(root)
    before = _snapshot(root)
    chosen = _launcher(policy, root, home)
    _, fields = await _run(
        chosen,
        root,
        home,
        "mkdir -p .venv/bin .venv/lib; printf '#!/bin/sh\\n' > .venv/bin/python; "
        "chmod 755 .venv/bin/python; ln -s python .venv/bin/python3; "
        "head -c 3000 /dev/urandom > .venv/lib/blob; mkdir .venv/empty",
    )
    assert fields["changes_applied"] is True
    assert fields["changes"] == {
        "added": 7,
        "modified": 0,
        "deleted": 0,
        "paths": [
            "A .venv/",
            "A .venv/bin/",
            "A .venv/bin/python",
            "A .venv/bin/python3",
            "A .venv/empty/",
            "A .venv/lib/",
            "A .venv/lib/blob",
        ],
    }
    assert stat.S_IMODE((root / ".venv/bin/python").stat().st_mode) == 0o755
    assert os.readlink(root / ".venv/bin/python3") == "python"
    assert (root / ".venv/lib/blob").stat().st_size == 3000
    journal = chosen._facts.journal if chosen._facts is not None else None
    assert journal is not None
    assert journal.history().entries[0].paths == ("A .venv/",)
    assert journal.undo().restored == (".venv",)
    assert _snapshot(root) == before


async def test_a_fifo_inside_a_new_tree_is_refused_and_the_rest_applied(
    policy: Containment, root: Path, home: Path
) -> None:
    chosen = _launcher(policy, root, home)
    _, fields = await _run(
        chosen, root, home, "mkdir -p new/deep; echo k > new/deep/k; mkfifo new/deep/pipe"
    )
    assert fields["changes_applied"] is True
    assert fields["protected_refused"] == ["new/deep/pipe"]
    assert (root / "new/deep/k").read_text() == "k\n"
    assert not (root / "new/deep/pipe").exists()
    journal = chosen._facts.journal if chosen._facts is not None else None
    assert journal is not None
    assert journal.history().entries[0].paths == ("A new/", "A new/deep/", "A new/deep/k")


@pytest.mark.parametrize("stop", ["request_stop", "force_kill"])
async def test_a_stopped_call_commits_what_it_wrote_and_can_be_undone(
    policy: Containment, root: Path, home: Path, stop: str
) -> None:
    """A call stopped before its command ended (its timeout, the client's cancellation:
    both stop it this way) keeps what it wrote, as a terminal would, journaled so that
    ``undo`` takes it back (docs/decisions.md); only a server that ends before the join
    applies nothing (test_stage_attacks)."""
    _tree(root)
    before = _snapshot(root)
    chosen = _launcher(policy, root, home)
    out, err = Collect(), Collect()
    environment = tuple(f"{k}={v}" for k, v in _environment(home).items())
    script = "echo z > a.txt; mkdir n; echo ready; exec sleep 600"
    process = await chosen.start(
        Spec("/bin/sh", ("-c", script), str(root), environment, b"", out, err)
    )
    try:
        await out.contains(b"ready", BOUND)
        assert (root / "a.txt").read_text() == "a\n"  # nothing visible before the commit
        await getattr(process, stop)()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    fields = stage_fields(process)
    assert fields["changes_applied"] is True
    assert fields["changes"] == {
        "added": 1,
        "modified": 1,
        "deleted": 0,
        "paths": ["M a.txt", "A n/"],
    }
    assert (root / "a.txt").read_text() == "z\n"
    journal = chosen._facts.journal if chosen._facts is not None else None
    assert journal is not None
    entry = fields["journal_entry"]
    assert isinstance(entry, int)
    assert journal.undo(entry).refused == ()
    assert _snapshot(root) == before


@pytest.mark.skipif(GIT is None, reason="needs git")
async def test_a_new_tree_holding_a_planted_repository_is_not_committed_whole(
    policy: Containment, root: Path, home: Path, tmp_path: Path
) -> None:
    """Hostile: a new ``vendor/`` whose ``lib/`` is made a repository with a hook and a
    ``core.fsmonitor`` (the whole-tree rename must not carry them): the judge refuses
    what runs code, so the tree is applied path by path; ``git status`` run outside as
    the user in ``vendor/lib`` runs nothing, and the rest of the tree arrives."""
    assert GIT is not None
    marker = tmp_path / "marker"
    program = tmp_path / "monitor.sh"
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    program.chmod(0o755)
    chosen = _launcher(policy, root, home)
    script = (
        "mkdir -p vendor/lib/objects/info vendor/lib/refs/heads vendor/lib/hooks; "
        "echo 'ref: refs/heads/master' > vendor/lib/HEAD; "
        f"printf '[core]\\n\\tworktree = ..\\n\\tfsmonitor = {program}\\n' > vendor/lib/config; "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > vendor/lib/hooks/post-checkout; "
        "chmod +x vendor/lib/hooks/post-checkout; echo k > vendor/keep.py"
    )
    _, fields = await _run(chosen, root, home, script)
    assert fields["changes_applied"] is True
    refused = fields["protected_refused"]
    assert isinstance(refused, list)
    assert "vendor/lib/hooks" in refused
    assert "fsmonitor" not in (root / "vendor" / "lib" / "config").read_text()
    assert (root / "vendor" / "keep.py").read_text() == "k\n"
    assert not (root / "vendor" / "lib" / "hooks" / "post-checkout").exists()
    journal = chosen._facts.journal if chosen._facts is not None else None
    assert journal is not None
    assert "A vendor/" in journal.history().entries[0].paths  # per path: not one item
    assert len(journal.history().entries[0].paths) > 1
    await asyncio.to_thread(
        subprocess.run,
        [GIT, "status"],
        cwd=root / "vendor" / "lib",
        env={**_environment(home), "GIT_CEILING_DIRECTORIES": str(root.parent)},
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    assert not marker.exists()
