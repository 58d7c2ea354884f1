"""Crash consistency and durability of replace, proven under strace in a child process.

Each crash run kills the child (SIGKILL, injected by strace) at the N-th call of one
syscall in the worker thread; afterwards the target holds exactly the old or the new
bytes (for create: nothing or the new bytes) and any other file left behind is a
``.spice-replace-<32 hex>.tmp``. The edit form (contract 9.2) runs the same sweeps and
checks: it ends in the same commit path. The default run sweeps a bounded sample of the kill
points; ``SPICE_SOAK=1`` (``make soak``) sweeps every one.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path
from typing import Final

import pytest
from replace_helpers import create_arguments, digest, replace_arguments, strays
from replace_strace import STRACE, Traced, traced_call

pytestmark = [
    pytest.mark.strace,
    pytest.mark.skipif(STRACE is None, reason="strace is not installed (make bootstrap)"),
]

OLD: Final = b"old content that is long enough to be torn\n" * 4
NEW: Final = "new content \u00e9\n" * 8
NEW_BYTES: Final = NEW.encode()
TARGET: Final = "d/e/f.txt"
DEFAULT_POINTS: Final = 40
"""Kill points swept by default per scenario; every one under ``SPICE_SOAK=1``."""
MUTATING: Final = frozenset(
    {"write", "fsync", "fchmod", "fchown", "mkdirat", "rename", "renameat", "renameat2"}
    | {"link", "linkat", "unlink", "unlinkat"}
)
SOAK: Final = os.environ.get("SPICE_SOAK") == "1"
COMMITS: Final = frozenset({"rename", "renameat", "renameat2", "link", "linkat"})
NOBODY: Final = 65534
"""Owner and group of the foreign target (the suite runs as root)."""
SETUID_MODE: Final = 0o6755
SCENARIOS: Final = ("replace", "create", "foreign", "edits")
"""``foreign``: root replaces a 06755 file of ``NOBODY`` (the worker calls ``fchown``);
``edits``: the same replacement by one edit of the whole text (contract 9.2)."""


def _prepare(directory: Path, *, creating: bool, foreign: bool = False) -> Path:
    root = directory / "root"
    if creating:
        root.mkdir(parents=True)
    else:
        (root / "d" / "e").mkdir(parents=True)
        (root / TARGET).write_bytes(OLD)
        if foreign:
            os.chown(root / TARGET, NOBODY, NOBODY)
            (root / TARGET).chmod(SETUID_MODE)
    return root


def _arguments(*, creating: bool, edits: bool = False) -> dict[str, object]:
    if creating:
        return create_arguments(TARGET, NEW)
    if edits:
        edit = {"old_text": OLD.decode(), "new_text": NEW}
        return {"path": TARGET, "expected_sha256": digest(OLD), "edits": [edit]}
    return replace_arguments(TARGET, NEW, OLD)


def _points(dry: Traced, *, everything: bool) -> list[tuple[str, int]]:
    counts: Counter[str] = Counter()
    points: list[tuple[str, int]] = []
    for name, _ in dry.worker_calls():
        counts[name] += 1
        points.append((name, counts[name]))
    if everything or len(points) <= DEFAULT_POINTS:
        return points
    # Every kill at a mutating syscall, then an even sample of the others.
    chosen = [p for p in points if p[0] in MUTATING]
    others = [p for p in points if p[0] not in MUTATING]
    room = max(0, DEFAULT_POINTS - len(chosen))
    step = max(1, -(-len(others) // max(1, room)))
    return chosen + others[::step][:room]


def _state(root: Path) -> str:
    target = root / TARGET
    if not target.exists():
        return "absent"
    return {OLD: "old", NEW_BYTES: "new"}.get(target.read_bytes(), "torn")


def _check_disk(root: Path, *, creating: bool, foreign: bool = False) -> list[str]:
    """Problems with what a crash left (empty when consistent)."""
    problems: list[str] = []
    state = _state(root)
    if state not in ({"absent", "new"} if creating else {"old", "new"}):
        problems.append(f"target is {state}")
    if foreign and state != "absent":
        seen = (root / TARGET).stat()
        if (seen.st_uid, seen.st_gid, stat.S_IMODE(seen.st_mode)) != (
            NOBODY,
            NOBODY,
            SETUID_MODE,
        ):
            problems.append(f"{state} target lost its owner or mode")
    directory = (root / TARGET).parent
    if directory.exists():
        problems.extend(f"stray file {name}" for name in strays(directory, ["f.txt"]))
    return problems


def _sweep(tmp_path: Path, scenario: str, *, everything: bool) -> int:
    creating, foreign = scenario == "create", scenario == "foreign"
    arguments = _arguments(creating=creating, edits=scenario == "edits")
    dry_root = _prepare(tmp_path / "dry", creating=creating, foreign=foreign)
    dry = traced_call(tmp_path, dry_root, arguments, ["-e", "trace=all"])
    assert dry.content is not None
    assert dry.content["committed"] is True
    points = _points(dry, everything=everything)
    assert points
    assert foreign == any(name == "fchown" for name, _ in points)
    failures: list[str] = []
    states: set[str] = set()
    for index, (name, number) in enumerate(points):
        root = _prepare(tmp_path / f"run-{index}", creating=creating, foreign=foreign)
        options = ["-e", f"trace={name}", "-e", f"inject={name}:signal=KILL:when={number}"]
        run = traced_call(tmp_path, root, arguments, options)
        if run.returncode != -9:
            failures.append(f"{name}#{number}: the kill did not happen ({run.returncode})")
        problems = _check_disk(root, creating=creating, foreign=foreign)
        failures.extend(f"{name}#{number}: {p}" for p in problems)
        states.add(_state(root))
    assert [] == failures
    # The sweep crossed the commit point: some kills came before it, some after.
    assert ({"absent", "new"} if creating else {"old", "new"}) == states
    return len(points)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_kill_at_any_sampled_syscall_leaves_old_or_new_bytes(
    tmp_path: Path, scenario: str
) -> None:
    """SIGKILL at sampled worker syscalls: never a torn target, only temporary leftovers."""
    if scenario == "foreign" and os.geteuid() != 0:
        pytest.skip("needs root to own a file of another user")
    swept = _sweep(tmp_path, scenario, everything=False)
    assert swept >= min(DEFAULT_POINTS, 10)


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="the full crash sweep runs under SPICE_SOAK=1")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_kill_at_every_syscall_leaves_old_or_new_bytes(tmp_path: Path, scenario: str) -> None:
    """SIGKILL at every worker file syscall (soak): never a torn target."""
    if scenario == "foreign" and os.geteuid() != 0:
        pytest.skip("needs root to own a file of another user")
    _sweep(tmp_path, scenario, everything=True)


@pytest.mark.parametrize("form", ["replace", "create", "edits"])
def test_syscalls_sync_the_temporary_then_commit_then_sync_the_directory(
    tmp_path: Path, form: str
) -> None:
    """fsync(temporary) comes before rename/link, which comes before fsync(directory)."""
    creating = form == "create"
    root = _prepare(tmp_path / "order", creating=creating)
    arguments = _arguments(creating=creating, edits=form == "edits")
    traced = traced_call(tmp_path, root, arguments, ["-y", "-e", "trace=all"])
    calls = traced.worker_calls()
    names = [name for name, _ in calls]
    commit = next(i for i, n in enumerate(names) if n in COMMITS)
    syncs = [i for i, n in enumerate(names) if n == "fsync"]
    temporary_sync = next(i for i in syncs if ".spice-replace-" in calls[i][1])
    directory = f"<{root / 'd' / 'e'}>)"
    directory_sync = next(i for i in syncs if directory in calls[i][1])
    assert {"linkat", "link"} & {names[commit]} if creating else names[commit].startswith("rename")
    assert temporary_sync < commit < directory_sync
    # A create also syncs the root and ``d``: it may have made ``d`` and ``d/e``.
    ancestors = [f"<{root}>)", f"<{root / 'd'}>)"] if creating else []
    ancestor_syncs = [i for i in syncs if any(a in calls[i][1] for a in ancestors)]
    assert 3 + len(ancestors) == len(syncs)
    assert len(ancestors) == len(ancestor_syncs)
    assert all(commit < i for i in ancestor_syncs)
    assert NEW_BYTES == (root / TARGET).read_bytes()


@pytest.mark.parametrize("edits", [False, True], ids=["content", "edits"])
def test_eio_on_the_temporary_fsync_keeps_the_old_file_and_claims_nothing(
    tmp_path: Path, edits: bool
) -> None:
    """fsync(temporary) fails with EIO: sync_failed, old bytes, no durable claim."""
    root = _prepare(tmp_path / "eio", creating=False)
    options = ["-e", "trace=fsync", "-e", "inject=fsync:error=EIO:when=1"]
    traced = traced_call(tmp_path, root, _arguments(creating=False, edits=edits), options)
    assert traced.content is not None
    assert "sync_failed" == traced.content["code"]
    assert traced.content["committed"] is False
    assert "durable" not in traced.content
    assert OLD == (root / TARGET).read_bytes()
    assert [] == strays(root / "d" / "e", ["f.txt"])
    assert ["f.txt"] == os.listdir(root / "d" / "e")


@pytest.mark.parametrize("number", [2, 3], ids=["file", "directory"])
@pytest.mark.parametrize("form", ["replace", "create", "edits"])
def test_eio_on_a_post_commit_fsync_is_committed_but_not_durable(
    tmp_path: Path, number: int, form: str
) -> None:
    """A post-commit fsync fails with EIO: committed true, durable false, new bytes."""
    creating = form == "create"
    root = _prepare(tmp_path / "eio", creating=creating)
    options = ["-e", "trace=fsync", "-e", f"inject=fsync:error=EIO:when={number}"]
    arguments = _arguments(creating=creating, edits=form == "edits")
    traced = traced_call(tmp_path, root, arguments, options)
    assert traced.content is not None
    assert "durability_unconfirmed" == traced.content["code"]
    assert traced.content["committed"] is True
    assert traced.content["durable"] is False
    assert digest(NEW_BYTES) == traced.content["sha256"]
    assert NEW_BYTES == (root / TARGET).read_bytes()
    assert ["f.txt"] == os.listdir(root / "d" / "e")


@pytest.mark.parametrize("number", [4, 5], ids=["root", "first-parent"])
def test_eio_on_an_ancestor_fsync_of_a_create_is_committed_but_not_durable(
    tmp_path: Path, number: int
) -> None:
    """A create whose new parents' entries cannot be synced never claims durability."""
    root = _prepare(tmp_path / "eio-ancestor", creating=True)
    options = ["-e", "trace=fsync", "-e", f"inject=fsync:error=EIO:when={number}"]
    traced = traced_call(tmp_path, root, _arguments(creating=True), options)
    assert traced.content is not None
    assert ("durability_unconfirmed", True, False) == (
        traced.content["code"],
        traced.content["committed"],
        traced.content["durable"],
    )
    assert NEW_BYTES == (root / TARGET).read_bytes()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file of another user")
def test_the_owner_is_given_before_the_mode_and_both_before_the_commit(tmp_path: Path) -> None:
    """fchown, then fchmod (chown clears setuid/setgid), both before the rename."""
    root = _prepare(tmp_path / "order", creating=False, foreign=True)
    traced = traced_call(tmp_path, root, _arguments(creating=False), ["-e", "trace=all"])
    names = [name for name, _ in traced.worker_calls()]
    assert traced.content is not None
    assert (True, False) == (traced.content["committed"], traced.content["owner_changed"])
    chown, chmod = names.index("fchown"), names.index("fchmod")
    commit = next(i for i, n in enumerate(names) if n in COMMITS)
    assert chown < chmod < commit
    assert 1 == names.count("fchown")
    seen = (root / TARGET).stat()
    assert (NOBODY, NOBODY, SETUID_MODE) == (seen.st_uid, seen.st_gid, stat.S_IMODE(seen.st_mode))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file of another user")
def test_a_real_eperm_from_fchown_drops_setuid_and_setgid(tmp_path: Path) -> None:
    """The kernel refuses the fchown (EPERM injected by strace): no setuid root file."""
    root = _prepare(tmp_path / "eperm", creating=False, foreign=True)
    options = ["-e", "trace=fchown", "-e", "inject=fchown:error=EPERM:when=1"]
    traced = traced_call(tmp_path, root, _arguments(creating=False), options)
    assert traced.content is not None
    assert (True, True, True) == (
        traced.content["ok"],
        traced.content["committed"],
        traced.content["owner_changed"],
    )
    seen = (root / TARGET).stat()
    assert (0, 0, 0o755) == (seen.st_uid, seen.st_gid, stat.S_IMODE(seen.st_mode))
    assert NEW_BYTES == (root / TARGET).read_bytes()
