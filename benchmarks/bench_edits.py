"""Section "edits": one small fix of a 4 KiB and a 256 KiB file, three ways (issue 12).

The same change (a one-word typo fix in a source-like file) is made by ``replace`` with
``edits``, by ``replace`` with the whole ``content``, and by the reference MCP server's
``edit_file``: in process (our tool alone) and over MCP (``spice-coding serve`` and the
peer, each driven by the raw JSON-RPC client of ``_clients``). Each probe works on its
own file and flips it between the typo and the fix, so every call is a real change.

Beside the latency, the bytes a model must generate for each call: the compact JSON of
its arguments (the output tokens an agent pays for). Those figures are exact (n=1).

Round 3 (issue 23) adds, over MCP and exact (n=1), what a model generates and reads to
make three changes as an agent would: a one-line fix of a 25 KB file, a three-line change
of a 1 MiB file, and a three-line change of a CRLF file written with LF (as models write):
ours is ``read`` with ``limit`` 1 (for ``file_sha256``) and ``replace`` with ``edits``, and a
second change chained on the answer's ``sha256`` (no read); the peer is one ``edit_file``.
For the CRLF file, the lines that lost their CR on disk. In process: an ``edit_not_found``
in a 4 MiB file whose 64th edit is missing (the bounded search for a similar passage)
beside the same 64 edits applied.

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

from _clients import PEER_NAME, Client, RawClient, Side, open_client, ours, peer
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


@dataclass(frozen=True, slots=True)
class Change:
    """One change an agent makes: the file, and the old and new text of its lines."""

    name: str
    data: bytes
    old: str
    new: str


def _numbered(size: int, crlf: bool = False) -> bytes:
    """About ``size`` bytes of source-like numbered lines."""
    end = "\r\n" if crlf else "\n"
    lines: list[str] = []
    total = number = 0
    while total < size:
        line = f"value_{number:06d} = compute({number}, scale=2)  # step {number}{end}"
        lines.append(line)
        total += len(line)
        number += 1
    return "".join(lines).encode()


def _three(number: int) -> tuple[str, str]:
    """Three consecutive lines from ``number`` (LF, as a model writes them), and a change."""
    old = "".join(
        f"value_{n:06d} = compute({n}, scale=2)  # step {n}\n" for n in range(number, number + 3)
    )
    return old, old.replace("scale=2", "scale=3")


def changes() -> list[Change]:
    """The issue's three changes."""
    fix = "value_000300 = compute(300, scale=2)"
    return [
        Change("one-line fix, 25 KB", _numbered(25_000), fix, fix.replace("300,", "301,")),
        Change("3-line change, 1 MiB", _numbered(1 << 20), *_three(9_000)),
        Change("3-line change, CRLF 25 KB", _numbered(25_000, crlf=True), *_three(200)),
    ]


@dataclass(slots=True)
class Tally:
    """Bytes a model generated (arguments) and read (answer text) over some calls."""

    generated: int = 0
    read: int = 0

    async def call(self, client: RawClient, tool: str, arguments: dict[str, object]) -> object:
        async with asyncio.timeout(CALL_TIMEOUT):
            text, structured = await client.call_tool_text(tool, arguments)
        self.generated += encoded(arguments)
        self.read += len(text.encode("utf-8"))
        return structured


async def _ours(client: RawClient, root: Path, change: Change) -> tuple[Tally, Tally, bytes]:
    """read limit 1 + replace edits; then a second change chained on the answer's sha256."""
    relative = "session.txt"
    (root / relative).write_bytes(change.data)
    first = Tally()
    page = await first.call(client, "read", {"path": relative, "limit": 1})
    assert isinstance(page, dict)
    edits = [{"old_text": change.old, "new_text": change.new}]
    arguments = {"path": relative, "expected_sha256": page["file_sha256"], "edits": edits}
    answer = await first.call(client, "replace", arguments)
    assert isinstance(answer, dict)
    after_first = (root / relative).read_bytes()
    second = Tally()
    back = [{"old_text": change.new, "new_text": change.old}]
    chained = {"path": relative, "expected_sha256": answer["sha256"], "edits": back}
    await second.call(client, "replace", chained)
    return first, second, after_first


async def _theirs(client: RawClient, root: Path, change: Change) -> tuple[Tally, bytes]:
    """One edit_file of the same text."""
    target = root / "session.txt"
    target.write_bytes(change.data)
    tally = Tally()
    edits = [{"oldText": change.old, "newText": change.new}]
    await tally.call(client, "edit_file", {"path": str(target), "edits": edits})
    return tally, target.read_bytes()


def _lost_cr(before: bytes, after: bytes) -> int:
    """Lines of a CRLF file that lost their CR."""
    return max(before.count(b"\r\n") - after.count(b"\r\n"), 0) if b"\r\n" in before else 0


async def session_figures(sides: tuple[Side, Side]) -> list[Figure]:
    """Bytes generated and read for each change, ours beside the peer's (exact, n=1)."""
    figures: list[Figure] = []
    async with AsyncExitStack() as stack:
        try:
            mine = await stack.enter_async_context(open_client(sides[0], "raw"))
        except Exception as error:  # noqa: BLE001 - reported as unavailable
            return [unavailable(SECTION, "session", pending_reason(error), "peer", PEER_NAME)]
        theirs: Client | None = None
        reason = ""
        try:
            theirs = await stack.enter_async_context(open_client(sides[1], "raw"))
        except Exception as error:  # noqa: BLE001 - the peer is optional
            reason = pending_reason(error)
        assert isinstance(mine, RawClient)
        for change in changes():
            first, second, after = await _ours(mine, sides[0].root, change)
            if not isinstance(theirs, RawClient):
                figures.append(
                    unavailable(SECTION, f"session {change.name}", reason, "peer", PEER_NAME)
                )
                continue
            peer_tally, peer_after = await _theirs(theirs, sides[1].root, change)
            figures += _session_figures(change, first, second, after, peer_tally, peer_after)
    return figures


def _session_figures(
    change: Change, first: Tally, second: Tally, after: bytes, peer: Tally, peer_after: bytes
) -> list[Figure]:
    def exact(value: int) -> Summary:
        return summarize([float(value)], "bytes")

    label = f"{PEER_NAME} edit_file"
    figures = [
        Figure(
            SECTION,
            f"bytes {what}: {change.name} (read limit 1 + edits)",
            exact(mine),
            "peer",
            label,
            exact(theirs),
            notes=("the peer's path is absolute",) if what == "generated" else (),
        )
        for what, mine, theirs in (
            ("generated", first.generated, peer.generated),
            ("read", first.read, peer.read),
        )
    ]
    figures.append(
        Figure(
            SECTION,
            f"bytes generated+read: {change.name}, next change (sha256 chained)",
            exact(second.generated + second.read),
            "peer",
            label,
            exact(peer.generated + peer.read),
        )
    )
    if b"\r\n" in change.data:
        figures.append(
            Figure(
                SECTION,
                f"lines that lost their CR: {change.name}",
                summarize([float(_lost_cr(change.data, after))], "lines"),
                "peer",
                label,
                summarize([float(_lost_cr(change.data, peer_after))], "lines"),
                ratio_applies=False,
            )
        )
    return figures


async def hint_figures(settings: Settings) -> list[Figure]:
    """In process: an edit not found in 4 MiB after 63 found (with the bounded hint search),
    beside the 64 edits all applied."""
    from spice.agent.tools.coding._edits import Edit, apply_edits  # noqa: PLC0415

    text = _numbered(4 << 20).decode()
    lines = text.splitlines(keepends=True)
    found = [Edit(lines[n * 100], lines[n * 100].replace("scale=2", "scale=3")) for n in range(64)]
    missing = [
        *found[:63],
        Edit("".join(lines[7000:7064]).replace("    ", " ").replace("=", " = "), ""),
    ]

    async def applied() -> None:
        apply_edits(text, len(text), found, 1 << 26)

    async def not_found() -> None:
        apply_edits(text, len(text), missing, 1 << 26)

    samples = await rotate((not_found, applied), settings.warmup, settings.repeats)
    return [
        Figure(
            SECTION,
            "edit_not_found with hint, 4 MiB, 64 edits",
            milliseconds(samples[0]),
            "floor",
            "the same 64 edits, all found",
            milliseconds(samples[1]),
        )
    ]


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
        (base / "session-ours").mkdir()
        (base / "session-peer").mkdir()
        session_sides = (ours(base / "session-ours"), peer(base / "session-peer"))
        figures += asyncio.run(session_figures(session_sides))
        figures += asyncio.run(hint_figures(settings))
        return figures
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main_of(run))
