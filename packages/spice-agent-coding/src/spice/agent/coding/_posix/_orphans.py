"""The server's orphans: processes of a call that came back to the server, ended and reaped.

The server is a child subreaper (``adopt``): a descendant of a call whose supervisor was
killed, or whose supervisor's sweep ran out of its bound (a fork relay can outrun it),
is reparented here. Each is ended with its whole subtree and reaped, in time
proportional to their number and never on the event loop:

- one reaper thread, started by ``adopt``, works in rounds once woken (``wake``: a
  join whose supervisor did not say its tree is gone, so orphans may have come). A
  round lists the server's children (a few small files), reaps the exited ones
  (``WNOHANG``), and only when live ones are left walks ``/proc`` once for all their
  subtrees, freezes them (``SIGSTOP``, so none forks again) and kills them
  (``SIGKILL``); a subtree already killed is not walked again. Rounds follow each
  other (``ROUND_PAUSE_SECONDS`` apart) until one finds no orphan; then the thread
  parks on its event and does nothing at all until the next wake-up. So orphans are
  reaped after their join has returned too, the server never spins on them, and one
  round costs one ``/proc`` walk however many orphans there are (the sweep it replaces
  walked ``/proc`` once per orphan, on the event loop, and only during a join);
- a join's ``sweep`` wakes the reaper and runs rounds itself in a worker thread until
  none is left (bounded);
- the launcher's own children (the leaders) are never taken for orphans: each is
  registered under the spawn lock in the same step that creates it (``started``), so a
  child between ``fork`` and its registration is never seen unregistered.

Every child the server creates after ``adopt`` must go through ``started``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar, final

from ._supervisor import _landlock as landlock

__all__ = [
    "ROUND_PAUSE_SECONDS",
    "Stats",
    "adopt",
    "adopting",
    "forget",
    "is_leader",
    "leaders",
    "spawn",
    "started",
    "stats",
    "sweep",
    "wake",
]

ROUND_PAUSE_SECONDS: Final = 0.01
"""The pause between two rounds while orphans are left (their deaths need a moment)."""

_P = TypeVar("_P")


@final
@dataclass(slots=True)
class Stats:
    """What the reaper did since ``adopt``: its rounds, its ``/proc`` walks, the orphans it
    reaped, the rounds that found none, and whether it is working now (else parked)."""

    rounds: int = 0
    walks: int = 0
    reaped: int = 0
    idle: int = 0
    active: bool = False


_LEADERS: set[int] = set()
"""Pids of leaders the launcher started and has not reaped (never swept as orphans)."""

_SPAWN_LOCK: Final = threading.Lock()
"""Held while a child is created and registered, and while the children are listed."""

_ROUND_LOCK: Final = threading.Lock()
"""One round at a time (the reaper's or a join's)."""

_KILLED: Final[set[int]] = set()
"""Processes an earlier round froze and killed, with their subtrees (until none is left)."""

_WAKE: Final = threading.Event()
_STATS: Final = Stats()
_reaper: list[threading.Thread] = []


def started(start: Callable[[], _P], pid_of: Callable[[_P], int]) -> _P:
    """Create a child with ``start`` and register it as a leader in one step."""
    with _SPAWN_LOCK:
        made = start()
        _LEADERS.add(pid_of(made))
    return made


def spawn(
    argv: Sequence[str],
    *,
    streams: tuple[int, int, int],
    cwd: str,
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    enter: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (``argv[0]`` an absolute path) as a registered leader: its own session
    and process group, ``streams`` as stdin, stdout and stderr, ``env`` exactly, every
    descriptor but ``pass_fds`` closed, default signal dispositions; no shell. ``enter``:
    a staged call's namespaces and overlay (``_stage.Stage.enter``), run in the child
    before ``execve`` (Popen's ``preexec_fn``: a ``fork``); without it no ``preexec_fn``,
    so ``vfork`` where Python can."""
    return started(
        lambda: subprocess.Popen(  # noqa: S603 - an argv list, no shell
            list(argv),
            executable=argv[0],
            stdin=streams[0],
            stdout=streams[1],
            stderr=streams[2],
            cwd=cwd,
            env=dict(env),
            close_fds=True,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
            restore_signals=True,
            preexec_fn=enter,  # noqa: PLW1509 - async-signal-safe: syscalls on prepared bytes
        ),
        _pid_of,
    )


def _pid_of(popen: subprocess.Popen[bytes]) -> int:
    return popen.pid


def forget(pid: int) -> None:
    """The leader ``pid`` was reaped (or lost): it is no longer ours to keep."""
    _LEADERS.discard(pid)


def is_leader(pid: int) -> bool:
    """Whether ``pid`` is a leader the launcher started and has not reaped."""
    return pid in _LEADERS


def leaders() -> frozenset[int]:
    """The registered leaders (a copy)."""
    return frozenset(_LEADERS)


def adopting() -> bool:
    """Whether this process adopts orphans (``adopt`` succeeded)."""
    return bool(_reaper)


def stats() -> Stats:
    """A copy of what the reaper did so far."""
    return Stats(_STATS.rounds, _STATS.walks, _STATS.reaped, _STATS.idle, _STATS.active)


def wake() -> None:
    """Orphans may have come (a call's tree was not reported gone): reap until none is."""
    _WAKE.set()


def adopt() -> bool:
    """Make this process the subreaper of last resort and start the reaper (once).

    Returns whether the kernel made this process a subreaper (Linux).
    """
    if _reaper:
        return True
    if not landlock.become_subreaper():
        return False
    thread = threading.Thread(target=_reap_forever, name="spice-orphans", daemon=True)
    _reaper.append(thread)
    thread.start()
    return True


def _server_children() -> list[int]:
    """Direct children of this (possibly threaded) process."""
    me = os.getpid()
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return landlock.children(me)
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children", "rb") as file:
                found.extend(int(field) for field in file.read().split())
        except FileNotFoundError:
            return landlock.children(me)
        except OSError:
            continue
    return found


def _orphans() -> list[int]:
    with _SPAWN_LOCK:
        return [pid for pid in _server_children() if pid not in _LEADERS]


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it has exited; whether it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    except OSError:
        return False
    return done != 0


def _reap_exited(orphans: list[int]) -> list[int]:
    """Reap those of ``orphans`` that have exited (counted); the live ones."""
    live = [pid for pid in orphans if not _reaped(pid)]
    _STATS.reaped += len(orphans) - len(live)
    return live


def _round() -> int:
    """One round: reap the exited orphans, end the live ones with their subtrees.

    Returns how many orphans the round found (0: none left).
    """
    with _ROUND_LOCK:
        orphans = _orphans()
        _STATS.rounds += 1
        if not orphans:
            _STATS.idle += 1
            _KILLED.clear()
            return 0
        live = _reap_exited(orphans)
        if any(pid not in _KILLED for pid in live):
            # One walk for all of them: each subtree is frozen, then killed.
            _STATS.walks += 1
            tree = [*live, *landlock.descendants(*live)]
            for number in (signal.SIGSTOP, signal.SIGKILL):
                for pid in tree:
                    with contextlib.suppress(OSError):
                        os.kill(pid, number)
            _KILLED.update(tree)
        else:
            # Killed by an earlier round (and its subtree with it), still dying: unreaped,
            # its pid is still ours, so the repeated SIGKILL is safe; no walk.
            for pid in live:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        _STATS.reaped += sum(_reaped(pid) for pid in live)
        return len(orphans)


def _reap_forever() -> None:
    while True:
        _WAKE.wait()
        _WAKE.clear()
        _STATS.active = True
        while True:
            try:
                found = _round()
            except Exception:  # noqa: BLE001 - the reaper outlives any one failed round
                found = 0
            if not found:
                break
            time.sleep(ROUND_PAUSE_SECONDS)
        _STATS.active = False


def _sweep_until(deadline: float) -> bool:
    while True:
        if not _round():
            return True
        if time.monotonic() >= deadline:
            # What died since the last round is reaped before the verdict: an orphan
            # that is only a zombie now is gone, not left (a loaded machine's late death).
            with _ROUND_LOCK:
                return not _reap_exited(_orphans())
        time.sleep(ROUND_PAUSE_SECONDS)


async def sweep(bound: float) -> bool:
    """End and reap every orphan, in a worker thread, for at most ``bound``; whether none
    is left. Without ``adopt`` nothing comes here: ``True``."""
    if not _reaper:
        return True
    _WAKE.set()
    return await asyncio.to_thread(_sweep_until, time.monotonic() + bound)
