"""Linux Landlock and process-lifetime primitives, and the per-call supervisor.

Standard library only and free of package imports but its sibling ``_seccomp`` (held
to the same rule), on purpose: besides being imported by the application (the ABI
probe, ``prctl``), this module's code is run by the launcher once per command,
``python -I -S -c BOOTSTRAP CODE_FD SPEC_FD REPORT_FD``: both modules compiled once when
the server started and kept in a sealed memory file (``CODE_FD``), never read again
from a path a command could write (contract 10.1). That process, the *supervisor*, is
single-threaded, so it may run Python between ``fork`` and ``exec`` without the
deadlocks that ``preexec_fn`` risks in the threaded server (see ``docs/decisions.md``).
It:

1. reads the command (executable, argv, environment) and the policy from the
   memory file ``SPEC_FD`` (never from its argv or environment, which other users
   can see or which Python itself would alter);
2. asks for ``SIGHUP`` when its parent (the server) dies (``PR_SET_PDEATHSIG``),
   becomes a child subreaper (every orphan of the call's tree is reparented to it)
   and makes itself non-dumpable;
3. builds the Landlock ruleset, forks, and in the child sets ``PR_SET_PDEATHSIG(SIGKILL)``,
   ``no_new_privs`` and ``landlock_restrict_self``, drops every capability and installs
   the seccomp filter (``_seccomp``) before it ``execve``\\s the command (so the
   command's domain does not include the supervisor, which the command therefore
   cannot signal). With namespaces the server runs this supervisor itself inside
   ``bwrap`` (``--as-pid-1``: it is the init of the call's PID namespace, and the kernel
   ends every process in it when it exits); its parent is then ``bwrap``'s monitor,
   whose death (the server's "end now", or the server's own death) is its death signal,
   and it first checks that the directory ``bwrap`` entered is the one the server held;
4. reports on ``REPORT_FD``, two bytes a record: ``S`` started (with the ``LAYER_*``
   bits the command was put under: Landlock, seccomp, capabilities), ``F`` could not
   start, ``X``+code exited, ``K``+signal killed, ``D`` the whole tree is gone, ``R``
   the sweep's bound ran out with processes remaining;
5. forwards a stop (``SIGTERM``): with namespaces to the command's own group (the command
   leads a new session there, as the server's children do), without them to the command
   when it has left the server's group; on ``SIGHUP`` (the server's "end now", or the
   server's death) ends the whole subtree, round after round (each round freezes every
   descendant with ``SIGSTOP``, then kills them all; orphans come back to this subreaper
   and are reaped here), reports ``D`` only when none is left (else ``L``), and exits
   with the command's status mirrored (a signal death as a signal death; through
   ``bwrap``, 128+N).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import sys
import time

if __package__:
    from . import _seccomp as seccomp
else:  # the supervisor: ``BOOTSTRAP`` put the module, compiled at start, in sys.modules
    import _seccomp as seccomp  # type: ignore[import-not-found,no-redef]

# Every command pays this module's imports (the supervisor's start): ``typing``,
# ``collections.abc`` and ``contextlib`` are left out at run time (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import TracebackType
    from typing import Final, NoReturn


class _suppress:  # noqa: N801 - reads as contextlib.suppress, which it replaces
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


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (any depth, any thread's children), from ``/proc``.

    One pass over ``/proc/*/stat`` builds the parent links, then the tree below ``pid``
    is collected.
    """
    below: dict[int, list[int]] = {}
    for child, parent in _parent_links():
        below.setdefault(parent, []).append(child)
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in below.get(pending.pop(), ()):
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
_REQUESTABLE: Final = LAYER_SECCOMP | LAYER_CAPABILITIES


def apply_layers(ruleset: int | None, requested: int, allow_network: bool) -> int:
    """Put this process under Landlock (``ruleset``), then the ``requested`` layers.

    Landlock first (it sets ``no_new_privs``), then capabilities, then the seccomp
    filter (last: nothing after it needs a refused call). Returns the ``LAYER_*`` bits
    applied; raises ``OSError`` (or ``seccomp.Unsupported``) when a requested layer
    cannot be applied, so the caller never runs the command without it.
    """
    applied = 0
    if ruleset is not None:
        restrict_self(ruleset)
        applied |= LAYER_LANDLOCK
    if requested & LAYER_CAPABILITIES:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        applied |= drop_capabilities()
    if requested & LAYER_SECCOMP:
        program = seccomp.build(os.getpid(), allow_network, bool(requested & PRIVATE_IPC))
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


# -- the call's TMPDIR -------------------------------------------------------------------

# POSIX-only flags with a default: the module imports on Windows, which never runs this.
_NO_FOLLOW_DIRECTORY: Final = (
    getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
_TREE_FLAGS: Final = os.O_RDONLY | _NO_FOLLOW_DIRECTORY
_O_PATH: Final = getattr(os, "O_PATH", 0)
_HOLD_FLAGS: Final = _O_PATH | _NO_FOLLOW_DIRECTORY
_OWNER_ALL: Final = 0o700


def remove_tree(path: str | bytes) -> bool:
    """Remove the directory ``path`` and everything beneath it; ``True`` once it is gone.

    For the call's ``TMPDIR``, which its command may have made hard to remove. No
    symlink is ever followed: each level is opened ``O_NOFOLLOW`` beneath the one
    above, and a symlink is removed as a name. A directory the command made
    unreadable or unwritable (``chmod 000``) gets its owner's ``rwx`` back first, as
    ``tempfile.TemporaryDirectory`` does, through a descriptor of that very directory
    (``O_PATH`` on Linux), so no other file's mode can change. Never raises: what
    cannot be removed makes the answer ``False``.
    """
    parent, name = os.path.split(os.fsencode(path).rstrip(b"/"))
    try:
        parent_fd = os.open(parent or b"/", _TREE_FLAGS)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        with _suppress(OSError, RecursionError):
            _remove_entry(parent_fd, name)
        try:
            os.lstat(name, dir_fd=parent_fd)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return False
    finally:
        os.close(parent_fd)


def _remove_entry(parent: int, name: str | bytes) -> None:
    try:
        mode = os.lstat(name, dir_fd=parent).st_mode
    except FileNotFoundError:
        return
    if (mode & 0o170000) != 0o040000:  # not a directory (S_ISDIR without ``stat``)
        os.unlink(name, dir_fd=parent)
        return
    directory = _open_own_directory(parent, name)
    try:
        for entry in os.listdir(directory):
            _remove_entry(directory, entry)
    finally:
        os.close(directory)
    os.rmdir(name, dir_fd=parent)


def _open_own_directory(parent: int, name: str | bytes) -> int:
    """Open ``name`` (a directory, never a symlink) with its owner's ``rwx`` restored."""
    try:
        directory = os.open(name, _TREE_FLAGS, dir_fd=parent)
    except PermissionError:
        if not _O_PATH:
            raise  # only Linux can hold a directory it cannot read
        held = os.open(name, _HOLD_FLAGS, dir_fd=parent)
        try:
            mode = os.fstat(held).st_mode
            os.chmod(f"/proc/self/fd/{held}", (mode & 0o7777) | _OWNER_ALL)
        finally:
            os.close(held)
        directory = os.open(name, _TREE_FLAGS, dir_fd=parent)
    mode = os.fstat(directory).st_mode
    if mode & _OWNER_ALL != _OWNER_ALL:
        try:
            os.fchmod(directory, (mode & 0o7777) | _OWNER_ALL)
        except BaseException:
            os.close(directory)
            raise
    return directory


# -- the supervisor ----------------------------------------------------------------------

SPEC_VERSION: Final = b"spice-supervisor-3"
# POSIX-only signals are read with a default so that this module imports on Windows,
# where no supervisor ever runs (contract 10.4).
END_SIGNAL: Final[signal.Signals] = getattr(signal, "SIGHUP", signal.SIGTERM)
"""What the server sends the supervisor for "end the whole tree now" (and its death signal)."""

SWEEP_BOUND_SECONDS: Final = 1.5
"""Longest the supervisor spends killing and reaping its tree before it exits anyway."""

WATCH_SECONDS: Final = 1.0
"""How often an idle supervisor re-checks that its server is alive (besides the signal)."""

_SWEEP_WAIT_SECONDS: Final = 0.02
_LIFELINE_READS: Final = 8
_WATCHED: Final[frozenset[signal.Signals]] = frozenset(
    {getattr(signal, "SIGCHLD", signal.SIGTERM), signal.SIGTERM, signal.SIGINT, END_SIGNAL}
)
_CANNOT_START: Final = 127

REPORT_STARTED: Final = ord("S")
REPORT_FAILED: Final = ord("F")
REPORT_EXITED: Final = ord("X")
REPORT_KILLED: Final = ord("K")
REPORT_DONE: Final = ord("D")
_LAYERS_RECORD: Final = ord("L")
REPORT_REMAINING: Final = ord("R")
"""The sweep's bound ran out with processes of the call still alive (never ``D`` then)."""

BOOTSTRAP: Final = (
    "import marshal, os, sys\n"
    "f = int(sys.argv.pop(1))\n"
    "d = b''\n"
    "while c := os.pread(f, 1 << 20, len(d)):\n"
    "    d += c\n"
    "os.close(f)\n"
    "*helpers, main = marshal.loads(d)\n"
    "for name, code in helpers:\n"
    "    m = type(sys)(name)\n"
    "    exec(code, m.__dict__)\n"
    "    sys.modules[name] = m\n"
    "exec(main[1], {'__name__': '__main__'})\n"
)
"""What ``python -I -S -c`` runs: ``_seccomp`` and this module, compiled once by the server
at start and kept in a sealed memory file (the descriptor is ``argv[1]``) as marshalled
``(name, code)`` pairs, the supervisor last; nothing is read from a path."""

SHARED_MEMORY: Final = b"/dev/shm"
"""The private, writable ``/dev/shm`` of the namespace path (a Landlock rule inside)."""


def encode_spec(
    server: int,
    abi: int,
    writable: Sequence[bytes],
    allow_network: bool,
    executable: bytes,
    arguments: Sequence[bytes],
    environment: Sequence[bytes],
    temporary: bytes = b"",
    layers: int = 0,
    workdir: bytes = b"",
    lifeline: int | None = None,
) -> bytes:
    """The supervisor's input: NUL-separated fields (none of them may contain NUL).

    ``abi`` 0 means no Landlock (mode ``off``); ``writable`` is then ignored.
    ``temporary`` is the call's private TMPDIR, which the supervisor removes itself
    when the server dies (otherwise the server's join does). ``layers`` are the
    ``LAYER_SECCOMP``/``LAYER_CAPABILITIES`` bits (and ``PRIVATE_IPC``) the command
    must be put under besides Landlock; the start fails when one cannot be applied.
    ``workdir`` is ``DEV:INO`` of the directory the server held, on the namespace path
    (``bwrap`` enters it again by its name), empty without namespaces; ``server`` is
    then 0, the parent a process in a PID namespace sees. ``lifeline`` (namespaces) is
    the read end of the pipe whose write end is ``bwrap``'s ``--json-status-fd``: only
    bwrap's monitor holds that, so its end of file says the monitor died, also before
    the supervisor's death signal was set.
    """
    fields = [
        SPEC_VERSION,
        str(server).encode(),
        str(abi).encode(),
        b"1" if allow_network else b"0",
        temporary,
        str(layers).encode(),
        str(len(writable)).encode(),
        *writable,
        workdir,
        b"" if lifeline is None else str(lifeline).encode(),
        executable,
        str(len(arguments)).encode(),
        *arguments,
        *environment,
    ]
    return b"\0".join(fields)


class _Spec:
    __slots__ = (
        "abi",
        "allow_network",
        "arguments",
        "environment",
        "executable",
        "layers",
        "lifeline",
        "server",
        "temporary",
        "workdir",
        "writable",
    )

    def __init__(self, blob: bytes) -> None:
        fields = blob.split(b"\0")
        if fields[0] != SPEC_VERSION:
            raise ValueError("unknown supervisor spec")
        self.server = int(fields[1])
        self.abi = int(fields[2])
        self.allow_network = fields[3] == b"1"
        self.temporary = fields[4]
        self.layers = int(fields[5])
        count = int(fields[6])
        self.writable = fields[7 : 7 + count]
        rest = fields[7 + count :]
        self.workdir = rest[0]
        self.lifeline = int(rest[1]) if rest[1] else -1
        rest = rest[2:]
        self.executable = rest[0]
        argument_count = int(rest[1])
        self.arguments = [self.executable, *rest[2 : 2 + argument_count]]
        self.environment: dict[bytes, bytes] = {}
        for entry in rest[2 + argument_count :]:
            if entry:
                name, _, value = entry.partition(b"=")
                self.environment[name] = value


def bwrap_gone(spec: _Spec) -> bool:
    """With namespaces: whether ``bwrap``'s monitor (the lifeline's only writer) is gone.

    The monitor writes a line or two of status there (read and dropped, at most
    ``_LIFELINE_READS`` reads a look); its death is the end of file.
    """
    if spec.lifeline < 0:
        return False
    for _ in range(_LIFELINE_READS):
        readable, _, _ = select.select([spec.lifeline], [], [], 0)
        if not readable:
            return False
        if not os.read(spec.lifeline, 4096):
            return True
    return False


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _report(fd: int, kind: int, value: int = 0) -> None:
    with _suppress(OSError):  # the server is gone: nobody to tell
        os.write(fd, bytes((kind, value & 0xFF)))


def _child(
    spec: _Spec,
    ruleset: int | None,
    status: int,
    mask: Iterable[int],
    parent: int,
) -> NoReturn:
    """In the forked child: the command's last preparations, then ``execve``.

    On ``status`` the child writes ``L`` and the ``LAYER_*`` bits it applied just before
    ``execve`` (close-on-exec, so a start ends the pipe), or ``F`` when it cannot start.
    """
    try:
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(_CANNOT_START)  # the supervisor died before the death signal was set
        if spec.workdir:  # inside the namespaces: the command's own session and group
            os.setsid()
        applied = apply_layers(ruleset, spec.layers, spec.allow_network)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.write(status, bytes((_LAYERS_RECORD, applied)))
        os.execve(spec.executable, spec.arguments, spec.environment)  # noqa: S606 - the point
    except BaseException:  # noqa: BLE001 - any failure here means "not started"
        with _suppress(OSError):
            os.write(status, b"F")
    os._exit(_CANNOT_START)


class _Supervisor:
    def __init__(self, spec: _Spec, report: int) -> None:
        self.spec = spec
        self.report = report
        self.command = 0
        self.status: int | None = None
        self.announced = False

    def reap(self) -> None:
        """Collect every exited child; remember the command's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.command and self.status is None:
                self.status = status

    def announce(self) -> None:
        """Report the command's exit while the rest of its tree still runs (once)."""
        if self.announced or self.status is None:
            return
        self.announced = True
        if os.WIFSIGNALED(self.status):
            _report(self.report, REPORT_KILLED, os.WTERMSIG(self.status))
        else:
            _report(self.report, REPORT_EXITED, os.WEXITSTATUS(self.status))

    def forward_stop(self) -> None:
        """A stop reached us; pass it on to the command's group where the server's cannot.

        Inside namespaces the stop came to the supervisor alone (the server signals it
        by its pidfd; bwrap's monitor leads the server's group): the command's own group
        gets it, what is left of it too once the command exited (a group's id is not
        reused while it has members). Without namespaces the server signalled the group
        the command was started in: the command gets it only if it left that group.
        """
        with _suppress(OSError):
            if self.spec.workdir:
                os.killpg(self.command, signal.SIGTERM)
            elif self.status is None and os.getpgid(self.command) != os.getpgid(0):
                os.kill(self.command, signal.SIGTERM)

    def sweep(self) -> bool:
        """End the whole subtree, round after round, and reap it; ``True`` once none is left.

        Each round freezes every descendant (``SIGSTOP``, so none forks again), walks
        the tree once more for those forked meanwhile, and kills them all; orphans come
        back to this subreaper and are reaped here. Bounded by ``SWEEP_BOUND_SECONDS``.
        """
        me = os.getpid()
        deadline = time.monotonic() + SWEEP_BOUND_SECONDS
        while True:
            self.reap()
            tree = descendants(me)
            if not tree:
                return True
            for pid in tree:
                with _suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            for pid in {*tree, *descendants(me)}:
                with _suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() >= deadline:
                self.reap()
                return not descendants(me)
            signal.sigtimedwait({signal.SIGCHLD}, _SWEEP_WAIT_SECONDS)

    def run(self) -> NoReturn:
        """Wait for the command; end the tree on request, on the server's death, or alone.

        When the command exits and nothing else of its tree is left, the supervisor
        exits at once with the command's status. When descendants remain it reports the
        command's exit and stays, pinning the group, until they end, it is told to end
        (the join), or the server dies.
        """
        me = os.getpid()
        while os.getppid() == self.spec.server and not bwrap_gone(self.spec):
            received = signal.sigtimedwait(_WATCHED, WATCH_SECONDS)
            if received is None:
                continue
            if received.si_signo == signal.SIGCHLD:
                self.reap()
                if self.status is not None:
                    if not children(me):
                        break
                    self.announce()
            elif received.si_signo == signal.SIGTERM:
                self.forward_stop()
            elif received.si_signo == END_SIGNAL:
                break
        emptied = self.sweep()
        self.remove_temporary()
        _report(self.report, REPORT_DONE if emptied else REPORT_REMAINING)
        self.mirror()

    def remove_temporary(self) -> None:
        """Remove the call's TMPDIR once the tree is gone (the server's join does it too).

        Here as well because a dying server cannot; and a death signal can come while
        the server's other threads still make ``getppid`` look unchanged (the parent
        death signal follows the thread that forked), so the supervisor never relies
        on seeing its parent change.
        """
        if self.spec.temporary:
            remove_tree(self.spec.temporary)

    def mirror(self) -> NoReturn:
        """Exit as the command did: its code, or death by its signal."""
        status = self.status
        if status is not None and not os.WIFSIGNALED(status):
            os._exit(os.WEXITSTATUS(status))
        # Not reaped within the sweep's bound: it has SIGKILL pending, so it died of that.
        number = signal.SIGKILL if status is None else os.WTERMSIG(status)
        with _suppress(OSError, ValueError):
            if number not in {signal.SIGKILL, signal.SIGSTOP}:
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
            os.kill(os.getpid(), number)
        os._exit(128 + number)


def _prepare(spec_fd: int) -> tuple[_Spec, set[int | signal.Signals], int | None]:
    """Before the fork: the spec, the signal mask to restore, the ruleset (or none)."""
    spec = _Spec(_read_all(spec_fd))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    prctl(PR_SET_PDEATHSIG, END_SIGNAL)
    if spec.lifeline >= 0:
        os.set_inheritable(spec.lifeline, False)  # noqa: FBT003 - os's positional-only flag
    if os.getppid() != spec.server:
        os._exit(_CANNOT_START)  # the server died while we started: start nothing
    if bwrap_gone(spec):
        raise OSError(errno.ESRCH, "bwrap's monitor is gone")  # "end now" came first
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)
    if spec.workdir:
        # Namespaces: bwrap entered the workdir again by its name; a directory swapped
        # meanwhile (a symlink out of the worktree) is caught here and nothing starts.
        here = os.stat(".")
        if f"{here.st_dev}:{here.st_ino}".encode() != spec.workdir:
            raise OSError(errno.ESTALE, "the working directory changed")
    ruleset: int | None = None
    if spec.abi > 0:
        # Inside the namespaces the paths are the mount namespace's (the same inodes,
        # bound), plus its private /dev/shm.
        writable = [*spec.writable, SHARED_MEMORY] if spec.workdir else spec.writable
        ruleset = build_ruleset(spec.abi, writable, spec.allow_network)
    return spec, mask, ruleset


def supervise(spec_fd: int, report: int) -> NoReturn:
    """The supervisor's whole life (see the module docstring).

    Until the fork nothing of the command exists: any failure there is reported ``F``
    (the server then knows nothing was started). After it, only the command's own
    start word says whether it started: ``L`` and the layers it applied, then its
    status pipe closing on ``exec``.
    """
    os.set_inheritable(report, False)  # noqa: FBT003 - os's positional-only flag
    try:
        spec, mask, ruleset = _prepare(spec_fd)
        status_read, status_write = os.pipe()
        parent = os.getpid()
        command = os.fork()
    except BaseException:  # noqa: BLE001 - before the fork, any failure means "not started"
        _report(report, REPORT_FAILED)
        os._exit(_CANNOT_START)
    if command == 0:
        os.close(status_read)
        _child(spec, ruleset, status_write, mask, parent)
    os.close(status_write)
    os.close(spec_fd)
    if ruleset is not None:
        os.close(ruleset)
    said = _read_all(status_read)
    os.close(status_read)
    supervisor = _Supervisor(spec, report)
    supervisor.command = command
    if len(said) != 2 or said[0] != _LAYERS_RECORD:  # "F", or "L" then "F": not started
        with _suppress(ChildProcessError):
            os.waitpid(command, 0)
        _report(report, REPORT_FAILED)
        os._exit(_CANNOT_START)
    _report(report, REPORT_STARTED, said[1])
    # The command holds the pipes now; ours would keep them open after it exits.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    supervisor.run()


if __name__ == "__main__":
    supervise(int(sys.argv[1]), int(sys.argv[2]))
