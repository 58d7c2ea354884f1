"""Contract 12.3: a ``read`` over HTTP with an OAuth access token against a token-file token.

One server (``serve --transport http --token-file F --oauth-issuer I``) trusts a real
authorization server (``oidc-provider``, ``scripts/oauth-server``, on loopback) whose
signing key this bench made, so it signs its own access token (RS256, the resource's
``aud``, scope ``read``): the verification is the server's, the same as for a token got
through the flow. Two ``mcp`` SDK clients over streamable HTTP, one per token, alternate
in rounds. Figures (OAuth / token file):

- ``read`` of a 4 KiB file, 1 call in flight: latency (lower is better);
- the same with 16 calls in flight: throughput (higher is better).

Target (issue 38): at most 1.1x on both.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import shutil
import socket
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from _harness import (
    KIB,
    REPOSITORY,
    Figure,
    Settings,
    Target,
    Unavailable,
    main_of,
    milliseconds,
    pending_reason,
    spice_coding,
    summarize,
    write_text,
)

if TYPE_CHECKING:
    from mcp import Client

SECTION: Final = "oauth"
READ_BYTES: Final = 4 * KIB
IN_FLIGHT: Final = 16
START_SECONDS: Final = 60.0
LISTENING: Final = b"listening on "
SERVER_DIR: Final = REPOSITORY / "scripts" / "oauth-server"
LATENCY: Final = f"read {READ_BYTES // KIB} KiB, 1 in flight: latency, OAuth beside token file"
RATE: Final = (
    f"read {READ_BYTES // KIB} KiB, {IN_FLIGHT} in flight: throughput, OAuth beside token file"
)
TARGETS: Final = (
    Target(SECTION, LATENCY, most=1.1, source="issue 38"),
    Target(SECTION, RATE, least=1 / 1.1, source="issue 38"),
)
_DRAINS: set[asyncio.Future[bytes]] = set()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _started(command: list[str], marker: bytes, cwd: Path) -> tuple[Any, str]:
    """A process started and the rest of its line after ``marker`` (stdout and stderr)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    async with asyncio.timeout(START_SECONDS):
        while line := await process.stdout.readline():
            if marker in line:
                _DRAINS.add(asyncio.ensure_future(process.stdout.read()))
                return process, line.split(marker, 1)[1].strip().decode()
    raise Unavailable("a server of the OAuth bench did not start")


def _key(base: Path) -> tuple[Any, str]:
    """A private RSA key, written as the issuer's JWKS; the key and its kid."""
    import jwt  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    jwk.update(kid="bench", alg="RS256", use="sig")
    (base / "keys.json").write_text(json.dumps({"keys": [jwk]}))
    return key, "bench"


async def _latencies(client: Client, calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        result = await client.call_tool("read", {"path": "page.txt"})
        samples.append(time.perf_counter() - started)
        if result.is_error:
            raise Unavailable("a read failed")
    return samples


async def _throughput(client: Client, calls: int) -> float:
    async def worker(count: int) -> None:
        for _ in range(count):
            await client.call_tool("read", {"path": "page.txt"})

    started = time.perf_counter()
    await asyncio.gather(*(worker(calls // IN_FLIGHT) for _ in range(IN_FLIGHT)))
    return (calls // IN_FLIGHT * IN_FLIGHT) / (time.perf_counter() - started)


async def measure(settings: Settings) -> dict[str, dict[str, list[float]]]:
    import httpx2  # noqa: PLC0415
    import jwt  # noqa: PLC0415
    from mcp import Client  # noqa: PLC0415
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

    if shutil.which("node") is None or not (SERVER_DIR / "node_modules").is_dir():
        raise Unavailable("node or scripts/oauth-server is missing (make bootstrap)")
    base = Path(tempfile.mkdtemp(prefix="spice-bench-oauth-"))
    try:
        root = base / "tree"
        root.mkdir()
        write_text(root / "page.txt", READ_BYTES)
        key, kid = _key(base)
        file_token = secrets.token_urlsafe(32)
        digest = hashlib.sha256(file_token.encode()).hexdigest()
        (base / "tokens").write_text(f"bench read {digest}\n")
        (base / "tokens").chmod(0o600)
        port = _free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        node = ["node", str(SERVER_DIR / "server.mjs"), "--keys", str(base / "keys.json")]
        issuer_process, issuer = await _started([*node, "--resource", url], LISTENING, SERVER_DIR)
        server_process = None
        try:
            server_process, _ = await _started(
                [
                    str(spice_coding()), "serve", "--transport", "http", "--port", str(port),
                    "--root", str(root), "--token-file", str(base / "tokens"),
                    "--oauth-issuer", issuer, "--max-calls-per-minute", "1000000",
                    "--max-concurrent-calls", "1024", "--audit-log", str(base / "audit.jsonl"),
                ],
                LISTENING,
                base,
            )  # fmt: skip
            now = int(time.time())
            claims: dict[str, object] = {"iss": issuer, "aud": url, "sub": "bench"}
            claims |= {"client_id": "bench", "scope": "read", "iat": now, "exp": now + 3600}
            oauth_token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})
            async with AsyncExitStack() as stack:
                clients: dict[str, Client] = {}
                for name, token in (("oauth", oauth_token), ("file", file_token)):
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            headers={"Authorization": f"Bearer {token}"},
                            timeout=httpx2.Timeout(60, read=300),
                            limits=httpx2.Limits(max_connections=IN_FLIGHT * 2),
                        )
                    )
                    clients[name] = await stack.enter_async_context(
                        Client(streamable_http_client(url, http_client=http))
                    )
                for client in clients.values():
                    await _latencies(client, settings.warmup)
                latency: dict[str, list[float]] = {"oauth": [], "file": []}
                rate: dict[str, list[float]] = {"oauth": [], "file": []}
                calls = max(IN_FLIGHT, settings.mcp_batch_calls)
                for round_number in range(settings.mcp_batches):
                    order = ["oauth", "file"] if round_number % 2 == 0 else ["file", "oauth"]
                    for name in order:
                        latency[name] += await _latencies(clients[name], calls)
                        rate[name].append(await _throughput(clients[name], calls))
        finally:
            for process in (server_process, issuer_process):
                if process is not None and process.returncode is None:
                    process.terminate()
                    async with asyncio.timeout(START_SECONDS):
                        await process.wait()
        return {"latency": latency, "rate": rate}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(settings: Settings) -> list[Figure]:
    """OAuth / token file for read latency (1 in flight) and throughput (16 in flight)."""
    try:
        measured = asyncio.run(measure(settings))
    except (Unavailable, OSError, TimeoutError) as failure:
        reason = pending_reason(failure)
        return [
            Figure(SECTION, name, None, "none", "", None, unavailable=reason, ratio_applies=False)
            for name in (LATENCY, RATE)
        ]
    latency, rate = measured["latency"], measured["rate"]
    return [
        Figure(
            SECTION,
            LATENCY,
            milliseconds(latency["oauth"]),
            "peer",
            "the same server with a token-file token",
            milliseconds(latency["file"]),
            notes=("an RS256 JWT checked against the issuer's JWKS; the mcp SDK's client",),
        ),
        Figure(
            SECTION,
            RATE,
            summarize(rate["oauth"], "calls/s"),
            "peer",
            "the same server with a token-file token",
            summarize(rate["file"], "calls/s"),
            higher_is_better=True,
        ),
    ]


if __name__ == "__main__":
    sys.exit(main_of(run))
