"""The options of ``serve`` alone: the transport and HTTP's (no variables, no secrets).

``add_serve_arguments`` adds them to ``serve``'s parser; ``resolve_http`` turns the parsed
options into ``HttpSettings`` (``None`` for stdio), refusing a bad value with one fixed line
naming the flag. Moved out of ``_resolve`` (one concern per module).
"""

from __future__ import annotations

import argparse
import re
from typing import Final

from .._mcp._http_settings import (
    DEFAULT_CALLS_PER_MINUTE,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PATH,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_CONCURRENT_CALLS,
    DEFAULT_SHUTDOWN_GRACE,
    MAXIMUM_ALLOWED_ORIGINS,
    MAXIMUM_CALLS_PER_MINUTE,
    MAXIMUM_CONCURRENT_CALLS,
    MAXIMUM_SHUTDOWN_GRACE,
    MAXIMUM_URL_LENGTH,
    OAUTH_FIELDS,
    OAUTH_FLAGS,
    HttpSettings,
    access_problem,
)
from .._netpolicy._loopback import is_loopback
from ._resolve import _WHOLE, _keyword, _seconds
from ._values import MAXIMUM_VALUE_LENGTH, SettingsError

__all__ = ["add_serve_arguments", "resolve_http"]

STDIO: Final = "stdio"
HTTP: Final = "http"
_HTTP_PATH: Final = re.compile(r"(/[A-Za-z0-9._~-]+)+")

_ORIGIN: Final = re.compile(
    r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?"
)


_SERVE_FLAGS: Final = (
    ("--transport", "{stdio,http}", "serve over stdin/stdout (default) or streamable HTTP"),
    ("--host", "ADDR", f"HTTP: the address to listen on (default {DEFAULT_HTTP_HOST})"),
    ("--port", "N", f"HTTP: the port, 0 picks one (default {DEFAULT_HTTP_PORT})"),
    ("--path", "PATH", f"HTTP: the endpoint's path (default {DEFAULT_HTTP_PATH})"),
    ("--token-file", "PATH", "HTTP: the token file (NAME SCOPES SHA256 [NOT-AFTER] lines)"),
    *OAUTH_FLAGS,
    ("--public-url", "URL", "HTTP: the URL clients use (a TLS proxy's https:// URL)"),
    ("--allowed-origin", "ORIGIN", "HTTP: a browser Origin to accept too (repeatable)"),
    (
        "--max-concurrent-calls",
        "N",
        f"HTTP: calls in flight (default {DEFAULT_MAX_CONCURRENT_CALLS})",
    ),
    ("--max-calls-per-minute", "N", f"HTTP: per token (default {DEFAULT_CALLS_PER_MINUTE})"),
    ("--audit-log", "PATH", "HTTP: append the audit lines to PATH (mode 0600), not stderr"),
    ("--shutdown-grace", "SECONDS", "HTTP: how long calls may finish after SIGTERM (default 5)"),
)
_SERVE_SWITCHES: Final = (
    ("--insecure-no-auth", "HTTP on a loopback address only: no token, every scope"),
    ("--allow-remote", "HTTP: allow a non-loopback --host"),
    ("--allow-uncontained-shell", "HTTP: serve shell even where commands run uncontained"),
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``serve`` alone: the transport and HTTP's (no variables, no secrets)."""
    for flag, metavar, text in _SERVE_FLAGS:
        repeat = flag == "--allowed-origin"
        parser.add_argument(
            flag,
            metavar=metavar,
            help=text,
            action="append" if repeat else "store",
            default=[] if repeat else None,
        )
    for flag, text in _SERVE_SWITCHES:
        parser.add_argument(flag, action="store_true", help=text)


def _address(host: str) -> object | None:
    """``host`` as an IP address, or ``None`` when it is not one."""
    import ipaddress  # noqa: PLC0415 - only serve --transport http parses addresses

    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _bounded(text: str | None, flag: str, low: int, high: int, default: int) -> int:
    if text is None:
        return default
    cleaned = text.strip()
    if len(cleaned) > MAXIMUM_VALUE_LENGTH or _WHOLE.fullmatch(cleaned) is None:
        raise SettingsError(f"{flag} must be a whole number")
    if not low <= int(cleaned) <= high:
        raise SettingsError(f"{flag} must be between {low} and {high}")
    return int(cleaned)


def resolve_http(options: argparse.Namespace) -> HttpSettings | None:
    """The HTTP settings of ``serve``'s parsed options, or ``None`` for stdio.

    Raises ``SettingsError`` (one fixed line naming the flag) for a bad value, an HTTP flag
    with ``--transport stdio``, neither or both of ``--token-file`` and
    ``--insecure-no-auth``, ``--insecure-no-auth`` off loopback, or a non-loopback
    ``--host`` without ``--allow-remote``.
    """
    values = vars(options)
    transport = _keyword(values.get("transport") or STDIO)
    if transport not in (STDIO, HTTP):
        raise SettingsError("--transport must be stdio or http")
    if transport == STDIO:
        given = [f for f, _, _ in _SERVE_FLAGS[1:] if values.get(f[2:].replace("-", "_"))]
        given += [f for f, _ in _SERVE_SWITCHES if values.get(f[2:].replace("-", "_"))]
        if given:
            raise SettingsError(f"{given[0]} needs --transport http")
        return None
    host = (values.get("host") or DEFAULT_HTTP_HOST).strip()
    host = "127.0.0.1" if host == "localhost" else host
    if len(host) > MAXIMUM_VALUE_LENGTH * 2 or _address(host) is None:
        raise SettingsError("--host must be an IP address or localhost")
    path = values.get("path") or DEFAULT_HTTP_PATH
    if len(path) > 256 or _HTTP_PATH.fullmatch(path) is None:
        raise SettingsError("--path must be /NAME[/NAME...] of letters, digits, . _ ~ -")
    token_file, no_auth = values.get("token_file"), bool(values.get("insecure_no_auth"))
    oauth = {f: values.get(f) for f in OAUTH_FIELDS}
    if (problem := access_problem(token_file is not None, no_auth, oauth)) is not None:
        raise SettingsError(problem)
    if no_auth and not is_loopback(host):
        raise SettingsError("--insecure-no-auth is allowed only with a loopback --host")
    if not is_loopback(host) and not values.get("allow_remote"):
        raise SettingsError("a non-loopback --host needs --allow-remote")
    public = values.get("public_url")
    if public is not None and (
        len(public) > MAXIMUM_URL_LENGTH or _ORIGIN.match(public) is None or "@" in public
    ):
        raise SettingsError("--public-url must be an http:// or https:// URL without a user")
    origins = tuple(values.get("allowed_origin") or ())
    if len(origins) > MAXIMUM_ALLOWED_ORIGINS or not all(
        len(o) <= MAXIMUM_URL_LENGTH and _ORIGIN.fullmatch(o) for o in origins
    ):
        raise SettingsError("--allowed-origin takes SCHEME://HOST[:PORT] (at most 32 of them)")
    grace = values.get("shutdown_grace")
    seconds = DEFAULT_SHUTDOWN_GRACE if grace is None else _seconds(grace, "--shutdown-grace")
    if not 0 < seconds <= MAXIMUM_SHUTDOWN_GRACE:
        raise SettingsError(
            f"--shutdown-grace must be above 0 and at most {MAXIMUM_SHUTDOWN_GRACE:g}"
        )
    return HttpSettings(
        host=host,
        port=_bounded(values.get("port"), "--port", 0, 65_535, DEFAULT_HTTP_PORT),
        path=path,
        token_file=token_file,
        insecure_no_auth=no_auth,
        **oauth,  # type: ignore[arg-type]
        allow_remote=bool(values.get("allow_remote")),
        public_url=public,
        allowed_origins=origins,
        allow_uncontained_shell=bool(values.get("allow_uncontained_shell")),
        max_concurrent_calls=_bounded(
            values.get("max_concurrent_calls"),
            "--max-concurrent-calls",
            1,
            MAXIMUM_CONCURRENT_CALLS,
            DEFAULT_MAX_CONCURRENT_CALLS,
        ),
        rate=_bounded(
            values.get("max_calls_per_minute"),
            "--max-calls-per-minute",
            1,
            MAXIMUM_CALLS_PER_MINUTE,
            DEFAULT_CALLS_PER_MINUTE,
        ),
        audit_log=values.get("audit_log"),
        shutdown_grace=seconds,
    )
