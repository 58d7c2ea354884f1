"""The proxy's request-head parser: the two forms, every refusal, its bounds, fuzzed."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._netpolicy._head import (
    CHUNKED,
    HEAD_END,
    MAXIMUM_CHUNK_LINE_BYTES,
    MAXIMUM_HEAD_BYTES,
    MAXIMUM_HEADERS,
    BadRequest,
    Body,
    Request,
    origin_head,
    parse_head,
)


def test_connect_names_a_host_and_port() -> None:
    request = parse_head(b"CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert request == Request("pypi.org", 443, tunnel=True)
    assert request.authority == "pypi.org:443"
    v6 = parse_head(b"CONNECT [2001:db8::1]:8443 HTTP/1.0\r\n\r\n")
    assert (v6.host, v6.port, v6.authority) == ("2001:db8::1", 8443, "[2001:db8::1]:8443")


def test_an_absolute_request_becomes_origin_form_with_the_checked_host() -> None:
    head = (
        b"POST http://example.com:8080/a/b?q=1#frag HTTP/1.1\r\n"
        b"Host: evil.example\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n"
        b"Proxy-Authorization: Basic x\r\nContent-Length: 3\r\nUser-Agent: t\r\n\r\n"
    )
    request = parse_head(head)
    assert (request.host, request.port, request.path) == ("example.com", 8080, b"/a/b?q=1")
    sent = origin_head(request)
    assert sent.startswith(b"POST /a/b?q=1 HTTP/1.1\r\n")
    assert b"Host: example.com:8080\r\n" in sent
    assert b"Connection: close\r\n\r\n" in sent
    assert b"Content-Length: 3\r\n" in sent
    assert b"User-Agent: t\r\n" in sent
    for dropped in (b"evil", b"X-Drop", b"Proxy-Authorization", b"keep-alive"):
        assert dropped not in sent
    bare = parse_head(b"GET http://example.com HTTP/1.1\r\n\r\n")
    assert (bare.port, bare.path) == (80, b"/")
    assert b"Host: example.com\r\n" in origin_head(bare)


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"CONNECT pypi.org HTTP/1.1\r\n\r\n", 400),  # no port
        (b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", 400),  # IPv6 without brackets
        (b"CONNECT [::1:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT user@pypi.org:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT bad_host:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", 400),
        (b"GET /relative HTTP/1.1\r\n\r\n", 400),  # a proxy needs the absolute form
        (b"GET https://pypi.org/ HTTP/1.1\r\n\r\n", 400),  # https goes through CONNECT
        (b"GET http://user:pw@pypi.org/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://pypi.org/ HTTP/2.0\r\n\r\n", 505),
        (b"GET  http://pypi.org/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://pypi.org/ HTTP/1.1\n\r\n\r\n", 400),  # a bare LF
        (b"GET http://pypi.org/ HTTP/1.1\r\n folded\r\n\r\n", 400),
        (b"GET http://pypi.org/ HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"GET http://pypi.org/ HTTP/1.1\r\nX: \x00\r\n\r\n", 400),
        (b"GET http://pypi.org/ HTTP/1.1\r\nX: y", 400),  # no blank line
    ],
)
def test_what_is_not_understood_is_a_bad_request_with_its_status(head: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_head(head)
    assert raised.value.status == status


def _padded(total: int) -> bytes:
    """A valid head of exactly ``total`` bytes (one header stretched to fit)."""
    start = b"GET http://pypi.org/ HTTP/1.1\r\nX: "
    return start + b"a" * (total - len(start) - len(HEAD_END)) + HEAD_END


def test_the_head_bound_holds_on_both_sides() -> None:
    assert parse_head(_padded(MAXIMUM_HEAD_BYTES)).host == "pypi.org"
    with pytest.raises(BadRequest) as raised:
        parse_head(_padded(MAXIMUM_HEAD_BYTES + 1))
    assert raised.value.status == 431


def test_the_header_count_bound_holds_on_both_sides() -> None:
    line = b"GET http://pypi.org/ HTTP/1.1\r\n"
    assert len(parse_head(line + b"X: y\r\n" * MAXIMUM_HEADERS + b"\r\n").headers) == 100
    with pytest.raises(BadRequest) as raised:
        parse_head(line + b"X: y\r\n" * (MAXIMUM_HEADERS + 1) + b"\r\n")
    assert raised.value.status == 431


@given(st.binary(max_size=512))
def test_any_bytes_are_a_request_or_a_bad_request(data: bytes) -> None:
    statuses: set[int] = set()
    for head in (data, data + HEAD_END, b"CONNECT " + data + HEAD_END):
        try:
            request = parse_head(head)
        except BadRequest as bad:
            statuses.add(bad.status)
            continue
        assert 1 <= request.port <= 65535
        assert request.host
        assert request.host.isascii()
        if not request.tunnel:
            sent = origin_head(request)
            assert sent.endswith(HEAD_END)
            assert sent.count(HEAD_END) == 1
    assert statuses <= {400, 431, 505}


_HOST = st.lists(
    st.text(string.ascii_lowercase, min_size=1, max_size=12), min_size=1, max_size=4
).map(".".join)
_VALUE = st.text(string.ascii_letters + string.digits + " ;=/-", max_size=40)
_HEADERS = st.lists(
    st.tuples(
        st.text(string.ascii_letters + "-", min_size=1, max_size=20).filter(
            lambda name: name.lower() not in {"content-length", "transfer-encoding"}
        ),
        _VALUE,
    ),
    max_size=MAXIMUM_HEADERS,
)


@given(_HOST, st.integers(1, 65535), _HEADERS)
def test_a_generated_connect_reads_back(
    host: str, port: int, headers: list[tuple[str, str]]
) -> None:
    lines = [f"CONNECT {host}:{port} HTTP/1.1", *(f"{n}: {v}" for n, v in headers)]
    request = parse_head(("\r\n".join(lines) + "\r\n\r\n").encode())
    assert (request.host, request.port, request.tunnel) == (host, port, True)


@given(_HOST, st.integers(1, 65535), st.text(string.ascii_letters + "/?=&", max_size=60), _HEADERS)
def test_a_generated_request_keeps_every_end_to_end_header(
    host: str, port: int, path: str, headers: list[tuple[str, str]]
) -> None:
    lines = [f"GET http://{host}:{port}/{path} HTTP/1.1", *(f"{n}: {v}" for n, v in headers)]
    request = parse_head(("\r\n".join(lines) + "\r\n\r\n").encode())
    assert (request.host, request.port) == (host, port)
    sent = origin_head(request).decode()
    assert sent.startswith(f"GET /{path.partition('#')[0]} HTTP/1.1\r\n")
    assert sent.count("\r\nHost: ") == 1
    hop = {"connection", "proxy-connection", "keep-alive", "te", "trailer", "upgrade", "host"}
    hop |= {"content-length", "transfer-encoding"}
    hop |= {"proxy-authorization", "proxy-authenticate"}
    named = {
        item.strip().lower()
        for n, v in headers
        if n.lower() in {"connection", "proxy-connection"}
        for item in v.split(",")
    }
    for name, value in headers:
        if name.lower() not in hop and name.lower() not in named:
            assert f"\r\n{name}: {value.strip()}\r\n" in sent


# -- the body's framing ----------------------------------------------------------------


def test_a_body_is_framed_by_the_proxy_not_by_what_connection_names() -> None:
    """R5-13: ``Connection: content-length`` made the proxy drop the length and send the
    body unframed; the framing is the proxy's own now."""
    request = parse_head(
        b"POST http://x.org/ HTTP/1.1\r\nConnection: content-length\r\nContent-Length: 5\r\n\r\n"
    )
    assert request.length == 5
    assert b"\r\nContent-Length: 5\r\n" in origin_head(request)
    chunked = parse_head(
        b"PUT http://x.org/ HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\nConnection: x\r\n\r\n"
    )
    assert chunked.length == CHUNKED
    assert b"\r\nTransfer-Encoding: chunked\r\n" in origin_head(chunked)
    empty = parse_head(b"POST http://x.org/ HTTP/1.1\r\n\r\n")
    assert (empty.length, b"\r\nContent-Length: 0\r\n" in origin_head(empty)) == (0, True)
    get = parse_head(b"GET http://x.org/ HTTP/1.1\r\n\r\n")
    assert b"Content-Length" not in origin_head(get)


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: gzip\r\n",
        b"Content-Length: 4\r\nContent-Length: 5\r\n",
        b"Content-Length: 4x\r\n",
        b"Content-Length: " + b"9" * 19 + b"\r\n",
    ],
)
def test_a_body_framed_two_ways_or_unreadably_is_a_bad_request(framing: bytes) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_head(b"POST http://x.org/ HTTP/1.1\r\n" + framing + b"\r\n")
    assert raised.value.status == 400


def test_the_same_length_twice_is_one_length() -> None:
    head = b"POST http://x.org/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n"
    assert parse_head(head).length == 4


_CHUNKS = st.lists(st.binary(min_size=1, max_size=40), max_size=6)


def _chunked(chunks: list[bytes], trailers: list[bytes]) -> bytes:
    parts = [b"%x\r\n" % len(chunk) + chunk + b"\r\n" for chunk in chunks]
    return b"".join(parts) + b"0\r\n" + b"".join(t + b"\r\n" for t in trailers) + b"\r\n"


@given(
    _CHUNKS,
    st.lists(st.sampled_from([b"X-A: 1", b"Digest: x"]), max_size=2),
    st.binary(max_size=40),
    st.lists(st.integers(1, 30), max_size=20),
)
def test_a_chunked_body_ends_where_its_last_chunk_says_however_it_is_cut(
    chunks: list[bytes], trailers: list[bytes], after: bytes, cuts: list[int]
) -> None:
    whole = _chunked(chunks, trailers)
    data = whole + after
    body = Body(CHUNKED)
    taken, at = 0, 0
    for size in [*cuts, len(data)]:
        piece = data[at : at + size]
        at += len(piece)
        count = body.take(piece)
        taken += count
        if count < len(piece):
            break
    assert body.done
    assert taken == len(whole)


@given(st.integers(0, 1000), st.binary(max_size=100))
def test_a_length_takes_exactly_its_bytes(length: int, after: bytes) -> None:
    body = Body(length)
    data = b"x" * length + after
    assert body.take(data) == length
    assert body.done
    assert body.take(b"more") == 0


@pytest.mark.parametrize(
    "data",
    [b"zz\r\n", b"5\nhello", b"5\r\nhello!\r\n", b"0\r\nno colon\r\n", b"1" * 16 + b"\r\n"],
)
def test_a_malformed_chunked_body_is_a_bad_request(data: bytes) -> None:
    with pytest.raises(BadRequest):
        Body(CHUNKED).take(data)


def test_a_chunk_line_bound_holds_on_both_sides() -> None:
    at_bound = b"1;" + b"e" * (MAXIMUM_CHUNK_LINE_BYTES - 2) + b"\r\n"
    body = Body(CHUNKED)
    assert body.take(at_bound) == len(at_bound)
    over = b"1;" + b"e" * (MAXIMUM_CHUNK_LINE_BYTES - 1) + b"\r\n"
    with pytest.raises(BadRequest):
        Body(CHUNKED).take(over)


def test_a_trailer_bound_holds() -> None:
    body = Body(CHUNKED)
    body.take(b"0\r\n")
    line = b"X: " + b"a" * 1000 + b"\r\n"
    lines = MAXIMUM_HEAD_BYTES // len(line)
    assert body.take(line * lines) == len(line) * lines  # at the bound
    with pytest.raises(BadRequest) as raised:
        body.take(line)
    assert raised.value.status == 431
