"""The TLS reverse proxy example (``examples/caddy/Caddyfile``) parsed by Caddy itself.

``caddy adapt`` turns the Caddyfile into Caddy's JSON (nothing is started, no certificate
asked for); the test holds that JSON to what docs/remote.md promises: TLS on 443 for the
public name, head and body deadlines, only the MCP endpoint and its OAuth metadata
proxied to the server on loopback, answers flushed as they stream, 404 for the rest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest

from spice.agent.coding._mcp._http_settings import DEFAULT_HTTP_PORT, DEFAULT_REQUEST_SECONDS

CADDYFILE: Final = Path(__file__).resolve().parents[4] / "examples" / "caddy" / "Caddyfile"
NANOSECONDS: Final = 1_000_000_000

pytestmark = pytest.mark.skipif(
    shutil.which("caddy") is None, reason="caddy is missing (make bootstrap installs it)"
)


def _adapted() -> dict[str, Any]:
    done = subprocess.run(
        ["caddy", "adapt", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    adapted: dict[str, Any] = json.loads(done.stdout)
    return adapted


def _handlers(routes: list[dict[str, Any]]) -> list[tuple[list[str], dict[str, Any]]]:
    """Each leaf handler with the paths of the route that holds it."""
    found: list[tuple[list[str], dict[str, Any]]] = []

    def walk(route: dict[str, Any], paths: list[str]) -> None:
        for match in route.get("match", []):
            paths = match.get("path", paths)
        for handler in route.get("handle", []):
            if handler["handler"] == "subroute":
                for inner in handler["routes"]:
                    walk(inner, paths)
            else:
                found.append((paths, handler))

    for route in routes:
        walk(route, [])
    return found


def test_the_caddyfile_proxies_only_the_endpoint_and_its_metadata_over_tls() -> None:
    server = _adapted()["apps"]["http"]["servers"]["srv0"]
    assert [":443"] == server["listen"]
    assert DEFAULT_REQUEST_SECONDS * NANOSECONDS == server["read_header_timeout"]
    assert DEFAULT_REQUEST_SECONDS * NANOSECONDS == server["read_timeout"]
    assert 0 < server["idle_timeout"]
    (route,) = server["routes"]
    assert [{"host": ["mcp.example.com"]}] == route["match"]
    handlers = _handlers(server["routes"])
    proxies = [(paths, h) for paths, h in handlers if h["handler"] == "reverse_proxy"]
    assert 1 == len(proxies)
    paths, proxy = proxies[0]
    assert {
        "/mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    } == set(paths)
    assert [{"dial": f"127.0.0.1:{DEFAULT_HTTP_PORT}"}] == proxy["upstreams"]
    assert -1 == proxy["flush_interval"]
    assert "headers" not in proxy  # the Host passes unchanged: the server checks it
    rest = [h for paths, h in handlers if not paths]
    assert [{"handler": "static_response", "status_code": 404}] == rest
