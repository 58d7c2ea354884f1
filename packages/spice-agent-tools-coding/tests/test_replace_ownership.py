"""Replace keeps owner and group, never hands setuid/setgid to another owner (contract 9.1).

The suite runs as root here, so the real ``fchown`` is exercised: a file of another user
is replaced and keeps its owner. The failure of ``fchown`` is caused for real in a forked
unprivileged child, and injected through the syscall seam in-process.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Final

import pytest
from replace_helpers import (
    Recording,
    digest,
    make_tool,
    replace_arguments,
    run,
    temporaries,
)

from spice.agent.tools.coding._commit import POSIX, Checkpoint, CommitGate, write_file
from spice.agent.tools.coding._decision import Request

OLD = b"#!/bin/sh\necho old\n"
NEW = "#!/bin/sh\necho new\n"
NOBODY: Final = 65534
"""An unprivileged uid and gid (``nobody``/``nogroup``)."""
SETUID_MODE: Final = 0o6755

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files of others")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A worktree root holding ``f.sh`` with ``OLD``."""
    tree = tmp_path / "root"
    tree.mkdir()
    (tree / "f.sh").write_bytes(OLD)
    return tree


def _owner(path: Path) -> tuple[int, int]:
    seen = path.stat()
    return seen.st_uid, seen.st_gid


@as_root
async def test_replacing_another_users_setuid_file_keeps_its_owner_group_and_mode(
    root: Path,
) -> None:
    """Root replaces a nobody-owned 06755 file: still nobody's, still 06755, not changed."""
    target = root / "f.sh"
    os.chown(target, NOBODY, NOBODY)
    target.chmod(SETUID_MODE)
    syscalls = Recording()
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert content["committed"] is True
    assert content["owner_changed"] is False
    assert (NOBODY, NOBODY) == _owner(target)
    assert SETUID_MODE == stat.S_IMODE(target.stat().st_mode)
    assert 1 == syscalls.calls["fchown"]
    assert NEW.encode() == target.read_bytes()


@as_root
async def test_when_the_owner_cannot_be_kept_setuid_and_setgid_are_dropped(root: Path) -> None:
    """A failing fchown: the committed file is the runner's, 0755 not 06755, owner_changed."""
    target = root / "f.sh"
    os.chown(target, NOBODY, NOBODY)
    target.chmod(SETUID_MODE)
    syscalls = Recording(failures={"fchown": [1]})
    result, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert content["ok"] is True
    assert "ok" == next(iter(content))
    assert content["owner_changed"] is True
    assert result.problem is None
    assert (os.geteuid(), os.getegid()) == _owner(target)
    assert 0o755 == stat.S_IMODE(target.stat().st_mode)
    assert NEW.encode() == target.read_bytes()
    assert [] == temporaries(root)


async def test_a_file_the_runner_owns_needs_no_fchown_and_keeps_setuid(root: Path) -> None:
    """The temporary already has the owner and group: no fchown, mode kept, not changed."""
    target = root / "f.sh"
    target.chmod(SETUID_MODE)
    syscalls = Recording(failures={"fchown": [1]})
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert content["owner_changed"] is False
    assert 0 == syscalls.calls["fchown"]
    assert SETUID_MODE == stat.S_IMODE(target.stat().st_mode)


@as_root
async def test_a_committed_failure_also_says_whether_the_owner_changed(root: Path) -> None:
    """durability_unconfirmed after a failed fchown still carries owner_changed: true."""
    target = root / "f.sh"
    os.chown(target, NOBODY, NOBODY)
    syscalls = Recording(failures={"fchown": [1], "fsync": [3]})
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert ["ok", "code", "message"] == list(content)[:3]
    assert ("durability_unconfirmed", True, True) == (
        content["code"],
        content["committed"],
        content["owner_changed"],
    )


async def test_a_create_reports_owner_changed_false(root: Path) -> None:
    """A new file has no previous owner: owner_changed is false and no fchown is made."""
    syscalls = Recording()
    _, content = await run(
        make_tool(root, syscalls), {"path": "n.sh", "content": NEW, "create": True}
    )
    assert content["owner_changed"] is False
    assert 0 == syscalls.calls["fchown"]


@as_root
async def test_a_new_inode_with_the_same_bytes_gives_its_owner_and_mode_to_the_commit(
    root: Path,
) -> None:
    """Saved by rename between the checks with another owner and mode: those are kept."""
    target = root / "f.sh"

    def save_by_rename() -> None:
        saved = root / "f.sh.saved"
        saved.write_bytes(OLD)
        os.chown(saved, NOBODY, NOBODY)
        saved.chmod(0o640)
        saved.replace(target)

    syscalls = Recording(hooks={Checkpoint.TEMPORARY_SYNCED: save_by_rename})
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert (True, False) == (content["committed"], content["owner_changed"])
    assert (NOBODY, NOBODY) == _owner(target)
    assert 0o640 == stat.S_IMODE(target.stat().st_mode)
    assert NEW.encode() == target.read_bytes()


@as_root
async def test_metadata_that_cannot_be_given_after_the_swap_changes_nothing(root: Path) -> None:
    """The second fchmod (for the swapped file's mode) fails: temporary_failed, theirs kept."""
    target = root / "f.sh"

    def save_by_rename() -> None:
        saved = root / "f.sh.saved"
        saved.write_bytes(OLD)
        saved.chmod(0o600)
        saved.replace(target)

    syscalls = Recording(
        failures={"fchmod": [2]}, hooks={Checkpoint.TEMPORARY_SYNCED: save_by_rename}
    )
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert ("temporary_failed", False) == (content["code"], content["committed"])
    assert OLD == target.read_bytes()
    assert 0o600 == stat.S_IMODE(target.stat().st_mode)
    assert [] == temporaries(root)


def _unprivileged_write(
    directory: Path, leaf: str, data: bytes, expected: bytes
) -> dict[str, object]:
    """Run the engine in a forked child that dropped to ``nobody``; return its outcome."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its answer is checked by the parent
        status = 1
        try:
            os.close(reader)
            # Opened while still root, so no ancestor of ``directory`` needs to be
            # searchable by nobody; every later call is relative to it.
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            request = Request(leaf, data, digest(data), digest(expected), 1 << 20)
            outcome = write_file(POSIX, dir_fd, request, CommitGate())
            fields = {
                "code": outcome.code,
                "committed": outcome.committed,
                "owner_changed": outcome.owner_changed,
            }
            os.write(writer, json.dumps(fields).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    try:
        with os.fdopen(reader, "rb") as pipe:
            answer = pipe.read()
    finally:
        _, status = os.waitpid(pid, 0)
    assert 0 == os.waitstatus_to_exitcode(status)
    decoded = json.loads(answer)
    assert isinstance(decoded, dict)
    return decoded


@as_root
def test_an_unprivileged_runner_replacing_its_own_file_keeps_everything(tmp_path: Path) -> None:
    """nobody replaces nobody's 0755 file for real: owner kept, owner_changed false."""
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chown(directory, NOBODY, NOBODY)
    target = directory / "f.sh"
    target.write_bytes(OLD)
    os.chown(target, NOBODY, NOBODY)
    target.chmod(0o755)
    answer = _unprivileged_write(directory, "f.sh", NEW.encode(), OLD)
    assert {"code": None, "committed": True, "owner_changed": False} == answer
    assert (NOBODY, NOBODY) == _owner(target)
    assert 0o755 == stat.S_IMODE(target.stat().st_mode)


@as_root
@pytest.mark.parametrize("mode", [SETUID_MODE, 0o4755, 0o2775])
def test_an_unprivileged_runner_replacing_its_own_setuid_file_keeps_the_bits(
    tmp_path: Path, mode: int
) -> None:
    """nobody replaces nobody's setuid/setgid file for real (no CAP_FSETID): bits kept (B4).

    The kernel clears setuid/setgid on a write by an unprivileged writer; the mode is
    given after the content, so the committed file keeps it and nothing was changed.
    """
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chown(directory, NOBODY, NOBODY)
    target = directory / "f.sh"
    target.write_bytes(OLD)
    os.chown(target, NOBODY, NOBODY)
    target.chmod(mode)
    answer = _unprivileged_write(directory, "f.sh", NEW.encode(), OLD)
    assert {"code": None, "committed": True, "owner_changed": False} == answer
    assert (NOBODY, NOBODY) == _owner(target)
    assert mode == stat.S_IMODE(target.stat().st_mode)
    assert NEW.encode() == target.read_bytes()


async def test_the_temporary_stays_private_while_its_content_is_written(root: Path) -> None:
    """At the first write the temporary is the runner's ``0600``: the mode comes after."""
    target = root / "f.sh"
    target.chmod(SETUID_MODE)
    modes: list[int] = []

    def look() -> None:
        (name,) = temporaries(root)
        modes.append(stat.S_IMODE(name.stat().st_mode))

    syscalls = Recording(slow={("write", 1): look})
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.sh", NEW, OLD))
    assert content["owner_changed"] is False
    assert [0o600] == modes
    assert SETUID_MODE == stat.S_IMODE(target.stat().st_mode)


@as_root
def test_an_unprivileged_runner_replacing_roots_setuid_file_drops_setuid(tmp_path: Path) -> None:
    """nobody replaces root's 06755 file in a directory it may write: fchown really fails."""
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chown(directory, NOBODY, NOBODY)
    target = directory / "f.sh"
    target.write_bytes(OLD)
    target.chmod(SETUID_MODE)
    answer = _unprivileged_write(directory, "f.sh", NEW.encode(), OLD)
    assert {"code": None, "committed": True, "owner_changed": True} == answer
    assert (NOBODY, NOBODY) == _owner(target)
    assert 0o755 == stat.S_IMODE(target.stat().st_mode)
    assert NEW.encode() == target.read_bytes()
