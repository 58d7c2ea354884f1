"""Section 3: start-up. One-shot ``spice-coding`` commands beside ``python -c pass``, and
``serve`` from spawn to its first ``tools/list`` answer beside the reference server.

The CLI floor is the same interpreter starting and doing nothing; the difference is
what importing and composing the application costs a one-shot caller. Two more floors
stand beside it, as figures of their own (``FLOOR_LADDER``): the least any ``asyncio``
program that reads one file in a worker thread costs, and that with the contract
imported first; they show how much of issue 15's 6x a one-shot ``call`` can ever
have. All of these run in one rotation. The server figure is measured through both
clients of ``_clients`` (raw JSON-RPC and ``mcp``), each round spawning every (server,
client) pair once in a rotating order, and beside the peer's start stands the import
of the MCP SDK alone (``SDK_IMPORT``), in the same rounds. Every child runs with
``PYTHONDONTWRITEBYTECODE=1``: it starts with the bytecode the install compiled (``make
bootstrap``) and leaves none behind; the notes say whether it was there.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from _clients import (
    CLIENT_KINDS,
    CLIENT_LABELS,
    PEER_NAME,
    ClientKind,
    Side,
    child_environment,
    open_client,
    ours,
    peer,
)
from _harness import (
    Figure,
    Settings,
    Target,
    Unavailable,
    milliseconds,
    number,
    pending_reason,
    spice_coding,
    write_text,
)

SECTION: Final = "startup"
COMMAND_TIMEOUT: Final = 60.0
FLOOR_NAME: Final = "python -c pass (same interpreter)"
STDLIB_IMPORTS: Final = "import argparse, asyncio, json"
"""What any asyncio command line pays before its own code: the second floor, in notes."""
CALL_READ: Final = "spice-coding call read (4 KiB)"
SERVE: Final = "serve: spawn to first tools/list answer ({client})"
TARGETS: Final = (
    Target(SECTION, CALL_READ, most=6.0, source="issue 15"),
    *(
        Target(SECTION, SERVE.format(client=CLIENT_LABELS[kind]), most=2.0, source="issue 15")
        for kind in CLIENT_KINDS
    ),
)
_READ_ONE_FILE: Final = (
    "async def main():\n"
    "    await asyncio.to_thread(lambda: open(sys.argv[1], 'rb').read())\n"
    "asyncio.run(main())\n"
)
FLOOR_LADDER: Final = (
    (
        "floor: asyncio.run of one file read in a worker thread",
        "import asyncio, sys\n" + _READ_ONE_FILE,
    ),
    (
        "floor: that, after importing the contract (spice.agent.*)",
        "import asyncio, sys\n"
        "import spice.agent.dispatch, spice.agent.lifecycle, spice.agent.process\n"
        "import spice.agent.tool\n" + _READ_ONE_FILE,
    ),
)
"""Programs below which a one-shot ``call read`` cannot go: (figure name, ``-c`` script)."""
SDK_IMPORT: Final = "import mcp.server, mcp.shared.message, mcp.types"
"""What ``serve`` imports of the MCP SDK before it can answer (``_stdio``, ``_mcp``)."""
SDK_FLOOR: Final = "serve floor: importing the MCP SDK alone, vs the peer's whole start ({client})"
SDK_FLOOR_NOTE: Final = (
    f"python -c '{SDK_IMPORT}'; at or above 2.00x, no server that imports the SDK meets "
    "issue 15's start-up target"
)
BYTECODE_WITNESSES: Final = ("mcp", "pydantic", "spice.agent.coding._cli")
"""Modules whose cached bytecode says whether the install compiled it."""


def wall(argv: list[str], cwd: Path) -> float:
    """Seconds from spawn to exit of ``argv``; a non-zero exit stops the figure."""
    start = time.perf_counter_ns()
    completed = subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    elapsed = (time.perf_counter_ns() - start) / 1e9
    if completed.returncode != 0:
        raise Unavailable(f"failed: exit status {completed.returncode}")
    return elapsed


def bytecode_note() -> str:
    """Whether the bytecode of a few modules the server imports is on disk (a fresh clone)."""
    missing = []
    for name in BYTECODE_WITNESSES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or not Path(importlib.util.cache_from_source(origin)).is_file():
            missing.append(name)
    if not missing:
        return "bytecode: compiled at install (" + ", ".join(BYTECODE_WITNESSES) + ")"
    return "bytecode: MISSING for " + ", ".join(missing) + " (run `make bootstrap`)"


async def time_to_tools(side: Side, kind: ClientKind) -> float:
    """Seconds from spawning ``side``'s server to its first ``tools/list`` answer."""
    start = time.perf_counter_ns()
    async with open_client(side, kind) as client:
        await client.list_tools()
        return (time.perf_counter_ns() - start) / 1e9


async def sdk_import_time(cwd: Path) -> float:
    """Seconds from spawn to a child's word that it has imported what ``serve`` needs of the
    SDK, spawned the way the servers are (same environment). Like the servers' figure, it
    stops before the child's exit: finalizing the SDK's heap takes a tenth of a second or
    more, which no answer waits for."""
    start = time.perf_counter_ns()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"{SDK_IMPORT}; print('imported', flush=True)",
        cwd=cwd,
        env=child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    async with asyncio.timeout(COMMAND_TIMEOUT):
        line = await process.stdout.readline()
        elapsed = (time.perf_counter_ns() - start) / 1e9
        await process.stdout.read()
        code = await process.wait()
    if code != 0 or line != b"imported\n":
        raise Unavailable(f"failed: exit status {code}")
    return elapsed


async def _serve_startup(
    sides: tuple[Side, Side], repeats: int, cwd: Path
) -> tuple[dict[tuple[int, ClientKind], list[float] | str], list[float]]:
    """Spawn-to-``tools/list`` samples per (side, client), and the SDK import's, rotated."""
    slots: list[tuple[int, ClientKind] | None] = [
        (index, kind) for kind in CLIENT_KINDS for index in range(len(sides))
    ]
    slots.append(None)  # the SDK's import alone
    samples: dict[tuple[int, ClientKind], list[float] | str] = {
        slot: sides[slot[0]].error or [] for slot in slots if slot is not None
    }
    sdk: list[float] = []
    for index in range(repeats + 1):
        shift = index % len(slots)
        for slot in slots[shift:] + slots[:shift]:
            if slot is None:
                elapsed = await sdk_import_time(cwd)
                if index > 0:
                    sdk.append(elapsed)
                continue
            collected = samples[slot]
            if isinstance(collected, str):
                continue
            try:
                elapsed = await time_to_tools(sides[slot[0]], slot[1])
            except Exception as error:  # noqa: BLE001 - reported as unavailable
                samples[slot] = f"{sides[slot[0]].label} did not start: {pending_reason(error)}"
                continue
            if index > 0:
                collected.append(elapsed)
    return samples, sdk


def serve_figures(settings: Settings) -> list[Figure]:
    """``serve``: spawn to first ``tools/list`` answer beside the peer, through both clients."""
    base = Path(tempfile.mkdtemp(prefix="spice-bench-start-")).resolve()
    try:
        samples, sdk = asyncio.run(
            _serve_startup((ours(base), peer(base)), settings.process_repeats, base)
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    note = bytecode_note()
    figures = []
    for kind in CLIENT_KINDS:
        mine, theirs = samples[0, kind], samples[1, kind]
        reasons = [x for x in (mine, theirs) if isinstance(x, str)]
        peer_start = milliseconds(theirs) if isinstance(theirs, list) and theirs else None
        figures.append(
            Figure(
                SECTION,
                SERVE.format(client=CLIENT_LABELS[kind]),
                milliseconds(mine) if isinstance(mine, list) and mine else None,
                "peer",
                PEER_NAME,
                peer_start,
                unavailable="; ".join(reasons) or None,
                notes=(note,),
            )
        )
        figures.append(
            Figure(
                SECTION,
                SDK_FLOOR.format(client=CLIENT_LABELS[kind]),
                milliseconds(sdk),
                "peer",
                PEER_NAME,
                peer_start,
                unavailable=theirs if isinstance(theirs, str) else None,
                notes=(SDK_FLOOR_NOTE,),
            )
        )
    return figures


def run(settings: Settings) -> list[Figure]:
    """Every figure of section 3: the one-shot commands, then ``serve``."""
    return cli_figures(settings) + serve_figures(settings)


def cli_figures(settings: Settings) -> list[Figure]:
    """``call read`` and ``tools`` beside ``python -c pass``, with the floor ladder, in rotation."""
    root = Path(tempfile.mkdtemp(prefix="spice-bench-cli-")).resolve()
    write_text(root / "a.txt", 4096)
    script = str(spice_coding())
    subjects = (
        (CALL_READ, [script, "--root", str(root), "call", "read", '{"path":"a.txt"}']),
        ("spice-coding tools", [script, "--root", str(root), "tools"]),
        *((name, [sys.executable, "-c", text, "a.txt"]) for name, text in FLOOR_LADDER),
    )
    # Slot 0 is the floor, 1 the stdlib-imports floor, then the subjects. The floors run
    # every round and their failure stops the section; a subject runs until it fails.
    commands = [[sys.executable, "-c", "pass"], [sys.executable, "-c", STDLIB_IMPORTS]]
    commands += [argv for _, argv in subjects]
    samples: list[list[float]] = [[] for _ in commands]
    errors: dict[int, str] = {}
    try:
        for index in range(settings.process_repeats + 1):
            shift = index % len(commands)
            for which in (*range(shift, len(commands)), *range(shift)):
                if which in errors:
                    continue
                try:
                    elapsed = wall(commands[which], root)
                except (Unavailable, OSError, subprocess.SubprocessError) as failure:
                    if which < 2:
                        raise
                    errors[which] = pending_reason(failure)
                    continue
                if index > 0:
                    samples[which].append(elapsed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    floor, stdlib = milliseconds(samples[0]), milliseconds(samples[1])
    figures: list[Figure] = []
    for offset, (name, _argv) in enumerate(subjects):
        which = offset + 2
        mine = None if which in errors else milliseconds(samples[which])
        note = f"python -c '{STDLIB_IMPORTS}': {number(stdlib.median)} ms"
        if mine is not None:
            note += f", this/that {mine.median / stdlib.median:.2f}x"
        figures.append(
            Figure(
                SECTION,
                name,
                mine,
                "floor",
                FLOOR_NAME,
                floor,
                unavailable=errors.get(which),
                notes=(note,),
            )
        )
    return figures


if __name__ == "__main__":
    from _harness import main_of

    sys.exit(main_of(run))
