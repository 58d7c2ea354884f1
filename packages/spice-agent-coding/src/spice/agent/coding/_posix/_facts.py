"""What the server settles once at start for every call's plan (``_plan.StartFacts``).

- the writable places, resolved and their identity (device, inode) taken once; each
  call checks them again without following a symlink (``changed_place``);
- the server's home (``$HOME``, else the password database) and its worktree's private
  cache directory (``<user cache>/spice-coding/<hash of the root>/``), made here, with
  the empty read-only templates that masks are bound from;
- the code the server runs (``server_code``) and the loaded module files that are hard
  links (``linked_module_files``), and which of them has a link a call could write
  (``writable_link``), which ``_containment.code_at_risk`` weighs.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._journal import Journal, JournalError
from spice.agent.tools.coding._journal_records import state_home

from .._netpolicy._cabundle import BUNDLE_DIRECTORY, bundle_sources, write_bundle
from .._netpolicy._hostconfig import read_host_configuration
from .._sandbox import CREDENTIALS, home_directory
from ._caches import (
    CACHE_APPLICATION,
    ROOT_HASH_CHARACTERS,
    ClaimFailed,
    cache_directory,
    claim,
    user_cache_directory,
)
from ._masked import MASKED_FILES, masked_copies
from ._plan import CACHE_DIRECTORIES, Place, StartFacts
from ._stage._stage import NO_NAMESPACES, StagePlace, stage_place

__all__ = [
    "CACHE_APPLICATION",
    "MAX_LINK_SCAN_ENTRIES",
    "ROOT_HASH_CHARACTERS",
    "CacheUnavailable",
    "LinkWatch",
    "WritableLink",
    "cache_directory",
    "changed_place",
    "kept_visible",
    "linked_module_files",
    "place_of",
    "records_directory",
    "server_code",
    "start_facts",
    "user_cache_directory",
    "writable_link",
]

MAX_LINK_SCAN_ENTRIES: Final = 250_000
"""Bound of the directory entries walked beneath the writable places in search of a hard
link to a loaded module file (about 0.3 s on a slow host); past it every linked module
counts as writable (``writable_link``)."""

MAXIMUM_PATH_DIRECTORIES: Final = 32
"""At most this many ``PATH`` directories beneath the home are shown to commands."""

_EMPTY: Final = ".empty"
_MASKED: Final = "masked"
"""Beside the empty templates: the masked copies of shown home files (``_masked``)."""
# POSIX-only flags with a default: the module imports on Windows, which never runs it.
# O_PATH (Linux) needs only search permission, like the kernel's own path walk.
_STEP_FLAGS: Final = (
    getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | (getattr(os, "O_PATH", 0) or os.O_RDONLY)
)


class CacheUnavailable(Exception):
    """The worktree's cache directory could not be made (a start error, exit 2)."""


def _make_templates(environ: Mapping[str, str]) -> tuple[str, str]:
    """The empty read-only directory and file masks are bound from (made once, checked)."""
    base = user_cache_directory(environ, home_directory(environ))
    if base is None:
        raise CacheUnavailable("no home or cache directory is known for the server's user")
    templates = os.path.join(base, CACHE_APPLICATION, _EMPTY)
    empty_directory = os.path.join(templates, "directory")
    empty_file = os.path.join(templates, "file")
    try:
        os.makedirs(empty_directory, mode=0o700, exist_ok=True)
        if os.listdir(empty_directory):
            raise CacheUnavailable(f"{empty_directory} must be empty")
        os.chmod(empty_directory, 0o555)  # noqa: S103 - an empty directory, read-only
        try:
            os.close(os.open(empty_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444))
        except FileExistsError:
            info = os.lstat(empty_file)
            if not stat.S_ISREG(info.st_mode) or info.st_size:
                raise CacheUnavailable(f"{empty_file} must be an empty file") from None
        os.chmod(empty_file, 0o444)
    except OSError:
        raise CacheUnavailable(
            f"the directory {templates} cannot be made (set XDG_CACHE_HOME to a writable directory)"
        ) from None
    return empty_directory, empty_file


RECORDS: Final = ".records"
"""The directory under the application's cache directory that holds, per root, the
records of the protected paths' baselines (``_guard``): a sibling of every worktree's
cache, so neither namespace path nor Landlock lets a command write it."""


def records_directory(root: str, environ: Mapping[str, str], places: Sequence[Place]) -> str | None:
    """Make the root's private records directory; ``None`` without a home, when it cannot
    be made, or when it lies beneath a writable place (a command could write it)."""
    cache = cache_directory(root, environ)  # <user cache>/spice-coding/<hash of the root>
    if cache is None:
        return None
    path = os.path.join(os.path.dirname(cache), RECORDS, os.path.basename(cache))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        real = os.path.realpath(path)
    except OSError:
        return None
    for place in places:
        if real == place.path or real.startswith(place.path.rstrip("/") + "/"):
            return None
    return real


def _make_cache(root: str, environ: Mapping[str, str]) -> str:
    """Hold and make the worktree's cache directory (``_caches.claim``: held for the
    process's life, so no clean removes it meanwhile); ``CacheUnavailable`` when it cannot
    be made."""
    cache = cache_directory(root, environ)
    if cache is None:
        raise CacheUnavailable("no home or cache directory is known for the server's user")
    try:
        claim(cache, root)  # before it is made: a clean meanwhile cannot remove it
    except ClaimFailed:
        raise CacheUnavailable(
            f"the cache directory {cache} cannot be made or held (set XDG_CACHE_HOME to a "
            "writable directory)"
        ) from None
    try:
        for sub in CACHE_DIRECTORIES:
            os.makedirs(os.path.join(cache, sub) if sub else cache, mode=0o700, exist_ok=True)
        if not stat.S_ISDIR(os.lstat(cache).st_mode):
            raise NotADirectoryError(cache)
    except OSError:
        raise CacheUnavailable(
            f"the cache directory {cache} cannot be made (set XDG_CACHE_HOME to a "
            "writable directory)"
        ) from None
    return os.path.realpath(cache)


def place_of(path: str) -> Place:
    """The writable place ``path`` is now: its real path and identity (``OSError`` if gone)."""
    real = os.path.realpath(path)
    info = _identity(real)
    return Place(real, info.st_dev, info.st_ino)


def open_no_follow(path: str) -> int:
    """Open the absolute directory ``path`` from ``/``, one component at a time, no symlink.

    Raises ``OSError`` when a component is a symlink (``ELOOP``), not a directory or
    missing; callers turn that into their own fixed text (no OS text).
    """
    fd = os.open("/", _STEP_FLAGS)
    try:
        for name in path.split("/"):
            if name:
                step = os.open(name, _STEP_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _identity(path: str) -> os.stat_result:
    """``fstat`` of the directory ``path``, opened from ``/`` without following a symlink."""
    fd = open_no_follow(path)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def changed_place(places: Iterable[Place]) -> str | None:
    """The first place that is no longer the directory the server started with, else ``None``.

    Walked from ``/`` without following a symlink: a place (or one of its parents)
    swapped for a link, removed or replaced is named here and the call is refused.
    """
    for place in places:
        try:
            info = _identity(place.path)
        except OSError:
            return place.path
        if (info.st_dev, info.st_ino) != (place.device, place.inode):
            return place.path
    return None


def _module_files() -> list[str]:
    files: list[str] = []
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str) and os.path.isabs(name):
            files.append(name)
    return files


def server_code(bwrap: str | None = None) -> tuple[str, ...]:
    """The real paths of the code this server runs (contract 11.1).

    ``sys.executable``, ``sys.prefix``, ``sys.base_prefix``, ``sys.exec_prefix``, every
    ``sys.path`` entry that holds a loaded module (an editable ``src`` included), and
    ``bwrap``; without repeats, in that order.
    """
    found: list[str] = []

    def add(path: str) -> None:
        if path:
            real = os.path.realpath(path)
            if real not in found and real != os.sep:
                found.append(real)

    for path in (sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix):
        add(path)
    entries = [os.path.realpath(entry) for entry in sys.path if entry and os.path.isabs(entry)]
    files = [os.path.realpath(name) for name in _module_files()]
    for entry in entries:
        if entry != os.sep and any(name.startswith(entry + os.sep) for name in files):
            add(entry)
    if bwrap is not None:
        add(bwrap)
    return tuple(found)


@final
@dataclass(frozen=True, slots=True)
class WritableLink:
    """A loaded module file a call could write through a hard link in a writable place.

    ``link`` is that link's path; ``None`` when the places could not be searched whole
    (more than ``MAX_LINK_SCAN_ENTRIES`` entries, or a directory the server's user owns
    but cannot read): then every linked module counts as writable, the cautious answer.
    """

    module: str
    link: str | None


def linked_module_files() -> tuple[tuple[str, int, int], ...]:
    """``(path, device, inode)`` of each loaded module file with more than one link."""
    linked: list[tuple[str, int, int]] = []
    for name in _module_files():
        try:
            info = os.stat(name)
        except OSError:
            continue
        if info.st_nlink > 1 and stat.S_ISREG(info.st_mode):
            linked.append((name, info.st_dev, info.st_ino))
    return tuple(linked)


def writable_link(
    places: Sequence[str],
    linked: Callable[[], tuple[tuple[str, int, int], ...]] = linked_module_files,
    bound: int = MAX_LINK_SCAN_ENTRIES,
) -> WritableLink | None:
    """The first loaded module file with a hard link beneath one of ``places``, else ``None``.

    Contract 12.2: only a link a call could write counts (one in uv's cache under the
    home, which no call can write, does not). A call can make no new link to the server's
    files (Landlock's ``refer`` right and ``bwrap``'s read-only binds refuse it), so the
    links that exist at start are the ones that matter. The places are walked without
    following a symlink (a write through one is judged at its target), comparing each
    entry's inode number from the directory itself and confirming a match with ``lstat``
    (device and inode); nothing is walked when no module file is linked. Past ``bound``
    entries, or at a directory the server's user owns but cannot read (a call could
    ``chmod`` it and reach what it holds), the answer is cautious: ``link`` is ``None``.
    """
    files = linked()
    if not files:
        return None
    wanted = {(device, inode): os.path.realpath(path) for path, device, inode in files}
    inodes = {inode for _, _, inode in files}
    first = files[0][0]
    walked = 0
    stack = list(_outermost_places(places))
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        except OSError:
            if _owned(directory):
                return WritableLink(first, None)
            continue
        walked += len(entries)
        if walked > bound:
            return WritableLink(first, None)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.inode() in inodes:
                try:
                    info = os.lstat(entry.path)
                except OSError:
                    continue
                module = wanted.get((info.st_dev, info.st_ino))
                # The module's own name beneath a place is the server's code there, which
                # the plan binds read-only (or the start refuses): only another name counts.
                if module is not None and os.path.realpath(entry.path) != module:
                    return WritableLink(module, entry.path)
    return None


@final
class LinkWatch:
    """Before each call: has a module that was linked at start gained a link since?

    A call cannot make a link to the server's files, but the user can, outside (a ``uv
    sync`` in the worktree that shares uv's cache with the server's install links the same
    files into its ``.venv``). The modules with more than one link at start are watched
    (a copy install has none: nothing to do per call); a count that grew makes the
    places be walked again (``writable_link``, bounded), and a count that grew with no
    link in a writable place is taken as the new count (no walk at the next call).
    """

    def __init__(
        self,
        places: Sequence[str],
        linked: Callable[[], tuple[tuple[str, int, int], ...]] = linked_module_files,
    ) -> None:
        self._places = tuple(places)
        self._counts: dict[tuple[str, int, int], int] = {}
        for key in linked():
            try:
                self._counts[key] = os.stat(key[0]).st_nlink
            except OSError:
                continue

    def gained(self) -> WritableLink | None:
        """A watched module with a new link a call could write, else ``None``."""
        grown: dict[tuple[str, int, int], int] = {}
        for key, count in self._counts.items():
            try:
                info = os.stat(key[0])
            except OSError:
                continue
            if (info.st_dev, info.st_ino) == key[1:] and info.st_nlink > count:
                grown[key] = info.st_nlink
        if not grown:
            return None
        found = writable_link(self._places, lambda: tuple(grown))
        if found is None:
            self._counts.update(grown)
        return found


def _outermost_places(places: Sequence[str]) -> list[str]:
    """The real paths of ``places`` that lie beneath no other one, without repeats."""
    real = sorted({os.path.realpath(place) for place in places}, key=len)
    kept: list[str] = []
    for path in real:
        if not any(path == top or path.startswith(top.rstrip(os.sep) + os.sep) for top in kept):
            kept.append(path)
    return kept


def _owned(directory: str) -> bool:
    """Whether the server's user owns ``directory`` (so a call could ``chmod`` it open)."""
    try:
        return os.lstat(directory).st_uid == os.geteuid()
    except OSError:
        return False


def kept_visible() -> tuple[str, ...]:
    """The server's own environment and interpreter where they lie beneath ``/tmp``."""
    from . import _bwrap  # noqa: PLC0415 - only here

    interpreter = os.path.realpath(sys.executable) if sys.executable else ""
    return tuple(
        _bwrap.under_private_tmp([sys.prefix, sys.base_prefix, sys.exec_prefix, interpreter])
    )


def shown_paths(environ: Mapping[str, str], home: str | None) -> tuple[str, ...]:
    """What a command sees read-only even where the home is hidden (contract 12.2): the
    host's CA files (``_netpolicy._hostconfig``) and the ``PATH`` directories beneath the home (at
    most ``MAXIMUM_PATH_DIRECTORIES``; never the home itself, nor one that holds a place
    where a credential is kept, such as ``~/.config`` or ``~/.local``), real paths that
    exist."""
    found = list(read_host_configuration(environ, home).certificates)
    if home is not None:
        directories = [
            os.path.realpath(entry)
            for entry in environ.get("PATH", "").split(os.pathsep)
            if os.path.isabs(entry)
        ]
        holders = [os.path.join(home, name) for name in CREDENTIALS]
        beneath = [
            entry
            for entry in dict.fromkeys(directories)
            if entry.startswith(home + os.sep)
            and os.path.isdir(entry)
            and not any(held.startswith(entry + os.sep) for held in holders)
        ]
        found += beneath[:MAXIMUM_PATH_DIRECTORIES]
    return tuple(dict.fromkeys(found))


def host_variables(environ: Mapping[str, str], home: str | None) -> tuple[tuple[str, str], ...]:
    """The variables a command gets for what the host configures in files it does not see:
    ``npm_config_registry`` from ``~/.npmrc``'s ``registry`` (never its tokens)."""
    registry = read_host_configuration(environ, home).npm_registry
    return () if registry is None else (("npm_config_registry", registry),)


def ca_bundle(
    environ: Mapping[str, str], home: str | None, ca_files: Sequence[str], places: Sequence[Place]
) -> str | None:
    """The commands' CA bundle (contract 13.4): the host's store, the CA files the host
    names and ``ca_files``, written beneath the user's data directory
    (``$XDG_DATA_HOME``, else ``~/.local/share``: ``spice-coding/ca``), which no cache is
    bound over, so the hidden home shows it read-only (``StartFacts.shown``); ``None``
    without ``ca_files``, without a home, when it would lie in a writable place, or when it
    cannot be written."""
    if not ca_files:
        return None
    chosen = environ.get("XDG_DATA_HOME", "")
    base = chosen if os.path.isabs(chosen) else None
    if base is None and home is not None:
        base = os.path.join(home, ".local", "share")
    if base is None:
        return None
    directory = os.path.join(base, CACHE_APPLICATION, BUNDLE_DIRECTORY)
    real = os.path.realpath(directory)
    if any(real == p.path or real.startswith(p.path.rstrip(os.sep) + os.sep) for p in places):
        return None
    host = read_host_configuration(environ, home).certificates
    return write_bundle(directory, bundle_sources(host, ca_files))


def relative_to_home(name: str) -> bool:
    """Whether ``name`` is a normal relative path that stays beneath the home."""
    return (
        bool(name)
        and not os.path.isabs(name)
        and os.path.normpath(name) == name
        and name != "."
        and not name.startswith("..")
    )


def start_facts(
    root: str,
    allow_write: Sequence[str] = (),
    *,
    bwrap: str | None = None,
    deny_read: Sequence[str] = (),
    allow_read: Sequence[str] = (),
    cache: bool = False,
    environ: Mapping[str, str] | None = None,
    protected: ProtectedPaths | None = None,
    unprotect: Sequence[str] = (),
    ca_files: Sequence[str] = (),
) -> StartFacts:
    """The facts every call's plan is built from; ``cache`` makes the worktree's cache.

    With ``bwrap`` (namespaces) the empty templates are made too. ``protected``: the
    policy of protected paths (``None``: the standard set less ``unprotect``); with
    ``cache`` the root's records directory is made too (``records_directory``).

    Raises ``OSError`` when a writable place cannot be opened, ``CacheUnavailable``
    when the cache cannot be made.
    """
    source = os.environ if environ is None else environ
    places = tuple(place_of(path) for path in (root, *allow_write))
    home = home_directory(source)
    made = _make_cache(root, source) if cache else None
    empty_directory, empty_file = _make_templates(source) if bwrap is not None else (None, None)
    if not all(relative_to_home(name) for name in allow_read):
        raise ValueError("allow_read takes normal paths relative to the home")
    policy = ProtectedPaths.default(unprotect=unprotect) if protected is None else protected
    place = (
        stage_place(root, source, [p.path for p in places])
        if bwrap is not None and cache
        else StagePlace(None, NO_NAMESPACES)
    )
    journal, refusal = _journal(root, source) if place.staged else (None, None)
    masked: tuple[tuple[str, str], ...] = ()
    if home is not None and empty_file is not None:
        try:
            masked = masked_copies(
                home, os.path.join(os.path.dirname(empty_file), _MASKED), empty_file
            )
        except OSError:
            existing = [os.path.join(home, name) for name in MASKED_FILES]
            masked = tuple((empty_file, path) for path in existing if os.path.isfile(path))
    bundle = ca_bundle(source, home, ca_files, places)
    return StartFacts(
        places,
        home,
        made,
        empty_directory,
        empty_file,
        server_code(bwrap),
        tuple(os.path.realpath(path) for path in deny_read),
        tuple(allow_read),
        kept_visible(),
        (*shown_paths(source, home), *([] if bundle is None else [bundle])),
        host_variables(source, home),
        policy,
        records_directory(root, source, places) if cache and not policy.empty else None,
        place.directory,
        place.reason,
        journal,
        refusal,
        masked,
        bundle,
    )


def _journal(root: str, environ: Mapping[str, str]) -> tuple[Journal | None, str | None]:
    """The worktree's journal, recovered (what a killed server left is taken back), or
    the one line that says why it cannot be written."""
    try:
        journal = Journal.open(root, state_home=state_home(environ) or "")
        journal.recover()
    except JournalError as error:
        return None, error.message
    return journal, None
