"""ALICE-style crash states (Pillai et al., OSDI 2014) for ``replace``, from an ``strace`` trace.

1. *Record*: run one ``replace`` in a child process under ``strace -f -xx -y`` and keep
   the file-system system calls on names beneath the root (``parse_trace``).
2. *Model*: turn them into abstract operations on names and inodes: ``creat``, ``write``,
   ``trunc``, ``fsync`` (a file), ``fsyncdir`` (a directory), ``rename``, ``link``,
   ``unlink``, ``mkdir``.
3. *Enumerate* (``crash_states``): for each prefix of the operations (a crash after it),
   every state a POSIX file system may leave. The persistence model is the weak one
   POSIX guarantees, without any ext4 ordering help:

   * a directory operation survives for sure only when an ``fsync`` of its directory
     followed it (before the crash); otherwise it may or may not survive, independently
     of the others (each one atomic: a ``rename`` is all or nothing);
   * file data survives for sure only up to the last ``fsync`` of that inode; after it,
     any prefix of the later writes may survive, and the first lost write may have left
     its length behind filled with zeros (the "garbage" of an append).

4. *Materialize* each state as real files in a temporary directory and check it.

``MAXIMUM_CRASH_STATES`` bounds the enumeration; exceeding it is a test failure, never a
silent truncation.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

MAXIMUM_CRASH_STATES: Final = 20_000
"""Most crash states one trace may produce (the test fails beyond it)."""

STRACE: Final = "/usr/bin/strace"
STRACE_ARGUMENTS: Final = (
    "-f",
    "-qq",
    "-xx",
    "-s",
    "65536",
    "-y",
    "-e",
    (
        "trace=file,desc,fsync,fdatasync,rename,renameat,renameat2,link,linkat,"
        "unlink,unlinkat,write,pwrite64"
    ),
)

_HEX = r"((?:\\x[0-9a-f]{2})*)"
_FD = rf"(-?\d+|AT_FDCWD)(?:<{_HEX}>)?"
_PATTERNS: Final = {
    "openat": re.compile(rf"openat\({_FD}, \"{_HEX}\", ([A-Z0-9_|]+)(?:, \d+)?\) = (\d+)<{_HEX}>"),
    "openat2": re.compile(
        rf"openat2\({_FD}, \"{_HEX}\", \{{flags=([A-Z0-9_|]+)[^}}]*\}}, \d+\) = (\d+)<{_HEX}>"
    ),
    "write": re.compile(rf"write\((\d+)<{_HEX}>, \"{_HEX}\", \d+\) = (\d+)"),
    "pwrite64": re.compile(rf"pwrite64\((\d+)<{_HEX}>, \"{_HEX}\", \d+, (\d+)\) = (\d+)"),
    "fsync": re.compile(rf"f(?:data)?sync\((\d+)<{_HEX}>(?:\(deleted\))?\) = 0"),
    "ftruncate": re.compile(rf"ftruncate\((\d+)<{_HEX}>, (\d+)\) = 0"),
    "renameat": re.compile(
        rf"renameat2?\({_FD}, \"{_HEX}\", {_FD}, \"{_HEX}\"(?:, [A-Z0-9_|]+)?\) = 0"
    ),
    "rename": re.compile(rf"rename\(\"{_HEX}\", \"{_HEX}\"\) = 0"),
    "linkat": re.compile(rf"linkat\({_FD}, \"{_HEX}\", {_FD}, \"{_HEX}\", [A-Z0-9_|]+\) = 0"),
    "link": re.compile(rf"link\(\"{_HEX}\", \"{_HEX}\"\) = 0"),
    "unlinkat": re.compile(rf"unlinkat\({_FD}, \"{_HEX}\", ([A-Z0-9_|]+)\) = 0"),
    "unlink": re.compile(rf"unlink\(\"{_HEX}\"\) = 0"),
    "mkdirat": re.compile(rf"mkdirat\({_FD}, \"{_HEX}\", \d+\) = 0"),
    "mkdir": re.compile(rf"mkdir\(\"{_HEX}\", \d+\) = 0"),
    "close": re.compile(r"close\((\d+)"),
}
_CLOSE_STARTED: Final = "\0close-started"
"""Marks a pending close that was already yielded when it began."""
_LINE: Final = re.compile(r"^(?:\[pid +)?(\d+)\]?\s+(.*)$")
_RESUMED: Final = re.compile(r"^<\.\.\. \w+ resumed>(.*)$")
_PADDED_RESULT: Final = re.compile(r"^\)\s+= ")


def _text(hexed: str | None) -> str:
    if not hexed:
        return ""
    return bytes.fromhex(hexed.replace("\\x", "")).decode("utf-8", "surrogateescape")


def _data(hexed: str) -> bytes:
    return bytes.fromhex(hexed.replace("\\x", ""))


@final
@dataclass(frozen=True, slots=True)
class Op:
    """One abstract file-system operation; names are relative to the root."""

    kind: str
    name: str = ""
    other: str = ""
    inode: int = 0
    offset: int = 0
    data: bytes = b""

    @property
    def is_directory_op(self) -> bool:
        """Whether the op changes a directory (and waits for its fsync)."""
        return self.kind in {"creat", "rename", "link", "unlink", "mkdir"}

    def directories(self) -> tuple[str, ...]:
        """The directories whose fsync makes this op durable."""
        names = [self.name] + ([self.other] if self.kind in {"rename", "link"} else [])
        return tuple(sorted({os.path.dirname(name) or "." for name in names}))


@dataclass
class Trace:
    """The recorded operations and the inode of each name before the first one."""

    ops: list[Op] = field(default_factory=list)
    initial: dict[str, int] = field(default_factory=dict)
    initial_data: dict[int, bytes] = field(default_factory=dict)


def joined_lines(lines: Iterable[str]) -> Iterator[str]:
    """Trace lines with ``<unfinished ...>``/``<... resumed>`` pairs joined, pid dropped."""
    pending: dict[str, str] = {}
    for raw in lines:
        match = _LINE.match(raw.rstrip("\n"))
        if match is None:
            continue
        pid, rest = match.groups()
        if rest.endswith("<unfinished ...>"):
            # "fsync(8<...> <unfinished ...>": the blank before the marker is strace's, not
            # the call's, as is the padding in "<... fsync resumed>)      = 0" (a loaded
            # machine interleaves threads, so the split calls are the ones that matter).
            started = rest.removesuffix("<unfinished ...>").rstrip()
            if started.startswith("close("):
                # The number is free once close has begun: another thread's open may get
                # it (and be printed) before this close's end is, so it counts from here.
                yield started
                started = _CLOSE_STARTED
            pending[pid] = started
            continue
        resumed = _RESUMED.match(rest)
        if resumed is not None:
            rest = pending.pop(pid, "") + _PADDED_RESULT.sub(") = ", resumed.group(1), count=1)
            if rest.startswith(_CLOSE_STARTED):
                continue
        yield rest


@final
class _Recorder:
    """Turns matched system calls into ``Op``s on names beneath ``root``."""

    def __init__(self, root: str, files: Mapping[str, bytes]) -> None:
        self.root = root.rstrip("/")
        self.trace = Trace()
        self.names: dict[str, int] = {}
        self.inodes = itertools.count(1)
        self.fds: dict[int, int] = {}
        self.offsets: dict[int, int] = {}
        for name, content in files.items():
            inode = next(self.inodes)
            self.names[name] = inode
            self.trace.initial[name] = inode
            self.trace.initial_data[inode] = content

    def relative(self, directory: str | None, name: str) -> str | None:
        full = name if name.startswith("/") else f"{directory}/{name}"
        full = os.path.normpath(full)
        if full == self.root:
            return "."
        if not full.startswith(self.root + "/"):
            return None
        return full[len(self.root) + 1 :]

    def add(self, op: Op) -> None:
        self.trace.ops.append(op)

    def opened(self, directory: str, name: str, flags: str, fd: int) -> None:
        relative = self.relative(directory, name)
        self.fds.pop(fd, None)
        if relative is None or "O_DIRECTORY" in flags or "O_PATH" in flags:
            return
        inode = self.names.get(relative)
        if inode is None:
            if "O_CREAT" not in flags:
                return
            inode = next(self.inodes)
            self.names[relative] = inode
            self.add(Op("creat", relative, inode=inode))
        elif "O_TRUNC" in flags:
            self.add(Op("trunc", relative, inode=inode, offset=0))
        self.fds[fd] = inode
        self.offsets[fd] = 0

    def wrote(self, fd: int, data: bytes, offset: int | None) -> None:
        inode = self.fds.get(fd)
        if inode is None:
            return
        at = self.offsets[fd] if offset is None else offset
        self.add(Op("write", inode=inode, offset=at, data=data))
        if offset is None:
            self.offsets[fd] = at + len(data)

    def synced(self, fd: int, shown: str) -> None:
        inode = self.fds.get(fd)
        if inode is not None:
            self.add(Op("fsync", inode=inode))
            return
        relative = self.relative(None, shown)
        if relative is not None:
            self.add(Op("fsyncdir", relative))

    def renamed(self, source: str | None, target: str | None) -> None:
        if source is None or target is None or source not in self.names:
            return
        inode = self.names.pop(source)
        self.names[target] = inode
        self.add(Op("rename", source, target, inode=inode))

    def linked(self, source: str | None, target: str | None) -> None:
        if source is None or target is None or source not in self.names:
            return
        inode = self.names[source]
        self.names[target] = inode
        self.add(Op("link", source, target, inode=inode))

    def unlinked(self, name: str | None) -> None:
        if name is None or name not in self.names:
            return
        self.add(Op("unlink", name, inode=self.names.pop(name)))

    def made(self, name: str | None) -> None:
        if name is not None:
            self.add(Op("mkdir", name))


def parse_trace(lines: Iterable[str], root: str, files: Mapping[str, bytes]) -> Trace:
    """The operations of an ``strace -f -xx -y`` trace on names beneath ``root``.

    ``files`` are the names (relative to the root) and contents that existed, durable,
    before the traced process started.
    """
    recorder = _Recorder(root, files)
    for line in joined_lines(lines):
        _record(recorder, line)
    return recorder.trace


def _record(recorder: _Recorder, line: str) -> None:
    syscall = line.split("(", 1)[0]
    if syscall == "close":
        match = _PATTERNS["close"].match(line)
        if match:
            recorder.fds.pop(int(match.group(1)), None)
    elif syscall in {"openat", "openat2"}:
        match = _PATTERNS[syscall].match(line)
        if match:
            _, directory, name, flags, fd, _ = match.groups()
            recorder.opened(_text(directory), _text(name), flags, int(fd))
    elif syscall in {"write", "pwrite64"}:
        match = _PATTERNS[syscall].match(line)
        if match:
            groups = match.groups()
            offset = int(groups[3]) if syscall == "pwrite64" else None
            recorder.wrote(int(groups[0]), _data(groups[2]), offset)
    elif syscall in {"fsync", "fdatasync"}:
        match = _PATTERNS["fsync"].match(line)
        if match:
            recorder.synced(int(match.group(1)), _text(match.group(2)))
    elif syscall == "ftruncate":
        match = _PATTERNS["ftruncate"].match(line)
        if match and int(match.group(1)) in recorder.fds:
            inode = recorder.fds[int(match.group(1))]
            recorder.add(Op("trunc", inode=inode, offset=int(match.group(3))))
    elif syscall in {"renameat", "renameat2", "linkat"}:
        match = _PATTERNS["linkat" if syscall == "linkat" else "renameat"].match(line)
        if match:
            _, first_dir, first, _, second_dir, second = match.groups()
            source = recorder.relative(_text(first_dir), _text(first))
            target = recorder.relative(_text(second_dir), _text(second))
            if syscall == "linkat":
                recorder.linked(source, target)
            else:
                recorder.renamed(source, target)
    elif syscall in {"rename", "link"}:
        match = _PATTERNS[syscall].match(line)
        if match:
            source = recorder.relative(None, _text(match.group(1)))
            target = recorder.relative(None, _text(match.group(2)))
            (recorder.renamed if syscall == "rename" else recorder.linked)(source, target)
    elif syscall in {"unlinkat", "unlink"}:
        match = _PATTERNS[syscall].match(line)
        if match and syscall == "unlinkat" and "AT_REMOVEDIR" not in match.group(4):
            recorder.unlinked(recorder.relative(_text(match.group(2)), _text(match.group(3))))
        elif match and syscall == "unlink":
            recorder.unlinked(recorder.relative(None, _text(match.group(1))))
    elif syscall in {"mkdirat", "mkdir"}:
        match = _PATTERNS[syscall].match(line)
        if match and syscall == "mkdirat":
            recorder.made(recorder.relative(_text(match.group(2)), _text(match.group(3))))
        elif match:
            recorder.made(recorder.relative(None, _text(match.group(1))))


@final
@dataclass(frozen=True, slots=True)
class CrashState:
    """What the disk may hold after a crash following ``prefix`` operations."""

    prefix: int
    files: Mapping[str, bytes]
    directories: frozenset[str]


def _data_variants(ops: Sequence[Op], initial: bytes | None) -> list[bytes]:
    """Every content one inode may hold: its synced writes, then any prefix of the rest."""
    last_sync = max((i for i, op in enumerate(ops) if op.kind == "fsync"), default=-1)
    durable = bytearray(initial or b"")
    for op in ops[: last_sync + 1]:
        _apply_data(durable, op)
    pending = [op for op in ops[last_sync + 1 :] if op.kind in {"write", "trunc"}]
    variants: list[bytes] = []
    current = bytearray(durable)
    for index in range(len(pending) + 1):
        variants.append(bytes(current))
        if index == len(pending):
            break
        op = pending[index]
        if op.kind == "write":
            garbage = bytearray(current)
            _apply_data(garbage, Op("write", offset=op.offset, data=bytes(len(op.data))))
            variants.append(bytes(garbage))
        _apply_data(current, op)
    return list(dict.fromkeys(variants))


def _apply_data(content: bytearray, op: Op) -> None:
    if op.kind == "trunc":
        del content[op.offset :]
    elif op.kind == "write":
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(bytes(op.offset - len(content)))
        content[op.offset : end] = op.data


def crash_states(trace: Trace) -> Iterator[CrashState]:
    """Every crash state of every prefix of ``trace.ops`` (see the module docstring)."""
    ops = trace.ops
    for prefix in range(len(ops) + 1):
        done = ops[:prefix]
        synced_dirs = {
            index: {op.name for op in done[index + 1 :] if op.kind == "fsyncdir"}
            for index in range(len(done))
        }
        certain: list[int] = []
        optional: list[int] = []
        for index, op in enumerate(done):
            if not op.is_directory_op:
                continue
            if set(op.directories()) <= synced_dirs[index]:
                certain.append(index)
            else:
                optional.append(index)
        inodes = sorted({op.inode for op in done if op.kind in {"write", "trunc", "fsync"}})
        per_inode = {
            inode: _data_variants(
                [op for op in done if op.inode == inode and op.kind != "creat"],
                trace.initial_data.get(inode),
            )
            for inode in inodes
        }
        for chosen in itertools.product((False, True), repeat=len(optional)):
            kept = set(certain) | {i for i, keep in zip(optional, chosen, strict=True) if keep}
            names = dict(trace.initial)
            directories = {"."} | {_parent(name) for name in trace.initial}
            for index in sorted(kept):
                _apply_entry(names, directories, done[index])
            # A name whose parent directory's own entry was lost is lost with it.
            reachable = {
                name: inode for name, inode in names.items() if _reachable(name, directories)
            }
            for contents in itertools.product(*per_inode.values()):
                data = dict(trace.initial_data)
                data.update(zip(per_inode, contents, strict=True))
                files = {name: data.get(inode, b"") for name, inode in reachable.items()}
                yield CrashState(prefix, files, frozenset(directories))


def _parent(name: str) -> str:
    return os.path.dirname(name) or "."


def _reachable(name: str, directories: set[str]) -> bool:
    parent = _parent(name)
    while parent != ".":
        if parent not in directories:
            return False
        parent = _parent(parent)
    return True


def _apply_entry(names: dict[str, int], directories: set[str], op: Op) -> None:
    if op.kind == "creat":
        names[op.name] = op.inode
    elif op.kind == "rename":
        names.pop(op.name, None)
        names[op.other] = op.inode
    elif op.kind == "link":
        names[op.other] = op.inode
    elif op.kind == "unlink":
        if names.get(op.name) == op.inode:
            del names[op.name]
    elif op.kind == "mkdir":
        directories.add(op.name)


def materialize(state: CrashState, directory: Path) -> None:
    """Write ``state`` as real directories and files under ``directory``."""
    for name in sorted(state.directories, key=len):
        (directory / name).mkdir(parents=True, exist_ok=True)
    for name, content in state.files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(content)


def durable_point(trace: Trace, target: str) -> int:
    """The prefix length after which the tool may have said ``durable: true`` (or past the end).

    The commit is the ``rename``/``link`` onto ``target``; it needs its directory fsynced
    after it. The tool answers only after its last sync of the call (a create also syncs
    every directory it may have made), so the claim comes after the last ``fsync`` or
    ``fsyncdir`` that follows the commit.
    """
    commit = max(
        (
            i
            for i, op in enumerate(trace.ops)
            if op.kind in {"rename", "link"} and op.other == target
        ),
        default=None,
    )
    if commit is None:
        return len(trace.ops) + 1
    directory = os.path.dirname(target) or "."
    after = range(commit + 1, len(trace.ops))
    if not any(trace.ops[i].kind == "fsyncdir" and trace.ops[i].name == directory for i in after):
        return len(trace.ops) + 1
    last_sync = max(i for i in after if trace.ops[i].kind in {"fsync", "fsyncdir"})
    return last_sync + 1
