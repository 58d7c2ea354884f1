"""The application's test-wide fixtures.

Under a coverage run that measures subprocesses (``[tool.coverage.run] patch``), the
per-call supervisor is started without ``-I -S``, by its module name, and with coverage's
variable, so that coverage starts in it (through the ``.pth`` file it installs) and its
code is measured like any other. Its behaviour is the same: the command's environment
reaches it through the spec file, never through its own environment. Outside a coverage
run nothing changes.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix import _launcher as launcher_module

COVERAGE_VARIABLE = "COVERAGE_PROCESS_CONFIG"
MEASURED_FLAGS = (
    "-c",
    (
        "import os, sys\n"
        "from spice.agent.coding._posix._supervisor import _main as supervisor\n"
        "os.close(int(sys.argv.pop(1)))\n"
        "supervisor.supervise(int(sys.argv[1]), int(sys.argv[2]))\n"
    ),
)
"""The supervisor run by its module name (coverage measures ``spice`` by module, and a
script runs as ``__main__``); ``argv`` is then ``-c CODE_FD SPEC_FD REPORT_FD``, and it
closes the sealed code's descriptor as ``BOOTSTRAP`` does. Inside the namespaces the file
system is read-only, so what a supervisor there measured is not saved (coverage's
``_exit`` patch ignores the failed save): the fallback path's runs measure its code."""


def measured_sources() -> list[str]:
    """The ``sys.path`` entries a measured supervisor imports from: the three ``spice``
    distributions' sources (an editable install: the checkout's ``src`` directories) and
    coverage's own."""
    import coverage  # noqa: PLC0415 - only under a measured run

    import spice.agent.coding  # noqa: PLC0415
    import spice.agent.process  # noqa: PLC0415
    import spice.agent.tools.coding  # noqa: PLC0415

    roots = [
        str(Path(module.__file__).resolve().parents[depth])
        for module, depth in (
            (spice.agent.coding, 3),
            (spice.agent.process, 3),
            (spice.agent.tools.coding, 4),
        )
        if module.__file__ is not None
    ]
    if coverage.__file__ is not None:
        roots.append(str(Path(coverage.__file__).resolve().parents[1]))
    return roots


def kept_visible(sources: list[str]) -> tuple[str, ...]:
    """The launcher's kept-visible places plus those of ``sources`` beneath ``/tmp``.

    With namespaces the call's private ``/tmp`` hides a checkout beneath ``/tmp``; the
    real supervisor needs none of it (its code comes from a sealed memory file), but a
    measured one imports ``spice`` by name from the checkout: in a clone under ``/tmp``
    every namespace-path start then ended without a word (``LaunchError``).
    """
    return (*launcher_module._KEPT_VISIBLE, *_bwrap.under_private_tmp(sources))


@pytest.fixture(scope="session", autouse=True)
def _measured_supervisor() -> Iterator[None]:
    """Let coverage see the supervisor when the run measures subprocesses."""
    config = os.environ.get(COVERAGE_VARIABLE)
    if not config:
        yield
        return
    saved = (launcher_module._SUPERVISOR_FLAGS, launcher_module._SUPERVISOR_ENVIRONMENT)
    launcher_module._SUPERVISOR_FLAGS = MEASURED_FLAGS
    launcher_module._SUPERVISOR_ENVIRONMENT = {COVERAGE_VARIABLE: config}
    # The launcher runs the resolved interpreter (the base Python behind the venv's link),
    # which knows neither the venv's packages nor coverage's .pth: the measured supervisor
    # imports ``spice``, so it runs on the venv's own interpreter.
    patch = pytest.MonkeyPatch()
    patch.setattr(launcher_module, "INTERPRETER", sys.executable)
    patch.setattr(launcher_module, "_KEPT_VISIBLE", kept_visible(measured_sources()))
    try:
        yield
    finally:
        patch.undo()
        launcher_module._SUPERVISOR_FLAGS, launcher_module._SUPERVISOR_ENVIRONMENT = saved


@pytest.fixture(autouse=True)
def _in_process_cli_adopts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process ``main`` (``call``, ``serve``) leaves this pytest process as it was.

    The real ``_platform.harden`` makes its process the subreaper of last resort and starts the
    orphans' reaper thread for the life of the process: in a test worker that thread
    outlived the test, opened ``/proc`` files while later tests counted descriptors, and
    swept every child of the worker that no launcher registered (two flaky failures in
    ``test_posix_launcher.py``: a descriptor counted, a join bounded by a sweep). The CLI's
    own subprocess tests run the real one.
    """
    monkeypatch.setattr(launcher_module, "adopt_orphans", lambda: False)


VISIBLE_BASE: Final = "/var/tmp"
"""Where ``visible_path`` makes its directory: a place a contained command sees. With
namespaces the host's ``/tmp`` (and so pytest's ``tmp_path``) is hidden behind the call's
private one, so a directory there outside the root is refused as missing, not as
read-only, and a cache there is written in the call's ``/tmp`` instead."""


@pytest.fixture
def visible_path() -> Iterator[Path]:
    """A fresh directory outside ``/tmp`` (resolved), removed after the test."""
    if not os.access(VISIBLE_BASE, os.W_OK):
        pytest.skip(f"{VISIBLE_BASE} is not writable here")
    base = Path(tempfile.mkdtemp(prefix="spice-test-", dir=VISIBLE_BASE)).resolve()
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def home(visible_path: Path) -> Path:
    """A scratch home beside the worktree, outside ``/tmp`` (the tests plant in it)."""
    path = visible_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def root(visible_path: Path) -> Path:
    """A worktree outside ``/tmp``, where a contained command sees the host's view of it (a
    module with a ``root`` of its own keeps it)."""
    path = visible_path / "root"
    path.mkdir()
    return path


LOOPBACK_MODULES: Final = frozenset(
    {
        "test_bridge.py",
        "test_contained_installs.py",
        "test_proxy.py",
        "test_proxy_contained.py",
        "test_proxy_tls.py",
        "test_relay.py",
        "test_http_app.py",
        "test_http_gate.py",
        "test_http_serve.py",
        "test_http_tokens.py",
    }
)
"""Modules whose every test talks over 127.0.0.1 (the rest ask ``loopback_reason`` where
they need it)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Bring ``lo`` up once, before any test, where this runs in a fresh network namespace
    (``make verify-offline``: as root it may); where it cannot, the loopback modules skip
    with the reason instead of failing one by one."""
    if not sys.platform.startswith("linux"):
        return
    import procutil  # noqa: PLC0415 - the tests' own helper, Linux-only parts

    reason = procutil.loopback_reason()
    if reason is None:
        return
    for item in items:
        if item.path.name in LOOPBACK_MODULES:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _process_lifetime_resources() -> None:
    """What the worker process opens once for its life, opened before any test runs.

    The supervisor's sealed code (``_code_fd``) is made on the first contained start and
    kept: made here, a test that compares descriptors before and after its subject sees
    the same whether it runs first, alone or last (review-round4 D2;
    ``procutil.LIFETIME_RESOURCES`` leaves it out of the comparison as well).
    """
    if sys.platform != "win32":
        launcher_module._code_fd()
