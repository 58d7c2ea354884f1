"""Which client sent a request, on every request (contract 13.4).

The listing's dialect and the answers' text bound follow the client's name (``_dialects``).
Over stdio the session keeps the name ``initialize`` gave. The HTTP server is stateless:
every request is a new session whose ``client_params`` is ``None``, so a client that
initialized as ``gemini-cli-mcp-client`` got the portable listing and 266,000-character
pages, which Gemini CLI cuts. So the name is found, in order:

1. the session's ``initialize`` (stdio, or the HTTP ``initialize`` request itself);
2. the 2026-07-28 ``clientInfo`` in the request's ``_meta``
   (``io.modelcontextprotocol/clientInfo``);
3. the name the same caller (its credential and its ``User-Agent``) gave in its last HTTP
   ``initialize``, which ``KnownClients`` keeps (bounded: ``MAXIMUM_KNOWN_CLIENTS``, the
   oldest forgotten first) and the HTTP layer puts in the request's scope
   (``CLIENT_SCOPE_KEY``);
4. the ``User-Agent`` itself.

Two clients that share a credential and a ``User-Agent`` share a name (the last one
given): the dialect is a presentation choice, never a permission.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, Final, final

__all__ = [
    "CLIENT_INFO_META_KEY",
    "CLIENT_SCOPE_KEY",
    "MAXIMUM_CLIENT_NAME_CHARS",
    "MAXIMUM_KNOWN_CLIENTS",
    "KnownClients",
    "client_name",
    "initialize_name",
]

CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
"""The ``_meta`` key of the 2026-07-28 revision that carries ``clientInfo`` on each request."""

CLIENT_SCOPE_KEY: Final = "spice.client_name"
"""The ASGI scope key under which the HTTP layer leaves the caller's known name."""

MAXIMUM_KNOWN_CLIENTS: Final = 256
"""At most this many callers' names are kept (the oldest is forgotten first)."""

MAXIMUM_CLIENT_NAME_CHARS: Final = 256
"""A client name or ``User-Agent`` is looked at up to this many characters."""


def _bounded(value: object) -> str | None:
    return value[:MAXIMUM_CLIENT_NAME_CHARS] if isinstance(value, str) and value else None


def initialize_name(message: Mapping[str, Any]) -> str | None:
    """The ``clientInfo.name`` of a JSON-RPC ``initialize`` request, else ``None``."""
    if message.get("method") != "initialize":
        return None
    params = message.get("params")
    info = params.get("clientInfo") if isinstance(params, dict) else None
    return _bounded(info.get("name")) if isinstance(info, dict) else None


@final
class KnownClients:
    """The name each caller gave in its last HTTP ``initialize`` (bounded, oldest first out)."""

    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: collections.OrderedDict[tuple[str, str], str] = collections.OrderedDict()

    def learn(self, caller: tuple[str, str], name: str) -> None:
        """Remember ``name`` for ``caller`` (its credential, its ``User-Agent``)."""
        self._names[caller] = name
        self._names.move_to_end(caller)
        while len(self._names) > MAXIMUM_KNOWN_CLIENTS:
            self._names.popitem(last=False)

    def name_of(self, caller: tuple[str, str]) -> str | None:
        """The name ``caller`` gave last, or ``None``."""
        return self._names.get(caller)


def _meta_name(meta: object) -> str | None:
    info = meta.get(CLIENT_INFO_META_KEY) if isinstance(meta, Mapping) else None
    return _bounded(info.get("name")) if isinstance(info, Mapping) else None


def _request_name(request: object) -> str | None:
    scope = getattr(request, "scope", None)
    if not isinstance(scope, Mapping):
        return None
    known = _bounded(scope.get(CLIENT_SCOPE_KEY))
    if known is not None:
        return known
    headers = getattr(request, "headers", None)
    return _bounded(headers.get("user-agent")) if isinstance(headers, Mapping) else None


def client_name(session_params: object, meta: object, request: object) -> str | None:
    """The client's name by the rules of the module docstring: ``session_params`` (the
    session's ``InitializeRequestParams``), ``meta`` (the request's ``_meta``),
    ``request`` (the HTTP request, ``None`` over stdio)."""
    info = getattr(session_params, "client_info", None)
    return _bounded(getattr(info, "name", None)) or _meta_name(meta) or _request_name(request)
