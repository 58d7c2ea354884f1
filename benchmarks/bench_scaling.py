"""Section 5: how ``read`` cost grows with file size and ``shell`` cost with output size.

``read`` always asks for the last 4 KiB page, of a 1 MiB file and of sparse
64 MiB, 1 GiB and 1 TiB files: the cost must stay flat. ``shell`` runs ``cat`` of
a text file of 1 KiB .. 64 MiB: our capture keeps a bounded head and tail, the
floor drains and discards. Each point is beside its stdlib floor on the same file,
and notes its growth over the smallest point.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Final

from _floors import floor_read
from _harness import (
    GIB,
    KIB,
    MIB,
    TIB,
    Figure,
    Probe,
    Settings,
    Summary,
    microseconds,
    milliseconds,
    side_by_side,
    size_label,
    sparse_file,
    write_text,
)
from bench_inprocess import (
    SHELL_FLOOR,
    Workbench,
    content_of,
    floor_probe,
    shell_probe,
)

SECTION: Final = "scaling"
PAGE: Final = 4 * KIB
READ_FILE_SIZES: Final = (MIB, 64 * MIB, GIB, TIB)
SHELL_OUTPUT_SIZES: Final = (KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB)
QUICK_SHELL_OUTPUT_SIZES: Final = (KIB, MIB, 16 * MIB)


def _growth(figures: list[Figure]) -> list[Figure]:
    """Add to each figure's notes its median over the first available point's."""
    base: Summary | None = next((f.subject for f in figures if f.subject is not None), None)
    floor_base: Summary | None = next(
        (f.reference for f in figures if f.reference is not None), None
    )
    grown: list[Figure] = []
    for figure in figures:
        notes = list(figure.notes)
        if base is not None and figure.subject is not None:
            notes.append(f"ours x{figure.subject.median / base.median:.2f} of the smallest")
        if floor_base is not None and figure.reference is not None:
            notes.append(
                f"floor x{figure.reference.median / floor_base.median:.2f} of the smallest"
            )
        grown.append(
            Figure(
                figure.section,
                figure.name,
                figure.subject,
                figure.reference_kind,
                figure.reference_name,
                figure.reference,
                unavailable=figure.unavailable,
                notes=tuple(notes),
            )
        )
    return grown


async def read_scaling(bench: Workbench, settings: Settings) -> list[Figure]:
    """The last 4 KiB page of ever larger (sparse) files."""
    figures: list[Figure] = []
    page = write_text(bench.root / "page.txt", PAGE)
    for size in READ_FILE_SIZES:
        relative = f"scale-{size}.bin"
        if size <= MIB:
            write_text(bench.root / relative, size)
        else:
            sparse_file(bench.root / relative, size, page)
        offset = size - PAGE
        name = f"read last 4 KiB page of a {size_label(size)} file"
        if size > MIB:
            name += " (sparse)"

        def build(rel: str = relative, at: int = offset) -> Probe:
            dispatcher = bench.dispatcher(("read",))

            async def ours() -> None:
                arguments = {"path": rel, "offset": at, "limit": PAGE}
                result = await dispatcher.dispatch(bench.calls.call("read", arguments))
                if result.is_error:
                    content_of(result)

            return ours

        async def floor(rel: str = relative, at: int = offset) -> None:
            floor_read(bench.root, rel, at, PAGE)

        figures.append(
            await side_by_side(
                SECTION,
                name,
                build,
                floor,
                "open+pread page+json.dumps",
                settings.warmup,
                settings.repeats,
                microseconds,
            )
        )
    return _growth(figures)


async def shell_scaling(bench: Workbench, settings: Settings) -> list[Figure]:
    """``cat`` of ever larger text files."""
    figures: list[Figure] = []
    sizes = QUICK_SHELL_OUTPUT_SIZES if settings.quick else SHELL_OUTPUT_SIZES
    for size in sizes:
        relative = f"output-{size}.txt"
        write_text(bench.root / relative, size)
        argv = ["cat", relative]
        try:
            figures.append(
                await side_by_side(
                    SECTION,
                    f"shell writing {size_label(size)}",
                    shell_probe(bench, argv),
                    floor_probe(bench, argv),
                    SHELL_FLOOR,
                    settings.warmup,
                    settings.process_repeats,
                    milliseconds,
                )
            )
        finally:
            (bench.root / relative).unlink()
    return _growth(figures)


async def _all(bench: Workbench, settings: Settings) -> list[Figure]:
    try:
        figures = await read_scaling(bench, settings)
        figures += await shell_scaling(bench, settings)
    finally:
        await bench.close()
    return figures


def run(settings: Settings) -> list[Figure]:
    """Every figure of section 5."""
    root = Path(tempfile.mkdtemp(prefix="spice-bench-scale-")).resolve()
    try:
        return asyncio.run(_all(Workbench(root), settings))
    finally:
        shutil.rmtree(root, ignore_errors=True)
