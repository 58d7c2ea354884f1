"""What the platform-neutral tests need to say the same thing on POSIX and on Windows.

The behaviour under test is the same; the spelling is the platform's own: an absolute root
(``/r`` or ``C:\\r``), a command that exits with a code, the interpreter, the default
allowlist and the line ``auto`` writes where the shell is not contained (Windows).
"""

from __future__ import annotations

import io
import os
import sys
import zipfile
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding._netpolicy._hostconfig import HOST_VARIABLES
from spice.agent.coding._windows._launcher import AUTO_ON_WINDOWS
from spice.agent.tools.coding._config import DEFAULT_ENVIRONMENT_ALLOWLIST

WINDOWS: Final = sys.platform == "win32"

ANY_ROOT: Final = "C:\\r" if WINDOWS else "/r"
"""An absolute root that nothing opens (settings are only parsed)."""

DEFAULT_NAMES: Final = tuple(sorted({*DEFAULT_ENVIRONMENT_ALLOWLIST, *HOST_VARIABLES}))
"""The application's default allowlist: the product's four names (and on Windows the ones
a program needs to start) and the host's installer and CA variables (contract 12.2)."""

PYTHON: Final = os.path.normpath(sys.executable) if WINDOWS else "python3"
"""A Python ``argv[0]`` the shell finds: ``python3`` in PATH, or this interpreter's path."""


def auto_warning() -> str:
    """What ``--sandbox auto`` writes to stderr on this platform: the Windows warning line, or
    nothing (these tests' POSIX machines have Landlock)."""
    return f"spice-coding: {AUTO_ON_WINDOWS}\n" if WINDOWS else ""


def exits_with(code: int) -> list[str]:
    """An argv that exits with ``code`` through the platform's own command interpreter."""
    return ["cmd", "/c", f"exit {code}"] if WINDOWS else ["sh", "-c", f"exit {code}"]


def succeeds() -> list[str]:
    """An argv that exits 0."""
    return ["cmd", "/c", "exit 0"] if WINDOWS else ["true"]


def prints_and_exits(out: str, err: str, code: int) -> list[str]:
    """An argv that writes ``out`` and ``err`` lines then exits with ``code``."""
    if WINDOWS:
        return ["cmd", "/c", f"echo {out}& echo {err} 1>&2& exit {code}"]
    return ["sh", "-c", f"echo {out}; echo {err} >&2; exit {code}"]


def windows_program(source: str) -> bytes:
    """An ``.exe`` that runs Python ``source``: a console script as pip writes one (the
    launcher of this environment's ``spice-coding.exe``, a shebang naming this interpreter,
    a zip with ``__main__.py``). A batch file would not do: the launcher refuses them."""
    installed = (Path(sys.executable).parent / "spice-coding.exe").read_bytes()
    cut = installed.rfind(b'#!"')
    if cut < 0:
        pytest.skip("spice-coding.exe is not a pip console script (no launcher to copy)")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("__main__.py", source)
    return installed[:cut] + f'#!"{sys.executable}"\r\n'.encode() + archive.getvalue()
