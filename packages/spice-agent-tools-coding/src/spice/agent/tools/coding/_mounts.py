"""The file system type of each mount of this process, from procfs only.

``_cached`` uses it to keep its event-loop route to mounts on which an open waits on
no server and no user-space daemon (``LOCAL_FILESYSTEMS``). Only procfs is read:
asking the file system itself (``fstatfs``, even ``fstat``) could wait on an NFS server
or a FUSE daemon.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Final, final

LOCAL_FILESYSTEMS: Final = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "overlay"}
)
"""File system types (as ``/proc/self/mountinfo`` names them) on which opening a cached
regular file for reading waits on no server.

No server stands behind an open there (NFS, SMB, FUSE, 9p and every type not listed are
left to the worker thread); a read's data is checked separately (``RWF_NOWAIT``).
Overlayfs is trusted because its layers are local where it is met (containers). A
fanotify permission listener (an on-access scanner) can still hold an open on these:
``_cached`` times its opens for that (``SLOW_OPEN_SECONDS``).
"""

MAXIMUM_MOUNTINFO_BYTES: Final = 4 * 1024 * 1024
"""Largest mount table read; a larger one turns the non-blocking route off."""

_FDINFO_BYTES: Final = 4096


@final
class MountTypes:
    """The file system type of each mount of this process, by mount ID.

    Read from ``/proc/self/mountinfo`` and read again whenever the kernel reports (by
    ``poll``) that the mount table changed, so a mount ID reused by a new mount is never
    taken for the old one.
    """

    __slots__ = ("_fd", "_lock", "_poll", "_types")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLPRI | select.POLLERR)
        self._poll.poll(0)  # the table as it is now is the one read below
        self._types = self._read()

    @classmethod
    def open(cls) -> MountTypes | None:
        """The table of this process, or ``None`` where procfs cannot give it."""
        try:
            fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return cls(fd)
        except (OSError, ValueError):
            os.close(fd)
            return None

    def type_of(self, mount_id: int) -> str | None:
        """The type of the mount ``mount_id``, from a table no older than the last change."""
        with self._lock:
            if self._poll.poll(0):
                self._types = self._read()
            return self._types.get(mount_id)

    def _read(self) -> dict[int, str]:
        os.lseek(self._fd, 0, os.SEEK_SET)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(self._fd, 65_536):
            size += len(chunk)
            if size > MAXIMUM_MOUNTINFO_BYTES:
                raise ValueError("the mount table is larger than the bound")
            chunks.append(chunk)
        types: dict[int, str] = {}
        for line in b"".join(chunks).splitlines():
            ident, _, rest = line.partition(b" ")
            _, separator, tail = rest.partition(b" - ")
            if separator and ident.isdigit():
                types[int(ident)] = tail.partition(b" ")[0].decode("ascii", "replace")
        return types


def mount_id(fd: int) -> int | None:
    """The mount ID of ``fd`` (``mnt_id`` of ``/proc/self/fdinfo/FD``), or ``None``."""
    try:
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(info, _FDINFO_BYTES)
    except OSError:
        return None
    finally:
        os.close(info)
    for line in text.splitlines():
        if line.startswith(b"mnt_id:"):
            value = line[len(b"mnt_id:") :].strip()
            return int(value) if value.isdigit() else None
    return None


def on_local_filesystem(mounts: MountTypes | None, fd: int) -> bool:
    """Whether ``fd`` lies on a mount whose type (in ``mounts``) is in ``LOCAL_FILESYSTEMS``."""
    if mounts is None:
        return False
    ident = mount_id(fd)
    if ident is None:
        return False
    try:
        kind = mounts.type_of(ident)
    except (OSError, ValueError):
        return False
    return kind in LOCAL_FILESYSTEMS
