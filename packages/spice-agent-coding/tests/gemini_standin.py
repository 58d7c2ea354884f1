"""A loopback stand-in for the Gemini API, to drive Gemini CLI and the google-genai SDK.

It answers ``POST /v1beta/models/MODEL:generateContent`` and ``:streamGenerateContent``
(server-sent events with ``alt=sse``), and ``:countTokens``. It plays a model that follows
a script of tool calls: while a request offers the script's next tool (a function
declaration named ``PREFIX + TOOL``: Gemini CLI calls an MCP tool ``mcp_SERVER_TOOL``) and the
conversation holds fewer function responses than the script has calls, it answers with a
``functionCall`` of the next one; otherwise with the text ``done``. Every request body is
kept, so a test reads exactly what the client declared to the model and what the tools'
answers were. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

DONE_TEXT: Final = "done"
MAXIMUM_BODY_BYTES: Final = 64 << 20
"""Largest request body the stand-in reads (a conversation with a few long answers)."""
SCHEMA_FIELDS: Final = ("parameters", "parametersJsonSchema")
"""Where a function declaration carries its parameters (the SDKs send one of them)."""


def _parts(content: object) -> list[dict[str, Any]]:
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return []
    return [part for part in content["parts"] if isinstance(part, dict)]


def declarations_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The function declarations a request offers the model."""
    found: list[dict[str, Any]] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            found += [d for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)]
    return found


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functionResponse`` parts of a request's conversation, in order."""
    return [
        part["functionResponse"]
        for content in body.get("contents") or []
        for part in _parts(content)
        if isinstance(part.get("functionResponse"), dict)
    ]


def _offers(body: dict[str, Any], name: str) -> bool:
    return any(declaration.get("name") == name for declaration in declarations_of(body))


class StandIn:
    """The stand-in server, on 127.0.0.1 and a free port, for one ``with`` block."""

    def __init__(self, script: Sequence[tuple[str, dict[str, Any]]], prefix: str = "") -> None:
        self.script = list(script)
        self.prefix = prefix
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def recorded(self) -> list[dict[str, Any]]:
        """Every generateContent request body, in order of arrival."""
        with self._lock:
            return list(self.requests)

    def offering(self) -> list[dict[str, Any]]:
        """The requests that offered the script's first tool (the agent's own turns)."""
        first = self.prefix + (self.script[0][0] if self.script else "")
        return [body for body in self.recorded() if _offers(body, first)]

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        step = len(function_responses(body))
        if step < len(self.script):
            tool, arguments = self.script[step]
            if _offers(body, self.prefix + tool):
                return {"functionCall": {"name": self.prefix + tool, "args": arguments}}
        return {"text": DONE_TEXT}

    @staticmethod
    def _response(part: dict[str, Any]) -> dict[str, Any]:
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 1,
                "candidatesTokenCount": 1,
                "totalTokenCount": 2,
            },
            "modelVersion": "stand-in",
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                return

            def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(404, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                if not 0 <= length <= MAXIMUM_BODY_BYTES:
                    self._send(413, b"{}")
                    return
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?", 1)[0]
                if path.endswith(":countTokens"):
                    self._send(200, json.dumps({"totalTokens": 1}).encode())
                    return
                if not path.endswith((":generateContent", ":streamGenerateContent")):
                    self._send(404, b"{}")
                    return
                with outer._lock:
                    outer.requests.append(body)
                    outer.paths.append(path)
                answer = json.dumps(outer._response(outer._answer(body)))
                if path.endswith(":streamGenerateContent"):
                    self._send(200, f"data: {answer}\r\n\r\n".encode(), "text/event-stream")
                else:
                    self._send(200, answer.encode())

        return Handler
