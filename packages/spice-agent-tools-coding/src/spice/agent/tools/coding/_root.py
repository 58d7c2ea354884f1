"""Root-confined file access: every name is opened beneath a held directory descriptor.

This module is the whole worktree-confinement story of ``read`` and ``replace``
(and of the ``shell`` workdir check). It never decides anything from a path
*string* and then opens that string again: the bug class of CVE-2025-53109/53110
in the reference MCP filesystem server (resolve a path, check the resolved text,
then open by name, while a symlink is swapped in between).

How a path is opened
====================

1. **Lexical cleaning** (:func:`clean_path`, in ``_paths``). The model's path must be relative,
   or absolute and lexically beneath the root (as configured or as resolved; it then
   means the relative remainder), non-empty, without NUL or control characters,
   without surrounding whitespace, at most ``MAXIMUM_PATH_BYTES`` (components at
   most ``MAXIMUM_NAME_BYTES``). ``.`` and empty components are dropped and ``..``
   is applied lexically; a path that would leave the root this way is
   ``invalid_arguments``. The result is the ``/``-separated display path (``.`` for
   the root, which ``read`` and ``replace`` refuse). Backslashes are ordinary
   file-name characters on POSIX and are kept as they are.

2. **The root** (:func:`open_root`) is opened once per call as a directory. Its own
   path is trusted configuration, so symlinks in it are followed; a missing root
   is ``root_unavailable``.

3. **Resolution beneath the root descriptor**, by one of two routes that give the
   same answers (the tests run the whole confinement table through both):

   * *Fast path (Linux >= 5.6)*: ``openat2(root_fd, cleaned, how)`` through
     ``ctypes`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``. The kernel
     resolves every component and every symlink atomically with respect to the
     root: an absolute link target or a ``..`` above the root is ``EXDEV``
     (``path_escape``), and renames racing a ``..`` make the call ``EAGAIN``
     (retried ``OPENAT2_ATTEMPTS`` times, then delegated to the portable walk: the
     kernel's check counts every rename on the system, so a busy build elsewhere
     could otherwise make a ``..`` path unreadable). ``RESOLVE_IN_ROOT`` is
     deliberately *not* used: it would silently re-anchor absolute targets inside
     the root, and the contract calls every absolute link target an escape. The
     fast path answers only the clear outcomes (success, ``ENOENT``, ``EXDEV``,
     ``EAGAIN``). Anything it cannot
     tell apart precisely (``ELOOP``: loop, too many links or a final symlink;
     ``ENOTDIR``; ``EACCES``; ...) is re-resolved by the portable walk, which is
     the authority. ``ENOSYS``, ``EPERM`` (container seccomp), ``E2BIG`` and
     ``EINVAL`` at the first probe switch the process to the portable walk for
     good.

   * *Portable walk (macOS, old kernels, and the authority)*: component by
     component from the held root descriptor. Each directory is opened with
     ``O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`` (plus ``O_PATH`` on Linux, so an
     execute-only directory can be crossed, as the kernel itself would) relative
     to the descriptor of its parent, which the walk holds. When the open fails
     with ``ELOOP``/``ENOTDIR``/``EMLINK``, ``readlinkat`` on the same held parent
     tells a symlink from a non-directory. A symlink's target is only ever a
     *string spliced into the remaining components*: an absolute target is
     ``path_escape``; a relative one is resolved by the same walk, from the
     directory holding the link. ``..`` never opens ``..``: the walk keeps the
     list of real directory names it descended through and, on ``..``, pops one
     and walks down again from the root descriptor (``O_NOFOLLOW`` at every step;
     a directory that turned into a symlink meanwhile is ``path_unavailable``).
     A ``..`` with nothing to pop is ``path_escape``. After ``MAXIMUM_SYMLINKS``
     links (the kernel's own ``MAXSYMLINKS``) the walk stops with ``path_escape``
     (a loop or an over-long chain cannot be shown to stay inside).

   * *Non-blocking route (Linux, ``read`` only)*: ``_cached.open_cached_regular`` opens
     a regular file with the fast path's flags plus ``RESOLVE_CACHED`` (the kernel refuses
     any lookup that needs I/O) and ``RESOLVE_NO_XDEV`` (never into another mount), on a
     root whose mount is of a local type (``_mounts``, learnt from procfs, never from the
     file system itself), so ``read`` can do its work on the event loop. It answers with
     a descriptor or declines, never an error: every refusal goes to the routes above,
     in a worker thread.

   The ``openat2`` call and the process-wide decision to use it are ``_openat2``'s.

4. **The final open** never follows a symlink by itself (``O_NOFOLLOW``) and
   never blocks (``O_NONBLOCK``). With ``regular=True`` (``read``) every route opens
   the file through the one routine ``_regular.open_regular`` (so does ``replace``'s
   ``_commit.inspect``): the object is first inspected without opening it for I/O
   (``fstatat(AT_SYMLINK_NOFOLLOW)`` in the held parent, or an ``O_PATH`` descriptor on
   the fast path); FIFOs, sockets, devices and directories are ``not_regular`` and are
   never opened for reading at all. The regular file is then opened and ``fstat`` must
   show the same ``(st_dev, st_ino)``; a swap in between is ``path_unavailable``.

Why it is safe: every object is reached by ``*at`` calls from a descriptor that
was itself reached the same way from the root descriptor, one real directory at
a time, with ``O_NOFOLLOW``. A symlink is never followed by the kernel on the
portable walk; its target text is checked (absolute? above the root?) and walked
by the same rules. Swapping a directory for a symlink at any moment therefore
either makes a step fail (``ELOOP``/``ENOTDIR`` and a fresh check of the new
link) or is invisible (the walk already holds the old directory). The outcome
is always a descriptor of an object that was inside the root when it was
reached. Every descriptor this module opens is closed on every path
(``try``/``finally``), except the one it returns, which the caller owns.

What remains (same-user trust boundary): a directory the walk already holds can
be *moved* out of the root by a concurrent process of the same user; names
below it are then resolved where it now lives (the kernel's ``RESOLVE_BENEATH``
has the same property for downward steps). Hard links to outside files cannot be
told from ordinary files by any path check. Device nodes inside the worktree are
inspected, never opened, by ``read``.

Errors are :class:`PathError` with a contract code and a fixed text; no machine
path and no OS error text ever reaches a message.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from ._openat2 import (
    BENEATH,
    O_PATH,
    OPENAT2_ATTEMPTS,
    RESOLVE_NO_SYMLINKS,
    RETRIED,
    fast_path_available,
    openat2,
    portable_only,
)
from ._openat2 import fast_path_enabled as _fast_path_enabled
from ._paths import (
    LEAVES,
    MAXIMUM_NAME_BYTES,
    MAXIMUM_PATH_BYTES,
    TOO_LONG,
    PathError,
    clean_path,
    invalid,
    split_parent,
)
from ._regular import Refusal, Refused, Regular, open_regular

__all__ = [
    "CHANGE_ATTEMPTS",
    "CREATE_ATTEMPTS",
    "DIRECTORY_MODE",
    "FILE_MODE",
    "MAXIMUM_NAME_BYTES",
    "MAXIMUM_PATH_BYTES",
    "MAXIMUM_SYMLINKS",
    "MAXIMUM_WALK_STEPS",
    "OPENAT2_ATTEMPTS",
    "MadeDirectory",
    "PathError",
    "clean_path",
    "fast_path_available",
    "open_beneath",
    "open_directory",
    "open_root",
    "portable_only",
    "remove_made",
    "split_parent",
]

MAXIMUM_SYMLINKS: Final = 40
"""Symlinks one resolution may follow (Linux ``MAXSYMLINKS``); one more is ``path_escape``."""

MAXIMUM_WALK_STEPS: Final = 65_536
"""Directory opens one portable resolution may make (``..`` re-walks from the root)."""

CHANGE_ATTEMPTS: Final = 4
"""Resolutions one open may make when the object changed under it (a concurrent atomic
replace of the file, a directory swapped mid-walk); then ``path_unavailable``."""

CREATE_ATTEMPTS: Final = 4
"""Tries to create-then-open one missing directory that keeps vanishing (a race)."""

DIRECTORY_MODE: Final = 0o777
"""Mode of directories made by ``create_missing`` (the umask applies)."""

FILE_MODE: Final = 0o666
"""Default mode of files created through ``open_beneath`` with ``O_CREAT`` (umask applies)."""

# Fixed, model-safe problem texts.
_ROOT: Final = "the worktree root is not available"
_MISSING: Final = "the path does not exist"
_UNAVAILABLE: Final = "the path could not be opened"
_CHANGED: Final = "the path changed while it was being opened"
_TOO_COMPLEX: Final = "the path is too complex to resolve"
_ESCAPE: Final = "the path resolves outside the worktree root"
_LINK_LIMIT: Final = "the path's symbolic links loop or are too many to follow"
_LINK_COMPONENT: Final = "a component of the path is a symbolic link"
_CREATE_THROUGH_LINK: Final = "missing directories are never created through a symbolic link"
_NOT_DIRECTORY: Final = "a component of the path is not a directory"
_NOT_A_DIRECTORY: Final = "the path is not a directory"
_NOT_REGULAR: Final = "the path is not a regular file"
_FINAL_LINK: Final = "the path is a symbolic link"
_CREATE_FAILED: Final = "a missing directory could not be created"

# Errnos a no-follow directory open gives for "a symlink, or not a directory".
_LINK_OR_FILE: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EMLINK})

_O_PATH: Final = O_PATH
# POSIX-only flags are read with a default: this module imports on Windows too, where read
# and replace take the Windows root (``_windows._root``) and nothing here runs (10.4).
_DIRECTORY: Final = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
# Intermediate directories: O_PATH (Linux) needs only search permission, like the kernel.
_SEARCH: Final = (_DIRECTORY | _O_PATH) if _O_PATH else _DIRECTORY


def _changed() -> PathError:
    """The path changed while it was being opened: ``path_unavailable``, flagged for a retry."""
    return PathError("path_unavailable", _CHANGED, changed=True)


def open_root(root: str) -> int:
    """Open the configured root directory; ``PathError("root_unavailable")`` when it cannot be."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        raise PathError("root_unavailable", _ROOT) from None


def open_beneath(
    root_fd: int,
    cleaned: str,
    flags: int,
    *,
    follow_final: bool,
    regular: bool = False,
    mode: int = FILE_MODE,
) -> int:
    """Open ``cleaned`` beneath ``root_fd`` with ``flags`` (O_CLOEXEC is always added).

    Symlinks whose resolution stays inside the root are followed for intermediate
    components, and for the final one when ``follow_final``; otherwise a final symlink
    fails (``not_regular``). Escapes and absolute link targets are ``path_escape``;
    a missing component is ``not_found``; other failures ``path_unavailable``.

    The open never blocks (``O_NONBLOCK`` is added; it changes nothing for regular
    files). With ``regular=True`` anything but a regular file is ``not_regular`` and is
    inspected without being opened for I/O. ``mode`` applies with ``O_CREAT``.
    The returned descriptor belongs to the caller.
    """
    _require_clean(cleaned)
    flags |= os.O_CLOEXEC | os.O_NONBLOCK

    def attempt() -> int:
        if _fast_path_enabled(root_fd):
            fd = _fast_open_beneath(root_fd, cleaned, flags, follow_final, regular, mode)
            if fd is not None:
                return fd
        final = _FinalFile(flags, follow_final=follow_final, regular=regular, mode=mode)
        return _walk(root_fd, cleaned, final, follow_links=True, create=False)

    return _retry_changes(attempt)


def _retry_changes(attempt: Callable[[], int]) -> int:
    """Run a whole resolution again when the object changed under it, at most
    ``CHANGE_ATTEMPTS`` times. A file atomically replaced by another writer between the
    inspection and the open is the common case: the next resolution finds the new file.
    Every attempt is a complete resolution with every check; nothing is reused.
    """
    for _ in range(CHANGE_ATTEMPTS - 1):
        try:
            return attempt()
        except PathError as error:
            if not error.changed:
                raise
    return attempt()


@final
@dataclass(frozen=True, slots=True)
class MadeDirectory:
    """A directory ``open_directory(create_missing=True)`` made: its path and identity."""

    path: str
    device: int
    inode: int


def open_directory(
    root_fd: int,
    cleaned: str,
    *,
    follow_symlinks: bool,
    create_missing: bool = False,
    made: list[MadeDirectory] | None = None,
) -> int:
    """Open the directory ``cleaned`` beneath ``root_fd``.

    ``follow_symlinks=False``: any symlink component is ``path_escape`` (shell workdir).
    ``create_missing=True``: missing components are created as real directories in a
    directory already held (``0o777 & ~umask``), never at the target of a symlink.
    A component that is not a directory is ``not_regular`` (or ``path_unavailable``).
    A missing directory that would have to be created after a symlink was followed is
    ``path_escape``. The returned descriptor (``O_RDONLY``, usable for ``fsync`` and
    as ``dir_fd``) belongs to the caller. Each directory it made is appended to ``made``
    (shallowest first), also when it then fails, so the caller can take them back
    with :func:`remove_made`.
    """
    _require_clean(cleaned)

    def attempt() -> int:
        if _fast_path_enabled(root_fd):
            fd = _fast_open_directory(root_fd, cleaned, follow_symlinks)
            if fd is not None:
                return fd
        return _walk(
            root_fd,
            cleaned,
            _FinalDirectory(),
            follow_links=follow_symlinks,
            create=create_missing,
            made=made,
        )

    return _retry_changes(attempt)


def remove_made(root_fd: int, made: list[MadeDirectory]) -> bool:
    """Remove the directories in ``made`` that are still empty, deepest first.

    Each is removed only if its name, reached from the root without following any
    symlink, is still the directory that was made (same ``st_dev``/``st_ino``) and it
    is empty. The first one that cannot be removed stops the removal (its parents are
    not empty either). True when every one is gone; ``made`` keeps those that remain.
    """
    while made:
        directory = made[-1]
        parent, leaf = split_parent(directory.path)
        try:
            parent_fd = (
                root_fd if parent == "." else open_directory(root_fd, parent, follow_symlinks=False)
            )
        except PathError:
            return False
        try:
            seen = os.stat(leaf, dir_fd=parent_fd, follow_symlinks=False)
            if not stat.S_ISDIR(seen.st_mode) or (seen.st_dev, seen.st_ino) != (
                directory.device,
                directory.inode,
            ):
                return False
            os.rmdir(leaf, dir_fd=parent_fd)
        except OSError:
            return False
        finally:
            if parent_fd != root_fd:
                os.close(parent_fd)
        made.pop()
    return True


def _require_clean(cleaned: str) -> None:
    """Refuse a path that is not already in ``clean_path`` form (a caller's bug, not input)."""
    if clean_path(cleaned) != cleaned:
        raise invalid(LEAVES)


# --------------------------------------------------------------------------------------
# The portable walk.


@final
class _Link:
    """A final component turned out to be a symlink to follow; ``target`` is its text."""

    __slots__ = ("target",)

    def __init__(self, target: str) -> None:
        self.target = target


def _mapped(number: int | None) -> PathError:
    """The PathError of an errno met while opening beneath the root."""
    if number == errno.ENOENT:
        return PathError("not_found", _MISSING)
    if number == errno.ENOTDIR:
        return PathError("not_regular", _NOT_DIRECTORY)
    if number == errno.ENAMETOOLONG:
        return invalid(TOO_LONG)
    return PathError("path_unavailable", _UNAVAILABLE)


def _read_link(dir_fd: int, name: str) -> str | None:
    """The target of the symlink ``name`` in ``dir_fd``; ``None`` when it is not a symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return None
        raise _mapped(error.errno) from None


@final
class _FinalFile:
    """The last step of ``open_beneath``: open a file (or anything) with the caller's flags."""

    __slots__ = ("flags", "follow_final", "mode", "regular")

    def __init__(self, flags: int, *, follow_final: bool, regular: bool, mode: int) -> None:
        self.flags = flags | os.O_NOFOLLOW
        self.follow_final = follow_final
        self.regular = regular
        self.mode = mode

    def _link(self, dir_fd: int, name: str) -> _Link:
        target = _read_link(dir_fd, name)
        if target is None:
            raise _changed()
        if not self.follow_final:
            raise PathError("not_regular", _FINAL_LINK)
        return _Link(target)

    def open(self, dir_fd: int, name: str) -> int | _Link:
        if self.regular:
            return self._open_regular(dir_fd, name)
        try:
            return os.open(name, self.flags, self.mode, dir_fd=dir_fd)
        except OSError as error:
            if error.errno not in _LINK_OR_FILE:
                raise _mapped(error.errno) from None
            target = _read_link(dir_fd, name)
            if target is None:
                raise _mapped(error.errno) from None
        if not self.follow_final:
            raise PathError("not_regular", _FINAL_LINK)
        return _Link(target)

    def _open_regular(self, dir_fd: int, name: str) -> int | _Link:
        opened = open_regular(dir_fd, name, self.flags)
        if isinstance(opened, Regular):
            return opened.fd
        if opened.reason is Refusal.LINK:
            return self._link(dir_fd, name)
        raise _refused(opened)


def _refused(refused: Refused) -> PathError:
    """The PathError of a refusal of :func:`open_regular` (``LINK``: a final symlink)."""
    reason = refused.reason
    if reason is Refusal.MISSING:
        return PathError("not_found", _MISSING)
    if reason is Refusal.LINK:
        return PathError("not_regular", _FINAL_LINK)
    if reason is Refusal.NOT_REGULAR:
        return PathError("not_regular", _NOT_REGULAR)
    if reason is Refusal.CHANGED:
        return _changed()
    if reason is Refusal.ESCAPE:
        return PathError("path_escape", _ESCAPE)
    return _mapped(refused.errno)


@final
class _FinalDirectory:
    """The last step of ``open_directory``: a real (``O_RDONLY``) directory descriptor."""

    __slots__ = ()

    def open(self, dir_fd: int, name: str) -> int | _Link:
        try:
            return os.open(name, _DIRECTORY, dir_fd=dir_fd)
        except OSError as error:
            if error.errno not in _LINK_OR_FILE:
                raise _mapped(error.errno) from None
            target = _read_link(dir_fd, name)
            if target is None:
                raise PathError("not_regular", _NOT_A_DIRECTORY) from None
        return _Link(target)


_Final = _FinalFile | _FinalDirectory


@final
class _Walker:
    """The state of one portable resolution: the held directory and how it was reached.

    ``names`` are the real directories (never symlinks) from the root down to ``fd``.
    ``fd`` is ``root_fd`` itself (not owned) while ``names`` is empty.
    """

    __slots__ = ("create", "fd", "follow_links", "links", "made", "names", "root_fd", "steps")

    def __init__(
        self,
        root_fd: int,
        *,
        follow_links: bool,
        create: bool,
        made: list[MadeDirectory] | None = None,
    ) -> None:
        self.made = made
        self.root_fd = root_fd
        self.fd = root_fd
        self.names: list[str] = []
        self.links = 0
        self.steps = 0
        self.follow_links = follow_links
        self.create = create

    def close(self) -> None:
        if self.fd != self.root_fd:
            fd, self.fd = self.fd, self.root_fd
            os.close(fd)

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAXIMUM_WALK_STEPS:
            raise PathError("path_unavailable", _TOO_COMPLEX)

    def _enter(self, fd: int, name: str) -> None:
        self.close()
        self.fd = fd
        self.names.append(name)

    def descend(self, name: str) -> str | None:
        """Hold directory ``name`` of the current one; return a symlink's target instead."""
        for _ in range(CREATE_ATTEMPTS):
            self.step()
            try:
                fd = os.open(name, _SEARCH, dir_fd=self.fd)
            except OSError as error:
                if error.errno == errno.ENOENT and self.create:
                    self.make(name)
                    continue
                if error.errno not in _LINK_OR_FILE:
                    raise _mapped(error.errno) from None
                target = _read_link(self.fd, name)
                if target is None:
                    raise PathError("not_regular", _NOT_DIRECTORY) from None
                return target
            self._enter(fd, name)
            return None
        raise _changed()

    def make(self, name: str) -> None:
        """Create the missing directory ``name`` in the held directory (races tolerated)."""
        if self.links:
            raise PathError("path_escape", _CREATE_THROUGH_LINK)
        try:
            os.mkdir(name, DIRECTORY_MODE, dir_fd=self.fd)
        except FileExistsError:
            return
        except OSError:
            raise PathError("path_unavailable", _CREATE_FAILED) from None
        if self.made is not None:
            # No symlink was followed (checked above), so the real names from the root
            # are the directory's path; its identity tells it from a later namesake.
            with contextlib.suppress(OSError):
                seen = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                path = "/".join([*self.names, name])
                self.made.append(MadeDirectory(path, seen.st_dev, seen.st_ino))

    def ascend(self) -> None:
        """Apply ``..``: drop the last name and walk down again from the root descriptor."""
        if not self.names:
            raise PathError("path_escape", _ESCAPE)
        kept = self.names[:-1]
        self.close()
        self.names = []
        for name in kept:
            self.step()
            try:
                fd = os.open(name, _SEARCH, dir_fd=self.fd)
            except OSError:
                raise _changed() from None
            self._enter(fd, name)

    def splice(self, target: str, pending: deque[str]) -> None:
        """Put a symlink's target in front of the components still to resolve."""
        self.links += 1
        if self.links > MAXIMUM_SYMLINKS:
            raise PathError("path_escape", _LINK_LIMIT)
        if not target:
            raise PathError("not_found", _MISSING)
        if target.startswith("/"):
            raise PathError("path_escape", _ESCAPE)
        # An empty component (``a//b``, a trailing ``/``) acts as ``.``: the name before it
        # must then be a directory, exactly as in the kernel's own resolution.
        pending.extendleft(reversed([part or "." for part in target.split("/")]))


def _walk(
    root_fd: int,
    cleaned: str,
    final: _Final,
    *,
    follow_links: bool,
    create: bool,
    made: list[MadeDirectory] | None = None,
) -> int:
    """Resolve ``cleaned`` component by component beneath ``root_fd`` (see the module doc)."""
    pending = deque(cleaned.split("/"))
    walker = _Walker(root_fd, follow_links=follow_links, create=create, made=made)
    try:
        while pending:
            name = pending.popleft()
            if name == "..":
                walker.ascend()
                name = "."
            if name == "." and pending:
                continue
            if pending:
                target = walker.descend(name)
            else:
                opened = _final_step(walker, final, name)
                if isinstance(opened, int):
                    return opened
                target = opened
            if target is None:
                continue
            if not walker.follow_links:
                raise PathError("path_escape", _LINK_COMPONENT)
            walker.splice(target, pending)
        raise PathError("path_unavailable", _UNAVAILABLE)  # unreachable: "." ends every path
    finally:
        walker.close()


def _final_step(walker: _Walker, final: _Final, name: str) -> int | str:
    """Open the last component; a symlink to follow comes back as its target text."""
    for _ in range(CREATE_ATTEMPTS):
        walker.step()
        try:
            opened = final.open(walker.fd, name)
        except PathError as error:
            if error.code == "not_found" and walker.create and name != ".":
                walker.make(name)
                continue
            raise
        return opened.target if isinstance(opened, _Link) else opened
    raise _changed()


# --------------------------------------------------------------------------------------
# The Linux fast path: openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (the call
# itself and the process-wide probe are ``_openat2``'s).


def _fast_open(root_fd: int, path: str, flags: int, mode: int, resolve: int) -> int | None:
    """``openat2`` beneath the root: a descriptor, ``None`` to delegate, or a PathError."""
    for _ in range(OPENAT2_ATTEMPTS):
        answer = openat2(root_fd, path, flags, mode, resolve)
        if answer >= 0:
            return answer
        number = -answer
        if number in RETRIED:
            continue
        if number == errno.EXDEV:
            raise PathError("path_escape", _ESCAPE)
        if number == errno.ENOENT:
            raise PathError("not_found", _MISSING)
        return None
    # Renames elsewhere on the system kept racing a ``..`` (the kernel's check is global):
    # the portable walk, the authority, answers without depending on them.
    return None


def _fast_open_beneath(
    root_fd: int, cleaned: str, flags: int, follow_final: bool, regular: bool, mode: int
) -> int | None:
    nofollow = 0 if follow_final else os.O_NOFOLLOW
    if not regular:
        return _fast_open(root_fd, cleaned, flags | nofollow, mode, BENEATH)
    opened = open_regular(root_fd, cleaned, flags | nofollow, resolve=BENEATH)
    if isinstance(opened, Regular):
        return opened.fd
    reason = opened.reason
    if reason is Refusal.DECLINED or reason is Refusal.OPEN_FAILED:
        return None  # the portable walk decides
    raise _refused(opened)


def _fast_open_directory(root_fd: int, cleaned: str, follow_symlinks: bool) -> int | None:
    resolve = BENEATH if follow_symlinks else BENEATH | RESOLVE_NO_SYMLINKS
    try:
        return _fast_open(root_fd, cleaned, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, resolve)
    except PathError as error:
        if error.code == "not_found":
            return None  # the walk decides, and creates when asked to
        raise
