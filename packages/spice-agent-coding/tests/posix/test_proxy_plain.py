"""Plain HTTP through the proxy's HTTP path: one request per upstream connection (R5-13).

A real ``CallProxy`` and a loopback server that records each connection's head, body
and whatever came after the body (it half-closes after its answer and reads on, so a
byte the proxy let through after the request would be seen). The body is framed by the
proxy (``Content-Length`` or chunked), never by what ``Connection`` names; a pipelined
request, or a body past its length, never reaches the upstream.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field

import pytest
from netutil import Handler, Loopback, loopback
from test_proxy import ask, call_policy

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="UNIX sockets, POSIX only")


@dataclass
class Seen:
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    after: list[bytes] = field(default_factory=list)


def recorder(seen: Seen) -> Handler:
    async def record(
        _: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.heads.append(head)
        lower = head.lower()
        body = b""
        if b"transfer-encoding: chunked" in lower:
            body = await reader.readuntil(b"\r\n0\r\n")
            while (line := await reader.readline()) not in {b"\r\n", b""}:
                body += line  # a trailer line
            body += line
        elif b"content-length: " in lower:
            length = int(lower.split(b"content-length: ")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
        seen.bodies.append(body)
        answer = b"got %d" % len(body)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)
        await writer.drain()
        writer.write_eof()
        seen.after.append(await reader.read())

    return record


async def send(port: int, request: bytes, pattern: str | None = None) -> tuple[bytes, Seen, int]:
    """``request`` sent whole through a call's proxy to a recording server; the status
    line and the rest of the answer, what the server saw, and how many it accepted."""
    seen = Seen()
    async with loopback(recorder(seen)) as server:
        call = await call_policy(pattern or f"127.0.0.1:{server.port}").open_call()
        try:
            reader, writer, status = await ask(
                call, request.replace(b"PORT", str(server.port).encode())
            )
            async with asyncio.timeout(30):
                answer = status + await reader.read()
            writer.close()
            if server.opened:
                async with asyncio.timeout(30):
                    await server.ended.wait()
        finally:
            await call.close()
        return answer, seen, server.opened


async def test_a_pipelined_request_never_reaches_the_upstream() -> None:
    request = (
        b"GET http://127.0.0.1:PORT/a HTTP/1.1\r\n\r\n"
        b"GET /b HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        b"GET http://other.example/ HTTP/1.1\r\n\r\n"
    )
    answer, seen, opened = await send(0, request)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"got 0")
    assert opened == 1
    assert len(seen.heads) == 1
    assert seen.heads[0].startswith(b"GET /a HTTP/1.1\r\n")
    assert seen.after == [b""]


async def test_a_body_is_framed_by_its_length_whatever_connection_names() -> None:
    """``Connection: content-length`` dropped the length before: the upstream then read
    the body as the next request. Now the proxy frames the body itself."""
    request = (
        b"POST http://127.0.0.1:PORT/up HTTP/1.1\r\nConnection: content-length\r\n"
        b"Content-Length: 5\r\n\r\nhello"
        b"GET /smuggled HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    )
    answer, seen, _ = await send(0, request)
    assert answer.endswith(b"got 5")
    assert b"\r\nContent-Length: 5\r\n" in seen.heads[0]
    assert seen.bodies == [b"hello"]
    assert seen.after == [b""]


async def test_a_chunked_body_goes_on_as_sent_up_to_its_last_chunk() -> None:
    body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    request = (
        b"PUT http://127.0.0.1:PORT/up HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"
        + body
        + b"GET /smuggled HTTP/1.1\r\n\r\n"
    )
    answer, seen, _ = await send(0, request)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nTransfer-Encoding: chunked\r\n" in seen.heads[0]
    assert seen.bodies == [body]
    assert seen.after == [b""]


@pytest.mark.parametrize(
    "framing",
    [
        pytest.param(b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", id="both"),
        pytest.param(b"Transfer-Encoding: gzip, chunked\r\n", id="another coding"),
        pytest.param(b"Content-Length: 4\r\nContent-Length: 5\r\n", id="two lengths"),
        pytest.param(b"Content-Length: -4\r\n", id="a negative length"),
    ],
)
async def test_an_ambiguous_body_is_a_400_and_reaches_no_upstream(framing: bytes) -> None:
    request = b"POST http://127.0.0.1:PORT/ HTTP/1.1\r\n" + framing + b"\r\n0\r\n\r\n"
    answer, _, opened = await send(0, request)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert opened == 0


async def test_a_malformed_chunk_ends_the_body_there() -> None:
    request = (
        b"POST http://127.0.0.1:PORT/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nGET /smuggled HTTP/1.1\r\n\r\n"
    )
    seen = Seen()

    async def head_only(
        _: Loopback, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        seen.heads.append(await reader.read())

    async with loopback(head_only) as server:
        call = await call_policy(f"127.0.0.1:{server.port}").open_call()
        try:
            _, writer, status = await ask(call, request.replace(b"PORT", str(server.port).encode()))
            assert status == b""  # closed: nothing to answer
            writer.close()
        finally:
            await call.close()
    assert server.opened == 1
    assert b"smuggled" not in b"".join(seen.heads)


async def test_a_large_body_streams_whole_in_many_reads() -> None:
    """The framed side across many reads: 4 MiB, each byte once, nothing after."""
    body = bytes(range(256)) * (4 * 4096)
    request = (
        b"POST http://127.0.0.1:PORT/big HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
        + b"trailing junk"
    )
    answer, seen, _ = await send(0, request)
    assert answer.endswith(b"got %d" % len(body))
    assert seen.bodies == [body]
    assert seen.after == [b""]
