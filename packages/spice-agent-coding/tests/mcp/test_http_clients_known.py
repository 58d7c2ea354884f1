"""The HTTP server knows the client on each request (contract 13.4, issue 47).

The server is stateless: each request is a new MCP session. Gemini CLI initialized as
``gemini-cli-mcp-client`` and still got the portable listing and a 265,865-character page,
which it cut. A raw HTTP client here speaks as Gemini CLI does (``initialize`` with its
name, then requests with no session id); it gets the Gemini listing (``nullable``) and a
page within ``GEMINI_TEXT_CHARS`` with ``next_offset``, as on stdio. The other sides: a
caller that named itself otherwise (another token, or another ``User-Agent``) keeps the
portable dialect; the 2026-07-28 ``clientInfo`` in ``_meta`` and a ``User-Agent`` that
names Gemini are known without an ``initialize``; the memory of callers is bounded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx2
import pytest
from http_support import WAIT, HttpServer, answer_of, call_body, http_server

from spice.agent.coding._mcp._clients import (
    CLIENT_INFO_META_KEY,
    MAXIMUM_CLIENT_NAME_CHARS,
    MAXIMUM_KNOWN_CLIENTS,
    KnownClients,
    client_name,
    initialize_name,
)
from spice.agent.coding._mcp._dialects import GEMINI_TEXT_CHARS

GEMINI: Final = "gemini-cli-mcp-client"
NODE_AGENT: Final = "node"
"""The ``User-Agent`` of Node's ``fetch`` (what Gemini CLI's transport sends)."""
BIG_PAGE: Final = b"".join(b"value_%06d = compute(%d)\n" % (n, n) for n in range(12_000))[:262_144]
PROTOCOL: Final = "2025-06-18"


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "big.py").write_bytes(BIG_PAGE)
    return root


async def post(
    http: httpx2.AsyncClient, server: HttpServer, body: dict[str, Any], who: str, agent: str
) -> dict[str, Any] | None:
    headers = server.headers(who, **{"user-agent": agent, "mcp-protocol-version": PROTOCOL})
    response = await http.post(server.url, headers=headers, json=body)
    assert response.status_code in {200, 202}, response.text
    assert "mcp-session-id" not in response.headers  # still stateless
    return answer_of(response) if "id" in body else None


async def initialize(
    http: httpx2.AsyncClient,
    server: HttpServer,
    name: str,
    who: str = "full",
    agent: str = NODE_AGENT,
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": name, "version": "0.61.0"},
        },
    }
    await post(http, server, body, who, agent)
    await post(http, server, {"jsonrpc": "2.0", "method": "notifications/initialized"}, who, agent)


async def dialect_seen(
    http: httpx2.AsyncClient,
    server: HttpServer,
    who: str = "full",
    agent: str = NODE_AGENT,
    meta: dict[str, Any] | None = None,
) -> tuple[bool, int, int | None]:
    """``(nullable in the listing, characters of read's text block, the next_offset the
    text block gives)``."""
    listing: dict[str, Any] = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    call = call_body("read", {"path": "big.py"}, 3)
    if meta is not None:
        listing["params"]["_meta"] = meta
        call["params"]["_meta"] = meta
    listed = await post(http, server, listing, who, agent)
    assert listed is not None
    schema = json.dumps(listed["result"]["tools"])
    answered = await post(http, server, call, who, agent)
    assert answered is not None
    result = answered["result"]
    text = "".join(b.get("text", "") for b in result["content"] if b["type"] == "text")
    shown = json.loads(text)  # the text block the model reads: a whole, shorter page
    return "nullable" in schema, len(text), shown.get("next_offset")


async def test_a_client_that_initialized_as_gemini_gets_its_dialect_over_http(
    tmp_path: Path, worktree: Path
) -> None:
    scopes = {"full": "shell", "other": "shell"}
    async with (
        http_server(tmp_path, worktree, scopes=scopes) as server,
        httpx2.AsyncClient(timeout=WAIT) as http,
    ):
        await initialize(http, server, GEMINI)
        nullable, chars, offset = await dialect_seen(http, server)
        assert nullable
        assert chars <= GEMINI_TEXT_CHARS
        assert offset is not None
        assert 30_000 < offset < 40_000
        # Another credential that initialized as the mcp SDK: the portable dialect, whole.
        await initialize(http, server, "mcp", who="other")
        portable = await dialect_seen(http, server, who="other")
        assert not portable[0]
        assert portable[1] > len(BIG_PAGE)
        # The same credential with another User-Agent is another caller.
        await initialize(http, server, "mcp", agent="python-httpx/0.28")
        assert not (await dialect_seen(http, server, agent="python-httpx/0.28"))[0]
        # And the first caller is still known.
        assert (await dialect_seen(http, server))[0]


async def test_the_meta_client_info_and_a_gemini_user_agent_are_known_without_initialize(
    tmp_path: Path, worktree: Path
) -> None:
    async with (
        http_server(tmp_path, worktree) as server,
        httpx2.AsyncClient(timeout=WAIT) as http,
    ):
        meta = {CLIENT_INFO_META_KEY: {"name": GEMINI, "version": "1"}}
        nullable, chars, _ = await dialect_seen(http, server, meta=meta)
        assert (nullable, chars <= GEMINI_TEXT_CHARS) == (True, True)
        assert (await dialect_seen(http, server, agent="GeminiCLI/0.61.0 (linux; x64)"))[0]
        assert not (await dialect_seen(http, server, agent="curl/8"))[0]


def test_the_memory_of_callers_is_bounded_on_both_sides() -> None:
    known = KnownClients()
    for index in range(MAXIMUM_KNOWN_CLIENTS):
        known.learn((str(index), ""), f"c{index}")
    assert known.name_of(("0", "")) == "c0"
    known.learn(("0", ""), "again")  # a caller seen again is the newest
    known.learn(("new", ""), "new")
    assert known.name_of(("0", "")) == "again"
    assert known.name_of(("1", "")) is None  # the oldest went
    assert known.name_of(("new", "")) == "new"


def test_names_are_read_bounded_and_only_from_initialize() -> None:
    long = "g" * (MAXIMUM_CLIENT_NAME_CHARS + 5)
    message = {"method": "initialize", "params": {"clientInfo": {"name": long}}}
    assert initialize_name(message) == long[:MAXIMUM_CLIENT_NAME_CHARS]
    assert (
        initialize_name({"method": "tools/list", "params": {"clientInfo": {"name": "x"}}}) is None
    )
    assert initialize_name({"method": "initialize", "params": {"clientInfo": {"name": 3}}}) is None
    assert initialize_name({"method": "initialize", "params": []}) is None
    assert client_name(None, None, None) is None
    assert client_name(None, {CLIENT_INFO_META_KEY: {"name": ""}}, None) is None
