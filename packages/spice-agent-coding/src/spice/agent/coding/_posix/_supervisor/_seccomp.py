"""A classic-BPF seccomp filter for contained commands, written out and installed by hand.

Standard library only and free of package imports: the per-call supervisor
(``_posix._supervisor._main``, run as ``python -I -S``) loads this file next to itself and
installs the filter in the command's fork, after ``no_new_privs`` and before
``execve``. No libseccomp: the program is small, and each instruction is tested.

The filter answers ``EPERM`` (the call fails; the process goes on) for:

- ``socket()`` of any family but ``AF_UNIX``, unless the network is allowed (then every
  family passes). ``AF_NETLINK`` is refused too: no tool the shell runs needs it to
  work without a network, and its ``sock_diag`` lists the host's sockets. MPTCP
  (``socket(AF_INET, SOCK_STREAM, 262)``), TCP Fast Open (``sendto`` needs a socket)
  and ``listen`` without ``bind`` are closed by this rule. With ``private_network``
  (the command has a network namespace of its own, where only its loopback exists)
  ``AF_INET`` and ``AF_INET6`` pass too: what they reach is that loopback;
- ``ptrace``, ``process_vm_readv``, ``process_vm_writev``;
- ``prlimit64``, ``sched_setaffinity``, ``sched_setscheduler``, ``sched_setparam`` and
  ``sched_setattr`` whose pid (argument 0) is neither 0 nor ``own_pid``;
  ``setpriority(which, who)`` and ``ioprio_set(which, who)`` unless ``which`` names a
  process (``PRIO_PROCESS``, ``IOPRIO_WHO_PROCESS``) and ``who`` is 0 or ``own_pid``.
  A BPF filter cannot read the caller's pid, so ``own_pid`` is the command's pid, fixed
  when the filter is built: the command's children must say 0 (as libc's ``setrlimit``,
  ``nice`` and ``sched_setaffinity(0, ...)`` do);
- ``keyctl``, ``add_key``, ``request_key``;
- the whole SysV IPC family (``shmget``/``shmat``/``shmctl``, ``msgget``/``msgsnd``/
  ``msgrcv``/``msgctl``, ``semget``/``semop``/``semtimedop``/``semctl``: a segment's id
  can be used without ``shmget``), unless ``private_ipc`` says the command runs in an
  IPC namespace of its own;
- ``ioctl`` ``TIOCSTI`` and ``TIOCLINUX``;
- ``mknod``/``mknodat`` of a character or block device (``mode & S_IFMT``);
- ``io_uring_setup``, ``io_uring_enter``, ``io_uring_register`` (io_uring's operations
  do not pass through the filter);
- ``bpf``, ``perf_event_open`` and ``userfaultfd``: kernel attack surface no build or test
  tool needs (``perf`` itself does not run contained);
- on x86_64, every x32 system call (``nr >= __X32_SYSCALL_BIT``).

A system call of any other architecture than the one the filter was built for
(``seccomp_data.arch``: i386 through ``int 0x80``, 32-bit ARM) kills the process
(``SECCOMP_RET_KILL_PROCESS``): no answer of those tables can be trusted.

Only x86_64 and aarch64 are known; elsewhere ``available()`` is ``False`` and
``build`` raises ``Unsupported`` (the filter never pretends).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

# -- BPF (include/uapi/linux/filter.h, bpf_common.h) -------------------------------------

BPF_LD_W_ABS: Final = 0x00 | 0x00 | 0x20
BPF_JMP_JEQ_K: Final = 0x05 | 0x10 | 0x00
BPF_JMP_JGE_K: Final = 0x05 | 0x30 | 0x00
BPF_ALU_AND_K: Final = 0x04 | 0x50 | 0x00
BPF_RET_K: Final = 0x06 | 0x00
INSTRUCTION: Final = struct.Struct("=HBBI")
"""``struct sock_filter``: code, jt, jf, k (native byte order, as the kernel reads it)."""

MAXIMUM_JUMP: Final = 255
"""A conditional jump's offsets are one byte each."""

MAXIMUM_INSTRUCTIONS: Final = 4096
"""``BPF_MAXINSNS``: the kernel refuses a longer classic program."""

# -- seccomp (include/uapi/linux/seccomp.h, audit.h) -------------------------------------

SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
SECCOMP_RET_ERRNO: Final = 0x00050000
SECCOMP_RET_ALLOW: Final = 0x7FFF0000
SECCOMP_RET_USER_NOTIF: Final = 0x7FC00000
STAGE_RENAMES: Final = ("rename", "renameat", "renameat2")
"""With a stage: the calls sent to the supervisor (``_renames``; ``rename`` on x86_64 only)."""
RET_EPERM: Final = SECCOMP_RET_ERRNO | 1
"""``EPERM`` (1 on every Linux architecture)."""

OFFSET_NR: Final = 0
OFFSET_ARCH: Final = 4


def offset_argument(index: int) -> int:
    """The offset of argument ``index``'s low 32 bits in ``struct seccomp_data`` (LE)."""
    return 16 + 8 * index


AUDIT_ARCH_X86_64: Final = 0xC000003E
AUDIT_ARCH_AARCH64: Final = 0xC00000B7
X32_SYSCALL_BIT: Final = 0x40000000

_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_GET_SECCOMP: Final = 21
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_SECCOMP_GET_ACTION_AVAIL: Final = 2

# -- argument values (identical on both architectures) -----------------------------------

AF_UNIX: Final = 1
AF_INET: Final = 2
AF_INET6: Final = 10
PRIO_PROCESS: Final = 0
IOPRIO_WHO_PROCESS: Final = 1
TIOCSTI: Final = 0x5412
TIOCLINUX: Final = 0x541C
S_IFMT: Final = 0o170000
S_IFCHR: Final = 0o020000
S_IFBLK: Final = 0o060000

_X86_64: Final = {
    "socket": 41,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "prlimit64": 302,
    "setpriority": 141,
    "sched_setaffinity": 203,
    "sched_setscheduler": 144,
    "sched_setparam": 142,
    "sched_setattr": 314,
    "ioprio_set": 251,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "shmget": 29,
    "shmat": 30,
    "shmctl": 31,
    "msgget": 68,
    "msgsnd": 69,
    "msgrcv": 70,
    "msgctl": 71,
    "semget": 64,
    "semop": 65,
    "semctl": 66,
    "semtimedop": 220,
    "ioctl": 16,
    "mknod": 133,
    "mknodat": 259,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "seccomp": 317,
    "rename": 82,
    "renameat": 264,
    "renameat2": 316,
}
_AARCH64: Final = {  # asm-generic/unistd.h; there is no mknod
    "socket": 198,
    "ptrace": 117,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "prlimit64": 261,
    "setpriority": 140,
    "sched_setaffinity": 122,
    "sched_setscheduler": 119,
    "sched_setparam": 118,
    "sched_setattr": 274,
    "ioprio_set": 30,
    "keyctl": 219,
    "add_key": 217,
    "request_key": 218,
    "shmget": 194,
    "shmat": 196,
    "shmctl": 195,
    "msgget": 186,
    "msgsnd": 189,
    "msgrcv": 188,
    "msgctl": 187,
    "semget": 190,
    "semop": 193,
    "semctl": 191,
    "semtimedop": 192,
    "ioctl": 29,
    "mknodat": 33,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "bpf": 280,
    "perf_event_open": 241,
    "userfaultfd": 282,
    "seccomp": 277,
    "renameat": 38,
    "renameat2": 276,
}


class Architecture:
    """One system-call table: its audit number, its numbers, whether it has x32."""

    __slots__ = ("audit", "name", "numbers", "x32")

    def __init__(self, name: str, audit: int, numbers: dict[str, int], x32: bool) -> None:
        self.name = name
        self.audit = audit
        self.numbers = numbers
        self.x32 = x32


X86_64: Final = Architecture("x86_64", AUDIT_ARCH_X86_64, _X86_64, x32=True)
AARCH64: Final = Architecture("aarch64", AUDIT_ARCH_AARCH64, _AARCH64, x32=False)
ARCHITECTURES: Final = {"x86_64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}
"""``os.uname().machine`` to table (a 64-bit process on a little-endian machine)."""

ALWAYS_DENIED: Final = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
)
SYSV_IPC: Final = (
    "shmget",
    "shmat",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
)
PID_FIRST: Final = (
    "prlimit64",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
)
"""System calls whose argument 0 names the process they act on."""

PRIVATE_NETWORK_RULE: Final = "sockets_unix_and_private_loopback"
"""The socket rule's name with a private network namespace (``AF_INET``/``AF_INET6`` too)."""

RULES: Final = (
    "sockets_unix_only",
    "no_ptrace",
    "no_process_memory_access",
    "own_process_limits_and_priorities_only",
    "no_keyrings",
    "no_sysv_ipc",
    "no_terminal_injection",
    "no_device_nodes",
    "no_io_uring",
    "no_bpf_perf_or_userfaultfd",
    "native_abi_only",
)
"""Every rule of the filter, by name (for the ``tools`` report)."""


class Unsupported(Exception):
    """The machine's system-call table is not known here: no filter can be built."""

    def __init__(self) -> None:
        super().__init__("seccomp: this architecture's system calls are not known")


def architecture() -> Architecture | None:
    """This process's table: Linux, a known machine, a 64-bit little-endian process."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    if sys.byteorder != "little":
        return None
    return ARCHITECTURES.get(os.uname().machine)


def rules(allow_network: bool, private_ipc: bool, private_network: bool = False) -> tuple[str, ...]:
    """The names of the rules a filter built with these flags enforces."""
    return tuple(
        PRIVATE_NETWORK_RULE if private_network and name == "sockets_unix_only" else name
        for name in RULES
        if not (allow_network and name == "sockets_unix_only")
        and not (private_ipc and name == "no_sysv_ipc")
    )


# -- the assembler -------------------------------------------------------------------------

_Target = str | None
"""A jump target: a label's name, or ``None`` for the next instruction."""


class _Program:
    """Instructions with symbolic jump targets, resolved to offsets by ``assemble``."""

    __slots__ = ("_items", "_labels")

    def __init__(self) -> None:
        self._items: list[tuple[int, _Target, _Target, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        if name in self._labels:
            raise ValueError("a label is defined twice")
        self._labels[name] = len(self._items)

    def load(self, offset: int) -> None:
        self._items.append((BPF_LD_W_ABS, None, None, offset))

    def and_(self, mask: int) -> None:
        self._items.append((BPF_ALU_AND_K, None, None, mask))

    def jeq(self, value: int, true: _Target, false: _Target = None) -> None:
        self._items.append((BPF_JMP_JEQ_K, true, false, value))

    def jge(self, value: int, true: _Target, false: _Target = None) -> None:
        self._items.append((BPF_JMP_JGE_K, true, false, value))

    def ret(self, value: int) -> None:
        self._items.append((BPF_RET_K, None, None, value))

    def _offset(self, index: int, target: _Target) -> int:
        if target is None:
            return 0
        distance = self._labels[target] - index - 1
        if not 0 <= distance <= MAXIMUM_JUMP:
            raise ValueError("a jump is out of reach")
        return distance

    def assemble(self) -> bytes:
        if len(self._items) > MAXIMUM_INSTRUCTIONS:
            raise ValueError("the program is too long")
        return b"".join(
            INSTRUCTION.pack(
                code, self._offset(index, true), self._offset(index, false), k & 0xFFFFFFFF
            )
            for index, (code, true, false, k) in enumerate(self._items)
        )


def build(
    own_pid: int,
    allow_network: bool = False,
    private_ipc: bool = False,
    table: Architecture | None = None,
    private_network: bool = False,
    stage: bool = False,
) -> bytes:
    """The filter's instructions (``struct sock_filter[]``) for ``table`` (default: ours).

    ``own_pid`` is the pid that may be named besides 0 (the command's own; it must be
    positive). ``private_network``: ``AF_INET`` and ``AF_INET6`` sockets pass too (the
    command's own network namespace). ``stage``: ``STAGE_RENAMES`` go to the listener
    (``SECCOMP_RET_USER_NOTIF``: install with ``_renames.install``). Raises
    ``Unsupported`` where the architecture is not known.
    """
    if own_pid <= 0:
        raise ValueError("own_pid must be a positive pid")
    table = architecture() if table is None else table
    if table is None:
        raise Unsupported
    numbers = table.numbers
    program = _Program()
    program.load(OFFSET_ARCH)
    program.jeq(table.audit, None, "kill")
    program.load(OFFSET_NR)
    if table.x32:
        program.jge(X32_SYSCALL_BIT, "deny")
    denied = list(ALWAYS_DENIED) + ([] if private_ipc else list(SYSV_IPC))
    for name in denied:
        program.jeq(numbers[name], "deny")
    if not allow_network:
        program.jeq(numbers["socket"], "socket")
    program.jeq(numbers["ioctl"], "ioctl")
    if "mknod" in numbers:
        program.jeq(numbers["mknod"], "mknod")
    program.jeq(numbers["mknodat"], "mknodat")
    for name in PID_FIRST:
        program.jeq(numbers[name], "pid_in_0")
    program.jeq(numbers["setpriority"], "setpriority")
    program.jeq(numbers["ioprio_set"], "ioprio_set")
    for name in STAGE_RENAMES if stage else ():
        if name in numbers:
            program.jeq(numbers[name], "notify")
    program.ret(SECCOMP_RET_ALLOW)  # every other system call of this architecture
    # Classic BPF jumps only forward: the checks of arguments, then the three answers.
    if not allow_network:
        program.label("socket")
        program.load(offset_argument(0))
        if private_network:
            program.jeq(AF_INET, "allow")
            program.jeq(AF_INET6, "allow")
        program.jeq(AF_UNIX, "allow", "deny")
    program.label("ioctl")
    program.load(offset_argument(1))
    program.jeq(TIOCSTI, "deny")
    program.jeq(TIOCLINUX, "deny", "allow")
    for label, index in (("mknod", 1), ("mknodat", 2)):
        program.label(label)
        program.load(offset_argument(index))
        program.and_(S_IFMT)
        program.jeq(S_IFCHR, "deny")
        program.jeq(S_IFBLK, "deny", "allow")
    program.label("setpriority")
    program.load(offset_argument(0))
    program.jeq(PRIO_PROCESS, "pid_in_1", "deny")
    program.label("ioprio_set")
    program.load(offset_argument(0))
    program.jeq(IOPRIO_WHO_PROCESS, "pid_in_1", "deny")
    for label, index in (("pid_in_0", 0), ("pid_in_1", 1)):
        program.label(label)
        program.load(offset_argument(index))
        program.jeq(0, "allow")
        program.jeq(own_pid, "allow", "deny")
    program.label("allow")
    program.ret(SECCOMP_RET_ALLOW)
    program.label("deny")
    program.ret(RET_EPERM)
    program.label("kill")
    program.ret(SECCOMP_RET_KILL_PROCESS)
    if stage:
        program.label("notify")
        program.ret(SECCOMP_RET_USER_NOTIF)
    return program.assemble()


# -- installing --------------------------------------------------------------------------


class _Fprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(libc: ctypes.CDLL, option: int, value: int, pointer: object = None) -> int:
    result = int(
        libc.prctl(
            ctypes.c_int(option),
            ctypes.c_ulong(value),
            pointer if pointer is not None else ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
    )
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result


def install(program: bytes) -> None:
    """Set ``no_new_privs`` and install ``program`` on this thread, for good.

    Raises ``OSError`` when the kernel refuses (and ``ValueError`` for a program that
    is not a whole number of instructions).
    """
    count, rest = divmod(len(program), INSTRUCTION.size)
    if rest or not 0 < count <= MAXIMUM_INSTRUCTIONS:
        raise ValueError("not a filter program")
    libc = _libc()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(count, ctypes.cast(buffer, ctypes.c_void_p))
    _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1)
    _prctl(libc, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog))


def available() -> bool:
    """Whether a filter can be built and installed here.

    A known architecture, a kernel with seccomp filters (``PR_GET_SECCOMP`` answers) that
    offers the two actions the filter returns (``SECCOMP_GET_ACTION_AVAIL``).
    """
    table = architecture()
    if table is None:
        return False
    try:
        libc = _libc()
        _prctl(libc, _PR_GET_SECCOMP, 0)
        for action in (RET_EPERM & 0xFFFF0000, SECCOMP_RET_KILL_PROCESS):
            value = ctypes.c_uint32(action)
            result = int(
                libc.syscall(
                    ctypes.c_long(table.numbers["seccomp"]),
                    ctypes.c_ulong(_SECCOMP_GET_ACTION_AVAIL),
                    ctypes.c_ulong(0),
                    ctypes.byref(value),
                )
            )
            if result != 0:
                return False
    except (OSError, AttributeError):
        return False
    return True


def describe(program: bytes) -> Sequence[tuple[int, int, int, int]]:
    """The program's instructions as ``(code, jt, jf, k)`` (for tests and debugging)."""
    return [
        INSTRUCTION.unpack_from(program, offset)
        for offset in range(0, len(program), INSTRUCTION.size)
    ]
