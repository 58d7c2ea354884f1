"""The call's plan: what one contained command may write, sees read-only, cannot see.

Contract 11.1: computed once per call into one immutable value, pure, from the
containment, the root, the spec and the facts the server gathered at start
(``StartFacts``); both ``bwrap``'s argv (``CallPlan.bwrap_argv``, through
``_bwrap.wrapper``) and the supervisor's spec (``CallPlan.spec``, through
``_supervisor.SupervisorSpec``) are rendered from it, and ``tools`` prints its rules
(``CallPlan.rules``). The one input that looks at the file system is ``kind_of`` (what
is at a path: absent, a file, a directory), so that the tests give a table instead.

With namespaces:

- the worktree and each ``--allow-write`` directory (the *writable places*), bound
  read-write; the call's private ``/tmp`` is its ``TMPDIR``;
- the server's private cache directory bound over ``~/.cache`` (and over ``~/.npm``,
  ``~/.cargo/registry``, ``~/.cargo/git``, ``~/go/pkg/mod`` where they exist);
- inside each writable place, ``.git/hooks``, ``.git/config``, ``.git/info`` and
  ``.gitmodules`` read-only, and where absent an empty read-only one bound there (the
  mount point ``bwrap`` makes for it is removed after the call: ``mount_points``); in a
  writable home also the shell's rc files, ``.gitconfig`` and ``.config/git``;
- the server's own code that lies beneath a writable place bound read-only;
- the server's home hidden (contract 12.2): an empty read-only tmpfs over it, on which
  only ``HOME_SHOWN`` (the toolchain and configuration places that hold no secret by
  design), the ``--allow-read`` paths, the host's CA files, the ``PATH`` directories and
  the server's own code beneath it are bound read-only (``StartFacts.shown``), the caches
  and writable places read-write; where the home lies in a writable place it is not
  hidden, and the deny-list ``CREDENTIALS`` is all that hides;
- each credential of ``CREDENTIALS`` and each ``--deny-read`` path that a command would
  still see, covered by an empty read-only directory or file (never one inside the
  worktree).

Without namespaces only Landlock's writable places (the same, plus a private ``TMPDIR``
and the cache directory) and the cache variables hold; the rest is said in ``rules``.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._journal import Journal

from .._netpolicy._cabundle import BUNDLE_VARIABLES
from .._sandbox import CREDENTIALS, HOME_SHOWN
from . import _bwrap
from ._net._proxy import proxy_environment
from ._supervisor import _bridge
from ._supervisor import _main as supervisor

__all__ = [
    "CACHE_VARIABLES",
    "GIT_PROTECTED",
    "HOME_PROTECTED",
    "LINK_MODE",
    "CallPlan",
    "Kind",
    "Mask",
    "Place",
    "StartFacts",
    "kind_of",
    "plan_call",
    "uncontained_spec",
]


@final
class Kind(enum.Enum):
    """What is at a path, as the plan needs to know it."""

    ABSENT = "absent"
    FILE = "file"
    DIRECTORY = "directory"


GIT_PROTECTED: Final = (
    (".git/hooks", Kind.DIRECTORY),
    (".git/config", Kind.FILE),
    (".git/info", Kind.DIRECTORY),
    (".gitmodules", Kind.FILE),
)
"""Read-only (and not creatable) inside every writable place that holds a ``.git``
directory: what git runs or obeys later, outside the sandbox."""

MAXIMUM_PROTECTED_BINDS: Final = 256
"""Existing protected paths (``_guard``) bound read-only on one call's namespace path;
the join puts back any beyond them."""

HOME_PROTECTED: Final = (
    (".bashrc", Kind.FILE),
    (".bash_profile", Kind.FILE),
    (".zshrc", Kind.FILE),
    (".zprofile", Kind.FILE),
    (".profile", Kind.FILE),
    (".gitconfig", Kind.FILE),
    (".config/git", Kind.DIRECTORY),
)
"""Read-only (and not creatable) where the home directory lies in a writable place."""

CACHE_BINDS: Final = (
    (".cache", ""),
    (".npm", "npm"),
    (".cargo/registry", "cargo-registry"),
    (".cargo/git", "cargo-git"),
    ("go/pkg/mod", "go-mod"),
)
"""``(path under the home, directory under the cache)``: bound over the home's path
where it exists (namespaces), so the tools that ignore the variables write there too."""

CACHE_VARIABLES: Final = (
    ("XDG_CACHE_HOME", ""),
    ("UV_CACHE_DIR", "uv"),
    ("PIP_CACHE_DIR", "pip"),
    ("npm_config_cache", "npm"),
    ("GOMODCACHE", "go-mod"),
)
"""``(variable, directory under the cache)``: set for every contained command."""

LINK_MODE: Final = ("UV_LINK_MODE", "copy")
"""Set with namespaces where the command names no mode of its own: the private cache is
a mount of its own there, and a hard link or a reflink between two mounts fails
(``EXDEV``), so uv would try both for each file, then copy and print a warning a model
cannot act on. Copying is what it does anyway (measured: as slow as ``--sandbox off``
with ``UV_LINK_MODE=copy``; ``docs/decisions.md``, "speed")."""

CACHE_DIRECTORIES: Final = tuple(sorted({name for _, name in (*CACHE_BINDS, *CACHE_VARIABLES)}))
"""The directories the server makes under a worktree's cache at start."""

TEMPORARY_VARIABLES: Final = ("TMPDIR", "TMP", "TEMP")


@final
@dataclass(frozen=True, slots=True)
class Place:
    """A writable place as it was when the server started: its real path and identity."""

    path: str
    device: int
    inode: int


@final
@dataclass(frozen=True, slots=True)
class Mask:
    """An empty read-only directory or file bound over ``path`` (namespaces).

    ``hidden``: a credential or ``--deny-read`` path (it reads as empty); otherwise a
    protected path inside a writable place. ``absent``: nothing is there yet, so
    ``bwrap`` makes the mount point, which the launcher removes after the call.
    """

    path: str
    kind: Kind
    hidden: bool
    absent: bool = False


@final
@dataclass(frozen=True, slots=True)
class StartFacts:
    """What the server settled when it started, for every call's plan.

    ``places``: the worktree root first, then each ``--allow-write`` directory (real
    paths, identities taken at start). ``home``: the server's home (``$HOME``, else the
    password database), ``None`` when it has none. ``cache``: the worktree's private
    cache directory (made at start), ``None`` when not contained. ``empty_directory``
    and ``empty_file``: the server's empty read-only templates bound over masked paths.
    ``trusted``: the real paths of the code the server runs (its interpreter, prefixes,
    the ``sys.path`` entries it loaded modules from, ``bwrap``). ``deny_read``: more
    paths to hide; ``allow_read``: the defaults of ``CREDENTIALS`` taken back.
    ``visible``: the server's own environment where it lies beneath ``/tmp``.
    ``shown``: more real paths a command sees read-only even where the home is hidden
    (the host's CA files, the ``PATH`` directories beneath the home).
    ``protected``: the paths no agent may change (contract 12.1; the same value the
    ``replace`` tool obeys), by default the standard set. ``records``: the server's
    private directory (outside every writable place) where a call's baseline of
    protected paths is recorded (``_guard``), ``None``: no record is kept. ``stages``
    and ``unstaged``: where each call's stage is made, or why none is.
    """

    places: tuple[Place, ...]
    home: str | None = None
    cache: str | None = None
    empty_directory: str | None = None
    empty_file: str | None = None
    trusted: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    visible: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    """Set for every contained command where its environment has none: what the host
    configures in files a command does not see (``.npmrc``'s registry)."""
    protected: ProtectedPaths = ProtectedPaths.default()  # noqa: RUF009 - a frozen value
    records: str | None = None
    stages: str | None = None
    """Where the root's stages are made (``_stage.stage_place``): every call on the
    namespace path is staged (contract 13.1); ``None``: no call is."""
    unstaged: str | None = None
    """Why no call is staged, when ``stages`` is ``None`` (said in ``tools`` and answers)."""
    journal: Journal | None = None
    """The worktree's journal, every staged commit's (contract 13.2)."""
    journal_refusal: str | None = None
    """Why the journal cannot be written: every staged call is refused with it, before its
    command runs (one line naming the place)."""
    masked: tuple[tuple[str, str], ...] = ()
    """``(copy, original)``: the shown home files whose credentials are masked (``_masked``),
    each copy bound read-only over its original (namespaces)."""
    ca_bundle: str | None = None
    """The CA bundle (the host's store and the settings file's ``ca_files``, contract 13.4)
    every CA file variable names, whatever the server's environment said; ``None``: the
    host's variables as they are."""

    @property
    def root(self) -> str:
        """The worktree root (the first place)."""
        return self.places[0].path


@final
@dataclass(frozen=True, slots=True)
class CallPlan:
    """One call's sandbox, decided once (see the module docstring).

    ``writable``: the places bound (or, without namespaces, allowed by Landlock)
    read-write, real paths; ``caches``: ``(source, destination)`` binds of the cache
    over the home's cache paths; ``pinned``: directories that hold protected paths,
    bound read-write on themselves (a mount point cannot be renamed or removed, so
    ``mv .git .git2 && mkdir .git`` cannot swap the protected ones away);
    ``read_only``: existing paths inside writable places
    bound read-only on themselves (protected files, the server's code); ``masks``: empty
    read-only directories or files bound over paths; ``temporary``: the ``TMPDIR``;
    ``environment``: the command's whole environment.
    """

    namespaces: bool
    allow_network: bool
    writable: tuple[str, ...]
    temporary: str
    environment: tuple[str, ...]
    caches: tuple[tuple[str, str], ...] = ()
    pinned: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    masks: tuple[Mask, ...] = ()
    visible: tuple[str, ...] = ()
    empty_directory: str | None = None
    empty_file: str | None = None
    proxy: str | None = None
    """The call's proxy socket on the host (``_posix._net._proxy``), bound read-only at
    ``_bridge.SOCKET`` (namespaces without ``--allow-network`` only)."""
    home: str | None = None
    """The hidden home: an empty read-only tmpfs over it (namespaces only)."""
    shown: tuple[str, ...] = ()
    """Paths bound read-only on themselves before the writable places: what a command
    sees of the hidden home, and the host's CA files."""
    masked: tuple[tuple[str, str], ...] = ()
    """``(copy, original)`` bound read-only after ``shown``: a shown file's credentials
    masked (``_masked``)."""

    @property
    def mount_points(self) -> tuple[Mask, ...]:
        """The masks whose mount point ``bwrap`` makes (absent before the call)."""
        return tuple(mask for mask in self.masks if mask.absent)

    @property
    def hidden(self) -> tuple[str, ...]:
        """The paths a command sees as empty (credentials and ``--deny-read``)."""
        return tuple(mask.path for mask in self.masks if mask.hidden)

    @property
    def protected(self) -> tuple[str, ...]:
        """The paths inside writable places that a command cannot change or create."""
        return (*self.read_only, *(mask.path for mask in self.masks if not mask.hidden))

    def landlock_writable(self) -> tuple[str, ...]:
        """The supervisor's Landlock write rules: the writable places, caches, TMPDIR."""
        return (*self.writable, *(destination for _, destination in self.caches), self.temporary)

    def bwrap_argv(
        self, bwrap: str, lifeline: int | None, info: int | None, sized: bool = True
    ) -> list[str]:
        """``bwrap``'s argv for this call (namespaces only); ``sized``: bwrap takes
        ``--size`` (0.7 and later)."""
        if not self.namespaces:
            raise ValueError("a plan without namespaces has no bwrap argv")
        binds: list[tuple[str, str, bool]] = [(path, path, False) for path in self.shown]
        binds += [(copy, original, False) for copy, original in self.masked]
        binds += [(path, path, True) for path in self.writable]
        binds += [(source, destination, True) for source, destination in self.caches]
        binds += [(path, path, True) for path in self.pinned]
        binds += [(path, path, False) for path in self.read_only]
        for mask in self.masks:
            template = self.empty_directory if mask.kind is Kind.DIRECTORY else self.empty_file
            if template is None:
                raise ValueError("a mask needs the server's empty template")
            binds.append((template, mask.path, False))
        if self.proxy is not None:
            binds.append((self.proxy, _bridge.SOCKET, False))
        return _bwrap.wrapper(
            bwrap,
            (),
            self.allow_network,
            self.visible,
            lifeline,
            info,
            sized=sized,
            binds=binds,
            hidden_home=self.home,
        )

    def spec(
        self,
        *,
        server: int,
        abi: int,
        layers: int,
        executable: str,
        arguments: Sequence[str],
        workdir: bytes = b"",
        lifeline: int | None = None,
        temporary: str | None = None,
        cgroups: Sequence[int] = (),
        processes: int = 0,
    ) -> supervisor.SupervisorSpec:
        """The supervisor's spec for this call: this plan's writes, network and environment
        with the call's own parts (``_supervisor.SupervisorSpec`` says what each is).

        ``temporary`` is the host directory the supervisor removes (fallback only);
        ``cgroups`` the call's ``cgroup.procs`` descriptors the command joins, and
        ``processes`` its ``RLIMIT_NPROC`` where there is no cgroup (0: none).
        """
        return supervisor.SupervisorSpec(
            server=server,
            abi=abi,
            writable=[os.fsencode(path) for path in self.landlock_writable()],
            allow_network=self.allow_network,
            executable=os.fsencode(executable),
            arguments=[os.fsencode(argument) for argument in arguments],
            environment=[os.fsencode(entry) for entry in self.environment],
            temporary=b"" if temporary is None else os.fsencode(temporary),
            layers=layers,
            workdir=workdir,
            lifeline=lifeline,
            cgroups=cgroups,
            processes=processes,
        )

    def rules(self) -> dict[str, object]:
        """The plan's rules for ``tools`` (paths are the server's own configuration)."""
        variables = {
            entry.partition("=")[0]: entry.partition("=")[2]
            for entry in self.environment
            if entry.partition("=")[0] in {LINK_MODE[0], *(name for name, _ in CACHE_VARIABLES)}
        }
        if self.namespaces:
            return {
                "writable": [*self.writable, f"{self.temporary} (private tmpfs)"],
                "caches": [f"{source} over {destination}" for source, destination in self.caches]
                or [variables.get("XDG_CACHE_HOME", "")],
                "cache_variables": variables,
                "read_only_inside_writable": sorted(self.protected),
                "pinned_in_place": list(self.pinned),
                "hidden": sorted(self.hidden),
                "home": (
                    {"hidden": self.home, "shown_read_only": list(self.shown)}
                    if self.home is not None
                    else "not hidden (it lies in a writable place, or is unknown)"
                ),
                "network": "host" if self.allow_network else "denied",
            }
        return {
            "writable": [*self.writable, self.temporary],
            "cache_variables": variables,
            "read_only_inside_writable": [],
            "hidden": [],
            "not_held_without_namespaces": [
                "reads are not confined (credentials are readable)",
                (
                    "the protected paths are writable during the call; each change is put "
                    "back at its join (see protected)"
                ),
                "a writable home's shell files and git config (.bashrc, .gitconfig, ...)",
            ],
            "network": "host" if self.allow_network else "denied",
        }


def kind_of(path: str) -> Kind:
    """What is at ``path`` without following a final symlink (a symlink counts as a file)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return Kind.ABSENT
    import stat  # noqa: PLC0415 - small, only where a plan is made

    return Kind.DIRECTORY if stat.S_ISDIR(mode) else Kind.FILE


def _beneath(path: str, root: str) -> bool:
    """Whether the (already real, normalised) ``path`` is ``root`` or lies beneath it."""
    if root == os.sep:
        return True
    return path == root or path.startswith(root + os.sep)


def _with_variables(
    entries: Sequence[str], values: Sequence[tuple[str, str]], only_if_set: frozenset[str]
) -> tuple[str, ...]:
    """``entries`` with each ``(name, value)`` set (replacing any), some only if present."""
    present = {entry.partition("=")[0] for entry in entries}
    names = {name for name, _ in values}
    kept = [entry for entry in entries if entry.partition("=")[0] not in names]
    kept += [
        f"{name}={value}" for name, value in values if name not in only_if_set or name in present
    ]
    return tuple(sorted(kept, key=lambda entry: entry.partition("=")[0]))


def uncontained_spec(
    executable: str,
    arguments: Sequence[str],
    environment: Sequence[str],
    *,
    allow_network: bool,
    cgroups: Sequence[int],
    processes: int,
) -> supervisor.SupervisorSpec:
    """The supervisor's spec of an uncontained call (no Landlock, no plan): the command,
    its bounds, and this process as the server it watches."""
    return supervisor.SupervisorSpec(
        server=os.getpid(),
        allow_network=allow_network,
        executable=os.fsencode(executable),
        arguments=[os.fsencode(argument) for argument in arguments],
        environment=[os.fsencode(entry) for entry in environment],
        cgroups=cgroups,
        processes=processes,
    )


def plan_call(
    facts: StartFacts,
    *,
    namespaces: bool,
    allow_network: bool,
    environment: Sequence[str],
    temporary: str,
    kind: Callable[[str], Kind] = kind_of,
    visible: Sequence[str] | None = None,
    proxy: str | None = None,
    protected: Sequence[str] = (),
    staged: bool = False,
) -> CallPlan:
    """The plan of one contained call (pure but for ``kind``; see the module docstring).

    ``temporary`` is the call's ``TMPDIR``: the private ``/tmp`` with namespaces, a
    fresh host directory without. ``environment`` is the spec's (allow-listed) one.
    ``visible`` replaces the start's kept-visible places (the launcher's, which a test
    run under coverage extends), ``None`` keeps ``facts.visible``. ``proxy``: the call's
    proxy socket (namespaces only): bound in, and the proxy variables set whatever the
    allow-list let through (``_proxy.proxy_environment``). ``protected``: the
    protected paths that exist at the call's start (``_guard``), bound read-only on
    themselves (namespaces; at most ``MAXIMUM_PROTECTED_BINDS``, the join puts back the
    rest). ``staged``: the worktree is seen through the call's stage, whose commit judges
    its protected paths: nothing beneath the root is bound or masked for them.
    """
    writable = tuple(place.path for place in facts.places)
    if facts.cache is not None and not namespaces:
        writable = (*writable, facts.cache)
    cache_root, caches = _caches(facts, namespaces, kind)
    values = [(name, temporary) for name in TEMPORARY_VARIABLES]
    if cache_root is not None:
        values += [
            (name, os.path.join(cache_root, sub) if sub else cache_root)
            for name, sub in CACHE_VARIABLES
        ]
    present = {entry.partition("=")[0] for entry in environment}
    values += [(name, value) for name, value in facts.variables if name not in present]
    if facts.ca_bundle is not None:
        values += [(name, facts.ca_bundle) for name in BUNDLE_VARIABLES]
    env = _with_variables(environment, values, frozenset({"TMP", "TEMP"}))
    if proxy is not None and namespaces:
        pairs = [entry.partition("=") for entry in proxy_environment()]
        env = _with_variables(env, [(name, value) for name, _, value in pairs], frozenset())
    if not namespaces:
        return CallPlan(
            namespaces=False,
            allow_network=allow_network,
            writable=writable,
            temporary=temporary,
            environment=env,
        )
    if cache_root is not None and not caches and facts.cache is not None:
        writable = (*writable, facts.cache)  # no ~/.cache to bind over: bound where it is
    if _own_mount(facts.cache, facts.places) and LINK_MODE[0] not in present:
        env = _with_variables(env, [LINK_MODE], frozenset())
    masks: list[Mask] = []
    read_only: list[str] = []
    inside = _inside_writable(writable)
    pinned: list[str] = []
    for place in writable:
        if staged and place == facts.root:
            continue  # the stage's commit judges the worktree's changes (contract 13.1)
        dot_git = os.path.join(place, ".git")
        found = kind(dot_git)
        if found is Kind.FILE:  # a linked worktree's pointer: not redirected elsewhere
            read_only.append(dot_git)
        if found is not Kind.DIRECTORY:
            continue
        pinned.append(dot_git)
        for relative, wanted in GIT_PROTECTED:
            _protect(os.path.join(place, relative), wanted, kind, masks, read_only)
    if facts.home is not None:
        for relative, wanted in HOME_PROTECTED:
            path = os.path.join(facts.home, relative)
            parent = os.path.dirname(path)
            if inside(path) and kind(parent) is Kind.DIRECTORY:
                _protect(path, wanted, kind, masks, read_only)
                for ancestor in _ancestors(path, writable):
                    if ancestor not in pinned:
                        pinned.append(ancestor)
    for path in facts.trusted:
        if inside(path) and path not in read_only and kind(path) is not Kind.ABSENT:
            read_only.append(path)
            # Each directory between the writable place and the code is a mount point too,
            # so no command can rename it and put a changed copy in its place (R5-3): the
            # next start would import that.
            pinned += [above for above in _ancestors(path, writable) if above not in pinned]
    bound = set(read_only)
    for path in protected[:MAXIMUM_PROTECTED_BINDS]:
        if inside(path) and path not in bound:
            read_only.append(path)
            bound.add(path)
    kept = tuple(_outermost(read_only))
    # A mount point cannot be made inside a read-only place (nor is one needed there).
    masks = [m for m in masks if not (m.absent and any(_beneath(m.path, p) for p in kept))]
    pinned = [p for p in pinned if not any(_beneath(p, other) for other in kept)]
    home, shown = _home(facts, writable, kind)
    masks += _hidden(facts, writable, kind, {mask.path for mask in masks}, home, shown)
    masked = tuple(
        (copy, original)
        for copy, original in facts.masked
        if any(_beneath(original, path) for path in shown)
    )
    return CallPlan(
        namespaces=True,
        allow_network=allow_network,
        writable=writable,
        temporary=temporary,
        environment=env,
        caches=caches,
        pinned=tuple(pinned),
        read_only=kept,
        masks=tuple(masks),
        visible=facts.visible if visible is None else tuple(visible),
        empty_directory=facts.empty_directory,
        empty_file=facts.empty_file,
        proxy=proxy,
        home=home,
        shown=shown,
        masked=masked,
    )


def _home(
    facts: StartFacts, writable: Sequence[str], kind: Callable[[str], Kind]
) -> tuple[str | None, tuple[str, ...]]:
    """The home to hide (``None`` where it lies in a writable place, or is unknown) and
    what is shown read-only: ``HOME_SHOWN`` and ``--allow-read`` beneath the home, the
    server's code there, and ``facts.shown``; never a ``--deny-read`` path or one a
    writable place already shows, and only what exists."""
    home = facts.home
    if home is None or any(_beneath(home, place) for place in writable):
        home = None
    candidates: list[str] = []
    if home is not None:
        candidates += [os.path.join(home, name) for name in (*HOME_SHOWN, *facts.allow_read)]
        candidates += [path for path in facts.trusted if _beneath(path, home) and path != home]
    # The host's own files are visible anyway but beneath the hidden home and the private
    # /tmp and /run (a CA file there is bound on them).
    covered = tuple(p for p in (home, _bwrap.PRIVATE_TMP, _bwrap.HIDDEN_RUN) if p is not None)
    candidates += [path for path in facts.shown if any(_beneath(path, p) for p in covered)]
    chosen = [
        path
        for path in candidates
        if path != home
        and not any(_beneath(path, place) for place in writable)
        and not any(_beneath(path, denied) for denied in facts.deny_read)
        and kind(path) is not Kind.ABSENT
    ]
    return home, tuple(_outermost(chosen))


def _own_mount(cache: str | None, places: Sequence[Place]) -> bool:
    """Whether the private cache is bound as a mount of its own (not inside a place's)."""
    return cache is not None and not any(_beneath(cache, place.path) for place in places)


def _ancestors(path: str, writable: Sequence[str]) -> list[str]:
    """The directories between the writable place holding ``path`` and ``path``, top down."""
    place = max((p for p in writable if _beneath(path, p) and p != path), key=len, default=None)
    if place is None:
        return []
    found: list[str] = []
    parent = os.path.dirname(path)
    while parent != place and _beneath(parent, place):
        found.append(parent)
        parent = os.path.dirname(parent)
    return found[::-1]


def _inside_writable(writable: Sequence[str]) -> Callable[[str], bool]:
    def inside(path: str) -> bool:
        return any(_beneath(path, place) for place in writable)

    return inside


def _protect(
    path: str, wanted: Kind, kind: Callable[[str], Kind], masks: list[Mask], read_only: list[str]
) -> None:
    """``path`` read-only where it exists, an empty read-only one where it does not."""
    found = kind(path)
    if found is Kind.ABSENT:
        masks.append(Mask(path, wanted, hidden=False, absent=True))
    elif path not in read_only:
        read_only.append(path)


def _caches(
    facts: StartFacts, namespaces: bool, kind: Callable[[str], Kind]
) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """Where the cache variables point, and the cache binds over the home's paths."""
    if facts.cache is None:
        return None, ()
    if not namespaces or facts.home is None:
        return facts.cache, ()
    home_cache = os.path.join(facts.home, ".cache")
    if kind(home_cache) is not Kind.DIRECTORY:
        return facts.cache, ()
    binds: list[tuple[str, str]] = []
    for relative, sub in CACHE_BINDS:
        destination = os.path.join(facts.home, relative)
        if kind(destination) is Kind.DIRECTORY:
            binds.append((os.path.join(facts.cache, sub) if sub else facts.cache, destination))
    return home_cache, tuple(binds)


def _hidden(
    facts: StartFacts,
    writable: Sequence[str],
    kind: Callable[[str], Kind],
    taken: set[str],
    home: str | None = None,
    shown: Sequence[str] = (),
) -> list[Mask]:
    """The credentials and ``--deny-read`` paths that exist, never one in the worktree
    nor one holding a writable place (it would cover that place); beneath a hidden
    ``home`` only those a shown or writable place would show."""
    seen = (*shown, *writable)
    candidates: list[str] = []
    if facts.home is not None:
        taken_back = set(facts.allow_read)
        candidates += [
            os.path.join(facts.home, relative)
            for relative in CREDENTIALS
            if relative not in taken_back
        ]
    candidates += facts.deny_read
    masks: list[Mask] = []
    for path in candidates:
        if path in taken or _beneath(path, facts.root):
            continue
        if any(_beneath(place, path) for place in writable):
            continue
        if home is not None and _beneath(path, home) and not any(_beneath(path, p) for p in seen):
            continue  # the hidden home covers it already
        found = kind(path)
        if found is not Kind.ABSENT:
            masks.append(Mask(path, found, hidden=True))
            taken.add(path)
    return masks


def _outermost(paths: Sequence[str]) -> list[str]:
    """``paths`` without repeats and without one beneath another of them (in order)."""
    kept: list[str] = []
    for path in paths:
        if path in kept or any(_beneath(path, other) for other in paths if other != path):
            continue
        kept.append(path)
    return kept
