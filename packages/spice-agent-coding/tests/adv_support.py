"""Shared harness of the adversarial suite: routes to the tools, and the leak checks.

A *route* is how a test reaches the three tools: straight through a ``Dispatcher``, or
through the MCP server in process with the real ``mcp.Client``. Both answer an
``Answer``: the code (``"ok"`` for a success), the content object, and every text a
model or a person would see (content, problem, protocol error message).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import select
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final

from schema_check import check_output_schema

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import MAXIMUM_MESSAGE_BYTES, Call, ExecutionError, Result
from spice.agent.tools.coding import Config, new_read, new_replace, new_shell

CLEANUP_SECONDS: Final = 20.0
"""Bound on the shell ``Cleanup`` at the end of a route."""

TEMPORARY_PREFIX: Final = ".spice-replace-"
EXECUTION_ERROR: Final = "execution_error"
"""The code an ``Answer`` carries for an ``ExecutionError`` (or a JSON-RPC error)."""

CALL_REJECTED: Final = "call_rejected"
"""The code an ``Answer`` carries when ``Call(...)`` itself refused the name or arguments."""

FORBIDDEN_FRAGMENTS: Final = ("Traceback", 'File "', "Errno", "/work/", "/root/")
"""Text that betrays a traceback, an OS error or a machine path."""


def new_canary(kind: str) -> str:
    """A unique token that must never appear in anything a tool answers."""
    return f"{kind}-canary-{secrets.token_hex(8)}"


@final
@dataclass(frozen=True, slots=True)
class Answer:
    """One tool answer, whatever the route."""

    code: str
    content: Mapping[str, Any]
    texts: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.code == "ok"


Route = Callable[[str, Mapping[str, Any]], Awaitable[Answer]]
"""``await route(tool_name, arguments)``."""


def answer_of(result: Result) -> Answer:
    """The ``Answer`` of a ``Result`` from the dispatcher."""
    content = json.loads(result.content)
    code = "ok" if content.get("ok") is True else str(content.get("code"))
    texts = (result.content, result.problem or "")
    return Answer(code, content, texts)


def answer_of_error(error: BaseException) -> Answer:
    """The ``Answer`` of an ``ExecutionError`` or a protocol error."""
    return Answer(EXECUTION_ERROR, {}, (str(error),))


def build_tools(config: Config) -> tuple[Dispatcher, Callable[[], Awaitable[None]]]:
    """The three tools on the POSIX platform, behind one dispatcher, and the shell cleanup."""
    shell, cleanup = new_shell(config, PosixResolver(), PosixLauncher())
    return Dispatcher([new_read(config), new_replace(config), shell]), cleanup


_call_numbers = iter(range(1, 1 << 62))


@asynccontextmanager
async def dispatcher_route(config: Config) -> AsyncIterator[Route]:
    """Reach the tools through a ``Dispatcher``; the shell cleanup runs at the end."""
    dispatcher, cleanup = build_tools(config)

    async def route(name: str, arguments: Mapping[str, Any]) -> Answer:
        text = json.dumps(arguments, ensure_ascii=True)
        try:
            call = Call(f"adv-{next(_call_numbers)}", name, text)
        except ValueError as error:  # the contract's own validation of a call
            return Answer(CALL_REJECTED, {}, (str(error),))
        try:
            result = await dispatcher.dispatch(call)
        except ExecutionError as error:
            return answer_of_error(error)
        check_output_schema(name, result.content_object)
        return answer_of(result)

    try:
        yield route
    finally:
        async with asyncio.timeout(CLEANUP_SECONDS):
            await asyncio.shield(cleanup())


@asynccontextmanager
async def mcp_route(config: Config) -> AsyncIterator[Route]:
    """Reach the tools through the MCP server in process, with the real ``mcp.Client``."""
    from mcp import Client  # noqa: PLC0415 - only the MCP tests pay for the SDK import
    from mcp.shared.exceptions import MCPError  # noqa: PLC0415

    from spice.agent.coding._mcp._server import mcp_server  # noqa: PLC0415

    dispatcher, cleanup = build_tools(config)
    try:
        async with Client(mcp_server(dispatcher)) as client:

            async def route(name: str, arguments: Mapping[str, Any]) -> Answer:
                try:
                    result = await client.call_tool(name, dict(arguments))
                except MCPError as error:
                    return answer_of_error(error)
                content = result.structured_content or {}
                check_output_schema(name, content)  # the client validated it too
                texts = tuple(getattr(block, "text", "") for block in result.content)
                ok = content.get("ok") is True and not result.is_error
                code = "ok" if ok else str(content.get("code"))
                return Answer(code, content, (json.dumps(content), *texts))

            yield route
    finally:
        async with asyncio.timeout(CLEANUP_SECONDS):
            await asyncio.shield(cleanup())


def decoded_content(content: Mapping[str, Any], field: str = "content") -> bytes:
    """The bytes of a read page (or a shell stream), whatever its encoding."""
    text = content.get(field, "")
    if content.get("encoding") == "base64":
        return base64.b64decode(text)
    return str(text).encode("utf-8", "surrogateescape")


def sha256_of_file(path: str) -> str:
    """The digest of the regular file at ``path``, or 64 zeros.

    ``..`` is applied lexically first (as the tools do), then links are followed.
    """
    try:
        real = os.path.realpath(os.path.normpath(path))
        if os.path.isfile(real):
            return hashlib.sha256(Path(real).read_bytes()).hexdigest()
    except (OSError, ValueError):
        pass
    return "0" * 64


Snapshot = dict[str, tuple[str, bytes]]


def snapshot(base: Path, skip: Iterable[str] = ()) -> Snapshot:
    """Every entry under ``base`` (not below the names in ``skip``): kind and bytes or target."""
    skipped = set(skip)
    seen: Snapshot = {}
    for directory, dirs, files in os.walk(base, followlinks=False):
        relative = os.path.relpath(directory, base)
        if relative == ".":
            dirs[:] = [name for name in dirs if name not in skipped]
            files = [name for name in files if name not in skipped]  # noqa: PLW2901
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            key = os.path.relpath(path, base)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                seen[key] = ("link", os.fsencode(os.readlink(path)))
            elif stat.S_ISREG(info.st_mode):
                seen[key] = ("file", Path(path).read_bytes())
            elif stat.S_ISDIR(info.st_mode):
                seen[key] = ("dir", b"")
            else:
                seen[key] = ("special", b"")
    return seen


def temporary_files(base: Path) -> list[str]:
    """Every ``.spice-replace-*.tmp`` left anywhere under ``base``."""
    return [
        os.path.join(directory, name)
        for directory, _dirs, files in os.walk(base)
        for name in files
        if name.startswith(TEMPORARY_PREFIX)
    ]


def without_output(answer: Answer) -> Answer:
    """The answer minus the child's own output (which the model asked to see)."""
    kept = {key: value for key, value in answer.content.items() if key not in {"stdout", "stderr"}}
    return Answer(answer.code, kept, (json.dumps(kept), str(kept.get("message", ""))))


def without_named_root(answer: Answer, root: str) -> Answer:
    """The answer minus the one place it may name the configured root: the refusal of an
    absolute path outside it (contract 10.2; the server's instructions name the root too)."""
    named = f"the worktree root ({root})"
    if answer.code != "invalid_arguments" or named not in str(answer.content.get("message", "")):
        return answer
    kept = {
        key: value.replace(named, "the worktree root") if key == "message" else value
        for key, value in answer.content.items()
    }
    texts = tuple(text.replace(named, "the worktree root") for text in answer.texts)
    return Answer(answer.code, kept, texts)


def leaks(answer: Answer, forbidden: Iterable[str], request: str = "") -> list[str]:
    """The forbidden fragments (and oversize messages) found in an answer's texts.

    A fixed fragment the request itself carried (a model's own path echoed back) is
    not a leak.
    """
    fixed = [fragment for fragment in FORBIDDEN_FRAGMENTS if fragment not in request]
    found = [
        fragment
        for fragment in (*forbidden, *fixed)
        for text in answer.texts
        if fragment and fragment in text
    ]
    problem = answer.content.get("message")
    if isinstance(problem, str) and len(problem.encode()) > MAXIMUM_MESSAGE_BYTES:
        found.append("message over MAXIMUM_MESSAGE_BYTES")
    if (
        answer.code in {EXECUTION_ERROR, CALL_REJECTED}
        and len(answer.texts[0].encode()) > MAXIMUM_MESSAGE_BYTES
    ):
        found.append("error over MAXIMUM_MESSAGE_BYTES")
    return found


def processes_with_marker(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line contains ``marker``."""
    found: list[int] = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            status = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state = status.rpartition(")")[2].split()[0:1]
        if needle in cmdline and state != ["Z"]:
            found.append(int(entry))
    return found


def wait_gone(pids: Iterable[int], seconds: float = 10.0) -> list[int]:
    """Wait (bounded, on pidfds, no sleeping) until each pid has exited; return survivors."""
    deadline = time.monotonic() + seconds
    survivors: list[int] = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            remaining = max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                survivors.append(pid)
        finally:
            os.close(fd)
    return survivors
