"""The three distributions' import graph, read from their sources with ``ast``: no cycle,
and modules and classes of a size a reader can hold (contract 11.4); the application's
platform folders are boundaries (contract 12.5): no cycle between folders, ``_platform``
the one door into ``_posix/`` and ``_windows/``, and nothing reachable from ``_windows/``
imports ``_posix/``.

Every import counts: at module level, inside a function (a lazy import), and under
``TYPE_CHECKING``; a cycle through any of them still ties the modules together. A name
taken from a package counts as an import of its ``__init__``; ``from . import _x`` counts
as an import of the module ``_x`` only (the package's ``__init__`` has run by then).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import pytest

import spice.agent.coding
import spice.agent.tool
import spice.agent.tools.coding


def _source_roots() -> list[Path]:
    """Each distribution's ``src`` directory (the one holding ``spice``)."""
    anchors = (spice.agent.tool, spice.agent.tools.coding, spice.agent.coding)
    roots: list[Path] = []
    for module in anchors:
        path = Path(module.__file__ or "").resolve()
        while path.name != "spice":
            path = path.parent
        roots.append(path.parent)
    return roots


def modules_of(roots: Iterable[Path]) -> dict[str, Path]:
    """Every module beneath ``roots``, by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(name: str, node: ast.ImportFrom, modules: Mapping[str, Path]) -> set[str]:
    """The modules of ``modules`` that one ``from ... import ...`` in ``name`` reaches."""
    package = name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
    if node.level:
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    reached: set[str] = set()
    for alias in node.names:
        if f"{target}.{alias.name}" in modules:  # ``from . import _x``: the module ``_x``
            reached.add(f"{target}.{alias.name}")
        elif target in modules:  # a name the module (or package ``__init__``) defines
            reached.add(target)
    return reached


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """``module -> the modules it imports`` (only modules of ``modules``)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                graph[name] |= _imported(name, node, modules)
        graph[name].discard(name)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def folders(graph: Mapping[str, set[str]], package: str) -> dict[str, set[str]]:
    """``graph`` with each module beneath a folder of ``package`` drawn as that folder.

    ``package.sub.mod`` becomes ``package.sub``; modules directly in ``package`` (and
    everything outside it) stay themselves. A folder's import of itself is dropped.
    """

    def room(name: str) -> str:
        if not name.startswith(package + "."):
            return name
        return ".".join(name.split(".")[: package.count(".") + 2])

    collapsed: dict[str, set[str]] = {}
    for name, imported in graph.items():
        collapsed.setdefault(room(name), set()).update(room(other) for other in imported)
    for name, imported in collapsed.items():
        imported.discard(name)
    return collapsed


def door_keepers(graph: Mapping[str, set[str]], folder: str) -> set[str]:
    """The modules outside ``folder`` that import a module inside it."""
    inside = folder + "."
    return {
        name
        for name, imported in graph.items()
        if not name.startswith(inside) and any(other.startswith(inside) for other in imported)
    }


def reachable(graph: Mapping[str, set[str]], starts: Iterable[str]) -> set[str]:
    """Every module that ``starts`` reach through imports (``starts`` included)."""
    seen: set[str] = set()
    pending = list(starts)
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending.extend(graph.get(name, ()))
    return seen


def _class_lengths(path: Path) -> dict[str, int]:
    """Each class's lines, from its first decorator to its last line."""
    lengths: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lengths[f"{path.name}:{node.name}"] = node.end_lineno - first + 1
    return lengths


# ---- the project --------------------------------------------------------------------------


def test_the_three_distributions_import_no_cycle() -> None:
    modules = modules_of(_source_roots())
    assert "spice.agent.coding._cli" in modules  # the scan sees the application
    assert "spice.agent.tools.coding._replace" in modules  # and the product
    assert [] == cycles(import_graph(modules))


APPLICATION: Final = "spice.agent.coding"
PLATFORM_DOOR: Final = frozenset({f"{APPLICATION}._platform"})
"""The one module outside the platform folders that may import them."""


def test_the_applications_folders_import_no_cycle() -> None:
    graph = folders(import_graph(modules_of(_source_roots())), APPLICATION)
    assert {f"{APPLICATION}._posix", f"{APPLICATION}._windows", f"{APPLICATION}._mcp"} <= set(graph)
    assert [] == cycles(graph)


@pytest.mark.parametrize("folder", ["_posix", "_windows"])
def test_only_the_platform_module_opens_a_platform_folder(folder: str) -> None:
    graph = import_graph(modules_of(_source_roots()))
    assert door_keepers(graph, f"{APPLICATION}.{folder}") <= PLATFORM_DOOR


def test_nothing_reachable_from_windows_imports_posix() -> None:
    graph = import_graph(modules_of(_source_roots()))
    starts = [name for name in graph if name.startswith(f"{APPLICATION}._windows.")]
    assert starts
    reached = reachable(graph, starts)
    assert set() == {name for name in reached if name.startswith(f"{APPLICATION}._posix.")}


LARGEST_CLASSES: Final = {
    "_journal.py:Journal": "the worktree's journal: commit, recover, history, undo, bounds",
    "_scan.py:_Scanner": "the unstaged join's scan: git directories first, then the rest",
    "_process.py:PosixProcess": "one started call: leader, report, streams, namespace, join",
    "_launcher.py:PosixLauncher": "holds what its one builder read (build); starts each call",
    "_proxy.py:CallProxy": "one call's proxy: its socket, its connections and their accounting",
}
"""The five longest classes with the one concern each owns (review-round4 D3; contract 13.5).
Sizes are no bound a test enforces: a class that grows into this list, or one of these that
changes its concern, is reviewed here, and split by concern rather than trimmed to fit."""


def test_the_longest_classes_are_the_reviewed_ones() -> None:
    lengths: dict[str, int] = {}
    for path in modules_of(_source_roots()).values():
        lengths |= _class_lengths(path)
    longest = sorted(lengths, key=lambda name: -lengths[name])[: len(LARGEST_CLASSES)]
    assert set(LARGEST_CLASSES) == set(longest)


# ---- the scan itself, on packages made here ------------------------------------------------


def _package(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Path]:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules_of([tmp_path])


def test_a_cycle_through_a_lazy_import_is_found(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/a.py": "from .b import x\n",
            "p/b.py": "def f():\n    from . import a\n",
        },
    )
    assert [["p.a", "p.b"]] == cycles(import_graph(modules))


def test_a_cycle_under_type_checking_across_packages_is_found(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/top.py": "from .sub import low\n",
            "p/sub/__init__.py": "",
            "p/sub/low.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import top\n"
            ),
        },
    )
    assert [["p.sub.low", "p.top"]] == cycles(import_graph(modules))


def test_a_chain_and_a_self_import_are_no_cycle(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "from . import a\n",
            "p/a.py": "import p.b\nfrom . import a\n",
            "p/b.py": "import os\nfrom .c import y\n",
            "p/c.py": "",
        },
    )
    graph = import_graph(modules)
    assert {"p.b"} == graph["p.a"]
    assert {"p.c"} == graph["p.b"]
    assert [] == cycles(graph)


def test_a_three_module_ring_is_one_cycle(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/a.py": "from . import b\n",
            "p/b.py": "from .c import z\n",
            "p/c.py": "import p.a\n",
            "p/d.py": "from . import a\n",
        },
    )
    assert [["p.a", "p.b", "p.c"]] == cycles(import_graph(modules))


def test_class_lengths_count_decorators(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import dataclasses\n\n@dataclasses.dataclass\nclass C:\n    x: int\n")
    assert {"m.py:C": 3} == _class_lengths(path)


def test_a_cycle_between_folders_is_found_where_modules_make_none(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/policy.py": "from .plat import low\n",
            "p/plat/__init__.py": "",
            "p/plat/low.py": "",
            "p/plat/high.py": "from .. import policy\n",
        },
    )
    graph = import_graph(modules)
    assert [] == cycles(graph)
    assert [["p.plat", "p.policy"]] == cycles(folders(graph, "p"))


def test_a_folder_importing_itself_and_outside_names_stay_apart(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/a.py": "",
            "p/sub/__init__.py": "",
            "p/sub/x.py": "from . import y\nfrom .. import a\n",
            "p/sub/y.py": "",
        },
    )
    collapsed = folders(import_graph(modules), "p")
    assert {"p.a"} == collapsed["p.sub"]
    assert [] == cycles(collapsed)


def test_the_door_and_reach_rules_see_a_second_door_and_a_way_round(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/door.py": "from .posix import a\n",
            "p/cli.py": "from .posix.a import f\n",
            "p/neutral.py": "from . import door\n",
            "p/posix/__init__.py": "",
            "p/posix/a.py": "",
            "p/win/__init__.py": "",
            "p/win/w.py": "from .. import neutral\n",
        },
    )
    graph = import_graph(modules)
    assert {"p.door", "p.cli"} == door_keepers(graph, "p.posix")
    assert "p.posix.a" in reachable(graph, ["p.win.w"])
    assert {"p.door"} == door_keepers({"p.door": {"p.posix.a"}, "p.posix.a": set()}, "p.posix")
