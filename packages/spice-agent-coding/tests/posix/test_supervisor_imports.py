"""The supervisor's folder imports the standard library and itself only (contract 13.5).

``_posix/_supervisor/`` runs in the per-call supervisor's own process under ``python -I -S``
from a sealed memory file (contract 10.1): nothing of the server, no third-party module
and no ``site`` is there. Each module's imports are read from its syntax tree, the lazy and
type-checking ones too, so a new import anywhere in the file is seen.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Final

import pytest

from spice.agent.coding._posix import _launcher
from spice.agent.coding._posix import _supervisor as folder

FOLDER: Final = Path(folder.__file__).parent
MODULES: Final = tuple(
    sorted(path.stem for path in FOLDER.glob("_*.py") if path.stem != "__init__")
)


def imports_outside(source: str, siblings: frozenset[str]) -> set[str]:
    """The top names a module's source imports that are neither the standard library nor
    one of ``siblings`` (the folder's modules, as the relative or the flat import names
    them); ``__future__`` counts as the standard library."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:
                names = [alias.name for alias in node.names]
            elif node.level == 1:
                names = [node.module or ""]
            elif node.level > 1:
                found.add("." * node.level + (node.module or ""))
                continue
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in siblings or top in sys.stdlib_module_names:
                continue
            found.add(name)
    return found


def test_the_folder_holds_what_the_launcher_runs() -> None:
    """Every module the launcher compiles is in the folder, and nothing else is."""
    assert set(_launcher.SUPERVISOR_MODULES) == set(MODULES)
    assert _launcher.SUPERVISOR_MODULES[-1] == "_main"


@pytest.mark.parametrize("module", MODULES)
def test_a_supervisor_module_imports_only_the_standard_library(module: str) -> None:
    source = (FOLDER / f"{module}.py").read_text(encoding="utf-8")
    assert imports_outside(source, frozenset(MODULES)) == set()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\nfrom . import _seccomp as seccomp\n", set()),
        ("import _landlock\n", set()),
        ("from .. import _plan\n", {".."}),
        ("from ..._mcp import _json\n", {"..._mcp"}),
        ("def f():\n    import spice.agent.process\n", {"spice.agent.process"}),
        ("if TYPE_CHECKING:\n    from typing_extensions import Self\n", {"typing_extensions"}),
        ("from ._rogue import x\n", {"_rogue"}),
    ],
)
def test_the_check_sees_an_import_from_outside(source: str, expected: set[str]) -> None:
    """The check itself: a server module, a third-party one, a lazy or type-checking one,
    or a module not in the folder is found; the standard library and siblings are not."""
    assert imports_outside(source, frozenset({"_seccomp", "_landlock"})) == expected
