"""Which hosts a contained command may reach through the server's proxy (contract 11.1).

``--allow-domain PATTERN`` (repeatable; ``SPICE_AGENT_ALLOW_DOMAINS`` comma-separated)
names what the proxy (``_posix._net._proxy``) lets through; ``--allow-private-address`` lets
names (and named addresses) that resolve to non-global addresses through too. Pure and
platform-neutral: this module parses patterns and judges a host, a port and the
addresses it resolved to; it never resolves or connects.

A pattern is one of:

- a preset: ``python``, ``npm``, ``crates``, ``go``, ``github`` (``PRESETS`` lists their
  hosts), each host on ports 80 and 443;
- a host name (``pypi.org``): that host alone, on ports 80 and 443;
- a wildcard (``*.example.com``): every name beneath ``example.com`` (subdomains only,
  never ``example.com`` itself), on ports 80 and 443; never over a single label
  (``*.com``);
- an IP address (``192.0.2.7``, ``[2001:db8::1]``): that address alone, on 80 and 443;
- any of the last three with ``:PORT``: that port only;
- any of those with ``:PORT/tcp`` (``github.com:22/tcp``, git over ssh): that port
  only, and a tunnel there carries raw bytes. Every other tunnel carries TLS alone:
  its first record must be a ClientHello for an allowed name (``_posix._net._proxy``).

Anything else (a URL, a path, a bare ``*``, a port out of range, a label that is not
letters, digits and inner hyphens) is refused with ``PatternError`` naming the pattern.
A single word that is no preset (``pythn``, ``localhost``) is refused too, naming the
nearest preset (a typo would otherwise allow nothing, silently); a single-label host
is allowed with its port (``db:5432``).

Contract 12.2: the presets ``python`` and ``npm`` also admit the index and registry
hosts the server's host configures (``_netpolicy._hostconfig``), whatever their address
(``DomainPolicy.configured``), and a refused host that belongs to a preset is named
as the preset (``DomainPolicy.preset_of``).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, final

__all__ = [
    "DEFAULT_PORTS",
    "MAXIMUM_HOST_LENGTH",
    "MAXIMUM_PATTERNS",
    "PRESETS",
    "RAW_SUFFIX",
    "DomainPolicy",
    "Pattern",
    "PatternError",
    "address_of",
    "global_address",
    "normal_host",
    "parse_pattern",
    "parse_patterns",
    "pattern_allowing",
    "policy_of",
]

DEFAULT_PORTS: Final = frozenset({80, 443})
"""The ports a pattern without ``:PORT`` allows (HTTP and HTTPS)."""

MAXIMUM_PATTERNS: Final = 256
"""At most this many patterns (presets count as one each)."""

MAXIMUM_PATTERN_LENGTH: Final = 300
"""A pattern's text has at most this many characters."""

MAXIMUM_HOST_LENGTH: Final = 253
"""A DNS name has at most 253 characters (RFC 1035, without the root's dot)."""

RAW_SUFFIX: Final = "/tcp"
"""What ends a pattern whose port carries raw TCP (it must name that port)."""

_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT: Final = re.compile(r"[0-9]{1,5}")

PRESETS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "python": ("pypi.org", "files.pythonhosted.org"),
        "npm": ("registry.npmjs.org",),
        "crates": ("crates.io", "index.crates.io", "static.crates.io"),
        "go": ("proxy.golang.org", "sum.golang.org"),
        "github": (
            "github.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "release-assets.githubusercontent.com",
            "raw.githubusercontent.com",
        ),
    }
)
"""The registries agents need, by name: what ``--allow-domain NAME`` allows (80 and 443).

``python``: the index and its files (pip, uv); ``npm``: the npm registry; ``crates``:
the API, the sparse index and the downloads; ``go``: the module proxy and the checksum
database; ``github``: ``git clone`` over HTTPS, archives, release assets and raw files.
"""


class PatternError(ValueError):
    """A pattern that is not a preset, host name, wildcard, address or ``host:port``.

    The message names the pattern (it is the server's own configuration, not a
    command's output), shortened to ``MAXIMUM_PATTERN_LENGTH`` characters; for a single
    word it names the nearest preset.
    """

    def __init__(self, text: str, *, word: bool = False) -> None:
        shown = text[:MAXIMUM_PATTERN_LENGTH].encode("ascii", "backslashreplace").decode()
        if word:
            message = (
                f"--allow-domain {shown!r} is not a preset: did you mean "
                f"{nearest_preset(shown)!r}? (the presets are " + ", ".join(PRESETS) + "; "
                "a host name has a dot, or a :PORT after a single label)"
            )
        else:
            message = (
                f"--allow-domain {shown!r} is not a host name, a wildcard (*.example.com), "
                "an address, a host:port, a host:port/tcp or a preset (" + ", ".join(PRESETS) + ")"
            )
        super().__init__(message)
        self.pattern = shown


def nearest_preset(word: str) -> str:
    """The preset whose name is nearest to ``word`` (by ``difflib``'s ratio; ties: order)."""
    lowered = word.lower()
    return max(PRESETS, key=lambda name: difflib.SequenceMatcher(None, lowered, name).ratio())


def normal_host(text: str) -> str | None:
    """``text`` as a lower-case DNS name without a trailing dot, or ``None`` when it is not one.

    Only ASCII letters, digits and inner hyphens in labels of 1 to 63 characters, at
    most ``MAXIMUM_HOST_LENGTH`` in all (an internationalised name arrives in its
    ``xn--`` form). An IP address is not a name (``address_of`` reads those).
    """
    if not text or len(text) > MAXIMUM_HOST_LENGTH + 1 or not text.isascii():
        return None
    host = text.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > MAXIMUM_HOST_LENGTH:
        return None
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return None
    if labels[-1].isdigit():
        return None  # "1.2.3.4" or "10": addresses (or nothing), never names
    return host


def address_of(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``text`` spells (an IPv6 one with or without brackets), else ``None``.

    Only the canonical dotted quad for IPv4 (``ipaddress`` refuses ``010.1.1.1`` and
    ``0x7f.1``); no zone index (``fe80::1%eth0``).
    """
    if not text or len(text) > 64 or not text.isascii() or "%" in text:
        return None
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return ipaddress.ip_address(inner)
    except ValueError:
        return None


def global_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is a public unicast address: none of loopback, private,
    link-local, shared (CGNAT), multicast, unspecified, reserved, documentation.

    An IPv4-mapped, 6to4 or Teredo IPv6 address is judged by the IPv4 address it
    carries as well (``::ffff:127.0.0.1`` is loopback, whatever Python's version says).
    """
    if isinstance(address, ipaddress.IPv6Address):
        carried = [address.ipv4_mapped, address.sixtofour]
        teredo = address.teredo
        if teredo is not None:
            carried.extend(teredo)
        if any(inner is not None and not global_address(inner) for inner in carried):
            return False
        if address.ipv4_mapped is not None:
            return True
    return (
        address.is_global
        and not address.is_multicast
        and not address.is_unspecified
        and not address.is_reserved
        and not address.is_loopback
        and not address.is_link_local
        and not address.is_private
    )


@final
@dataclass(frozen=True, slots=True)
class Pattern:
    """One allowed host (or address), or every name beneath a domain, and its ports.

    ``host`` is a normal name (``normal_host``) or an address's compressed text;
    ``wildcard`` says subdomains of ``host`` only; ``ports`` empty means
    ``DEFAULT_PORTS``; ``raw`` (``:PORT/tcp``, a ``port`` always) lets a tunnel there
    carry raw bytes instead of TLS alone.
    """

    host: str
    wildcard: bool = False
    port: int | None = None
    address: bool = False
    raw: bool = False

    @property
    def ports(self) -> frozenset[int]:
        return DEFAULT_PORTS if self.port is None else frozenset({self.port})

    def matches(self, host: str, port: int) -> bool:
        """Whether this pattern allows ``host`` (normal, or an address's compressed text)."""
        if port not in self.ports:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        text = ("*." if self.wildcard else "") + (
            f"[{self.host}]" if ":" in self.host else self.host
        )
        if self.port is None:
            return text
        return f"{text}:{self.port}" + (RAW_SUFFIX if self.raw else "")


def _split_port(text: str) -> tuple[str, int | None] | None:
    """``(host part, port or None)``; ``None`` when a port is there but not 1..65535."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            return None
        rest = text[close + 1 :]
        if not rest:
            return text, None
        if not rest.startswith(":"):
            return None
        return _with_port(text[: close + 1], rest[1:])
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return _with_port(host, port)
    return text, None  # no colon, or an unbracketed IPv6 address


def _with_port(host: str, port: str) -> tuple[str, int | None] | None:
    if _PORT.fullmatch(port) is None or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


def parse_pattern(text: str) -> tuple[Pattern, ...]:
    """The patterns ``text`` names (several for a preset); ``PatternError`` otherwise."""
    cleaned = text.strip()
    if cleaned.lower() in PRESETS:
        return tuple(Pattern(host) for host in PRESETS[cleaned.lower()])
    if not cleaned or len(cleaned) > MAXIMUM_PATTERN_LENGTH:
        raise PatternError(text)
    raw = cleaned.lower().endswith(RAW_SUFFIX)
    split = _split_port(cleaned[: -len(RAW_SUFFIX)] if raw else cleaned)
    if split is None or (raw and split[1] is None):
        raise PatternError(text)  # raw TCP names its port: never 80 and 443 at once
    host_text, port = split
    address = address_of(host_text)
    if address is not None:
        return (Pattern(address.compressed, port=port, address=True, raw=raw),)
    wildcard = host_text.startswith("*.")
    host = normal_host(host_text[2:] if wildcard else host_text)
    if host is None or (wildcard and "." not in host):
        raise PatternError(text)  # "*.com" would be a whole top-level domain
    if not wildcard and port is None and "." not in host:
        raise PatternError(text, word=True)  # "pythn": a typo of a preset, not a host
    return (Pattern(host, wildcard=wildcard, port=port, raw=raw),)


def parse_patterns(texts: Iterable[str]) -> tuple[Pattern, ...]:
    """Every pattern of ``texts`` in order, without repeats; ``PatternError`` for the first
    bad one, or when there are more than ``MAXIMUM_PATTERNS``."""
    chosen: list[Pattern] = []
    for count, text in enumerate(texts, start=1):
        if count > MAXIMUM_PATTERNS:
            raise PatternError(f"(more than {MAXIMUM_PATTERNS} patterns)")
        for pattern in parse_pattern(text):
            if pattern not in chosen:
                chosen.append(pattern)
    return tuple(chosen)


@final
@dataclass(frozen=True, slots=True)
class DomainPolicy:
    """What the proxy lets a call reach: ``patterns``, and non-global addresses or not.

    The proxy asks twice: ``permits(host, port)`` before it resolves (a name or an
    address must match a pattern), then ``reachable(addresses)`` for what the name
    resolved to (every address global, unless ``allow_private``); for a tunnel,
    ``raw(host, port)`` says whether it may carry raw bytes (a ``/tcp`` pattern names
    it) or TLS alone.
    """

    patterns: tuple[Pattern, ...] = ()
    allow_private: bool = False
    configured: tuple[Pattern, ...] = ()
    """Hosts the host's configuration names for a chosen preset (also in ``patterns``):
    reachable whatever their address, since the user configured them."""
    presets: tuple[tuple[str, Pattern], ...] = ()
    """``(preset, pattern)`` of the configured hosts, chosen or not: with ``PRESETS``'
    own, what a refused host is hinted as."""
    origins: tuple[tuple[str, str], ...] = ()
    """``(pattern, where it came from)`` of the configured ones, for ``tools``."""

    def permits(self, host: str, port: int) -> bool:
        """Whether a pattern names ``host`` (a normal name or an address) on ``port``."""
        return any(True for _ in self._naming(host, port))

    def raw(self, host: str, port: int) -> bool:
        """Whether a ``/tcp`` pattern names ``host`` on ``port``: a tunnel there may carry
        raw bytes (else only TLS, from a ClientHello on)."""
        return any(pattern.raw for pattern in self._naming(host, port))

    def _naming(self, host: str, port: int) -> Iterator[Pattern]:
        """The patterns that name ``host`` on ``port``."""
        address = address_of(host)
        if address is not None:
            compressed = address.compressed
            return (p for p in self.patterns if p.address and p.matches(compressed, port))
        name = normal_host(host)
        if name is None:
            return iter(())
        return (p for p in self.patterns if not p.address and p.matches(name, port))

    def reachable(
        self,
        addresses: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address],
        host: str | None = None,
        port: int | None = None,
    ) -> bool:
        """Whether every one of ``addresses`` (``host``'s, on ``port``) may be connected to
        (at least one given): global ones, any where a configured host is named."""
        listed = list(addresses)
        if not listed:
            return False
        if host is not None and port is not None and _matching(self.configured, host, port):
            return True
        return self.allow_private or all(global_address(a) for a in listed)

    def preset_of(self, authority: str) -> str | None:
        """The preset that admits ``authority`` (``host:port`` as the proxy records it)."""
        split = _split_port(authority)
        if split is None:
            return None
        host, port = split
        if port is None:
            return None
        built_in = [(name, Pattern(h)) for name, hosts in PRESETS.items() for h in hosts]
        for name, pattern in (*built_in, *self.presets):
            if _matching((pattern,), host, port):
                return name
        return None

    def describe(self) -> list[str]:
        """The patterns as text, for ``tools``."""
        return [str(pattern) for pattern in self.patterns]

    def describe_configured(self) -> list[str]:
        """The configured hosts admitted, each with its preset and origin, for ``tools``."""
        said = dict(self.origins)
        return [f"{p} ({said.get(str(p), 'the host')})" for p in self.configured]


def _matching(patterns: Iterable[Pattern], host: str, port: int) -> bool:
    """Whether one of ``patterns`` names ``host`` (a name or an address) on ``port``."""
    address = address_of(host)
    if address is not None:
        return any(p.address and p.matches(address.compressed, port) for p in patterns)
    name = normal_host(host)
    return name is not None and any(not p.address and p.matches(name, port) for p in patterns)


def _configured_pattern(authority: str) -> Pattern | None:
    """The pattern of one configured ``host`` or ``host:port`` (a single label allowed)."""
    split = _split_port(authority)
    if split is None:
        return None
    host_text, port = split
    address = address_of(host_text)
    if address is not None:
        return Pattern(address.compressed, port=port, address=True)
    host = normal_host(host_text)
    return None if host is None else Pattern(host, port=port)


def policy_of(
    texts: Iterable[str],
    allow_private: bool = False,
    configured: Mapping[str, Iterable[str]] | None = None,
    origins: Mapping[str, str] | None = None,
) -> DomainPolicy:
    """The policy of the ``--allow-domain`` ``texts``; ``configured``: the hosts the host's
    configuration names per preset (``host`` or ``host:port``), admitted with their preset
    whatever their address; ``origins``: where each configured host came from (for
    ``tools``). ``PatternError`` for the first bad text."""
    listed = list(texts)
    patterns = list(parse_patterns(listed))
    extra = {
        name: tuple(p for p in map(_configured_pattern, hosts) if p is not None)
        for name, hosts in (configured or {}).items()
        if name in PRESETS
    }
    chosen = {text.strip().lower() for text in listed} & set(PRESETS)
    admitted: list[Pattern] = []
    for name in sorted(chosen):
        admitted += [p for p in extra.get(name, ()) if p not in admitted]
    patterns += [p for p in admitted if p not in patterns]
    presets = [(name, p) for name, found in extra.items() for p in found]
    said = [(str(p), origins[str(p)]) for p in admitted if origins and str(p) in origins]
    return DomainPolicy(
        tuple(patterns), allow_private, tuple(admitted), tuple(presets), tuple(said)
    )


def pattern_allowing(authority: str) -> str:
    """The ``--allow-domain`` pattern that admits ``authority`` (``host:port``, an IPv6
    address in brackets, as the proxy records it): the host alone where the port is one
    of ``DEFAULT_PORTS``, else ``host:port``, since a bare host allows those ports only.
    Text that names no port comes back as it is."""
    split = _split_port(authority)
    return split[0] if split is not None and split[1] in DEFAULT_PORTS else authority
