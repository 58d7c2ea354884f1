"""Linux Landlock, capabilities and ``prctl``: the kernel layers a command is put under.

Also the process tree as ``/proc`` shows it (``parent_of``, ``children``,
``descendants``). Standard library only and free of package imports but its sibling
``_seccomp`` (held to the same rule), on purpose: besides being imported by the
application (the ABI probe, ``prctl``), this module is compiled once when the server
starts and run inside every call's supervisor (``_supervisor``), which loads it by name
from a sealed memory file, never from a path a command could write (contract 10.1).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

if __package__:
    from . import _seccomp as seccomp
else:  # the supervisor: ``BOOTSTRAP`` put the module, compiled at start, in sys.modules
    import _seccomp as seccomp  # type: ignore[import-not-found,no-redef]

# Every command pays this module's imports (the supervisor's start): ``typing``,
# ``collections.abc`` and ``contextlib`` are left out at run time (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from types import TracebackType
    from typing import Final


class suppress:  # noqa: N801 - reads as contextlib.suppress, which it replaces
    """``contextlib.suppress`` without importing ``contextlib``."""

    __slots__ = ("_kinds",)

    def __init__(self, *kinds: type[BaseException]) -> None:
        self._kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return kind is not None and issubclass(kind, self._kinds)


# -- prctl -------------------------------------------------------------------------------

PR_SET_PDEATHSIG: Final = 1
PR_SET_DUMPABLE: Final = 4
PR_SET_CHILD_SUBREAPER: Final = 36
PR_SET_NO_NEW_PRIVS: Final = 38
PR_CAPBSET_READ: Final = 23
PR_CAPBSET_DROP: Final = 24
PR_GET_SECUREBITS: Final = 27
PR_SET_SECUREBITS: Final = 28
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4

# -- Landlock (include/uapi/linux/landlock.h) --------------------------------------------

_SYS_CREATE_RULESET: Final = 444
_SYS_ADD_RULE: Final = 445
_SYS_RESTRICT_SELF: Final = 446
_GENERIC_SYSCALL_MACHINES: Final = frozenset(
    {"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x", "i686", "armv7l"}
)
"""Machines whose syscall table numbers Landlock 444..446 (all but alpha, ia64, mips)."""

_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1

FS_EXECUTE: Final = 1 << 0
FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
FS_REMOVE_DIR: Final = 1 << 4
FS_REMOVE_FILE: Final = 1 << 5
FS_MAKE_CHAR: Final = 1 << 6
FS_MAKE_DIR: Final = 1 << 7
FS_MAKE_REG: Final = 1 << 8
FS_MAKE_SOCK: Final = 1 << 9
FS_MAKE_FIFO: Final = 1 << 10
FS_MAKE_BLOCK: Final = 1 << 11
FS_MAKE_SYM: Final = 1 << 12
FS_REFER: Final = 1 << 13
FS_TRUNCATE: Final = 1 << 14
FS_IOCTL_DEV: Final = 1 << 15
NET_BIND_TCP: Final = 1 << 0
NET_CONNECT_TCP: Final = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
SCOPE_SIGNAL: Final = 1 << 1

_FS_WRITES_ABI1: Final = (
    FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_CHAR
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_BLOCK
    | FS_MAKE_SYM
)

RULES: Final = (
    ("filesystem_writes", 1),
    ("refer", 2),
    ("truncate", 3),
    ("tcp_bind", 4),
    ("tcp_connect", 4),
    ("device_ioctl", 5),
    ("abstract_unix_socket_scope", 6),
    ("signal_scope", 6),
)
"""Each rule this module can enforce and the Landlock ABI that first offers it."""

NETWORK_RULES: Final = frozenset({"tcp_bind", "tcp_connect"})

DEVICES: Final = (
    b"/dev/null",
    b"/dev/zero",
    b"/dev/random",
    b"/dev/urandom",
    b"/dev/tty",
    b"/dev/ptmx",
    b"/dev/pts",
)
"""Character devices (and the pts directory) a contained command may write to."""

_DEVICE_ACCESS: Final = FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def handled_fs(abi: int) -> int:
    """The write-ish file-system rights the ruleset handles at ``abi`` (reads stay free)."""
    handled = _FS_WRITES_ABI1
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    if abi >= 5:
        handled |= FS_IOCTL_DEV
    return handled


def _attribute_size(abi: int) -> int:
    if abi >= 6:
        return 24
    if abi >= 4:
        return 16
    return 8


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 - one libc handle per process, made on first use
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _checked(result: int) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result


def prctl(option: int, value: int) -> int:
    """``prctl(option, value, 0, 0, 0)``, its result; raises ``OSError`` on failure."""
    return _checked(
        _c().prctl(
            ctypes.c_int(option),
            ctypes.c_ulong(value),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
    )


def _syscall(number: int, *arguments: object) -> int:
    return _checked(int(_c().syscall(ctypes.c_long(number), *arguments)))


def landlock_abi() -> int:
    """The running kernel's Landlock ABI version; 0 where there is no usable Landlock.

    0 covers a non-Linux system, an architecture with other syscall numbers, a kernel
    built without Landlock (``ENOSYS``) and one where it is disabled (``EOPNOTSUPP``).
    """
    if not sys.platform.startswith("linux") or os.uname().machine not in (
        _GENERIC_SYSCALL_MACHINES
    ):
        return 0
    try:
        return _syscall(
            _SYS_CREATE_RULESET, ctypes.c_void_p(None), ctypes.c_size_t(0), ctypes.c_uint32(1)
        )
    except (OSError, AttributeError):
        return 0


def enforced_rules(abi: int, allow_network: bool) -> tuple[str, ...]:
    """The rules a ruleset built at ``abi`` enforces (names of ``RULES``)."""
    return tuple(
        name
        for name, since in RULES
        if since <= abi and not (allow_network and name in NETWORK_RULES)
    )


def missing_rules(abi: int) -> tuple[str, ...]:
    """The rules the kernel's ABI lacks."""
    return tuple(name for name, since in RULES if since > abi)


def _open_path(path: bytes) -> int:
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def _add_path_rule(ruleset: int, path: bytes, access: int, required: bool) -> None:
    """Allow ``access`` beneath ``path``; a missing path is skipped unless ``required``."""
    try:
        fd = _open_path(path)
    except FileNotFoundError:
        if required:
            raise
        return
    try:
        rule = _PathBeneathAttr(access, fd)
        _syscall(
            _SYS_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)


def build_ruleset(abi: int, writable: Sequence[bytes], allow_network: bool) -> int:
    """A ruleset fd: writes only beneath ``writable`` and to ``DEVICES``; TCP unless allowed.

    Every write-ish right of ``abi`` is handled; reads and execution are not handled, so
    they stay allowed everywhere. Making a character or block device is granted nowhere.
    From ABI 4 TCP bind and connect are handled with no rule (denied) unless
    ``allow_network``; from ABI 6 signals and abstract UNIX sockets are scoped to the
    domain. The fd is close-on-exec (the kernel makes it so). Raises ``OSError`` when
    the kernel refuses a step or a ``writable`` path is missing.
    """
    handled = handled_fs(abi)
    granted = handled & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)  # no device nodes anywhere (N6)
    attribute = _RulesetAttr(handled, 0, 0)
    if abi >= 4 and not allow_network:
        attribute.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 6:
        attribute.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    ruleset = _syscall(
        _SYS_CREATE_RULESET,
        ctypes.byref(attribute),
        ctypes.c_size_t(_attribute_size(abi)),
        ctypes.c_uint32(0),
    )
    try:
        for path in writable:
            _add_path_rule(ruleset, path, granted, required=True)
        for device in DEVICES:
            _add_path_rule(ruleset, device, _DEVICE_ACCESS & handled, required=False)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def restrict_self(ruleset: int) -> None:
    """``no_new_privs``, then enter the ruleset's domain (this thread, for good)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))


def set_dumpable(dumpable: bool) -> bool:
    """``PR_SET_DUMPABLE``; ``False`` where it is unavailable (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl(PR_SET_DUMPABLE, 1 if dumpable else 0)
    except (OSError, AttributeError):
        return False
    return True


def become_subreaper() -> bool:
    """``PR_SET_CHILD_SUBREAPER``: orphans of descendants come back to this process."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        return False
    return True


def parent_of(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/PID/stat`` (``None`` once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[1])


def _parent_links() -> Iterable[tuple[int, int]]:
    """``(pid, parent)`` of every process ``/proc`` shows (a parent is a thread group)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = parent_of(int(name))
            if parent is not None:
                yield int(name), parent


def descendants(pid: int, *others: int) -> list[int]:
    """Every live descendant of ``pid`` and ``others`` (any depth, any thread's children),
    from ``/proc``.

    One pass over ``/proc/*/stat`` builds the parent links, however many roots are
    given, then the trees below them are collected (each process once).
    """
    below: dict[int, list[int]] = {}
    for child, parent in _parent_links():
        below.setdefault(parent, []).append(child)
    found: list[int] = []
    seen = {pid, *others}
    pending = list(seen)
    while pending:
        for child in below.get(pending.pop(), ()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                pending.append(child)
    return found


# -- capabilities (include/uapi/linux/capability.h, securebits.h) -----------------------

CAP_SETPCAP: Final = 8
_CAPABILITY_VERSION_3: Final = 0x20080522
_CAPABILITY_WORDS: Final = 2
MAXIMUM_CAPABILITY: Final = 63
"""The bounding set's drop loop stops here at the latest (``EINVAL`` ends it earlier)."""

SECBIT_NOROOT: Final = 1 << 0
SECBIT_NOROOT_LOCKED: Final = 1 << 1
SECBIT_NO_SETUID_FIXUP: Final = 1 << 2
SECBIT_NO_SETUID_FIXUP_LOCKED: Final = 1 << 3
SECBIT_KEEP_CAPS_LOCKED: Final = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE: Final = 1 << 6
SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: Final = 1 << 7
SECURE_BITS: Final = (
    SECBIT_NOROOT
    | SECBIT_NOROOT_LOCKED
    | SECBIT_NO_SETUID_FIXUP
    | SECBIT_NO_SETUID_FIXUP_LOCKED
    | SECBIT_KEEP_CAPS_LOCKED
    | SECBIT_NO_CAP_AMBIENT_RAISE
    | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
)
"""Root gains nothing at ``execve``, and none of it can be undone (``KEEP_CAPS`` off)."""


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def capability_sets() -> tuple[int, int, int]:
    """This thread's effective, permitted and inheritable sets (``capget``)."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * _CAPABILITY_WORDS)()
    _checked(int(_c().capget(ctypes.byref(header), data)))
    low, high = data[0], data[1]
    return (
        int(low.effective) | int(high.effective) << 32,
        int(low.permitted) | int(high.permitted) << 32,
        int(low.inheritable) | int(high.inheritable) << 32,
    )


def _bounding_set_empty() -> bool:
    for capability in range(MAXIMUM_CAPABILITY + 1):
        try:
            if prctl(PR_CAPBSET_READ, capability):
                return False
        except OSError:  # EINVAL: past the kernel's last capability
            return True
    return True


def can_empty_bounding_set() -> bool:
    """Whether this process may empty the bounding set and lock the securebits."""
    return bool(capability_sets()[0] >> CAP_SETPCAP & 1)


def drop_capabilities() -> int:
    """Hold no capability, now and after ``execve``; the ``LAYER_*`` bits achieved.

    With ``CAP_SETPCAP`` (root): ``SECURE_BITS`` set and locked, then every capability
    dropped from the bounding set (``LAYER_BOUNDING``). Always: the ambient set cleared and
    the effective, permitted and inheritable sets emptied (``LAYER_CAPABILITIES``),
    checked after the fact. Without ``CAP_SETPCAP`` the bounding set cannot be changed;
    ``no_new_privs`` (set before) keeps ``execve`` from granting anything.
    Raises ``OSError`` when a step the process may take fails.
    """
    achieved = 0
    if can_empty_bounding_set():
        prctl(PR_SET_SECUREBITS, SECURE_BITS)
        for capability in range(MAXIMUM_CAPABILITY + 1):
            try:
                prctl(PR_CAPBSET_DROP, capability)
            except OSError as error:
                if error.errno != errno.EINVAL:
                    raise
                break
        if prctl(PR_GET_SECUREBITS, 0) != SECURE_BITS:
            raise OSError(errno.EINVAL, "securebits")
        if not _bounding_set_empty():
            raise OSError(errno.EINVAL, "bounding set")
        achieved |= LAYER_BOUNDING
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * _CAPABILITY_WORDS)()
    _checked(int(_c().capset(ctypes.byref(header), data)))
    if capability_sets() != (0, 0, 0):
        raise OSError(errno.EINVAL, "capabilities")
    return achieved | LAYER_CAPABILITIES


# -- the layers a command is put under ---------------------------------------------------

LAYER_LANDLOCK: Final = 1 << 0
LAYER_SECCOMP: Final = 1 << 1
LAYER_CAPABILITIES: Final = 1 << 2
"""No capability held: effective, permitted, inheritable and ambient sets empty."""
LAYER_BOUNDING: Final = 1 << 3
"""The bounding set empty and ``SECURE_BITS`` locked (needs ``CAP_SETPCAP``: root)."""
PRIVATE_IPC: Final = 1 << 7
"""Not a layer: the command has an IPC namespace of its own, so the filter allows SysV IPC."""
PRIVATE_NETWORK: Final = 1 << 6
"""Not a layer: the command has a network namespace of its own (only its loopback), so
the filter allows ``AF_INET``/``AF_INET6`` and Landlock leaves TCP alone."""
PROXY_BRIDGE: Final = 1 << 5
"""Not a layer: the supervisor bridges ``127.0.0.1:3128`` to the proxy (``_bridge``)."""
STAGE: Final = 1 << 8
"""Not a layer: the command sees the worktree through a stage (an overlay), so its filter
sends renames to the supervisor (``_renames``), which carries out those the overlay refuses."""
_REQUESTABLE: Final = LAYER_SECCOMP | LAYER_CAPABILITIES


def apply_layers(
    ruleset: int | None,
    requested: int,
    allow_network: bool,
    listen: Callable[[bytes], None] | None = None,
) -> int:
    """Put this process under Landlock (``ruleset``), then the ``requested`` layers.

    Landlock first (it sets ``no_new_privs``), then capabilities, then the seccomp
    filter (last: nothing after it needs a refused call). Returns the ``LAYER_*`` bits
    applied; raises ``OSError`` (or ``seccomp.Unsupported``) when a requested layer
    cannot be applied, so the caller never runs the command without it. With ``STAGE``
    the filter is installed by ``listen`` (which hands its listener to the supervisor).
    """
    applied = 0
    if ruleset is not None:
        restrict_self(ruleset)
        applied |= LAYER_LANDLOCK
    if requested & LAYER_CAPABILITIES:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        applied |= drop_capabilities()
    if requested & LAYER_SECCOMP:
        program = seccomp.build(
            os.getpid(),
            allow_network,
            bool(requested & PRIVATE_IPC),
            private_network=bool(requested & PRIVATE_NETWORK),
            stage=bool(requested & STAGE),
        )
        if requested & STAGE:
            if listen is None:
                raise OSError(errno.EPERM, "a stage needs a listener")
            listen(program)
        else:
            seccomp.install(program)
        applied |= LAYER_SECCOMP
    if requested & _REQUESTABLE & ~applied:
        raise OSError(errno.EPERM, "a requested layer was not applied")
    return applied


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (single-threaded), from ``/proc``."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as file:
            return [int(field) for field in file.read().split()]
    except FileNotFoundError:
        pass
    return [child for child, parent in _parent_links() if parent == pid]
