"""A call's stage is removed after its answer, by the server's remover (issue 44).

Real stages in real directories; the only fake is a removal that waits on an event (a
slow removal cannot be caused on demand), put in ``Stage.remove``'s place.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding._posix._stage import _removal
from spice.agent.coding._posix._stage._commit import StagedCall, commit
from spice.agent.coding._posix._stage._removal import MAXIMUM_WAITING, Removals
from spice.agent.coding._posix._stage._stage import Stage
from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._journal import Journal

BOUND: Final = 60.0
"""Hang guard for one wait on an event (never a timing assertion)."""


def _stage(directory: Path, lower: Path, files: int = 3) -> Stage:
    """A real stage with what a commit leaves: directories, files, a locked work dir."""
    stage = Stage.make(str(directory), str(lower))
    for index in range(files):
        place = Path(stage.upper) / f"pkg{index % 2}"
        place.mkdir(exist_ok=True)
        (place / f"m{index}.py").write_text("x\n")
    locked = Path(stage.work) / "work"
    locked.mkdir()
    locked.chmod(0)  # the overlay leaves its work directory so
    return stage


def _left(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("call-"))


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    stages, lower = tmp_path / "stages", tmp_path / "root"
    stages.mkdir()
    lower.mkdir()
    return stages, lower


class _Held:
    """``Stage.remove`` replaced: the first removal waits for ``release``; every removal
    is counted (in which thread it ran) and then done for real."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, stage: Stage) -> bool:
        with self.lock:
            first = not self.threads
            self.threads.append(threading.current_thread().name)
        if first:
            self.entered.set()
            assert self.release.wait(BOUND)
        return self.real(stage)  # type: ignore[operator, no-any-return]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Held]:
    fake = _Held(Stage.remove)

    def remove(stage: Stage) -> bool:  # a function: bound as a method, as the real one
        return fake(stage)

    monkeypatch.setattr(Stage, "remove", remove)
    yield fake
    fake.release.set()


def test_a_stage_handed_over_is_removed_after(place: tuple[Path, Path]) -> None:
    stages, lower = place
    removals = Removals()
    for _ in range(3):
        assert removals.later(_stage(stages, lower))
    assert removals.settle(BOUND)
    assert _left(stages) == []
    assert removals.close(BOUND)


def test_the_commit_answers_before_the_stage_is_removed(
    place: tuple[Path, Path], held: _Held, tmp_path: Path
) -> None:
    """The commit returns while its stage's removal is still held (on main it removed
    the stage itself, so it waited)."""
    stages, lower = place
    removals = Removals()
    journal = Journal.open(str(lower), state_home=str(tmp_path / "state"))
    stage = _stage(stages, lower, files=0)
    answered = threading.Event()
    results: list[object] = []

    def run() -> None:
        results.append(
            commit(StagedCall(stage, ProtectedPaths.default(), journal, removals=removals))
        )
        answered.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert answered.wait(BOUND), "the commit waited for its stage's removal"
        assert held.entered.wait(BOUND)
        assert _left(stages) == [os.path.basename(stage.path)]  # not removed yet
    finally:
        held.release.set()
    assert removals.settle(BOUND)
    assert _left(stages) == []
    assert held.threads == ["spice-stage-removal"]
    thread.join(BOUND)


def test_past_the_bound_the_caller_removes_its_stage(place: tuple[Path, Path], held: _Held) -> None:
    """``MAXIMUM_WAITING`` stages wait; the next one is removed by its caller."""
    stages, lower = place
    removals = Removals()
    assert removals.later(_stage(stages, lower, files=0))  # taken, held by the remover
    assert held.entered.wait(BOUND)
    for _ in range(MAXIMUM_WAITING):
        assert removals.later(_stage(stages, lower, files=0))
    over = _stage(stages, lower, files=0)
    assert not removals.later(over)
    assert not os.path.lexists(over.path)
    assert held.threads[-1] == threading.current_thread().name
    assert not removals.settle(0)
    held.release.set()
    assert removals.settle(BOUND)
    assert _left(stages) == []


def test_a_closed_remover_leaves_the_removal_to_the_caller(place: tuple[Path, Path]) -> None:
    stages, lower = place
    removals = Removals()
    assert removals.close(BOUND)  # nothing waited
    stage = _stage(stages, lower)
    assert not removals.later(stage)
    assert _left(stages) == []


def test_a_removal_that_fails_does_not_stop_the_remover(
    place: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    stages, lower = place
    real = Stage.remove
    failing = _stage(stages, lower)

    def remove(stage: Stage) -> bool:
        if stage is failing:
            raise OSError("injected")
        return real(stage)

    monkeypatch.setattr(Stage, "remove", remove)
    removals = Removals()
    assert removals.later(failing)
    assert removals.later(_stage(stages, lower))
    assert removals.settle(BOUND)
    assert _left(stages) == [os.path.basename(failing.path)]  # the next start's to remove
    monkeypatch.undo()
    assert failing.remove()


_EXITING: Final = """
import sys
from spice.agent.coding._exit import exit_promptly
from spice.agent.coding._posix._stage._removal import REMOVALS
from spice.agent.coding._posix._stage._stage import Stage

stages, lower, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
for index in range(count):
    stage = Stage.make(stages, lower)
    for number in range(200):
        open(f"{stage.upper}/f{number}", "w").close()
    assert REMOVALS.later(stage)
exit_promptly(0)
"""


@pytest.mark.parametrize("count", [1, MAXIMUM_WAITING])
def test_the_servers_exit_removes_every_stage_still_waiting(
    place: tuple[Path, Path], count: int
) -> None:
    """A real process hands stages over and exits as the server does: none is left."""
    stages, lower = place
    done = subprocess.run(
        [sys.executable, "-c", _EXITING, str(stages), str(lower), str(count)],
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _left(stages) == []


def test_the_server_has_one_remover() -> None:
    assert isinstance(_removal.REMOVALS, Removals)
    assert StagedCall.__dataclass_fields__["removals"].default is _removal.REMOVALS
