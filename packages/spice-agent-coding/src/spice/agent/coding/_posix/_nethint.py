"""``sandbox_hint`` for the network: what to tell a model whose command met the sandbox.

Contract 11.1 ("Say what to do"): when a contained command fails and the proxy refused a
host, or its output shows a DNS failure while the network is denied, the answer carries
one sentence naming the flag that would allow it, at most ``MAXIMUM_HINT_BYTES``.

``DnsWatch`` wraps a call's output sinks: each chunk goes on to the sink unchanged and
is scanned, with the last ``OVERLAP_BYTES`` of the one before (a message cut between
two chunks is still seen), for the words resolvers print when a name cannot be
resolved. Only a host name that ``_network.normal_host`` accepts is ever kept from the
output (never other text), and only the first one.
"""

from __future__ import annotations

import re
from typing import Final, final

from spice.agent.process import Sink

from .._network import normal_host
from ._proxy import CallProxy

__all__ = ["MAXIMUM_HINT_BYTES", "OVERLAP_BYTES", "CallNetwork", "DnsWatch", "network_hint"]

MAXIMUM_HINT_BYTES: Final = 512
"""A ``sandbox_hint`` is at most this many UTF-8 bytes (contract 11.1)."""

OVERLAP_BYTES: Final = 256
"""Bytes of the previous chunk scanned again with the next one."""

_NAME: Final = rb"([A-Za-z0-9][A-Za-z0-9.-]{0,252})"
_WITH_HOST: Final = (
    re.compile(rb"Could not resolve host: " + _NAME),  # curl, git
    re.compile(rb"getaddrinfo (?:ENOTFOUND|EAI_AGAIN) " + _NAME),  # node, npm
    re.compile(rb"Failed to resolve '" + _NAME),  # urllib3 2 (pip, requests)
    re.compile(rb"dial tcp: lookup " + _NAME),  # go
    re.compile(rb"failed to lookup address information[^\n]{0,64}? for " + _NAME),
)
_WITHOUT_HOST: Final = re.compile(
    rb"Temporary failure in name resolution|Name or service not known|"
    rb"No address associated with hostname|nodename nor servname provided|"
    rb"failed to lookup address information|dns error|Could not resolve host|"
    rb"getaddrinfo (?:ENOTFOUND|EAI_AGAIN)|NameResolutionError"
)


@final
class DnsWatch:
    """A sink that passes every chunk on and notes a DNS failure (and its host) in it."""

    __slots__ = ("_sink", "_tail", "failed", "host")

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._tail = b""
        self.failed = False
        self.host: str | None = None

    def write(self, data: bytes) -> None:
        self._sink.write(data)
        if self.host is not None:
            return
        window = self._tail + data
        self._tail = window[-OVERLAP_BYTES:]
        for pattern in _WITH_HOST:
            match = pattern.search(window)
            if match is not None:
                self.failed = True
                self.host = normal_host(match.group(1).decode("ascii").rstrip("."))
                if self.host is not None:
                    return
        if not self.failed and _WITHOUT_HOST.search(window) is not None:
            self.failed = True


def _host_of(authority: str) -> str:
    host, _, _ = authority.rpartition(":")
    return host or authority


def network_hint(
    refused: list[str],
    watches: tuple[DnsWatch, ...],
    *,
    proxied: bool,
    private: frozenset[str] | set[str] = frozenset(),
) -> str | None:
    """The hint for a failed command, or ``None`` when nothing shows the network's refusal.

    ``refused`` are the proxy's refused ``host:port`` of the call (first first);
    ``proxied`` says whether ``--allow-domain`` works here (namespaces), else the only
    way out is ``--allow-network``; ``private`` are those of ``refused`` that a pattern
    allowed but whose addresses are not global.
    """
    if refused:
        first = refused[0]
        more = f" and {len(refused) - 1} more" if len(refused) > 1 else ""
        if first in private:
            return (
                f"The sandbox's proxy refused {first}{more}: it resolves to a loopback, "
                "private or link-local address; start the server with "
                "--allow-private-address to let commands reach such addresses."
            )
        text = (
            f"The sandbox's proxy refused {first}{more}: start the server with "
            f"--allow-domain {_host_of(first)} (or a preset such as python, npm, crates, "
            "go, github) to let commands reach it."
        )
    else:
        failed = [watch for watch in watches if watch.failed]
        if not failed:
            return None
        host = next((watch.host for watch in failed if watch.host), None)
        named = host or "HOST"
        if proxied:
            text = (
                "The sandbox denies the network and the command resolved a name itself "
                f"({named}): start the server with --allow-domain {named} and use the "
                "proxy in HTTP_PROXY/HTTPS_PROXY."
            )
        else:
            text = (
                f"The sandbox denies the network here ({named} could not be resolved); "
                "--allow-domain needs namespaces (bwrap): start the server with "
                "--allow-network to let commands use the network."
            )
    encoded = text.encode()
    if len(encoded) > MAXIMUM_HINT_BYTES:
        text = encoded[:MAXIMUM_HINT_BYTES].decode("utf-8", "ignore")
    return text


@final
class CallNetwork:
    """A call's network parts without ``--allow-network``: its proxy (with namespaces),
    and the watches on its two output streams (``watches``: stdout's, stderr's)."""

    __slots__ = ("proxy", "watches")

    def __init__(self, stdout: Sink, stderr: Sink, proxy: CallProxy | None) -> None:
        self.proxy = proxy
        self.watches = (DnsWatch(stdout), DnsWatch(stderr))

    @property
    def refused(self) -> tuple[tuple[str, ...], int]:
        """The proxy's refused ``host:port`` (at most 16) and their count."""
        if self.proxy is None:
            return (), 0
        return tuple(self.proxy.refused), self.proxy.refused_count

    def hint(self) -> str | None:
        """The network's ``sandbox_hint`` for the call (``network_hint``)."""
        proxy = self.proxy
        if proxy is None:
            return network_hint([], self.watches, proxied=False)
        return network_hint(proxy.refused, self.watches, proxied=True, private=proxy.private)

    async def close(self) -> None:
        """End the call's proxy (its listener and every connection); idempotent."""
        if self.proxy is not None:
            await self.proxy.close()
