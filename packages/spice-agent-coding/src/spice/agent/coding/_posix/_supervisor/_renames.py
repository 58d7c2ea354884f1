"""Directory renames inside a stage: carried out for the command where the overlay refuses.

Standard library only and free of package imports but its siblings ``_seccomp`` and
``_landlock`` (held to the same rule): the supervisor loads it by name from its sealed
memory file, as it loads them.

An overlay mounted in a user namespace (``userxattr``) has no ``redirect_dir``: renaming a
directory that exists in the lower layer fails with ``EXDEV`` (``git mv pkg pkg2`` answers
"Invalid cross-device link"). With a stage, the command's seccomp filter sends ``rename``,
``renameat`` and ``renameat2`` to the supervisor (``SECCOMP_RET_USER_NOTIF``, the listener
made by ``install``), which serves each notification (``serve``):

- whatever is not a directory on an overlay, with both names on that same mount (mount
  id) and the command in the supervisor's own root: ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``,
  the kernel does the call itself with the command's rights (nothing is decided from
  memory the command could change afterwards, and nothing is gained). Any doubt (a path
  through a magic link, one that cannot be read or resolved) is a ``CONTINUE`` too;
- otherwise a helper process, forked and put under the command's own Landlock ruleset
  (the supervisor is outside the command's domain; the helper has the supervisor's uid
  and, on the namespace path, no capability but ``CAP_SETPCAP``: never more than the
  command), first tries the rename itself, through the two parent directories the
  supervisor opened from ``/proc/PID/{cwd,fd,root}``; only when that answers ``EXDEV``
  (and no ``RENAME_EXCHANGE``/``RENAME_WHITEOUT``) it emulates: checks rename's rules
  (``EEXIST`` with ``RENAME_NOREPLACE``, ``ENOTDIR``, ``ENOTEMPTY``), copies the tree
  into a hidden directory beside the destination (modes, symbolic links, hard links within
  the tree, times, empty directories, data with ``copy_file_range``), renames that into
  place (a directory made in the upper layer may be renamed), then removes the source.
  A failure part-way undoes what it did and answers the errno. A tree past
  ``TREE_ENTRIES_MAX`` or ``TREE_BYTES_MAX``, one holding another owner's entries, a
  device or socket, or a directory the command could not empty, is answered ``EXDEV``,
  as the kernel did.

The helper answers the notification itself; the supervisor only forks it (``serve`` does
bounded work: one ``recv``, a path read, a few ``open``\\s), reaps it (``reaped``: a
helper that died without answering gets ``EXDEV``) and kills one past its deadline
(``overdue``). The helper checks ``SECCOMP_IOCTL_NOTIF_ID_VALID`` before it makes the
copy visible: a command killed mid-emulation leaves no new tree behind.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import stat
import sys
import time

if __package__:
    from . import _landlock as landlock
    from . import _seccomp as seccomp
else:  # the supervisor: ``BOOTSTRAP`` put the modules, compiled at start, in sys.modules
    import _landlock as landlock  # type: ignore[import-not-found,no-redef]
    import _seccomp as seccomp  # type: ignore[import-not-found,no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

PATH_MAX: Final = 4096
"""The longest path read from the command's memory, its NUL included (Linux's ``PATH_MAX``):
a longer one is left to the kernel (``ENAMETOOLONG``)."""

TREE_ENTRIES_MAX: Final = 20_000
"""The most entries (the directory itself included) a rename is emulated for."""

TREE_BYTES_MAX: Final = 1 << 30
"""The most bytes of file data a rename is emulated for (1 GiB)."""

NOTIFICATION_SECONDS: Final = 20.0
"""How long one emulation may take; past it the helper undoes and answers ``EXDEV``, and
``GRACE_SECONDS`` later the supervisor kills it (then answers ``EXDEV`` itself)."""

GRACE_SECONDS: Final = 5.0

POLL_SECONDS: Final = 0.05
"""How long the supervisor's loop waits on the listener before it looks at its signals."""

TEMPORARY_PREFIX: Final = ".spice-rename-"
"""The hidden name a copy is made under, beside the destination, until it is whole."""

# -- the kernel's interface (include/uapi/linux/seccomp.h, fcntl.h, openat2.h) ----------

SECCOMP_SET_MODE_FILTER: Final = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER: Final = 1 << 3
SECCOMP_USER_NOTIF_FLAG_CONTINUE: Final = 1
SECCOMP_GET_NOTIF_SIZES: Final = 3
SECCOMP_GET_ACTION_AVAIL: Final = 2


def _ioc(direction: int, number: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord("!") << 8) | number


class SeccompData(ctypes.Structure):
    _fields_ = (
        ("nr", ctypes.c_int32),
        ("arch", ctypes.c_uint32),
        ("instruction_pointer", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
    )


class Notification(ctypes.Structure):
    """``struct seccomp_notif``."""

    _fields_ = (
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("data", SeccompData),
    )


class Response(ctypes.Structure):
    """``struct seccomp_notif_resp``."""

    _fields_ = (
        ("id", ctypes.c_uint64),
        ("val", ctypes.c_int64),
        ("error", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    )


NOTIF_RECV: Final = _ioc(3, 0, ctypes.sizeof(Notification))
NOTIF_SEND: Final = _ioc(3, 1, ctypes.sizeof(Response))
NOTIF_ID_VALID: Final = _ioc(1, 2, 8)

RENAME_NOREPLACE: Final = 1 << 0
RENAME_EXCHANGE: Final = 1 << 1
RENAME_WHITEOUT: Final = 1 << 2
AT_FDCWD: Final = -100
OVERLAYFS_SUPER_MAGIC: Final = 0x794C7630
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_IN_ROOT: Final = 0x10
_SYS_OPENAT2: Final = 437  # the same number on x86_64 and aarch64

RENAME_CALLS: Final = seccomp.STAGE_RENAMES
"""The calls a stage's filter sends to the supervisor (``rename`` on x86_64 alone)."""

_ARGUMENTS: Final = {"rename": (None, 0, None, 1, None), "renameat": (0, 1, 2, 3, None)}
"""Each call's argument indexes: old dirfd, old path, new dirfd, new path, flags."""
_RENAMEAT2: Final = (0, 1, 2, 3, 4)


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _Statfs(ctypes.Structure):
    _fields_ = (("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 120))


_LIBC: list[ctypes.CDLL] = []
"""The C library, loaded at the first call (not at import: Windows imports this module too,
and has no ``CDLL(None)``)."""


def _c() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _check(result: int) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result


def _ioctl(fd: int, request: int, argument: object) -> int:
    return _check(int(_c().ioctl(ctypes.c_int(fd), ctypes.c_ulong(request), argument)))


# -- the filter's side -------------------------------------------------------------------


def numbers(table: seccomp.Architecture) -> tuple[int, ...]:
    """The numbers of ``RENAME_CALLS`` in ``table`` (those it has)."""
    return tuple(table.numbers[name] for name in RENAME_CALLS if name in table.numbers)


def available() -> bool:
    """Whether the kernel offers user notification, with the structures known here."""
    table = seccomp.architecture()
    if table is None:
        return False
    sizes = (ctypes.c_uint16 * 3)()
    action = ctypes.c_uint32(seccomp.SECCOMP_RET_USER_NOTIF)
    number = ctypes.c_long(table.numbers["seccomp"])
    try:
        _check(
            int(
                _c().syscall(
                    number, ctypes.c_ulong(SECCOMP_GET_ACTION_AVAIL), 0, ctypes.byref(action)
                )
            )
        )
        _check(int(_c().syscall(number, ctypes.c_ulong(SECCOMP_GET_NOTIF_SIZES), 0, sizes)))
    except OSError:
        return False
    return sizes[0] >= ctypes.sizeof(Notification) and sizes[1] >= ctypes.sizeof(Response)


def install(program: bytes) -> int:
    """Set ``no_new_privs`` and install ``program`` (built with ``stage``) with a listener.

    Returns the listener (close-on-exec): the caller hands it to the supervisor and
    closes its own copy before ``execve``. Raises ``OSError`` where the kernel refuses.
    """
    table = seccomp.architecture()
    if table is None:
        raise seccomp.Unsupported
    count, rest = divmod(len(program), seccomp.INSTRUCTION.size)
    if rest or not 0 < count <= seccomp.MAXIMUM_INSTRUCTIONS:
        raise ValueError("not a filter program")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = seccomp._Fprog(count, ctypes.cast(buffer, ctypes.c_void_p))
    landlock.prctl(landlock.PR_SET_NO_NEW_PRIVS, 1)
    listener = _check(
        int(
            _c().syscall(
                ctypes.c_long(table.numbers["seccomp"]),
                ctypes.c_ulong(SECCOMP_SET_MODE_FILTER),
                ctypes.c_ulong(SECCOMP_FILTER_FLAG_NEW_LISTENER),
                ctypes.byref(fprog),
            )
        )
    )
    os.set_inheritable(listener, False)  # noqa: FBT003 - os's positional-only flag
    return listener


# -- the supervisor's side ---------------------------------------------------------------

_helpers: dict[int, tuple[int, float]] = {}
"""Each running helper's pid: the notification it answers, and when it must be gone."""


def respond(listener: int, ident: int, error: int = 0, flags: int = 0) -> bool:
    """Answer notification ``ident``: ``-error`` (0: success) or ``flags``; ``False`` when
    it is gone (its caller died or it was answered)."""
    answer = Response(ident, 0, -error if error else 0, flags)
    try:
        _ioctl(listener, NOTIF_SEND, ctypes.byref(answer))
    except OSError:
        return False
    return True


def valid(listener: int, ident: int) -> bool:
    """Whether notification ``ident`` still waits for an answer (its caller is alive)."""
    value = ctypes.c_uint64(ident)
    try:
        _ioctl(listener, NOTIF_ID_VALID, ctypes.byref(value))
    except OSError:
        return False
    return True


def wait(listener: int, seconds: float = POLL_SECONDS) -> bool:
    """Whether a notification is ready within ``seconds``."""
    readable, _, _ = select.select([listener], [], [], seconds)
    return bool(readable)


def serve(listener: int, ruleset: int | None) -> int | None:
    """Serve one notification (call when ``wait`` says one is ready); the helper's pid.

    Bounded: one receive, a path read of at most ``PATH_MAX`` bytes twice, a few opens.
    ``CONTINUE`` unless the call is a directory rename the overlay refuses; then a
    helper (see the module docstring) answers it, and ``None`` is returned otherwise.
    """
    notification = Notification()
    try:
        _ioctl(listener, NOTIF_RECV, ctypes.byref(notification))
    except OSError:
        return None  # the caller died between the wake and the receive
    ident = notification.id
    try:
        plan = _plan(listener, notification)
    except (OSError, ValueError):
        plan = None
    if plan is None:
        respond(listener, ident, flags=SECCOMP_USER_NOTIF_FLAG_CONTINUE)
        return None
    try:
        helper = os.fork()
    except OSError:
        _close(plan[0], plan[2])
        respond(listener, ident, errno.EXDEV)
        return None
    if helper == 0:
        _helper(listener, ident, ruleset, plan)
    _close(plan[0], plan[2])
    _helpers[helper] = (ident, time.monotonic() + NOTIFICATION_SECONDS + GRACE_SECONDS)
    return helper


def reaped(listener: int, pid: int) -> None:
    """A child ended: if it was a helper, make sure its notification got an answer."""
    found = _helpers.pop(pid, None)
    if found is not None:
        respond(listener, found[0], errno.EXDEV)  # refused when the helper answered


def overdue() -> None:
    """Kill every helper past its deadline (``reaped`` then answers for it)."""
    now = time.monotonic()
    for pid, (_, deadline) in list(_helpers.items()):
        if now >= deadline:
            with landlock.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _close(*fds: int) -> None:
    for fd in dict.fromkeys(fds):
        with landlock.suppress(OSError):
            os.close(fd)


def _signed(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _read_path(memory: int, address: int) -> bytes | None:
    """The NUL-terminated path at ``address``, at most ``PATH_MAX`` bytes, page by page."""
    found = b""
    while len(found) < PATH_MAX:
        size = min(4096 - (address + len(found)) % 4096, PATH_MAX - len(found))
        chunk = os.pread(memory, size, address + len(found))
        if not chunk:
            return None
        end = chunk.find(b"\0")
        if end >= 0:
            return found + chunk[:end]
        found += chunk
    return None


def _mount_id(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}", "rb") as file:
        for line in file:
            if line.startswith(b"mnt_id:"):
                return int(line.split()[1])
    raise ValueError("no mount id")


def _openat2(base: int, path: bytes, flags: int, resolve: int) -> int:
    how = _OpenHow(flags, 0, resolve)
    return _check(
        int(
            _c().syscall(
                ctypes.c_long(_SYS_OPENAT2),
                ctypes.c_int(base),
                ctypes.c_char_p(path),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
    )


def _parent(pid: int, dirfd: int, path: bytes) -> tuple[int, bytes] | None:
    """The parent directory of ``path`` as the command resolves it (``O_PATH``), and the
    last name; ``None`` where it is not plain (a magic link on the way, ``.``/``..``)."""
    trimmed = path.rstrip(b"/")
    if not trimmed:
        return None
    head, _, name = trimmed.rpartition(b"/")
    if name in {b"", b".", b".."}:
        return None
    absolute = path.startswith(b"/")
    if absolute:
        base_path = f"/proc/{pid}/root"
    elif dirfd == AT_FDCWD:
        base_path = f"/proc/{pid}/cwd"
    else:
        base_path = f"/proc/{pid}/fd/{dirfd}"
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    base = os.open(base_path, flags)
    try:
        if not head:
            return base, name
        resolve = RESOLVE_NO_MAGICLINKS | (RESOLVE_IN_ROOT if absolute else 0)
        parent = _openat2(base, head.lstrip(b"/") or b".", flags, resolve)
    except BaseException:
        os.close(base)
        raise
    os.close(base)
    return parent, name


def _overlay(fd: int) -> bool:
    found = _Statfs()
    _check(int(_c().fstatfs(ctypes.c_int(fd), ctypes.byref(found))))
    return int(found.f_type) & 0xFFFFFFFF == OVERLAYFS_SUPER_MAGIC


def _plan(listener: int, notification: Notification) -> tuple[int, bytes, int, bytes, int] | None:
    """``(old parent, old name, new parent, new name, flags)`` of a directory rename on one
    overlay mount, or ``None`` (the kernel's business: ``CONTINUE``)."""
    table = seccomp.architecture()
    if table is None:
        return None
    call = {table.numbers[name]: name for name in RENAME_CALLS if name in table.numbers}.get(
        notification.data.nr
    )
    if call is None:
        return None
    indexes = _ARGUMENTS.get(call, _RENAMEAT2)
    args = notification.data.args
    pid = notification.pid
    if os.stat(f"/proc/{pid}/root") != os.stat("/"):
        return None  # another root: its absolute paths are not ours to resolve
    memory = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if not valid(listener, notification.id):
            return None  # the pid is no longer the caller's
        old = _read_path(memory, args[indexes[1]])
        new = _read_path(memory, args[indexes[3]])
    finally:
        os.close(memory)
    if old is None or new is None:
        return None
    flags = int(args[indexes[4]]) & 0xFFFFFFFF if indexes[4] is not None else 0
    old_dirfd = AT_FDCWD if indexes[0] is None else _signed(args[indexes[0]])
    new_dirfd = AT_FDCWD if indexes[2] is None else _signed(args[indexes[2]])
    source = _parent(pid, old_dirfd, old)
    if source is None:
        return None
    target: tuple[int, bytes] | None = None
    try:
        found = os.stat(source[1], dir_fd=source[0], follow_symlinks=False)
        if not stat.S_ISDIR(found.st_mode):
            return None
        directory = os.open(
            source[1], os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=source[0]
        )
        try:
            if not _overlay(directory):
                return None
            mount = _mount_id(directory)
        finally:
            os.close(directory)
        target = _parent(pid, new_dirfd, new)
        if target is None or not (_mount_id(source[0]) == _mount_id(target[0]) == mount):
            return None
        planned = (source[0], source[1], target[0], target[1], flags)
        source = target = None
        return planned
    finally:
        if source is not None:
            os.close(source[0])
        if target is not None:
            os.close(target[0])


# -- the helper ----------------------------------------------------------------------------


def _helper(
    listener: int, ident: int, ruleset: int | None, plan: tuple[int, bytes, int, bytes, int]
) -> None:
    """In the forked helper: under the command's Landlock, do the rename, answer, exit."""
    error = errno.EXDEV
    try:
        landlock.prctl(landlock.PR_SET_PDEATHSIG, signal.SIGKILL)
        if ruleset is not None:
            landlock.restrict_self(ruleset)
        deadline = time.monotonic() + NOTIFICATION_SECONDS
        error = rename(
            *plan, proceed=lambda: valid(listener, ident) and time.monotonic() < deadline
        )
    except BaseException:  # noqa: BLE001 - the helper answers whatever happened
        error = errno.EXDEV
    respond(listener, ident, error)
    os._exit(0)


def _always() -> bool:
    return True


class _Stop(Exception):
    """The caller is gone or the deadline passed: undo, answer ``EXDEV``."""


def _require(check: Callable[[], bool]) -> None:
    if not check():
        raise _Stop


def _renameat2(old_dir: int, old: bytes, new_dir: int, new: bytes, flags: int) -> int:
    result = int(_c().renameat2(old_dir, old, new_dir, new, ctypes.c_uint(flags)))
    return 0 if result == 0 else ctypes.get_errno()


def rename(
    old_dir: int,
    old: bytes,
    new_dir: int,
    new: bytes,
    flags: int = 0,
    proceed: Callable[[], bool] | None = None,
) -> int:
    """``renameat2`` with a directory the overlay refuses emulated; the errno (0: done).

    ``proceed`` (a callable, or ``None``) is asked between entries and before the copy
    is made visible; ``False`` undoes and answers ``EXDEV``.
    """
    tried = _renameat2(old_dir, old, new_dir, new, flags)
    if tried != errno.EXDEV or flags & (RENAME_EXCHANGE | RENAME_WHITEOUT):
        return tried
    check = proceed if proceed is not None else _always
    try:
        existing = os.stat(new, dir_fd=new_dir, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if flags & RENAME_NOREPLACE:
            return errno.EEXIST
        if not stat.S_ISDIR(existing.st_mode):
            return errno.ENOTDIR
        with _opened(new_dir, new) as held:
            if os.listdir(held):
                return errno.ENOTEMPTY
    with _opened(old_dir, old) as source:
        if not _fits(source, os.geteuid()):
            return errno.EXDEV
        temporary = f"{TEMPORARY_PREFIX}{os.getpid()}".encode()
        try:
            _copy_tree(source, new_dir, temporary, check)
            _require(check)
            os.rename(temporary, new, src_dir_fd=new_dir, dst_dir_fd=new_dir)
        except _Stop:
            _remove_quietly(new_dir, temporary)
            return errno.EXDEV
        except OSError as failure:
            _remove_quietly(new_dir, temporary)
            return failure.errno or errno.EIO
    try:
        _remove_tree(old_dir, old)
    except OSError as failure:
        with landlock.suppress(OSError):  # put back what went, then drop the copy
            with _opened(new_dir, new) as copy:
                _restore(copy, old_dir, old)
            _remove_tree(new_dir, new)
        return failure.errno or errno.EIO
    return 0


class _opened:  # noqa: N801 - a context manager read as a function
    """An ``O_RDONLY`` descriptor of directory ``name`` under ``parent`` (no link followed)."""

    __slots__ = ("_fd", "_name", "_parent")

    def __init__(self, parent: int, name: bytes) -> None:
        self._parent = parent
        self._name = name
        self._fd = -1

    def __enter__(self) -> int:
        self._fd = os.open(
            self._name,
            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=self._parent,
        )
        return self._fd

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)


def _fits(directory: int, owner: int) -> bool:
    """Whether the tree is within the bounds, all ``owner``'s, of kinds a copy keeps, and
    each directory of it one the caller may empty."""
    entries = 0
    size = 0
    pending = [os.dup(directory)]
    try:
        while pending:
            here = pending.pop()
            try:
                if not os.access(".", os.W_OK | os.X_OK, dir_fd=here, effective_ids=True):
                    return False
                for entry in os.scandir(here):
                    entries += 1
                    found = entry.stat(follow_symlinks=False)
                    if found.st_uid != owner:
                        return False
                    if stat.S_ISDIR(found.st_mode):
                        pending.append(
                            os.open(
                                entry.name,
                                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=here,
                            )
                        )
                    elif stat.S_ISREG(found.st_mode):
                        size += found.st_size
                    elif not (stat.S_ISLNK(found.st_mode) or stat.S_ISFIFO(found.st_mode)):
                        return False
                    if entries + 1 > TREE_ENTRIES_MAX or size > TREE_BYTES_MAX:
                        return False
            finally:
                os.close(here)
    finally:
        _close(*pending)
    return True


class _Copy:
    """One copy's state: its root (for hard links), the links seen, the caller's check."""

    __slots__ = ("check", "links", "root")

    def __init__(self, root: int, check: Callable[[], bool]) -> None:
        self.root = root
        self.check = check
        self.links: dict[tuple[int, int], bytes] = {}


def _copy_tree(source: int, parent: int, name: bytes, check: Callable[[], bool]) -> None:
    """Copy the directory open as ``source`` to a new ``name`` under ``parent``, whole."""
    os.mkdir(name, 0o700, dir_fd=parent)
    with _opened(parent, name) as root:
        _copy_entries(source, root, b"", _Copy(root, check))
        _finish_directory(source, root)


def _finish_directory(source: int, target: int) -> None:
    made = os.fstat(source)
    os.chmod(target, stat.S_IMODE(made.st_mode))
    os.utime(target, ns=(made.st_atime_ns, made.st_mtime_ns))


def _copy_entries(source: int, target: int, where: bytes, copy: _Copy) -> None:
    """Copy every entry of ``source`` into ``target`` (``where`` beneath the copy's root)."""
    for entry in os.scandir(source):
        _require(copy.check)
        name = os.fsencode(entry.name)
        found = entry.stat(follow_symlinks=False)
        key = (found.st_dev, found.st_ino)
        if stat.S_ISDIR(found.st_mode):
            os.mkdir(name, 0o700, dir_fd=target)
            with _opened(source, name) as inner, _opened(target, name) as made:
                _copy_entries(inner, made, where + name + b"/", copy)
                _finish_directory(inner, made)
            continue
        if found.st_nlink > 1 and key in copy.links:
            os.link(
                copy.links[key],
                name,
                src_dir_fd=copy.root,
                dst_dir_fd=target,
                follow_symlinks=False,
            )
            continue
        if stat.S_ISLNK(found.st_mode):
            os.symlink(os.readlink(name, dir_fd=source), name, dir_fd=target)
        else:
            if stat.S_ISFIFO(found.st_mode):
                os.mkfifo(name, 0o600, dir_fd=target)
            else:
                copy_file(source, target, name, found)
            os.chmod(name, stat.S_IMODE(found.st_mode), dir_fd=target)
        os.utime(
            name,
            ns=(found.st_atime_ns, found.st_mtime_ns),
            dir_fd=target,
            follow_symlinks=False,
        )
        if found.st_nlink > 1:
            copy.links[key] = where + name


def copy_file(source: int, target: int, name: bytes, found: os.stat_result) -> None:
    """Copy regular file ``name`` from directory ``source`` to ``target`` (a new file):
    ``copy_file_range``, else ``sendfile``. The seam where a full disk shows."""
    reading = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source)
    try:
        writing = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=target,
        )
        try:
            left = found.st_size
            ranged = True
            while left > 0:
                try:
                    if ranged:
                        moved = os.copy_file_range(reading, writing, min(left, 1 << 30))
                    else:
                        moved = os.sendfile(writing, reading, None, min(left, 1 << 30))
                except OSError as failure:
                    if ranged and failure.errno in {
                        errno.EXDEV,
                        errno.EINVAL,
                        errno.ENOSYS,
                        errno.EOPNOTSUPP,
                    }:
                        ranged = False
                        continue
                    raise
                if moved == 0:
                    break  # the file shrank meanwhile
                left -= moved
        finally:
            os.close(writing)
    finally:
        os.close(reading)


def _remove_tree(parent: int, name: bytes) -> None:
    """Remove directory ``name`` under ``parent`` and everything beneath it."""
    with _opened(parent, name) as here:
        for entry in os.scandir(here):
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(here, os.fsencode(entry.name))
            else:
                os.unlink(entry.name, dir_fd=here)
    os.rmdir(name, dir_fd=parent)


def _remove_quietly(parent: int, name: bytes) -> None:
    with landlock.suppress(OSError):
        _remove_tree(parent, name)


def _restore(copy: int, parent: int, name: bytes) -> None:
    """Put back under ``parent``/``name`` whatever of the copy the removal took away."""
    with landlock.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    with _opened(parent, name) as here:
        present = set(os.listdir(here))
        for entry in os.scandir(copy):
            entry_name = os.fsencode(entry.name)
            if entry.is_dir(follow_symlinks=False):
                with _opened(copy, entry_name) as inner:
                    _restore(inner, here, entry_name)
            elif entry.name not in present:
                found = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(found.st_mode):
                    os.symlink(os.readlink(entry_name, dir_fd=copy), entry_name, dir_fd=here)
                else:
                    copy_file(copy, here, entry_name, found)
                    os.chmod(entry_name, stat.S_IMODE(found.st_mode), dir_fd=here)
        made = os.fstat(copy)
        os.chmod(here, stat.S_IMODE(made.st_mode))


# -- handing the listener over -----------------------------------------------------------


def handoff() -> tuple[int, int]:
    """A close-on-exec ``AF_UNIX`` pair made before the fork: (the supervisor's end, the
    command's end). The command sends its listener on its end before ``execve``.
    ``_socket``, not ``socket`` (which imports ``enum``: milliseconds of every start)."""
    import _socket  # noqa: PLC0415 - only with a stage

    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    return ours.detach(), theirs.detach()


def send_listener(end: int, listener: int) -> None:
    """In the command's fork: hand ``listener`` over ``end`` (``SCM_RIGHTS``), close ``end``."""
    import _socket  # noqa: PLC0415 - only with a stage

    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, end)
    try:
        rights = listener.to_bytes(4, sys.byteorder, signed=True)  # one C int
        channel.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    finally:
        channel.close()


def take_listener(pair: tuple[int, int]) -> int | None:
    """In the supervisor, after the command started: its listener (``None``: none came)."""
    import _socket  # noqa: PLC0415 - only with a stage

    os.close(pair[1])
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, pair[0])
    try:
        channel.setblocking(False)  # noqa: FBT003 - the C method's positional flag
        try:
            _, ancillary, _, _ = channel.recvmsg(1, _socket.CMSG_SPACE(4))
        except OSError:
            return None
    finally:
        channel.close()
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
            listener = int.from_bytes(data[:4], sys.byteorder, signed=True)
            os.set_inheritable(listener, False)  # noqa: FBT003 - os's positional-only flag
            return listener
    return None
