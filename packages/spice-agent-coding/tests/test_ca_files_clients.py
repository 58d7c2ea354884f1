"""The certificate authority without the environment (contract 13.4, issue 47).

The ``mcp`` SDK's ``stdio_client`` (and fastmcp, and through them pydantic-ai, the OpenAI
Agents SDK, LangChain) starts the server with ``get_default_environment()``, so the host's
``SSL_CERT_FILE`` never reaches it. Here the installed console script is started exactly
so, with a settings file that allows an HTTPS stand-in on ``127.0.0.2`` signed by a
throwaway CA; a contained Python fetches from it. With ``ca_files`` naming the CA, every
CA file variable names one bundle of the host's store and that CA, and the fetch works;
without it, the fetch fails on the unknown issuer and the answer's ``sandbox_hint`` names
``ca_files`` and ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client

from spice.agent.coding._netpolicy._cabundle import BUNDLE_VARIABLES
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._hints import CA_HINT

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
PYTHON: Final = os.path.realpath(sys.executable)
HOST: Final = "127.0.0.2"
WAIT: Final = 60.0
"""Bound on the whole client session (never a timing assertion)."""
NAMESPACES: Final = _bwrap.resolve_namespaces("/tmp")
FETCH: Final = (
    "import json, os, sys, urllib.request\n"
    "names = " + repr(BUNDLE_VARIABLES) + "\n"
    "print(json.dumps({n: os.environ.get(n) for n in names}))\n"
    "sys.stdout.flush()\n"
    "print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())\n"
)

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="the POSIX sandbox's proxy"),
    pytest.mark.skipif(not NAMESPACES.made, reason="the call's proxy needs namespaces"),
]


def _openssl(*arguments: str) -> None:
    subprocess.run(["openssl", *arguments], check=True, capture_output=True, timeout=60)


def throwaway_ca(directory: Path) -> tuple[Path, Path, Path]:
    """``(ca.pem, leaf.pem, leaf.key)``: a CA and a leaf for ``HOST`` it signed."""
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    leaf, key, request = directory / "leaf.pem", directory / "leaf.key", directory / "leaf.csr"
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", str(ca_key), "-out", str(ca), "-days", "1",
             "-subj", "/CN=spice throwaway CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    _openssl("req", *curve, "-keyout", str(key), "-out", str(request), "-subj", f"/CN={HOST}")
    extensions = directory / "leaf.ext"
    extensions.write_text(f"subjectAltName=IP:{HOST}\n")
    signer = ("-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "1")
    _openssl("x509", "-req", "-in", str(request), *signer, "-out", str(leaf),
             "-extfile", str(extensions))  # fmt: skip
    return ca, leaf, key


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"stand-in ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """An HTTPS server on ``HOST`` with a leaf of a throwaway CA: ``(ca.pem, port)``."""
    ca, leaf, key = throwaway_ca(tmp_path)
    try:
        server = http.server.ThreadingHTTPServer((HOST, 0), _Hello)
    except OSError as error:
        pytest.skip(f"cannot listen on {HOST} here ({error.strerror})")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ca, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def _layout(tmp_path: Path, port: int, ca_files: list[str]) -> tuple[Path, Path]:
    """A worktree and a private settings file allowing the stand-in, naming ``ca_files``."""
    root, config = tmp_path / "root", tmp_path / "config"
    root.mkdir()
    config.mkdir(mode=0o700)
    settings = config / "settings.toml"
    settings.write_text(
        f'allow_domains = ["{HOST}:{port}"]\nallow_private_address = true\n'
        f"ca_files = {json.dumps(ca_files)}\n"
    )
    settings.chmod(0o600)
    return root, settings


def _holds(bundle: str, ca: Path) -> bool:
    return ca.read_text().strip() in Path(bundle).read_text()


async def fetch_through_a_framework(
    tmp_path: Path, port: int, ca_files: list[str]
) -> dict[str, Any]:
    root, settings = _layout(tmp_path, port, ca_files)
    environment = get_default_environment()
    assert not set(environment) & {*BUNDLE_VARIABLES, "SSL_CERT_DIR"}
    params = StdioServerParameters(
        command=str(SCRIPT),
        args=["serve", "--root", str(root), "--settings", str(settings)],
        env=environment,
    )
    argv = [PYTHON, "-c", FETCH, f"https://{HOST}:{port}/"]
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - /dev/null
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("shell", {"argv": argv, "timeout_seconds": 60})
    structured = result.structured_content
    assert isinstance(structured, dict)
    return structured


async def test_ca_files_reach_a_contained_command_under_the_sdk_default_environment(
    tmp_path: Path, stand_in: tuple[Path, int]
) -> None:
    ca, port = stand_in
    answer = await fetch_through_a_framework(tmp_path, port, [str(ca)])
    assert answer.get("contained") is True, answer
    assert answer.get("exit_code") == 0, (answer.get("stdout"), answer.get("stderr"))
    first, fetched = str(answer["stdout"]).splitlines()[:2]
    assert fetched == "stand-in ok"
    named = json.loads(first)
    bundles = set(named.values())
    assert len(bundles) == 1, named  # every file variable names the one bundle
    (bundle,) = bundles
    assert bundle is not None
    assert _holds(bundle, ca)
    assert "sandbox_hint" not in answer


async def test_without_ca_files_the_unknown_issuer_is_hinted(
    tmp_path: Path, stand_in: tuple[Path, int]
) -> None:
    """The other side, and the old code's behaviour: the fetch fails on the issuer; the
    hint names ``ca_files`` and ``SSL_CERT_FILE``."""
    _, port = stand_in
    answer = await fetch_through_a_framework(tmp_path, port, [])
    assert answer.get("exit_code") not in (0, None), answer
    assert "CERTIFICATE_VERIFY_FAILED" in str(answer.get("stderr")), answer
    assert answer.get("sandbox_hint") == CA_HINT
