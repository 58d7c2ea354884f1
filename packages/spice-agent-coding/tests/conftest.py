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
        "import os, sys\n"
        "from spice.agent.coding import _posix_sandbox\n"
        "code = int(sys.argv.pop(1))\n"
        "os.set_inheritable(code, False)\n"
        "setattr(_posix_sandbox, _posix_sandbox.CODE_FD_GLOBAL, code)\n"
        "_posix_sandbox.supervise(int(sys.argv[1]), int(sys.argv[2]))\n"
    ),
)
"""The supervisor run by its module name (coverage measures ``spice`` by module, and a
script runs as ``__main__``); ``argv`` is then ``-c CODE_FD SPEC_FD REPORT_FD``. As
``BOOTSTRAP`` does, it keeps the sealed code's descriptor for the namespaces' inner stage
(which runs unmeasured, from that code)."""


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
