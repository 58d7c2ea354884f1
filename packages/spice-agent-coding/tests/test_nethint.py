"""``sandbox_hint`` for the network: the DNS watch on the output, and the sentences."""

from __future__ import annotations

import pytest

from spice.agent.coding._posix._nethint import (
    MAXIMUM_HINT_BYTES,
    OVERLAP_BYTES,
    DnsWatch,
    network_hint,
)


class Collect:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


def watched(*chunks: bytes) -> DnsWatch:
    sink = Collect()
    watch = DnsWatch(sink)
    for chunk in chunks:
        watch.write(chunk)
    assert sink.data == b"".join(chunks)  # every byte passed on, unchanged
    return watch


@pytest.mark.parametrize(
    ("output", "host"),
    [
        (b"curl: (6) Could not resolve host: registry.example\n", "registry.example"),
        (b"npm error getaddrinfo ENOTFOUND registry.npmjs.org\n", "registry.npmjs.org"),
        (b"npm error getaddrinfo EAI_AGAIN registry.npmjs.org\n", "registry.npmjs.org"),
        (b"Failed to resolve 'pypi.org' ([Errno -3] ...)", "pypi.org"),
        (b"dial tcp: lookup proxy.golang.org on 10.0.0.1:53: no such host", "proxy.golang.org"),
        (b"dns error: failed to lookup address information: x for crates.io", "crates.io"),
        (b"[Errno -3] Temporary failure in name resolution\n", None),
        (b"socket.gaierror: [Errno -2] Name or service not known\n", None),
    ],
)
def test_a_dns_failure_is_seen_and_its_host_kept_when_it_is_one(
    output: bytes, host: str | None
) -> None:
    watch = watched(b"some output first\n", output)
    assert watch.failed
    assert watch.host == host


def test_a_message_cut_between_two_chunks_is_still_seen() -> None:
    message = b"Could not resolve host: pypi.org\n"
    watch = watched(b"x" * 1000 + message[:10], message[10:])
    assert (watch.failed, watch.host) == (True, "pypi.org")


def test_a_message_farther_back_than_the_overlap_is_not_joined() -> None:
    message = b"Temporary failure in name resolution"
    watch = watched(message[:8], b"y" * OVERLAP_BYTES, message[8:])
    assert not watch.failed


def test_text_that_is_not_a_host_is_never_kept() -> None:
    watch = watched(b"Could not resolve host: -bad_host!\n")
    assert watch.failed
    assert watch.host is None


def test_output_without_a_dns_failure_gives_no_hint() -> None:
    watch = watched(b"Read-only file system\n", b"all good\n")
    assert not watch.failed
    assert network_hint([], (watch,), proxied=True) is None


def test_the_hints_name_the_flag_that_would_allow_it() -> None:
    refused = network_hint(["example.com:443", "b.example:80"], (), proxied=True)
    assert refused is not None
    assert "example.com:443 and 1 more" in refused
    assert "--allow-domain example.com " in refused
    private = network_hint(
        ["localhost:8080"], (), proxied=True, private=frozenset({"localhost:8080"})
    )
    assert private is not None
    assert "--allow-private-address" in private
    dns = watched(b"Could not resolve host: pypi.org\n")
    proxied = network_hint([], (dns,), proxied=True)
    assert proxied is not None
    assert "--allow-domain pypi.org" in proxied
    fallback = network_hint([], (dns,), proxied=False)
    assert fallback is not None
    assert "--allow-network" in fallback
    unnamed = network_hint([], (watched(b"Name or service not known"),), proxied=True)
    assert unnamed is not None
    assert "--allow-domain HOST" in unnamed


def test_a_hint_stays_within_its_bound() -> None:
    longest = "a" * 60 + "." + "b" * 60 + "." + "c" * 60 + "." + "d" * 60
    for refused in ([f"{longest}:443"], [f"[{'f' * 4}::1]:443"]):
        hint = network_hint(refused, (), proxied=True)
        assert hint is not None
        assert len(hint.encode()) <= MAXIMUM_HINT_BYTES
