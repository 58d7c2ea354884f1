"""The shell sandbox's neutral policy: its modes, its refusals, its bounds and names.

What every platform shares, with nothing of any platform in it: ``--sandbox
{auto,workspace,off}`` (``SPICE_AGENT_SANDBOX``) as a value, ``ContainmentUnavailable``
(the CLI refuses to start: one line, exit 2), what ``--help`` says of the sandbox, the
refusal of a root of ``/``, the default bounds of a call, and the credentials a contained
command does not see with the home they are named against. ``_posix._containment`` makes
a mode into the POSIX ``Containment`` (Landlock, seccomp, namespaces),
``_windows._launcher`` into an ``Uncontained`` (Windows has no shell sandbox); the
application reads either as a ``SandboxReport``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol, final

SANDBOX_ENVIRONMENT_VARIABLE: Final = "SPICE_AGENT_SANDBOX"
AUTO: Final = "auto"
WORKSPACE: Final = "workspace"
DISABLED: Final = "off"
MODES: Final = (AUTO, WORKSPACE, DISABLED)
DEFAULT_MODE: Final = AUTO

DEFAULT_MAX_PROCESSES: Final = 2048
"""The process bound of one call (``--max-processes``)."""

DEFAULT_CACHE_MAX_AGE_DAYS: Final = 30
"""A worktree's private cache unused this many days is removed at a server's start
(``--cache-max-age``; contract 12.2)."""
MAX_CACHE_MAX_AGE_DAYS: Final = 36_500
"""The largest ``--cache-max-age`` (a hundred years); 0 turns the expiry off."""

MIN_MEMORY_BYTES: Final = 16 * 1024**2
"""The least memory bound accepted (below it even a shell cannot start)."""

NO_LANDLOCK: Final = "the kernel has no Landlock: --sandbox workspace cannot be enforced"
AUTO_WITHOUT_LANDLOCK: Final = (
    "warning: the kernel has no Landlock; shell commands run uncontained (--sandbox off)"
)


ROOT_IS_SLASH: Final = "the worktree root is /: --sandbox workspace would confine nothing"
SLASH_ROOT_NEEDS_OFF: Final = (
    "the worktree root is /: every file of this system would be served and no shell command "
    "could be contained; give --sandbox off to serve it uncontained anyway"
)
HELP: Final = (
    "Sandbox (--sandbox, Linux): auto, the default, contains each shell command where the "
    "kernel has Landlock and runs it uncontained with a warning where it has not; workspace "
    "refuses to start without Landlock; off contains nothing. A contained command and its "
    "descendants may write only beneath the worktree, a private TMPDIR, the worktree's "
    "private caches and each --allow-write directory, and hold no capability. What git "
    "runs or obeys in every git directory (config, hooks, info, commondir, ...), "
    ".gitmodules and agent and editor settings (.mcp.json, .claude/, .vscode/ and the "
    "like) are protected in every mode: replace refuses them, and a contained command's "
    "change is put back after its call (--unprotect PATH gives one back). Where this "
    "host gives bubblewrap's namespaces contained commands also see your home only "
    "through an allow-list of toolchain places (~/.gitconfig, ~/.local/bin, ~/.cargo/bin "
    "and the like; --allow-read, --deny-read), cannot change what exists of those "
    "protected paths nor the server's own code, have no network but a private loopback "
    "and the --allow-domain hosts (through the server's proxy) unless --allow-network, "
    "and cannot reach other processes; without namespaces reads stay open. Each call runs "
    "in its own cgroup where one can be made (--max-processes, --max-memory). In every "
    "mode a command and all its descendants end with their call. Each shell result's "
    "contained field says whether its command was contained; 'spice-coding tools' prints "
    "what this host enforces. A root of / is refused unless --sandbox off is given."
)
"""What ``spice-coding --help`` says of the sandbox (contract 11.3): as it is, in one place."""
SERVER_WARNING: Final = (
    "Security warning: the server reads and writes the worktree's files and runs commands "
    "with your operating-system user's privileges, without an approval prompt. The "
    "sandbox above confines a command only where its shell result says contained: true "
    "(with --sandbox off, or where this host gives no Landlock, nothing is contained); "
    "even contained, a command reads what the sandbox leaves visible, which without "
    "namespaces is everything your user can read. Run it only on worktrees and with "
    "agents you trust."
)
"""The application's security warning (``--help``, and ``serve`` at start): the product's
``SECURITY_WARNING`` says its tools "provide no sandbox", true of the library, not of this
server (contract 12.4)."""
CREDENTIALS: Final = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".local/share/keyrings",
    ".password-store",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/git/credentials",
    ".local/share/uv/credentials",
)
"""The user's credentials a contained command does not see (relative to the home): the
deny-list that still holds beneath ``HOME_SHOWN`` places (git's credential store under
``.config/git``, uv's under ``.local/share/uv``) and where the home is not hidden."""

HOME_SHOWN: Final = (
    ".gitconfig",
    ".config/git",
    ".gitignore_global",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".local/share/pnpm",
    ".local/share/mise",
    ".local/share/fnm",
    ".config/pip",
    ".pip",
    ".config/uv",
    ".pyenv",
    ".rbenv",
    ".nodenv",
    ".goenv",
    ".asdf",
    ".rustup",
    ".cargo/bin",
    ".nvm",
    ".volta",
    ".bun/bin",
    ".deno/bin",
    ".sdkman/candidates",
    ".elan",
    ".ghcup/bin",
    "go/bin",
    "bin",
)
"""The places beneath the server's home a contained command sees (read-only) when the
home is hidden: toolchains and their configuration, which hold no secret by design
(the README lists them). ``--allow-read PATH`` shows one more."""


class ContainmentUnavailable(Exception):
    """``workspace`` was asked for where the kernel cannot enforce it."""

    def __init__(self, reason: str = NO_LANDLOCK) -> None:
        super().__init__(reason)


def parse_mode(value: str) -> str:
    """A sandbox mode from its text (the settings' case rule: blanks and case ignored).

    ``ValueError`` when it names no mode. ``_settings`` is the one caller that reads
    text; everything after it handles the mode as a value.
    """
    mode = value.strip().lower()
    if mode not in MODES:
        raise ValueError("the sandbox mode must be one of auto, workspace, off")
    return mode


def slash_root_problem(root: str, mode: str) -> str | None:
    """Why ``root`` may not be served in ``mode``: a root of ``/`` needs ``off``, chosen.

    ``/`` is the file system's root as the real path shows it: the one directory that is
    its own parent (``/`` on POSIX; a drive's or a share's root on Windows).
    """
    real = os.path.realpath(root)
    if mode != DISABLED and os.path.dirname(real) == real:
        return SLASH_ROOT_NEEDS_OFF
    return None


def home_directory(environ: Mapping[str, str]) -> str | None:
    """The server's home: ``$HOME`` when absolute, else the password database's entry."""
    home = environ.get("HOME", "")
    if not os.path.isabs(home):
        if sys.platform == "win32":
            return None
        import pwd  # noqa: PLC0415 - POSIX only

        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except (KeyError, OSError):
            return None
    if not os.path.isabs(home):
        return None
    real = os.path.realpath(home)
    return None if real == os.sep else real


class SandboxReport(Protocol):
    """What the application reads of a platform's sandbox: the mode and its warning."""

    @property
    def mode(self) -> str:
        """``workspace`` or ``off``: what runs."""
        ...

    @property
    def requested(self) -> str:
        """What the settings asked for (``auto`` included)."""
        ...

    @property
    def warning(self) -> str | None:
        """Set when ``auto`` fell back to ``off``."""
        ...


@final
@dataclass(frozen=True, slots=True)
class Uncontained:
    """A platform's sandbox where nothing is confined: ``off``, and why when ``auto``."""

    requested: str = DISABLED
    allow_network: bool = False
    warning: str | None = None

    def __post_init__(self) -> None:
        if self.requested not in MODES:
            raise ValueError("unknown sandbox mode")

    @property
    def mode(self) -> str:
        """Always ``off``."""
        return DISABLED
