"""Section "stage": what the staged worktree costs a call (contract 13.1).

Each contained call on the namespace path writes through an overlay whose upper layer is
the call's, and its commit reads the upper and renames what it changed into the worktree.
Measured in rotation, in one run, as ratios:

- ``/bin/true`` staged beside ``--sandbox off`` (target: within 1.5x);
- a command that rewrites 1,000 files, staged beside the same sandbox unstaged and without
  the join's guard (the stage's own cost: target at most 1.2x);
- staged ``/bin/true`` on a 100,000-file worktree beside a 100-file one (the cost does not
  grow with the worktree: target within 1.1x);
- ``uv sync`` of a project of 10 small packages into a fresh ``.venv``, offline from local
  wheels the bench writes itself, staged beside the same sandbox unstaged (target at most
  1.1x): the new ``.venv`` is committed by one rename (``Change.whole``).

Run alone: ``uv run --locked --no-sync python benchmarks/bench_stage.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from _harness import Figure, Settings, Target, main_of, milliseconds, rotate, unavailable

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _facts
from spice.agent.coding._posix._containment import OFF, resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Spec
from spice.agent.tools.coding import ProtectedPaths

SECTION: Final = "stage"
ENVIRONMENT: Final = ("PATH=/usr/bin:/bin", "LANG=C.UTF-8")
TIMEOUT_SECONDS: Final = 300.0
VISIBLE: Final = "/var/tmp"  # noqa: S108 - outside the private /tmp of the namespace path
REWRITTEN: Final = 1000
LARGE: Final = 100_000
SMALL: Final = 100
NOOP: Final = "true staged beside off"
REWRITE: Final = "rewrite 1,000 files staged beside unstaged"
SCALE: Final = "true staged on 100,000 files beside 100 files"
SYNC: Final = "uv sync of 10 packages into a fresh .venv staged beside unstaged"
TARGETS: Final = (
    Target(SECTION, NOOP, most=1.5, source="issue 44"),
    Target(SECTION, REWRITE, most=1.2, source="issue 44"),
    Target(SECTION, SCALE, most=1.1, source="issue 44"),
    Target(SECTION, SYNC, most=1.1, source="issue 44"),
)
PACKAGES: Final = 10
"""Packages of the synced project (contract 13.1: "a 10-package project")."""
MODULES_PER_PACKAGE: Final = 5


class _Discard:
    def write(self, data: bytes) -> None:
        del data


def _files(root: Path, count: int) -> None:
    for index in range(count):
        directory = root / f"pkg{index % 100}"
        directory.mkdir(exist_ok=True)
        (directory / f"m{index}.py").write_text(f"VALUE = {index}\n")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _wheel(directory: Path, name: str) -> None:
    """A tiny pure-Python wheel of ``name`` 1.0 (a package of a few modules), written as
    the zip it is: no build backend, no index."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": f"NAME = {name!r}\n".encode(),
        **{
            f"{name}/m{index}.py": f"VALUE = {index}\n".encode()
            for index in range(MODULES_PER_PACKAGE)
        },
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(_record_line(path, data) for path, data in files.items())
    record += f"{info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(f"{info}/RECORD", record)


def _sync_project(root: Path, wheels: Path) -> None:
    """A project depending on ``PACKAGES`` local wheels (``find-links``, no index)."""
    wheels.mkdir()
    names = [f"tiny{index}" for index in range(PACKAGES)]
    for name in names:
        _wheel(wheels, name)
    dependencies = ", ".join(f'"{name}"' for name in names)
    (root / "pyproject.toml").write_text(
        "[project]\n"
        'name = "synced"\n'
        'version = "0"\n'
        'requires-python = ">=3.11"\n'
        f"dependencies = [{dependencies}]\n"
        "[tool.uv]\n"
        "no-index = true\n"
        f'find-links = ["{wheels}"]\n'
        "package = false\n",
        encoding="utf-8",
    )


def _sync_probe(
    launcher: PosixLauncher, root: Path, trash: Path, uv: str, python: str
) -> Callable[[], Awaitable[None]]:
    """``uv sync`` into a fresh ``.venv``: the last one is renamed out of the worktree
    first (one rename, outside the timed call's cost), so each call adds it anew."""
    environment = (
        f"PATH={os.path.dirname(uv)}:/usr/bin:/bin",
        "LANG=C.UTF-8",
        "UV_OFFLINE=1",
        "UV_PYTHON_DOWNLOADS=never",
    )
    argv = (uv, "sync", "--quiet", "--python", python)

    async def probe() -> None:
        venv = root / ".venv"
        if venv.exists():
            venv.rename(trash / f"venv{len(os.listdir(trash))}")
        spec = Spec(argv[0], argv[1:], str(root), environment, b"", _Discard(), _Discard())
        process = await launcher.start(spec)
        async with asyncio.timeout(TIMEOUT_SECONDS):
            await process.wait_exit()
            await process.wait()
        if not process.result().successful or not (venv / "pyvenv.cfg").is_file():
            raise RuntimeError("the benchmarked uv sync failed")

    return probe


def _probe(
    launcher: PosixLauncher, cwd: Path, argv: tuple[str, ...]
) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        spec = Spec(argv[0], argv[1:], str(cwd), ENVIRONMENT, b"", _Discard(), _Discard())
        process = await launcher.start(spec)
        async with asyncio.timeout(TIMEOUT_SECONDS):
            await process.wait_exit()
            await process.wait()
        if not process.result().successful:
            raise RuntimeError("the benchmarked command failed")

    return probe


def _launcher(root: Path, home: Path, *, staged: bool) -> PosixLauncher:
    policy = resolve_containment("workspace", root=str(root))
    facts = _facts.start_facts(
        str(root),
        bwrap=policy.namespaces.bwrap,
        cache=True,
        environ={"HOME": str(home)},
        protected=ProtectedPaths.default() if staged else ProtectedPaths(),
    )
    if not staged:
        facts = dataclasses.replace(facts, stages=None, unstaged="measured unstaged")
    elif facts.stages is None:
        raise LookupError(facts.unstaged or "no stage")
    return PosixLauncher.build(policy, str(root), facts=facts)


async def _run(settings: Settings) -> list[Figure]:
    if landlock_abi() < 1 or shutil.which("bwrap") is None:
        return [unavailable(SECTION, NOOP, "needs Landlock and bubblewrap")]
    visible = VISIBLE if os.access(VISIBLE, os.W_OK) else os.getcwd()
    base = Path(tempfile.mkdtemp(prefix="spice-bench-stage-", dir=visible))
    try:
        home = base / "home"
        home.mkdir()
        small, large, rewrite = base / "small", base / "large", base / "rewrite"
        for path, count in ((small, SMALL), (large, LARGE), (rewrite, REWRITTEN)):
            path.mkdir()
            _files(path, count)
        try:
            staged_small = _launcher(small, home, staged=True)
            staged_large = _launcher(large, home, staged=True)
            staged_rewrite = _launcher(rewrite, home, staged=True)
        except LookupError as reason:
            return [unavailable(SECTION, NOOP, str(reason))]
        unstaged_rewrite = _launcher(rewrite, home, staged=False)
        off = PosixLauncher.build(OFF, str(small))
        sync_figure = await _sync(settings, base, home)
        rewrite_argv = ("/bin/sh", "-c", 'for f in pkg*/*.py; do echo x >> "$f"; done')
        true = ("/bin/true",)
        off_s, small_s, large_s, staged_rw, unstaged_rw = await rotate(
            [
                _probe(off, small, true),
                _probe(staged_small, small, true),
                _probe(staged_large, large, true),
                _probe(staged_rewrite, rewrite, rewrite_argv),
                _probe(unstaged_rewrite, rewrite, rewrite_argv),
            ],
            settings.warmup,
            settings.repeats,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return [
        Figure(SECTION, NOOP, milliseconds(small_s), "peer", "sandbox off", milliseconds(off_s)),
        Figure(
            SECTION,
            REWRITE,
            milliseconds(staged_rw),
            "peer",
            "the same sandbox unstaged, no guard",
            milliseconds(unstaged_rw),
            notes=("each call appends a line to the same 1,000 files: 1,000 renames a commit",),
        ),
        Figure(SECTION, SCALE, milliseconds(large_s), "peer", "100 files", milliseconds(small_s)),
        sync_figure,
    ]


def _sync_tools() -> tuple[str, str] | None:
    """uv's binary and the interpreter (real paths: the sandbox sees them read-only)."""
    found = shutil.which("uv")
    if found is None:
        return None
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return os.path.realpath(found), python


async def _sync(settings: Settings, base: Path, home: Path) -> Figure:
    """The staged ``uv sync`` beside the same sandbox unstaged, each on its own project."""
    tools = _sync_tools()
    if tools is None:
        return unavailable(SECTION, SYNC, "no uv binary on PATH")
    uv, python = tools
    probes = []
    for name, staged in (("sync-staged", True), ("sync-unstaged", False)):
        root, trash = base / name, base / f"{name}-trash"
        root.mkdir()
        trash.mkdir()
        _sync_project(root, base / f"{name}-wheels")
        probes.append(_sync_probe(_launcher(root, home, staged=staged), root, trash, uv, python))
    staged_s, unstaged_s = await rotate(probes, settings.warmup, settings.slow_repeats)
    return Figure(
        SECTION,
        SYNC,
        milliseconds(staged_s),
        "peer",
        "the same sandbox unstaged, no guard",
        milliseconds(unstaged_s),
        notes=(
            (
                f"uv sync --offline of {PACKAGES} local wheels into a fresh .venv each call "
                "(the last one renamed out of the worktree first); uv's cache is the sandbox's"
            ),
        ),
    )


def run(settings: Settings) -> list[Figure]:
    """The section's figures."""
    return asyncio.run(_run(settings))


if __name__ == "__main__":
    raise SystemExit(main_of(run))
