"""``sandbox_hint``: one sentence that says which flag would allow what the sandbox refused.

Contract 11.1 ("Say what to do"). A contained command's output is read as it passes to
its sinks (``Scanned``), a bounded look per line, for a refusal of the sandbox: a
read-only file system or a permission error on an absolute path outside the writable
places, or (the network) a failure to resolve a name while the network is denied.
When the command fails, ``sandbox_hint`` turns what was seen into one sentence of at
most ``MAXIMUM_HINT_BYTES`` naming ``--allow-write DIR`` or ``--allow-domain HOST``.

The refused hosts the server's proxy saw are the network helper's: ``sandbox_hint``
takes them as ``refused_hosts`` (the first is named), so the proxy only has to pass
them in; without a proxy the list is empty and a DNS failure gets the general hint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, final

from spice.agent.process import Sink

from .._netpolicy._domains import RAW_SUFFIX, pattern_allowing

__all__ = [
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
_PATH: Final = re.compile(rb"(?<![\w.~/-])(/[^\s'\"`:,;()\[\]{}]+)")
_NOT_SUGGESTED: Final = ("/proc", "/sys", "/dev", "/run")


@final
class RefusalScanner:
    """Collects, bounded, the refusals a command's output shows (both streams)."""

    __slots__ = ("_carry", "dns_failed", "paths")

    def __init__(self) -> None:
        self._carry: dict[int, bytes] = {}
        self.paths: list[str] = []
        self.dns_failed = False

    def feed(self, stream: int, data: bytes) -> None:
        """Look at one chunk of ``stream`` (lines split across chunks are joined)."""
        if len(self.paths) >= MAXIMUM_REFUSALS and self.dns_failed:
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
        refusal = _WRITE_REFUSAL.search(line) if len(self.paths) < MAXIMUM_REFUSALS else None
        if refusal is None:
            return
        # The path the refusal is about: the last one before its words ("cannot create
        # /x: Read-only file system"), else the first after ("EROFS: ..., mkdir '/x'").
        before = list(_PATH.finditer(line, 0, refusal.start()))
        after = _PATH.search(line, refusal.end())
        chosen = before[-1] if before else after
        if chosen is not None:
            path = os.fsdecode(chosen.group(1)).rstrip(".")
            if path not in self.paths:
                self.paths.append(path)


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
) -> str | None:
    """The hint for a failed contained command, or ``None`` when nothing shows a refusal.

    ``writable``: what the call could write (a refusal there is not the sandbox's
    doing, or is a protected path: no hint); ``hidden``: the masked credentials (never
    suggested). ``refused_hosts``: the hosts the proxy refused (the network helper's
    hook); the first is named, and when it is among ``private_hosts`` (a pattern allowed
    it but it resolves to a non-global address) the flag named is
    ``--allow-private-address``. ``preset_of``: the preset a refused host belongs to
    (``DomainPolicy.preset_of``, the configured hosts included), named instead of the
    host, so that one flag admits the preset's other hosts too (contract 12.2). When the
    first is among ``raw_hosts`` (a tunnel there carried no TLS), the pattern named is
    ``host:port/tcp``.
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
            f"The sandbox refused a write to {path}: if the command needs it, the server "
            f"must be started with --allow-write {directory} (do not retry as is).",
            "The sandbox refused a write outside the writable places: if the command "
            "needs it, the server must be started with --allow-write DIR.",
        )
    if refused_hosts:
        host = refused_hosts[0]
        if host in private_hosts:
            return _fitted(
                f"The sandbox refused a connection to {host}: it resolves to a loopback, "
                "private or link-local address; the server must be started with "
                "--allow-private-address to reach such addresses.",
                "The sandbox refused a connection to a private address: the server must be "
                "started with --allow-private-address to reach such addresses.",
            )
        if host in raw_hosts:
            return _fitted(
                f"The sandbox refused a tunnel to {host} that carried no TLS: if the "
                f"command needs raw TCP there, the server must be started with "
                f"--allow-domain {host}{RAW_SUFFIX}.",
                "The sandbox refused a tunnel that carried no TLS: the server must be "
                "started with --allow-domain HOST:PORT/tcp for raw TCP.",
            )
        preset = None if preset_of is None else preset_of(host)
        return _fitted(
            f"The sandbox refused a connection to {host}: if the command needs it, the "
            f"server must be started with --allow-domain {preset or pattern_allowing(host)}.",
            "The sandbox refused a connection: the server must be started with "
            "--allow-domain HOST for the hosts the command needs.",
        )
    if network_denied and scanner.dns_failed:
        return (
            "The sandbox denies the network, so names do not resolve: if the command needs "
            "a host, the server must be started with --allow-domain HOST (do not retry as is)."
        )
    return None
