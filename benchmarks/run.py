"""Run every benchmark; write ``results/latest.json`` and ``results/latest.md``; print the table.

Usage: ``python benchmarks/run.py [--quick] [--only SECTION ...] [--output DIR]``.
``make bench`` installs the peer (``npm ci --prefix benchmarks``) and runs this.
Each figure is a median with its spread (p10..p90) over repeated runs after a
warm-up, beside a standard-library floor or the reference MCP server measured in
the same run. A figure that cannot be measured says "unavailable" and why.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import bench_inprocess
import bench_mcp
import bench_memory
import bench_scaling
import bench_startup
from _harness import (
    FULL,
    PEER_PACKAGE,
    QUICK,
    REPOSITORY,
    RESULTS,
    Figure,
    Settings,
    Summary,
    cpu_count,
    number,
)

SECTIONS: Final = ("in-process", "mcp", "startup", "memory", "scaling")
DISTRIBUTIONS: Final = ("spice-agent-api", "spice-agent-tools-coding", "spice-agent-coding", "mcp")


def _section_runners() -> dict[str, Callable[[Settings], list[Figure]]]:
    def startup(settings: Settings) -> list[Figure]:
        return bench_startup.run(settings) + bench_mcp.startup(settings)

    return {
        "in-process": bench_inprocess.run,
        "mcp": bench_mcp.run,
        "startup": startup,
        "memory": bench_memory.run,
        "scaling": bench_scaling.run,
    }


def _command_output(argv: Sequence[str]) -> str | None:
    try:
        completed = subprocess.run(
            list(argv), capture_output=True, timeout=30, check=False, cwd=REPOSITORY
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if completed.returncode != 0:
        return None
    return completed.stdout.decode("utf-8", "replace").strip() or None


def machine() -> dict[str, object]:
    """What the numbers were measured on."""
    versions: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        versions["@modelcontextprotocol/server-filesystem"] = str(
            json.loads(PEER_PACKAGE.read_text(encoding="utf-8"))["version"]
        )
    except (OSError, ValueError, KeyError):
        versions["@modelcontextprotocol/server-filesystem"] = None
    node = shutil.which("node")
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model() or platform.processor(),
        "cpu_count": cpu_count(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "node": _command_output([node, "--version"]) if node else None,
        "versions": versions,
        "commit": _command_output(["git", "rev-parse", "--short", "HEAD"]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average_at_start": _load(),
    }


def _load() -> list[float]:
    """The 1, 5 and 15 minute load averages: other work on the machine skews absolutes."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _cell(summary: Summary | None) -> str:
    if summary is None:
        return "unavailable"
    return (
        f"{number(summary.median)} {summary.unit} "
        f"({number(summary.p10)}..{number(summary.p90)}, n={summary.n})"
    )


def _ratio(figure: Figure) -> str:
    ratio = figure.ratio
    if ratio is None:
        return "n/a" if figure.subject is not None and figure.reference is not None else "-"
    arrow = "higher is better" if figure.higher_is_better else "lower is better"
    return f"{ratio:.2f}x ({arrow})"


def markdown(figures: Sequence[Figure], about: dict[str, object], seconds: float) -> str:
    """The table of every figure, with the machine and the date."""
    versions = about.get("versions")
    peer = (
        versions.get("@modelcontextprotocol/server-filesystem")
        if isinstance(versions, dict)
        else None
    )
    quick = " (--quick: smoke numbers only, not worth quoting)" if about["quick"] else ""
    lines = [
        "# Benchmarks",
        "",
        (
            f"Measured {about['date']} on {about['platform']}, {about['processor']}, "
            f"{about['cpu_count']} CPUs, Python {about['python']}, node {about['node']}, "
            f"peer server-filesystem {peer}, commit {about['commit']}; "
            f"the run took {seconds:.0f} s{quick}; load average at start "
            f"{about['load_average_at_start']}, at end {about['load_average_at_end']}."
        ),
        "",
        (
            "Each cell: median (p10..p90, n repeated runs after a warm-up). Ratio = ours / "
            "reference, measured side by side in the same run."
        ),
        "",
        "| section | figure | ours | reference | kind | ratio | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for figure in figures:
        notes = list(figure.notes)
        if figure.unavailable:
            notes.insert(0, f"unavailable: {figure.unavailable}")
        reference = _cell(figure.reference)
        lines.append(
            f"| {figure.section} | {figure.name} | {_cell(figure.subject)} | {reference} | "
            f"{figure.reference_kind}: {figure.reference_name} | {_ratio(figure)} | "
            f"{'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected sections and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few repeats)")
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="run only this section (repeatable)"
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help="directory for latest.json and latest.md"
    )
    options = parser.parse_args(argv)
    settings = QUICK if options.quick else FULL
    selected = tuple(options.only) if options.only else SECTIONS
    runners = _section_runners()
    about = machine()
    about["quick"] = settings.quick
    figures: list[Figure] = []
    started = time.perf_counter()
    for section in selected:
        print(f"bench: {section} ...", file=sys.stderr, flush=True)
        section_start = time.perf_counter()
        figures += runners[section](settings)
        print(
            f"bench: {section} done in {time.perf_counter() - section_start:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    seconds = time.perf_counter() - started
    about["load_average_at_end"] = _load()
    document = {
        "machine": about,
        "settings": {
            "quick": settings.quick,
            "warmup": settings.warmup,
            "repeats": settings.repeats,
            "slow_repeats": settings.slow_repeats,
            "process_repeats": settings.process_repeats,
            "memory_repeats": settings.memory_repeats,
            "mcp_batches": settings.mcp_batches,
            "mcp_batch_calls": settings.mcp_batch_calls,
        },
        "sections": list(selected),
        "seconds": round(seconds, 1),
        "figures": [figure.as_json() for figure in figures],
    }
    table = markdown(figures, about, seconds)
    output: Path = options.output
    output.mkdir(parents=True, exist_ok=True)
    (output / "latest.json").write_text(
        json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (output / "latest.md").write_text(table, encoding="utf-8")
    print(table)
    missing = sum(1 for figure in figures if figure.unavailable)
    if missing:
        print(f"bench: {missing} figure(s) unavailable (see the notes column)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
