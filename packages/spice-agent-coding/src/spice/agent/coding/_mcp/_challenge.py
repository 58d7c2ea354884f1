"""The 401 challenge: no ``error`` code for a request that carried no token (RFC 6750 §3.1).

The SDK's ``RequireAuthMiddleware`` answers every unauthenticated request with
``WWW-Authenticate: Bearer error="invalid_token", ...``. RFC 6750 §3.1 says a request that
lacks any authentication information gets no error code (a client that never sent a token
did not send an invalid one); ``RequireToken`` answers that case with the challenge alone
(``Bearer`` and, with OAuth, ``resource_metadata``) and leaves every other case to the SDK.
"""

from __future__ import annotations

from typing import Final, final

import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, RequireAuthMiddleware
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

AUTHENTICATION_REQUIRED: Final = "Authentication required"

__all__ = ["AUTHENTICATION_REQUIRED", "RequireToken"]


@final
class RequireToken(RequireAuthMiddleware):
    """The SDK's ``RequireAuthMiddleware``, with RFC 6750 §3.1's challenge for no token."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if isinstance(scope.get("user"), AuthenticatedUser) or "authorization" in Headers(
            scope=scope
        ):
            await super().__call__(scope, receive, send)
            return
        challenge = "Bearer"
        if self.resource_metadata_url is not None:
            challenge += f' resource_metadata="{self.resource_metadata_url}"'
        body = orjson.dumps({"error_description": AUTHENTICATION_REQUIRED})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", challenge.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
