"""The Linux ``openat2(2)`` binding and the process-wide decision to use it.

``openat2`` is called through ``ctypes`` (the standard library has no binding). The
first use probes it once per process on the root descriptor; ``ENOSYS``, ``EPERM``
(container seccomp), ``E2BIG`` and ``EINVAL`` switch the process to the portable walk of
``_root`` for good. :func:`portable_only` forces the portable walk (tests compare both
routes with it). What the fast path may answer, and why it is safe, is ``_root``'s
module docstring; this module only makes the call.

Nothing here runs a system call at import time, and nothing but plain integers is
defined at import time on other systems: the binding is loaded on the first probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Final

OPENAT2_ATTEMPTS: Final = 8
"""Tries of one ``openat2`` answering ``EAGAIN``/``EINTR`` before the call fails closed."""

SYS_OPENAT2: Final = 437
"""``openat2``'s number in the unified syscall table of the architectures listed below."""

OPENAT2_MACHINES: Final = frozenset(
    [
        "x86_64",
        "amd64",
        "aarch64",
        "arm64",
        "i386",
        "i686",
        "armv7l",
        "armv8l",
        "riscv64",
        "ppc64le",
        "ppc64",
        "s390x",
    ]
)
"""Machines whose syscall table numbers ``openat2`` ``SYS_OPENAT2``."""

O_PATH: Final = getattr(os, "O_PATH", 0)
O_LARGEFILE: Final = getattr(os, "O_LARGEFILE", 0)
O_NOATIME: Final = getattr(os, "O_NOATIME", 0)
RESOLVE_NO_XDEV: Final = 0x01
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
RESOLVE_CACHED: Final = 0x20
BENEATH: Final = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
"""The confinement every fast-path open uses (see ``_root``)."""
AT_FDCWD: Final = -100

# Answers of a first probe meaning "openat2 is not usable in this process".
_UNSUPPORTED: Final = frozenset({errno.ENOSYS, errno.EPERM, errno.E2BIG, errno.EINVAL})
RETRIED: Final = frozenset({errno.EAGAIN, errno.EINTR})
"""Answers after which the same ``openat2`` may succeed when tried again."""


class _OpenHow(ctypes.Structure):
    """``struct open_how`` of ``<linux/openat2.h>``."""

    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_OPENAT2_NUMBER: Final = ctypes.c_long(SYS_OPENAT2)
_OPEN_HOW_SIZE: Final = ctypes.c_size_t(ctypes.sizeof(_OpenHow))

state_lock: Final = threading.Lock()
"""Guards the process-wide decisions here and in ``_cached``."""
_syscall: Callable[..., int] | None = None
_fast_state: bool | None = None  # None: not probed yet; False: portable for good.
_portable_forced = 0


@contextlib.contextmanager
def portable_only() -> Iterator[None]:
    """Force the portable walk inside this block (tests compare both routes with it)."""
    global _portable_forced  # noqa: PLW0603 - one process-wide switch, under a lock
    with state_lock:
        _portable_forced += 1
    try:
        yield
    finally:
        with state_lock:
            _portable_forced -= 1


def portable_forced() -> bool:
    """Whether a :func:`portable_only` block is active."""
    return bool(_portable_forced)


def fast_path_available() -> bool:
    """Whether ``openat2`` is in use in this process (probed on first use)."""
    return bool(_fast_state) and not _portable_forced


def _load_syscall() -> Callable[..., int] | None:
    if sys.platform != "linux" or platform.machine().lower() not in OPENAT2_MACHINES:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


def openat2(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """One ``openat2`` call: the new descriptor, or ``-errno``.

    ``ENOSYS`` (a kernel without it) turns the fast path off for good.
    """
    global _fast_state  # noqa: PLW0603 - a kernel without openat2 turns it off for good
    function = _syscall
    if function is None:
        return -errno.ENOSYS
    if flags & os.O_CREAT == 0 and flags & getattr(os, "O_TMPFILE", 0) == 0:
        mode = 0
    if not flags & O_PATH:
        flags |= O_LARGEFILE
    how = _OpenHow(flags, mode, resolve)
    result = function(
        _OPENAT2_NUMBER,
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        _OPEN_HOW_SIZE,
    )
    if result < 0:
        number = ctypes.get_errno() or errno.EIO
        if number == errno.ENOSYS:
            _fast_state = False
        return -number
    return int(result)


def fast_path_enabled(root_fd: int) -> bool:
    """Probe ``openat2`` once per process; remember a fallback decision for good."""
    global _fast_state, _syscall  # noqa: PLW0603 - one process-wide decision, under a lock
    if _portable_forced:
        return False
    if _fast_state is not None:
        return _fast_state
    with state_lock:
        if _fast_state is None:
            _syscall = _load_syscall()
            answer = openat2(root_fd, ".", O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, BENEATH)
            if answer >= 0:
                os.close(answer)
                _fast_state = True
            elif -answer in _UNSUPPORTED:
                _fast_state = False
            else:
                return False  # undecided (e.g. EMFILE): portable this time, probe again later
        return _fast_state
