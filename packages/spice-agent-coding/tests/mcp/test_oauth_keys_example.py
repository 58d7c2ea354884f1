"""``examples/oauth_keys.sh`` (shown in ``docs/remote.md``): the documented command makes the
signing keys ``scripts/oauth-server`` starts with (issue 47: the step had no command)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Final

import pytest
from oauth_support import WAIT, _start, node_missing

EXAMPLE: Final = Path(__file__).resolve().parents[4] / "examples" / "oauth_keys.sh"


def key_command() -> str:
    """The example's lines up to the ``chmod`` (the key's making), as one shell script."""
    lines = EXAMPLE.read_text().splitlines()
    return "\n".join(
        lines[: next(i for i, line in enumerate(lines) if line.startswith("chmod")) + 1]
    )


def test_the_example_makes_keys_and_starts_the_documented_server() -> None:
    text = EXAMPLE.read_text()
    assert "node scripts/oauth-server/server.mjs --keys keys.json" in text
    assert "--resource http://127.0.0.1:8765/mcp" in text  # serve's default resource


@pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))
async def test_the_documented_keys_start_the_authorization_server(tmp_path: Path) -> None:
    made = ["sh", "-c", key_command()]
    await asyncio.to_thread(subprocess.run, made, cwd=tmp_path, check=True, timeout=WAIT)
    keys = tmp_path / "keys.json"
    assert 0o600 == keys.stat().st_mode & 0o777
    [key] = json.loads(keys.read_text())["keys"]
    assert ("k1", "RS256", "RSA") == (key["kid"], key["alg"], key["kty"])
    assert "d" in key  # private: the server signs with it
    output = bytearray()
    process, issuer, drain = await _start(keys, ["http://127.0.0.1:8765/mcp"], 0, "RS256", output)
    try:
        assert issuer.startswith("http://127.0.0.1:")
    finally:
        process.terminate()
        async with asyncio.timeout(WAIT):
            await process.wait()
            await drain
