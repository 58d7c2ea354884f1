"""Section "protected": what the join's guard of protected paths costs a call (12.1).

A worktree with ``FILES`` files in ``DIRECTORIES`` directories, a git repository and one
submodule (its git directory under ``.git/modules``). ``/bin/true`` is run there, in
rotation: with the sandbox off (the per-call supervisor alone), contained with the
standard protected paths (the guard's scan at the call's start and at its join, the
read-only binds on the namespace path), and contained with nothing protected (the same
sandbox without the guard), so the guard's own share shows. The target: the contained
``true`` with the guard within 1.5x of ``--sandbox off`` (issue 36).

The worktree is measured as a user's is between calls: made, then left ``RACY_NS`` (2 s)
so that nothing in it changed within the file system's clock tick, when the guard takes
an unchanged directory's listing and an unchanged file's bytes from what it read before.
A second figure shows the other end: every directory listed and every protected file read
again at each call, as at a server's first call (the guard's memory emptied each time).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_protected.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from _harness import Figure, Settings, Target, main_of, milliseconds, rotate, unavailable

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _facts
from spice.agent.coding._posix._containment import OFF, resolve_containment
from spice.agent.coding._posix._scan import RACY_NS, Known
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Spec
from spice.agent.tools.coding import ProtectedPaths

SECTION: Final = "protected"
FILES: Final = 1000
DIRECTORIES: Final = 40
ENVIRONMENT: Final = ("PATH=/usr/bin:/bin", "LANG=C.UTF-8")
TIMEOUT_SECONDS: Final = 120.0
VISIBLE: Final = "/var/tmp"  # noqa: S108 - outside the private /tmp of the namespace path
GUARDED: Final = "true with the join's guard beside off (1,000 files, a submodule)"
COLD: Final = "true with the guard reading everything again (a first call) beside off"
TARGETS: Final = (Target(SECTION, GUARDED, most=1.5, source="issue 36"),)
"""A contained ``true`` with the guard costs at most 1.5x ``--sandbox off``."""

_GIT_ENVIRONMENT: Final = {
    "PATH": "/usr/bin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.invalid",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.invalid",
}


class _Discard:
    def write(self, data: bytes) -> None:
        del data


def _git(cwd: Path, home: Path, *arguments: str) -> None:
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *arguments],
        cwd=cwd,
        env={**_GIT_ENVIRONMENT, "HOME": str(home)},
        check=True,
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
    )


def _worktree(base: Path) -> Path:
    """``FILES`` files in ``DIRECTORIES`` directories, committed, with one submodule."""
    home = base / "home"
    home.mkdir()
    upstream = base / "upstream"
    upstream.mkdir()
    _git(upstream, home, "init", "-q", "-b", "main")
    (upstream / "lib.txt").write_text("lib\n")
    _git(upstream, home, "add", ".")
    _git(upstream, home, "commit", "-q", "-m", "lib")
    root = base / "worktree"
    root.mkdir()
    _git(root, home, "init", "-q", "-b", "main")
    for index in range(FILES):
        directory = root / f"pkg{index % DIRECTORIES}"
        directory.mkdir(exist_ok=True)
        (directory / f"module{index}.py").write_text(f"VALUE = {index}\n")
    _git(root, home, "add", ".")
    _git(root, home, "commit", "-q", "-m", "files")
    _git(root, home, "submodule", "add", "-q", str(upstream), "sub")
    _git(root, home, "commit", "-q", "-m", "sub")
    return root.resolve()


def _settle(root: Path) -> None:
    """Wait until nothing in the new worktree changed within ``RACY_NS`` (a user's worktree
    between calls), so that the guard may trust what it read of it."""
    newest = max(os.lstat(path).st_ctime_ns for path, _, _ in os.walk(root))
    time.sleep(max(0, newest + RACY_NS - time.time_ns()) / 1e9 + 0.05)


def _launched(
    launcher: PosixLauncher, cwd: Path, *, forget: bool = False
) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        if forget:  # a first call: nothing read before is trusted
            launcher._guard._known = Known()  # the benchmark's own lever
        spec = Spec("/bin/true", (), str(cwd), ENVIRONMENT, b"", _Discard(), _Discard())
        process = await launcher.start(spec)
        async with asyncio.timeout(TIMEOUT_SECONDS):
            await process.wait_exit()
            await process.wait()
        if not process.result().successful:
            raise RuntimeError("the benchmarked command failed")

    return probe


def _contained(root: Path, protected: ProtectedPaths) -> PosixLauncher:
    policy = resolve_containment("workspace", root=str(root))
    facts = _facts.start_facts(  # as serve makes them: the private cache and records
        str(root), bwrap=policy.namespaces.bwrap, protected=protected, cache=True
    )
    return PosixLauncher.build(policy, str(root), facts=facts)


async def _run(settings: Settings) -> list[Figure]:
    if landlock_abi() < 1 or shutil.which("git") is None:
        return [unavailable(SECTION, GUARDED, "needs Landlock and git")]
    visible = VISIBLE if os.access(VISIBLE, os.W_OK) else os.getcwd()  # not the private /tmp
    base = Path(tempfile.mkdtemp(prefix="spice-bench-protected-", dir=visible))
    try:
        root = _worktree(base)
        _settle(root)
        off = PosixLauncher.build(OFF, str(root))
        guarded = _contained(root, ProtectedPaths.default())
        cold = _contained(root, ProtectedPaths.default())
        bare = _contained(root, ProtectedPaths())
        off_s, guarded_s, cold_s, bare_s = await rotate(
            [
                _launched(off, root),
                _launched(guarded, root),
                _launched(cold, root, forget=True),
                _launched(bare, root),
            ],
            settings.warmup,
            settings.repeats,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    path = "namespaces" if guarded.sandbox.namespaces.made else "Landlock + seccomp"
    uncontained = milliseconds(off_s)
    return [
        Figure(
            SECTION,
            GUARDED,
            milliseconds(guarded_s),
            "peer",
            "sandbox off",
            uncontained,
            notes=(
                f"{path}; the guard's scan at the start and at the join",
                "the worktree unchanged for 2 s, as between a user's calls",
            ),
        ),
        Figure(
            SECTION,
            COLD,
            milliseconds(cold_s),
            "peer",
            "sandbox off",
            uncontained,
            notes=("every directory listed and every protected file read again",),
        ),
        Figure(
            SECTION,
            "true with the guard beside the same sandbox without it",
            milliseconds(guarded_s),
            "peer",
            "nothing protected",
            milliseconds(bare_s),
            notes=("the guard's own share",),
        ),
    ]


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    return asyncio.run(_run(settings))


if __name__ == "__main__":
    raise SystemExit(main_of(run))
