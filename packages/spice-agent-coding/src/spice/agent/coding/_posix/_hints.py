"""``sandbox_hint``: one sentence that says which flag would allow what the sandbox refused.

Contract 11.1 ("Say what to do"), 13.4. A contained command's output is read as it passes
to its sinks (``Scanned``), a bounded look per line, for a refusal of the sandbox: a
read-only file system or a permission error on an absolute path outside the writable
places, a missing file where the sandbox hides one (the home allow-list, the credentials,
``deny_read``), a TLS check that did not know a certificate's issuer, or (the network) a
failure to resolve a name while the network is denied. When the command fails,
``sandbox_hint`` turns what was seen into one sentence of at most ``MAXIMUM_HINT_BYTES``
naming the flag (``--allow-write DIR``, ``--allow-read PATH``, ``--allow-domain HOST``)
and its settings-file key, which a running server takes at its next call (contract 13.4:
no restart), or for an unknown issuer ``ca_files`` and ``SSL_CERT_FILE``.

The refused hosts the server's proxy saw are the network helper's: ``sandbox_hint``
takes them as ``refused_hosts`` (the first is named), so the proxy only has to pass
them in; without a proxy the list is empty and a DNS failure gets the general hint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, final

from spice.agent.process import Sink

from .._netpolicy._domains import RAW_SUFFIX, pattern_allowing

__all__ = [
    "CA_HINT",
    "MAXIMUM_HINT_BYTES",
    "MAXIMUM_LINE_BYTES",
    "MAXIMUM_REFUSALS",
    "RefusalScanner",
    "Scanned",
    "sandbox_hint",
]

MAXIMUM_HINT_BYTES: Final = 512
"""Longest hint (UTF-8 bytes), the contract's bound."""

MAXIMUM_LINE_BYTES: Final = 4096
"""The most of one output line that is looked at (the rest of a longer line is skipped)."""

MAXIMUM_REFUSALS: Final = 4
"""At most this many refused paths are kept per call (the first one is named)."""

_WRITE_REFUSAL: Final = re.compile(
    rb"read-only file system|permission denied|operation not permitted|erofs|eacces",
    re.IGNORECASE,
)
_DNS_FAILURE: Final = re.compile(
    rb"temporary failure in name resolution|could not resolve host|name or service not known"
    rb"|getaddrinfo (?:enotfound|eai_again)|failed to lookup address|no address associated",
    re.IGNORECASE,
)
_READ_REFUSAL: Final = re.compile(
    rb"no such file or directory|enoent|permission denied|eacces|not a directory",
    re.IGNORECASE,
)
_UNKNOWN_ISSUER: Final = re.compile(
    rb"unknownissuer|certificate_verify_failed|unable to get local issuer certificate"
    rb"|unable_to_get_issuer_cert_locally|self_signed_cert_in_chain"
    rb"|self[- ]signed certificate in certificate chain|pkix path building failed"
    rb"|unable to verify the first certificate|unable_to_verify_leaf_signature",
    re.IGNORECASE,
)
"""An unknown issuer in the words of rustls (uv), OpenSSL (Python, curl, git), Node and Java."""
_PATH: Final = re.compile(rb"(?<![\w.~/-])(/[^\s'\"`:,;()\[\]{}]+)")
_NOT_SUGGESTED: Final = ("/proc", "/sys", "/dev", "/run")


@final
class RefusalScanner:
    """Collects, bounded, the refusals a command's output shows (both streams)."""

    __slots__ = ("_carry", "dns_failed", "paths", "reads", "unknown_issuer")

    def __init__(self) -> None:
        self._carry: dict[int, bytes] = {}
        self.paths: list[str] = []
        self.reads: list[str] = []
        """Paths named by a failed open (missing, not permitted): the hidden ones are hinted."""
        self.dns_failed = False
        self.unknown_issuer = False

    def feed(self, stream: int, data: bytes) -> None:
        """Look at one chunk of ``stream`` (lines split across chunks are joined)."""
        if (
            len(self.paths) >= MAXIMUM_REFUSALS
            and len(self.reads) >= MAXIMUM_REFUSALS
            and self.dns_failed
            and self.unknown_issuer
        ):
            return
        text = self._carry.pop(stream, b"") + data
        lines = text.split(b"\n")
        last = lines.pop()
        for line in lines:
            self._line(line[:MAXIMUM_LINE_BYTES])
        self._carry[stream] = last[-MAXIMUM_LINE_BYTES:]

    def finish(self) -> None:
        """Look at the last, unterminated line of each stream."""
        for line in self._carry.values():
            self._line(line)
        self._carry.clear()

    def _line(self, line: bytes) -> None:
        if _DNS_FAILURE.search(line):
            self.dns_failed = True
        if _UNKNOWN_ISSUER.search(line):
            self.unknown_issuer = True
        for pattern, found in ((_WRITE_REFUSAL, self.paths), (_READ_REFUSAL, self.reads)):
            refusal = pattern.search(line) if len(found) < MAXIMUM_REFUSALS else None
            path = None if refusal is None else _path_of(line, refusal)
            if path is not None and path not in found:
                found.append(path)


def _path_of(line: bytes, refusal: re.Match[bytes]) -> str | None:
    """The path a refusal is about: the last one before its words ("cannot create /x:
    Read-only file system"), else the first after ("EROFS: ..., mkdir '/x'")."""
    before = list(_PATH.finditer(line, 0, refusal.start()))
    after = _PATH.search(line, refusal.end())
    chosen = before[-1] if before else after
    return None if chosen is None else os.fsdecode(chosen.group(1)).rstrip(".")


@final
class Scanned:
    """A sink that shows each chunk to a ``RefusalScanner`` and hands it on unchanged."""

    __slots__ = ("_scanner", "_sink", "_stream")

    def __init__(self, sink: Sink, scanner: RefusalScanner, stream: int) -> None:
        self._sink = sink
        self._scanner = scanner
        self._stream = stream

    def write(self, data: bytes) -> None:
        """Hand ``data`` on first (the sink's bound rules), then look at it."""
        self._sink.write(data)
        self._scanner.feed(self._stream, data)


def _beneath(path: str, places: Iterable[str]) -> bool:
    return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)


def _directory_to_allow(path: str) -> str:
    """The nearest existing directory at or above ``path`` (as the server sees it)."""
    candidate = os.path.normpath(path)
    while candidate != os.sep and not os.path.isdir(candidate):
        candidate = os.path.dirname(candidate)
    return candidate


def _fitted(sentence: str, fallback: str) -> str:
    return sentence if len(sentence.encode()) <= MAXIMUM_HINT_BYTES else fallback


_LIVE: Final = "a running server takes it at its next call, no restart"
"""How every hint ends that names a settings-file key (contract 13.4)."""

CA_HINT: Final = (
    "The command's TLS check did not know the issuer of a server's certificate (a proxy "
    "that re-signs TLS, or a private CA): name its PEM file in the settings file's "
    'ca_files = ["/path/ca.pem"] (' + _LIVE + "; commands then trust the host's store and "
    "it), or start the server with SSL_CERT_FILE naming it."
)
"""The unknown-issuer hint (fixed words)."""


def _key(name: str, value: str) -> str:
    """``name = ["value"]``, a settings-file line (a TOML basic string)."""
    return f"{name} = [{json.dumps(value)}]"


def _hidden_place(
    path: str,
    writable: Sequence[str],
    hidden: Sequence[str],
    home: str | None,
    hidden_home: str | None,
    shown: Sequence[str],
) -> bool:
    """Whether a failed open of ``path`` met a place the sandbox hides that exists."""
    if _beneath(path, writable) or _beneath(path, shown):
        return False
    masked = _beneath(path, hidden)
    behind = hidden_home is not None and path != hidden_home and _beneath(path, (hidden_home,))
    return (masked or behind) and home is not None and os.path.lexists(path)


def _read_hint(path: str, home: str) -> str:
    relative = os.path.relpath(path, home)
    if relative.startswith(".."):
        return _fitted(
            f"The sandbox hides {path} (deny_read names it): if the command needs it, "
            "take it out of --deny-read or the settings file's deny_read (do not retry as is).",
            "The sandbox hides a place the command read (deny_read names it).",
        )
    return _fitted(
        f"The sandbox hides {path} (the home is shown only by its allow-list; credentials "
        f"and deny_read stay hidden): if the command needs it, start the server with "
        f"--allow-read {relative} or add {_key('allow_read', relative)} to the settings "
        f"file ({_LIVE}); do not retry as is.",
        "The sandbox hides a place beneath the home the command read: if the command needs "
        f"it, start the server with --allow-read PATH or add allow_read to the settings file "
        f"({_LIVE}).",
    )


def sandbox_hint(
    scanner: RefusalScanner,
    writable: Sequence[str],
    hidden: Sequence[str],
    *,
    network_denied: bool,
    refused_hosts: Sequence[str] = (),
    private_hosts: Collection[str] = (),
    preset_of: Callable[[str], str | None] | None = None,
    raw_hosts: Collection[str] = (),
    home: str | None = None,
    hidden_home: str | None = None,
    shown: Sequence[str] = (),
) -> str | None:
    """The hint for a failed contained command, or ``None`` when nothing shows a refusal.

    ``writable``: what the call could write (a refusal there is not the sandbox's
    doing, or is a protected path: no hint); ``hidden``: the masked credentials (never
    suggested for a write). ``refused_hosts``: the hosts the proxy refused (the network
    helper's hook); the first is named, and when it is among ``private_hosts`` (a
    pattern allowed it but it resolves to a non-global address) the flag named is
    ``--allow-private-address``. ``preset_of``: the preset a refused host belongs to
    (``DomainPolicy.preset_of``, the configured hosts included), named instead of the
    host, so that one flag admits the preset's other hosts too (contract 12.2). When the
    first is among ``raw_hosts`` (a tunnel there carried no TLS), the pattern named is
    ``host:port/tcp``. ``home``: the server's home; ``hidden_home``: the same where the
    sandbox hides it (namespaces), ``shown``: what of it the call sees: a failed open of
    a hidden place that exists names it and ``--allow-read`` (contract 13.4).
    """
    scanner.finish()
    for path in scanner.paths:
        if _beneath(path, writable) or _beneath(path, hidden) or _beneath(path, _NOT_SUGGESTED):
            continue
        if _beneath(path, ("/tmp",)):  # noqa: S108 - the host's /tmp (fallback)
            return _fitted(
                f"The sandbox refused a write to {path}: write temporary files beneath "
                "$TMPDIR, the call's own temporary directory (do not retry as is).",
                "The sandbox refused a write in /tmp: write temporary files beneath $TMPDIR.",
            )
        directory = _directory_to_allow(path)
        if directory == os.sep:
            continue
        return _fitted(
            f"The sandbox refused a write to {path}: if the command needs it, start the "
            f"server with --allow-write {directory} or add {_key('allow_write', directory)} "
            f"to the settings file ({_LIVE}); do not retry as is.",
            "The sandbox refused a write outside the writable places: if the command "
            "needs it, start the server with --allow-write DIR or add allow_write to the "
            f"settings file ({_LIVE}).",
        )
    for path in scanner.reads:
        if home is not None and _hidden_place(path, writable, hidden, home, hidden_home, shown):
            return _read_hint(path, home)
    if refused_hosts:
        host = refused_hosts[0]
        if host in private_hosts:
            return _fitted(
                f"The sandbox refused a connection to {host}: it resolves to a loopback, "
                "private or link-local address; to reach such addresses start the server "
                "with --allow-private-address or set allow_private_address = true in the "
                f"settings file ({_LIVE}).",
                "The sandbox refused a connection to a private address: start the server "
                "with --allow-private-address or set allow_private_address = true in the "
                "settings file.",
            )
        if host in raw_hosts:
            pattern = f"{host}{RAW_SUFFIX}"
            return _fitted(
                f"The sandbox refused a tunnel to {host} that carried no TLS: if the "
                f"command needs raw TCP there, start the server with --allow-domain "
                f"{pattern}. Or add {_key('allow_domains', pattern)} to the settings file "
                f"({_LIVE}).",
                "The sandbox refused a tunnel that carried no TLS: start the server with "
                "--allow-domain HOST:PORT/tcp for raw TCP, or add it to the settings "
                "file's allow_domains.",
            )
        preset = None if preset_of is None else preset_of(host)
        allowing = preset or pattern_allowing(host)
        return _fitted(
            f"The sandbox refused a connection to {host}: if the command needs it, start "
            f"the server with --allow-domain {allowing}. Or add "
            f"{_key('allow_domains', allowing)} to the settings file ({_LIVE}).",
            "The sandbox refused a connection: start the server with --allow-domain HOST "
            "for the hosts the command needs, or add them to the settings file's "
            "allow_domains.",
        )
    if scanner.unknown_issuer:
        return CA_HINT
    if network_denied and scanner.dns_failed:
        return (
            "The sandbox denies the network, so names do not resolve: if the command needs "
            "a host, start the server with --allow-domain HOST or add it to the settings "
            f"file's allow_domains ({_LIVE}); do not retry as is."
        )
    return None
