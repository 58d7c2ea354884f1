"""Section "installs": a contained ``uv sync`` of a small project beside ``--sandbox off``.

Contract 12.2: at most 1.2x. The project depends on seven packages of the locked
wheelhouse (``make bootstrap``'s ``.wheelhouse``, so no index is asked: ``--offline``,
``find-links``); each sample removes the project's ``.venv`` and syncs it again from a
warm cache, as a user's second ``uv sync`` in a fresh checkout does. Sandbox off: the
command's own uv cache beside the project (the user's ``~/.cache/uv``, where uv
hard-links). Contained (``workspace`` with namespaces, as ``serve`` makes it): the
worktree's private cache, which the server binds over ``~/.cache`` and names in
``UV_CACHE_DIR``. ``UV_LINK_MODE`` is left to uv in both.

Run alone: ``uv run --locked --no-sync python benchmarks/bench_installs.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from _harness import REPOSITORY, Figure, Settings, Target, main_of, milliseconds, rotate
from _harness import unavailable as unavailable_figure

from spice.agent.coding._platform import SandboxRequest, platform_launcher
from spice.agent.process import Launcher, Spec

SECTION: Final = "installs"
NAME: Final = "uv sync of a small project (7 packages, warm cache): contained beside off"
TARGETS: Final = (Target(SECTION, NAME, most=1.2, source="issue 37"),)
WHEELHOUSE: Final = REPOSITORY / ".wheelhouse"
PACKAGES: Final = ("anyio", "attrs", "click", "h11", "idna", "orjson", "typing-extensions")
TIMEOUT_SECONDS: Final = 120.0


class _Keep:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data[:4096]


def _uv() -> str | None:
    """uv's binary itself (a pyenv shim would rehash into a read-only directory)."""
    for candidate in (os.environ.get("UV", ""), str(Path(sys.base_prefix) / "bin" / "uv")):
        if candidate and os.path.isfile(candidate):
            with open(candidate, "rb") as binary:
                if binary.read(4) == b"\x7fELF":
                    return os.path.realpath(candidate)
    found = shutil.which("uv")
    return None if found is None else os.path.realpath(found)


def _project(path: Path, python: str) -> None:
    """A project of ``PACKAGES`` from the wheelhouse, locked once."""
    path.mkdir()
    dependencies = ", ".join(f'"{name}"' for name in PACKAGES)
    (path / "pyproject.toml").write_text(
        "[project]\n"
        'name = "small"\n'
        'version = "0"\n'
        'requires-python = ">=3.11"\n'
        f"dependencies = [{dependencies}]\n"
        "[tool.uv]\n"
        "no-index = true\n"
        f'find-links = ["{WHEELHOUSE}"]\n'
        "package = false\n",
        encoding="utf-8",
    )


def _probe(
    launcher: Launcher, uv: str, python: str, project: Path, environment: tuple[str, ...]
) -> Callable[[], Awaitable[None]]:
    script = f'rm -rf .venv && exec "{uv}" sync --offline --quiet --python "{python}"'

    async def probe() -> None:
        err = _Keep()
        spec = Spec("/bin/sh", ("-c", script), str(project), environment, b"", _Keep(), err)
        process = await launcher.start(spec)
        async with asyncio.timeout(TIMEOUT_SECONDS):
            await process.wait_exit()
            await process.wait()
        if not process.result().successful:
            raise RuntimeError("uv sync failed: " + err.data.decode(errors="replace")[:400])

    return probe


async def _measure(settings: Settings, uv: str, python: str, scratch: Path) -> Figure:
    """Both launchers made as ``serve`` makes them (the contained one's cache under a
    scratch home), then the two syncs in rotation."""
    home = scratch / "home"
    (home / ".cache").mkdir(parents=True)
    inside, outside = scratch / "contained", scratch / "off"
    for project in (inside, outside):
        _project(project, python)
    base = ("PATH=/usr/bin:/bin", f"HOME={home}", "LANG=C.UTF-8")
    previous = {name: os.environ.get(name) for name in ("HOME", "XDG_CACHE_HOME")}
    os.environ["HOME"] = str(home)
    os.environ.pop("XDG_CACHE_HOME", None)
    try:
        contained = platform_launcher(SandboxRequest(str(inside), mode="workspace"))
        off = platform_launcher(SandboxRequest(str(outside), mode="off"))
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if not contained.contained:
        return unavailable_figure(SECTION, NAME, "this host cannot contain a call")
    off_environment = (*base, f"UV_CACHE_DIR={home / '.cache' / 'uv'}")
    off_s, contained_s = await rotate(
        [
            _probe(off, uv, python, outside, off_environment),
            _probe(contained, uv, python, inside, base),
        ],
        settings.warmup,
        settings.slow_repeats,
    )
    return Figure(
        SECTION,
        NAME,
        milliseconds(contained_s),
        "floor",
        "the same uv sync, --sandbox off (uv's cache beside the project)",
        milliseconds(off_s),
        notes=("each sample: rm -rf .venv, then uv sync --offline from a warm cache",),
    )


def run(settings: Settings) -> list[Figure]:
    """The section's figure."""
    uv = _uv()
    if not sys.platform.startswith("linux"):
        return [unavailable_figure(SECTION, NAME, "the sandbox is Linux's")]
    if uv is None:
        return [unavailable_figure(SECTION, NAME, "no uv binary here")]
    if not (WHEELHOUSE / "requirements.txt").is_file():
        return [unavailable_figure(SECTION, NAME, "no .wheelhouse: run `make bootstrap`")]
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    scratch = Path(tempfile.mkdtemp(prefix="spice-bench-installs-"))
    try:
        return [asyncio.run(_measure(settings, uv, python, scratch))]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main_of(run))
