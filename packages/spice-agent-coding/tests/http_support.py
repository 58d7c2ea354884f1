"""A real ``spice-coding serve --transport http`` subprocess for the tests, and its clients.

``http_server`` writes a private token file (outside the worktree), starts the installed
console script on port 0, waits (bounded) for its ``listening on URL`` line and keeps
reading its stderr so the pipe never fills. Clients: the SDK's ``mcp.Client`` over its
streamable HTTP transport (either protocol era), and raw ``httpx2`` requests.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from private_support import open_up, private

from spice.agent.coding._mcp._tokens import digest_of

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
SERVE: Final = (
    (str(SCRIPT),)
    if sys.platform != "win32"
    else (
        sys.executable,
        "-c",
        "import sys; from spice.agent.coding._cli import main; sys.exit(main())",
    )
)
"""The server's command: the console script, or on Windows (where the Wine environment
installs none) the same ``main`` through the interpreter."""
WAIT: Final = 30.0
"""Bound on every wait for the server (its start, an answer, its exit)."""
LISTENING: Final = re.compile(rb"listening on (http://\S+)")
ACCEPT: Final = "application/json, text/event-stream"
MODES: Final = ("auto", "legacy")
"""The SDK client's protocol eras: ``auto`` speaks 2026-07-28 to this server (one POST a
request); ``legacy`` does the 2025 initialize handshake (the manager's stateless path)."""


@dataclass
class HttpServer:
    """A running server: its process, URL, the tokens by name, and its stderr so far."""

    process: asyncio.subprocess.Process
    url: str
    tokens: dict[str, str]
    token_file: Path
    stderr: bytearray = field(default_factory=bytearray)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def headers(self, name: str | None = "full", **extra: str) -> dict[str, str]:
        """Headers of a JSON POST, with the named token's bearer when ``name`` is given."""
        headers = {"content-type": "application/json", "accept": ACCEPT, **extra}
        if name is not None:
            headers["authorization"] = f"Bearer {self.tokens[name]}"
        return headers

    async def finish(self, number: int = signal.SIGTERM) -> int:
        """Send ``number`` and wait (bounded) for the exit code."""
        if self.process.returncode is None:
            self.process.send_signal(number)
        async with asyncio.timeout(WAIT):
            return await self.process.wait()


def write_tokens(path: Path, scopes: Mapping[str, str], mode: int = 0o600) -> dict[str, str]:
    """A token file with one fresh token per ``name: scopes``; returns the tokens."""
    tokens = {name: secrets.token_urlsafe(32) for name in scopes}
    lines = [f"{name} {scopes[name]} {digest_of(token)}\n" for name, token in tokens.items()]
    private(path, "".join(lines))
    if mode != 0o600:
        open_up(path, mode)
    return tokens


DEFAULT_SCOPES: Final = {"full": "shell", "writer": "write", "reader": "read"}


async def _pump(stream: asyncio.StreamReader, into: bytearray) -> None:
    while line := await stream.readline():
        into += line


@asynccontextmanager
async def http_server(
    tmp_path: Path,
    root: Path,
    *extra: str,
    scopes: Mapping[str, str] = DEFAULT_SCOPES,
    auth: bool = True,
    env: Mapping[str, str] | None = None,
    token_file: Path | None = None,
    oauth: Sequence[str] = (),
) -> AsyncIterator[HttpServer]:
    """Start ``serve --transport http --port 0`` on ``root``; stop it (SIGTERM, then kill).

    ``token_file``: one made already (``token add``), used as it is (no tokens are known).
    ``oauth``: the ``--oauth-*`` flags, beside the token file (or alone when ``auth`` is
    false: no ``--insecure-no-auth`` then)."""
    tokens: dict[str, str] = {}
    if token_file is None:
        token_file = tmp_path / "tokens"
        tokens = write_tokens(token_file, scopes) if auth else {}
    access = ["--token-file", str(token_file)] if auth else ["--insecure-no-auth"]
    if oauth:
        access = [*(access if auth else []), *oauth]
    process = await asyncio.create_subprocess_exec(
        *SERVE,
        "serve",
        "--transport",
        "http",
        "--port",
        "0",
        "--root",
        str(root),
        *access,
        *extra,
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
    )
    assert process.stderr is not None
    stderr = bytearray()
    pump: asyncio.Future[None] | None = None
    try:
        async with asyncio.timeout(WAIT):
            while (found := LISTENING.search(stderr)) is None:
                line = await process.stderr.readline()
                if not line:
                    raise AssertionError("the server exited: " + stderr.decode(errors="replace"))
                stderr += line
        pump = asyncio.ensure_future(_pump(process.stderr, stderr))
        yield HttpServer(process, found.group(1).decode(), tokens, token_file, stderr)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(WAIT):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        if pump is not None:
            async with asyncio.timeout(WAIT):
                await pump


@asynccontextmanager
async def sdk_client(url: str, token: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP with a bearer token."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def call_body(name: str, arguments: Mapping[str, Any], ident: int = 1) -> dict[str, Any]:
    """A ``tools/call`` JSON-RPC request."""
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": name, "arguments": dict(arguments)},
    }


LIST_BODY: Final = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, whether sent as JSON or as SSE events."""
    import json  # noqa: PLC0415

    if response.headers.get("content-type", "").startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    for line in response.text.splitlines():
        if line.startswith("data: "):
            message: dict[str, Any] = json.loads(line[6:])
            if "id" in message:
                return message
    raise AssertionError("no answer in the response")


def names_of(answer: Mapping[str, Any]) -> list[str]:
    return sorted(tool["name"] for tool in answer["result"]["tools"])
