"""Reading the server name of a TLS ClientHello (``_netpolicy._tlshello``), sans IO.

Real hellos come from OpenSSL through ``ssl`` (a memory BIO, no socket); built ones
test the edges: a hello across two records, each prefix, lengths that lie, names that
are not DNS names, and any bytes at all (hypothesis).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tlsutil import hello_message, real_hello, records

from spice.agent.coding._netpolicy._domains import normal_host
from spice.agent.coding._netpolicy._tlshello import (
    MALFORMED,
    MAXIMUM_HELLO_BYTES,
    NEED_MORE,
    NOT_TLS,
    Hello,
    read_hello,
)


def test_a_real_hello_names_its_host_in_the_connect_hosts_spelling() -> None:
    assert read_hello(real_hello("Registry.Example.ORG.")) == Hello("registry.example.org")


def test_a_real_hello_without_a_name_names_none() -> None:
    assert read_hello(real_hello(None)) == Hello(None)


def test_every_prefix_of_a_hello_needs_more() -> None:
    whole = real_hello("pypi.org")
    for cut in range(len(whole)):
        assert read_hello(whole[:cut]) == NEED_MORE


def test_what_follows_a_whole_hello_does_not_change_it() -> None:
    assert read_hello(real_hello("pypi.org") + b"\x17\x03\x03\x00\x05early") == Hello("pypi.org")


@pytest.mark.parametrize("cut", [1, 3, 4, 40, 60])
def test_a_hello_across_two_records_is_read_whole(cut: int) -> None:
    assert read_hello(records(hello_message(b"files.pythonhosted.org"), cut=cut)) == Hello(
        "files.pythonhosted.org"
    )


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n", b"SSH-2.0-OpenSSH\r\n", b"\x00"])
def test_other_protocols_are_not_tls(data: bytes) -> None:
    assert read_hello(data) == NOT_TLS


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(b"\x15\x03\x01\x00\x02\x01\x5a", id="warning alert"),
        pytest.param(b"\x14\x03\x03\x00\x01\x01", id="change cipher spec"),
        pytest.param(b"\x17\x03\x03\x00\x00", id="empty application data"),
        pytest.param(b"\x18\x03\x03\x00\x01\x01", id="heartbeat"),
    ],
)
def test_a_record_before_the_hello_is_malformed_not_other_protocol(first: bytes) -> None:
    """R5-5: a TLS record before the ClientHello (a Go server skipped the alert and read
    the hello after it) is not "another protocol" to be let through: it is malformed."""
    hello = real_hello("evil.example")
    assert read_hello(first + hello) == MALFORMED
    assert read_hello(first[:1]) == NEED_MORE  # one byte of a record says nothing yet


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x16\x03\x01\x00\x04\x02\x00\x00\x00", "a ServerHello, not a ClientHello"),
        (b"\x16\x02\x00\x00\x04\x01\x00\x00\x00", "not TLS's major version"),
        (b"\x16\x03\x01\x00\x00", "an empty record"),
        (b"\x16\x03\x01\xff\xff", "a record longer than TLS allows"),
        (records(hello_message(None)[:-2] + b"\x00\x05"), "extensions longer than the hello"),
        (records(hello_message(b"bad name!")), "a name that is not a DNS name"),
        (records(hello_message(b"1.2.3.4")), "an address where a name belongs"),
        (records(hello_message(b"caf\xc3\xa9.example")), "a name that is not ASCII"),
        (records(b"\x01\x00\x00\x00"), "a hello that says it is empty"),
    ],
)
def test_a_hello_that_lies_is_malformed(data: bytes, why: str) -> None:
    assert read_hello(data) == MALFORMED, why


def test_a_hello_at_the_bound_is_read_and_one_past_it_is_malformed() -> None:
    def padded(total: int) -> bytes:
        """A hello of exactly ``total`` bytes in two records (a padding extension)."""
        base = len(hello_message(b"pypi.org", extensions=b"\x00\x15\x00\x00"))
        pad = total - 2 * 5 - base
        message = hello_message(
            b"pypi.org", extensions=b"\x00\x15" + pad.to_bytes(2, "big") + b"\x00" * pad
        )
        return records(message, cut=16384)

    at_bound = padded(MAXIMUM_HELLO_BYTES)
    assert len(at_bound) == MAXIMUM_HELLO_BYTES
    assert read_hello(at_bound) == Hello("pypi.org")
    assert read_hello(padded(MAXIMUM_HELLO_BYTES + 1)) == MALFORMED


def test_a_hello_without_extensions_or_with_another_name_type_names_none() -> None:
    bare = hello_message(None)[:-2]  # no extensions block at all (TLS 1.2 allows it)
    bare = b"\x01" + (len(bare) - 4).to_bytes(3, "big") + bare[4:]
    assert read_hello(records(bare)) == Hello(None)
    other_type = b"\x00\x00\x00\x08\x00\x06\x01\x00\x03abc"  # name type 1, not host_name
    assert read_hello(records(hello_message(None, extensions=other_type))) == Hello(None)


@given(st.binary(max_size=4096))
def test_any_bytes_give_an_outcome_and_never_raise(data: bytes) -> None:
    assert read_hello(data) in {NOT_TLS, NEED_MORE, MALFORMED} or isinstance(
        read_hello(data), Hello
    )


@given(
    st.lists(
        st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True), min_size=1, max_size=4
    )
    .map(".".join)
    .filter(lambda name: normal_host(name) == name),
    st.integers(min_value=1, max_value=80),
)
def test_any_dns_name_reads_back_in_one_record_or_two(name: str, cut: int) -> None:
    message = hello_message(name.encode())
    assert read_hello(records(message)) == Hello(name)
    assert read_hello(records(message, cut=min(cut, len(message) - 1))) == Hello(name)
