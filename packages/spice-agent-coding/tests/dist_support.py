"""Helpers of the `make dist` tests: a real build, the locked wheelhouse, an MCP listing.

The build is `scripts/build_dist.py`, the script `make dist` runs, into a directory the
test owns (never the checkout's `dist/`). The wheelhouse (`.wheelhouse/`, filled by `make
bootstrap` from uv.lock) holds the application's third-party wheels: with it, an install
resolves everything from local directories with no index at all.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from mcp import Client, StdioServerParameters, stdio_client

REPOSITORY: Final = Path(__file__).resolve().parents[3]
BUILD_SCRIPT: Final = REPOSITORY / "scripts" / "build_dist.py"
WHEELHOUSE: Final = REPOSITORY / ".wheelhouse"
COMMAND_SECONDS: Final = 600
"""Bound on one build, install or listing command (an install of about 30 wheels)."""
TOOLS: Final = ["read", "replace", "shell"]


def release_names() -> list[str]:
    """The wheel and sdist names spice-release.json implies, worked out here independently."""
    release = json.loads((REPOSITORY / "spice-release.json").read_text(encoding="utf-8"))
    version = release["version"]
    names: list[str] = []
    for entry in release["distributions"]:
        stem = entry["name"].replace("-", "_") + "-" + version
        names += [stem + "-py3-none-any.whl", stem + ".tar.gz"]
    return sorted(names)


def release_version() -> str:
    version = json.loads((REPOSITORY / "spice-release.json").read_text(encoding="utf-8"))["version"]
    assert isinstance(version, str)
    return version


def run(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command bounded by ``COMMAND_SECONDS``, capturing its output (never checked)."""
    return subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )


def build_dist(out: Path, script: Path = BUILD_SCRIPT) -> list[str]:
    """Run `make dist`'s build into ``out``; the artifact names it left there, sorted."""
    done = run([sys.executable, str(script), "--out", str(out)])
    assert 0 == done.returncode, done.stderr
    return sorted(p.name for p in out.iterdir() if p.name.endswith((".whl", ".tar.gz")))


def base_python() -> str:
    """The interpreter the test environment was made from (the wheelhouse's wheels fit it)."""
    return str(getattr(sys, "_base_executable", sys.executable))


def wheelhouse_or_skip() -> Path:
    """The locked third-party wheels, or skip when `make bootstrap` could not fetch them."""
    stamp = WHEELHOUSE / "requirements.txt"
    if not stamp.is_file():
        pytest.skip("no .wheelhouse: run `make bootstrap` once with access to PyPI")
    exported = run(
        [
            os.environ.get("UV", "uv"),
            "export",
            "--locked",
            "--offline",
            "--quiet",
            "--no-dev",
            "--no-emit-workspace",
            "--no-header",
            "--package",
            "spice-agent-coding",
            "--format",
            "requirements-txt",
        ],
        cwd=REPOSITORY,
    )
    if exported.returncode != 0:
        pytest.skip("uv cannot export the lock here")
    if exported.stdout != stamp.read_text(encoding="utf-8"):
        pytest.skip(".wheelhouse is older than uv.lock: run `make bootstrap`")
    return WHEELHOUSE


def quiet_environment(**extra: str) -> dict[str, str]:
    """This environment without pip's configuration files (no extra index can slip in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PIPX_"))}
    env.pop("VIRTUAL_ENV", None)
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


@dataclass(frozen=True)
class Served:
    """What an installed server answered over MCP: its tools, a read, and a shell call."""

    tools: list[str]
    read: str
    contained: object
    """The shell result's ``contained`` (``True`` only where the command was contained)."""


async def served(
    argv: Sequence[str], worktree: Path, env: Mapping[str, str] | None = None
) -> Served:
    """Start ``argv serve`` over stdio (the MCP SDK's client, ``env`` or the SDK's default
    environment): list the tools, read a file and run ``true`` in the shell."""
    (worktree / "hello.txt").write_text("hello\n", encoding="utf-8")
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--root", str(worktree)],
        cwd=str(worktree),
        env=None if env is None else dict(env),
    )
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening /dev/null
        async with Client(stdio_client(params, errlog=errlog)) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            read = await client.call_tool("read", {"path": "hello.txt"})
            shell = await client.call_tool("shell", {"argv": ["true"]})
    content = read.structured_content["content"] if read.structured_content else ""
    contained = shell.structured_content.get("contained") if shell.structured_content else None
    return Served(listed, str(content), contained)


@functools.cache
def host_contains() -> bool:
    """Whether this host contains a shell call at all: asked once of this environment's own
    server (installed with copies, outside any worktree) in a scratch worktree."""
    with tempfile.TemporaryDirectory() as tree:
        done = run(
            [
                str(Path(sys.executable).parent / "spice-coding"),
                "--root",
                tree,
                "call",
                "shell",
                '{"argv": ["true"]}',
            ]
        )
    return done.returncode == 0 and '"contained":true' in done.stdout


def contained_or_skip() -> bool:
    """``True``, or skip where this host cannot contain a call (no Landlock, say)."""
    if not host_contains():
        pytest.skip("this host cannot contain a shell call (see `spice-coding tools`)")
    return True


async def served_tools(command: Path, worktree: Path) -> tuple[list[str], str]:
    """Start ``command serve`` over stdio with the MCP SDK's client: tool names, and a read."""
    (worktree / "hello.txt").write_text("hello\n", encoding="utf-8")
    params = StdioServerParameters(
        command=str(command), args=["serve", "--root", str(worktree)], cwd=str(worktree)
    )
    with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening /dev/null
        async with Client(stdio_client(params, errlog=errlog)) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            read = await client.call_tool("read", {"path": "hello.txt"})
    content = read.structured_content["content"] if read.structured_content else ""
    return listed, str(content)
