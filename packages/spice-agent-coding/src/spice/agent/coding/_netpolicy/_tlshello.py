"""The server name a TLS ClientHello asks for: the proxy's look into a tunnel's first bytes.

Sans-IO: the proxy (``_posix._net._proxy``) hands the bytes a tunnel's client sent first
(bounded, ``MAXIMUM_HELLO_BYTES``), and ``read_hello`` says what they are:

- ``NOT_TLS``: the first byte is not a TLS record's type (another protocol: the proxy
  lets it through only where a ``HOST:PORT/tcp`` pattern allows raw bytes);
- ``NEED_MORE``: the start of a ClientHello, not yet whole;
- ``MALFORMED``: a TLS record that is not a handshake (an alert, a change cipher spec,
  application data: whatever comes first must be the ClientHello), a handshake record
  that is not a well-formed ClientHello, or one longer than the bound;
- a ``Hello``: its ``server_name`` (the ``server_name`` extension's host name, spelled
  as ``_netpolicy._domains.normal_host`` spells the CONNECT host), or ``None`` when it names none
  (a name that is not a DNS name is ``MALFORMED``).

Only what the name needs is read (RFC 8446 4.1.2 and RFC 6066 3): the records of the
handshake (a ClientHello may span several), the legacy fields skipped by their lengths,
and the extensions in turn. A length that runs past its container is ``MALFORMED``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, final

from ._domains import normal_host

__all__ = ["MALFORMED", "MAXIMUM_HELLO_BYTES", "NEED_MORE", "NOT_TLS", "Hello", "read_hello"]

MAXIMUM_HELLO_BYTES: Final = 32 * 1024
"""The most bytes a ClientHello may take, its records' headers included (browsers send
under 2 KiB, post-quantum key shares included; one record holds 16 KiB)."""

NOT_TLS: Final = "not-tls"
NEED_MORE: Final = "need-more"
MALFORMED: Final = "malformed"

Outcome = Literal["not-tls", "need-more", "malformed"]

_HANDSHAKE: Final = 0x16
_RECORD_TYPES: Final = frozenset(range(0x14, 0x19))
"""change_cipher_spec, alert, handshake, application_data, heartbeat (RFC 8446 B.1)."""
_CLIENT_HELLO: Final = 0x01
_SERVER_NAME: Final = 0x0000
_HOST_NAME: Final = 0x00
_RECORD_HEADER: Final = 5
_MAXIMUM_RECORD: Final = 16384 + 256
"""A record's longest payload (a plaintext record is at most 2^14; some slack)."""


@final
@dataclass(frozen=True, slots=True)
class Hello:
    """A whole ClientHello: the host name it asks for, if any."""

    server_name: str | None


class _Malformed(Exception):
    pass


def read_hello(data: bytes) -> Hello | Outcome:
    """What ``data`` (a tunnel client's first bytes) is; see the module's words."""
    if not data:
        return NEED_MORE
    if data[0] not in _RECORD_TYPES:
        return NOT_TLS
    message = bytearray()
    offset = 0
    while True:
        if len(data) - offset < _RECORD_HEADER:
            return NEED_MORE if len(data) < MAXIMUM_HELLO_BYTES else MALFORMED
        kind, major = data[offset], data[offset + 1]
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if kind != _HANDSHAKE or major != 3 or not 0 < length <= _MAXIMUM_RECORD:
            return MALFORMED
        end = offset + _RECORD_HEADER + length
        if end > MAXIMUM_HELLO_BYTES:
            return MALFORMED
        if len(data) < end:
            return NEED_MORE
        message += data[offset + _RECORD_HEADER : end]
        offset = end
        if len(message) >= 4:
            if message[0] != _CLIENT_HELLO:
                return MALFORMED
            whole = 4 + int.from_bytes(message[1:4], "big")
            if whole > MAXIMUM_HELLO_BYTES:
                return MALFORMED
            if len(message) >= whole:
                try:
                    return Hello(_server_name(bytes(message[4:whole])))
                except _Malformed:
                    return MALFORMED


class _Reader:
    """Bounded reads from one container; running past its end is ``_Malformed``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise _Malformed
        piece = self.data[self.at : self.at + count]
        self.at += count
        return piece

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, size: int) -> _Reader:
        """A length-prefixed piece as a reader of its own."""
        return _Reader(self.take(self.number(size)))

    @property
    def left(self) -> int:
        return len(self.data) - self.at


def _server_name(body: bytes) -> str | None:
    hello = _Reader(body)
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # legacy_session_id
    hello.vector(2)  # cipher_suites
    hello.vector(1)  # legacy_compression_methods
    if not hello.left:
        return None  # no extensions at all (TLS 1.2 allows it)
    extensions = hello.vector(2)
    if hello.left:
        raise _Malformed
    while extensions.left:
        kind = extensions.number(2)
        content = extensions.vector(2)
        if kind != _SERVER_NAME:
            continue
        names = content.vector(2)
        while names.left:
            name_type = names.number(1)
            name = names.vector(2)
            if name_type == _HOST_NAME:
                return _host(name.take(name.left))
        return None
    return None


def _host(raw: bytes) -> str:
    """The name as ``_netpolicy._domains.normal_host`` spells it (as the CONNECT host is)."""
    if not raw.isascii():
        raise _Malformed
    name = normal_host(raw.decode("ascii"))
    if name is None:
        raise _Malformed
    return name
