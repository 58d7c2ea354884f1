"""The proxy's head, sans-IO (contract 12.5): ``HeadReader`` fed any split, and
``parse_head`` held against h11, the maintained HTTP/1.1 parser already in the environment.

The reader is checked three ways (whole, byte by byte, trailing), as h11's own tests feed
its parsers, and in any split hypothesis draws; the bound on both sides. The parser is
differential: every head it accepts, h11 accepts too and reads the same way (method,
target, version, each header), and a head h11 refuses it refuses as well. It is stricter
than h11 on purpose (two request forms only, visible ASCII only), never looser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.coding._netpolicy._head import (
    HEAD_END,
    MAXIMUM_HEAD_BYTES,
    BadRequest,
    HeadReader,
    Request,
    parse_head,
)


def whole(data: bytes) -> list[bytes]:
    return [data]


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def trailing(data: bytes) -> list[bytes]:
    return [data, b""]


SPLITS: Final[tuple[Callable[[bytes], list[bytes]], ...]] = (whole, byte_by_byte, trailing)


def gathered(chunks: list[bytes]) -> tuple[bytes, bytes] | None:
    """What a reader fed ``chunks`` answers (each read cut to what it wants, as the proxy's
    ``recv(reader.wanted)`` is), with every byte not yet read after the rest; else ``None``."""
    reader = HeadReader()
    for index, chunk in enumerate(chunks):
        left = chunk
        while left:
            taken, left = left[: reader.wanted], left[reader.wanted :]
            answered = reader.feed(taken)
            if answered is not None:
                assert 0 == reader.wanted
                return answered[0], answered[1] + left + b"".join(chunks[index + 1 :])
    return None


HEAD: Final = b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"


@pytest.mark.parametrize("split", SPLITS)
def test_the_head_and_what_follows_come_apart(split: Callable[[bytes], list[bytes]]) -> None:
    assert (HEAD, b"\x16\x03\x01") == gathered(split(HEAD + b"\x16\x03\x01"))
    assert gathered(split(HEAD[:-1])) is None  # not yet a head


@pytest.mark.parametrize("split", SPLITS)
def test_the_bound_on_both_sides(split: Callable[[bytes], list[bytes]]) -> None:
    line = b"GET http://a.example/ HTTP/1.0\r\n"
    filler = b"X: " + b"a" * (MAXIMUM_HEAD_BYTES - len(line) - 3 - len(HEAD_END)) + HEAD_END
    at = line + filler
    assert MAXIMUM_HEAD_BYTES == len(at)
    assert (at, b"") == gathered(split(at))
    assert isinstance(parse_head(at), Request)
    over = line + b"X: " + b"a" * MAXIMUM_HEAD_BYTES
    answered = gathered(split(over))
    assert answered is not None
    head, unread = answered
    assert head + unread == over
    assert MAXIMUM_HEAD_BYTES < len(head) <= MAXIMUM_HEAD_BYTES + len(HEAD_END) + 1
    with pytest.raises(BadRequest) as caught:
        parse_head(head)
    assert 431 == caught.value.status


def test_a_reader_takes_no_more_than_it_wants_and_answers_once() -> None:
    reader = HeadReader()
    with pytest.raises(ValueError, match="more bytes"):
        reader.feed(b"x" * (reader.wanted + 1))
    assert (HEAD, b"") == reader.feed(HEAD)
    with pytest.raises(ValueError, match="already answered"):
        reader.feed(b"")


@given(
    st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\r\n\r\n", b":"]), max_size=80).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_split_answers_what_the_whole_answers(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert gathered([data]) == gathered(chunks)


# -- against h11 ------------------------------------------------------------------------------


def h11_reads(head: bytes) -> h11.Request | None:
    """h11's reading of ``head`` as a server, or ``None`` when h11 refuses it."""
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAXIMUM_HEAD_BYTES)
    try:
        connection.receive_data(head)
        event = connection.next_event()
    except h11.RemoteProtocolError:
        return None
    return event if isinstance(event, h11.Request) else None


def agree(head: bytes) -> None:
    """The differential property for one head."""
    theirs = h11_reads(head)
    try:
        ours = parse_head(head)
    except BadRequest:
        return  # stricter is allowed
    assert theirs is not None, head  # never looser than h11
    assert theirs.http_version == ours.version.removeprefix(b"HTTP/")
    assert theirs.method == ours.method
    kept = [(name.lower(), value) for name, value in ours.headers]
    if ours.tunnel:
        assert theirs.target.lower() == head.split(b" ")[1].lower()
    else:
        assert list(theirs.headers) == kept


_TOKEN_CHARACTERS: Final = (
    "!#$%&'*+-.^_`|~" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)
_names = st.text(alphabet=_TOKEN_CHARACTERS, min_size=1, max_size=12)
_values = st.text(alphabet=[chr(c) for c in range(0x20, 0x7F)] + ["\t"], max_size=20)
_hosts = st.sampled_from(["a.example", "pypi.org", "127.0.0.2", "[2001:db8::1]", "x-y.example"])


@st.composite
def valid_heads(draw: st.DrawFn) -> bytes:
    """Heads of the two forms the proxy takes, as a client would send them."""
    host = draw(_hosts)
    port = draw(st.integers(min_value=1, max_value=65535))
    version = draw(st.sampled_from([b"HTTP/1.0", b"HTTP/1.1"]))
    headers = draw(st.lists(st.tuples(_names, _values), max_size=6))
    lines = [(name + ": " + value).encode() for name, value in headers]
    if draw(st.booleans()):
        line = b"CONNECT " + f"{host}:{port}".encode() + b" " + version
    else:
        method = draw(st.sampled_from([b"GET", b"POST", b"HEAD", b"PUT"]))
        path = draw(st.sampled_from([b"/", b"/a/b?q=1", b"/simple/"]))
        line = method + b" http://" + f"{host}:{port}".encode() + path + b" " + version
    host_header = f"Host: {host}:{port}".encode()
    return b"\r\n".join([line, host_header, *lines]) + HEAD_END


@settings(max_examples=300)
@given(valid_heads())
def test_a_valid_head_is_read_the_same_by_both(head: bytes) -> None:
    assert h11_reads(head) is not None
    ours = parse_head(head)
    agree(head)
    assert ours.port >= 1


@settings(max_examples=500)
@given(
    st.lists(
        st.sampled_from(
            [b"GET ", b"CONNECT ", b"http://a.example", b":443", b"/x", b" HTTP/1.1", b" HTTP/1.0",
             b"\r\n", b"\n", b"\r", b"Host: a.example", b"X: y", b" ", b"\t", b":", b"\x00",
             b"\xff", b"\r\n\r\n", b"HTTP/2.0", b"@", b"[::1]"]
        ),
        max_size=14,
    ).map(b"".join)
)  # fmt: skip
def test_any_head_ours_accepts_h11_accepts_and_reads_alike(data: bytes) -> None:
    head = data if data.endswith(HEAD_END) else data + HEAD_END
    agree(head)


@pytest.mark.parametrize(
    "head",
    [
        b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n folded\r\n\r\n",
        b"GET http://a.example/ HTTP/1.1\r\nHost : a.example\r\n\r\n",
        b"GET http://a.example/ HTTP/1.1\nHost: a.example\n\n",
        b"GET http://a.example/ HTTP/1.1\r\nHost: a\x00.example\r\n\r\n",
    ],
)
def test_what_h11_refuses_or_reads_loosely_the_proxy_refuses(head: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_head(head)
