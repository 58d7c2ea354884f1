"""The certificate authority a contained command trusts, without the server's environment.

Contract 13.4. Agent frameworks (the ``mcp`` SDK's ``stdio_client``, fastmcp, and through
them pydantic-ai, the OpenAI Agents SDK, LangChain) start the server with a minimal
environment, so ``SSL_CERT_FILE`` never reaches it. The settings file's ``ca_files`` names
PEM files; the server writes one bundle of the host's trust store, the CA files the host
already names (``_hostconfig``) and those, and every contained command gets it through
each variable of ``BUNDLE_VARIABLES``.

- ``ca_file_problem``: why one ``ca_files`` entry cannot be used (missing, unreadable, not
  a regular file, too large, no PEM certificate, a private key): the settings file refuses
  it, naming the file, the line and the key; it is never passed on.
- ``trust_store``: the host's own bundle (``ssl``'s default, else the usual places).
- ``write_bundle``: the bundle, content-addressed, read-only, in the server's private
  data directory (``_posix._facts.ca_bundle``: outside every writable place).

Standard library only; platform-neutral (POSIX paths in ``STORE_CANDIDATES`` are skipped
where absent).
"""

from __future__ import annotations

import hashlib
import os
import ssl
import stat
from collections.abc import Iterable
from typing import Final

from ._hostconfig import read_regular

__all__ = [
    "BUNDLE_DIRECTORY",
    "BUNDLE_VARIABLES",
    "MAXIMUM_BUNDLE_BYTES",
    "MAXIMUM_CA_FILES",
    "MAXIMUM_CA_FILE_BYTES",
    "STORE_CANDIDATES",
    "bundle_sources",
    "ca_file_problem",
    "trust_store",
    "write_bundle",
]

BUNDLE_VARIABLES: Final = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
)
"""The CA variables of contract 12.2 that name a file: each names the bundle. ``SSL_CERT_DIR``
names a directory of hashed names and is left as the host's (OpenSSL reads both)."""

MAXIMUM_CA_FILES: Final = 32
"""At most this many ``ca_files`` entries."""

MAXIMUM_CA_FILE_BYTES: Final = 4 * 1024 * 1024
"""One CA file (or the host's store) is at most this large."""

MAXIMUM_BUNDLE_BYTES: Final = 16 * 1024 * 1024
"""The bundle is at most this large (sources past it are left out)."""

BUNDLE_DIRECTORY: Final = "ca"
"""The bundles' directory beneath the application's data directory."""

STORE_CANDIDATES: Final = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/usr/local/etc/openssl/cert.pem",
)
"""Where hosts keep their trust store when ``ssl`` names none that exists."""

_CERTIFICATE: Final = b"-----BEGIN CERTIFICATE-----"
_END: Final = b"-----END CERTIFICATE-----"
_PRIVATE: Final = b"PRIVATE KEY-----"


def _read(path: str) -> bytes | None:
    """A regular file's bytes (at most ``MAXIMUM_CA_FILE_BYTES``), else ``None``."""
    return read_regular(path, MAXIMUM_CA_FILE_BYTES)


def ca_file_problem(path: str) -> str | None:
    """Why ``path`` cannot be a ``ca_files`` entry (fixed words), ``None`` when it can."""
    if not os.path.isabs(path) or "\0" in path:
        return "is not an absolute path"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError:
        return "cannot be read"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAXIMUM_CA_FILE_BYTES:
        return f"is larger than {MAXIMUM_CA_FILE_BYTES} bytes"
    data = _read(path)
    if data is None:
        return "cannot be read"
    if _PRIVATE in data:
        return "holds a private key: name only public certificates"
    if _CERTIFICATE not in data or _END not in data:
        return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    return None


def trust_store() -> str | None:
    """The host's own trust store: ``ssl``'s default CA file, else the first of
    ``STORE_CANDIDATES`` that is a regular file; ``None`` when none is."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, *STORE_CANDIDATES):
        if candidate and os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


def bundle_sources(host_files: Iterable[str], ca_files: Iterable[str]) -> tuple[str, ...]:
    """The files the bundle joins, in order, real paths without repeats: the host's
    store, the CA files the host names (directories left out), then ``ca_files``."""
    store = trust_store()
    found: list[str] = []
    for path in (*([store] if store else []), *host_files, *ca_files):
        real = os.path.realpath(path)
        if os.path.isfile(real) and real not in found:
            found.append(real)
    return tuple(found)


def _certificates(data: bytes) -> bytes:
    """The PEM certificate blocks of ``data`` only (a private key never passes)."""
    kept: list[bytes] = []
    start = data.find(_CERTIFICATE)
    while start != -1:
        end = data.find(_END, start)
        if end == -1:
            break
        kept.append(data[start : end + len(_END)] + b"\n")
        start = data.find(_CERTIFICATE, end)
    return b"".join(kept)


def write_bundle(directory: str, sources: Iterable[str]) -> str | None:
    """Write the certificates of ``sources`` as one bundle beneath ``directory`` (made
    private), named by its content's SHA-256 and read-only; its real path, or ``None``
    when nothing could be read or written (the commands then keep the host's variables)."""
    parts: list[bytes] = []
    size = 0
    for path in sources:
        data = _read(path)
        blocks = b"" if data is None else _certificates(data)
        if blocks and size + len(blocks) <= MAXIMUM_BUNDLE_BYTES:
            parts.append(blocks)
            size += len(blocks)
    if not parts:
        return None
    content = b"".join(parts)
    name = f"bundle-{hashlib.sha256(content).hexdigest()[:32]}.pem"
    target = os.path.join(directory, name)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if os.path.isfile(target) and _read(target) == content:
            return os.path.realpath(target)
        partial = f"{target}.{os.getpid()}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.chmod(partial, 0o444)
        os.replace(partial, target)
    except OSError:
        return None
    return os.path.realpath(target)
