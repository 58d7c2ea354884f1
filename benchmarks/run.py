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
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

from _harness import (
    FULL,
    PEER_PACKAGE,
    QUICK,
    REPOSITORY,
    RESULTS,
    Figure,
    Settings,
    Summary,
    Target,
    cpu_count,
    number,
)

MODULES: Final = (
    "bench_inprocess",
    "bench_mcp",
    "bench_http",
    "bench_slow_clients",
    "bench_oauth",
    "bench_startup",
    "bench_exit",
    "bench_memory",
    "bench_scaling",
    "bench_edits",
    "bench_answers",
    "bench_pipelining",
    "bench_containment",
    "bench_protected",
    "bench_stage",
    "bench_reload",
    "bench_journal",
    "bench_orphans",
    "bench_seccomp",
    "bench_proxy",
    "bench_installs",
    "bench_windows",
)
"""The bench modules, in run order. Each has ``SECTION: str`` and ``run(Settings) ->
list[Figure]``; ``--only SECTION`` picks modules by their section. To add one, add its
name here (one line) and nothing else."""
DISTRIBUTIONS: Final = ("spice-agent-api", "spice-agent-tools-coding", "spice-agent-coding", "mcp")


def _modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in MODULES]


def _sections(modules: Sequence[ModuleType]) -> list[str]:
    return list(dict.fromkeys(str(module.SECTION) for module in modules))


def _run_module(module: ModuleType, settings: Settings) -> list[Figure]:
    figures = module.run(settings)
    if not isinstance(figures, list) or not all(isinstance(f, Figure) for f in figures):
        raise TypeError(f"{module.__name__}.run must answer a list of Figure")
    return figures


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


def targets_of(modules: Sequence[ModuleType]) -> list[Target]:
    """Every module's ``TARGETS`` (a module may have none)."""
    found: list[Target] = []
    for module in modules:
        for target in getattr(module, "TARGETS", ()):
            if not isinstance(target, Target):
                raise TypeError(f"{module.__name__}.TARGETS must hold Target values")
            found.append(target)
    return found


def target_rows(targets: Sequence[Target], figures: Sequence[Figure]) -> list[dict[str, object]]:
    """Each target beside the ratio this run measured for its figure."""
    by_name = {(figure.section, figure.name): figure for figure in figures}
    rows: list[dict[str, object]] = []
    for target in targets:
        figure = by_name.get((target.section, target.figure))
        if figure is None:
            continue
        ratio = figure.ratio
        rows.append(
            {
                "section": target.section,
                "figure": target.figure,
                "bound": target.bound(),
                "ratio": ratio,
                "met": target.met(ratio),
                "source": target.source,
            }
        )
    return rows


def _target_lines(rows: Sequence[dict[str, object]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "## Targets",
        "",
        "| section | figure | target (ratio) | measured | met | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ratio = row["ratio"]
        measured = f"{ratio:.2f}x" if isinstance(ratio, float) else "n/a"
        verdict = row["met"]
        met = "yes" if verdict is True else "**no**" if verdict is False else "n/a"
        lines.append(
            f"| {row['section']} | {row['figure']} | {row['bound']} | {measured} | {met} | "
            f"{row['source']} |"
        )
    return lines


def markdown(
    figures: Sequence[Figure],
    about: dict[str, object],
    seconds: float,
    targets: Sequence[dict[str, object]] = (),
) -> str:
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
    lines += _target_lines(targets)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected sections and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few repeats)")
    modules = _modules()
    sections = _sections(modules)
    parser.add_argument(
        "--only", action="append", choices=sections, help="run only this section (repeatable)"
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help="directory for latest.json and latest.md"
    )
    options = parser.parse_args(argv)
    settings = QUICK if options.quick else FULL
    selected = tuple(options.only) if options.only else tuple(sections)
    about = machine()
    about["quick"] = settings.quick
    figures: list[Figure] = []
    started = time.perf_counter()
    for module in modules:
        if module.SECTION not in selected:
            continue
        print(f"bench: {module.__name__} ({module.SECTION}) ...", file=sys.stderr, flush=True)
        module_start = time.perf_counter()
        figures += _run_module(module, settings)
        print(
            f"bench: {module.__name__} done in {time.perf_counter() - module_start:.1f} s",
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
    rows = target_rows(targets_of(modules), figures)
    document["targets"] = rows
    table = markdown(figures, about, seconds, rows)
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
