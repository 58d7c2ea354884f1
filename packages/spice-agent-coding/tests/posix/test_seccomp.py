"""``_seccomp``: the BPF program instruction by instruction, then on the real kernel.

The first half decodes the program and runs it in a small interpreter written here
(the kernel's classic-BPF semantics for the five opcodes the filter may use) over
``struct seccomp_data`` inputs, and compares every answer with a model of the policy
written independently from the filter's tables (by name, then numbered from the kernel's
own headers where the machine has them). The second half installs the filter in a
forked child of the test and tries each attack for real: it must fail with ``EPERM``,
and what a developer's tools need must keep working.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import mmap
import os
import re
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.coding._posix._supervisor import _seccomp as seccomp
from spice.agent.coding._posix._supervisor._seccomp import (
    AARCH64,
    RET_EPERM,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_KILL_PROCESS,
    X86_64,
    Architecture,
)

AVAILABLE: Final = seccomp.available()
TABLE: Final = seccomp.architecture()
needs_seccomp = pytest.mark.skipif(
    not AVAILABLE, reason="no seccomp filter here (architecture or kernel)"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_MKNOD, TIOCSTI)")
needs_x86_64 = pytest.mark.skipif(TABLE is not X86_64, reason="x86_64 only")

AUDIT_ARCH_I386: Final = 0x40000003
AUDIT_ARCH_ARM: Final = 0x40000028
HEADERS: Final = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}

# -- a classic-BPF interpreter, as the kernel runs the program ---------------------------------


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    """``(code, jt, jf, k)`` of each ``struct sock_filter``."""
    assert 0 == len(program) % 8
    return [struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)]


def seccomp_data(nr: int, arch: int, arguments: tuple[int, ...]) -> bytes:
    """``struct seccomp_data``: nr, arch, instruction pointer, six 64-bit arguments."""
    padded = tuple(
        value & 0xFFFFFFFFFFFFFFFF for value in (*arguments, *(0,) * (6 - len(arguments)))
    )
    return struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0x1000, *padded)


_DECODED: dict[bytes, list[tuple[int, int, int, int]]] = {}


def interpret(program: bytes, data: bytes) -> int:
    """The filter's answer for ``data``; fails on anything the kernel would refuse."""
    instructions = _DECODED.get(program)
    if instructions is None:
        instructions = _DECODED[program] = decode(program)
    accumulator = 0
    counter = 0
    while True:
        assert 0 <= counter < len(instructions), "ran off the program"
        code, true, false, k = instructions[counter]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            assert 0 == k % 4, "an unaligned load"
            assert k + 4 <= len(data), "a load outside seccomp_data"
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            accumulator &= k
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            counter += true if accumulator == k else false
        elif code == 0x35:  # BPF_JMP | BPF_JGE | BPF_K
            counter += true if accumulator >= k else false
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            pytest.fail(f"an opcode the filter should not use: {code:#x}")
        counter += 1


# -- the policy, written out by name -----------------------------------------------------------


def expected(
    table: Architecture,
    nr: int,
    arch: int,
    arguments: tuple[int, ...],
    own: int,
    allow_network: bool = False,
    private_ipc: bool = False,
) -> int:
    """What the filter must answer, from the brief's list of rules."""
    if arch != table.audit:
        return SECCOMP_RET_KILL_PROCESS
    nr &= 0xFFFFFFFF
    if table is X86_64 and nr >= 0x40000000:
        return RET_EPERM
    name = next((key for key, number in table.numbers.items() if number == nr), None)
    low = [value & 0xFFFFFFFF for value in (*arguments, *(0,) * (6 - len(arguments)))]
    deny = RET_EPERM
    if name in {"ptrace", "process_vm_readv", "process_vm_writev"}:
        return deny
    if name in {"keyctl", "add_key", "request_key"}:
        return deny
    if name in {"io_uring_setup", "io_uring_enter", "io_uring_register"}:
        return deny
    if name in {"bpf", "perf_event_open", "userfaultfd"}:
        return deny
    if name in {"shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl"}:
        return SECCOMP_RET_ALLOW if private_ipc else deny
    if name in {"semget", "semop", "semctl", "semtimedop"}:
        return SECCOMP_RET_ALLOW if private_ipc else deny
    if name == "socket" and not allow_network:
        return SECCOMP_RET_ALLOW if low[0] == socket.AF_UNIX else deny
    if name == "ioctl":
        return deny if low[1] in {0x5412, 0x541C} else SECCOMP_RET_ALLOW
    if name in {"mknod", "mknodat"}:
        kind = low[1 if name == "mknod" else 2] & 0o170000  # S_IFMT
        return deny if kind in {stat.S_IFCHR, stat.S_IFBLK} else SECCOMP_RET_ALLOW
    ours = {0, own}
    if name in {
        "prlimit64",
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setparam",
        "sched_setattr",
    }:
        return SECCOMP_RET_ALLOW if low[0] in ours else deny
    if name == "setpriority":
        return SECCOMP_RET_ALLOW if low[0] == 0 and low[1] in ours else deny
    if name == "ioprio_set":
        return SECCOMP_RET_ALLOW if low[0] == 1 and low[1] in ours else deny
    return SECCOMP_RET_ALLOW


TABLES: Final = (X86_64, AARCH64)
FLAGS: Final = ((False, False), (True, False), (False, True), (True, True))
OWN: Final = 4242
INTERESTING: Final = (
    0,
    1,
    2,
    10,
    16,
    262,
    OWN,
    OWN + 1,
    0x5412,
    0x541C,
    stat.S_IFCHR | 0o600,
    stat.S_IFBLK | 0o600,
    stat.S_IFIFO | 0o600,
    stat.S_IFREG,
    0xFFFFFFFF,
    1 << 32,
    (1 << 32) | OWN,
    (1 << 32) | 0x5412,
    (1 << 64) - 1,
)


def numbers(table: Architecture) -> st.SearchStrategy[int]:
    """A known system call, one near it, an x32 number, or any 32-bit value."""
    known = sorted(table.numbers.values())
    return st.one_of(
        st.sampled_from(known),
        st.sampled_from(known).map(lambda n: n + 1),
        st.sampled_from(known).map(lambda n: n | 0x40000000),
        st.integers(0, 0xFFFFFFFF),
    )


ARGUMENT: Final = st.one_of(st.sampled_from(INTERESTING), st.integers(0, (1 << 64) - 1))


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
@pytest.mark.parametrize(("allow_network", "private_ipc"), FLAGS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_program_answers_as_the_policy_says_for_any_call(
    table: Architecture, allow_network: bool, private_ipc: bool, data: st.DataObject
) -> None:
    """Any nr, arch and arguments: the interpreted program equals the policy's answer."""
    program = seccomp.build(OWN, allow_network, private_ipc, table)
    nr = data.draw(numbers(table))
    arch = data.draw(
        st.sampled_from((table.audit, table.audit, AUDIT_ARCH_I386, AUDIT_ARCH_ARM))
        | st.integers(0, 0xFFFFFFFF)
    )
    arguments = tuple(data.draw(ARGUMENT) for _ in range(6))
    answer = interpret(program, seccomp_data(nr, arch, arguments))
    assert expected(table, nr, arch, arguments, OWN, allow_network, private_ipc) == answer


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
@pytest.mark.parametrize(("allow_network", "private_ipc"), FLAGS)
def test_every_listed_call_with_every_interesting_argument(
    table: Architecture, allow_network: bool, private_ipc: bool
) -> None:
    """Each table entry, with each interesting value in each argument position."""
    program = seccomp.build(OWN, allow_network, private_ipc, table)
    for nr in table.numbers.values():
        for position in range(3):
            for value in INTERESTING:
                arguments = tuple(value if i == position else 0 for i in range(6))
                for first in (0, 1, 3):  # which: PRIO_PROCESS, IOPRIO_WHO_PROCESS, _USER
                    if position == 1:
                        arguments = (first, *arguments[1:])
                    answer = interpret(program, seccomp_data(nr, table.audit, arguments))
                    want = expected(
                        table, nr, table.audit, arguments, OWN, allow_network, private_ipc
                    )
                    assert want == answer, (nr, arguments)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_the_brief_s_cases_by_hand(table: Architecture) -> None:
    """The named cases, each with its expected answer written out (no shared model)."""
    n = table.numbers
    program = seccomp.build(OWN, table=table)

    def answer(name: str, *arguments: int, arch: int = table.audit) -> int:
        return interpret(program, seccomp_data(n[name], arch, arguments))

    assert RET_EPERM == answer("socket", socket.AF_INET, socket.SOCK_STREAM, 262)  # MPTCP
    assert RET_EPERM == answer("socket", socket.AF_INET, socket.SOCK_DGRAM, 0)
    assert RET_EPERM == answer("socket", socket.AF_INET6, socket.SOCK_STREAM, 0)
    assert RET_EPERM == answer("socket", socket.AF_NETLINK, socket.SOCK_RAW, 0)
    assert SECCOMP_RET_ALLOW == answer("socket", socket.AF_UNIX, socket.SOCK_STREAM, 0)
    assert RET_EPERM == answer("socket", (1 << 32) | 2)  # high bits: the kernel reads int
    assert SECCOMP_RET_ALLOW == answer("socket", (1 << 32) | socket.AF_UNIX)
    assert RET_EPERM == answer("prlimit64", OWN + 1, 7, 1, 0)
    assert SECCOMP_RET_ALLOW == answer("prlimit64", 0, 7, 1, 0)
    assert SECCOMP_RET_ALLOW == answer("prlimit64", OWN, 7, 1, 0)
    assert RET_EPERM == answer("setpriority", 0, OWN - 1, 19)
    assert SECCOMP_RET_ALLOW == answer("setpriority", 0, 0, 19)
    assert RET_EPERM == answer("setpriority", 2, 0, 19)  # PRIO_USER: all of the user's
    assert RET_EPERM == answer("setpriority", 1, 0, 19)  # PRIO_PGRP
    assert SECCOMP_RET_ALLOW == answer("ioprio_set", 1, OWN, 0)
    assert RET_EPERM == answer("ioprio_set", 3, 0, 0)
    assert RET_EPERM == answer("sched_setaffinity", 1)
    assert RET_EPERM == answer("ioctl", 0, 0x5412, 0)
    assert RET_EPERM == answer("ioctl", 0, 0x541C, 0)
    assert SECCOMP_RET_ALLOW == answer("ioctl", 0, 0x5413, 0)  # TIOCGWINSZ
    assert RET_EPERM == answer("mknodat", -100, 0, stat.S_IFCHR | 0o666, 0x103)
    assert RET_EPERM == answer("mknodat", -100, 0, stat.S_IFBLK | 0o666, 0x700)
    assert SECCOMP_RET_ALLOW == answer("mknodat", -100, 0, stat.S_IFIFO | 0o666, 0)
    assert SECCOMP_RET_ALLOW == answer("mknodat", -100, 0, stat.S_IFSOCK | 0o666, 0)
    for name in ("shmget", "shmat", "msgget", "semget", "keyctl", "add_key", "ptrace"):
        assert RET_EPERM == answer(name, 0, 0, 0)
    assert RET_EPERM == answer("io_uring_setup", 8, 0)
    for name in ("bpf", "perf_event_open", "userfaultfd"):
        assert RET_EPERM == answer(name, 0, 0, 0)
    assert SECCOMP_RET_KILL_PROCESS == answer("socket", 1, arch=AUDIT_ARCH_I386)
    other = AARCH64 if table is X86_64 else X86_64
    assert SECCOMP_RET_KILL_PROCESS == answer("socket", 1, arch=other.audit)
    x32 = interpret(program, seccomp_data(0x40000000 | 39, table.audit, ()))
    assert (RET_EPERM if table.x32 else SECCOMP_RET_ALLOW) == x32


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
@pytest.mark.parametrize(("allow_network", "private_ipc"), FLAGS)
def test_the_program_is_well_formed(
    table: Architecture, allow_network: bool, private_ipc: bool
) -> None:
    """Forward jumps inside the program, aligned loads, a return at the end, bounded."""
    instructions = decode(seccomp.build(OWN, allow_network, private_ipc, table))
    assert 0 < len(instructions) <= seccomp.MAXIMUM_INSTRUCTIONS
    assert 0x06 == instructions[-1][0]
    assert 0x20 == instructions[0][0]
    assert seccomp.OFFSET_ARCH == instructions[0][3]  # the architecture is checked first
    for index, (code, true, false, k) in enumerate(instructions):
        if code in {0x15, 0x35}:
            assert index + 1 + max(true, false) < len(instructions)
        elif code == 0x20:
            assert 0 == k % 4
            assert k < 64
        else:
            assert 0 == true == false
    assert instructions == list(
        seccomp.describe(seccomp.build(OWN, allow_network, private_ipc, table))
    )


def test_the_flags_open_exactly_their_rules() -> None:
    """allow_network drops the socket rule, private_ipc the SysV rule; nothing else moves."""
    assert seccomp.RULES == seccomp.rules(allow_network=False, private_ipc=False)
    assert "sockets_unix_only" not in seccomp.rules(allow_network=True, private_ipc=False)
    assert "no_sysv_ipc" not in seccomp.rules(allow_network=False, private_ipc=True)
    assert len(seccomp.RULES) - 2 == len(seccomp.rules(allow_network=True, private_ipc=True))


def test_an_unknown_architecture_has_no_filter() -> None:
    """No table, no program: ``Unsupported``, never a filter that pretends."""
    with pytest.raises(seccomp.Unsupported):
        _build_without_table()


def _build_without_table() -> bytes:
    saved = dict(seccomp.ARCHITECTURES)
    seccomp.ARCHITECTURES.clear()
    try:
        assert seccomp.architecture() is None
        assert not seccomp.available()
        return seccomp.build(1)
    finally:
        seccomp.ARCHITECTURES.update(saved)


@pytest.mark.parametrize("own", [0, -1])
def test_the_own_pid_must_be_a_pid(own: int) -> None:
    """0 or a negative pid would widen the rule: refused."""
    with pytest.raises(ValueError, match="pid"):
        seccomp.build(own, table=X86_64)


def test_a_jump_of_255_is_the_longest_and_256_is_refused() -> None:
    """The one-byte jump offsets: 255 assembles, 256 raises."""
    for gap, fits in ((255, True), (256, False)):
        program = seccomp._Program()
        program.jeq(0, "far")
        for _ in range(gap):
            program.ret(0)
        program.label("far")
        program.ret(1)
        if fits:
            assert gap == decode(program.assemble())[0][1]
        else:
            with pytest.raises(ValueError, match="reach"):
                program.assemble()


def test_a_program_of_4096_instructions_assembles_and_4097_is_refused() -> None:
    """BPF_MAXINSNS on both sides; a label defined twice is refused too."""
    for count, fits in ((4096, True), (4097, False)):
        program = seccomp._Program()
        for _ in range(count):
            program.ret(0)
        if fits:
            assert 4096 * 8 == len(program.assemble())
        else:
            with pytest.raises(ValueError, match="long"):
                program.assemble()
    program = seccomp._Program()
    program.label("a")
    with pytest.raises(ValueError, match="twice"):
        program.label("a")


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_the_tables_match_the_kernel_headers(table: Architecture) -> None:
    """Every number in the table is the one the installed kernel headers give."""
    header = HEADERS[table.name]
    if not header.exists():
        pytest.skip(f"no {header} on this machine")
    text = header.read_text()
    for name, number in table.numbers.items():
        found = re.search(rf"#define __NR(?:3264)?_{name}\s+(\d+)\b", text)
        assert found is not None, name
        assert number == int(found.group(1)), name
    assert ("mknod" in table.numbers) == (re.search(r"__NR_mknod\s", text) is not None)


def test_install_refuses_what_is_not_a_program() -> None:
    """A length that is not whole instructions, or nothing at all: ValueError."""
    for program in (b"", b"\0" * 7, b"\0" * 8 * (seccomp.MAXIMUM_INSTRUCTIONS + 1)):
        with pytest.raises(ValueError, match="filter"):
            seccomp.install(program)


# -- the real kernel, in a forked child ----------------------------------------------------


def in_child(
    body: Callable[[], object],
    *,
    install: bool = True,
    allow_network: bool = False,
    private_ipc: bool = False,
) -> object:
    """Run ``body`` in a forked child (under the filter unless ``install`` is False)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        status = 0
        try:
            os.close(read)
            if install:
                seccomp.install(seccomp.build(os.getpid(), allow_network, private_ipc))
            os.write(write, json.dumps(body()).encode())
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            os.write(write, json.dumps({"raised": type(error).__name__}).encode())
            status = 1
        finally:
            os._exit(status)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), status
    return json.loads(b"".join(chunks))


def outcome(action: Callable[[], object]) -> str:
    """``ok`` or the errno's name."""
    try:
        action()
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error.errno))
    return "ok"


_libc = ctypes.CDLL(None, use_errno=True)


def raw(name: str, *arguments: int | bytes | None) -> int:
    """A raw system call of this machine's table; ``OSError`` on failure."""
    assert TABLE is not None
    return raw_number(TABLE.numbers[name], *arguments)


def raw_number(number: int, *arguments: int | bytes | None) -> int:
    """``syscall(number, ...)`` with every argument a full register."""
    converted = [
        ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a or 0) for a in arguments
    ]
    result = int(_libc.syscall(ctypes.c_long(number), *converted))
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def network_attacks() -> list[str]:
    def make(family: int, kind: int, protocol: int = 0) -> Callable[[], None]:
        return lambda: socket.socket(family, kind, protocol).close()

    def fast_open() -> None:
        with socket.socket() as s:  # TCP Fast Open needs the socket first
            s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", 9))

    def listen_without_bind() -> None:
        with socket.socket() as s:
            s.listen()

    return [
        outcome(make(socket.AF_INET, socket.SOCK_STREAM, 262)),  # MPTCP
        outcome(make(socket.AF_INET, socket.SOCK_STREAM)),
        outcome(make(socket.AF_INET, socket.SOCK_DGRAM)),
        outcome(make(socket.AF_INET6, socket.SOCK_DGRAM)),
        outcome(make(socket.AF_NETLINK, socket.SOCK_RAW)),
        outcome(fast_open),
        outcome(listen_without_bind),
    ]


@needs_seccomp
def test_every_network_socket_is_refused_and_unix_sockets_work() -> None:
    """MPTCP, TCP, UDP, IPv6, netlink, Fast Open and listen-without-bind: all EPERM."""
    assert ["EPERM"] * 7 == in_child(network_attacks)

    def unix() -> list[str]:
        def pair() -> None:
            a, b = socket.socketpair()
            a.sendall(b"x")
            assert b"x" == b.recv(1)
            a.close()
            b.close()

        return [outcome(pair), outcome(lambda: socket.socket(socket.AF_UNIX).close())]

    assert ["ok", "ok"] == in_child(unix)


@needs_seccomp
def test_allow_network_lets_every_family_through() -> None:
    """With allow_network a TCP and a UDP socket are made (MPTCP: not EPERM)."""
    lines = in_child(network_attacks, allow_network=True)
    assert isinstance(lines, list)
    assert ["ok", "ok", "ok"] == lines[1:4]
    assert "EPERM" != lines[0]


def other_process_attacks() -> dict[str, str]:
    parent = os.getppid()
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    priority = os.getpriority(os.PRIO_PROCESS, parent)
    affinity = os.sched_getaffinity(parent)
    return {
        "prlimit_parent": outcome(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, limits)),
        "prlimit_read_parent": outcome(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE)),
        "setpriority_parent": outcome(lambda: os.setpriority(os.PRIO_PROCESS, parent, priority)),
        "setpriority_user": outcome(
            lambda: os.setpriority(os.PRIO_USER, 0, os.getpriority(os.PRIO_USER, 0))
        ),
        "affinity_parent": outcome(lambda: os.sched_setaffinity(parent, affinity)),
        "scheduler_parent": outcome(
            lambda: os.sched_setscheduler(parent, os.SCHED_OTHER, os.sched_param(0))
        ),
        "param_parent": outcome(lambda: os.sched_setparam(parent, os.sched_param(0))),
        "setattr_parent": outcome(lambda: raw("sched_setattr", parent, None, 0)),
        "ioprio_parent": outcome(lambda: raw("ioprio_set", 1, parent, 0)),
        # PTRACE_PEEKDATA: harmless without the filter (ESRCH: not our tracee), as an
        # attach would stop the test itself if the filter let it through.
        "ptrace_parent": outcome(lambda: raw("ptrace", 2, parent, 0, 0)),
        "vm_readv_parent": outcome(lambda: raw("process_vm_readv", parent, 0, 0, 0, 0, 0)),
    }


@needs_seccomp
def test_no_process_outside_the_caller_can_be_limited_reniced_or_traced() -> None:
    """prlimit, setpriority, sched_*, ioprio_set, ptrace, process_vm_readv on the parent."""
    without = in_child(other_process_attacks, install=False)
    assert isinstance(without, dict)
    assert "ok" == without["prlimit_parent"] == without["setpriority_parent"]  # the attack
    refused = in_child(other_process_attacks)
    assert dict.fromkeys(without, "EPERM") == refused


def own_process_calls() -> dict[str, str]:
    me = os.getpid()
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    affinity = os.sched_getaffinity(0)

    def grandchild(target: int) -> str:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover
            who = os.getpid() if target < 0 else target
            answer = outcome(lambda: resource.prlimit(who, resource.RLIMIT_NOFILE, limits))
            os.write(write, answer.encode())
            os._exit(0)
        os.close(write)
        said = os.read(read, 64).decode()
        os.close(read)
        os.waitpid(pid, 0)
        return said

    return {
        "prlimit_0": outcome(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, limits)),
        "prlimit_self": outcome(lambda: resource.prlimit(me, resource.RLIMIT_NOFILE, limits)),
        "setrlimit": outcome(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits)),
        "setpriority_0": outcome(lambda: os.setpriority(os.PRIO_PROCESS, 0, 1)),
        "setpriority_self": outcome(lambda: os.setpriority(os.PRIO_PROCESS, me, 2)),
        "nice": outcome(lambda: os.nice(1)),
        "affinity_0": outcome(lambda: os.sched_setaffinity(0, affinity)),
        "ioprio_0": outcome(lambda: raw("ioprio_set", 1, 0, 0)),
        "child_prlimit_0": grandchild(0),
        "child_prlimit_command": grandchild(me),
        "child_prlimit_itself": grandchild(-1),
    }


@needs_seccomp
def test_the_caller_may_still_limit_and_renice_itself() -> None:
    """pid 0 and the command's own pid pass; a child naming its own pid is the boundary."""
    assert {
        "prlimit_0": "ok",
        "prlimit_self": "ok",
        "setrlimit": "ok",
        "setpriority_0": "ok",
        "setpriority_self": "ok",
        "nice": "ok",
        "affinity_0": "ok",
        "ioprio_0": "ok",
        "child_prlimit_0": "ok",
        "child_prlimit_command": "ok",
        "child_prlimit_itself": "EPERM",  # documented: a child must say 0
    } == in_child(own_process_calls)


def kernel_state_attacks() -> dict[str, str]:
    def make_and_remove() -> None:
        segment = raw("shmget", 0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
        raw("shmctl", segment, 0, 0)  # IPC_RMID

    return {
        "shmget": outcome(make_and_remove),
        "msgget": outcome(lambda: raw("msgget", 0, 0o1000 | 0o600) and None),
        "semget": outcome(lambda: raw("semget", 0, 1, 0o1000 | 0o600) and None),
        "add_key": outcome(lambda: raw("add_key", b"user", b"planted", b"x", 1, -4)),
        "keyctl": outcome(lambda: raw("keyctl", 0, -4, 0)),  # KEYCTL_GET_KEYRING_ID @u
        "request_key": outcome(lambda: raw("request_key", b"user", b"planted", None, 0)),
    }


@needs_seccomp
def test_sysv_ipc_and_keyrings_are_refused() -> None:
    """shmget, msgget, semget, add_key, keyctl, request_key: EPERM."""
    refused = in_child(kernel_state_attacks)
    assert isinstance(refused, dict)
    assert set(refused.values()) == {"EPERM"}
    assert 6 == len(refused)


@needs_seccomp
def test_a_segment_made_outside_cannot_be_attached_by_its_id() -> None:
    """The id of an outside segment (readable in /proc/sysvipc/shm) does not help: EPERM."""
    _libc.shmat.restype = ctypes.c_void_p
    segment = raw("shmget", 0, 4096, 0o1000 | 0o600)
    try:

        def attach() -> str:
            return outcome(lambda: raw("shmat", segment, 0, 0))

        assert "ok" == in_child(attach, install=False)
        assert "EPERM" == in_child(attach)
    finally:
        raw("shmctl", segment, 0, 0)


@needs_seccomp
def test_private_ipc_lets_sysv_ipc_through_and_keeps_the_keyring_closed() -> None:
    """With private_ipc (an IPC namespace of its own) SysV IPC works; keyrings stay EPERM."""
    answers = in_child(kernel_state_attacks, private_ipc=True)
    assert isinstance(answers, dict)
    assert ("ok", "ok", "ok") == (answers["shmget"], answers["msgget"], answers["semget"])
    assert "EPERM" == answers["add_key"] == answers["keyctl"]


def device_attacks(directory: str) -> dict[str, str]:
    def node(name: str, mode: int, device: int = 0) -> Callable[[], None]:
        return lambda: os.mknod(os.path.join(directory, name), mode, device)

    answers = {
        "char": outcome(node("char", stat.S_IFCHR | 0o600, os.makedev(1, 3))),
        "block": outcome(node("block", stat.S_IFBLK | 0o600, os.makedev(7, 0))),
        "fifo": outcome(node("fifo", stat.S_IFIFO | 0o600)),
        "regular": outcome(node("regular", stat.S_IFREG | 0o600)),
    }
    if TABLE is X86_64:  # the old mknod(2), which glibc no longer calls
        path = os.path.join(directory, "char-old").encode()
        answers["char_old"] = outcome(lambda: raw("mknod", path, stat.S_IFCHR | 0o600, 0x103))
    return answers


@needs_seccomp
@needs_root
def test_root_cannot_make_a_device_node_but_fifos_and_files_still_work(tmp_path: Path) -> None:
    """mknod/mknodat of a char or block device: EPERM; a FIFO and a regular file: made."""
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    without = in_child(lambda: device_attacks(str(tmp_path / "without")), install=False)
    assert isinstance(without, dict)
    assert "ok" == without["char"]  # root could, without the filter
    answers = in_child(lambda: device_attacks(str(tmp_path / "with")))
    assert isinstance(answers, dict)
    assert "EPERM" == answers["char"] == answers["block"] == answers.get("char_old", "EPERM")
    assert "ok" == answers["fifo"] == answers["regular"]
    assert ["fifo", "regular"] == sorted(p.name for p in (tmp_path / "with").iterdir())


def terminal_attacks() -> dict[str, str]:
    leader, follower = os.openpty()
    try:
        return {
            "tiocsti": outcome(lambda: fcntl.ioctl(follower, termios.TIOCSTI, b"x")),
            "tioclinux": outcome(lambda: fcntl.ioctl(follower, 0x541C, b"\x06")),
            "tiocgwinsz": outcome(lambda: fcntl.ioctl(follower, termios.TIOCGWINSZ, b"\0" * 8)),
        }
    finally:
        os.close(leader)
        os.close(follower)


@needs_seccomp
def test_tiocsti_and_tioclinux_are_refused_and_other_ioctls_work() -> None:
    """Typing into a terminal (TIOCSTI) and TIOCLINUX: EPERM; TIOCGWINSZ still answers."""
    without = in_child(terminal_attacks, install=False)
    assert isinstance(without, dict)
    assert "EPERM" != without["tioclinux"]
    answers = in_child(terminal_attacks)
    assert isinstance(answers, dict)
    assert {"tiocsti": "EPERM", "tioclinux": "EPERM", "tiocgwinsz": "ok"} == answers


def io_uring() -> str:
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed

    def setup() -> None:
        os.close(raw("io_uring_setup", 4, ctypes.addressof(params)))

    return outcome(setup)


def kernel_surface() -> dict[str, str]:
    """Each call with arguments the kernel rejects on its own (so it never does anything):
    without the filter its own error, with it EPERM."""
    return {
        "bpf": outcome(lambda: raw("bpf", 0xFFFF, 0, 0)),
        "perf_event_open": outcome(lambda: raw("perf_event_open", 0, 0, -1, -1, 0)),
        "userfaultfd": outcome(lambda: raw("userfaultfd", 0xFFFF)),
    }


@needs_seccomp
def test_bpf_perf_event_open_and_userfaultfd_are_refused() -> None:
    without = in_child(kernel_surface, install=False)
    assert isinstance(without, dict)
    assert "EPERM" not in without.values(), without
    assert dict.fromkeys(without, "EPERM") == in_child(kernel_surface)


@needs_seccomp
def test_io_uring_setup_is_refused() -> None:
    """io_uring_setup: EPERM (without the filter it works, or is off in this kernel)."""
    without = in_child(io_uring, install=False)
    if without != "ok":
        pytest.skip("io_uring is unavailable here, so EPERM would prove nothing")
    assert "EPERM" == in_child(io_uring)


@needs_seccomp
@needs_x86_64
def test_an_x32_system_call_is_refused() -> None:
    """getpid through the x32 ABI (nr | __X32_SYSCALL_BIT): EPERM."""

    def x32_getpid() -> str:
        return outcome(lambda: raw_number(0x40000000 | 39))

    assert "EPERM" == in_child(x32_getpid)
    assert "EPERM" != in_child(x32_getpid, install=False)


_INT80_GETPID: Final = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
"""mov eax, 20 (i386 getpid); int 0x80; ret."""


def int80_getpid() -> object:
    """An i386 system call from this 64-bit process; its result."""
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_INT80_GETPID)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return int(ctypes.CFUNCTYPE(ctypes.c_int)(address)())


@needs_seccomp
@needs_x86_64
def test_a_foreign_architecture_call_kills_the_process() -> None:
    """An i386 ``int 0x80`` call: SIGSYS kills the process (a control shows it works)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        os._exit(0 if int80_getpid() == os.getpid() else 3)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and 0 == os.WEXITSTATUS(status)):
        pytest.skip("this kernel runs no i386 calls (no IA32 emulation)")
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        seccomp.install(seccomp.build(os.getpid()))
        int80_getpid()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert signal.SIGSYS == os.WTERMSIG(status)


def developer_tools(directory: str) -> dict[str, object]:
    source = Path(directory, "hello.c")
    source.write_text("int main(void) { return 0; }\n")
    answers: dict[str, object] = {}

    def run(*argv: str) -> int:
        return subprocess.run(argv, cwd=directory, capture_output=True, check=False).returncode

    answers["python"] = run(sys.executable, "-c", "import socket; socket.socketpair()")
    git = shutil.which("git")
    answers["git"] = run(git, "--version") if git else "absent"
    compiler = shutil.which("cc")
    answers["cc"] = run(compiler, "-o", "hello", "hello.c") if compiler else "absent"
    answers["hello"] = run("./hello") if compiler else "absent"
    Path(directory, "file").write_text("written")
    answers["file"] = Path(directory, "file").read_text()
    return answers


@needs_seccomp
def test_python_git_a_compiler_and_files_keep_working(tmp_path: Path) -> None:
    """fork/exec under the filter: python3 -c, git --version, cc, a compiled program, files."""
    answers = in_child(lambda: developer_tools(str(tmp_path)))
    assert isinstance(answers, dict)
    assert 0 == answers["python"]
    assert answers["git"] in {0, "absent"}
    assert answers["cc"] in {0, "absent"}
    assert answers["hello"] in {0, "absent"}
    assert "written" == answers["file"]


@needs_seccomp
def test_the_filter_is_installed_with_no_new_privs() -> None:
    """After install: Seccomp 2 (filter) and NoNewPrivs 1 in /proc/self/status."""

    def status() -> list[str]:
        lines = Path("/proc/self/status").read_text().splitlines()
        return [line.split()[1] for line in lines if line.startswith(("Seccomp:", "NoNewPrivs:"))]

    assert ["1", "2"] == in_child(status)
    assert ["0", "0"] == in_child(status, install=False)
