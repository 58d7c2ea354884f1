"""`make demo`: the three tools end to end, over MCP stdio, driven by the real MCP client.

Copies examples/sample-worktree to a scratch directory, starts
`spice-coding serve --root <scratch>` (the installed console script) through the
MCP SDK's own stdio client, and walks the story: list the tools, read a file,
fix its typo with a durable replace by edits (showing the diff), replay the edit
(refused as stale), create a file, run the sample's tests through the shell, stop
a command at its timeout, and shut down cleanly with no process left. Exits
non-zero if any step does not behave as expected.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from mcp import Client, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

REPOSITORY: Final = Path(__file__).resolve().parent.parent
SAMPLE: Final = REPOSITORY / "examples" / "sample-worktree"
TARGET: Final = "greeting.py"
FIXED: Final = '"""A tiny module for the Spice coding demo."""\n\n\ndef greet(name: str) -> str:\n    """Return a friendly greeting for ``name``."""\n    return "Hello, " + name + "!"\n'  # noqa: E501
NOTES: Final = "# Notes\n\nFixed the greeting typo with the replace tool.\n"
STEP_TIMEOUT_SECONDS: Final = 20.0
HAVE_PROC: Final = os.path.isdir("/proc")
CLEAN_STOP: Final = "stopped: the client closed stdin"


class DemoFailure(Exception):
    """A step did not behave as the demo expects."""


def say(text: str = "") -> None:
    print(text, flush=True)


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailure(what)


def content(result: CallToolResult) -> dict[str, Any]:
    structured = result.structured_content
    if not isinstance(structured, dict):
        raise DemoFailure("every result carries structuredContent")
    return structured


def server_command() -> str:
    installed = REPOSITORY / ".venv" / "bin" / "spice-coding"
    found = str(installed) if installed.exists() else shutil.which("spice-coding")
    if found is None:
        raise DemoFailure("the spice-coding console script is not installed (run make bootstrap)")
    return found


def children_named(name: str) -> list[int]:
    """Our child processes whose command line mentions ``name`` (Linux /proc)."""
    found: list[int] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and name.encode() in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def processes_inside(directory: Path) -> list[int]:
    """Processes whose working directory is inside ``directory`` (Linux /proc)."""
    inside: list[int] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == directory or directory in cwd.parents:
            inside.append(int(entry.name))
    return inside


async def story(worktree: Path, errlog_path: Path) -> None:
    params = StdioServerParameters(
        command=server_command(), args=["serve", "--root", str(worktree)], cwd=str(worktree)
    )
    server_pids: list[int] = []
    with errlog_path.open("w+", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            if HAVE_PROC:
                server_pids = children_named("spice-coding")

            async def call(name: str, arguments: dict[str, Any]) -> CallToolResult:
                async with asyncio.timeout(STEP_TIMEOUT_SECONDS):
                    return await client.call_tool(name, arguments)

            say("1. The server's tools and their annotations")
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            expect({"read", "replace", "shell"} == set(listed), "the three tools are listed")
            for name, tool in sorted(listed.items()):
                hints = tool.annotations
                if hints is None:
                    raise DemoFailure("every tool carries annotations")
                say(
                    f"   {name:<8} readOnly={hints.read_only_hint!s:<5} "
                    f"destructive={hints.destructive_hint!s:<5} "
                    f"idempotent={hints.idempotent_hint!s:<5} openWorld={hints.open_world_hint}"
                )
            expect(
                listed["read"].annotations is not None
                and listed["read"].annotations.read_only_hint is True,
                "read is read-only",
            )

            say(f"\n2. read {TARGET}")
            read = content(await call("read", {"path": TARGET}))
            on_disk = (worktree / TARGET).read_bytes()
            expect(read.get("ok") is True, "the read succeeds")
            expect(hashlib.sha256(on_disk).hexdigest() == read.get("sha256"), "digest matches")
            say(f"   {read['bytes']} bytes, sha256 {read['sha256'][:16]}...")
            say(f"   line 6: {read['content'].splitlines()[5].strip()}")

            say(f"\n3. replace {TARGET} by edits (expected_sha256 from the read): fix the typo")
            edits = [{"old_text": '"Helo, "', "new_text": '"Hello, "'}]
            arguments = {"path": TARGET, "expected_sha256": read["sha256"], "edits": edits}
            replaced = content(await call("replace", arguments))
            expect(replaced.get("ok") is True, "the replace succeeds")
            expect(replaced.get("committed") is True, "the replace commits")
            expect(replaced.get("durable") is True, "the commit is durable")
            expect(FIXED.encode() == (worktree / TARGET).read_bytes(), "the file holds the fix")
            expect(replaced.get("edits_applied") == 1, "one replacement was made")
            expect('+    return "Hello, "' in replaced.get("diff", ""), "the diff shows the fix")
            say(
                f"   committed={replaced['committed']} durable={replaced['durable']} "
                f"edits_applied={replaced['edits_applied']} sha256 {replaced['sha256'][:16]}..."
            )
            for line in str(replaced["diff"]).splitlines():
                say(f"   | {line}")

            say("\n4. the same edit again (a replay after a lost answer)")
            replay = await call("replace", arguments)
            again = content(replay)
            expect(replay.is_error and again.get("code") == "stale", "the replay is refused")
            expect(FIXED.encode() == (worktree / TARGET).read_bytes(), "nothing changed twice")
            holds = again.get("current_sha256") == replaced["sha256"]
            say(
                f"   refused: code={again['code']}; the file holds the first call's result: {holds}"
            )

            say("\n5. create NOTES.md")
            created = content(
                await call("replace", {"path": "NOTES.md", "content": NOTES, "create": True})
            )
            expect(created.get("ok") is True and created.get("created") is True, "created")
            say(f"   created={created['created']} bytes={created['bytes']}")

            say("\n6. shell: python3 -m unittest (the sample's own tests)")
            tests = content(await call("shell", {"argv": ["python3", "-m", "unittest"]}))
            expect(tests.get("ok") is True and tests.get("exit_code") == 0, "the tests pass")
            last = [line for line in str(tests.get("stderr", "")).splitlines() if line][-2:]
            contained = tests.get("contained")
            say(f"   exit_code={tests['exit_code']} contained={contained}: {' / '.join(last)}")

            say("\n7. shell: sleep 30, with timeout_seconds 1")
            sleeper = await call("shell", {"argv": ["sleep", "30"], "timeout_seconds": 1})
            stopped = content(sleeper)
            expect(sleeper.is_error and stopped.get("code") == "timed_out", "the timeout stops it")
            say(
                f"   code={stopped['code']} timed_out={stopped['timed_out']} "
                f"managed_cleanup_completed={stopped['managed_cleanup_completed']}"
            )

            say("\n8. shut down: close the client (stdin EOF)")
        errlog.seek(0)
        log = errlog.read()
    expect(CLEAN_STOP in log, "the server stopped on its own after stdin closed")
    say(f"   server: {CLEAN_STOP}")
    if HAVE_PROC:
        expect(len(server_pids) == 1, "the server process was found while it ran")
        expect(not alive(server_pids[0]), "the server process is gone")
        expect(not processes_inside(worktree), "no process is left in the worktree")
        say("   processes left: 0 (server gone, nothing running in the worktree)")
    else:
        say("   (process check skipped: it reads /proc)")


def prepare(scratch: str) -> Path:
    worktree = Path(os.path.realpath(scratch)) / "worktree"
    shutil.copytree(SAMPLE, worktree)
    return worktree


async def main() -> int:
    say("Spice coding tools: MCP over stdio, real MCP client, sample worktree\n")
    with tempfile.TemporaryDirectory(prefix="spice-demo-") as scratch:
        worktree = prepare(scratch)
        try:
            await story(worktree, Path(scratch) / "server.log")
        except DemoFailure as failure:
            say(f"\nDEMO FAILED: {failure}")
            log = Path(scratch) / "server.log"
            if log.exists():
                say("server stderr:\n" + log.read_text(encoding="utf-8", errors="replace"))
            return 1
    say("\nDemo complete: every step behaved as expected.")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
