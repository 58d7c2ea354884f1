"""Where a root's stages live, one stage per call, and its mount (contract 13.1).

A call's stage is ``<state>/spice-coding/stages/<hash of the root>/<call>/`` with ``upper/``
(what the call writes) and ``work/`` (the overlay's own). ``<state>`` is
``$XDG_STATE_HOME`` when absolute, else ``~/.local/state``. The stages directory must lie
on the worktree's file system (the commit renames from the upper into the worktree, and
an overlay keeps inode numbers constant only there), outside the worktree and every
writable place, and the worktree outside it: otherwise ``StagePlace.reason`` says why no
call is staged and ``tools`` and every answer say ``staged: false``.

The overlay is mounted in the spawned ``bwrap``'s own process, between ``fork`` and
``execve`` (``Stage.enter``, run as Popen's ``preexec_fn``): a new user namespace that
maps the server's own user and group to themselves, a new mount namespace made private,
and ``overlay`` with ``userxattr`` on the worktree's path, ``volatile``: a copy-up does
not wait on a sync (measured: 1,000 appends to existing files 2.5 s with syncs, 0.35 s
without); the commit syncs the stage once before it renames (``Stage.sync``), and a stage
a crash left is discarded whole anyway. ``bwrap`` then makes its
namespaces inside those, and its ``--bind`` of the worktree binds the overlay: nothing
the command writes reaches the worktree, and nothing of the stage is visible outside.
When the call's last process is gone the namespace and its mount go with it; the upper
layer is then read (``_upper``) and committed by the join.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from spice.agent.tools.coding._journal_records import state_home

from .._caches import ROOT_HASH_CHARACTERS
from ._upper import UpperRead, read_upper

__all__ = [
    "NOT_ON_THE_WORKTREES_DEVICE",
    "NO_HOME",
    "NO_NAMESPACES",
    "NO_OVERLAY",
    "STAGES",
    "STATE_APPLICATION",
    "Stage",
    "StagePlace",
    "remove_left",
    "stage_place",
    "stage_report",
    "state_base",
]

STATE_APPLICATION: Final = "spice-coding"
STAGES: Final = "stages"
STAGE_PREFIX: Final = "call-"
MAXIMUM_LEFT_STAGES: Final = 256
"""Stages of servers that are gone removed at one start, at most (the rest at the next)."""

NO_HOME: Final = "no home or state directory is known for the server's user"
NOT_ON_THE_WORKTREES_DEVICE: Final = (
    "the state directory is not on the worktree's file system (set XDG_STATE_HOME to a "
    "directory there)"
)
WITHIN_A_WRITABLE_PLACE: Final = (
    "the state directory lies in the worktree or a writable place (set XDG_STATE_HOME elsewhere)"
)
NO_OVERLAY: Final = (
    "this kernel does not let the server mount an overlay in a user namespace of its own"
)
CANNOT_MAKE: Final = "the stages directory cannot be made (set XDG_STATE_HOME)"
NO_NAMESPACES: Final = "commands run without user namespaces (the Landlock fallback)"

_CLONE_NEWNS: Final = 0x00020000
_CLONE_NEWUSER: Final = 0x10000000
_MS_REC: Final = 0x4000
_MS_PRIVATE: Final = 1 << 18
_MS_NOSUID: Final = 2
_MS_NODEV: Final = 4
_MS_BIND: Final = 4096
_O_PATH: Final = getattr(os, "O_PATH", 0o10000000)

_PR_SET_DUMPABLE: Final = 4
_CALLS: list[tuple[Any, Any, Any, Any]] = []
"""``unshare``, ``mount``, ``prctl`` and ``syncfs`` of the C library, resolved once in the
server (``_calls``) and never in a spawned child (no loader work between fork and exec),
nor at import (Windows imports this module and has no ``CDLL(None)``)."""


def _calls() -> tuple[Any, Any, Any, Any]:
    if not _CALLS:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare.argtypes = (ctypes.c_int,)
        libc.mount.argtypes = (
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        )
        _CALLS.append((libc.unshare, libc.mount, libc.prctl, libc.syncfs))
    return _CALLS[0]


def state_base(environ: Mapping[str, str]) -> str | None:
    """``<state>/spice-coding`` (``$XDG_STATE_HOME`` when absolute, else
    ``~/.local/state``: the journal's own rule), ``None`` without a home."""
    home = state_home(environ)
    return None if home is None else os.path.join(home, STATE_APPLICATION)


def _beneath(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


@final
@dataclass(frozen=True, slots=True)
class StagePlace:
    """Where a root's stages are made (``directory``), or why none is (``reason``)."""

    directory: str | None
    reason: str | None = None

    @property
    def staged(self) -> bool:
        return self.directory is not None


def stage_place(root: str, environ: Mapping[str, str], writable: Sequence[str]) -> StagePlace:
    """Decide, once at start, where the root's stages live (see the module docstring);
    ``writable``: the real paths every command may write (the root first)."""
    base = state_base(environ)
    if base is None:
        return StagePlace(None, NO_HOME)
    digest = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()
    directory = os.path.join(base, STAGES, digest[:ROOT_HASH_CHARACTERS])
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        real = os.path.realpath(directory)
        info = os.stat(real)
        worktree = os.stat(root)
    except OSError:
        return StagePlace(None, CANNOT_MAKE)
    if any(_beneath(real, place) for place in writable) or _beneath(root, real):
        return StagePlace(None, WITHIN_A_WRITABLE_PLACE)
    if info.st_dev != worktree.st_dev:
        return StagePlace(None, NOT_ON_THE_WORKTREES_DEVICE)
    if not _probe(real):
        return StagePlace(None, NO_OVERLAY)
    remove_left(real)
    return StagePlace(real)


def _owner() -> str:
    """A stage's name prefix for this server: its pid and start time (so the next start
    knows a stage whose server is gone)."""
    return f"{STAGE_PREFIX}{os.getpid()}-{_start_time(os.getpid())}-"


def _start_time(pid: int) -> str | None:
    """A process's start time (``/proc/<pid>/stat`` field 22), ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def remove_left(directory: str) -> int:
    """Remove the stages a server that is gone left beneath ``directory`` (its pid is
    gone or names another process); at most ``MAXIMUM_LEFT_STAGES``. How many went."""
    removed = 0
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return 0
    for name in names:
        if removed >= MAXIMUM_LEFT_STAGES or not name.startswith(STAGE_PREFIX):
            continue
        pid, _, rest = name[len(STAGE_PREFIX) :].partition("-")
        started, _, _ = rest.partition("-")
        if pid.isdigit() and _start_time(int(pid)) == started:
            continue  # a live server's call
        if Stage(os.path.join(directory, name), directory).remove():
            removed += 1
    return removed


def stage_report(directory: str | None, reason: str | None) -> dict[str, object]:
    """The ``tools`` output's ``stage`` object: whether calls are staged, and where or
    why not (contract 13.1: a stage that cannot be made is said, never skipped)."""
    if directory is None:
        return {"staged": False, "reason": reason or NO_NAMESPACES}
    return {
        "staged": True,
        "where": directory,
        "commit": "by rename on the worktree's file system",
        "guarantees": (
            "nothing a call writes in the worktree is visible outside before the call "
            "ends; its changes are read from the kernel's upper layer and each path is "
            "judged by the protected-paths policy, then renamed into place; a path the "
            "user changed meanwhile is kept (conflicts)"
        ),
        "not_guaranteed": (
            "writable places other than the worktree (--allow-write, caches) are not "
            "staged; a server killed during a commit may leave it part-applied"
        ),
    }


def _probe(directory: str) -> bool:
    """Mount an overlay once, in a child, as every call's spawn will (``Stage.enter``)."""
    try:
        stage = Stage.make(directory, tempfile.mkdtemp(prefix=".probe-", dir=directory))
    except OSError:
        return False
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - measured in the child's exit status
            try:
                stage.enter()
                os._exit(0)
            except BaseException:  # noqa: BLE001 - any failure: no overlay here
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        os.rmdir(stage.lower)
        stage.remove()


@final
class Stage:
    """One call's stage: its directory, its layers, and when it was opened."""

    def __init__(self, path: str, lower: str, direct: Sequence[str] = ()) -> None:
        self.path = path
        self.lower = lower
        self.direct = tuple(os.fsencode(place) for place in direct)
        """``--allow-write`` places beneath the worktree: bound over the overlay from the
        host (written directly, as outside a stage)."""
        self.upper = os.path.join(path, "upper")
        self.work = os.path.join(path, "work")
        self.opened_ns = 0
        """When the stage opened, on the file system's clock (``Journal.opening``): a
        worktree path whose change time is not earlier was changed by another writer."""
        uid, gid = os.getuid(), os.getgid()
        self._maps = (f"{uid} {uid} 1\n".encode(), f"{gid} {gid} 1\n".encode())
        self._options = (
            b"lowerdir="
            + _escaped(lower)
            + b",upperdir="
            + _escaped(self.upper)
            + b",workdir="
            + _escaped(self.work)
            + b",userxattr,volatile"
        )
        self._target = os.fsencode(lower)
        self._unshare, self._mount, self._prctl, self._syncfs = _calls()

    @classmethod
    def make(cls, directory: str, lower: str, direct: Sequence[str] = ()) -> Stage:
        """A new stage beneath ``directory`` (a ``StagePlace``'s) over the root ``lower``;
        ``direct``: the writable places beneath it that are not staged."""
        path = tempfile.mkdtemp(prefix=_owner(), dir=directory)
        stage = cls(path, lower, direct)
        try:
            os.mkdir(stage.upper, 0o755)
            os.mkdir(stage.work, 0o700)
        except OSError:
            stage.remove()
            raise
        return stage

    def workdir_identity(self, held: os.stat_result) -> bytes:
        """What the supervisor finds the held working directory to be through the
        overlay (``*:INO``: any device): a directory keeps its inode number there (the
        layers share one file system), but the root is the upper layer's root."""
        root = os.stat(self.lower)
        if (held.st_dev, held.st_ino) == (root.st_dev, root.st_ino):
            return f"*:{os.stat(self.upper).st_ino}".encode()
        return f"*:{held.st_ino}".encode()

    def enter(self) -> None:
        """In the spawned process, before ``execve``: the user and mount namespaces and
        the overlay on the worktree (see the module docstring). Raises ``OSError``."""
        # A hardened server is not dumpable, so its /proc/self is root's: this child, about
        # to run bwrap (which makes it dumpable again anyway), may write its maps.
        if self._prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
        if self._unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        _write(b"/proc/self/setgroups", b"deny")
        _write(b"/proc/self/uid_map", self._maps[0])
        _write(b"/proc/self/gid_map", self._maps[1])
        if self._mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "mount")
        held = [os.open(place, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for place in self.direct]
        flags = _MS_NOSUID | _MS_NODEV
        if self._mount(b"overlay", self._target, b"overlay", flags, self._options) != 0:
            raise OSError(ctypes.get_errno(), "mount")
        for place, fd in zip(self.direct, held, strict=True):
            source = b"/proc/self/fd/%d" % fd
            if self._mount(source, place, None, _MS_BIND | _MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), "mount")
            os.close(fd)

    def sync(self) -> None:
        """Write what the call wrote to disk, once for the whole stage (the overlay is
        ``volatile``: no copy-up waits on a sync), before the commit renames it into the
        worktree. ``OSError`` when the file system cannot."""
        fd = os.open(self.upper, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if self._syncfs(fd) != 0:
                raise OSError(ctypes.get_errno(), "syncfs")
        finally:
            os.close(fd)

    def read(self) -> UpperRead:
        """The call's changes (after its last process is gone)."""
        return read_upper(self.lower, self.upper)

    def remove(self) -> bool:
        """Remove the stage whatever the call left in it (the overlay's work directory is
        left without permissions); whether it is gone."""
        for top, directories, _ in os.walk(self.path):
            for name in directories:
                path = os.path.join(top, name)
                try:
                    info = os.lstat(path)
                    if stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o700 != 0o700:
                        os.chmod(path, 0o700)
                except OSError:
                    continue
        shutil.rmtree(self.path, ignore_errors=True)
        return not os.path.lexists(self.path)


def _escaped(path: str) -> bytes:
    """A layer's path in the overlay's option string (``\\``, ``,`` and ``:`` escaped)."""
    raw = os.fsencode(path)
    for special in (b"\\", b",", b":"):
        raw = raw.replace(special, b"\\" + special)
    return raw


def _write(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
