"""A loopback stand-in for the Anthropic Messages API, to drive the real Claude Code CLI.

It answers ``POST /v1/messages`` (streamed or not): while the request offers ``tool`` and
the conversation's last message holds no tool result, a ``tool_use`` of ``tool`` with
``tool_input``; otherwise the text ``done``. Every request body is kept, so a test reads
exactly what Claude Code showed the model. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

TOOL_USE_ID: Final = "toolu_spice_01"


def _blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return (
        [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []
    )


class StandIn:
    """The stand-in server, on 127.0.0.1 and a free port, for one ``with`` block."""

    def __init__(self, tool: str, tool_input: dict[str, Any]) -> None:
        self.tool = tool
        self.tool_input = tool_input
        self.requests: list[dict[str, Any]] = []
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

    def tool_results(self) -> list[str]:
        """The text of every tool result the model was shown, in order."""
        texts: list[str] = []
        with self._lock:
            requests = list(self.requests)
        for request in requests[-1:]:  # the last request holds the whole conversation
            for message in request.get("messages", []):
                for block in _blocks_of(message):
                    if block.get("type") != "tool_result":
                        continue
                    inner = block.get("content")
                    if isinstance(inner, str):
                        texts.append(inner)
                    elif isinstance(inner, list):
                        texts.append("".join(str(part.get("text", "")) for part in inner))
        return texts

    def tool_result_blocks(self) -> list[dict[str, Any]]:
        """Every block of every tool result the model was shown (text, image, ...), in order."""
        blocks: list[dict[str, Any]] = []
        with self._lock:
            requests = list(self.requests)
        for request in requests[-1:]:  # the last request holds the whole conversation
            for message in request.get("messages", []):
                for block in _blocks_of(message):
                    if block.get("type") == "tool_result":
                        blocks += _blocks_of(block)
        return blocks

    def _answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        offered = {tool.get("name") for tool in body.get("tools", [])}
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        answered = any(block.get("type") == "tool_result" for block in _blocks_of(last))
        if self.tool in offered and not answered:
            return [
                {"type": "tool_use", "id": TOOL_USE_ID, "name": self.tool, "input": self.tool_input}
            ]
        return [{"type": "text", "text": "done"}]

    @staticmethod
    def _message(body: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
        tool = bool(blocks) and blocks[0]["type"] == "tool_use"
        return {
            "id": "msg_spice",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "stand-in"),
            "content": blocks,
            "stop_reason": ("tool_use" if tool else "end_turn") if blocks else None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    def _events(self, body: dict[str, Any], blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": self._message(body, [])}
        ]
        for index, block in enumerate(blocks):
            if block["type"] == "tool_use":
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            events += [
                {"type": "content_block_start", "index": index, "content_block": start},
                {"type": "content_block_delta", "index": index, "delta": delta},
                {"type": "content_block_stop", "index": index},
            ]
        stop = self._message(body, blocks)["stop_reason"]
        events += [
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
            {"type": "message_stop"},
        ]
        return events

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                return

            def _json(self, value: object) -> None:
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self._json({"input_tokens": 1})
                    return
                with outer._lock:
                    outer.requests.append(body)
                blocks = outer._answer(body)
                if not body.get("stream"):
                    self._json(outer._message(body, blocks))
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for event in outer._events(body, blocks):
                    self.wfile.write(
                        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                    )
                self.wfile.flush()

        return Handler
