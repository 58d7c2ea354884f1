"""Resource hostility: fork loops, pipe-closing children, stderr floods, a 100-way mix.

Each test checks, afterwards, that no process of ours is alive (found by a unique marker
in the command line), that no ``.spice-replace-*.tmp`` remains, and, for the flood and
the mix, that the peak RSS growth of a child process running the workload stayed bounded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from adv_support import (
    Route,
    decoded_content,
    dispatcher_route,
    processes_with_marker,
    temporary_files,
    wait_gone,
)

from spice.agent.tools.coding import Config

FORK_CHILDREN: Final = 40
"""Sleepers one fork-loop call starts (bounded by the test, not by the tool)."""
MIX_CALLS: Final = 100
FLOOD_BYTES: Final = 64 << 20
"""Bytes the stderr-only flood writes."""
PEAK_GROWTH_BOUND: Final = 96 << 20
"""Largest peak-RSS growth accepted for the flood or the mix (the capture bound is 256 KiB)."""


def marker_seconds() -> str:
    """A sleep duration unique to this test (it doubles as the command-line marker)."""
    return f"{300 + secrets.randbelow(1000)}.{secrets.randbelow(10**6):06d}"


async def test_a_fork_loop_under_a_timeout_leaves_no_process(tmp_path: Path) -> None:
    """sh forks many sleepers, then sleeps; the timeout stops all of them."""
    marker = marker_seconds()
    loop = f"i=0; while [ $i -lt {FORK_CHILDREN} ]; do sleep {marker} & i=$((i+1)); done"
    script = f"{loop}; sleep {marker}"
    async with dispatcher_route(Config(tmp_path, command_timeout=30)) as route:
        answer = await route("shell", {"argv": ["sh", "-c", script], "timeout_seconds": 1})
    assert "timed_out" == answer.code
    assert [] == wait_gone(processes_with_marker(marker))
    assert [] == processes_with_marker(marker)


async def test_a_child_that_closes_its_pipes_and_lingers_is_stopped(tmp_path: Path) -> None:
    """A child that closes stdout and stderr and keeps running ends at the timeout."""
    marker = marker_seconds()
    script = f"exec >&- 2>&-; sleep {marker}"
    async with dispatcher_route(Config(tmp_path, command_timeout=30)) as route:
        answer = await route("shell", {"argv": ["sh", "-c", script], "timeout_seconds": 1})
    assert "timed_out" == answer.code
    assert [] == wait_gone(processes_with_marker(marker))


async def test_a_background_child_without_pipes_does_not_outlive_the_call(tmp_path: Path) -> None:
    """The child exits at once, leaving a pipe-less sleeper in its group: the join ends it."""
    marker = marker_seconds()
    script = f"sleep {marker} >/dev/null 2>&1 </dev/null & echo started"
    async with dispatcher_route(Config(tmp_path, command_timeout=30)) as route:
        answer = await route("shell", {"argv": ["sh", "-c", script]})
    assert "ok" == answer.code
    assert b"started\n" == decoded_content(answer.content, "stdout")
    assert [] == wait_gone(processes_with_marker(marker))


FLOOD_CHILD: Final = """
import asyncio, json, resource, sys
from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read, new_replace, new_shell
root, calls = sys.argv[1], json.loads(sys.argv[2])
async def main():
    config = Config(root, command_timeout=60)
    shell, cleanup = new_shell(config, PosixResolver(), PosixLauncher())
    dispatcher = Dispatcher([new_read(config), new_replace(config), shell])
    warm = Call("warm", "shell", json.dumps({"argv": ["true"]}))
    await dispatcher.dispatch(warm)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = await asyncio.gather(*(
        dispatcher.dispatch(Call(f"c{i}", name, json.dumps(arguments)))
        for i, (name, arguments) in enumerate(calls)))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    await cleanup()
    print(json.dumps({"growth": (after - before) * 1024,
                      "contents": [json.loads(r.content) for r in results]}))
asyncio.run(main())
"""


def run_workload(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Run ``calls`` concurrently in a child process; its peak RSS growth and the answers."""
    completed = subprocess.run(
        [sys.executable, "-c", FLOOD_CHILD, str(root), json.dumps(calls)],
        capture_output=True,
        timeout=180,
        check=True,
    )
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def test_a_child_flooding_stderr_only_keeps_memory_and_capture_bounded(tmp_path: Path) -> None:
    """64 MiB on stderr alone: counted exactly, captured within the bound, RSS bounded."""
    script = f"head -c {FLOOD_BYTES} /dev/zero | tr '\\0' e >&2"
    report = run_workload(tmp_path, [("shell", {"argv": ["sh", "-c", script]})])
    (content,) = report["contents"]
    assert (True, FLOOD_BYTES, 0) == (
        content["ok"],
        content["stderr_bytes"],
        content["stdout_bytes"],
    )
    assert content["output_truncated"]
    assert FLOOD_BYTES == content["stderr_omitted_bytes"] + len(content["stderr"])
    assert report["growth"] < PEAK_GROWTH_BOUND


def _mix(marker: str) -> list[tuple[str, dict[str, Any]]]:
    shared = hashlib.sha256(b"shared 0\n").hexdigest()
    calls: list[tuple[str, dict[str, Any]]] = []
    for number in range(MIX_CALLS):
        kind = number % 4
        if kind == 0:
            calls.append(("read", {"path": "shared.txt"}))
        elif kind == 1:
            calls.append(
                (
                    "replace",
                    {
                        "path": "shared.txt",
                        "content": f"shared {number}\n",
                        "expected_sha256": shared,
                    },
                )
            )
        elif kind == 2:
            calls.append(("replace", {"path": f"new/{number}.txt", "content": "x", "create": True}))
        else:
            script = f"echo {number}; sleep 0.{number % 7} ; : {marker}"
            calls.append(("shell", {"argv": ["sh", "-c", script]}))
    return calls


def test_a_hundred_concurrent_calls_of_all_three_tools_settle_cleanly(tmp_path: Path) -> None:
    """100 mixed calls on one instance: exactly one replace wins, nothing is left behind."""
    marker = f"adv-mix-{secrets.token_hex(6)}"
    (tmp_path / "shared.txt").write_bytes(b"shared 0\n")
    report = run_workload(tmp_path, _mix(marker))
    contents = report["contents"]
    assert MIX_CALLS == len(contents)
    replaced = [c for i, c in enumerate(contents) if i % 4 == 1 and c["ok"]]
    stale = [c for i, c in enumerate(contents) if i % 4 == 1 and c.get("code") == "stale"]
    assert (1, MIX_CALLS // 4 - 1) == (len(replaced), len(stale))
    assert all(c["ok"] for i, c in enumerate(contents) if i % 4 in {0, 2, 3})
    assert MIX_CALLS // 4 == len(list((tmp_path / "new").iterdir()))
    assert [] == temporary_files(tmp_path)
    assert [] == wait_gone(processes_with_marker(marker))
    assert report["growth"] < PEAK_GROWTH_BOUND


async def _route_mix(route: Route, marker: str) -> None:
    # return_exceptions=True: a cancelled gather completes only once every call has
    # settled. Without it, gather completes at the first cancelled child while the others
    # are still cleaning up (a replace removing its temporary file), and the check below
    # would race them.
    await asyncio.gather(
        *(route(name, args) for name, args in _mix(marker)), return_exceptions=True
    )


async def test_cancelling_a_hundred_way_mix_leaves_no_process_and_no_temporary(
    tmp_path: Path,
) -> None:
    """Cancel the whole mix mid-flight: every process is gone and no temporary remains."""
    marker = f"adv-cancel-{secrets.token_hex(6)}"
    (tmp_path / "shared.txt").write_bytes(b"shared 0\n")
    async with dispatcher_route(Config(tmp_path, command_timeout=30)) as route:
        task = asyncio.ensure_future(_route_mix(route, marker))
        await asyncio.sleep(0)  # let the calls start; the cancel lands wherever they are
        for _ in range(20):
            await asyncio.sleep(0)
        task.cancel()
        done, _pending = await asyncio.wait([task], timeout=30)
        assert {task} == done
        assert task.cancelled()
    assert [] == temporary_files(tmp_path)
    assert [] == wait_gone(processes_with_marker(marker))
