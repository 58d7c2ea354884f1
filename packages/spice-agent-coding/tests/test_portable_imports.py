"""No POSIX-only name is read at import, on any platform (contract 10.4).

Every module of the three distributions is imported in a fresh interpreter from which the
names Windows CPython lacks (``data/posix-only-names.json``: ``os.O_DIRECTORY``,
``os.pread``, ``signal.SIGHUP``, ``select.poll``, ...) have been removed and in which the
POSIX-only modules (``fcntl``, ``termios``, ...) cannot be imported, nor ``CDLL(None)``
made. The standard library and the third-party packages are imported first, with every
name present, so that only our modules' own import-time code is judged. Under Windows
Python the names are absent anyway, so the same test shows the imports work there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

import spice.agent

TIMEOUT_SECONDS: Final = 120
NAMES_FILE: Final = Path(__file__).parent / "data" / "posix-only-names.json"
POSIX_ONLY_MODULES: Final = ("fcntl", "termios", "resource", "pwd", "grp", "pty", "tty")

PROBE: Final = """
import importlib, json, sys
names, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for module in modules:                       # first, everything with the names present
    importlib.import_module(module)
roots = {{module.partition(".")[0] for module in modules}}
ours = [name for name in sys.modules if name.partition(".")[0] in roots]
for name in ours:
    del sys.modules[name]
removed = 0
for module_name, attributes in names.items():
    module = importlib.import_module(module_name)
    for attribute in attributes:
        if hasattr(module, attribute):
            delattr(module, attribute)
            removed += 1
for blocked in {blocked!r}:
    sys.modules[blocked] = None              # `import fcntl` now raises ImportError
import ctypes
_load = ctypes.CDLL.__init__
def _no_process_library(self, name, *arguments, **options):
    if name is None:                         # Windows has no CDLL(None): a TypeError there
        raise TypeError("argument of type 'NoneType' is not iterable")
    _load(self, name, *arguments, **options)
ctypes.CDLL.__init__ = _no_process_library
failed = {{}}
for module in modules:
    try:
        importlib.import_module(module)
    except Exception as error:
        failed[module] = f"{{type(error).__name__}}: {{error}}"
print(json.dumps({{"removed": removed, "failed": failed}}))
"""


def _names() -> dict[str, list[str]]:
    document = json.loads(NAMES_FILE.read_text(encoding="utf-8"))
    return {module: names for module, names in document.items() if not module.startswith("_")}


def _our_modules() -> list[str]:
    """Every module of the three distributions, found by their files.

    (``pkgutil`` does not descend into namespace packages such as ``spice.agent.tools``.)
    """
    found: set[str] = set()
    for directory in spice.agent.__path__:
        base = Path(directory).parent.parent  # .../src
        for file in Path(directory).rglob("*.py"):
            parts = file.relative_to(base).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(found)


def _run(modules: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE.format(blocked=POSIX_ONLY_MODULES),
            json.dumps(_names()),
            json.dumps(modules),
        ],
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert 0 == done.returncode, done.stderr.decode(errors="replace")[-2000:]
    report: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return report


def test_the_names_file_lists_what_windows_lacks() -> None:
    names = _names()
    assert {"os", "signal", "select"} == set(names)
    for required in ("O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "pread", "WNOHANG", "fork"):
        assert required in names["os"]
    assert {"SIGHUP", "SIGCHLD", "SIGKILL"} <= set(names["signal"])
    # Names Windows has are never listed (else the test would remove too much).
    for present in ("O_RDONLY", "open", "getpid", "replace"):
        assert present not in names["os"]
    assert {"SIGTERM", "SIGINT"}.isdisjoint(names["signal"])


def test_every_module_is_found() -> None:
    modules = _our_modules()
    for expected in (
        "spice.agent.tool",
        "spice.agent.process",
        "spice.agent.tools.coding._root",
        "spice.agent.tools.coding._read",
        "spice.agent.coding._cli",
        "spice.agent.coding._mcp._stdio",
        "spice.agent.coding._posix._launcher",
        "spice.agent.coding._posix._supervisor._landlock",
        "spice.agent.coding._posix._supervisor._main",
        "spice.agent.coding._posix._supervisor._tmpdir",
        "spice.agent.coding._windows._launcher",
        "spice.agent.coding._windows._resolver",
    ):
        assert expected in modules


def test_every_module_imports_without_the_posix_only_names() -> None:
    report = _run(_our_modules())
    assert {} == report["failed"]
    if sys.platform != "win32":
        # The names really were there to remove: the test is not vacuous on POSIX.
        assert isinstance(report["removed"], int)
        assert report["removed"] > 50


@pytest.mark.skipif(sys.platform == "win32", reason="the names are absent on Windows anyway")
def test_a_module_that_reads_a_posix_only_name_at_import_is_caught(tmp_path: Path) -> None:
    """The negative side: a module reading ``os.O_DIRECTORY`` at import is reported."""
    package = tmp_path / "spice_probe_bad"
    package.mkdir()
    (package / "__init__.py").write_text("import os\nFLAGS = os.O_DIRECTORY\n", encoding="utf-8")
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE.format(blocked=POSIX_ONLY_MODULES),
            json.dumps(_names()),
            json.dumps(["spice_probe_bad"]),
        ],
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
        env=environment,
    )
    report = json.loads(done.stdout.decode().splitlines()[-1])
    assert ["spice_probe_bad"] == list(report["failed"])
    assert "O_DIRECTORY" in report["failed"]["spice_probe_bad"]
    # Only the child lost the names.
    assert hasattr(os, "O_DIRECTORY")
    assert hasattr(signal, "SIGHUP")
