"""``_posix_sandbox`` in process: the ABI probe, the ruleset, ``prctl`` and the spec format.

The supervisor's own life (fork, restrict, exec, sweep) runs in its own process and is
proven from outside by ``test_posix_launcher.py``, ``test_containment.py`` and
``test_lifetime.py``; here are the parts that can run inside the test process.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import procutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._posix._plan import uncontained_spec
from spice.agent.coding._posix._supervisor import _landlock as landlock
from spice.agent.coding._posix._supervisor import _main as supervisor
from spice.agent.coding._posix._supervisor import _tmpdir as tmpdir

ABI = landlock.landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")

no_nul = st.binary(max_size=40).filter(lambda b: b"\0" not in b)


@given(
    server=st.integers(0, 1 << 22),
    abi=st.integers(0, 9),
    writable=st.lists(no_nul.filter(bool), max_size=3),
    allow_network=st.booleans(),
    executable=no_nul.filter(bool),
    arguments=st.lists(no_nul, max_size=5),
    names=st.lists(no_nul.filter(lambda b: bool(b) and b"=" not in b), max_size=4, unique=True),
    temporary=no_nul,
    layers=st.integers(0, 255),
    workdir=no_nul,
    lifeline=st.none() | st.integers(0, 1 << 16),
    cgroups=st.lists(st.integers(0, 1 << 16), max_size=3),
    processes=st.integers(0, 1 << 20),
)
def test_the_spec_survives_its_encoding(
    server: int,
    abi: int,
    writable: list[bytes],
    allow_network: bool,
    executable: bytes,
    arguments: list[bytes],
    names: list[bytes],
    temporary: bytes,
    layers: int,
    workdir: bytes,
    lifeline: int | None,
    cgroups: list[int],
    processes: int,
) -> None:
    """Every field, empty arguments and ``=`` inside values included, comes back as given:
    the typed value round-trips through its encoding (contract 12.5)."""
    environment = [name + b"=" + name + b"=x" for name in names]
    told = supervisor.SupervisorSpec(
        server=server,
        abi=abi,
        writable=writable,
        allow_network=allow_network,
        executable=executable,
        arguments=arguments,
        environment=environment,
        temporary=temporary,
        layers=layers,
        workdir=workdir,
        lifeline=lifeline,
        cgroups=cgroups,
        processes=processes,
    )
    spec = supervisor.SupervisorSpec.decode(told.encode())
    assert told == spec
    assert hash(told) == hash(spec)
    assert [executable, *arguments] == spec.argv
    assert {name: name + b"=x" for name in names} == spec.environ
    shape = f"abi={abi}, layers={layers}, arguments={len(arguments)}, environment={len(names)}"
    assert f"SupervisorSpec({shape})" == repr(spec)  # no argv, environment or path in it


def test_a_spec_with_a_nul_byte_or_cut_short_is_refused() -> None:
    """A field holding NUL would shift every field after it: refused when encoding; a
    spec cut short is refused when reading (the supervisor then says it did not start)."""
    with pytest.raises(ValueError, match="NUL"):
        supervisor.SupervisorSpec(server=1, executable=b"/bin/tr\0ue").encode()
    whole = supervisor.SupervisorSpec(server=1, executable=b"/bin/true", arguments=[b"a"])
    blob = whole.encode()
    for cut in (blob.rindex(b"\0"), blob.index(b"\0", len(supervisor.SPEC_VERSION) + 1)):
        with pytest.raises(ValueError, match="spec"):
            supervisor.SupervisorSpec.decode(blob[:cut])


def test_the_memory_file_holds_the_encoding_from_its_start_and_is_not_inherited() -> None:
    told = supervisor.SupervisorSpec(server=7, executable=b"/bin/true", arguments=[b"a" * 70_000])
    fd = told.to_memory_file()
    try:
        assert 0 == os.lseek(fd, 0, os.SEEK_CUR)
        assert not os.get_inheritable(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        assert told == supervisor.SupervisorSpec.decode(b"".join(chunks))
    finally:
        os.close(fd)


def test_a_memory_file_that_cannot_be_written_is_closed_and_a_nul_is_refused_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault (a full memory, say) leaves no descriptor behind; a spec that cannot be
    encoded makes no file at all."""
    made: list[int] = []
    create = os.memfd_create

    def tracked(name: str, flags: int = 0) -> int:
        made.append(create(name, flags))
        return made[-1]

    def failing(fd: int, data: object) -> int:
        raise OSError(28, "no space")

    monkeypatch.setattr(os, "memfd_create", tracked)
    with pytest.raises(ValueError, match="NUL"):
        supervisor.SupervisorSpec(server=1, executable=b"/bin/tr\0ue").to_memory_file()
    assert [] == made
    monkeypatch.setattr(os, "write", failing)
    with pytest.raises(OSError, match="no space"):
        supervisor.SupervisorSpec(server=1, executable=b"/bin/true").to_memory_file()
    assert 1 == len(made)
    assert not os.path.exists(f"/proc/self/fd/{made[0]}")  # closed


def test_an_uncontained_spec_names_this_server_and_the_command_as_given() -> None:
    told = uncontained_spec(
        "/bin/echo", ["a b", "é"], ["A=1"], allow_network=True, cgroups=[5, 6], processes=9
    )
    assert (os.getpid(), b"/bin/echo") == (told.server, told.executable)
    assert [b"/bin/echo", b"a b", "é".encode()] == told.argv
    assert {b"A": b"1"} == told.environ
    assert (True, (5, 6), 9) == (told.allow_network, told.cgroups, told.processes)
    assert (0, 0, b"") == (told.abi, told.layers, told.workdir)  # no plan: nothing confined


def test_a_spec_of_another_version_is_refused() -> None:
    """The supervisor reads only its own format."""
    with pytest.raises(ValueError, match="spec"):
        supervisor.SupervisorSpec.decode(b"other\x001")


@pytest.mark.parametrize(
    ("abi", "refer", "truncate", "ioctl"),
    [
        (1, False, False, False),
        (2, True, False, False),
        (3, True, True, False),
        (5, True, True, True),
    ],
)
def test_each_abi_handles_the_write_rights_it_has(
    abi: int, refer: bool, truncate: bool, ioctl: bool
) -> None:
    """Writes from ABI 1, REFER from 2, TRUNCATE from 3, IOCTL_DEV from 5; reads never."""
    handled = landlock.handled_fs(abi)
    assert handled & landlock.FS_WRITE_FILE
    assert (refer, truncate, ioctl) == (
        bool(handled & landlock.FS_REFER),
        bool(handled & landlock.FS_TRUNCATE),
        bool(handled & landlock.FS_IOCTL_DEV),
    )
    reads = landlock.FS_READ_FILE | landlock.FS_READ_DIR | landlock.FS_EXECUTE
    assert 0 == handled & reads


def test_the_probe_answers_zero_on_another_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Syscall numbers differ on alpha, ia64 and mips: no Landlock is assumed there."""
    real = os.uname()
    fake = os.uname_result((real.sysname, real.nodename, real.release, real.version, "mips"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    assert 0 == landlock.landlock_abi()


def test_the_probe_answers_zero_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not Linux: no Landlock, no dumpability switch, no subreaper."""
    monkeypatch.setattr(sys, "platform", "darwin")
    assert (0, False, False) == (
        landlock.landlock_abi(),
        landlock.set_dumpable(False),
        landlock.become_subreaper(),
    )


def test_a_refusing_prctl_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel (or seccomp) that refuses prctl: both helpers answer False."""

    def refuse(option: int, value: int) -> None:
        raise PermissionError(option, value)

    monkeypatch.setattr(landlock, "prctl", refuse)
    assert (False, False) == (landlock.set_dumpable(False), landlock.become_subreaper())


def test_a_failing_syscall_raises_with_its_errno() -> None:
    """An invalid ruleset fd is EBADF from the kernel, raised as OSError."""
    with pytest.raises(OSError, match="descriptor") as caught:
        landlock._syscall(landlock._SYS_RESTRICT_SELF, ctypes.c_int(-1), ctypes.c_uint32(0))
    assert errno.EBADF == caught.value.errno


@needs_landlock
def test_a_ruleset_is_built_for_real_and_closed_on_exec(tmp_path: Path) -> None:
    """The kernel accepts the rules; the fd is close-on-exec; nothing restricts us yet."""
    ruleset = landlock.build_ruleset(ABI, [os.fsencode(tmp_path)], allow_network=False)
    try:
        assert not os.get_inheritable(ruleset)
    finally:
        os.close(ruleset)
    (tmp_path.parent / "still-writable").write_text("x")
    (tmp_path.parent / "still-writable").unlink()


@needs_landlock
def test_a_missing_writable_path_fails_the_ruleset(tmp_path: Path) -> None:
    """A root that does not exist cannot be allowed: FileNotFoundError, no fd left."""
    before = procutil.open_descriptors()
    with pytest.raises(FileNotFoundError):
        landlock.build_ruleset(ABI, [os.fsencode(tmp_path / "gone")], allow_network=True)
    assert before == procutil.open_descriptors()


@pytest.fixture
def child() -> Iterator[int]:
    """A sleeping child of this process, ended and reaped afterwards."""
    process = subprocess.Popen(["/bin/sleep", "60"])
    yield process.pid
    process.kill()
    process.wait()


def test_children_lists_a_direct_child(child: int) -> None:
    """The kernel's children list names the child we started."""
    assert child in landlock.children(os.getpid())


def test_children_falls_back_to_a_proc_scan(child: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CONFIG_PROC_CHILDREN the /proc/*/stat scan finds the same child."""
    real_open = builtins.open

    def no_children_file(path: str, mode: str = "r") -> IO[bytes]:
        if path.endswith("/children"):
            raise FileNotFoundError(path)
        return real_open(path, "rb")

    monkeypatch.setattr(builtins, "open", no_children_file)
    assert child in landlock.children(os.getpid())


# -- remove_tree (the call's TMPDIR) ------------------------------------------------------


def test_remove_tree_removes_every_kind_of_entry_and_follows_no_symlink(tmp_path: Path) -> None:
    """Files, a FIFO, nested directories (one ``000``) go; what the symlinks name stays."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("kept\n")
    outside.chmod(0o500)
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file").write_bytes(b"x" * 4096)
    os.mkfifo(tree / "fifo")
    (tree / "to-directory").symlink_to(outside)
    (tree / "a" / "to-file").symlink_to(outside / "kept")
    (tree / "a" / "b").chmod(0)
    (tree / "a").chmod(0o500)
    try:
        assert tmpdir.remove_tree(str(tree)) is True
        assert not tree.exists()
        assert ("kept\n", 0o500) == ((outside / "kept").read_text(), outside.stat().st_mode & 0o777)
    finally:
        outside.chmod(0o700)


def test_remove_tree_of_a_missing_path_is_true_and_of_a_file_beneath_a_file_false(
    tmp_path: Path,
) -> None:
    """Nothing there is removed already; a path that cannot be reached is not proven gone."""
    assert tmpdir.remove_tree(str(tmp_path / "missing")) is True
    (tmp_path / "file").write_text("")
    assert tmpdir.remove_tree(str(tmp_path / "file" / "below")) is False
    assert tmpdir.remove_tree(os.fsencode(tmp_path / "file")) is True


def test_a_tree_whose_parent_is_a_file_is_not_removable_and_one_without_a_parent_is_gone(
    tmp_path: Path,
) -> None:
    """The parent cannot be opened as a directory: ``False`` (never raises); a missing
    parent: nothing is there, ``True``."""
    (tmp_path / "file").write_bytes(b"kept")
    assert tmpdir.remove_tree(str(tmp_path / "file" / "tree")) is False
    assert b"kept" == (tmp_path / "file").read_bytes()
    assert tmpdir.remove_tree(str(tmp_path / "missing" / "tree")) is True
