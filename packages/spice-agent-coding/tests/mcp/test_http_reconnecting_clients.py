"""Slow clients that reconnect cannot keep a whole request out (round 5's R6-B1).

The real transport on a loopback bind (in process, the default 10 s request deadline);
one-byte connections reopened as soon as they are closed, on threads of their own
(``reopen_support``): 64 from the client's own address (127.0.0.1: on a loopback bind every
local client is that address), or 64 from each of four addresses. Meanwhile a client that
sends a whole request is served, each time within the contract's 5 s.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
import pytest
from http_support import ACCEPT, LIST_BODY, WAIT, answer_of, names_of
from reopen_support import reopening
from test_http_request_bounds import guarded

from spice.agent.coding._mcp import _request_bounds

SERVED_WITHIN = 5.0
"""The contract (13.3): the whole request is served within this many seconds."""
TRIES = 5
ONE = ["127.0.0.1"] * 64
FOUR = [f"127.0.0.{11 + n // 64}" for n in range(4 * 64)]


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    return root


async def _served(url: str, token: str) -> list[str]:
    headers = {"authorization": f"Bearer {token}", "accept": ACCEPT, "connection": "close"}
    async with asyncio.timeout(SERVED_WITHIN), httpx2.AsyncClient(timeout=WAIT) as http:
        answer = await http.post(url, json=LIST_BODY, headers=headers)
    assert 200 == answer.status_code
    return names_of(answer_of(answer))


@pytest.mark.parametrize("sources", [ONE, FOUR], ids=["64-from-its-own-address", "4x64"])
async def test_a_whole_request_is_served_while_slow_clients_reconnect(
    tmp_path: Path, worktree: Path, sources: list[str]
) -> None:
    async with guarded(tmp_path, worktree, _request_bounds.REQUEST_SECONDS) as (url, token):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with reopening(port, sources) as attack:
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(WAIT):
                await loop.run_in_executor(None, attack.ready.wait, WAIT)
            assert attack.ready.is_set()
            for _ in range(TRIES):
                assert ["read"] == await _served(url, token)
            # The attack was still running: nothing closed its connections for it.
            assert not attack.stop.is_set()
