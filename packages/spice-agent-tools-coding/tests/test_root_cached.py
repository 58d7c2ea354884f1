"""The non-blocking route of ``_cached``: ``open_cached_regular`` opens what the authority
opens, or declines; it never answers differently and never waits.

Everything here is real: the confinement tree of ``test_root``, a real second mount
(``/dev/shm``), a real non-local file system (``/proc``), the kernel's real caches.
Only a kernel refusing ``RESOLVE_CACHED`` is injected, through the ``syscall`` seam.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from coding_strategies import path_strings
from hypothesis import HealthCheck, given, settings
from test_root import CONFINEMENT_TABLE, INNER, INSIDE, Tree, build_tree, describe

from spice.agent.tools.coding import _cached, _mounts, _openat2, _regular, _root
from spice.agent.tools.coding._cached import open_cached_regular
from spice.agent.tools.coding._mounts import LOCAL_FILESYSTEMS
from spice.agent.tools.coding._root import PathError, clean_path, open_root

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="openat2 exists only on Linux")

CACHE_ATTEMPTS: Final = 3
"""Tries of an assertion that needs warm caches, re-warmed by the authority in between.

``RESOLVE_CACHED`` works in the kernel's RCU walk only, which gives up on more than a
cold cache: following a symlink whose access time is due an update (relatime: one
made or changed in the same clock tick as the last follow) needs a write, so it is
declined until the authority's follow has stamped a later time.
"""
CACHE_RETRY_SECONDS: Final = 0.02
"""Pause between tries: a few ticks of the kernel's coarse clock."""

ANSWERED = (
    "file.txt",
    "sub/inner.txt",
    "link_inside",
    "link_updown",
    "sub/up_ok",
    "link_dot/file.txt",
)
"""Paths of the table the route must answer once the caches are warm (not vacuous)."""

DECLINED = (
    "link_escape",
    "link_abs_outside",
    "link_sibling",
    "proc_root",
    "link_dev_zero",
    "fifo",
    "sub",
    "dangling",
    "missing.txt",
    "loop_a",
    "file.txt/x",
)
"""Paths the route must leave to the authority: escapes, non-regular files, failures."""


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    """The confinement tree, probed once by the authority so the fast path is on."""
    built = build_tree(tmp_path)
    fd = open_root(str(built.root))
    try:
        for raw, _expected in CONFINEMENT_TABLE:
            describe(fd, raw)  # the authority's answers warm the caches too
    finally:
        os.close(fd)
    yield built
    (built.root / "xonly").chmod(0o755)


def cached_bytes(root: Path | str, raw: str) -> bytes | None:
    """What the route opens ``raw`` to, or ``None`` when it declines."""
    fd = open_cached_regular(str(root), clean_path(raw))
    if fd is None:
        return None
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def answered(root: Path | str, raw: str) -> bytes | None:
    """``cached_bytes`` with warm caches: re-warmed by the authority between tries."""
    for _ in range(CACHE_ATTEMPTS):
        answer = cached_bytes(root, raw)
        if answer is not None:
            return answer
        time.sleep(CACHE_RETRY_SECONDS)
        authority(root, raw)
    return None


def authority(root: Path | str, raw: str) -> bytes | tuple[str, str]:
    fd = open_root(str(root))
    try:
        return describe(fd, raw)
    finally:
        os.close(fd)


@pytest.mark.parametrize(("raw", "expected"), CONFINEMENT_TABLE)
def test_the_route_opens_what_the_authority_opens_or_declines(
    tree: Tree, raw: str, expected: bytes | str
) -> None:
    """Every path of the confinement table: the same bytes as the authority, or ``None``."""
    try:
        clean_path(raw)
    except PathError:  # clean_path's own refusals, before any route
        assert "invalid_arguments" == expected
        return
    answer = cached_bytes(tree.root, raw)
    if answer is not None:
        assert authority(tree.root, raw) == answer == expected


@pytest.mark.parametrize("raw", ANSWERED)
def test_cached_files_inside_the_root_are_answered(tree: Tree, raw: str) -> None:
    """A regular file (directly or through an inside symlink) opens on the route."""
    assert answered(tree.root, raw) in {INSIDE, INNER}


@pytest.mark.parametrize("raw", DECLINED)
def test_escapes_special_files_and_failures_are_left_to_the_authority(tree: Tree, raw: str) -> None:
    """The route never gives an answer of its own for these: the authority does."""
    assert cached_bytes(tree.root, raw) is None
    assert not isinstance(authority(tree.root, raw), bytes)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=path_strings)
def test_any_path_gives_the_authoritys_bytes_or_nothing(tree: Tree, raw: str) -> None:
    """Generated paths against the whole tree: the route never disagrees with the authority."""
    try:
        answer = cached_bytes(tree.root, raw)
    except PathError:
        return
    if answer is not None:
        assert authority(tree.root, raw) == answer


def test_a_path_into_another_mount_is_declined(tmp_path: Path) -> None:
    """``/dev/shm`` is its own mount: from the root ``/`` the route never enters it."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == Path("/").stat().st_dev:
        pytest.skip("/dev/shm is not a separate mount here")
    with tempfile.NamedTemporaryFile(dir=shm, prefix="spice-cached-") as handle:
        handle.write(INSIDE)
        handle.flush()
        relative = str(Path(handle.name).relative_to("/"))
        assert INSIDE == authority("/", relative)  # warm, and readable the slow way
        assert cached_bytes("/", relative) is None
        assert INSIDE == answered(shm, Path(handle.name).name)  # tmpfs is local


def test_a_root_on_a_file_system_that_is_not_local_is_declined() -> None:
    """``/proc`` is not in ``LOCAL_FILESYSTEMS``: a file there is left to the worker."""
    assert isinstance(authority("/proc/sys/kernel", "ostype"), bytes)
    assert cached_bytes("/proc/sys/kernel", "ostype") is None


def test_the_file_system_type_is_the_one_findmnt_reports(tree: Tree) -> None:
    """The mount table's type of the tree equals ``findmnt``'s; ``/proc`` is not local."""
    if shutil.which("findmnt") is None:
        pytest.skip("findmnt (util-linux) is not installed")
    assert _cached._cached_route_enabled()
    kind = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", str(tree.root)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    fd = os.open(tree.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _mounts.on_local_filesystem(_cached._mounts, fd) == (kind in LOCAL_FILESYSTEMS)
    finally:
        os.close(fd)
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not _mounts.on_local_filesystem(_cached._mounts, proc)
    finally:
        os.close(proc)


def test_a_closed_descriptor_has_no_mount() -> None:
    """``fdinfo`` of a descriptor that is not open: no mount ID, so never local."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    os.close(fd)
    assert _mounts.mount_id(fd) is None
    assert not _mounts.on_local_filesystem(_cached._mounts, fd)


MOUNT_CHANGE = """
import os, subprocess, sys
from spice.agent.tools.coding import _cached, _mounts, _root
point = sys.argv[1]
def answer():
    fd = _root.open_root(point)  # the authority, once: probes the fast path, warms the caches
    os.close(_root.open_beneath(fd, "f.txt", os.O_RDONLY, follow_final=True, regular=True))
    ident = _mounts.mount_id(fd)
    os.close(fd)
    got = _cached.open_cached_regular(point, "f.txt")
    if got is not None:
        os.close(got)
    return got is not None, ident
subprocess.run(["mount", "-t", "tmpfs", "none", point], check=True)
open(os.path.join(point, "f.txt"), "w").write("x")
first, before = answer()
subprocess.run(["umount", point], check=True)
subprocess.run(["mount", "-t", "ramfs", "none", point], check=True)  # often the same mount ID
open(os.path.join(point, "f.txt"), "w").write("x")
second, after = answer()
print(first, second, "reused" if before == after else "new")
"""


def test_a_changed_mount_table_is_read_again(tmp_path: Path) -> None:
    """A tmpfs (local) replaced by a ramfs (not listed) at the same place: declined at once.

    Real mounts in a private mount namespace (``unshare -m``, as root); the kernel often
    gives the new mount the old one's ID, which only a fresh read of the table tells apart.
    """
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    point = tmp_path / "mnt"
    point.mkdir()
    try:
        ran = subprocess.run(
            ["unshare", "-m", sys.executable, "-c", MOUNT_CHANGE, str(point)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        pytest.skip("unshare could not run")
    if ran.returncode != 0 and "unshare" in ran.stderr and "Operation not permitted" in ran.stderr:
        pytest.skip("mount namespaces are not permitted here")
    assert 0 == ran.returncode
    first, second, identity = ran.stdout.split()
    assert ("True", "False") == (first, second)
    if identity != "reused":  # a new ID is declined as unknown, which proves less
        pytest.skip("the kernel gave the new mount a new ID: the reuse case did not arise")


def test_the_portable_switch_turns_the_route_off(tree: Tree) -> None:
    """Under ``portable_only`` (and wherever openat2 is not in use) nothing opens here."""
    assert INSIDE == answered(tree.root, "file.txt")
    with _root.portable_only():
        assert cached_bytes(tree.root, "file.txt") is None


def test_a_cold_dentry_cache_is_declined(tmp_path: Path) -> None:
    """After the kernel drops its dentries, the route declines (``RESOLVE_CACHED``)."""
    if os.geteuid() != 0:
        pytest.skip("dropping the kernel's caches needs root")
    deep = tmp_path / "cold" / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "c.txt").write_bytes(INSIDE)
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("2\n")
    except OSError:
        pytest.skip("/proc/sys/vm/drop_caches is not writable here")
    assert cached_bytes(tmp_path, "cold/a/b/c.txt") is None
    assert INSIDE == authority(tmp_path, "cold/a/b/c.txt")  # the authority reads it
    assert INSIDE == answered(tmp_path, "cold/a/b/c.txt")  # and warms the caches


def test_a_kernel_without_resolve_cached_turns_the_route_off_for_good(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``EINVAL`` for ``RESOLVE_CACHED`` (Linux 5.6 to 5.11): declined now and from then on."""
    real = _openat2._syscall
    assert real is not None
    calls: list[int] = []

    def syscall(number: object, dir_fd: object, path: object, how: object, size: object) -> int:
        if how._obj.resolve & _openat2.RESOLVE_CACHED:  # type: ignore[attr-defined]  # byref's struct
            calls.append(1)
            ctypes.set_errno(errno.EINVAL)
            return -1
        return int(real(number, dir_fd, path, how, size))

    monkeypatch.setattr(_openat2, "_syscall", syscall)
    monkeypatch.setattr(_cached, "_cached_state", None)
    assert cached_bytes(tree.root, "file.txt") is None
    assert _cached._cached_state is False
    assert cached_bytes(tree.root, "file.txt") is None
    assert [1] == calls  # the second call never asked the kernel
    assert INSIDE == authority(tree.root, "file.txt")  # the authority is untouched


def test_without_a_mount_table_the_route_is_off(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``/proc/self/mountinfo`` (procfs not mounted): the type is unknown, never this route."""
    monkeypatch.setattr(_mounts.MountTypes, "open", classmethod(lambda cls: None))
    monkeypatch.setattr(_cached, "_mounts", _cached._mounts)  # restored after the test
    monkeypatch.setattr(_cached, "_cached_state", None)
    assert cached_bytes(tree.root, "file.txt") is None
    assert _cached._cached_state is False


def test_a_mount_table_past_its_bound_turns_the_route_off(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table larger than ``MAXIMUM_MOUNTINFO_BYTES`` is not read: no type, so declined."""
    monkeypatch.setattr(_mounts, "MAXIMUM_MOUNTINFO_BYTES", 16)
    monkeypatch.setattr(_cached, "_mounts", _cached._mounts)
    monkeypatch.setattr(_cached, "_cached_state", None)
    assert _mounts.MountTypes.open() is None
    assert cached_bytes(tree.root, "file.txt") is None
    assert _cached._cached_state is False


def test_the_route_holds_one_descriptor_for_the_process(tree: Tree) -> None:
    """The mount table stays open once (to be polled), whatever the number of calls."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("counting descriptors needs /proc/self/fd")
    assert _cached._cached_route_enabled()
    held = _cached._mounts
    assert held is not None
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        answered(tree.root, "file.txt")
    assert (before, held) == (len(os.listdir("/proc/self/fd")), _cached._mounts)


def test_a_mount_table_within_its_bound_is_read(tree: Tree) -> None:
    """The same table with the real bound: every mount of this process has a type."""
    mounts = _mounts.MountTypes.open()
    assert mounts is not None
    fd = os.open(tree.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ident = _mounts.mount_id(fd)
        assert ident is not None
        assert mounts.type_of(ident)
    finally:
        os.close(fd)


def test_a_file_swapped_between_the_look_and_the_open_is_declined(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``O_PATH`` look and the open must see one file; a swap in between is declined."""
    real = _openat2.openat2
    opened: list[str] = []

    def openat2(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
        if path == "file.txt" and not flags & _openat2.O_PATH:
            opened.append(path)
            (tree.root / "replacement").write_bytes(INNER)
            os.replace(tree.root / "replacement", tree.root / "file.txt")
        return real(dir_fd, path, flags, mode, resolve)

    monkeypatch.setattr(_regular, "openat2", openat2)
    for _ in range(CACHE_ATTEMPTS):  # until the look succeeded (warm caches)
        assert cached_bytes(tree.root, "file.txt") is None
        if opened:
            break
        time.sleep(CACHE_RETRY_SECONDS)
        authority(tree.root, "file.txt")
    assert ["file.txt"] == opened


def test_no_descriptor_is_left_open_by_any_answer(tree: Tree) -> None:
    """Answered or declined, the route closes every descriptor but the one it returns."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("counting descriptors needs /proc/self/fd")
    assert _cached._cached_route_enabled()  # its one mount-table descriptor is held from here
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        for raw, _expected in CONFINEMENT_TABLE:
            with contextlib.suppress(PathError):
                cached_bytes(tree.root, raw)
        assert cached_bytes("/proc/sys/kernel", "ostype") is None
    assert before == len(os.listdir("/proc/self/fd"))
