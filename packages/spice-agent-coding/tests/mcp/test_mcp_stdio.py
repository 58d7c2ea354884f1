"""``spice-coding serve`` over stdio: the installed console script, the real MCP client,
and raw JSON-RPC for the shutdown paths (stdin EOF, SIGTERM) and stdout hygiene."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from procutil import descendants_named

from spice.agent.coding._mcp._framing import MAXIMUM_FRAME_BYTES
from spice.agent.coding._sandbox import SERVER_WARNING

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
WAIT: Final = 15.0
"""Bound on every wait for the server (process start, a process appearing or going)."""

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def processes_inside(directory: Path) -> list[int]:
    """Processes (other than this one) whose working directory is inside ``directory``."""
    found: list[int] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if int(entry.name) != os.getpid() and (cwd == directory or directory in cwd.parents):
            found.append(int(entry.name))
    return found


async def until(condition: Callable[[], object]) -> None:
    """Poll a cheap condition (reading /proc) until it holds, bounded by ``WAIT``."""
    async with asyncio.timeout(WAIT):
        # No event tells when another process appears in /proc or leaves it.
        while not condition():  # noqa: ASYNC110 - a bounded poll of /proc
            await asyncio.sleep(0.02)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "notes.txt").write_text("first\n")
    return tree


TRANSPORTS: Final = ("stdio", "http")
"""The protocol tests run over both transports: stdio, and streamable HTTP (the same
server behind a token with every scope, the SDK's client in its default era)."""


@asynccontextmanager
async def client_for(worktree: Path, transport: str = "stdio") -> AsyncIterator[Client]:
    if transport == "http":
        from http_support import http_server, sdk_client  # noqa: PLC0415 - the http leg only

        async with (
            http_server(worktree.parent, worktree) as server,
            sdk_client(server.url, server.tokens["full"]) as client,
        ):
            yield client
        return
    params = StdioServerParameters(
        command=str(SCRIPT), args=["serve", "--root", str(worktree)], cwd=str(worktree.parent)
    )
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening /dev/null
        from mcp import stdio_client  # noqa: PLC0415 - beside its one use

        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """Each protocol test runs once per transport."""
    chosen: str = request.param
    return chosen


async def test_the_console_script_lists_three_tools_with_honest_annotations(
    worktree: Path, transport: str
) -> None:
    """Over each transport, the three tools are listed with the contract's hints."""
    async with client_for(worktree, transport) as client:
        listed = {t.name: t.annotations for t in (await client.list_tools()).tools}
    hints = {
        name: (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        for name, a in listed.items()
        if a is not None
    }
    assert {
        "read": (True, False, True, False),
        "replace": (False, True, True, False),
        "shell": (False, True, False, True),
    } == hints


async def test_read_replace_and_shell_round_trip_with_structured_content(
    worktree: Path, transport: str
) -> None:
    """A read's digest feeds a replace that commits; the shell sees the new content."""
    async with client_for(worktree, transport) as client:
        read = await client.call_tool("read", {"path": "notes.txt"})
        digest = read.structured_content["sha256"]
        replaced = await client.call_tool(
            "replace", {"path": "notes.txt", "content": "second\n", "expected_sha256": digest}
        )
        shown = await client.call_tool("shell", {"argv": ["cat", "notes.txt"]})
    assert hashlib.sha256(b"first\n").hexdigest() == digest
    assert (True, True) == (
        replaced.structured_content["committed"],
        replaced.structured_content["durable"],
    )
    assert "second\n" == shown.structured_content["stdout"]
    [text] = shown.content
    assert isinstance(text, TextContent)
    assert shown.structured_content == json.loads(text.text)


async def test_failures_are_visible_results(worktree: Path, transport: str) -> None:
    """Invalid arguments and an unknown tool are isError results; a failing command is data."""
    async with client_for(worktree, transport) as client:
        failed = await client.call_tool("shell", {"argv": ["sh", "-c", "exit 3"]})
        invalid = await client.call_tool("read", {"path": "notes.txt", "offset": -1})
        unknown = await client.call_tool("grep", {})
    assert (False, "command_failed", 3) == (
        failed.is_error,
        failed.structured_content["code"],
        failed.structured_content["exit_code"],
    )
    assert (True, "invalid_arguments") == (invalid.is_error, invalid.structured_content["code"])
    assert (True, "unknown_tool") == (unknown.is_error, unknown.structured_content["code"])


async def test_progress_arrives(worktree: Path, transport: str) -> None:
    """A call with a progress callback receives the tool's progress message."""
    seen: list[str | None] = []
    arrived = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        arrived.set()

    async with client_for(worktree, transport) as client:
        await client.call_tool("read", {"path": "notes.txt"}, progress_callback=on_progress)
        async with asyncio.timeout(WAIT):
            await arrived.wait()
    assert seen


async def test_cancelling_a_long_shell_call_leaves_no_process(
    worktree: Path, transport: str
) -> None:
    """Cancelling ``sleep 60`` stops its process group; the session keeps serving."""
    async with client_for(worktree, transport) as client:
        call = asyncio.create_task(client.call_tool("shell", {"argv": ["sleep", "60"]}))
        await until(lambda: processes_inside(worktree))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until(lambda: not processes_inside(worktree))
        after = await client.call_tool("read", {"path": "notes.txt"})
    assert False is after.is_error
    assert [] == processes_inside(worktree)


class RawServer:
    """``spice-coding serve`` with raw JSON-RPC lines on its pipes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[bytes] = []

    async def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.process.stdin.write(data + b"\n")
        await self.process.stdin.drain()

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        async with asyncio.timeout(WAIT):
            line = await self.process.stdout.readline()
        self.lines.append(line)
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def answer_to(self, request_id: int) -> dict[str, Any]:
        while True:
            message = await self.receive()
            if message.get("id") == request_id:
                return message

    async def handshake(self) -> None:
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": LATEST_HANDSHAKE_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert "result" in await self.answer_to(1)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, request_id: int, name: str, arguments: dict[str, Any]) -> None:
        params = {"name": name, "arguments": arguments}
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        )

    async def finish(self) -> tuple[int, list[bytes], bytes]:
        """Wait for exit; return the exit code, every stdout line, and stderr."""
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        async with asyncio.timeout(WAIT):
            rest, err = await asyncio.gather(self.process.stdout.read(), self.process.stderr.read())
            code = await self.process.wait()
        lines = self.lines + [line for line in rest.split(b"\n") if line]
        return code, lines, err


@asynccontextmanager
async def raw_server(worktree: Path) -> AsyncIterator[RawServer]:
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "serve",
        "--root",
        str(worktree),
        cwd=worktree.parent,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield RawServer(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def only_protocol(lines: list[bytes]) -> bool:
    """Every stdout line is one JSON-RPC 2.0 message."""
    return all(json.loads(line).get("jsonrpc") == "2.0" for line in lines)


async def test_closing_stdin_mid_call_shuts_down_cleanly(worktree: Path) -> None:
    """EOF during ``sleep 60``: the call is cancelled, Cleanup runs, exit 0, nothing left."""
    async with raw_server(worktree) as server:
        await server.handshake()
        await server.call(2, "shell", {"argv": ["sleep", "60"]})
        await until(lambda: processes_inside(worktree))
        assert server.process.stdin is not None
        server.process.stdin.close()
        code, lines, err = await server.finish()
    assert 0 == code
    assert [] == processes_inside(worktree)
    assert only_protocol(lines)
    assert SERVER_WARNING.encode() in err
    assert b"stopped: the client closed stdin" in err


ENDING_SIGNALS: Final = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
"""Every signal that ends the server goes through the join (contract 13.1, R6-4)."""


@pytest.mark.parametrize("name", ENDING_SIGNALS)
async def test_a_signal_mid_call_shuts_down_cleanly(worktree: Path, name: str) -> None:
    """SIGTERM, SIGINT, SIGHUP or SIGQUIT during ``sleep 60``: calls cancelled, Cleanup
    runs, exit 0 (R6-4: SIGHUP ended the server at once, before the join)."""
    number = getattr(signal, name)
    async with raw_server(worktree) as server:
        await server.handshake()
        await server.call(2, "shell", {"argv": ["sleep", "60"]})
        await until(lambda: processes_inside(worktree))
        server.process.send_signal(number)
        code, lines, err = await server.finish()
    assert 0 == code
    assert [] == processes_inside(worktree)
    assert only_protocol(lines)
    assert b"stopped on a signal" in err


async def test_garbage_and_an_oversized_frame_are_dropped_and_serving_goes_on(
    worktree: Path,
) -> None:
    """A line that is not JSON-RPC and one past the frame bound are dropped; the next is served."""
    async with raw_server(worktree) as server:
        await server.handshake()
        await server.send(b"this is not json")
        await server.send(
            b'{"jsonrpc":"2.0","id":7,"method":"x","params":"' + b"a" * MAXIMUM_FRAME_BYTES + b'"}'
        )
        await server.call(3, "read", {"path": "notes.txt"})
        answer = await server.answer_to(3)
        assert server.process.stdin is not None
        server.process.stdin.close()
        code, lines, _ = await server.finish()
    assert False is answer["result"]["isError"]
    assert "first\n" == answer["result"]["structuredContent"]["content"]
    assert 0 == code
    assert only_protocol(lines)
    assert not any(b'"id":7' in line for line in lines)


async def test_an_empty_session_exits_0(worktree: Path) -> None:
    """A client that closes stdin at once gets a clean exit and an empty stdout."""
    async with raw_server(worktree) as server:
        assert server.process.stdin is not None
        server.process.stdin.close()
        code, lines, _ = await server.finish()
    assert (0, []) == (code, lines)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("name", ENDING_SIGNALS)
async def test_a_signal_goes_through_the_join_that_puts_back_a_plant(
    tmp_path: Path, name: str
) -> None:
    """R6-4: a call plants ``.git/commondir`` (to a copy whose config runs a program) and
    ignores the signals; the signal ends the server through the join, which removes the
    ``commondir``: the user's ``git status`` afterwards writes no marker."""
    worktree = tmp_path / "tree"
    worktree.mkdir()
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    await asyncio.to_thread(
        subprocess.run, ["git", "init", "-q"], cwd=worktree, env=environment, check=True
    )
    marker = tmp_path / "MARKER"
    plant = (
        "mkdir .git/objects/pack/.e && cp -a .git/refs .git/HEAD .git/config "
        ".git/objects/pack/.e/ && ln -s ../.. .git/objects/pack/.e/objects && "
        f"git config -f .git/objects/pack/.e/config core.fsmonitor 'touch {marker}; false' && "
        'printf %s "$PWD/.git/objects/pack/.e" > .git/commondir && '
        "trap '' TERM INT HUP QUIT && sleep 60"
    )
    commondir = worktree / ".git" / "commondir"
    async with raw_server(worktree) as server:
        await server.handshake()
        await server.call(2, "shell", {"argv": ["/bin/sh", "-c", plant]})
        # The plant is made before the sleep; a staged worktree shows it to nobody before
        # the call ends (contract 13.1), so the sleep says the plant is there.
        pid = server.process.pid
        await until(lambda: commondir.exists() or bool(descendants_named(pid, "sleep")))
        server.process.send_signal(getattr(signal, name))
        code, _, err = await server.finish()
    assert 0 == code, err
    assert not commondir.exists()
    await asyncio.to_thread(
        subprocess.run, ["git", "status"], cwd=worktree, env=environment, capture_output=True
    )
    assert not marker.exists()
