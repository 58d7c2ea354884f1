"""``spice-coding serve --transport http``: a real subprocess, the SDK's streamable HTTP
client and raw ``httpx2``/``urllib`` requests (contract 11.2): every refusal, the scopes at
listing and at call time, revocation, the limits, the audit, cancellation and SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from http_support import (
    LIST_BODY,
    MODES,
    SCRIPT,
    WAIT,
    answer_of,
    call_body,
    http_server,
    names_of,
    sdk_client,
    write_tokens,
)
from mcp import MCPError
from test_mcp_stdio import processes_inside, until

from spice.agent.coding._mcp._challenge import AUTHENTICATION_REQUIRED
from spice.agent.coding._mcp._gate import STOPPED_MESSAGE
from spice.agent.coding._mcp._http import MAXIMUM_BODY_BYTES

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def commands_inside(directory: Path, argv: tuple[str, ...]) -> list[int]:
    """The processes inside ``directory`` (``processes_inside``) running ``argv`` (its first
    word matched by name: the launcher runs the resolved path)."""
    found: list[int] = []
    for pid in processes_inside(directory):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                words = os.fsdecode(file.read()).split("\0")[:-1]
        except OSError:
            continue
        if words[1:] == list(argv[1:]) and words and os.path.basename(words[0]) == argv[0]:
            found.append(pid)
    return found


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "notes.txt").write_text("first\n")
    return tree


async def post(url: str, body: bytes | dict[str, Any], headers: dict[str, str]) -> httpx2.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx2.AsyncClient(timeout=WAIT) as client:
        return await client.post(url, content=data, headers=headers)


# --- authentication ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer a b"]
)
async def test_no_or_a_wrong_token_is_401_with_www_authenticate_and_a_json_body(
    tmp_path: Path, worktree: Path, authorization: str | None
) -> None:
    """Without a valid bearer token: 401, ``WWW-Authenticate: Bearer``, a JSON body; with no
    token at all, no ``error`` code (RFC 6750 §3.1), else ``invalid_token``."""
    async with http_server(tmp_path, worktree) as server:
        headers = server.headers(None)
        if authorization is not None:
            headers["authorization"] = authorization
        response = await post(server.url, LIST_BODY, headers)
    assert 401 == response.status_code
    assert response.headers["www-authenticate"].startswith("Bearer")
    if authorization is None:
        assert "Bearer" == response.headers["www-authenticate"]
        assert "error" not in response.json()
    else:
        assert response.headers["www-authenticate"].startswith("Bearer ")
        assert "invalid_token" == response.json()["error"]


async def test_the_sdk_client_without_a_token_is_refused(tmp_path: Path, worktree: Path) -> None:
    """The SDK's own client fails to list without a token (no tool is shown to anyone)."""
    async with http_server(tmp_path, worktree) as server:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error for a 401
            async with sdk_client(server.url, None) as client:
                await client.list_tools()


async def test_a_token_in_the_query_string_is_refused_and_never_logged(
    tmp_path: Path, worktree: Path
) -> None:
    """``?access_token=...`` is 400 even with a valid token; stderr never shows it."""
    async with http_server(tmp_path, worktree) as server:
        token = server.tokens["full"]
        response = await post(f"{server.url}?access_token={token}", LIST_BODY, server.headers())
        code = await server.finish()
    assert 400 == response.status_code
    assert -32600 == response.json()["error"]["code"]
    assert 0 == code
    assert token.encode() not in server.stderr


async def test_urllib_with_the_token_lists_and_without_gets_401(
    tmp_path: Path, worktree: Path
) -> None:
    """The standard library's client: 200 with the token, 401 without (a second client)."""
    async with http_server(tmp_path, worktree) as server:
        data = json.dumps(LIST_BODY).encode()

        def fetch(headers: dict[str, str]) -> tuple[int, bytes]:
            request = urllib.request.Request(server.url, data=data, headers=headers, method="POST")  # noqa: S310 - an http:// URL of the test's own server
            try:
                with urllib.request.urlopen(request, timeout=WAIT) as answer:  # noqa: S310
                    return answer.status, answer.read()
            except urllib.error.HTTPError as refused:
                return refused.code, refused.read()

        good = await asyncio.to_thread(fetch, server.headers("reader"))
        bad = await asyncio.to_thread(fetch, server.headers(None))
    assert 200 == good[0]
    assert b'"name":"read"' in good[1]
    assert (401, AUTHENTICATION_REQUIRED) == (bad[0], json.loads(bad[1])["error_description"])


async def test_a_token_removed_from_the_file_is_refused_at_the_next_request(
    tmp_path: Path, worktree: Path
) -> None:
    """Revocation without a restart: rewrite the file without a token; it gets 401."""
    async with http_server(tmp_path, worktree) as server:
        before = await post(server.url, LIST_BODY, server.headers("reader"))
        kept = {"full": server.tokens["full"]}
        from spice.agent.coding._mcp._tokens import digest_of  # noqa: PLC0415

        server.token_file.write_text(f"full shell {digest_of(kept['full'])}\n")
        after = await post(server.url, LIST_BODY, server.headers("reader"))
        still = await post(server.url, LIST_BODY, server.headers("full"))
    assert (200, 401, 200) == (before.status_code, after.status_code, still.status_code)


async def test_a_token_file_opened_to_others_later_accepts_no_token(
    tmp_path: Path, worktree: Path
) -> None:
    """Fail closed: a file that becomes group-readable refuses every token until fixed."""
    async with http_server(tmp_path, worktree) as server:
        server.token_file.chmod(0o640)
        opened = await post(server.url, LIST_BODY, server.headers("full"))
        server.token_file.chmod(0o600)
        fixed = await post(server.url, LIST_BODY, server.headers("full"))
    assert (401, 200) == (opened.status_code, fixed.status_code)


async def test_an_expired_token_is_refused_and_one_ending_later_accepted(
    tmp_path: Path, worktree: Path
) -> None:
    """``NOT-AFTER`` in the past refuses; a date in the future accepts (the day's end)."""
    async with http_server(tmp_path, worktree) as server:
        from spice.agent.coding._mcp._tokens import digest_of  # noqa: PLC0415

        full = server.tokens["full"]
        reader = server.tokens["reader"]
        server.token_file.write_text(
            f"full shell {digest_of(full)} 2001-01-01\nreader read {digest_of(reader)} 2999-12-31\n"
        )
        expired = await post(server.url, LIST_BODY, server.headers("full"))
        valid = await post(server.url, LIST_BODY, server.headers("reader"))
    assert (401, 200) == (expired.status_code, valid.status_code)


# --- Host, Origin, path, body -----------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"host": "evil.example.com"}, 403),
        ({"host": "127.0.0.1:1"}, 403),
        ({"origin": "http://evil.example.com"}, 403),
        ({"origin": "null"}, 403),
        ({"origin": "https://agent.example.org"}, 200),
        ({"host": "mcp.example.net"}, 200),
        ({"host": "localhost"}, 403),
    ],
)
async def test_host_and_origin_are_checked_against_the_allowed_sets(
    tmp_path: Path, worktree: Path, extra: dict[str, str], status: int
) -> None:
    """A foreign Host or Origin is 403 (DNS rebinding); --public-url and --allowed-origin
    extend the sets; the refusal comes before authentication."""
    flags = (
        "--public-url",
        "https://mcp.example.net/mcp",
        "--allowed-origin",
        "https://agent.example.org",
    )
    async with http_server(tmp_path, worktree, *flags) as server:
        response = await post(server.url, LIST_BODY, server.headers("reader", **extra))
    assert status == response.status_code
    if status == 403:
        assert None is response.json()["id"]


async def test_the_loopback_origin_of_the_port_is_accepted(tmp_path: Path, worktree: Path) -> None:
    """On a loopback bind, ``http://127.0.0.1:PORT`` and ``http://localhost:PORT`` pass."""
    async with http_server(tmp_path, worktree) as server:
        statuses = [
            (await post(server.url, LIST_BODY, server.headers("reader", origin=o))).status_code
            for o in (f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}")
        ]
    assert [200, 200] == statuses


async def test_another_path_is_404(tmp_path: Path, worktree: Path) -> None:
    """Only ``--path`` is served."""
    async with http_server(tmp_path, worktree, "--path", "/tools/mcp") as server:
        assert server.url.endswith("/tools/mcp")
        elsewhere = await post(
            server.url.replace("/tools/mcp", "/mcp"), LIST_BODY, server.headers()
        )
        here = await post(server.url, LIST_BODY, server.headers())
    assert (404, 200) == (elsewhere.status_code, here.status_code)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b"this is not json", "application/json", 400, -32700),
        (b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', "application/json", 400, -32600),
        (b'"just a string"', "application/json", 400, -32600),
        (json.dumps(LIST_BODY).encode(), "text/plain", 400, -32600),
        (b"", "application/json", 400, -32700),
    ],
)
async def test_bodies_that_are_not_one_json_message_get_clean_json_errors(
    tmp_path: Path, worktree: Path, body: bytes, content_type: str, status: int, code: int
) -> None:
    """Not JSON, a batch, a non-object, a non-JSON type, an empty body: 400 with a JSON-RPC
    error; the server answers the next request."""
    async with http_server(tmp_path, worktree) as server:
        response = await post(server.url, body, server.headers(**{"content-type": content_type}))
        after = await post(server.url, LIST_BODY, server.headers())
    assert (status, code) == (response.status_code, response.json()["error"]["code"])
    assert 200 == after.status_code


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_methods_other_than_post_are_405(tmp_path: Path, worktree: Path, method: str) -> None:
    """Stateless: no GET stream (it would stay open with nothing on it), no session to end."""
    async with (
        http_server(tmp_path, worktree) as server,
        httpx2.AsyncClient(timeout=WAIT) as client,
    ):
        response = await client.request(method, server.url, headers=server.headers())
    assert (405, "POST") == (response.status_code, response.headers["allow"])


async def test_a_header_less_request_gets_a_clean_refusal(tmp_path: Path, worktree: Path) -> None:
    """A POST with no headers of ours at all (no token, no type, no accept): 401, JSON."""
    async with (
        http_server(tmp_path, worktree) as server,
        httpx2.AsyncClient(timeout=WAIT) as client,
    ):
        response = await client.post(server.url, content=b"{}")
    assert 401 == response.status_code
    assert {"error_description": AUTHENTICATION_REQUIRED} == response.json()


async def test_a_body_over_8_mib_is_413_and_one_at_the_bound_is_not(
    tmp_path: Path, worktree: Path
) -> None:
    """The body bound: one byte over is 413 (declared or streamed); exactly at it is served."""
    async with http_server(tmp_path, worktree) as server:
        prefix = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"pad":"'
        suffix = b'"}}}'
        at = prefix + b"a" * (MAXIMUM_BODY_BYTES - len(prefix) - len(suffix)) + suffix
        assert MAXIMUM_BODY_BYTES == len(at)
        over = at[: -len(suffix)] + b"a" + suffix
        fits = await post(server.url, at, server.headers())
        refused = await post(server.url, over, server.headers())

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(over), 1 << 20):
                yield over[start : start + (1 << 20)]

        async with httpx2.AsyncClient(timeout=WAIT) as client:
            streamed = await client.post(server.url, content=chunks(), headers=server.headers())
    assert 200 == fits.status_code
    assert (413, 413) == (refused.status_code, streamed.status_code)


# --- scopes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_the_listing_shows_only_what_each_token_may_call(
    tmp_path: Path, worktree: Path, mode: str
) -> None:
    """read sees read; write adds replace; shell adds shell (the SDK client, both eras)."""
    async with http_server(tmp_path, worktree) as server:
        seen = {}
        for name in ("reader", "writer", "full"):
            async with sdk_client(server.url, server.tokens[name], mode) as client:
                seen[name] = sorted(t.name for t in (await client.list_tools()).tools)
    assert {
        "reader": ["read"],
        "writer": ["read", "replace"],
        "full": ["read", "replace", "shell"],
    } == seen


@pytest.mark.parametrize(
    ("token", "tool"), [("reader", "replace"), ("reader", "shell"), ("writer", "shell")]
)
async def test_a_call_outside_the_scopes_is_forbidden_whatever_the_listing_said(
    tmp_path: Path, worktree: Path, token: str, tool: str
) -> None:
    """A raw tools/call of an unlisted tool answers ``forbidden``; nothing ran or changed."""
    arguments = (
        {"path": "notes.txt", "content": "x", "create": True}
        if tool == "replace"
        else {"argv": ["touch", "ran"]}
    )
    async with http_server(tmp_path, worktree) as server:
        response = await post(server.url, call_body(tool, arguments), server.headers(token))
    result = answer_of(response)["result"]
    assert (True, "forbidden") == (result["isError"], result["structuredContent"]["code"])
    assert "first\n" == (worktree / "notes.txt").read_text()
    assert not (worktree / "ran").exists()


async def test_a_scoped_token_calls_what_it_may(tmp_path: Path, worktree: Path) -> None:
    """The writer replaces a file; the reader reads it (the SDK client)."""
    async with http_server(tmp_path, worktree) as server:
        async with sdk_client(server.url, server.tokens["writer"]) as client:
            replaced = await client.call_tool(
                "replace", {"path": "new.txt", "content": "made\n", "create": True}
            )
        async with sdk_client(server.url, server.tokens["reader"], "legacy") as client:
            read = await client.call_tool("read", {"path": "new.txt"})
    assert False is replaced.is_error
    assert "made\n" == read.structured_content["content"]


async def test_without_containment_shell_is_withheld_unless_allowed(
    tmp_path: Path, worktree: Path
) -> None:
    """``--sandbox off``: shell is neither listed nor callable, with a stderr line saying so;
    ``--allow-uncontained-shell`` serves it, with a warning."""
    async with http_server(tmp_path, worktree, "--sandbox", "off") as server:
        listed = names_of(answer_of(await post(server.url, LIST_BODY, server.headers())))
        called = answer_of(
            await post(server.url, call_body("shell", {"argv": ["true"]}), server.headers())
        )
    assert ["read", "replace"] == listed
    assert "forbidden" == called["result"]["structuredContent"]["code"]
    assert b"shell is not served over HTTP" in server.stderr
    async with http_server(
        tmp_path, worktree, "--sandbox", "off", "--allow-uncontained-shell"
    ) as server:
        listed = names_of(answer_of(await post(server.url, LIST_BODY, server.headers())))
    assert ["read", "replace", "shell"] == listed
    assert b"warning: shell is served over HTTP uncontained" in server.stderr


# --- limits ---------------------------------------------------------------------------------


async def test_past_the_concurrency_cap_a_call_is_busy_and_served_after(
    tmp_path: Path, worktree: Path
) -> None:
    """--max-concurrent-calls 1: while ``sleep`` runs, a read is ``busy``; after, it is served."""
    async with http_server(tmp_path, worktree, "--max-concurrent-calls", "1") as server:
        async with sdk_client(server.url, server.tokens["full"]) as client:
            sleeping = asyncio.ensure_future(client.call_tool("shell", {"argv": ["sleep", "60"]}))
            await until(lambda: processes_inside(worktree))
            busy = await client.call_tool("read", {"path": "notes.txt"})
            sleeping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeping
            await until(lambda: not processes_inside(worktree))
        async with sdk_client(server.url, server.tokens["full"]) as client:
            after = await client.call_tool("read", {"path": "notes.txt"})
    assert (True, "busy") == (busy.is_error, busy.structured_content["code"])
    assert False is after.is_error


async def test_past_the_rate_a_call_is_429_with_retry_after(tmp_path: Path, worktree: Path) -> None:
    """--max-calls-per-minute 2: the third tools/call of a token is 429 with Retry-After;
    another token and a tools/list are not counted against it."""
    async with http_server(tmp_path, worktree, "--max-calls-per-minute", "2") as server:
        read = call_body("read", {"path": "notes.txt"})
        first = [
            (await post(server.url, read, server.headers("reader"))).status_code for _ in range(2)
        ]
        third = await post(server.url, read, server.headers("reader"))
        listing = await post(server.url, LIST_BODY, server.headers("reader"))
        other = await post(server.url, read, server.headers("writer"))
    assert [200, 200] == first
    assert 429 == third.status_code
    assert 1 <= int(third.headers["retry-after"]) <= 60
    assert (200, 200) == (listing.status_code, other.status_code)


# --- audit and secrets ------------------------------------------------------------------------


async def test_the_audit_log_has_one_line_per_call_and_no_token_or_content(
    tmp_path: Path, worktree: Path
) -> None:
    """--audit-log: created 0600; a line per call with its fields; never the token, the
    arguments or the output."""
    log = tmp_path / "audit.jsonl"
    async with http_server(tmp_path, worktree, "--audit-log", str(log)) as server:
        async with sdk_client(server.url, server.tokens["reader"]) as client:
            await client.call_tool("read", {"path": "notes.txt"})
            await client.call_tool("shell", {"argv": ["echo", "SECRET-ARGUMENT"]})
        assert 0 == await server.finish()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert 0o600 == stat.S_IMODE(log.stat().st_mode)
    assert [("read", "ok"), ("shell", "forbidden")] == [
        (line["tool"], line["outcome"]) for line in lines
    ]
    assert {
        "time",
        "token",
        "peer",
        "tool",
        "call_id",
        "arguments_sha256",
        "outcome",
        "ms",
        "bytes_out",
    } == set(lines[0])
    assert "reader" == lines[0]["token"]
    assert lines[0]["peer"].startswith("127.0.0.1:")
    text = log.read_text()
    for secret in (server.tokens["reader"], "SECRET-ARGUMENT", "first"):
        assert secret not in text
    assert b"audit {" not in server.stderr


async def test_the_token_never_reaches_a_command_stderr_or_argv(
    tmp_path: Path, worktree: Path
) -> None:
    """``env`` run through shell, the server's stderr (audit included) and its
    ``/proc/PID/cmdline`` never hold the token."""
    async with http_server(tmp_path, worktree) as server:
        token = server.tokens["full"]
        cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()  # noqa: ASYNC240 - reading /proc once
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes()  # noqa: ASYNC240 - reading /proc once
        async with sdk_client(server.url, token) as client:
            shown = await client.call_tool("shell", {"argv": ["env"]})
        assert 0 == await server.finish()
    assert False is shown.is_error
    assert token not in shown.structured_content["stdout"]
    assert token.encode() not in server.stderr
    assert token.encode() not in cmdline + environ
    assert b'"outcome":"ok"' in server.stderr


# --- cancellation, progress, shutdown -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_disconnects_cancels_its_call_and_leaves_no_process(
    tmp_path: Path, worktree: Path, mode: str
) -> None:
    """Closing the stream during ``sleep 60`` ends the command; the server keeps serving."""
    async with http_server(tmp_path, worktree) as server:
        async with sdk_client(server.url, server.tokens["full"], mode) as client:
            call = asyncio.ensure_future(client.call_tool("shell", {"argv": ["sleep", "60"]}))
            await until(lambda: processes_inside(worktree))
        call.cancel()
        with pytest.raises(BaseException):  # noqa: PT011, B017 - cancelled or closed, either way
            await call
        await until(lambda: not processes_inside(worktree))
        after = await post(server.url, call_body("read", {"path": "notes.txt"}), server.headers())
    assert [] == processes_inside(worktree)
    assert 200 == after.status_code
    assert b'"outcome":"cancelled"' in server.stderr


async def test_a_raw_client_that_closes_its_connection_cancels_the_call(
    tmp_path: Path, worktree: Path
) -> None:
    """httpx2 streaming a tools/call then closing the connection: no process is left."""
    async with http_server(tmp_path, worktree) as server:
        async with httpx2.AsyncClient(timeout=WAIT) as client:
            body = json.dumps(call_body("shell", {"argv": ["sleep", "60"]})).encode()
            request = client.build_request(
                "POST", server.url, content=body, headers=server.headers()
            )
            response = await client.send(request, stream=True)
            await until(lambda: processes_inside(worktree))
            await response.aclose()
        await until(lambda: not processes_inside(worktree))
    assert [] == processes_inside(worktree)


async def test_progress_arrives_over_sse(tmp_path: Path, worktree: Path) -> None:
    """A call with a progress callback hears from it over the SSE answer."""
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with (
        http_server(tmp_path, worktree) as server,
        sdk_client(server.url, server.tokens["full"]) as client,
    ):
        await client.call_tool("shell", {"argv": ["sleep", "6"]}, progress_callback=on_progress)
    assert "the call is still running" in seen


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_drains_and_exits_0_with_no_process_left(
    tmp_path: Path, worktree: Path, number: int
) -> None:
    """A signal during ``sleep 60``: the call gets the grace, is stopped, exit 0, nothing left."""
    async with (
        http_server(tmp_path, worktree, "--shutdown-grace", "1") as server,
        sdk_client(server.url, server.tokens["full"]) as client,
    ):
        call = asyncio.ensure_future(client.call_tool("shell", {"argv": ["sleep", "60"]}))
        await until(lambda: processes_inside(worktree))
        code = await server.finish(number)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
    assert 0 == code
    assert [] == processes_inside(worktree)
    assert b"stopped on a signal" in server.stderr


async def test_a_call_that_ends_within_the_grace_is_answered(
    tmp_path: Path, worktree: Path
) -> None:
    """SIGTERM during ``sleep 1`` with a 5 s grace: the answer still arrives, then exit 0."""
    async with http_server(tmp_path, worktree, "--shutdown-grace", "5") as server:
        body = call_body("shell", {"argv": ["sleep", "1"]})
        call = asyncio.ensure_future(post(server.url, body, server.headers()))
        await until(lambda: processes_inside(worktree))
        server.process.send_signal(signal.SIGTERM)
        result = answer_of(await call)["result"]
        code = await server.finish()
    assert (0, False, 0) == (code, result["isError"], result["structuredContent"]["exit_code"])


async def test_while_draining_no_new_call_is_taken_and_the_running_one_is_answered(
    tmp_path: Path, worktree: Path
) -> None:
    """After SIGTERM the listener closes (a new connection is refused) while ``sleep 2``,
    already running, still gets its answer within the grace; then exit 0."""
    async with http_server(tmp_path, worktree, "--shutdown-grace", "30") as server:
        body = call_body("shell", {"argv": ["sleep", "2"]})
        call = asyncio.ensure_future(post(server.url, body, server.headers()))
        await until(lambda: processes_inside(worktree))
        server.process.send_signal(signal.SIGTERM)

        def refused() -> bool:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=WAIT).close()
            except ConnectionRefusedError:
                return True
            return False

        await until(refused)
        result = answer_of(await call)["result"]
        code = await server.finish()
    assert (0, 0) == (code, result["structuredContent"]["exit_code"])


@pytest.mark.xfail(
    reason="known since round 6, session 2 (reproduced on 163e2a5 too, under load): a "
    "SIGKILLed HTTP server can leave its call's bwrap behind; to be fixed (closing note)",
    strict=False,
)
async def test_a_sigkilled_http_server_leaves_no_process_behind(
    tmp_path: Path, worktree: Path
) -> None:
    """SIGKILL of ``serve --transport http`` during ``sleep 60``: the command ends too (the
    supervisor sees its server die, as over stdio; polled, bounded by ``WAIT``). What a
    failure leaves is killed here, so that it cannot fail a later test."""
    try:
        async with http_server(tmp_path, worktree) as server:
            body = call_body("shell", {"argv": ["sleep", "60"]})
            call = asyncio.ensure_future(post(server.url, body, server.headers()))
            await until(lambda: processes_inside(worktree))
            assert -signal.SIGKILL == await server.finish(signal.SIGKILL)
            await until(lambda: not processes_inside(worktree))
            await asyncio.gather(call, return_exceptions=True)
        # Once more, bounded by WAIT (well below the command's 60 s): a process being set up
        # (its /proc/PID/cwd briefly unreadable) can hide from one look; an orphan cannot
        # hide from this one.
        await until(lambda: not processes_inside(worktree))
    finally:
        for pid in processes_inside(worktree):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await asyncio.gather(call, return_exceptions=True)
    # Once more, bounded by WAIT (well below the command's 60 s): a process being set up
    # (its /proc/PID/cwd briefly unreadable) can hide from one look; an orphan cannot
    # hide from this one.
    await until(lambda: not processes_inside(worktree))


# --- startup refusals ------------------------------------------------------------------------


async def run_serve(tmp_path: Path, *flags: str) -> tuple[int, bytes]:
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "serve",
        "--transport",
        "http",
        "--port",
        "0",
        *flags,
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(WAIT):
        _, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, err


@pytest.mark.parametrize(
    ("where", "mode", "extra", "reason"),
    [
        ("tree/tokens", 0o600, (), b"beneath the worktree"),
        ("tokens", 0o644, (), b"read or written by group or others"),
        ("tokens", 0o620, (), b"read or written by group or others"),
        ("tokens", 0o600, ("--host", "10.1.2.3"), b"needs --allow-remote"),
        (
            "tokens",
            0o600,
            ("--insecure-no-auth",),
            b"--oauth-issuer URL (or --insecure-no-auth alone)",
        ),
        ("tokens", 0o600, ("--port", "65536"), b"--port must be between 0 and 65535"),
        ("tokens", 0o600, ("--path", "mcp"), b"--path must be"),
        ("tokens", 0o600, ("--public-url", "ftp://x"), b"--public-url must be"),
        ("tokens", 0o600, ("--max-concurrent-calls", "0"), b"between 1 and 1024"),
        ("missing", 0o600, (), b"does not exist"),
    ],
)
async def test_startup_refusals_exit_2_naming_the_reason(
    tmp_path: Path, worktree: Path, where: str, mode: int, extra: tuple[str, ...], reason: bytes
) -> None:
    """A token file beneath the worktree or open to others, a remote bind without
    --allow-remote, both or neither of the access flags, bad values: exit 2, one line."""
    path = tmp_path / where
    if where != "missing":
        write_tokens(path, {"full": "shell"}, mode)
    code, err = await run_serve(
        tmp_path, "--root", str(worktree), "--token-file", str(path), *extra
    )
    assert 2 == code
    assert reason in err
    assert b"listening on" not in err


async def test_insecure_no_auth_is_refused_off_loopback_and_serves_on_it(
    tmp_path: Path, worktree: Path
) -> None:
    """--insecure-no-auth with a non-loopback host: exit 2; on loopback: every scope, a warning."""
    code, err = await run_serve(
        tmp_path,
        "--root",
        str(worktree),
        "--insecure-no-auth",
        "--host",
        "0.0.0.0",  # noqa: S104 - refused before anything is bound
        "--allow-remote",
    )
    assert (2, True) == (code, b"only with a loopback --host" in err)
    async with http_server(tmp_path, worktree, auth=False) as server:
        listed = names_of(answer_of(await post(server.url, LIST_BODY, server.headers(None))))
    assert ["read", "replace", "shell"] == listed
    assert b"warning: --insecure-no-auth" in server.stderr


async def test_http_flags_with_stdio_are_refused(tmp_path: Path, worktree: Path) -> None:
    """An HTTP flag without --transport http is a mistake, not silently ignored."""
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "serve",
        "--root",
        str(worktree),
        "--token-file",
        str(tmp_path / "t"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(WAIT):
        _, err = await process.communicate()
    assert (2, True) == (process.returncode, b"--token-file needs --transport http" in err)


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_still_running_after_the_grace_is_answered_that_the_server_stopped(
    tmp_path: Path, worktree: Path, mode: str
) -> None:
    """SIGTERM during ``sleep 60`` with a 1 s grace: the SDK client's call ends in a JSON-RPC
    error saying the server stopped (not a cut stream); exit 0, no process left, and the
    audit line says ``stopped``."""
    async with (
        http_server(tmp_path, worktree, "--shutdown-grace", "1") as server,
        sdk_client(server.url, server.tokens["full"], mode) as client,
    ):
        call = asyncio.ensure_future(client.call_tool("shell", {"argv": ["sleep", "60"]}))
        # The command itself runs (not only its supervisor, whose directory is the worktree
        # from its fork): the call is past its start, so the grace and the answer never
        # race a start that load slowed down (issue 43).
        await until(lambda: commands_inside(worktree, ("sleep", "60")))
        server.process.send_signal(signal.SIGTERM)
        with pytest.raises(MCPError) as raised:
            async with asyncio.timeout(WAIT):
                await call
        code = await server.finish()
    assert STOPPED_MESSAGE == raised.value.error.message
    assert 0 == code
    assert [] == processes_inside(worktree)
    assert b'"outcome":"stopped"' in server.stderr


@pytest.mark.parametrize(
    ("token_file", "audit_log", "reason"),
    [
        ("writable/tokens", None, b"token file lies inside an --allow-write directory"),
        ("writable/deeper/tokens", None, b"token file lies inside an --allow-write directory"),
        ("tokens", "tree/logs/audit.log", b"audit log lies beneath the worktree root"),
        ("tokens", "writable/audit.log", b"audit log lies inside an --allow-write directory"),
        ("tokens", "link/audit.log", b"audit log lies inside an --allow-write directory"),
    ],
)
async def test_a_token_file_or_audit_log_a_command_could_change_is_refused_at_start(
    tmp_path: Path, worktree: Path, token_file: str, audit_log: str | None, reason: bytes
) -> None:
    """R5-7: a token file inside an ``--allow-write`` directory (a command could append a
    token), an audit log beneath the root or inside one (a command could truncate it), also
    through a symbolic link: exit 2, one line, nothing listening; nothing created."""
    writable = tmp_path / "writable"
    (writable / "deeper").mkdir(parents=True)
    (tmp_path / "link").symlink_to(writable)
    (worktree / "logs").mkdir(exist_ok=True)
    write_tokens(tmp_path / token_file, {"full": "shell"})
    extra = () if audit_log is None else ("--audit-log", str(tmp_path / audit_log))
    code, err = await run_serve(
        tmp_path,
        "--root",
        str(worktree),
        "--allow-write",
        str(writable),
        "--token-file",
        str(tmp_path / token_file),
        *extra,
    )
    assert (2, 1) == (code, len(err.strip().splitlines())), err
    assert reason in err
    if audit_log is not None:
        assert not (tmp_path / audit_log).exists()
