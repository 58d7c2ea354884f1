"""Shared pieces of the benchmark harness: settings, timing, statistics, figures.

Every figure is a pair measured side by side in one run: the subject (our code)
and its reference (a standard-library floor or the reference MCP server). The
two are sampled alternately, so drift on a shared machine lands on both. A
figure that cannot be measured is reported as unavailable with a reason,
never with a made-up number.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, final

KIB: Final = 1 << 10
MIB: Final = 1 << 20
GIB: Final = 1 << 30
TIB: Final = 1 << 40

BENCHMARKS: Final = Path(__file__).resolve().parent
REPOSITORY: Final = BENCHMARKS.parent
RESULTS: Final = BENCHMARKS / "results"
PEER_ENTRY: Final = (
    BENCHMARKS
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-filesystem"
    / "dist"
    / "index.js"
)
PEER_PACKAGE: Final = PEER_ENTRY.parent.parent / "package.json"

ReferenceKind = Literal["floor", "peer", "none"]


class Unavailable(Exception):
    """The subject or the reference cannot be measured in this run (stub, missing peer)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """Bounded repetition counts; ``--quick`` swaps in the small set."""

    quick: bool
    warmup: int
    repeats: int
    slow_repeats: int
    process_repeats: int
    memory_repeats: int
    mcp_batches: int
    mcp_batch_calls: int


FULL: Final = Settings(
    quick=False,
    warmup=5,
    repeats=60,
    slow_repeats=15,
    process_repeats=10,
    memory_repeats=3,
    mcp_batches=11,
    mcp_batch_calls=96,
)
"""The ``make bench`` set: a few minutes on 2 cores."""

QUICK: Final = Settings(
    quick=True,
    warmup=1,
    repeats=5,
    slow_repeats=3,
    process_repeats=3,
    memory_repeats=1,
    mcp_batches=2,
    mcp_batch_calls=8,
)
"""The ``--quick`` smoke set: every code path once or twice, numbers not worth quoting."""


@final
@dataclass(frozen=True, slots=True)
class Summary:
    """Median and spread of a sample of repeated measurements."""

    unit: str
    n: int
    median: float
    p10: float
    p90: float
    q1: float
    q3: float
    minimum: float
    maximum: float

    def as_json(self) -> dict[str, object]:
        """The summary as a JSON object."""
        return {
            "unit": self.unit,
            "n": self.n,
            "median": self.median,
            "p10": self.p10,
            "p90": self.p90,
            "q1": self.q1,
            "q3": self.q3,
            "min": self.minimum,
            "max": self.maximum,
        }


def _quantile(ordered: Sequence[float], fraction: float) -> float:
    # Linear interpolation between closest ranks (the "inclusive" method).
    if len(ordered) == 1:
        return ordered[0]
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples: Sequence[float], unit: str) -> Summary:
    """Summarize ``samples`` (at least one) in ``unit``."""
    if not samples:
        raise ValueError("a summary needs at least one sample")
    ordered = sorted(samples)
    return Summary(
        unit=unit,
        n=len(ordered),
        median=statistics.median(ordered),
        p10=_quantile(ordered, 0.10),
        p90=_quantile(ordered, 0.90),
        q1=_quantile(ordered, 0.25),
        q3=_quantile(ordered, 0.75),
        minimum=ordered[0],
        maximum=ordered[-1],
    )


@final
@dataclass(frozen=True, slots=True)
class Figure:
    """One reported figure: the subject beside its floor or peer."""

    section: str
    name: str
    subject: Summary | None
    reference_kind: ReferenceKind
    reference_name: str
    reference: Summary | None
    higher_is_better: bool = False
    unavailable: str | None = None
    ratio_applies: bool = True
    notes: tuple[str, ...] = field(default=())

    @property
    def ratio(self) -> float | None:
        """Subject median over reference median, when both exist."""
        if not self.ratio_applies or self.subject is None or self.reference is None:
            return None
        if self.reference.median == 0:
            return None
        return self.subject.median / self.reference.median

    def as_json(self) -> dict[str, object]:
        """The figure as a JSON object."""
        return {
            "section": self.section,
            "name": self.name,
            "subject": None if self.subject is None else self.subject.as_json(),
            "reference_kind": self.reference_kind,
            "reference_name": self.reference_name,
            "reference": None if self.reference is None else self.reference.as_json(),
            "ratio": self.ratio,
            "ratio_meaning": (
                "subject/reference; higher is better"
                if self.higher_is_better
                else "subject/reference; lower is better"
            ),
            "unavailable": self.unavailable,
            "notes": list(self.notes),
        }


@final
@dataclass(frozen=True, slots=True)
class Target:
    """A bound on one figure's ratio (from an issue), checked and shown after every run.

    A bench module lists its own as ``TARGETS``; ``run.py`` collects them.
    """

    section: str
    figure: str
    most: float | None = None
    least: float | None = None
    source: str = ""

    def bound(self) -> str:
        """``<= 1.30x`` or ``>= 0.80x``."""
        if self.most is not None:
            return f"<= {self.most:.2f}x"
        return f">= {self.least:.2f}x" if self.least is not None else "-"

    def met(self, ratio: float | None) -> bool | None:
        """Whether ``ratio`` keeps the bound; ``None`` when there is no ratio."""
        if ratio is None:
            return None
        if self.most is not None and ratio > self.most:
            return False
        return not (self.least is not None and ratio < self.least)


def unavailable(
    section: str,
    name: str,
    reason: str,
    reference_kind: ReferenceKind = "floor",
    reference_name: str = "",
    reference: Summary | None = None,
) -> Figure:
    """A figure whose subject could not be measured in this run."""
    return Figure(
        section=section,
        name=name,
        subject=None,
        reference_kind=reference_kind,
        reference_name=reference_name,
        reference=reference,
        unavailable=reason,
    )


def pending_reason(error: BaseException) -> str:
    """A fixed reason for an error that stopped a measurement."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, Unavailable):
        return error.reason
    if isinstance(error, NotImplementedError):
        return "not implemented yet (stub raises NotImplementedError)"
    return f"failed: {type(error).__name__}"


Probe = Callable[[], Awaitable[object]]


async def alternate(
    subject: Probe | None, reference: Probe | None, warmup: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Time ``subject`` and ``reference`` alternately, in seconds, after ``warmup`` rounds."""
    samples = await rotate((subject, reference), warmup, repeats)
    return samples[0], samples[1]


async def rotate(probes: Sequence[Probe | None], warmup: int, repeats: int) -> list[list[float]]:
    """Time each present probe once per round, in seconds, rotating which goes first."""
    present = [(index, probe) for index, probe in enumerate(probes) if probe is not None]
    for _ in range(warmup):
        for _, warm in present:
            await warm()
    samples: list[list[float]] = [[] for _ in probes]
    clock = time.perf_counter_ns
    for round_index in range(repeats):
        shift = round_index % len(present) if present else 0
        for which, probe in present[shift:] + present[:shift]:
            start = clock()
            await probe()
            samples[which].append((clock() - start) / 1e9)
    return samples


async def side_by_side(
    section: str,
    name: str,
    build: Callable[[], Probe],
    floor: Probe,
    floor_name: str,
    warmup: int,
    repeats: int,
    unit: Callable[[Sequence[float]], Summary],
    variant: tuple[str, Probe] | None = None,
) -> Figure:
    """Our probe (``build()``) beside ``floor``; the floor alone when ours cannot run.

    ``variant`` is a second floor (e.g. the floor run through ``asyncio.to_thread``)
    measured in the same rotation and reported in the notes.
    """
    figures = await beside_floors(
        section, name, build, floor, floor_name, warmup, repeats, unit, variant
    )
    return figures[0]


async def beside_floors(
    section: str,
    name: str,
    build: Callable[[], Probe],
    floor: Probe,
    floor_name: str,
    warmup: int,
    repeats: int,
    unit: Callable[[Sequence[float]], Summary],
    variant: tuple[str, Probe] | None = None,
) -> list[Figure]:
    """As ``side_by_side``, and with ``variant`` also its own figure (``NAME vs VARIANT``).

    The variant's figure comes from the same rotation, so its ratio is as fair as the
    first one's.
    """
    extra = [variant[1]] if variant is not None else []
    try:
        subject = build()
        samples = await rotate([subject, floor, *extra], warmup, repeats)
        mine = unit(samples[0])
        if variant is None:
            return [Figure(section, name, mine, "floor", floor_name, unit(samples[1]))]
        other = unit(samples[2])
        note = (
            f"{variant[0]}: {number(other.median)} {other.unit}, "
            f"ours/that {mine.median / other.median:.2f}x"
        )
        return [
            Figure(section, name, mine, "floor", floor_name, unit(samples[1]), notes=(note,)),
            Figure(section, f"{name} vs {variant[0]}", mine, "floor", variant[0], other),
        ]
    except Exception as error:  # noqa: BLE001 - a stub or failure is reported, not raised
        reason = pending_reason(error)
    _, theirs = await alternate(None, floor, warmup, repeats)
    return [unavailable(section, name, reason, "floor", floor_name, unit(theirs))]


def size_label(size: int) -> str:
    """``4 KiB``, ``1 MiB``, ``1 GiB``, ``1 TiB``."""
    for unit, name in ((TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def describe(figure: Figure) -> str:
    """One line: name, both medians, the ratio (or why there is none)."""

    def cell(summary: Summary | None) -> str:
        return "-" if summary is None else f"{number(summary.median)} {summary.unit}"

    ratio = figure.ratio
    verdict = "" if ratio is None else f"  {ratio:.2f}x"
    missing = f"  unavailable: {figure.unavailable}" if figure.unavailable else ""
    return (
        f"{figure.section} | {figure.name} | {cell(figure.subject)} | "
        f"{cell(figure.reference)}{verdict}{missing}"
    )


def main_of(run: Callable[[Settings], list[Figure]], argv: Sequence[str] | None = None) -> int:
    """Run one bench module alone: ``python benchmarks/bench_X.py [--quick]``; print its lines."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    for figure in run(QUICK if "--quick" in arguments else FULL):
        print(describe(figure), flush=True)
    return 0


def number(value: float) -> str:
    """A figure with three or so significant digits, never in exponent form."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if magnitude >= 1 else f"{value:.3f}"


def microseconds(samples: Sequence[float]) -> Summary:
    """Seconds to a summary in microseconds."""
    return summarize([s * 1e6 for s in samples], "us")


def milliseconds(samples: Sequence[float]) -> Summary:
    """Seconds to a summary in milliseconds."""
    return summarize([s * 1e3 for s in samples], "ms")


def spice_coding() -> Path:
    """The ``spice-coding`` console script of the interpreter running the harness."""
    return Path(sys.executable).parent / "spice-coding"


def peak_rss_kib() -> int:
    """This process's peak resident set size in KiB (VmHWM, or ru_maxrss off Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource  # noqa: PLC0415 - only off Linux

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def write_text(path: Path, size: int) -> bytes:
    """Write ``size`` bytes of ASCII text lines to ``path`` and return them."""
    line = b"the quick brown fox jumps over the lazy dog 0123456789 spice\n"
    data = (line * (size // len(line) + 1))[:size]
    path.write_bytes(data)
    return data


def sparse_file(path: Path, size: int, page: bytes) -> None:
    """Make ``path`` a sparse file of ``size`` bytes whose last page is ``page``."""
    with open(path, "wb") as handle:
        handle.truncate(size)
        handle.seek(size - len(page))
        handle.write(page)


def dumps(value: object) -> str:
    """Compact JSON text."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
