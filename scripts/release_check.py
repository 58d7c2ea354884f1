"""The release gate: reproducible builds, wheel metadata, and an index-free install.

Run by `make verify-release` after `make verify`. Steps:

1. build every sdist and wheel of the last commit twice (`make dist`'s build, from
   `scripts/build_dist.py`) with SOURCE_DATE_EPOCH from that commit and compare the
   two builds byte for byte;
2. check each wheel's metadata against spice-release.json (names, one version,
   exact pins between the members, Requires-Python, license file, py.typed,
   the console script);
3. install the wheels into a fresh virtual environment with no index
   (`--no-index --find-links`) and smoke-test it: `spice-coding tools`, one `read`
   call, and an MCP `tools/list` over stdio.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

import build_dist

ROOT: Final = Path(__file__).resolve().parent.parent
RELEASE: Final = json.loads((ROOT / "spice-release.json").read_text(encoding="utf-8"))
UV: Final = build_dist.UV


def run(*argv: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> str:
    """Run a command, fail loudly with its own output when it fails."""
    try:
        return build_dist.run(*argv, cwd=cwd, env=env)
    except build_dist.DistError as error:
        raise SystemExit(f"release check: {error}") from None


def check_reproducible(work: Path) -> Path:
    """Two builds of the last commit (exported with git archive) are identical, byte for byte."""
    epoch = run("git", "log", "-1", "--format=%ct").strip()
    source = work / "source"
    source.mkdir()
    archive = work / "source.tar"
    run("git", "archive", "--format=tar", "-o", str(archive), "HEAD")
    run("tar", "-xf", str(archive), "-C", str(source))
    first = build_dist.build(source, work / "first", epoch)
    second = build_dist.build(source, work / "second", epoch)
    if sorted(first) != build_dist.artifact_names() or first != second:
        raise SystemExit("release check: the two builds differ")
    print(f"reproducible: {len(first)} artifacts identical across two builds")
    return work / "first"


def wheel_metadata(wheel: Path) -> tuple[email.message.Message, list[str]]:
    """The METADATA of a wheel and its file list."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta_name).decode("utf-8")
        entry = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        if entry is not None:
            names.append("ENTRY:" + archive.read(entry).decode("utf-8"))
    return email.parser.Parser().parsestr(text), names


def check_metadata(dist: Path) -> None:
    """Names, versions, pins, Requires-Python, license, py.typed and the console script."""
    version = RELEASE["version"]
    members = {d["name"] for d in RELEASE["distributions"]}
    for entry in RELEASE["distributions"]:
        wheel = dist / f"{entry['name'].replace('-', '_')}-{version}-py3-none-any.whl"
        if not wheel.is_file():
            raise SystemExit(f"release check: no wheel for {entry['name']}")
        meta, names = wheel_metadata(wheel)
        if meta["Name"] != entry["name"] or meta["Version"] != version:
            raise SystemExit(f"release check: wrong name or version in {wheel.name}")
        if meta["Requires-Python"] != RELEASE["python"]:
            raise SystemExit(f"release check: wrong Requires-Python in {wheel.name}")
        if meta["License-Expression"] != "Apache-2.0" or not any(
            n.endswith("licenses/LICENSE") for n in names
        ):
            raise SystemExit(f"release check: license missing in {wheel.name}")
        if not any(n.endswith("/py.typed") for n in names):
            raise SystemExit(f"release check: py.typed missing in {wheel.name}")
        for requirement in meta.get_all("Requires-Dist") or []:
            name = requirement.split("=")[0].split("[")[0].split(";")[0].strip()
            if name in members and f"{name}=={version}" != requirement.split(";")[0].strip():
                raise SystemExit(f"release check: {wheel.name} does not pin {name} exactly")
        if entry["name"] == "spice-agent-coding" and not any(
            n.startswith("ENTRY:") and "spice-coding = spice.agent.coding._cli:console" in n
            for n in names
        ):
            raise SystemExit("release check: the spice-coding console script is missing")
    print(f"metadata: {len(members)} wheels carry names, version {version}, exact pins")


def check_install(dist: Path, work: Path) -> None:
    """Install the wheels with no index and run the smoke test in the fresh environment."""
    venv = work / "venv"
    python = str(venv / "bin" / "python")
    # Third-party dependencies exactly as locked, from uv's cache (filled by `make bootstrap`),
    # without the workspace members; then our own wheels from dist/ with no index at all. Both
    # compile bytecode, as `make bootstrap` does, so the smoke test starts as a user's would.
    run(
        UV,
        "sync",
        "--locked",
        "--offline",
        "--no-dev",
        "--no-install-workspace",
        "--compile-bytecode",
        "--package",
        "spice-agent-coding",
        "--python",
        sys.executable,
        env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)},
    )
    run(
        UV,
        "pip",
        "install",
        "--offline",
        "--no-index",
        "--no-deps",
        "--compile-bytecode",
        "--python",
        python,
        "--find-links",
        str(dist),
        "spice-agent-api",
        "spice-agent-tools-coding",
        "spice-agent-coding",
    )
    tree = work / "tree"
    tree.mkdir()
    (tree / "hello.txt").write_text("hello\n", encoding="utf-8")
    cli = str(venv / "bin" / "spice-coding")
    tools = json.loads(run(cli, "--root", str(tree), "tools"))
    names = sorted(t["name"] for t in (tools if isinstance(tools, list) else tools["tools"]))
    if names != ["read", "replace", "shell"]:
        raise SystemExit("release check: the installed CLI lists the wrong tools")
    content = json.loads(run(cli, "--root", str(tree), "call", "read", '{"path": "hello.txt"}'))
    if content.get("content") != "hello\n":
        raise SystemExit("release check: the installed read call failed")
    probe = (
        "import asyncio, sys\n"
        "from mcp import ClientSession, StdioServerParameters\n"
        "from mcp.client.stdio import stdio_client\n"
        "async def main():\n"
        "    args = ['--root', sys.argv[2], 'serve']\n"
        "    params = StdioServerParameters(command=sys.argv[1], args=args)\n"
        "    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:\n"
        "        await s.initialize()\n"
        "        listed = await s.list_tools()\n"
        "        print(','.join(sorted(t.name for t in listed.tools)))\n"
        "asyncio.run(main())\n"
    )
    listed = run(python, "-c", probe, cli, str(tree)).strip()
    if listed != "read,replace,shell":
        raise SystemExit("release check: the installed MCP server lists the wrong tools")
    print("install: wheels installed with no index; tools, read and MCP tools/list work")


def main() -> int:
    """Run every release check in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="spice-release-") as scratch:
        work = Path(scratch)
        dist = check_reproducible(work)
        check_metadata(dist)
        check_install(dist, work)
        shutil.rmtree(work / "venv", ignore_errors=True)
    print("verify-release: all checks passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
