"""Section "answers": the bytes a client reads for one 256 KiB page at the worst escaping.

A ``read`` of a 256 KiB page answers one JSON-RPC line that carries the page twice (the
text block holds the answer's JSON text, escaped again as a JSON string; the structured
content holds it once). Its bytes are what a client must buffer: the Claude Agent SDK
reads at most 1 MiB a line by default (contract 11.3). Four pages, each 256 KiB of one
kind of byte: double quotes, backslashes, control bytes (``\\x01``) and two-byte
characters (``é``). Beside ours, the reference server's ``read_text_file`` of the same
file (it has no page bound: the whole file). Exact (n=1): the line's bytes, with the page
bytes the answer carried in the notes.

Before contract 11.3 (``7fd97ae``), ours answered 1,573,575 bytes for the page of quotes,
1,573,585 for backslashes (past a 1 MiB line: the Claude Agent SDK failed with
``CLIJSONDecodeError``), 699,783 for control bytes (then base64) and 525,025 for ``é``.
Round 4 shortened a page until Claude Code's line to the SDK (three copies) fit. Round 5
(contract 12.4) follows the seed: a page whose escaped text would pass the payload bound is
base64, whole, and the MCP layer shortens only the text block beside the structured content
(which holds the whole page), so the worst pages' lines are just under 1 MiB.

Run alone: ``uv run --locked --no-sync python benchmarks/bench_answers.py``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Final

from _clients import PEER_NAME, RawClient, Side, open_client, ours, peer
from _harness import KIB, Figure, Settings, Summary, main_of, pending_reason, summarize

SECTION: Final = "answers"
PAGE_BYTES: Final = 256 * KIB
PAGES: Final = (
    ("quotes", b'"'),
    ("backslashes", b"\\"),
    ("control bytes", b"\x01"),
    ("two-byte characters", "é".encode()),
)
"""Each worst case: a name and the unit repeated to ``PAGE_BYTES``."""


def _exact(value: int) -> Summary:
    return summarize([float(value)], "bytes")


async def _line(side: Side, relative: str) -> tuple[int, object]:
    """The answer line's bytes for one read of ``relative``, and its structured content."""
    async with open_client(side, "raw") as client:
        assert isinstance(client, RawClient)
        _text, structured = await client.call_tool_text(
            side.read_tool, side.read_arguments(relative)
        )
        return client.last_line_bytes, structured


async def _figures(root: Path) -> list[Figure]:
    figures: list[Figure] = []
    for name, unit in PAGES:
        relative = f"{name.replace(' ', '-')}.txt"
        (root / relative).write_bytes(unit * (PAGE_BYTES // len(unit)))
        ours_bytes, structured = await _line(ours(root), relative)
        carried = structured.get("bytes") if isinstance(structured, dict) else None
        note = f"ours carried {carried} bytes of the page" if isinstance(carried, int) else ""
        try:
            peer_bytes, _ = await _line(peer(root), relative)
            reference: Summary | None = _exact(peer_bytes)
        except Exception as error:  # noqa: BLE001 - a peer that cannot run is reported
            reference = None
            note += f"; the peer is unavailable: {pending_reason(error)}"
        figures.append(
            Figure(
                SECTION,
                f"answer line, 256 KiB page of {name}",
                _exact(ours_bytes),
                "peer",
                f"{PEER_NAME} read_text_file",
                reference,
                notes=(note,) if note else (),
            )
        )
    return figures


def run(settings: Settings) -> list[Figure]:
    """The four worst-case pages, over MCP with the raw client (exact, n=1)."""
    del settings  # exact figures: no repeats
    with tempfile.TemporaryDirectory(prefix="spice-bench-answers-") as directory:
        return asyncio.run(_figures(Path(directory)))


if __name__ == "__main__":
    raise SystemExit(main_of(run))
