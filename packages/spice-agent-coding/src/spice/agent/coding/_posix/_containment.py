"""The POSIX shell's containment: from the settings and the kernel to a ``Containment``.

``--sandbox {auto,workspace,off}`` (``SPICE_AGENT_SANDBOX``, parsed by ``_sandbox``) and
``--allow-network`` become one ``Containment`` value here; the launcher applies it
(``_landlock`` has the Landlock ruleset and the supervisor). The kernel's answer comes
from a probe that can be replaced (``resolve_containment(..., probe=...)``), which is how
the tests simulate a kernel without Landlock.

- ``workspace``: Landlock must exist (ABI >= 1), else ``ContainmentUnavailable``
  (the CLI refuses to start: one line, exit 2).
- ``auto``: ``workspace`` where Landlock exists, else ``off`` with a warning.
- ``off``: no Landlock; the process-lifetime guarantees still hold (the supervisor).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from .._netpolicy._domains import DomainPolicy
from .._netpolicy._upstream import upstream_of
from .._sandbox import (
    AUTO_WITHOUT_LANDLOCK,
    DEFAULT_MODE,
    DISABLED,
    MODES,
    ROOT_IS_SLASH,
    WORKSPACE,
    ContainmentUnavailable,
)
from . import _bwrap, _facts
from ._bwrap import Namespaces
from ._supervisor import _bridge as bridge
from ._supervisor import _landlock as landlock
from ._supervisor import _seccomp as seccomp

MAXIMUM_SENTENCE_BYTES: Final = 768
"""Bound of the sentence the shell's description gets about what is confined (the
product's ``MAXIMUM_CONTAINMENT_BYTES``: a longer one would be dropped there)."""

INTERPRETER_BENEATH_ROOT: Final = (
    "the server's Python lies beneath the worktree root: a command could change the "
    "sandbox's code, so --sandbox workspace cannot be enforced"
)
AUTO_UNSAFE_ROOT: Final = "warning: {reason}; shell commands run uncontained (--sandbox off)"
CODE_IN_WRITABLE_PLACE: Final = (
    "the server's own code ({path}) lies in a writable place, and without namespaces it "
    "cannot be made read-only: a command could change what the next server start runs; "
    "install the server outside the worktree, for example with `uv tool install`"
)
LINKED_CODE: Final = (
    "a module the server runs ({path}) has a hard link in a writable place ({link}): a "
    "command could change it through that link; install the server with UV_LINK_MODE=copy, "
    "for example `UV_LINK_MODE=copy uv tool install`"
)
UNSEARCHED_LINKED_CODE: Final = (
    "a module the server runs ({path}) is a hard link, and the writable places could not "
    "be searched for its other names (more than {bound} entries, or a directory of yours "
    "that cannot be read): install the server with UV_LINK_MODE=copy, for example "
    "`UV_LINK_MODE=copy uv tool install`"
)

NO_SECCOMP: Final = "system calls (no seccomp)"
SIGNAL_SCOPE_ABI: Final = 6
"""The Landlock ABI that scopes signals and abstract UNIX sockets (Linux 6.12)."""
UNSCOPED_PROCESSES: Final = "signals and abstract UNIX sockets of your user's other processes"
OTHER_TERMINALS: Final = "other terminals of your user (`/dev/pts`)"
UNPROTECTED_GIT: Final = "changes to .git/config, hooks and build files that run later outside"
"""What stays open where nothing is protected (an embedding that gives no protected paths)."""
PROTECTED_SENTENCE: Final = (
    "Git's config and hooks, .gitmodules and agent and editor settings (.mcp.json, "
    ".claude/, .vscode/ ...) are protected: a change is refused or undone after the call."
)
"""What the shell's description says of the protected paths (contract 12.1)."""
STAGED_SENTENCE: Final = (
    "Worktree writes are staged: they land when the call ends (see changes), the user's "
    "edits made meanwhile win (conflicts), and changes to git config and hooks, "
    ".gitmodules and agent or editor settings are refused (protected_refused)."
)
"""What the shell's description says of a staged worktree (contract 13.1)."""
BUILD_FILES: Final = "build files and scripts that run later outside (review them)"
NOT_CONTAINED_WITHOUT_NAMESPACES: Final = (
    "without namespaces and a seccomp filter, other processes, TCP through MPTCP, "
    "Fast Open and listen(), UDP, SysV IPC and the keyring stay reachable"
)


def unsafe_root(root: str, interpreter: str, prefixes: Sequence[str]) -> str | None:
    """Why ``root`` cannot be contained (``/``, or it holds the interpreter), else ``None``."""
    if os.path.realpath(root) == os.sep:
        return ROOT_IS_SLASH
    if any(_bwrap.beneath(path, root) for path in (interpreter, *prefixes) if path):
        return INTERPRETER_BENEATH_ROOT
    return None


def code_at_risk(
    root: str,
    allow_write: Sequence[str],
    made: Namespaces,
    trusted: Callable[[str | None], tuple[str, ...]] = _facts.server_code,
    linked: Callable[[], tuple[tuple[str, int, int], ...]] = _facts.linked_module_files,
) -> str | None:
    """Why a command could change the code of the next server start, else ``None``.

    Contract 11.1 (C1) and 12.2. Without namespaces, any of the server's code
    (``trusted``) that lies beneath the root or an ``--allow-write`` directory; on both
    paths, a loaded module file with a hard link a call could write: one beneath the
    root, an ``--allow-write`` directory or the worktree's cache (``_facts.writable_link``;
    a link in uv's own cache, which no call writes, does not count). ``trusted`` and
    ``linked`` are the tests' seams.
    """
    places = [os.path.realpath(path) for path in (root, *allow_write)]
    if not made.made:
        for path in trusted(made.bwrap):
            if any(_bwrap.beneath(path, place) for place in places):
                return CODE_IN_WRITABLE_PLACE.format(path=path)
    cache = _facts.cache_directory(root, os.environ)
    found = _facts.writable_link([*places, *([cache] if cache else [])], linked)
    if found is None:
        return None
    if found.link is None:
        return UNSEARCHED_LINKED_CODE.format(
            path=found.module, bound=f"{_facts.MAX_LINK_SCAN_ENTRIES:,}"
        )
    return LINKED_CODE.format(path=found.module, link=found.link)


@final
@dataclass(frozen=True, slots=True)
class Containment:
    """The effective policy: ``mode`` (``workspace`` or ``off``), the ABI, the network.

    ``requested`` is what the settings asked for (``auto`` included); ``abi`` is the
    kernel's Landlock ABI (0 without Landlock); ``warning`` is set when ``auto`` fell
    back to ``off``. ``seccomp`` says whether this machine can install the filter of
    ``_seccomp`` (a known architecture and a kernel with seccomp filters); a contained
    command gets it where it can, and never holds a capability.
    """

    mode: str
    requested: str = DISABLED
    abi: int = 0
    allow_network: bool = False
    warning: str | None = None
    namespaces: Namespaces = field(default_factory=Namespaces)
    allow_write: tuple[str, ...] = ()
    seccomp: bool = False
    domains: DomainPolicy = field(default_factory=DomainPolicy)

    def __post_init__(self) -> None:
        if self.mode not in {WORKSPACE, DISABLED} or self.requested not in MODES:
            raise ValueError("unknown sandbox mode")
        if self.mode == WORKSPACE and self.abi < 1:
            raise ValueError("workspace containment needs a Landlock ABI")

    @property
    def confined(self) -> bool:
        """True when commands run under the layers of ``workspace`` (Landlock at least)."""
        return self.mode == WORKSPACE

    @property
    def contained(self) -> bool:
        """What a shell result's ``contained`` says (contract 10.1), and only when true.

        Writes confined (Landlock), the network denied unless allowed, other processes
        unreachable, no capabilities, and cleanup of the whole tree: the namespaces
        give all of it beside Landlock; without them, only a seccomp filter with the
        capabilities dropped would.
        """
        return self.confined and (self.namespaces.made or self.seccomp)

    @property
    def proxied(self) -> bool:
        """With namespaces and without ``--allow-network``: the call's own network namespace
        (its loopback works) and the proxy for the ``--allow-domain`` hosts (contract 11.1)."""
        return self.confined and self.namespaces.made and not self.allow_network

    @property
    def enforced(self) -> tuple[str, ...]:
        """The Landlock rules applied to every command (empty when off).

        In a network namespace of its own, TCP reaches only the call's loopback: Landlock
        leaves TCP alone there (``tcp_bind``/``tcp_connect`` are not among the rules).
        """
        if not self.confined:
            return ()
        return landlock.enforced_rules(self.abi, self.allow_network or self.proxied)

    @property
    def layers(self) -> int:
        """The supervisor's ``LAYER_*`` bits besides Landlock (0 when not confined).

        ``PRIVATE_IPC`` with namespaces: the command has its own IPC namespace, so the
        filter leaves SysV IPC open there.
        """
        if not self.confined:
            return 0
        bits = landlock.LAYER_CAPABILITIES | (landlock.LAYER_SECCOMP if self.seccomp else 0)
        if self.proxied:
            bits |= landlock.PRIVATE_NETWORK | landlock.PROXY_BRIDGE
        return bits | (landlock.PRIVATE_IPC if self.namespaces.made else 0)

    @property
    def filtered(self) -> tuple[str, ...]:
        """The seccomp filter's rules applied to every command (empty without it)."""
        if not self.layers & landlock.LAYER_SECCOMP:
            return ()
        return seccomp.rules(
            self.allow_network, private_ipc=self.namespaces.made, private_network=self.proxied
        )

    @property
    def missing(self) -> tuple[str, ...]:
        """The rules this kernel's Landlock ABI lacks (all of them without Landlock)."""
        return landlock.missing_rules(self.abi)

    @property
    def sentence(self) -> str | None:
        """What the sandbox confines and what not, for the shell's description (with the
        protected paths held: the launcher's default)."""
        return describe(self, protected=True)

    def report(self) -> dict[str, object]:
        """The ``sandbox`` object of the ``tools`` output: each layer, and what is open."""
        return {
            "mode": self.mode,
            "requested": self.requested,
            "contained": self.contained,
            "mechanism": "landlock" if self.confined else None,
            "abi": self.abi,
            "network": "denied" if self.confined and not self.allow_network else "allowed",
            "domains": self.domains_report(),
            "enforced": list(self.enforced),
            "missing": list(self.missing),
            "seccomp": list(self.filtered) if self.filtered else None,
            "capabilities": list(self.capabilities),
            "allow_write": list(self.allow_write),
            "layers": {
                "namespaces": (
                    {
                        "made": True,
                        "bwrap": self.namespaces.bwrap,
                        **(
                            {}
                            if self.namespaces.sized
                            else {"tmpfs_size": "bwrap older than 0.7: no size limit"}
                        ),
                    }
                    if self.confined and self.namespaces.made
                    else {"made": False, "reason": self.namespaces.reason or "sandbox off"}
                ),
                "landlock": {"abi": self.abi, "rules": list(self.enforced)},
                "seccomp": bool(self.filtered),
                "capabilities": list(self.capabilities),
            },
            "not_confined": self.not_confined,
        }

    def domains_report(self) -> dict[str, object]:
        """What ``--allow-domain`` does here: the patterns, and whether the proxy enforces them."""
        report: dict[str, object] = {
            "allowed": self.domains.describe(),
            "private_addresses": self.domains.allow_private,
        }
        if self.domains.configured:
            report["configured_by_host"] = self.domains.describe_configured()
        if self.proxied:
            report["proxy"] = (
                f"http://{bridge.ADDRESS}:{bridge.PORT} inside the call (HTTP_PROXY, HTTPS_PROXY)"
            )
            upstream = upstream_of(os.environ)
            if upstream.active:
                report["upstream"] = upstream.report()
            report["loopback"] = "the call's own (127.0.0.1 and ::1; the host's is unreachable)"
        elif self.confined and self.allow_network:
            report["proxy"] = None
            report["reason"] = "--allow-network: the host's network, unfiltered"
        else:
            report["proxy"] = None
            report["reason"] = (
                "the proxy needs namespaces (bwrap): without them the network stays denied"
                if self.confined
                else "sandbox off"
            )
        return report

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What a command holds of capabilities: ``none`` held and how (empty when off)."""
        if not self.confined:
            return ()
        if self.namespaces.made:
            return ("none_held", "bounding_set_empty", "securebits_locked", "user_namespace")
        if landlock.can_empty_bounding_set():
            return ("none_held", "bounding_set_empty", "securebits_locked")
        return ("none_held", "no_new_privs")

    @property
    def not_confined(self) -> list[str]:
        """What the sandbox leaves open, for the ``tools`` report."""
        if not self.confined:
            return ["everything"]
        kept = [
            "reads (but the hidden credentials: see plan.hidden)"
            if self.namespaces.made
            else "reads (credentials included)",
            "execution",
            "file metadata (chmod, chown, utimes, xattrs)",
            "a file hard-linked into the worktree (the same file outside it)",
            BUILD_FILES,
        ]
        if not self.namespaces.made:
            kept.append(OTHER_TERMINALS)
            if self.abi < SIGNAL_SCOPE_ABI:
                kept.append(UNSCOPED_PROCESSES)
        if self.namespaces.made and not self.allow_network:
            kept.append("named UNIX sockets outside /run and /tmp (in a home directory)")
        else:
            kept.append("connections to existing named UNIX sockets (Docker, D-Bus)")
        if not self.contained:
            kept.append(NOT_CONTAINED_WITHOUT_NAMESPACES)
        if not self.filtered:
            kept.append(NO_SECCOMP)
        if self.allow_network:
            kept.append("the network (--allow-network)")
        elif self.proxied and self.domains.patterns:
            kept.append(
                "what the --allow-domain hosts accept (uploads included), through the proxy"
            )
        return kept


OFF: Final = Containment(DISABLED)
"""No Landlock (the original behaviour of the shell, with the lifetime guarantees)."""


def resolve_containment(
    mode: str = DEFAULT_MODE,
    allow_network: bool = False,
    probe: Callable[[], int] | None = None,
    root: str | None = None,
    allow_write: Sequence[str] = (),
    namespaces: Callable[[str], Namespaces] | None = None,
    seccomp_probe: Callable[[], bool] | None = None,
    domains: DomainPolicy | None = None,
) -> Containment:
    """The effective ``Containment`` for ``mode`` on this kernel and worktree ``root``.

    ``probe`` answers the Landlock ABI (0 = none), ``seccomp_probe`` whether the filter
    can be installed; by default the real kernel is asked. ``mode`` is a value of
    ``MODES`` (the settings parsed the text). ``namespaces`` finds and probes ``bwrap``
    (``_posix._bwrap.resolve_namespaces``); without a ``root`` no namespaces are tried.
    Raises ``ContainmentUnavailable`` for ``workspace`` without Landlock, with a root of
    ``/`` or one holding the server's interpreter, and ``ValueError`` for anything else.
    """
    if mode not in MODES:
        raise ValueError("the sandbox mode must be one of auto, workspace, off")
    requested = mode
    abi = (landlock.landlock_abi if probe is None else probe)()
    writes = tuple(allow_write)
    policy = DomainPolicy() if domains is None else domains
    if requested == DISABLED:
        return Containment(
            DISABLED, requested, abi, allow_network, allow_write=writes, domains=policy
        )
    if abi < 1:
        if requested == WORKSPACE:
            raise ContainmentUnavailable
        return Containment(
            DISABLED,
            requested,
            abi,
            allow_network,
            AUTO_WITHOUT_LANDLOCK,
            allow_write=writes,
            domains=policy,
        )
    if root is not None:
        reason = unsafe_root(root, os.path.realpath(sys.executable), (sys.base_prefix,))
        if reason is not None:
            if requested == WORKSPACE:
                raise ContainmentUnavailable(reason)
            warning = AUTO_UNSAFE_ROOT.format(reason=reason)
            return Containment(
                DISABLED, requested, abi, allow_network, warning, allow_write=writes, domains=policy
            )
    made = (
        Namespaces(None, "no worktree root was given")
        if root is None
        else (_bwrap.resolve_namespaces if namespaces is None else namespaces)(root)
    )
    if root is not None:
        reason = code_at_risk(root, writes, made)
        if reason is not None:
            if requested == WORKSPACE:
                raise ContainmentUnavailable(reason)
            warning = AUTO_UNSAFE_ROOT.format(reason=reason)
            return Containment(DISABLED, requested, abi, allow_network, warning, allow_write=writes)
    filtered = (seccomp.available if seccomp_probe is None else seccomp_probe)()
    return Containment(
        WORKSPACE,
        requested,
        abi,
        allow_network,
        None,
        seccomp=filtered,
        namespaces=made,
        allow_write=writes,
        domains=policy,
    )


def describe(policy: Containment, *, protected: bool, staged: bool = False) -> str | None:
    """The shell's sandbox sentence; ``protected``: the launcher holds the protected
    paths (contract 12.1: read-only or put back at the join, on both paths); ``staged``:
    every call writes the worktree through a stage (contract 13.1)."""
    if not policy.confined:
        return None
    places = "a private $TMPDIR"
    if policy.namespaces.made:
        places = "its own /tmp ($TMPDIR), /dev/shm"
    extra = ", ".join(policy.allow_write)
    if extra:
        places += f", {extra}"
    if policy.contained:
        if policy.allow_network:
            net = "use the host's network"
        elif policy.proxied:
            net = "use its own loopback" + (
                " and, through a proxy, only the allowed domains"
                if policy.domains.patterns
                else " (no network)"
            )
        elif "sockets_unix_only" in policy.filtered:
            net = "open only UNIX sockets (no network)"
        else:
            net = "reach no network"
        if policy.namespaces.made:
            others = "cannot see or signal other processes"
        elif policy.abi >= SIGNAL_SCOPE_ABI:
            others = "cannot signal or trace other processes"
        else:
            others = "may signal (not trace) your user's other processes"
        isolation = f"; may {net}, hold no capabilities, {others}"
    else:
        rules = set(policy.enforced)
        parts = []
        if {"tcp_bind", "tcp_connect"} <= rules:
            parts.append("plain TCP connect/bind refused")
        if "signal_scope" in rules:
            parts.append("no signals out")
        parts.append("network and other processes NOT fully isolated (see tools)")
        isolation = "; " + "; ".join(parts)
    reads = "reads but credentials" if policy.namespaces.made else "reads"
    git = "" if protected or staged else ".git/config, hooks, "
    open_ = f"{reads}; hard-linked files; {git}build files (run later, outside)"
    held = f" {STAGED_SENTENCE}" if staged else f" {PROTECTED_SENTENCE}" if protected else ""
    text = (
        "Sandbox: the program and its children may write only beneath the worktree "
        f"root, {places} and /dev/null-like devices{isolation}. Not confined: {open_}."
        f"{held} A write elsewhere fails with a permission or read-only error: do not "
        "retry it."
    )
    if len(text.encode()) > MAXIMUM_SENTENCE_BYTES and extra:
        return text.replace(f", {extra}", ", the --allow-write directories (see tools)")
    return text
