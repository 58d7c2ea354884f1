"""The proxy's request heads: a sans-IO parser and the head sent on for plain HTTP.

The proxy (``_posix._net._proxy``) reads a client's head (bounded, ``MAXIMUM_HEAD_BYTES``) and
hands the bytes here; nothing in this module reads, writes or resolves. Two forms are
understood, nothing else:

- ``CONNECT host:port HTTP/1.x`` (a tunnel, for TLS): the authority must name a port;
- ``METHOD http://host[:port]/path HTTP/1.x`` (plain HTTP, the absolute form a client
  sends to a proxy): the head sent on (``origin_head``) is in origin form, with
  ``Host`` set to the authority the proxy checked (a client's own ``Host`` is
  dropped: it cannot name another site behind the same address), hop-by-hop headers
  dropped, and ``Connection: close`` (one request per connection). Its body is
  framed by the proxy, not by what ``Connection`` names: ``Content-Length`` (one
  value) or ``Transfer-Encoding: chunked`` (never both; no other coding), sent on as
  the proxy read it, and ``Body`` says where it ends: what a client sends after it (a
  pipelined request) never reaches the upstream.

Lines end with CRLF; header names are tokens, values visible ASCII, blanks and tabs;
no folded lines; at most ``MAXIMUM_HEADERS``. Anything else is ``BadRequest`` (the proxy
answers 400 and names no byte of it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, final

from ._domains import address_of, normal_host

__all__ = [
    "CHUNKED",
    "HEAD_END",
    "MAXIMUM_CHUNK_LINE_BYTES",
    "MAXIMUM_HEADERS",
    "MAXIMUM_HEAD_BYTES",
    "BadRequest",
    "Body",
    "HeadReader",
    "Request",
    "origin_head",
    "parse_head",
]

MAXIMUM_HEAD_BYTES: Final = 16 * 1024
"""The longest request head (request line and headers, with the blank line) read."""

MAXIMUM_HEADERS: Final = 100
"""At most this many header lines in a head."""

HEAD_END: Final = b"\r\n\r\n"

MAXIMUM_CHUNK_LINE_BYTES: Final = 4096
"""The longest chunk-size line (with its extensions) or trailer line of a chunked body."""

CHUNKED: Final = -1
"""``Request.length`` of a body sent with ``Transfer-Encoding: chunked``."""

_MAXIMUM_LENGTH_DIGITS: Final = 18
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,15}")

_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET: Final = re.compile(rb"[\x21-\x7e]+")
_VALUE: Final = re.compile(rb"[\x20-\x7e\t]*")
_VERSIONS: Final = frozenset({b"HTTP/1.0", b"HTTP/1.1"})
_HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
        b"content-length",
        b"transfer-encoding",
    }
)
"""Headers that belong to one hop (or, ``host`` and the body's framing, that the proxy
sets itself)."""


class BadRequest(ValueError):
    """A head the proxy does not understand; ``status`` is what it answers."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@final
@dataclass(frozen=True, slots=True)
class Request:
    """One parsed head: where to (``host`` normal or an address's text, ``port``), how.

    ``tunnel`` for ``CONNECT``; otherwise ``method``, ``path`` (origin form),
    ``version``, ``headers`` (name, value pairs as sent) and ``length`` (the body's
    bytes, ``CHUNKED``, or 0 for none) make the head sent on.
    """

    host: str
    port: int
    tunnel: bool
    method: bytes = b"CONNECT"
    path: bytes = b""
    version: bytes = b"HTTP/1.1"
    headers: tuple[tuple[bytes, bytes], ...] = ()
    length: int = 0

    @property
    def authority(self) -> str:
        """``host:port`` as reported (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@final
class HeadReader:
    """Gathers a client's head, sans-IO: ``feed`` what arrived until it answers the head.

    The answer is ``(head, rest)``: the bytes through the blank line, and what came after
    them in the same reads (a tunnel's first bytes, a request's body). Past
    ``MAXIMUM_HEAD_BYTES`` without a blank line the answer is everything held and no rest,
    which ``parse_head`` refuses with 431. ``wanted`` is the most the next read should
    take, so the reader never holds more than the bound and the blank line, plus one byte.

    >>> reader = HeadReader()
    >>> reader.feed(b"CONNECT a.example:443 HTTP/1.1\r\n") is None
    True
    >>> reader.feed(b"\r\n\x16\x03")
    (b'CONNECT a.example:443 HTTP/1.1\r\n\r\n', b'\x16\x03')
    """

    __slots__ = ("_data", "_done")

    def __init__(self) -> None:
        self._data = b""
        self._done = False

    @property
    def wanted(self) -> int:
        """How many bytes the next read may take (0 once the head is answered)."""
        if self._done:
            return 0
        return MAXIMUM_HEAD_BYTES + len(HEAD_END) - len(self._data) + 1

    def feed(self, data: bytes) -> tuple[bytes, bytes] | None:
        """``(head, rest)`` once the head is whole (or over the bound), else ``None``."""
        if self._done:
            raise ValueError("the head was already answered")
        if len(data) > self.wanted:
            raise ValueError("more bytes than the reader wanted")
        self._data += data
        end = self._data.find(HEAD_END)
        if end >= 0:
            cut = end + len(HEAD_END)
            self._done = True
            return self._data[:cut], self._data[cut:]
        if len(self._data) > MAXIMUM_HEAD_BYTES:
            self._done = True
            return self._data, b""
        return None


def _authority(text: bytes, default_port: int | None) -> tuple[str, int]:
    """``(host, port)`` of an authority ``host[:port]``; no user information, no zone."""
    if b"@" in text or not text:
        raise BadRequest("an authority with user information or none")
    decoded = text.decode("ascii")
    if decoded.startswith("["):
        close = decoded.find("]")
        host_text, rest = decoded[: close + 1], decoded[close + 1 :]
        if close < 0 or (rest and not rest.startswith(":")):
            raise BadRequest("a malformed address")
        port_text = rest[1:] if rest else None
    elif ":" in decoded:
        host_text, _, port_text = decoded.rpartition(":")
    else:
        host_text, port_text = decoded, None
    if port_text is None:
        if default_port is None:
            raise BadRequest("CONNECT needs a port")
        port = default_port
    else:
        if not port_text.isdigit() or len(port_text) > 5 or not 1 <= int(port_text) <= 65535:
            raise BadRequest("a port out of range")
        port = int(port_text)
    if not host_text.startswith("[") and ":" in host_text:
        raise BadRequest("a malformed address")  # an IPv6 address needs its brackets
    address = address_of(host_text)
    if address is not None:
        return address.compressed, port
    if host_text.startswith("["):
        raise BadRequest("a malformed address")
    host = normal_host(host_text)
    if host is None:
        raise BadRequest("not a host name")
    return host, port


def _absolute(target: bytes) -> tuple[str, int, bytes]:
    """``(host, port, origin-form path)`` of ``http://authority[/path]``."""
    scheme, separator, rest = target.partition(b"://")
    if not separator or scheme.lower() != b"http":
        raise BadRequest("only http:// targets (https goes through CONNECT)")
    cut = len(rest)
    for stop in (b"/", b"?", b"#"):
        found = rest.find(stop)
        if found >= 0:
            cut = min(cut, found)
    authority, path = rest[:cut], rest[cut:]
    host, port = _authority(authority, 80)
    path = path.partition(b"#")[0]
    if not path.startswith(b"/"):
        path = b"/" + path
    return host, port, path


def parse_head(head: bytes) -> Request:
    """The request of ``head`` (everything up to and including ``HEAD_END``).

    Raises ``BadRequest`` for anything but the two forms of the module docstring
    (``status`` 400), a head over ``MAXIMUM_HEAD_BYTES`` (431) or a version other than
    HTTP/1.0 and 1.1 (505).
    """
    if len(head) > MAXIMUM_HEAD_BYTES:
        raise BadRequest("the head is too long", 431)
    if not head.endswith(HEAD_END):
        raise BadRequest("the head does not end with a blank line")
    lines = head[: -len(HEAD_END)].split(b"\r\n")
    if any(b"\n" in line or b"\r" in line for line in lines):
        raise BadRequest("a bare CR or LF")
    request_line, header_lines = lines[0], lines[1:]
    if len(header_lines) > MAXIMUM_HEADERS:
        raise BadRequest("too many headers", 431)
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise BadRequest("not a request line")
    method, target, version = parts
    if _TOKEN.fullmatch(method) is None or _TARGET.fullmatch(target) is None:
        raise BadRequest("not a request line")
    if version not in _VERSIONS:
        raise BadRequest("only HTTP/1.0 and HTTP/1.1", 505)
    headers: list[tuple[bytes, bytes]] = []
    for line in header_lines:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            raise BadRequest("a malformed header")
        headers.append((name, value.strip(b" \t")))
    if method == b"CONNECT":
        host, port = _authority(target, None)
        return Request(host, port, tunnel=True, version=version)
    host, port, path = _absolute(target)
    return Request(
        host,
        port,
        tunnel=False,
        method=method,
        path=path,
        version=version,
        headers=tuple(headers),
        length=_length(headers),
    )


def _length(headers: list[tuple[bytes, bytes]]) -> int:
    """The body's framing: its length, ``CHUNKED``, or 0 (none); ``BadRequest`` for
    framing a proxy could read otherwise than the upstream (RFC 9112 6.1, 6.3)."""
    lengths = {v for n, v in headers if n.lower() == b"content-length"}
    codings = [v for n, v in headers if n.lower() == b"transfer-encoding"]
    if codings:
        if lengths or len(codings) > 1 or codings[0].lower() != b"chunked":
            raise BadRequest("a body framed other than by one length or chunked alone")
        return CHUNKED
    if not lengths:
        return 0
    length = lengths.pop()
    if lengths or not length.isdigit() or len(length) > _MAXIMUM_LENGTH_DIGITS:
        raise BadRequest("a malformed Content-Length")
    return int(length)


def origin_head(request: Request) -> bytes:
    """The head the proxy sends on for a plain HTTP ``request`` (see the module docstring)."""
    named: set[bytes] = set()
    for name, value in request.headers:
        if name.lower() in {b"connection", b"proxy-connection"}:
            named.update(item.strip().lower() for item in value.split(b","))
    kept = [
        name + b": " + value
        for name, value in request.headers
        if name.lower() not in _HOP_BY_HOP and name.lower() not in named
    ]
    host = f"[{request.host}]" if ":" in request.host else request.host
    if request.port != 80:
        host += f":{request.port}"
    if request.length == CHUNKED:
        kept.append(b"Transfer-Encoding: chunked")
    elif request.length or request.method in {b"POST", b"PUT", b"PATCH"}:
        kept.append(b"Content-Length: %d" % request.length)
    lines = [
        request.method + b" " + request.path + b" " + request.version,
        *kept,
        b"Host: " + host.encode("ascii"),
        b"Connection: close",
    ]
    return b"\r\n".join(lines) + HEAD_END


_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


@final
class Body:
    """Where a plain request's body ends, read as it streams (sans-IO).

    ``take(data)`` is how many of ``data``'s first bytes still belong to the body (they
    go on as they are); once ``done``, nothing more does. A chunked body is read chunk
    by chunk (size lines, data, each chunk's CRLF, trailer lines up to the blank one),
    each line at most ``MAXIMUM_CHUNK_LINE_BYTES``, the trailer at most
    ``MAXIMUM_HEAD_BYTES``; anything else is ``BadRequest``.
    """

    __slots__ = ("_chunked", "_left", "_line", "_state", "_trailer")

    def __init__(self, length: int) -> None:
        self._chunked = length == CHUNKED
        self._state = _SIZE if self._chunked else (_DATA if length > 0 else _DONE)
        self._left = max(length, 0)
        self._line = bytearray()
        self._trailer = 0

    @property
    def done(self) -> bool:
        """Whether the whole body was taken."""
        return self._state == _DONE

    def take(self, data: bytes | memoryview) -> int:
        """How many of ``data``'s first bytes belong to the body (``BadRequest`` when a
        chunked body's framing is malformed)."""
        at, size = 0, len(data)
        while at < size and self._state != _DONE:
            if self._state == _DATA:
                step = min(self._left, size - at)
                self._left -= step
                at += step
                if not self._left:
                    self._state = _DATA_END if self._chunked else _DONE
                continue
            end = bytes(data[at : at + MAXIMUM_CHUNK_LINE_BYTES + 2]).find(b"\n")
            if end < 0:
                self._extend(data[at:size])
                return size
            self._extend(data[at : at + end + 1])
            at += end + 1
            self._line_ended()
        return at

    def _extend(self, piece: bytes | memoryview) -> None:
        self._line += piece
        if len(self._line) > MAXIMUM_CHUNK_LINE_BYTES + 2:
            raise BadRequest("a chunk's line is too long")

    def _line_ended(self) -> None:
        line = bytes(self._line)
        self._line.clear()
        if not line.endswith(b"\r\n"):
            raise BadRequest("a bare LF in a chunked body")
        text = line[:-2]
        if self._state == _DATA_END:
            if text:
                raise BadRequest("a chunk longer than its size")
            self._state = _SIZE
        elif self._state == _SIZE:
            size = text.partition(b";")[0].rstrip(b" \t")
            if _HEX.fullmatch(size) is None:
                raise BadRequest("a malformed chunk size")
            self._left = int(size, 16)
            self._state = _DATA if self._left else _TRAILER
        else:  # _TRAILER
            self._trailer += len(line)
            if self._trailer > MAXIMUM_HEAD_BYTES:
                raise BadRequest("a trailer too long", 431)
            if not text:
                self._state = _DONE
            elif b":" not in text or _VALUE.fullmatch(text) is None:
                raise BadRequest("a malformed trailer line")
