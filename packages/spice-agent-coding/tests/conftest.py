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
import sys
from collections.abc import Iterator

import pytest

from spice.agent.coding import _posix_launcher as launcher_module

COVERAGE_VARIABLE = "COVERAGE_PROCESS_CONFIG"
MEASURED_FLAGS = (
    "-c",
    (
        "import sys\n"
        "from spice.agent.coding import _posix_sandbox\n"
        "_posix_sandbox.supervise(int(sys.argv[2]), int(sys.argv[3]))\n"
    ),
)
"""The supervisor run by its module name (coverage measures ``spice`` by module, and a
script runs as ``__main__``); ``argv`` is then ``-c PATH SPEC_FD REPORT_FD``."""


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
    try:
        yield
    finally:
        patch.undo()
        launcher_module._SUPERVISOR_FLAGS, launcher_module._SUPERVISOR_ENVIRONMENT = saved
