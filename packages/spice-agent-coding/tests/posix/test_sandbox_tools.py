"""Real tools keep working contained, on both paths: multiprocessing, and ``uv run``
with ``--allow-write`` of its cache (``git``, ``pytest``, ``pip``, ``npm`` and ``cc`` are in
``test_containment.py``, which runs on both paths too)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_shell

PYTHON: Final = os.path.realpath(sys.executable)
BOUND: Final = 120.0
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")

Shell = Callable[..., AsyncIterator[Dispatcher]]


def _elf(path: str | None) -> bool:
    if path is None or not os.path.isfile(path):
        return False
    with open(path, "rb") as file:
        return file.read(4) == b"\x7fELF"


def find_uv() -> str | None:
    """The real ``uv`` executable (not a version manager's shell shim), or ``None``."""
    for candidate in (os.path.join(sys.base_prefix, "bin", "uv"), shutil.which("uv")):
        if _elf(candidate):
            return os.path.realpath(str(candidate))
    return None


@pytest.fixture(params=("namespaces", "fallback"))
def path_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    return str(request.param)


@pytest.fixture
def dirs(visible_path: Path) -> tuple[Path, Path]:
    root, cache = visible_path / "root", visible_path / "cache"
    root.mkdir()
    cache.mkdir()
    return root, cache


async def call(path_kind: str, root: Path, argv: list[str], allow: tuple[str, ...] = ()) -> dict:  # type: ignore[type-arg]
    made = NAMESPACES if path_kind == "namespaces" else Namespaces(None, "simulated")
    policy = dataclasses.replace(
        resolve_containment("workspace", allow_write=allow), namespaces=made
    )
    config = Config(root, environment_allowlist=("HOME", "LANG", "PATH", "TMPDIR"))
    tool, cleanup = new_shell(config, PosixResolver(), PosixLauncher.build(policy, str(root)))
    try:
        request = Call("c", "shell", json.dumps({"argv": argv, "timeout_seconds": 120}))
        async with asyncio.timeout(BOUND):
            result = await Dispatcher([tool]).dispatch(request)
    finally:
        async with asyncio.timeout(BOUND):
            await cleanup()
    content = json.loads(result.content)
    assert isinstance(content, dict)
    return content


MULTIPROCESSING: Final = (
    "import multiprocessing as m\n"
    "if __name__ == '__main__':\n"
    "    lock = m.Lock()\n"
    "    with m.Pool(2) as pool:\n"
    "        print(sum(pool.map(abs, [-1, -2, 3])))\n"
)


async def test_multiprocessing_works_with_the_private_dev_shm(
    path_kind: str, dirs: tuple[Path, Path]
) -> None:
    """A Lock and a Pool need POSIX semaphores in /dev/shm: the namespace path has its own.

    Without namespaces /dev/shm is the machine's and stays closed (a write there could
    reach other users' shared memory): the same program fails, and says so.
    """
    root, _ = dirs
    (root / "mp.py").write_text(MULTIPROCESSING)
    content = await call(path_kind, root, [PYTHON, "mp.py"])
    if path_kind == "namespaces":
        assert (0, "6") == (content["exit_code"], str(content["stdout"]).strip())
    else:
        assert content["exit_code"] != 0


async def test_uv_run_works_with_its_cache_allowed_and_not_without(
    path_kind: str, dirs: tuple[Path, Path]
) -> None:
    uv = find_uv()
    if uv is None:
        pytest.skip("no uv executable here")
    root, cache = dirs
    (root / "hello.py").write_text("print('hello from uv')\n")
    script = (
        f"UV_CACHE_DIR={cache} UV_PYTHON_DOWNLOADS=never exec {uv} run --offline "
        f"--no-project --python {PYTHON} hello.py"
    )
    allowed = await call(path_kind, root, ["/bin/sh", "-c", script], (str(cache),))
    assert (0, "hello from uv") == (allowed["exit_code"], str(allowed["stdout"]).strip()), allowed
    assert os.listdir(cache)
    shutil.rmtree(cache)
    cache.mkdir()
    refused = await call(path_kind, root, ["/bin/sh", "-c", script])
    assert refused["exit_code"] != 0
    assert [] == os.listdir(cache)
