"""A supervisor started by module name from a checkout beneath ``/tmp`` (issue 28).

``make verify`` in a clone under ``/tmp`` failed every namespace-path test late in the
covered run: under coverage the supervisor runs by module name (``conftest.py``'s
``MEASURED_FLAGS``) and imports ``spice`` from the checkout's ``src`` directories,
which the call's private ``/tmp`` hides, so it died before its first word
(``LaunchError``). The conftest keeps those sources visible (``kept_visible``). Here a
copy of the sources beneath ``/tmp`` (pytest's own temporary tree) stands in for such a
clone, and the supervisor is started from it alone (``-S``: no site-packages to fall
back on).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import Final

import pytest
from conftest import kept_visible, measured_sources
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix import _launcher as launcher_module
from spice.agent.coding._posix._containment import resolve_containment
from spice.agent.process import LaunchError, Spec

NAMESPACES: Final = _bwrap.resolve_namespaces("/nonexistent")
BOUND: Final = 60.0
pytestmark = pytest.mark.skipif(not NAMESPACES.made, reason=f"no namespaces: {NAMESPACES.reason}")

BY_NAME: Final = (
    "import os, sys\n"
    "sys.path[:0] = os.environ['SPICE_COPIES'].split(':')\n"
    "from spice.agent.coding._posix._supervisor import _main as supervisor\n"
    "os.close(int(sys.argv.pop(1)))\n"
    "supervisor.supervise(int(sys.argv[1]), int(sys.argv[2]))\n"
)


@pytest.fixture
def copies(tmp_path: Path) -> list[str]:
    """The three distributions' sources copied beneath ``/tmp`` (a clone there)."""
    if not _bwrap.under_private_tmp([str(tmp_path)]):
        pytest.skip("pytest's temporary tree is not beneath /tmp here")
    made: list[str] = []
    for number, source in enumerate(measured_sources()[:3]):
        target = tmp_path / f"checkout-{number}" / "src"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        made.append(str(target.resolve()))
    return made


async def _run(root: Path) -> bytes:
    policy = dataclasses.replace(resolve_containment("workspace"), namespaces=NAMESPACES)
    out = Collect()
    spec = Spec("/bin/echo", ("started",), str(root), (), b"", out, Collect())
    process = await PosixLauncher.build(policy, str(root)).start(spec)
    async with asyncio.timeout(BOUND):
        await process.wait_exit()
        await process.wait()
    return bytes(out.data)


@pytest.fixture
def by_name(monkeypatch: pytest.MonkeyPatch, copies: list[str]) -> None:
    """Start the supervisor by module name from ``copies`` alone, as a measured run does."""
    monkeypatch.setattr(launcher_module, "INTERPRETER", os.path.realpath(sys.executable))
    monkeypatch.setattr(launcher_module, "_SUPERVISOR_FLAGS", ("-S", "-c", BY_NAME))
    monkeypatch.setattr(
        launcher_module, "_SUPERVISOR_ENVIRONMENT", {"SPICE_COPIES": ":".join(copies)}
    )


async def test_a_supervisor_from_a_checkout_under_tmp_starts_when_kept_visible(
    by_name: None, copies: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher_module, "_KEPT_VISIBLE", kept_visible(copies))
    root = tmp_path / "root"
    root.mkdir()
    assert await _run(root) == b"started\n"


async def test_hidden_by_the_private_tmp_it_never_says_a_word(
    by_name: None, copies: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cause, shown: the same start without the sources kept visible."""
    monkeypatch.setattr(launcher_module, "_KEPT_VISIBLE", ())
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(LaunchError) as raised:
        await _run(root)
    process = raised.value.process
    if process is not None:
        async with asyncio.timeout(BOUND):
            await process.wait()
