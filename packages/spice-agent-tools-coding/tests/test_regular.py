"""``open_regular``: the one routine every route opens a regular file with (B11).

Real files, FIFOs, symlinks and directories; a swap between the look and the open is
made for real through the ``Calls`` seam (a real rename at the moment of the open).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from replace_helpers import Recording

from spice.agent.tools.coding import _cached, _commit, _decision, _openat2, _regular, _root
from spice.agent.tools.coding._regular import OS_CALLS, Refusal, Refused, Regular, open_regular

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="openat2 exists only on Linux")


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "file.txt").write_bytes(b"inside\n")
    (tmp_path / "big.txt").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to("file.txt")
    os.mkfifo(tmp_path / "fifo")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def _routes(fd: int) -> list[int | None]:
    """``None`` for the portable route, and the ``openat2`` route where it is in use."""
    return [None, _openat2.BENEATH] if _openat2.fast_path_enabled(fd) else [None]


def _open(fd: int, name: str, resolve: int | None, **kwargs: object) -> Regular | Refused:
    flags = os.O_RDONLY | (os.O_NOFOLLOW if resolve is not None else 0)
    return open_regular(fd, name, flags, resolve=resolve, **kwargs)  # type: ignore[arg-type]


def test_a_regular_file_is_opened_with_its_status(directory: int) -> None:
    for resolve in _routes(directory):
        opened = _open(directory, "file.txt", resolve)
        assert isinstance(opened, Regular)
        try:
            assert b"inside\n" == os.read(opened.fd, 100)
            assert os.fstat(opened.fd).st_ino == opened.status.st_ino
            assert os.get_blocking(opened.fd) is False
        finally:
            os.close(opened.fd)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("missing.txt", Refusal.MISSING),
        ("link", Refusal.LINK),
        ("fifo", Refusal.NOT_REGULAR),
        ("sub", Refusal.NOT_REGULAR),
    ],
)
def test_anything_but_a_regular_file_is_refused_without_a_descriptor(
    directory: int, name: str, reason: Refusal
) -> None:
    """A FIFO is refused at the look: its open would block without ``O_NONBLOCK``."""
    before = len(os.listdir("/proc/self/fd")) if sys.platform == "linux" else 0
    for resolve in _routes(directory):
        assert reason == _open(directory, name, resolve).reason  # type: ignore[union-attr]
    if sys.platform == "linux":
        assert before == len(os.listdir("/proc/self/fd"))


def test_admit_decides_from_the_look_on_both_sides_of_the_size(directory: int) -> None:
    for resolve in _routes(directory):
        refused = _open(directory, "big.txt", resolve, admit=lambda size: size <= 99)
        assert Refused(Refusal.TOO_LARGE) == refused
        admitted = _open(directory, "big.txt", resolve, admit=lambda size: size <= 100)
        assert isinstance(admitted, Regular)
        os.close(admitted.fd)


def test_a_file_swapped_between_the_look_and_the_open_is_changed(
    tmp_path: Path, directory: int
) -> None:
    """A real rename at the moment of the open: another inode, so ``CHANGED`` and no fd."""

    class Swapping:
        def open(self, name: str, flags: int, mode: int, dir_fd: int) -> int:
            (tmp_path / "new").write_bytes(b"other\n")
            os.replace(tmp_path / "new", tmp_path / name)
            return OS_CALLS.open(name, flags, mode, dir_fd)

        def lstat(self, name: str, dir_fd: int) -> os.stat_result:
            return OS_CALLS.lstat(name, dir_fd)

        def fstat(self, fd: int) -> os.stat_result:
            return OS_CALLS.fstat(fd)

        def close(self, fd: int) -> None:
            OS_CALLS.close(fd)

    assert Refused(Refusal.CHANGED) == open_regular(
        directory, "file.txt", os.O_RDONLY, calls=Swapping()
    )


def test_a_failing_fstat_after_the_open_is_a_refusal_not_an_error(
    tmp_path: Path, directory: int
) -> None:
    """An injected ``EIO`` from the ``fstat`` of the opened file: ``OPEN_FAILED``, closed."""
    calls = Recording(failures={"fstat": {1}})
    refused = open_regular(directory, "file.txt", os.O_RDONLY, calls=calls)
    assert isinstance(refused, Refused)
    assert Refusal.OPEN_FAILED == refused.reason
    assert calls.calls["close"] == 1


@linux_only
def test_every_route_opens_through_open_regular(
    tmp_path: Path, directory: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The portable walk, the fast path, the loop's route and ``inspect``: one routine each."""
    seen: list[str] = []
    real = _regular._same

    def same(fd: int, looked: os.stat_result, calls: _regular.Calls) -> Regular | Refused:
        seen.append("opened")
        return real(fd, looked, calls)

    monkeypatch.setattr(_regular, "_same", same)
    root = _root.open_root(str(tmp_path))
    try:
        with _root.portable_only():
            os.close(
                _root.open_beneath(root, "file.txt", os.O_RDONLY, follow_final=True, regular=True)
            )
        assert ["opened"] == seen
        os.close(_root.open_beneath(root, "file.txt", os.O_RDONLY, follow_final=True, regular=True))
        assert _root.fast_path_available()
        assert ["opened"] * 2 == seen
        found = _commit.inspect(_commit.POSIX, directory, "file.txt", 100)
        assert isinstance(found, _decision.Current)
        assert ["opened"] * 3 == seen
    finally:
        os.close(root)
    for _ in range(3):  # warm caches
        fd = _cached.open_cached_regular(str(tmp_path), "file.txt")
        if fd is not None:
            os.close(fd)
            break
    else:
        pytest.skip("the loop's route declined (cold caches or not a local file system)")
    assert len(seen) >= 4
