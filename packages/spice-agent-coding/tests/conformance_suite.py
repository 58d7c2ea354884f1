"""The MCP conformance suite (``@modelcontextprotocol/conformance``) and its baseline.

``scripts/conformance/`` pins the suite and a Node it runs on (``package-lock.json``;
``make bootstrap`` runs ``npm ci`` there). The suite runs in *legs*: the same server
scenarios at one protocol choice each (``LEGS``). A scenario fails when one of its checks
ends ``FAILURE`` or ``WARNING`` (the rule of the suite's own ``--expected-failures``).

``baseline.toml`` beside the lock names, per leg, what does not apply to ``spice-coding``
and why: a key ``SCENARIO`` for a whole scenario (all its checks but ``ALWAYS_HELD``),
``SCENARIO:CHECK`` for one of its checks.
``judge`` holds a leg's results against its table: a failure the table does not name is
*unexpected*; an entry whose scenario or check now passes, or that the suite no longer
has, is *stale*. Either fails the test, so the baseline can neither hide a regression nor
outlive the gap it records.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

REPOSITORY: Final = Path(__file__).resolve().parents[3]
SUITE_DIRECTORY: Final = REPOSITORY / "scripts" / "conformance"
BASELINE: Final = SUITE_DIRECTORY / "baseline.toml"
SUITE_PACKAGE: Final = "@modelcontextprotocol/conformance"
SUITE_MINIMUM_NODE: Final = (22, 0)
"""The suite imports ``fs.globSync`` (Node 22) and its ``content-type`` wants ``node >= 22``."""

LEGS: Final[Mapping[str, tuple[str, ...]]] = {
    "default": (),
    "2026-07-28": ("--spec-version", "2026-07-28"),
}
"""Each leg's arguments after ``server --suite all``. ``default``: every server scenario at
the protocol it was written for (2025 scenarios over the 2025-11-25 handshake, the 2026
ones and the extensions over 2026-07-28's stateless requests). ``2026-07-28``: every
scenario that applies to 2026-07-28, over that protocol."""

FAILING_STATUSES: Final = frozenset({"FAILURE", "WARNING"})
ALWAYS_HELD: Final = frozenset({"wire-schema-valid"})
"""Checks no whole-scenario entry excepts: every message the server sends must be valid
against the protocol's schema, whether or not the scenario's feature applies to us."""
NO_RESULT: Final = "(no result)"
"""The failing "check" of a scenario that wrote no readable ``checks.json`` (it crashed,
or the run was stopped); only a whole-scenario entry can expect it."""

MAXIMUM_RESULT_BYTES: Final = 4 * 1024 * 1024
"""Largest ``checks.json`` read; a larger one counts as no result."""
MAXIMUM_LISTING_BYTES: Final = 256 * 1024
"""Largest ``list --server`` output accepted."""
LISTING_BOUND_SECONDS: Final = 60.0
"""How long ``list --server`` may take (it starts Node and prints names)."""
LEG_BOUND_SECONDS: Final = 600.0
"""How long one leg may run: about 5 s here against a server that answers at once, so this
is room for a loaded machine, well under ``SCENARIO_TIMEOUT_MS`` times the scenarios."""
SCENARIO_TIMEOUT_MS: Final = 30_000
"""The suite's own per-scenario bound (``--timeout``; its default)."""

_LISTED: Final = re.compile(r"^  - (\S+) \[[^\]]*\]$")
_KEY: Final = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9][A-Za-z0-9._/-]*)?$")
_RESULT_SUFFIX: Final = r"-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z"


class BaselineError(ValueError):
    """The baseline file is not a table of legs, each of ``key = "reason"``."""


@final
@dataclass(frozen=True, slots=True)
class Verdict:
    """One leg's results held against its baseline table."""

    unexpected: tuple[str, ...]
    """``SCENARIO:CHECK`` failures the baseline does not name."""
    stale: tuple[str, ...]
    """Baseline keys, each with why it is stale (``KEY (now passes)``)."""
    expected: tuple[str, ...]
    """Baseline keys whose failure happened, as recorded."""

    @property
    def clean(self) -> bool:
        return not self.unexpected and not self.stale


def load_baseline(path: Path = BASELINE) -> dict[str, dict[str, str]]:
    """The baseline's tables, one per leg of ``LEGS``; raises ``BaselineError``."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise BaselineError("the baseline is not valid TOML") from error
    if set(document) != set(LEGS):
        raise BaselineError(f"the baseline must have one table per leg: {sorted(LEGS)}")
    tables: dict[str, dict[str, str]] = {}
    for leg, table in document.items():
        if not isinstance(table, dict):
            raise BaselineError(f"leg {leg!r} is not a table")
        entries: dict[str, str] = {}
        for key, reason in table.items():
            if not _KEY.match(key):
                raise BaselineError(f"leg {leg!r}: {key!r} is not SCENARIO or SCENARIO:CHECK")
            if not isinstance(reason, str) or not reason.strip():
                raise BaselineError(f"leg {leg!r}: {key!r} needs a reason")
            entries[key] = reason
        wholes = {key for key in entries if ":" not in key}
        for key in entries:
            if ":" in key and key.partition(":")[0] in wholes:
                raise BaselineError(f"leg {leg!r}: {key!r} repeats its whole-scenario entry")
        tables[leg] = entries
    return tables


def failing_checks(checks: Sequence[tuple[str, str]] | None) -> frozenset[str]:
    """The ids of a scenario's checks that failed; ``NO_RESULT`` when it wrote none."""
    if checks is None:
        return frozenset({NO_RESULT})
    return frozenset(check for check, status in checks if status in FAILING_STATUSES)


def judge(
    results: Mapping[str, Sequence[tuple[str, str]] | None], baseline: Mapping[str, str]
) -> Verdict:
    """Hold one leg's results (scenario -> its checks' ``(id, status)``) against its table."""
    failing = {scenario: failing_checks(checks) for scenario, checks in results.items()}
    unexpected: list[str] = []
    stale: list[str] = []
    expected: list[str] = []
    for key in sorted(baseline):
        scenario, _, check = key.partition(":")
        if scenario not in failing:
            stale.append(f"{key} (the suite no longer has this scenario)")
        elif not check:
            if failing[scenario]:
                expected.append(key)
            else:
                stale.append(f"{key} (now passes)")
        elif check in failing[scenario]:
            expected.append(key)
        else:
            stale.append(f"{key} (now passes, or the scenario no longer has this check)")
    for scenario in sorted(failing):
        held = failing[scenario] & ALWAYS_HELD if scenario in baseline else failing[scenario]
        unexpected.extend(
            f"{scenario}:{check}" for check in sorted(held) if f"{scenario}:{check}" not in baseline
        )
    return Verdict(tuple(unexpected), tuple(stale), tuple(expected))


def parse_listing(text: str) -> tuple[str, ...]:
    """The server scenarios that ``conformance list --server`` printed, in its order."""
    names: list[str] = []
    for line in text.splitlines():
        found = _LISTED.match(line)
        if found is not None and found[1] not in names:
            names.append(found[1])
    return tuple(names)


def list_scenarios(node: str, entry: str, leg: str) -> tuple[str, ...]:
    """Every server scenario the pinned suite runs in ``leg`` (``--suite all`` selects them all)."""
    done = subprocess.run(
        [node, entry, "list", "--server", *LEGS[leg]],
        capture_output=True,
        timeout=LISTING_BOUND_SECONDS,
        check=False,
    )
    if done.returncode != 0 or len(done.stdout) > MAXIMUM_LISTING_BYTES:
        raise RuntimeError(f"conformance list failed for leg {leg} (exit {done.returncode})")
    return parse_listing(done.stdout.decode("utf-8", "replace"))


async def run_leg(
    node: str, entry: str, url: str, leg: str, directory: Path, bound: float = LEG_BOUND_SECONDS
) -> int:
    """Run every server scenario of ``leg`` against ``url``; the suite's exit code (0 or 1).

    Results go to ``directory`` (``-o``) and the suite's output to ``directory.log``. Past
    ``bound`` (``TimeoutError``) or on cancellation the suite is killed and collected.
    """
    command = [node, entry, "server", "--url", url, "--suite", "all", *LEGS[leg]]
    command += ["--timeout", str(SCENARIO_TIMEOUT_MS), "-o", str(directory)]
    with directory.with_name(directory.name + ".log").open("wb") as log:
        suite = await asyncio.create_subprocess_exec(
            *command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=directory.parent,
        )
        try:
            async with asyncio.timeout(bound):
                return await suite.wait()
        finally:
            if suite.returncode is None:
                suite.kill()
                await asyncio.shield(suite.wait())


def _checks_of(path: Path) -> list[tuple[str, str]] | None:
    """A ``checks.json``'s ``(id, status)`` pairs, or ``None`` if it is missing or malformed."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAXIMUM_RESULT_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAXIMUM_RESULT_BYTES:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    if not isinstance(document, list):
        return None
    pairs: list[tuple[str, str]] = []
    for check in document:
        if not isinstance(check, dict):
            return None
        check_id, status = check.get("id"), check.get("status")
        if not isinstance(check_id, str) or not isinstance(status, str):
            return None
        pairs.append((check_id, status))
    return pairs


def read_results(
    directory: Path, scenarios: Iterable[str]
) -> dict[str, list[tuple[str, str]] | None]:
    """Each scenario's checks from the suite's ``-o`` directory (``server-NAME-TIMESTAMP``).

    A scenario with no directory, or more than one, or an unreadable ``checks.json``, has
    ``None``; a directory that is no listed scenario's raises (the listing is incomplete).
    """
    names = tuple(scenarios)
    entries = sorted(path.name for path in directory.iterdir()) if directory.is_dir() else []
    owners: dict[str, list[str]] = {name: [] for name in names}
    for entry in entries:
        owner = [n for n in names if re.fullmatch(f"server-{re.escape(n)}{_RESULT_SUFFIX}", entry)]
        if len(owner) != 1:
            raise RuntimeError(f"the suite wrote a result no listed scenario owns: {entry}")
        owners[owner[0]].append(entry)
    return {
        name: _checks_of(directory / found[0] / "checks.json") if len(found) == 1 else None
        for name, found in owners.items()
    }


def describe(leg: str, verdict: Verdict) -> str:
    """What a reader needs to fix a leg: each unexpected failure and each stale entry."""
    lines = [f"leg {leg}:"]
    lines += [f"  unexpected failure (not in baseline.toml): {key}" for key in verdict.unexpected]
    lines += [f"  stale baseline entry: {key}" for key in verdict.stale]
    return "\n".join(lines)
