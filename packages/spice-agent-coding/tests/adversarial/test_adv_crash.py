"""Crash-state enumeration for ``replace`` (ALICE, OSDI 2014), from real ``strace`` traces.

Each test runs one real ``replace`` (through a ``Dispatcher``) in a child process under
``strace``, models the traced operations, generates every crash state the weak POSIX
persistence model allows (``adv_crash``), writes each one to a temporary directory and
checks the target: exactly the old bytes or the new bytes (for create: absent or the new
bytes), and the new bytes in every state after the point where the tool could say
``durable: true``. The self-tests prove the checker catches the classic bugs (an
in-place write, a rename before the temporary file's fsync, no directory fsync).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest
from adv_crash import (
    MAXIMUM_CRASH_STATES,
    STRACE,
    STRACE_ARGUMENTS,
    Op,
    Trace,
    crash_states,
    durable_point,
    joined_lines,
    materialize,
    parse_trace,
)

pytestmark = [
    pytest.mark.strace,
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed"),
]

OLD: Final = b"old bytes of the file\n" * 3
NEW: Final = "new bytes, a little longer than the old ones\n" * 4
CHILD_SECONDS: Final = 60
TEMPORARY_PREFIX: Final = ".spice-replace-"
NOBODY: Final = 65534
"""Owner and group of a file of another user (the suite runs as root)."""

CHILD: Final = """
import asyncio, json, sys
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_replace
root, arguments = sys.argv[1], sys.argv[2]
async def main():
    result = await Dispatcher([new_replace(Config(root))]).dispatch(
        Call("crash", "replace", arguments))
    sys.stdout.write(result.content)
asyncio.run(main())
"""


def traced_replace(
    root: Path, arguments: Mapping[str, object], trace_file: Path
) -> dict[str, object]:
    """Run one replace in a child under strace; return its result content."""
    completed = subprocess.run(
        [
            STRACE,
            *STRACE_ARGUMENTS,
            "-o",
            str(trace_file),
            sys.executable,
            "-c",
            CHILD,
            str(root),
            json.dumps(arguments),
        ],
        capture_output=True,
        timeout=CHILD_SECONDS,
        check=True,
    )
    content: dict[str, object] = json.loads(completed.stdout)
    return content


def violations(
    trace: Trace,
    target: str,
    old: bytes | None,
    new: bytes,
    scratch: Path,
    durable_after: int | None = None,
) -> tuple[int, list[str]]:
    """Materialize every crash state; return how many there were and what was wrong.

    ``durable_after`` is the prefix from which only ``new`` is allowed (default: where
    the tool may have said ``durable: true`` in ``trace``).
    """
    if durable_after is None:
        durable_after = durable_point(trace, target)
    problems: list[str] = []
    count = 0
    for state in crash_states(trace):
        count += 1
        assert count <= MAXIMUM_CRASH_STATES
        where = scratch / f"state-{count}"
        where.mkdir(parents=True)
        materialize(state, where)
        path = where / target
        found = path.read_bytes() if path.is_file() else None
        allowed = {new} if state.prefix >= durable_after else {old, new}
        if found not in allowed:
            problems.append(f"prefix {state.prefix}: target is {found!r}")
        for name in state.files:
            foreign = name != target and name not in trace.initial
            if foreign and not os.path.basename(name).startswith(TEMPORARY_PREFIX):
                problems.append(f"prefix {state.prefix}: unexpected {name}")
        shutil.rmtree(where)
    return count, problems


def _run(
    tmp_path: Path, arguments: Mapping[str, object], files: dict[str, bytes]
) -> tuple[Trace, dict[str, object]]:
    """Lay out ``files`` (the model takes them as durable), run one traced replace."""
    root = tmp_path / "root"
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
    content = traced_replace(root, arguments, tmp_path / "trace.txt")
    lines = (tmp_path / "trace.txt").read_text(encoding="ascii", errors="replace").splitlines()
    return parse_trace(lines, os.fspath(root), files), content


def test_every_crash_state_of_a_replace_holds_the_old_or_the_new_bytes(tmp_path: Path) -> None:
    """Replace: each crash state has old or new bytes, and new ones once durable."""
    arguments = {
        "path": "file.txt",
        "content": NEW,
        "expected_sha256": hashlib.sha256(OLD).hexdigest(),
    }
    trace, content = _run(tmp_path, arguments, {"file.txt": OLD})
    assert (True, True) == (content["ok"], content["durable"])
    assert durable_point(trace, "file.txt") <= len(trace.ops)
    kinds = [op.kind for op in trace.ops]
    assert "rename" in kinds
    assert "fsyncdir" in kinds
    count, problems = violations(trace, "file.txt", OLD, NEW.encode(), tmp_path / "states")
    assert [] == problems
    assert count > len(trace.ops)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file of another user")
def test_every_crash_state_of_a_replace_that_keeps_another_owner_holds_old_or_new(
    tmp_path: Path,
) -> None:
    """A replace that also fchowns the temporary (a file of nobody): old or new bytes."""
    arguments = {
        "path": "file.txt",
        "content": NEW,
        "expected_sha256": hashlib.sha256(OLD).hexdigest(),
    }
    root = tmp_path / "root"
    root.mkdir()
    (root / "file.txt").write_bytes(OLD)
    os.chown(root / "file.txt", NOBODY, NOBODY)
    content = traced_replace(root, arguments, tmp_path / "trace.txt")
    lines = (tmp_path / "trace.txt").read_text(encoding="ascii", errors="replace").splitlines()
    assert any(line.split("(", 1)[0].endswith("fchown") for line in lines)
    trace = parse_trace(lines, os.fspath(root), {"file.txt": OLD})
    assert (True, True, False) == (content["ok"], content["durable"], content["owner_changed"])
    assert (NOBODY, NOBODY) == (
        (root / "file.txt").stat().st_uid,
        (root / "file.txt").stat().st_gid,
    )
    count, problems = violations(trace, "file.txt", OLD, NEW.encode(), tmp_path / "states")
    assert [] == problems
    assert count > len(trace.ops)


def test_every_crash_state_of_a_create_is_absent_or_the_new_bytes(tmp_path: Path) -> None:
    """Create: each crash state has no target or the new bytes, and new ones once durable."""
    arguments = {"path": "fresh.txt", "content": NEW, "create": True}
    trace, content = _run(tmp_path, arguments, {"other.txt": OLD})
    assert (True, True) == (content["ok"], content["durable"])
    assert durable_point(trace, "fresh.txt") <= len(trace.ops)
    assert "link" in [op.kind for op in trace.ops] or "rename" in [op.kind for op in trace.ops]
    count, problems = violations(trace, "fresh.txt", None, NEW.encode(), tmp_path / "states")
    assert [] == problems
    assert count > len(trace.ops)


def test_a_create_with_new_parent_directories_is_absent_or_complete(tmp_path: Path) -> None:
    """Create with missing parents: before the durable claim, absent or complete."""
    arguments = {"path": "a/b/fresh.txt", "content": NEW, "create": True}
    trace, content = _run(tmp_path, arguments, {})
    assert True is content["ok"]
    assert ["a", "a/b"] == [op.name for op in trace.ops if op.kind == "mkdir"]
    before = Trace(ops=trace.ops[: durable_point(trace, "a/b/fresh.txt") - 1])
    never = len(before.ops) + 1
    _count, problems = violations(
        before, "a/b/fresh.txt", None, NEW.encode(), tmp_path / "s", durable_after=never
    )
    assert [] == problems


def test_a_durable_create_with_new_parent_directories_survives_every_crash(
    tmp_path: Path,
) -> None:
    """Create with missing parents: once it says durable, every crash state has the file."""
    arguments = {"path": "a/b/fresh.txt", "content": NEW, "create": True}
    trace, content = _run(tmp_path, arguments, {})
    assert (True, True) == (content["ok"], content["durable"])
    _count, problems = violations(trace, "a/b/fresh.txt", None, NEW.encode(), tmp_path / "s")
    assert [] == problems


# Self-tests: the enumeration finds the bugs it exists to find.


def _trace(ops: list[Op], files: Mapping[str, bytes]) -> Trace:
    trace = Trace(ops=ops)
    for number, (name, content) in enumerate(files.items(), start=100):
        trace.initial[name] = number
        trace.initial_data[number] = content
    return trace


def test_the_checker_catches_an_in_place_write(tmp_path: Path) -> None:
    """Truncate-and-write in place leaves a torn or empty file in some crash state."""
    ops = [Op("trunc", "f", inode=100), Op("write", inode=100, data=b"NEW"), Op("fsync", inode=100)]
    _count, problems = violations(_trace(ops, {"f": b"OLD"}), "f", b"OLD", b"NEW", tmp_path)
    assert problems


def test_the_checker_catches_a_rename_before_the_fsync(tmp_path: Path) -> None:
    """Renaming a temporary file before its fsync can leave an empty target."""
    ops = [
        Op("creat", TEMPORARY_PREFIX + "0.tmp", inode=1),
        Op("write", inode=1, data=b"NEW"),
        Op("rename", TEMPORARY_PREFIX + "0.tmp", "f", inode=1),
        Op("fsyncdir", "."),
        Op("fsync", inode=1),
    ]
    _count, problems = violations(_trace(ops, {"f": b"OLD"}), "f", b"OLD", b"NEW", tmp_path)
    assert any("b''" in problem for problem in problems)


def test_the_durable_point_needs_a_directory_fsync_after_the_commit(tmp_path: Path) -> None:
    """Without a directory fsync after the rename no prefix may be called durable."""
    ops = [
        Op("creat", TEMPORARY_PREFIX + "0.tmp", inode=1),
        Op("write", inode=1, data=b"NEW"),
        Op("fsync", inode=1),
        Op("rename", TEMPORARY_PREFIX + "0.tmp", "f", inode=1),
        Op("fsyncdir", "other"),
    ]
    trace = _trace(ops, {"f": b"OLD"})
    assert len(ops) + 1 == durable_point(trace, "f")
    ops.append(Op("fsyncdir", "."))
    assert len(ops) == durable_point(trace, "f")
    _count, problems = violations(trace, "f", b"OLD", b"NEW", tmp_path)
    assert [] == problems


def test_a_descriptor_reused_before_its_close_is_printed_keeps_the_new_files_writes() -> None:
    """Threads interleave: a close that began frees its number before strace prints its end.

    The worker's open of the temporary may get the number of a descriptor another thread
    is closing, and strace may print that open before the close's ``resumed`` line; the
    writes that follow belong to the temporary (a parser that closed at the resumed line
    dropped them and saw an empty file renamed into place).
    """
    root = "/r"
    temporary = TEMPORARY_PREFIX + "0.tmp"

    def hexed(text: str) -> str:  # what ``strace -xx`` prints for a string
        return "".join(f"\\x{byte:02x}" for byte in text.encode())

    at = f"AT_FDCWD<{hexed(root)}>"
    old_fd = f"5<{hexed(root + '/f')}>"
    new_fd = f"5<{hexed(root + '/' + temporary)}>"
    lines = [
        f'11 openat({at}, "{hexed("f")}", O_RDONLY|O_CLOEXEC) = {old_fd}',
        f"10 close({old_fd} <unfinished ...>",
        f'11 openat({at}, "{hexed(temporary)}", O_WRONLY|O_CREAT|O_EXCL, 0600) = {new_fd}',
        "10 <... close resumed>) = 0",
        f'11 write({new_fd}, "{hexed("NEW")}", 3) = 3',
    ]
    trace = parse_trace(lines, root, {"f": b"OLD"})
    writes = [op for op in trace.ops if op.kind == "write"]
    assert [b"NEW"] == [op.data for op in writes]


def test_a_call_split_by_another_threads_line_is_joined_as_one_call() -> None:
    """Under load strace splits a worker's fsync around the loop thread's epoll_wait.

    The joined call must read as strace prints an unsplit one: without the blank before
    ``<unfinished ...>`` and the resumed line's padding, else the fsync is not seen and a
    durable write looks lost (this failed ``make stress`` twice).
    """
    name = r"\x66"
    lines = [
        rf"11047 fsync(8<{name}> <unfinished ...>",
        r"11046 epoll_wait(3<\x65>,  <unfinished ...>",
        r"11047 <... fsync resumed>)              = 0",
        r"11046 <... epoll_wait resumed>[], 1, 10) = 0",
    ]
    joined = list(joined_lines(lines))
    assert rf"fsync(8<{name}>) = 0" in joined
    assert rf"fsync(8<{name}>) = 0" == next(line for line in joined if line.startswith("fsync"))
