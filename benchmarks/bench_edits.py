"""Section "edits": one small fix of a 4 KiB and a 256 KiB file, three ways (issue 12).

The same change (a one-word typo fix in a source-like file) is made by ``replace`` with
``edits``, by ``replace`` with the whole ``content``, and by the reference MCP server's
``edit_file``: in process (our tool alone) and over MCP (``spice-coding serve`` and the
peer, each driven by the raw JSON-RPC client of ``_clients``). Each probe works on its
own file and flips it between the typo and the fix, so every call is a real change.

Beside the latency, the bytes a model must generate for each call: the compact JSON of
its arguments (the output tokens an agent pays for). Those figures are exact (n=1).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_edits.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from _clients import PEER_NAME, Client, Side, open_client, ours, peer
from _harness import (
    KIB,
    Figure,
    Settings,
    Summary,
    main_of,
    microseconds,
    milliseconds,
    pending_reason,
    rotate,
    size_label,
    summarize,
    unavailable,
)

SECTION: Final = "edits"
SIZES: Final = (4 * KIB, 256 * KIB)
TYPO: Final = ("'Helo, '", "'Hello, '")
"""The two states of the one changed word (each occurs exactly once in the file)."""
WHOLE: Final = "replace, whole content (same change)"
CALL_TIMEOUT: Final = 60.0


def source_text(size: int, word: str) -> str:
    """At most ``size`` bytes of source-like lines with ``word`` once, in the middle.

    The typo state is a little under ``size`` so that the fix (one byte longer) stays
    within a write bound of ``size``.
    """
    greet = f"def greet(name):\n    return {word} + name\n"
    lines: list[str] = []
    total = len(greet)
    number = 0
    while True:
        line = f"value_{number:06d} = compute({number}, scale=2)  # step {number}\n"
        if total + len(line) > size - 8:
            break
        lines.append(line)
        total += len(line)
        number += 1
    lines.insert(len(lines) // 2, greet)
    return "".join(lines)


def encoded(arguments: dict[str, object]) -> int:
    """Bytes of the compact JSON a model generates for ``arguments``."""
    text = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


@dataclass(slots=True)
class Flip:
    """One file flipped between the typo and the fix, one call at a time."""

    relative: str
    absolute: Path
    size: int
    state: int = 0
    digest: str = ""

    def create(self) -> None:
        """Write the typo state and remember its digest."""
        data = source_text(self.size, TYPO[0]).encode()
        self.absolute.write_bytes(data)
        self.state, self.digest = 0, hashlib.sha256(data).hexdigest()

    def _words(self) -> tuple[str, str]:
        return TYPO[self.state], TYPO[1 - self.state]

    def edit_arguments(self) -> dict[str, object]:
        """Ours: the one word, under the current digest."""
        old, new = self._words()
        edits = [{"old_text": old, "new_text": new}]
        return {"path": self.relative, "expected_sha256": self.digest, "edits": edits}

    def content_arguments(self) -> dict[str, object]:
        """Ours: the whole next file, under the current digest."""
        text = source_text(self.size, self._words()[1])
        return {"path": self.relative, "content": text, "expected_sha256": self.digest}

    def peer_arguments(self) -> dict[str, object]:
        """The reference server's ``edit_file`` of the same word (it wants absolute paths)."""
        old, new = self._words()
        return {"path": str(self.absolute), "edits": [{"oldText": old, "newText": new}]}

    def advance(self, answer: object) -> None:
        """The call flipped the file; keep our answer's digest (the peer gives none)."""
        self.state = 1 - self.state
        if isinstance(answer, dict) and isinstance(answer.get("sha256"), str):
            self.digest = answer["sha256"]
        else:
            self.digest = hashlib.sha256(self.absolute.read_bytes()).hexdigest()


def bytes_figures(size: int, root: Path, peer_root: Path) -> list[Figure]:
    """What a model generates for each way of making the change (exact, n=1)."""
    flip = Flip(f"e-{size}.txt", root / f"e-{size}.txt", size, digest="0" * 64)
    other = Flip("", peer_root / f"e-{size}.txt", size)
    edit, whole, theirs = (
        encoded(flip.edit_arguments()),
        encoded(flip.content_arguments()),
        encoded(other.peer_arguments()),
    )
    label = size_label(size)

    def exact(value: int) -> Summary:
        return summarize([float(value)], "bytes")

    return [
        Figure(
            SECTION,
            f"bytes to generate: edit {label}",
            exact(edit),
            "peer",
            f"{PEER_NAME} edit_file",
            exact(theirs),
            notes=(f"the peer's path is absolute ({len(str(other.absolute))} bytes here)",),
        ),
        Figure(
            SECTION,
            f"bytes to generate: edit {label} vs whole",
            exact(edit),
            "peer",
            WHOLE,
            exact(whole),
        ),
    ]


async def inprocess_figures(root: Path, settings: Settings) -> list[Figure]:
    """Our edit beside our whole-content replace of the same change, in process."""
    from spice.agent.tool import Call  # noqa: PLC0415 - the bench imports ours lazily
    from spice.agent.tools.coding import Config, new_replace  # noqa: PLC0415

    tool = new_replace(Config(str(root)))
    figures: list[Figure] = []
    for size in SIZES:
        flips = [
            Flip(f"{kind}-{size}.txt", root / f"{kind}-{size}.txt", size) for kind in ("e", "c")
        ]
        for flip in flips:
            flip.create()

        def probe(
            flip: Flip, build: Callable[[], dict[str, object]]
        ) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                result = await tool.execute(Call("bench", "replace", json.dumps(build())))
                answer = json.loads(result.content)
                if answer.get("ok") is not True:
                    raise RuntimeError(f"replace answered {answer.get('code')}")
                flip.advance(answer)

            return call

        edit = probe(flips[0], flips[0].edit_arguments)
        whole = probe(flips[1], flips[1].content_arguments)
        samples = await rotate((edit, whole), settings.warmup, settings.repeats)
        figures.append(
            Figure(
                SECTION,
                f"in-process edit {size_label(size)}",
                microseconds(samples[0]),
                "peer",
                WHOLE,
                microseconds(samples[1]),
            )
        )
    return figures


async def _timed(client: Client, tool: str, arguments: dict[str, object]) -> object:
    async with asyncio.timeout(CALL_TIMEOUT):
        return await client.call_tool(tool, arguments)


async def mcp_figures(sides: tuple[Side, Side], settings: Settings) -> list[Figure]:
    """Over MCP (raw JSON-RPC client): our edit beside the peer's edit_file and our content."""
    figures: list[Figure] = []
    async with AsyncExitStack() as stack:
        try:
            mine = await stack.enter_async_context(open_client(sides[0], "raw"))
        except Exception as error:  # noqa: BLE001 - reported as unavailable
            return [unavailable(SECTION, "mcp edit", pending_reason(error), "peer", PEER_NAME)]
        theirs: Client | None = None
        reason = ""
        try:
            theirs = await stack.enter_async_context(open_client(sides[1], "raw"))
        except Exception as error:  # noqa: BLE001 - the peer is optional
            reason = pending_reason(error)
        for size in SIZES:
            ours_edit = Flip(f"e-{size}.txt", sides[0].root / f"e-{size}.txt", size)
            ours_whole = Flip(f"c-{size}.txt", sides[0].root / f"c-{size}.txt", size)
            peer_edit = Flip("", sides[1].root / f"e-{size}.txt", size)
            for flip in (ours_edit, ours_whole, peer_edit):
                flip.create()

            def probe(
                client: Client, tool: str, flip: Flip, build: Callable[[], dict[str, object]]
            ) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    flip.advance(await _timed(client, tool, build()))

                return call

            probes = [
                probe(mine, "replace", ours_edit, ours_edit.edit_arguments),
                probe(mine, "replace", ours_whole, ours_whole.content_arguments),
                None
                if theirs is None
                else probe(theirs, "edit_file", peer_edit, peer_edit.peer_arguments),
            ]
            samples = await rotate(probes, settings.warmup, settings.repeats)
            label = size_label(size)
            edit = milliseconds(samples[0])
            if theirs is None:
                figures.append(unavailable(SECTION, f"mcp edit {label}", reason, "peer", PEER_NAME))
            else:
                figures.append(
                    Figure(
                        SECTION,
                        f"mcp edit {label}",
                        edit,
                        "peer",
                        f"{PEER_NAME} edit_file",
                        milliseconds(samples[2]),
                    )
                )
            figures.append(
                Figure(
                    SECTION,
                    f"mcp edit {label} vs whole",
                    edit,
                    "peer",
                    WHOLE,
                    milliseconds(samples[1]),
                )
            )
    return figures


def run(settings: Settings) -> list[Figure]:
    """Every figure of the edits section."""
    base = Path(tempfile.mkdtemp(prefix="spice-bench-edits-")).resolve()
    try:
        for name in ("inprocess", "ours", "peer"):
            (base / name).mkdir()
        sides = (ours(base / "ours"), peer(base / "peer"))
        figures: list[Figure] = []
        for size in SIZES:
            figures += bytes_figures(size, base / "ours", base / "peer")
        figures += asyncio.run(inprocess_figures(base / "inprocess", settings))
        figures += asyncio.run(mcp_figures(sides, settings))
        return figures
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main_of(run))
