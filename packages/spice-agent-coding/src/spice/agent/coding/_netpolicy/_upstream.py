"""The host's corporate proxy as the upstream of each call's proxy (contract 12.2).

Where egress goes only through a company's proxy, the server's own environment names it
(``HTTPS_PROXY``/``https_proxy`` for tunnels, ``HTTP_PROXY``/``http_proxy`` for plain
HTTP, ``NO_PROXY``/``no_proxy`` for what goes direct). The call's proxy
(``_posix._net._proxy``) still decides what is allowed (``DomainPolicy.permits``, before any
byte leaves); an allowed host is then reached through the upstream: ``CONNECT`` for a
tunnel, the absolute form for plain HTTP. Names are left to the upstream (a host behind
such a proxy often has no DNS for outside names), so the private-address guard is the
upstream's to keep; ``tools`` says so (``UpstreamProxies.report``).

Sans-IO: this module parses the variables, chooses the upstream for a request, and
makes and reads the heads; it never connects. Only ``http://`` upstreams (the usual
form); a user and password in the URL become ``Proxy-Authorization: Basic`` (never
logged, never reported).
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, final

from ._domains import address_of, normal_host
from ._head import HEAD_END, Request, origin_head

__all__ = [
    "MAXIMUM_NO_PROXY",
    "MAXIMUM_REPLY_BYTES",
    "Upstream",
    "UpstreamProxies",
    "absolute_head",
    "connect_head",
    "reply_status",
    "upstream_of",
]

MAXIMUM_NO_PROXY: Final = 64
"""At most this many ``NO_PROXY`` entries are read."""

MAXIMUM_REPLY_BYTES: Final = 16 * 1024
"""The longest head of the upstream's answer to ``CONNECT`` that is read."""

_DEFAULT_PORT: Final = 3128


@final
@dataclass(frozen=True, slots=True)
class Upstream:
    """One upstream proxy: where it listens, and its ``Proxy-Authorization`` value."""

    host: str
    port: int
    authorization: bytes | None = None

    def __repr__(self) -> str:  # never the credentials
        return f"Upstream({self.host!r}, {self.port})"

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _upstream(text: str) -> Upstream | None:
    """An ``http://[user:password@]host[:port]`` URL (a bare ``host:port`` too), else ``None``."""
    cleaned = text.strip()
    if not cleaned:
        return None
    if "://" not in cleaned:
        cleaned = "http://" + cleaned
    try:
        parts = urllib.parse.urlsplit(cleaned)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() != "http" or not parts.hostname or port == 0:
        return None
    address = address_of(parts.hostname)
    host = address.compressed if address is not None else normal_host(parts.hostname)
    if host is None:
        return None
    authorization = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}".encode("ascii")
    return Upstream(host, _DEFAULT_PORT if port is None else port, authorization)


@final
@dataclass(frozen=True, slots=True)
class UpstreamProxies:
    """The upstreams the server's environment names, and what goes direct."""

    https: Upstream | None = None
    http: Upstream | None = None
    no_proxy: tuple[str, ...] = ()

    def for_request(self, host: str, port: int, tunnel: bool) -> Upstream | None:
        """The upstream to reach ``host`` through (``None``: direct)."""
        chosen = self.https if tunnel else self.http
        if chosen is None or self._direct(host, port):
            return None
        return chosen

    def _direct(self, host: str, port: int) -> bool:
        name = host.lower().strip("[]")
        for entry in self.no_proxy:
            if entry == "*":
                return True
            text, _, wanted = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
            if wanted and (not wanted.isdigit() or int(wanted) != port):
                continue
            text = text.strip("[]").lower()
            if address_of(text) is not None:
                if address_of(name) == address_of(text):
                    return True
                continue
            suffix = text.lstrip("*").lstrip(".")
            if suffix and (name == suffix or name.endswith("." + suffix)):
                return True
        return False

    @property
    def active(self) -> bool:
        return self.https is not None or self.http is not None

    def report(self) -> dict[str, object]:
        """For ``tools``: where allowed hosts are reached through (no credentials)."""
        return {
            "https": None if self.https is None else self.https.authority,
            "http": None if self.http is None else self.http.authority,
            "no_proxy": list(self.no_proxy),
            "names": "resolved by the upstream proxy",
            "private_addresses": "the upstream proxy's to refuse (the server does not "
            "resolve names it sends there)",
        }


def upstream_of(environ: Mapping[str, str]) -> UpstreamProxies:
    """The upstreams of ``environ`` (lower-case names first, as curl reads them)."""

    def first(*names: str) -> str:
        return next((environ[name] for name in names if environ.get(name, "").strip()), "")

    secure = _upstream(first("https_proxy", "HTTPS_PROXY"))
    plain = _upstream(first("http_proxy", "HTTP_PROXY"))
    entries = [e.strip() for e in first("no_proxy", "NO_PROXY").split(",") if e.strip()]
    return UpstreamProxies(secure, plain, tuple(entries[:MAXIMUM_NO_PROXY]))


def _authorization(upstream: Upstream) -> list[bytes]:
    if upstream.authorization is None:
        return []
    return [b"Proxy-Authorization: " + upstream.authorization]


def connect_head(request: Request, upstream: Upstream) -> bytes:
    """The ``CONNECT`` head sent to ``upstream`` for the tunnel ``request`` checked."""
    authority = request.authority.encode("ascii")
    lines = [b"CONNECT " + authority + b" HTTP/1.1", b"Host: " + authority]
    return b"\r\n".join([*lines, *_authorization(upstream)]) + HEAD_END


def absolute_head(request: Request, upstream: Upstream) -> bytes:
    """The plain HTTP head sent to ``upstream``: ``origin_head``'s, with the target in
    absolute form (``http://host:port/path``) and the upstream's authorization."""
    head = origin_head(request)
    line, _, rest = head.partition(b"\r\n")
    method, path, version = line.split(b" ", 2)
    target = b"http://" + request.authority.encode("ascii") + path
    first = b" ".join((method, target, version))
    extra = b"".join(value + b"\r\n" for value in _authorization(upstream))
    return first + b"\r\n" + extra + rest


def reply_status(head: bytes) -> int | None:
    """The status of an upstream's answer head (``HTTP/1.x NNN ...``), else ``None``."""
    line = head.partition(b"\r\n")[0].split(b" ")
    if len(line) < 2 or line[0] not in {b"HTTP/1.0", b"HTTP/1.1"} or not line[1].isdigit():
        return None
    return int(line[1]) if len(line[1]) == 3 else None
