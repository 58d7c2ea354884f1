"""Session guard: the test run fails if any test leaked a process; a Wine workaround.

At session start this pytest process makes itself a child subreaper (Linux
``PR_SET_CHILD_SUBREAPER``), so every orphan of every process a test starts (a
grandchild left behind by a killed group, a descendant that called ``setsid``, a
double fork into a new session) is reparented here instead of to init: walking the
parent chains in ``/proc`` then finds all of them. Processes in a process group led by
one of our descendants are counted too (for platforms or sandboxes without the
subreaper). Zombies are collected, not counted: they run nothing and hold nothing.

At session end, after a bounded wait for stragglers (processes that were sent SIGKILL
and are still being torn down), anything new and alive fails the run; the leaked
processes are then killed so they do not outlive it.

Under Wine (``make test-windows``) every event loop the tests make waits at most
``WINE_POLL_CAP_SECONDS`` for a completion before it looks at its ready queue again:
Wine 8 can lose the wake-up ``call_soon_threadsafe`` posts, and a thread's result then
waits forever (seen once: a ``read`` in ``asyncio.run``, its worker idle, the loop in
``GetQueuedCompletionStatus`` with no timeout). Real Windows runs the stock loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Final

import pytest

pytest_plugins = ("platform_skips",)
"""Which tests are POSIX-only, skipped on Windows with their reason (one list)."""

STRAGGLER_BOUND_SECONDS: Final = float(os.environ.get("SPICE_LEAK_BOUND_SECONDS", "10"))
"""The bounded wait for stragglers; the guard's own test shortens it through the environment."""
_POLL_SECONDS: Final = 0.05
WINE_POLL_CAP_SECONDS: Final = 0.1
"""Under Wine, the longest one wait of the Proactor: a lost wake-up costs at most this."""
_PR_SET_CHILD_SUBREAPER: Final = 36
_PROC: Final = "/proc"


def _under_wine() -> bool:
    """Whether this is Windows CPython under Wine (its ntdll exports ``wine_get_version``)."""
    if sys.platform != "win32":
        return False
    try:
        return hasattr(getattr(ctypes, "WinDLL")("ntdll"), "wine_get_version")  # noqa: B009
    except OSError:
        return False


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--reverse-order``: run the collected tests last to first (contract 12.5: the suite
    passes in reverse order too; ``make test-reverse``)."""
    parser.addoption(
        "--reverse-order",
        action="store_true",
        default=False,
        help="run the collected tests in reverse order",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reverse the order of the collected tests when ``--reverse-order`` is given."""
    if config.getoption("--reverse-order"):
        items.reverse()


def pytest_configure(config: pytest.Config) -> None:
    """Under Wine, every new event loop is a Proactor whose waits are capped."""
    del config
    if sys.platform == "win32" and _under_wine():
        asyncio.set_event_loop_policy(_CappedPolicy())


if sys.platform == "win32":

    class _CappedProactor(asyncio.IocpProactor):
        def select(self, timeout: float | None = None) -> list[asyncio.Future[object]]:
            cap = WINE_POLL_CAP_SECONDS
            return super().select(cap if timeout is None else min(timeout, cap))

    class _CappedPolicy(asyncio.WindowsProactorEventLoopPolicy):
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            return asyncio.ProactorEventLoop(_CappedProactor())


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


# pid -> (ppid, pgid, state, start time in clock ticks, command name)
_Table = dict[int, tuple[int, int, str, int, str]]


def _table() -> _Table:
    table: _Table = {}
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        try:
            with open(f"{_PROC}/{name}/stat", "rb") as file:
                raw = file.read().decode("ascii", "replace")
        except OSError:
            continue
        command = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        table[int(name)] = (int(fields[1]), int(fields[2]), fields[0], int(fields[19]), command)
    return table


def _ours(table: _Table, root: int) -> set[int]:
    """Descendants of ``root``, and members of process groups that one of them leads."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    groups = {pid for pid in found if table[pid][1] == pid}
    found |= {pid for pid, entry in table.items() if entry[1] in groups and pid != root}
    return found


def _collect_zombie_children(table: _Table, me: int) -> None:
    for pid, (ppid, _, state, _, _) in table.items():
        if ppid == me and state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _alive(table: _Table, pids: set[int], before: set[tuple[int, int]]) -> set[int]:
    return {
        pid
        for pid in pids
        if table[pid][2] not in {"Z", "X", "x"} and (pid, table[pid][3]) not in before
    }


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Fail the run when a test leaves a process of its own behind."""
    if not os.path.isdir(_PROC):
        yield
        return
    _become_subreaper()
    me = os.getpid()
    table = _table()
    before = {(pid, table[pid][3]) for pid in _ours(table, me)}
    yield
    deadline = time.monotonic() + STRAGGLER_BOUND_SECONDS
    while True:
        table = _table()
        _collect_zombie_children(table, me)
        leaked = _alive(table, _ours(table, me), before)
        if not leaked or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_SECONDS)
    if not leaked:
        return
    described = ", ".join(f"{pid} ({table[pid][4]})" for pid in sorted(leaked))
    for pid in leaked:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    pytest.fail(f"the test run leaked {len(leaked)} process(es): {described}", pytrace=False)
