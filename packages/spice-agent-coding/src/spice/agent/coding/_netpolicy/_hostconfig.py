"""What the server's host configures for installers: index hosts, registries, its CA.

Contract 12.2. Behind a company's mirror and re-signing certificate authority the host
already says where pip, uv and npm fetch from and which CA signs what they fetch; a
contained command should not need a flag for each. Read once at start, from the
server's own environment and the user's and the system's configuration files (never
the worktree's: an agent writes those):

- the index hosts: ``PYTHON_INDEX_VARIABLES``, pip's ``pip.conf`` (``index-url``,
  ``extra-index-url``) and uv's ``uv.toml`` (``index-url``, ``extra-index-url``,
  ``[[index]] url``, ``[pip]``): the ``python`` preset admits them too;
- the npm registry: ``NPM_REGISTRY_VARIABLES`` and ``~/.npmrc``'s ``registry`` lines
  (nothing else of that file is read: it holds tokens): the ``npm`` preset admits it;
- the certificate authority: the files ``CERTIFICATE_VARIABLES`` name, pip's ``cert``
  and ``.npmrc``'s ``cafile``: readable by a contained command.

Pure but for reading those files (bounded: ``MAXIMUM_CONFIGURATION_BYTES`` each, a
file that cannot be read or parsed counts as absent). Platform-neutral.
"""

from __future__ import annotations

import configparser
import os
import tomllib
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, final

from ._domains import address_of, normal_host

__all__ = [
    "CERTIFICATE_VARIABLES",
    "HOST_VARIABLES",
    "MAXIMUM_CONFIGURATION_BYTES",
    "MAXIMUM_CONFIGURED_HOSTS",
    "NPM_REGISTRY_VARIABLES",
    "PYTHON_INDEX_VARIABLES",
    "Configured",
    "HostConfiguration",
    "authority_of",
    "read_host_configuration",
    "read_regular",
]

CERTIFICATE_VARIABLES: Final = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
)
"""The variables that name the host's certificate authority (public certificates)."""

PYTHON_INDEX_VARIABLES: Final = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
)
"""The variables that name Python package indexes (pip's and uv's)."""

NPM_REGISTRY_VARIABLES: Final = ("npm_config_registry", "NPM_CONFIG_REGISTRY")
"""The variables that name the npm registry."""

HOST_VARIABLES: Final = (*CERTIFICATE_VARIABLES, *PYTHON_INDEX_VARIABLES, *NPM_REGISTRY_VARIABLES)
"""What reaches every command by default besides the allow-list: where the host's
installers fetch from and which CA they trust (no secret by design)."""

MAXIMUM_CONFIGURATION_BYTES: Final = 65_536
"""At most this much of one configuration file is read (a larger one counts as absent)."""

MAXIMUM_CONFIGURED_HOSTS: Final = 32
"""At most this many configured hosts are admitted (the rest are ignored)."""

_SCHEMES: Final = frozenset({"http", "https"})
_PIP_SECTIONS: Final = ("global", "install", "download")


@final
@dataclass(frozen=True, slots=True)
class Configured:
    """One host the host's configuration names: for which preset, and where it said so."""

    preset: str
    authority: str
    """``host`` (ports 80 and 443), or ``host:port`` where the URL names another port."""
    origin: str
    """The variable's name or the configuration file's path."""


@final
@dataclass(frozen=True, slots=True)
class HostConfiguration:
    """What the host configures for installers (see the module docstring)."""

    hosts: tuple[Configured, ...] = ()
    certificates: tuple[str, ...] = ()
    """Real paths of the CA files and directories named, that exist."""
    npm_registry: str | None = None
    """The registry URL ``~/.npmrc`` names, set as ``npm_config_registry`` for commands
    (which do not see that file) when the environment names none."""

    def authorities(self, preset: str) -> tuple[str, ...]:
        """The configured hosts of ``preset``, without repeats."""
        return tuple(dict.fromkeys(h.authority for h in self.hosts if h.preset == preset))


def authority_of(url: str) -> str | None:
    """``host`` or ``host:port`` of an ``http``/``https`` URL, else ``None`` (a ``file://``
    index, a path, text that is no URL). The port is kept only where it is not 80 or
    443 (a bare host allows those two)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in _SCHEMES or not parts.hostname:
        return None
    address = address_of(parts.hostname)
    host = address.compressed if address is not None else normal_host(parts.hostname)
    if host is None:
        return None
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None or port in {80, 443} else f"{shown}:{port}"


def read_regular(path: str, limit: int) -> bytes | None:
    """A regular file's bytes when it holds at most ``limit``, else ``None`` (never a
    FIFO's wait: opened without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        import stat  # noqa: PLC0415 - small

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if len(data) > limit else data


def _read(path: str) -> str | None:
    """The text of a regular file of at most ``MAXIMUM_CONFIGURATION_BYTES``, else ``None``."""
    data = read_regular(path, MAXIMUM_CONFIGURATION_BYTES)
    return None if data is None else data.decode("utf-8", "replace")


def _words(value: str) -> list[str]:
    """A list variable's entries (blank-separated); uv's ``name=url`` keeps its URL."""
    found = []
    for word in value.split():
        name, equals, rest = word.partition("=")
        found.append(rest if equals and "://" not in name else word)
    return found


def _config_home(environ: Mapping[str, str], home: str | None) -> str | None:
    chosen = environ.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(chosen):
        return chosen
    return None if home is None else os.path.join(home, ".config")


def _pip_files(environ: Mapping[str, str], home: str | None) -> list[str]:
    files = ["/etc/pip.conf", "/etc/xdg/pip/pip.conf"]
    config_home = _config_home(environ, home)
    if home is not None:
        files.append(os.path.join(home, ".pip", "pip.conf"))
    if config_home is not None:
        files.append(os.path.join(config_home, "pip", "pip.conf"))
    chosen = environ.get("PIP_CONFIG_FILE", "")
    if os.path.isabs(chosen):
        files.append(chosen)
    return files


def _uv_files(environ: Mapping[str, str], home: str | None) -> list[str]:
    files = ["/etc/uv/uv.toml", "/etc/xdg/uv/uv.toml"]
    config_home = _config_home(environ, home)
    if config_home is not None:
        files.append(os.path.join(config_home, "uv", "uv.toml"))
    chosen = environ.get("UV_CONFIG_FILE", "")
    if os.path.isabs(chosen):
        files.append(chosen)
    return files


def _pip_config(path: str) -> tuple[list[str], list[str]]:
    """``(index URLs, CA files)`` of one ``pip.conf``."""
    text = _read(path)
    if text is None:
        return [], []
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text, source=path)
    except configparser.Error:
        return [], []
    urls: list[str] = []
    certificates: list[str] = []
    for section in _PIP_SECTIONS:
        if not parser.has_section(section):
            continue
        for key, value in parser.items(section):
            name = key.replace("_", "-")
            if name in {"index-url", "extra-index-url"}:
                urls += value.split()
            elif name == "cert":
                certificates.append(value.strip())
    return urls, certificates


def _uv_config(path: str) -> list[str]:
    """The index URLs of one ``uv.toml``."""
    text = _read(path)
    if text is None:
        return []
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    urls: list[str] = []
    for table in (document, document.get("pip")):
        if not isinstance(table, dict):
            continue
        for key in ("index-url", "extra-index-url", "find-links"):
            value = table.get(key)
            urls += [value] if isinstance(value, str) else []
            if isinstance(value, list):
                urls += [item for item in value if isinstance(item, str)]
        indexes = table.get("index")
        if isinstance(indexes, list):
            urls += [
                entry["url"]
                for entry in indexes
                if isinstance(entry, dict) and isinstance(entry.get("url"), str)
            ]
    return urls


def _npmrc(path: str) -> tuple[list[str], list[str]]:
    """``(registry URLs, CA files)`` of one ``.npmrc``: ``registry`` and ``@scope:registry``
    lines and ``cafile``, nothing else (the file holds tokens)."""
    text = _read(path)
    if text is None:
        return [], []
    registries: list[str] = []
    certificates: list[str] = []
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or key.startswith((";", "#")):
            continue
        if key == "registry" or (key.startswith("@") and key.endswith(":registry")):
            registries.append(value.strip().strip("\"'"))
        elif key == "cafile":
            certificates.append(value.strip().strip("\"'"))
    return registries, certificates


def _no_user(url: str) -> bool:
    """Whether ``url`` carries no user or password (a registry's is a secret)."""
    parts = urllib.parse.urlsplit(url.strip())
    return parts.username is None and parts.password is None


def _hosts(preset: str, urls: Iterable[str], origin: str) -> Iterator[Configured]:
    for url in urls:
        authority = authority_of(url)
        if authority is not None:
            yield Configured(preset, authority, origin)


def _certificates(paths: Iterable[str]) -> tuple[str, ...]:
    found: list[str] = []
    for path in paths:
        if not os.path.isabs(path) or "\0" in path:
            continue
        real = os.path.realpath(path)
        if real != os.sep and os.path.exists(real) and real not in found:
            found.append(real)
    return tuple(found)


def read_host_configuration(environ: Mapping[str, str], home: str | None) -> HostConfiguration:
    """What ``environ`` and the user's and system's configuration files say (start only)."""
    hosts: list[Configured] = []
    certificates = [environ.get(name, "") for name in CERTIFICATE_VARIABLES]
    for name in PYTHON_INDEX_VARIABLES:
        hosts += _hosts("python", _words(environ.get(name, "")), name)
    for path in _pip_files(environ, home):
        urls, cert = _pip_config(path)
        hosts += _hosts("python", urls, path)
        certificates += cert
    for path in _uv_files(environ, home):
        hosts += _hosts("python", _uv_config(path), path)
    for name in NPM_REGISTRY_VARIABLES:
        hosts += _hosts("npm", _words(environ.get(name, "")), name)
    npm_registry: str | None = None
    npmrc = environ.get("npm_config_userconfig", "")
    if not os.path.isabs(npmrc):
        npmrc = "" if home is None else os.path.join(home, ".npmrc")
    if npmrc:
        registries, cert = _npmrc(npmrc)
        hosts += _hosts("npm", registries, npmrc)
        certificates += cert
        plain = [url for url in registries if authority_of(url) is not None and _no_user(url)]
        if plain and not any(environ.get(name) for name in NPM_REGISTRY_VARIABLES):
            npm_registry = plain[0]
    unique = list(dict.fromkeys(hosts))[:MAXIMUM_CONFIGURED_HOSTS]
    return HostConfiguration(tuple(unique), _certificates(certificates), npm_registry)
