"""The shell's containment policy: from the settings and the kernel to a ``Containment``.

``--sandbox {auto,workspace,off}`` (``SPICE_AGENT_SANDBOX``) and ``--allow-network``
become one ``Containment`` value here; the launcher applies it (``_posix_sandbox`` has
the Landlock ruleset and the supervisor). The kernel's answer comes from a probe that
can be replaced (``resolve_containment(..., probe=...)``), which is how the tests
simulate a kernel without Landlock.

- ``workspace``: Landlock must exist (ABI >= 1), else ``ContainmentUnavailable``
  (the CLI refuses to start: one line, exit 2).
- ``auto``: ``workspace`` where Landlock exists, else ``off`` with a warning.
- ``off``: no Landlock; the process-lifetime guarantees still hold (the supervisor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from . import _posix_sandbox as sandbox
from . import _seccomp as seccomp

SANDBOX_ENVIRONMENT_VARIABLE: Final = "SPICE_AGENT_SANDBOX"
AUTO: Final = "auto"
WORKSPACE: Final = "workspace"
DISABLED: Final = "off"
MODES: Final = (AUTO, WORKSPACE, DISABLED)
DEFAULT_MODE: Final = AUTO

MAXIMUM_SENTENCE_BYTES: Final = 400
"""Bound of the sentence the shell's description gets about what is confined."""

NO_LANDLOCK: Final = "the kernel has no Landlock: --sandbox workspace cannot be enforced"
AUTO_WITHOUT_LANDLOCK: Final = (
    "warning: the kernel has no Landlock; shell commands run uncontained (--sandbox off)"
)


class ContainmentUnavailable(Exception):
    """``workspace`` was asked for where the kernel cannot enforce it."""

    def __init__(self) -> None:
        super().__init__(NO_LANDLOCK)


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
    seccomp: bool = False

    def __post_init__(self) -> None:
        if self.mode not in {WORKSPACE, DISABLED} or self.requested not in MODES:
            raise ValueError("unknown sandbox mode")
        if self.mode == WORKSPACE and self.abi < 1:
            raise ValueError("workspace containment needs a Landlock ABI")

    @property
    def contained(self) -> bool:
        """True when commands run under the Landlock policy."""
        return self.mode == WORKSPACE

    @property
    def enforced(self) -> tuple[str, ...]:
        """The Landlock rules applied to every command (empty when off)."""
        return sandbox.enforced_rules(self.abi, self.allow_network) if self.contained else ()

    @property
    def layers(self) -> int:
        """The supervisor's ``LAYER_*`` bits besides Landlock (0 when not contained)."""
        if not self.contained:
            return 0
        return sandbox.LAYER_CAPABILITIES | (sandbox.LAYER_SECCOMP if self.seccomp else 0)

    @property
    def filtered(self) -> tuple[str, ...]:
        """The seccomp filter's rules applied to every command (empty without it)."""
        if not self.layers & sandbox.LAYER_SECCOMP:
            return ()
        return seccomp.rules(self.allow_network, private_ipc=False)

    @property
    def missing(self) -> tuple[str, ...]:
        """The rules this kernel's Landlock ABI lacks (all of them without Landlock)."""
        return sandbox.missing_rules(self.abi)

    @property
    def sentence(self) -> str | None:
        """What the sandbox confines, one fixed sentence for the shell's description."""
        if not self.contained:
            return None
        rules = set(self.enforced)
        parts = [
            (
                "Sandbox: the program and its children may write only beneath the worktree "
                "root, in $TMPDIR (private to the call, removed after it) and to "
                "/dev/null-like devices"
            )
        ]
        if "sockets_unix_only" in self.filtered:
            parts.append("may open only UNIX sockets (no network)")
        elif {"tcp_bind", "tcp_connect"} <= rules:
            parts.append("may not open or accept TCP connections")
        if "signal_scope" in rules:
            parts.append("may not signal processes outside the call")
        return (
            "; ".join(parts) + "; reads are not confined. A write elsewhere fails with a "
            "permission error: do not retry it."
        )

    def report(self) -> dict[str, object]:
        """The ``sandbox`` object of the ``tools`` output."""
        return {
            "mode": self.mode,
            "requested": self.requested,
            "contained": self.contained,
            "mechanism": "landlock" if self.contained else None,
            "abi": self.abi,
            "network": "denied" if "tcp_connect" in self.enforced else "allowed",
            "enforced": list(self.enforced),
            "missing": list(self.missing),
            "seccomp": list(self.filtered) if self.filtered else None,
            "capabilities": list(self.capabilities),
            "not_confined": self.not_confined,
        }

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What a command holds of capabilities: ``none`` held and how (empty when off)."""
        if not self.contained:
            return ()
        if sandbox.can_empty_bounding_set():
            return ("none_held", "bounding_set_empty", "securebits_locked")
        return ("none_held", "no_new_privs")

    @property
    def not_confined(self) -> list[str]:
        """What the sandbox leaves open, for the ``tools`` report."""
        if not self.contained:
            return ["everything"]
        kept = [
            "reads",
            "execution",
            "file metadata (chmod, chown, utimes, xattrs)",
            "connections to existing named UNIX sockets",
        ]
        if not self.filtered:
            kept[3:3] = ["UDP and other non-TCP sockets", "system calls (no seccomp)"]
        return kept


OFF: Final = Containment(DISABLED)
"""No Landlock (the original behaviour of the shell, with the lifetime guarantees)."""


def parse_mode(value: str) -> str:
    """A sandbox mode from its text (the settings' case rule: blanks and case ignored).

    ``ValueError`` when it names no mode. ``_settings`` is the one caller that reads
    text; everything after it handles the mode as a value.
    """
    mode = value.strip().lower()
    if mode not in MODES:
        raise ValueError("the sandbox mode must be one of auto, workspace, off")
    return mode


def resolve_containment(
    mode: str = DEFAULT_MODE,
    allow_network: bool = False,
    probe: Callable[[], int] | None = None,
    seccomp_probe: Callable[[], bool] | None = None,
) -> Containment:
    """The effective ``Containment`` for ``mode`` on this kernel.

    ``probe`` answers the Landlock ABI (0 = none), ``seccomp_probe`` whether the filter
    can be installed; by default the real kernel is asked. ``mode`` is a value of
    ``MODES`` (the settings parsed the text). Raises ``ContainmentUnavailable`` for
    ``workspace`` without Landlock and ``ValueError`` for anything else.
    """
    if mode not in MODES:
        raise ValueError("the sandbox mode must be one of auto, workspace, off")
    requested = mode
    abi = (sandbox.landlock_abi if probe is None else probe)()
    if requested == DISABLED:
        return Containment(DISABLED, requested, abi, allow_network)
    if abi >= 1:
        filtered = (seccomp.available if seccomp_probe is None else seccomp_probe)()
        return Containment(WORKSPACE, requested, abi, allow_network, seccomp=filtered)
    if requested == WORKSPACE:
        raise ContainmentUnavailable
    return Containment(DISABLED, requested, abi, allow_network, AUTO_WITHOUT_LANDLOCK)
