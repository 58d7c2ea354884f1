"""What ``serve --transport http`` is told: where to listen, how to authenticate, bounds.

``_settings`` reads the flags and makes an ``HttpSettings``; the HTTP transport
(``_http``) obeys it. Beside the transport, so the transport never imports the CLI's
settings (contract 12.5); the standard library only, so ``_settings`` stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, final

__all__ = ["HttpSettings"]

DEFAULT_HTTP_HOST: Final = "127.0.0.1"
DEFAULT_HTTP_PORT: Final = 8765
DEFAULT_HTTP_PATH: Final = "/mcp"
DEFAULT_MAX_CONCURRENT_CALLS: Final = 16
MAXIMUM_CONCURRENT_CALLS: Final = 1024
DEFAULT_CALLS_PER_MINUTE: Final = 600
MAXIMUM_CALLS_PER_MINUTE: Final = 1_000_000
DEFAULT_SHUTDOWN_GRACE: Final = 5.0
MAXIMUM_SHUTDOWN_GRACE: Final = 300.0
MAXIMUM_ALLOWED_ORIGINS: Final = 32
MAXIMUM_URL_LENGTH: Final = 2048
DEFAULT_REQUEST_SECONDS: Final = 10.0
"""A request's head and body must arrive within this many seconds (``_guard``)."""
NEEDS_ACCESS: Final = (
    "--transport http needs --token-file PATH or --oauth-issuer URL (or --insecure-no-auth alone)"
)
OAUTH_FLAGS: Final = (
    ("--oauth-issuer", "URL", "HTTP: accept JWT access tokens of this OAuth issuer (https)"),
    ("--oauth-audience", "URI", "HTTP: the aud those tokens must hold (default: the URL)"),
    ("--oauth-introspection-url", "URL", "HTTP: introspect opaque tokens there (RFC 7662)"),
    ("--oauth-client-file", "PATH", "HTTP: CLIENT_ID CLIENT_SECRET for the introspection"),
)
OAUTH_FIELDS: Final = tuple(flag[2:].replace("-", "_") for flag, _, _ in OAUTH_FLAGS)
"""The ``HttpSettings`` fields (and ``argparse`` destinations) of ``OAUTH_FLAGS``."""


def access_problem(token_file: bool, no_auth: bool, oauth: Mapping[str, object]) -> str | None:
    """Why the access flags do not go together (one line), or ``None``: a token file or an
    issuer, or ``--insecure-no-auth`` alone; the other OAuth flags only with an issuer; the
    introspection URL and the client file together."""
    issuer = oauth.get("oauth_issuer")
    if (not token_file and issuer is None) == (not no_auth):
        return NEEDS_ACCESS
    others = ("oauth_audience", "oauth_introspection_url", "oauth_client_file")
    if issuer is None and any(oauth.get(name) is not None for name in others):
        return "--oauth-audience and --oauth-introspection-url need --oauth-issuer"
    if (oauth.get("oauth_introspection_url") is None) != (oauth.get("oauth_client_file") is None):
        return "--oauth-introspection-url and --oauth-client-file go together"
    return None


@final
@dataclass(frozen=True, slots=True)
class HttpSettings:
    """How ``serve --transport http`` listens, authenticates and bounds (contract 11.2)."""

    host: str = DEFAULT_HTTP_HOST
    port: int = DEFAULT_HTTP_PORT
    path: str = DEFAULT_HTTP_PATH
    token_file: str | None = None
    insecure_no_auth: bool = False
    allow_remote: bool = False
    public_url: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allow_uncontained_shell: bool = False
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    rate: int = DEFAULT_CALLS_PER_MINUTE
    audit_log: str | None = None
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    oauth_issuer: str | None = None
    """``--oauth-issuer``: access tokens of this authorization server are accepted too."""
    oauth_audience: str | None = None
    oauth_introspection_url: str | None = None
    """``--oauth-introspection-url``: opaque tokens are introspected there (RFC 7662)."""
    oauth_client_file: str | None = None
    """``--oauth-client-file``: this server's ``CLIENT_ID CLIENT_SECRET`` at the issuer."""
    request_seconds: float = DEFAULT_REQUEST_SECONDS
    """How long a request's head and body may take to arrive (no flag: tests lower it)."""
    """``--oauth-audience``: what their ``aud`` must hold (default: the resource URL)."""
