"""Section 1: the three tools in-process through a ``Dispatcher``, beside stdlib floors.

Floors (standard library alone, same event loop, same files):

- read: ``open`` + ``fstat`` + ``pread`` + UTF-8 decode + SHA-256 (whole file) +
  ``json.dumps`` of the same answer fields;
- replace: read and hash the current file (the expected-digest check), write a
  same-directory temporary file, ``fsync``, ``rename``, ``fsync`` the directory;
- shell: ``asyncio.create_subprocess_exec`` + drain stdout/stderr in chunks + ``wait``.

Our side includes building the ``Call`` (its JSON arguments are parsed) and the
dispatcher's checks: that is what an in-process caller pays.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

from _floors import floor_read, floor_replace, floor_shell
from _harness import (
    KIB,
    MIB,
    Figure,
    Probe,
    Settings,
    Target,
    Unavailable,
    beside_floors,
    dumps,
    microseconds,
    milliseconds,
    side_by_side,
    size_label,
    write_text,
)

from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call, Result

SECTION: Final = "in-process"
READ_SIZES: Final = (4 * KIB, 256 * KIB)
REPLACE_SIZES: Final = (4 * KIB, 256 * KIB)
SHELL_OUTPUT_BYTES: Final = MIB
READ_LIMIT: Final = 256 * KIB
SHELL_FLOOR: Final = "create_subprocess_exec+drain+wait"
THREADED: Final = "floor via asyncio.to_thread"
TARGETS: Final = (Target(SECTION, f"read 4 KiB page vs {THREADED}", most=1.5, source="issue 15"),)


@final
@dataclass(slots=True)
class CallCounter:
    """Unique call ids for one run."""

    next_id: int = 0

    def call(self, name: str, arguments: dict[str, object]) -> Call:
        """A fresh ``Call`` of ``name`` with ``arguments``."""
        self.next_id += 1
        return Call(f"bench-{self.next_id}", name, dumps(arguments))


def content_of(result: Result) -> dict[str, object]:
    """The result's content object; a failed call stops the figure with its code."""
    parsed = json.loads(result.content)
    if not isinstance(parsed, dict):
        raise Unavailable("failed: the tool answered with a non-object")
    if result.is_error:
        raise Unavailable(f"failed: the tool answered {parsed.get('code')!r}")
    return parsed


@final
@dataclass(slots=True)
class Chain:
    """The digest the next replace expects, and which of two contents comes next."""

    digest: str
    turn: int = 0


# -- our side -------------------------------------------------------------------------------


@final
@dataclass(slots=True)
class Workbench:
    """A temporary worktree and our tools over it, built on first use."""

    root: Path
    calls: CallCounter = field(default_factory=CallCounter)
    _cleanups: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def dispatcher(self, names: tuple[str, ...]) -> Dispatcher:
        """A dispatcher holding exactly the tools ``names`` (raises if one is a stub)."""
        from spice.agent.tools.coding import Config, new_read, new_replace  # noqa: PLC0415

        config = Config(str(self.root))
        tools = []
        for name in names:
            if name == "read":
                tools.append(new_read(config))
            elif name == "replace":
                tools.append(new_replace(config))
            else:
                from spice.agent.coding import PosixLauncher, PosixResolver  # noqa: PLC0415
                from spice.agent.tools.coding import new_shell  # noqa: PLC0415

                tool, cleanup = new_shell(config, PosixResolver(), PosixLauncher())
                self._cleanups.append(cleanup)
                tools.append(tool)
        return Dispatcher(tools)

    async def close(self) -> None:
        """Run every shell ``Cleanup`` (bounded)."""
        for cleanup in self._cleanups:
            async with asyncio.timeout(30):
                await cleanup()
        self._cleanups.clear()


async def read_figures(bench: Workbench, settings: Settings) -> list[Figure]:
    """``read`` of a whole 4 KiB and 256 KiB file beside the floor."""
    figures: list[Figure] = []
    for size in READ_SIZES:
        relative = f"read-{size}.txt"
        write_text(bench.root / relative, size)

        def build(rel: str = relative) -> Probe:
            dispatcher = bench.dispatcher(("read",))

            async def ours() -> None:
                result = await dispatcher.dispatch(bench.calls.call("read", {"path": rel}))
                if result.is_error:
                    content_of(result)

            return ours

        async def floor(rel: str = relative) -> None:
            floor_read(bench.root, rel, 0, READ_LIMIT)

        async def threaded(rel: str = relative) -> None:
            await asyncio.to_thread(floor_read, bench.root, rel, 0, READ_LIMIT)

        figures += await beside_floors(
            SECTION,
            f"read {size_label(size)} page",
            build,
            floor,
            "open+pread+sha256+json.dumps",
            settings.warmup,
            settings.repeats,
            microseconds,
            (THREADED, threaded),
        )
    return figures


async def replace_figures(bench: Workbench, settings: Settings) -> list[Figure]:
    """``replace`` of a 4 KiB and 256 KiB file (alternating contents) beside the floor.

    Each call's ``expected_sha256`` is the digest the previous call answered.
    """
    figures: list[Figure] = []
    for size in REPLACE_SIZES:
        ours_path = f"replace-{size}.txt"
        floor_path = f"replace-floor-{size}.txt"
        first = write_text(bench.root / ours_path, size)
        write_text(bench.root / floor_path, size)
        contents = (first.upper().decode("ascii"), first.decode("ascii"))
        digest = hashlib.sha256(first).hexdigest()
        mine, theirs = Chain(digest), Chain(digest)

        def build(
            rel: str = ours_path, texts: tuple[str, str] = contents, chain: Chain = mine
        ) -> Probe:
            dispatcher = bench.dispatcher(("replace",))

            async def ours() -> None:
                arguments: dict[str, object] = {
                    "path": rel,
                    "content": texts[chain.turn % 2],
                    "expected_sha256": chain.digest,
                }
                chain.turn += 1
                answer = content_of(
                    await dispatcher.dispatch(bench.calls.call("replace", arguments))
                )
                new_digest = answer.get("sha256")
                if not isinstance(new_digest, str) or answer.get("changed") is not True:
                    raise Unavailable("failed: replace did not change the file")
                chain.digest = new_digest

            return ours

        async def floor(
            rel: str = floor_path, texts: tuple[str, str] = contents, chain: Chain = theirs
        ) -> None:
            data = texts[chain.turn % 2].encode("ascii")
            chain.turn += 1
            chain.digest = floor_replace(bench.root, rel, data, chain.digest)

        async def threaded(
            rel: str = floor_path, texts: tuple[str, str] = contents, chain: Chain = theirs
        ) -> None:
            data = texts[chain.turn % 2].encode("ascii")
            chain.turn += 1
            chain.digest = await asyncio.to_thread(
                floor_replace, bench.root, rel, data, chain.digest
            )

        figures.append(
            await side_by_side(
                SECTION,
                f"replace {size_label(size)}",
                build,
                floor,
                "check+temp write+fsync+rename+fsync dir",
                settings.warmup,
                settings.slow_repeats * 2,
                microseconds,
                (THREADED, threaded),
            )
        )
    return figures


def shell_probe(bench: Workbench, argv: list[str]) -> Callable[[], Probe]:
    """A builder of our ``shell`` probe running ``argv`` (a failed call stops it)."""

    def build() -> Probe:
        dispatcher = bench.dispatcher(("shell",))

        async def ours() -> None:
            content_of(await dispatcher.dispatch(bench.calls.call("shell", {"argv": argv})))

        return ours

    return build


def floor_probe(bench: Workbench, argv: list[str]) -> Probe:
    """The stdlib floor of a ``shell`` call running ``argv`` in the root."""

    async def floor() -> None:
        await floor_shell(argv, bench.root)

    return floor


async def shell_figures(bench: Workbench, settings: Settings) -> list[Figure]:
    """``shell`` of ``true`` and of a command writing 1 MiB, beside the floor."""
    figures: list[Figure] = []
    write_text(bench.root / "shell-1m.txt", SHELL_OUTPUT_BYTES)
    cases = (
        ("shell `true`", ["true"]),
        (f"shell writing {size_label(SHELL_OUTPUT_BYTES)}", ["cat", "shell-1m.txt"]),
    )
    for name, argv in cases:
        figures.append(
            await side_by_side(
                SECTION,
                name,
                shell_probe(bench, argv),
                floor_probe(bench, argv),
                SHELL_FLOOR,
                settings.warmup,
                settings.slow_repeats * 2,
                milliseconds,
            )
        )
    return figures


async def _all(bench: Workbench, settings: Settings) -> list[Figure]:
    try:
        figures = await read_figures(bench, settings)
        figures += await replace_figures(bench, settings)
        figures += await shell_figures(bench, settings)
    finally:
        await bench.close()
    return figures


def run(settings: Settings) -> list[Figure]:
    """Every figure of section 1."""
    root = Path(tempfile.mkdtemp(prefix="spice-bench-")).resolve()
    try:
        return asyncio.run(_all(Workbench(root), settings))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from _harness import main_of

    sys.exit(main_of(run))
