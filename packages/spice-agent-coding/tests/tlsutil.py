"""TLS ClientHellos for the tests: the real one Python's ``ssl`` sends, and built ones."""

from __future__ import annotations

import contextlib
import ssl


def real_hello(server_name: str | None) -> bytes:
    """The first flight of a real TLS client (OpenSSL through ``ssl``), asking for
    ``server_name`` (none when ``None``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
        client.do_handshake()
    return outgoing.read()


def _vector(size: int, data: bytes) -> bytes:
    return len(data).to_bytes(size, "big") + data


def hello_message(server_name: bytes | None, *, extensions: bytes = b"") -> bytes:
    """A handshake message: a ClientHello with a ``server_name`` extension when given."""
    if server_name is not None:
        names = _vector(2, b"\x00" + _vector(2, server_name))
        extensions = b"\x00\x00" + _vector(2, names) + extensions
    body = (
        b"\x03\x03"
        + b"\x11" * 32
        + _vector(1, b"")
        + _vector(2, b"\x13\x01")
        + _vector(1, b"\x00")
        + _vector(2, extensions)
    )
    return b"\x01" + len(body).to_bytes(3, "big") + body


def records(message: bytes, *, cut: int | None = None) -> bytes:
    """``message`` in one handshake record, or in two cut at ``cut``."""
    pieces = [message] if cut is None else [message[:cut], message[cut:]]
    return b"".join(b"\x16\x03\x01" + _vector(2, piece) for piece in pieces)


def self_signed(directory: str, name: str = "localhost") -> tuple[str, str]:
    """A certificate and key for ``name`` made by the ``openssl`` command (P-256, one day)."""
    import os  # noqa: PLC0415 - only the real-TLS tests need these
    import subprocess  # noqa: PLC0415

    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
