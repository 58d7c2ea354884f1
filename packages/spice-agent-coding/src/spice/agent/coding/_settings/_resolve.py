"""The application's settings: the ``Config`` plus the shell's containment mode.

Every setting comes from a command-line flag, else from its ``SPICE_AGENT_*``
environment variable, else from its default; a flag wins over the
environment. The command line hands over raw text (``Flags``) and
``resolve_settings`` parses and validates it, so that every bad value is one
fixed line (``SettingsError``) that names the flag or the variable, never the
value itself. The bounds are ``Config``'s own: this module parses text and lets
``Config`` judge the numbers. The sandbox modes, their default and their
variable are ``_sandbox``'s; this is the one place their text is read.

One case rule for every keyword value (``--sandbox``, ``SPICE_AGENT_SANDBOX``,
``SPICE_AGENT_ALLOW_NETWORK``): blanks around it are ignored and case is not
(``Workspace``, `` OFF ``, ``YES`` are accepted). Numbers and names are read as
written.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tools.coding import Config

from .._compose import UNUSABLE_ROOT, resolve_config
from .._netpolicy._domains import PRESETS, DomainPolicy, PatternError, parse_patterns, policy_of
from .._netpolicy._hostconfig import HOST_VARIABLES, read_host_configuration
from .._platform import SandboxRequest
from .._sandbox import (
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MODE,
    MODES,
    SANDBOX_ENVIRONMENT_VARIABLE,
    home_directory,
    parse_mode,
)
from ._file import (
    DEFAULT_BENEATH,
    SETTINGS_VARIABLE,
    FileRules,
    SettingsFile,
    SettingsFileError,
    checked_rules,
    lies_beneath,
    open_settings_file,
    settings_path,
)
from ._journal_bounds import JournalBounds, journal_bounds
from ._protection import UNPROTECT_FLAG, UnprotectError, add_unprotect, settings_policy
from ._values import (
    ALLOW_ENV_FLAG,
    ALLOW_ENV_VARIABLE,
    ALLOW_WRITE_FLAG,
    ALLOW_WRITE_VARIABLE,
    MAXIMUM_PROCESSES,
    MAXIMUM_VALUE_LENGTH,
    SettingsError,
    allow_read,
    allow_write,
    allowed_names,
    ca_files,
    deny_read,
    filed_writes,
    from_file,
    host_memory,
    max_memory,
    max_processes,
    server_memory_problem,
)

__all__ = [
    "ALLOW_DOMAINS_VARIABLE",
    "ALLOW_NETWORK_VARIABLE",
    "ALLOW_PRIVATE_ADDRESS_VARIABLE",
    "COMMAND_TIMEOUT_VARIABLE",
    "MAX_EDIT_BYTES_VARIABLE",
    "MAX_OUTPUT_BYTES_VARIABLE",
    "MAX_READ_BYTES_VARIABLE",
    "MAX_WRITE_BYTES_VARIABLE",
    "Flags",
    "Settings",
    "add_arguments",
    "flags_of",
    "resolve_settings",
]

COMMAND_TIMEOUT_VARIABLE: Final = "SPICE_AGENT_COMMAND_TIMEOUT"
MAX_READ_BYTES_VARIABLE: Final = "SPICE_AGENT_MAX_READ_BYTES"
MAX_WRITE_BYTES_VARIABLE: Final = "SPICE_AGENT_MAX_WRITE_BYTES"
MAX_OUTPUT_BYTES_VARIABLE: Final = "SPICE_AGENT_MAX_OUTPUT_BYTES"
MAX_EDIT_BYTES_VARIABLE: Final = "SPICE_AGENT_MAX_EDIT_BYTES"
ALLOW_NETWORK_VARIABLE: Final = "SPICE_AGENT_ALLOW_NETWORK"
MAX_PROCESSES_VARIABLE: Final = "SPICE_AGENT_MAX_PROCESSES"
MAX_MEMORY_VARIABLE: Final = "SPICE_AGENT_MAX_MEMORY"
MAX_SERVER_MEMORY_VARIABLE: Final = "SPICE_AGENT_MAX_SERVER_MEMORY"

ALLOW_DOMAINS_VARIABLE: Final = "SPICE_AGENT_ALLOW_DOMAINS"
ALLOW_PRIVATE_ADDRESS_VARIABLE: Final = "SPICE_AGENT_ALLOW_PRIVATE_ADDRESS"


_log = logging.getLogger("spice.agent.coding")
_WHOLE: Final = re.compile(r"[0-9]+")
_DECIMAL: Final = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})

_COMMAND_TIMEOUT_FLAG: Final = "--command-timeout"
_SANDBOX_FLAG: Final = "--sandbox"
EMPTY_ROOT: Final = "--root is empty: name the worktree's directory, or leave --root out"
_DENY_READ_FLAG: Final = "--deny-read"
_ALLOW_READ_FLAG: Final = "--allow-read"
_BYTES_FIELDS: Final = (
    ("max_read_bytes", "--max-read-bytes", MAX_READ_BYTES_VARIABLE),
    ("max_write_bytes", "--max-write-bytes", MAX_WRITE_BYTES_VARIABLE),
    ("max_output_bytes", "--max-output-bytes", MAX_OUTPUT_BYTES_VARIABLE),
    ("max_edit_bytes", "--max-edit-bytes", MAX_EDIT_BYTES_VARIABLE),
)

_BYTES_HELP: Final = {
    "max_read_bytes": "bytes of one read page",
    "max_write_bytes": "bytes one replace may write",
    "max_output_bytes": "bytes of shell output kept (stdout and stderr together)",
    "max_edit_bytes": "largest file read gives file_sha256 and replace's edits may produce",
}
_BYTES_RANGE: Final = {"max_edit_bytes": (67_108_864, 4_194_304)}
"""``(most, default)`` of the byte settings whose bounds are not the usual 524288/262144
(``Config`` judges the values; these numbers are only for the help)."""

_AFTER: Final = "_after_command"
"""Suffix of the destinations of the options given after the command word."""


@final
@dataclass(frozen=True, slots=True)
class Flags:
    """The settings as the command line gave them: raw text, ``None`` where not given."""

    root: str | None = None
    allow_env: tuple[str, ...] = ()
    command_timeout: str | None = None
    max_read_bytes: str | None = None
    max_write_bytes: str | None = None
    max_output_bytes: str | None = None
    max_edit_bytes: str | None = None
    sandbox: str | None = None
    allow_network: bool = False
    allow_write: tuple[str, ...] = ()
    max_processes: str | None = None
    max_memory: str | None = None
    max_server_memory: str | None = None
    allow_domain: tuple[str, ...] = ()
    allow_private_address: bool = False

    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    settings: str | None = None
    """``--settings FILE``: the settings file (contract 12.2)."""
    unprotect: tuple[str, ...] = ()
    journal_max_bytes: str | None = None
    journal_max_age: str | None = None


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """What one ``serve`` or ``call`` runs with: the tools' ``Config`` and the containment.

    ``sandbox`` is one of ``_sandbox.MODES`` (already parsed: a value, not text);
    ``allow_network`` lets contained commands use TCP (contract 9.4). The launcher
    is built from these.
    """

    config: Config
    sandbox: str = DEFAULT_MODE
    allow_network: bool = False
    allow_write: tuple[str, ...] = ()
    max_processes: int = DEFAULT_MAX_PROCESSES
    max_memory: int | None = None
    """Bytes of one call's memory bound; ``None``: a quarter of the machine's, at most 16 GiB."""
    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    domains: DomainPolicy = dataclasses.field(default_factory=DomainPolicy)
    unprotect: tuple[str, ...] = ()
    """Paths given back to the user (the settings file's ``unprotect``), passed along."""
    settings_file: str | None = dataclasses.field(default=None, compare=False)
    """The settings file watched (``None``: none), read again before each call."""
    ca_files: tuple[str, ...] = ()
    """The settings file's ``ca_files`` (checked PEM files): contained commands trust the
    host's store and these (contract 13.4)."""
    origins: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)
    """``(rule, where it came from)``: a flag, a variable, the settings file, the host's
    configuration; ``tools`` shows them."""
    journal: JournalBounds = dataclasses.field(default_factory=JournalBounds)
    max_server_memory: int | None = None
    """Bytes all calls together may use (``None``: half the host's memory)."""

    def __post_init__(self) -> None:
        if not isinstance(self.config, Config):
            raise TypeError("Settings takes a Config")
        if self.sandbox not in MODES:
            raise ValueError("the sandbox mode must be one of auto, workspace, off")
        if not isinstance(self.allow_network, bool):
            raise TypeError("allow_network must be a bool")
        if not isinstance(self.allow_write, tuple) or not all(
            isinstance(path, str) for path in self.allow_write
        ):
            raise TypeError("allow_write must be a tuple of paths")
        if not isinstance(self.domains, DomainPolicy):
            raise TypeError("domains must be a DomainPolicy")

    def sandbox_request(self) -> SandboxRequest:
        """What these settings ask of the shell's sandbox (``_platform.platform_launcher``)."""
        return SandboxRequest(
            self.config.root,
            self.sandbox,
            self.allow_network,
            self.allow_write,
            self.deny_read,
            self.allow_read,
            self.max_processes,
            self.max_memory,
            self.domains,
            self.unprotect,
            self.config.protected_paths,
            max_server_memory=self.max_server_memory,
            ca_files=self.ca_files,
        )


def add_arguments(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """Add the settings' options to ``parser`` (the top level, or a command's own).

    Options after the command word land in their own destinations, so that
    they neither erase what was given before the command word nor lose to it.
    """
    suffix = _AFTER if after_command else ""
    default: object = argparse.SUPPRESS if after_command else None
    parser.add_argument(
        ALLOW_ENV_FLAG,
        metavar="NAME",
        action="append",
        dest="allow_env" + suffix,
        default=argparse.SUPPRESS if after_command else [],
        help=f"let NAME reach shell commands too (repeatable; default ${ALLOW_ENV_VARIABLE}, "
        "comma-separated; always HOME, LANG, PATH, TMPDIR)",
    )
    parser.add_argument(
        _COMMAND_TIMEOUT_FLAG,
        metavar="SECONDS",
        dest="command_timeout" + suffix,
        default=default,
        help="a shell command's default and longest timeout, 0 < SECONDS <= 1800 "
        f"(default ${COMMAND_TIMEOUT_VARIABLE}, else 120)",
    )
    for field, flag, variable in _BYTES_FIELDS:
        most, usual = _BYTES_RANGE.get(field, (524_288, 262_144))
        parser.add_argument(
            flag,
            metavar="N",
            dest=field + suffix,
            default=default,
            help=f"{_BYTES_HELP[field]}, 1 <= N <= {most} (default ${variable}, else {usual})",
        )
    parser.add_argument(
        _SANDBOX_FLAG,
        metavar="{auto,workspace,off}",
        dest="sandbox" + suffix,
        default=default,
        help=f"contain shell commands (default ${SANDBOX_ENVIRONMENT_VARIABLE}, else auto)",
    )
    parser.add_argument(
        "--allow-network",
        action="store_true",
        dest="allow_network" + suffix,
        default=argparse.SUPPRESS if after_command else False,
        help=f"let contained commands use the network (also ${ALLOW_NETWORK_VARIABLE}=1)",
    )
    parser.add_argument(
        ALLOW_WRITE_FLAG,
        metavar="DIR",
        action="append",
        dest="allow_write" + suffix,
        default=argparse.SUPPRESS if after_command else [],
        help="an existing absolute directory contained commands may also write, such as "
        f"a cache (repeatable; default ${ALLOW_WRITE_VARIABLE}, {os.pathsep!r}-separated)",
    )
    parser.add_argument(
        "--max-processes",
        metavar="N",
        dest="max_processes" + suffix,
        default=default,
        help=f"processes one call may have at once, 1 <= N <= {MAXIMUM_PROCESSES} "
        f"(default ${MAX_PROCESSES_VARIABLE}, else {DEFAULT_MAX_PROCESSES})",
    )
    parser.add_argument(
        "--max-memory",
        metavar="SIZE",
        dest="max_memory" + suffix,
        default=default,
        help="memory one call may use, its /tmp and /dev/shm included: bytes, or with "
        f"K, M or G (binary units), at least 16M (default ${MAX_MEMORY_VARIABLE}, else a "
        "quarter of the machine's memory, at most 16G)",
    )
    parser.add_argument(
        "--max-server-memory",
        metavar="SIZE",
        dest="max_server_memory" + suffix,
        default=default,
        help="memory all calls together may use (the server's own cgroup), at least "
        f"--max-memory (default ${MAX_SERVER_MEMORY_VARIABLE}, else half the machine's)",
    )
    parser.add_argument(
        _DENY_READ_FLAG,
        metavar="PATH",
        action="append",
        dest="deny_read" + suffix,
        default=argparse.SUPPRESS if after_command else [],
        help="an existing absolute path outside the worktree that contained commands see "
        "as empty, besides the user's credentials (repeatable; namespaces only)",
    )
    parser.add_argument(
        _ALLOW_READ_FLAG,
        metavar="PATH",
        action="append",
        dest="allow_read" + suffix,
        default=argparse.SUPPRESS if after_command else [],
        help="show contained commands one more place beneath the home, which they see only "
        "through an allow-list of toolchain places, such as ~/.npmrc (repeatable; namespaces "
        "only; `tools` lists what is shown)",
    )
    parser.add_argument(
        "--settings",
        metavar="FILE",
        dest="settings" + suffix,
        default=default,
        help="a TOML settings file read again before each call (default "
        f"${SETTINGS_VARIABLE}, else $XDG_CONFIG_HOME/spice-coding/settings.toml where it "
        "exists; the flags add to it; see docs/platform.md)",
    )
    add_unprotect(parser, "unprotect" + suffix, argparse.SUPPRESS if after_command else [])
    parser.add_argument(
        "--allow-domain",
        metavar="PATTERN",
        action="append",
        dest="allow_domain" + suffix,
        default=argparse.SUPPRESS if after_command else [],
        help="a host contained commands may reach through the sandbox's proxy: NAME, "
        "*.DOMAIN (subdomains only), an address, any of them with :PORT (else 80 and 443), "
        "or a preset: python, npm, crates, go, github (repeatable; default "
        f"${ALLOW_DOMAINS_VARIABLE}, comma-separated; needs namespaces)",
    )
    parser.add_argument(
        "--allow-private-address",
        action="store_true",
        dest="allow_private_address" + suffix,
        default=argparse.SUPPRESS if after_command else False,
        help="let the proxy connect to loopback, private and link-local addresses too "
        f"(also ${ALLOW_PRIVATE_ADDRESS_VARIABLE}=1)",
    )


def flags_of(options: argparse.Namespace) -> Flags:
    """The ``Flags`` of a parsed command line: after the command word wins over before it."""
    values = vars(options)

    def text(field: str) -> str | None:
        chosen = values.get(field + _AFTER, values.get(field))
        return chosen if isinstance(chosen, str) else None

    allow_env = (*values.get("allow_env", ()), *values.get("allow_env" + _AFTER, ()))
    allow_write = (*values.get("allow_write", ()), *values.get("allow_write" + _AFTER, ()))
    deny_read = (*values.get("deny_read", ()), *values.get("deny_read" + _AFTER, ()))
    allow_read = (*values.get("allow_read", ()), *values.get("allow_read" + _AFTER, ()))
    allow_domain = (*values.get("allow_domain", ()), *values.get("allow_domain" + _AFTER, ()))
    unprotect = (*values.get("unprotect", ()), *values.get("unprotect" + _AFTER, ()))
    return Flags(
        root=text("root"),
        allow_env=tuple(allow_env),
        command_timeout=text("command_timeout"),
        max_read_bytes=text("max_read_bytes"),
        max_write_bytes=text("max_write_bytes"),
        max_output_bytes=text("max_output_bytes"),
        max_edit_bytes=text("max_edit_bytes"),
        sandbox=text("sandbox"),
        allow_network=bool(values.get("allow_network") or values.get("allow_network" + _AFTER)),
        allow_write=tuple(allow_write),
        max_processes=text("max_processes"),
        max_memory=text("max_memory"),
        max_server_memory=text("max_server_memory"),
        deny_read=tuple(deny_read),
        allow_read=tuple(allow_read),
        settings=text("settings"),
        allow_domain=tuple(allow_domain),
        unprotect=tuple(unprotect),
        journal_max_bytes=text("journal_max_bytes"),
        journal_max_age=text("journal_max_age"),
        allow_private_address=bool(
            values.get("allow_private_address") or values.get("allow_private_address" + _AFTER)
        ),
    )


def resolve_settings(
    flags: Flags, environ: Mapping[str, str] | None = None, file: SettingsFile | None = None
) -> Settings:
    """Parse and validate ``flags`` over ``environ`` (``os.environ`` by default).

    The root follows ``resolve_config`` (flag, ``SPICE_AGENT_WORKTREE``, the
    current directory). ``--allow-env`` names, when given, replace
    ``SPICE_AGENT_ALLOW_ENV``'s; either adds to the default allowlist. Raises
    ``SettingsError`` with one fixed line naming what is wrong.

    The settings file (``--settings``, ``SPICE_AGENT_SETTINGS``, else the default where it
    exists; ``file``: the one already watched) adds its rules to the flags' (contract 12.2).
    """
    source = os.environ if environ is None else environ
    if flags.root == "":  # resolve_config would take the environment or the cwd for it
        raise SettingsError(EMPTY_ROOT)
    try:
        base = resolve_config(flags.root, source)
    except ValueError:
        raise SettingsError(UNUSABLE_ROOT) from None
    fields: dict[str, object] = {}
    timeout = _chosen(
        flags.command_timeout, _COMMAND_TIMEOUT_FLAG, source, COMMAND_TIMEOUT_VARIABLE
    )
    if timeout is not None:
        fields["command_timeout"] = _judged(
            base.root, "command_timeout", _seconds(*timeout), timeout[1]
        )
    for field, flag, variable in _BYTES_FIELDS:
        chosen = _chosen(getattr(flags, field), flag, source, variable)
        if chosen is not None:
            fields[field] = _judged(base.root, field, _whole(*chosen), chosen[1])
    rules, watched = _rules(flags, source, base.root, file)
    filed = f"settings file {rules.path}"
    said: list[tuple[str, str]] = []
    names = allowed_names(flags.allow_env, source)
    names_filed = from_file(rules, "allow_env", allowed_names, {})
    env_origin = ALLOW_ENV_FLAG if flags.allow_env else ALLOW_ENV_VARIABLE
    fields["environment_allowlist"] = tuple(
        dict.fromkeys((*base.environment_allowlist, *HOST_VARIABLES, *names, *names_filed))
    )
    writes = allow_write(flags.allow_write, source, base.root)
    writes_filed = from_file(rules, "allow_write", filed_writes, (base.root, writes))
    if writes_filed:  # a flag's link beneath a place only the file names is refused too
        writes = allow_write(flags.allow_write, source, base.root, writes_filed)
    given = (*flags.unprotect, *rules.values("unprotect"))
    try:
        fields["protected_paths"] = settings_policy(
            flags.unprotect, rules, base.root, (*writes, *writes_filed)
        )
    except UnprotectError as error:
        raise SettingsError(str(error)) from None
    config = Config(base.root, **fields)  # type: ignore[arg-type]
    write_origin = ALLOW_WRITE_FLAG if flags.allow_write else ALLOW_WRITE_VARIABLE
    denied = deny_read(flags.deny_read, base.root)
    denied_filed = from_file(rules, "deny_read", deny_read, base.root)
    shown = allow_read(flags.allow_read, source)
    shown_filed = from_file(rules, "allow_read", allow_read, source)
    authorities = from_file(rules, "ca_files", ca_files, None)
    for key, values, origin in (
        ("allow_env", names, env_origin),
        ("allow_env", names_filed, filed),
        ("allow_write", writes, write_origin),
        ("allow_write", writes_filed, filed),
        ("deny_read", denied, _DENY_READ_FLAG),
        ("deny_read", denied_filed, filed),
        ("allow_read", shown, _ALLOW_READ_FLAG),
        ("allow_read", shown_filed, filed),
        ("unprotect", flags.unprotect, UNPROTECT_FLAG),
        ("unprotect", rules.values("unprotect"), filed),
        ("ca_files", authorities, filed),
    ):
        said += [(f"{key} {value}", origin) for value in values]
    processes = _chosen(flags.max_processes, "--max-processes", source, MAX_PROCESSES_VARIABLE)
    if processes is None and rules.max_processes is not None:
        processes = (str(rules.max_processes), rules.where("max_processes"))
    memory = _chosen(flags.max_memory, "--max-memory", source, MAX_MEMORY_VARIABLE)
    if memory is None and rules.max_memory is not None:
        memory = (rules.max_memory, rules.where("max_memory"))
    server = _chosen(
        flags.max_server_memory, "--max-server-memory", source, MAX_SERVER_MEMORY_VARIABLE
    )
    bounds = (("max_processes", processes), ("max_memory", memory))
    for key, chosen in (*bounds, ("max_server_memory", server)):
        said += [] if chosen is None else [(f"{key} {chosen[0].strip()}", chosen[1])]
    per_call, whole = max_memory(memory), max_memory(server)
    problem = server_memory_problem(
        None if per_call is None or memory is None else (per_call, memory[1]),
        None if whole is None or server is None else (whole, server[1]),
        host_memory(),
    )
    if problem is not None:
        raise SettingsError(problem)
    domains = _domains(flags, source, rules, said)
    return Settings(
        config,
        _sandbox(flags.sandbox, source),
        _allow_network(flags, source),
        tuple(dict.fromkeys((*writes, *writes_filed))),
        max_processes(processes),
        per_call,
        tuple(dict.fromkeys((*denied, *denied_filed))),
        tuple(dict.fromkeys((*shown, *shown_filed))),
        domains,
        given,
        watched,
        authorities,
        tuple(said),
        journal_bounds(flags.journal_max_bytes, flags.journal_max_age, rules),
        whole,
    )


def _rules(
    flags: Flags, source: Mapping[str, str], root: str, file: SettingsFile | None
) -> tuple[FileRules, str | None]:
    """The settings file's rules now (``file``: the one already watched) and the path to
    watch (the default one even while it does not exist); a file that cannot be used
    stops the start (or refuses the call)."""
    try:
        if file is not None:
            return checked_rules(file), file.path
        path, named = settings_path(flags.settings, source, home_directory(source))
        places = (root, *flags.allow_write)
        if path is not None and not named and lies_beneath(path, places):
            # The default place is inside the worktree (a HOME there): a command could
            # write it, so it is never used nor watched, and it blocks nothing (R6-14).
            if os.path.lexists(path):
                _log.warning(DEFAULT_BENEATH, path)
            return FileRules(), None
        opened = open_settings_file(path, named, places)
        watched = path if path is not None and os.path.isabs(path) else None
        return checked_rules(opened), watched
    except SettingsFileError as error:
        raise SettingsError(str(error)) from None


def _chosen(
    flag_value: str | None, flag: str, source: Mapping[str, str], variable: str
) -> tuple[str, str] | None:
    """The text to use and where it came from: the flag, else a non-empty variable."""
    if flag_value is not None:
        return flag_value, flag
    from_environment = source.get(variable, "")
    if from_environment == "":
        return None
    return from_environment, variable


def _seconds(text: str, origin: str) -> float:
    cleaned = text.strip()
    if len(cleaned) > MAXIMUM_VALUE_LENGTH or _DECIMAL.fullmatch(cleaned) is None:
        raise SettingsError(f"{origin} must be a decimal number of seconds")
    return float(cleaned)


def _whole(text: str, origin: str) -> int:
    cleaned = text.strip()
    if len(cleaned) > MAXIMUM_VALUE_LENGTH or _WHOLE.fullmatch(cleaned) is None:
        raise SettingsError(f"{origin} must be a whole number of bytes")
    return int(cleaned)


def _judged(root: str, field: str, value: object, origin: str) -> object:
    """Let ``Config`` judge one value against its bounds; its fixed text names the bound."""
    try:
        Config(root, **{field: value})  # type: ignore[arg-type]
    except ValueError as error:
        raise SettingsError(f"{origin}: {error}") from None
    return value


def _keyword(text: str) -> str:
    """The one case rule of keyword values: blanks around them and case do not count."""
    return text.strip().lower()


def _sandbox(from_flag: str | None, source: Mapping[str, str]) -> str:
    if from_flag is not None:
        text, origin = from_flag, _SANDBOX_FLAG
    else:
        text, origin = source.get(SANDBOX_ENVIRONMENT_VARIABLE, ""), SANDBOX_ENVIRONMENT_VARIABLE
        if _keyword(text) == "":
            return DEFAULT_MODE
    try:
        return parse_mode(_keyword(text))
    except ValueError:
        raise SettingsError(f"{origin} must be one of auto, workspace, off") from None


def _allow_network(flags: Flags, source: Mapping[str, str]) -> bool:
    return flags.allow_network or _switch(source, ALLOW_NETWORK_VARIABLE)


def _switch(source: Mapping[str, str], variable: str) -> bool:
    text = _keyword(source.get(variable, ""))
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{variable} must be 1 or 0 (true/false, yes/no, on/off)")


def _domains(
    flags: Flags,
    source: Mapping[str, str],
    rules: FileRules | None = None,
    origins: list[tuple[str, str]] | None = None,
) -> DomainPolicy:
    """``--allow-domain`` patterns (else the variable's) and ``--allow-private-address``;
    a chosen preset admits the hosts the host's configuration names for it too
    (``_netpolicy._hostconfig``, contract 12.2).

    A bad pattern is named in the error (it is the server's own configuration).
    """
    rules = FileRules() if rules is None else rules
    said = [] if origins is None else origins
    if flags.allow_domain:
        raw, origin = list(flags.allow_domain), "--allow-domain"
    else:
        raw = [item for item in source.get(ALLOW_DOMAINS_VARIABLE, "").split(",") if item.strip()]
        origin = ALLOW_DOMAINS_VARIABLE
    said += [(f"allow_domains {text.strip()}", origin) for text in raw]
    filed = list(rules.values("allow_domains"))
    try:
        parse_patterns(filed)
    except PatternError as error:
        raise SettingsError(f"{rules.where('allow_domains')}: {error}") from None
    said += [(f"allow_domains {text.strip()}", f"settings file {rules.path}") for text in filed]
    raw += filed
    private = flags.allow_private_address or _switch(source, ALLOW_PRIVATE_ADDRESS_VARIABLE)
    if private:
        said.append(("allow_private_address", "--allow-private-address or its variable"))
    elif rules.allow_private_address:
        private = True
        said.append(("allow_private_address", f"settings file {rules.path}"))
    host = read_host_configuration(source, home_directory(source))
    configured = {name: host.authorities(name) for name in ("python", "npm")}
    came = {found.authority: f"{found.preset}, from {found.origin}" for found in host.hosts}
    try:
        policy = policy_of(raw, private, configured, came)
    except PatternError as error:
        raise SettingsError(str(error)) from None
    for name in dict.fromkeys(
        text.strip().lower() for text in raw if text.strip().lower() in PRESETS
    ):
        said += [(f"allow_domains {host}", f"preset {name}") for host in PRESETS[name]]
    said += [(f"allow_domains {p}", f"host configuration: {w}") for p, w in policy.origins]
    return policy
