"""``spice-coding`` on Windows end to end: ``tools``, ``call`` and ``serve`` with the real
MCP client, the shell through the Job Object launcher, and the sandbox modes (10.4).

Runs under Windows Python (Wine in ``make test-windows``, windows-latest in the
portability workflow); skipped elsewhere, where ``test_mcp_stdio`` covers the same paths.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
from mcp import Client, StdioServerParameters
from windows_support import gone

from spice.agent.coding._windows._launcher import AUTO_ON_WINDOWS, NO_SANDBOX

pytestmark = pytest.mark.skipif(
    sys.platform != "win32",
    reason="Windows only (runs under Wine in make test-windows, and on windows-latest)",
)

CLI: Final = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"
TIMEOUT_SECONDS: Final = 120


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "notes.txt").write_text("first\n", encoding="utf-8")
    (tree / "sub").mkdir()
    return tree


def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *arguments],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def test_tools_lists_three_tools_and_says_nothing_is_contained(worktree: Path) -> None:
    done = cli("--root", str(worktree), "tools")
    assert 0 == done.returncode, done.stderr
    document = json.loads(done.stdout)
    assert ["read", "replace", "shell"] == [tool["name"] for tool in document["tools"]]
    assert (False, "off", ["everything"]) == (
        document["sandbox"]["contained"],
        document["sandbox"]["mode"],
        document["sandbox"]["not_confined"],
    )
    assert AUTO_ON_WINDOWS in done.stderr


def test_workspace_refuses_to_start_and_off_says_nothing(worktree: Path) -> None:
    refused = cli("--root", str(worktree), "call", "--sandbox", "workspace", "shell", "{}")
    assert (2, f"spice-coding: {NO_SANDBOX}") == (
        refused.returncode,
        refused.stderr.strip().splitlines()[-1],
    )
    quiet = cli("--root", str(worktree), "tools", "--sandbox", "off")
    assert 0 == quiet.returncode
    assert "warning" not in quiet.stderr


def test_call_runs_a_program_and_answers_uncontained(worktree: Path) -> None:
    done = cli(
        "--root", str(worktree), "call", "shell", json.dumps({"argv": ["cmd", "/c", "exit 7"]})
    )
    content = json.loads(done.stdout)
    assert (1, False, "command_failed", 7, True) == (
        done.returncode,
        content["contained"],
        content["code"],
        content["exit_code"],
        content["managed_cleanup_completed"],
    )


def test_a_timeout_ends_the_command_and_its_grandchild(worktree: Path) -> None:
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print(c.pid, flush=True); time.sleep(120)"
    )
    arguments = {"argv": [sys.executable, "-c", code], "timeout_seconds": 2}
    done = cli("--root", str(worktree), "call", "shell", json.dumps(arguments))
    content = json.loads(done.stdout)
    assert (True, "timed_out", True) == (
        content["timed_out"],
        content["code"],
        content["managed_cleanup_completed"],
    )
    assert gone(int(content["stdout"].split()[0]))


@pytest.mark.parametrize("argv0", ["build.bat", "BUILD.CMD", "x.bat. "])
def test_a_batch_file_as_argv0_is_refused_with_the_reason(worktree: Path, argv0: str) -> None:
    (worktree / "build.bat").write_text("@echo off\r\necho ran\r\n", encoding="ascii")
    done = cli("--root", str(worktree), "call", "shell", json.dumps({"argv": [argv0, "&echo x"]}))
    content = json.loads(done.stdout)
    assert (1, "invalid_arguments") == (done.returncode, content["code"])
    assert "batch file" in content["message"]


def test_read_and_replace_work_through_the_cli(worktree: Path) -> None:
    """The Windows root answers through ``call``: a read (text mode wrote CRLF), a create,
    and an absolute path outside the root refused."""
    done = cli("--root", str(worktree), "call", "read", json.dumps({"path": "notes.txt"}))
    content = json.loads(done.stdout)
    assert (0, "first\r\n") == (done.returncode, content["content"])
    arguments = {"path": "new\\x.txt", "create": True, "content": "x"}
    done = cli("--root", str(worktree), "call", "replace", json.dumps(arguments))
    content = json.loads(done.stdout)
    assert (0, "new/x.txt", True) == (done.returncode, content["path"], content["created"])
    assert b"x" == (worktree / "new" / "x.txt").read_bytes()
    outside = json.dumps({"path": str(worktree.parent / "elsewhere.txt")})
    done = cli("--root", str(worktree), "call", "read", outside)
    assert (1, "invalid_arguments") == (done.returncode, json.loads(done.stdout)["code"])


@pytest.mark.parametrize(
    ("workdir", "code"),
    [
        ("sub", None),
        ("missing", "workdir_unavailable"),
        ("notes.txt", "workdir_unavailable"),
        ("CON", "invalid_arguments"),
        ("sub:stream", "invalid_arguments"),
        ("sub.", "invalid_arguments"),
        ("PROGRA~1", "invalid_arguments"),
    ],
)
def test_the_workdir_is_checked_on_windows(worktree: Path, workdir: str, code: str | None) -> None:
    arguments = {"argv": ["cmd", "/c", "cd"], "workdir": workdir}
    done = cli("--root", str(worktree), "call", "shell", json.dumps(arguments))
    content = json.loads(done.stdout)
    assert code == content.get("code"), content
    if code is None:
        assert os.path.normcase(str(worktree / "sub")) == os.path.normcase(
            content["stdout"].strip()
        )


@asynccontextmanager
async def client_for(worktree: Path, transport: str = "stdio") -> AsyncIterator[Client]:
    if transport == "http":
        from http_support import http_server, sdk_client  # noqa: PLC0415 - the http leg only

        # Nothing is contained on Windows: shell is served over HTTP only when asked.
        async with (
            http_server(worktree.parent, worktree, "--allow-uncontained-shell") as server,
            sdk_client(server.url, server.tokens["full"]) as client,
        ):
            yield client
        return
    from mcp import stdio_client  # noqa: PLC0415 - beside its one use

    params = StdioServerParameters(
        command=sys.executable, args=["-c", CLI, "serve", "--root", str(worktree)]
    )
    async with Client(stdio_client(params)) as client:
        yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_serve_answers_the_real_mcp_client(worktree: Path, transport: str) -> None:
    """Over stdio and over streamable HTTP behind a token, with the mcp SDK's client: the
    list, each tool, and a clean stop."""
    async with asyncio.timeout(TIMEOUT_SECONDS), client_for(worktree, transport) as client:
        names = sorted(tool.name for tool in (await client.list_tools()).tools)
        read = await client.call_tool("read", {"path": "notes.txt"})
        shell = await client.call_tool(
            "shell", {"argv": [sys.executable, "-c", "print('hi')"], "workdir": "sub"}
        )
        failed = await client.call_tool("shell", {"argv": ["cmd", "/c", "exit 3"]})
    assert ["read", "replace", "shell"] == names
    assert "first\r\n" == read.structured_content["content"]
    assert (True, "hi", False) == (
        shell.structured_content["ok"],
        shell.structured_content["stdout"].strip(),
        shell.structured_content["contained"],
    )
    # A command that ran and exited non-zero is data for the model, not a tool error.
    assert (False, 3) == (failed.is_error, failed.structured_content["exit_code"])


def test_serve_stops_when_the_client_closes_stdin(worktree: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", CLI, "serve", "--root", str(worktree)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = server.communicate(b"", timeout=TIMEOUT_SECONDS)
    assert (0, b"") == (server.returncode, out)
    assert b"the client closed stdin" in err


# --- streamable HTTP on Windows (contract 11.2) ------------------------------------------------


async def test_serve_http_refuses_without_a_token_and_withholds_uncontained_shell(
    tmp_path: Path, worktree: Path
) -> None:
    """Raw HTTP: no token is 401 with ``WWW-Authenticate``; a foreign ``Host`` is 403; a
    ``read`` token lists ``read`` alone and is ``forbidden`` to replace; without
    ``--allow-uncontained-shell`` shell is neither listed nor callable (nothing is
    contained on Windows)."""
    import httpx2  # noqa: PLC0415 - the HTTP tests only
    from http_support import LIST_BODY, answer_of, call_body, http_server, names_of  # noqa: PLC0415

    async with (
        asyncio.timeout(TIMEOUT_SECONDS),
        http_server(tmp_path, worktree) as server,
        httpx2.AsyncClient(timeout=TIMEOUT_SECONDS) as http,
    ):

        async def post(body: dict[str, object], name: str | None, **extra: str) -> httpx2.Response:
            return await http.post(server.url, json=body, headers=server.headers(name, **extra))

        anonymous = await post(LIST_BODY, None)
        foreign = await post(LIST_BODY, "full", host="evil.example")
        full = names_of(answer_of(await post(LIST_BODY, "full")))
        reader = names_of(answer_of(await post(LIST_BODY, "reader")))
        edit = call_body("replace", {"path": "notes.txt", "content": "x\n"})
        refused = answer_of(await post(edit, "reader"))
        shell = answer_of(await post(call_body("shell", {"argv": ["cmd", "/c", "ver"]}), "full"))
    assert (401, True) == (
        anonymous.status_code,
        # RFC 6750 3.1: a request without a token gets a bare challenge (no error code).
        anonymous.headers["www-authenticate"].split(" ")[0].rstrip(",") == "Bearer",
    )
    assert 403 == foreign.status_code
    assert (["read", "replace"], ["read"]) == (full, reader)
    assert "forbidden" == refused["result"]["structuredContent"]["code"]
    assert "forbidden" == shell["result"]["structuredContent"]["code"]
    assert "first\n" == (worktree / "notes.txt").read_text(encoding="utf-8")
    assert b"shell is not served over HTTP" in server.stderr


async def test_serve_http_refuses_a_token_file_others_may_open(
    tmp_path: Path, worktree: Path
) -> None:
    """A token file whose access list lets Everyone read: exit 2 at start with the line
    naming it; and one opened up while serving accepts no token until made private again."""
    import httpx2  # noqa: PLC0415 - the HTTP tests only
    from http_support import LIST_BODY, http_server, write_tokens  # noqa: PLC0415
    from private_support import open_up, private  # noqa: PLC0415

    opened = tmp_path / "opened"
    write_tokens(opened, {"full": "shell"})
    open_up(opened)
    started = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-c",
            CLI,
            "serve",
            "--transport",
            "http",
            "--port",
            "0",
            "--root",
            str(worktree),
            "--token-file",
            str(opened),
        ],
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert 2 == started.returncode
    assert b"access list lets other accounts open it" in started.stderr
    async with asyncio.timeout(TIMEOUT_SECONDS), http_server(tmp_path, worktree) as server:
        text = server.token_file.read_text(encoding="utf-8")
        async with httpx2.AsyncClient(timeout=TIMEOUT_SECONDS) as http:
            before = await http.post(server.url, json=LIST_BODY, headers=server.headers("full"))
            open_up(server.token_file)
            during = await http.post(server.url, json=LIST_BODY, headers=server.headers("full"))
            private(server.token_file, text)
            after = await http.post(server.url, json=LIST_BODY, headers=server.headers("full"))
    assert (200, 401, 200) == (before.status_code, during.status_code, after.status_code)


async def test_serve_http_token_add_makes_a_private_file_the_server_accepts(
    tmp_path: Path, worktree: Path
) -> None:
    """``spice-coding token add`` on Windows: a file with the user's protected list, whose
    token the server accepts."""
    import httpx2  # noqa: PLC0415 - the HTTP tests only
    from http_support import LIST_BODY, answer_of, http_server, names_of  # noqa: PLC0415
    from private_support import is_private  # noqa: PLC0415

    path = tmp_path / "tokens"
    added = cli(
        "token",
        "add",
        "agent",
        "--scopes",
        "write",
        "--token-file",
        str(path),
        "--root",
        str(worktree),
    )
    assert 0 == added.returncode, added.stderr
    token = added.stdout.strip()
    assert is_private(path)
    async with (
        asyncio.timeout(TIMEOUT_SECONDS),
        http_server(tmp_path, worktree, token_file=path) as server,
        httpx2.AsyncClient(timeout=TIMEOUT_SECONDS) as http,
    ):
        headers = {**server.headers(None), "authorization": f"Bearer {token}"}
        listed = await http.post(server.url, json=LIST_BODY, headers=headers)
    assert ["read", "replace"] == names_of(answer_of(listed))
