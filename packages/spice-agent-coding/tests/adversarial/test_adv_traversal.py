"""The traversal corpus against read, replace (both modes) and the shell workdir.

Each case of ``tests/data/traversal_corpus.json`` runs once per applicable tool, through
the ``Dispatcher`` and through the MCP server in process. Beyond the expected code, every
answer is checked for what must never happen: an outside file read or changed, a file
created outside the root, a temporary file left behind, a machine path, the run's canary
or a traceback in any text, a shell that ran outside the root.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final

import pytest
from adv_corpus import (
    INSIDE_PREFIX,
    PATH_MAX,
    SENTINEL_PREFIX,
    TOOLS,
    Case,
    build_corpus,
    dump,
    load_corpus,
    materialize,
)
from adv_support import (
    Answer,
    Route,
    decoded_content,
    dispatcher_route,
    leaks,
    mcp_route,
    new_canary,
    sha256_of_file,
    snapshot,
    temporary_files,
    without_named_root,
    without_output,
)

from spice.agent.tools.coding import Config

CORPUS: Final = load_corpus()
MINIMUM_CASES: Final = 200
NEW_CONTENT: Final = "written by the adversarial corpus\n"
ROOT_NAMES: Final = ("root", "root-moved", "root-old")
"""Base entries the outside snapshot skips: the root and where it may be moved to."""

RouteFactory = Callable[[Config], AbstractAsyncContextManager[Route]]
PAIRS: Final = [
    pytest.param(case, tool, id=f"{case['id']}-{tool}")
    for case in CORPUS
    for tool in TOOLS
    if tool in case["tools"]
]


def _path(case: Case, base: Path) -> str:
    return case["path"].replace("{base}", os.fspath(base))


def _arguments(tool: str, path: str, root: Path) -> tuple[str, dict[str, Any]]:
    if tool == "read":
        return "read", {"path": path}
    if tool == "replace-create":
        return "replace", {"path": path, "content": NEW_CONTENT, "create": True}
    if tool == "replace-expected":
        digest = sha256_of_file(os.path.join(root, path))
        return "replace", {"path": path, "content": NEW_CONTENT, "expected_sha256": digest}
    return "shell", {"argv": ["pwd", "-P"], "workdir": path}


def _warm_up(tool: str) -> tuple[str, dict[str, Any]]:
    """A call of the same tool that succeeds, so the next one is "between calls"."""
    if tool == "read":
        return "read", {"path": "file.txt"}
    if tool.startswith("replace"):
        return "replace", {"path": "warm-up.txt", "content": "", "create": True}
    return "shell", {"argv": ["pwd", "-P"], "workdir": "."}


def _between(case: Case, base: Path) -> None:
    action = case.get("between", "")
    if action == "rename_root":
        (base / "root").rename(base / "root-moved")
    elif action == "delete_root":
        shutil.rmtree(base / "root")
    elif action == "swap_root_for_link":
        (base / "root").rename(base / "root-old")
        (base / "root").symlink_to("outside")


def _within(path: str, directory: Path) -> bool:
    real = os.path.realpath(directory)
    return path == real or path.startswith(real + os.sep)


def _check_success(case: Case, tool: str, answer: Answer, base: Path, path: str) -> None:
    """What a success must have done, and only there."""
    root = base / "root"
    if tool == "read":
        data = decoded_content(answer.content)
        if case.get("reads_outside"):
            assert data.startswith(SENTINEL_PREFIX)
        else:
            assert data.startswith(INSIDE_PREFIX)
    elif tool.startswith("replace"):
        if len(os.fsencode(path)) >= PATH_MAX // 2:
            assert NEW_CONTENT.encode() == _read_long(root, path)
            return
        target = os.path.realpath(os.path.normpath(os.path.join(root, path)))
        assert _within(target, root) or case.get("between") == "swap_root_for_link"
        assert NEW_CONTENT.encode() == Path(target).read_bytes()
    else:
        printed = decoded_content(answer.content, "stdout").decode().strip()
        assert _within(printed, root)
        assert not _within(printed, base / "outside")


def _read_long(root: Path, path: str) -> bytes:
    """Read a file whose absolute path is too long for one system call (no links on it)."""
    parts = os.path.normpath(path).split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(leaf, "rb") as file:
        return file.read()


async def run_case(case: Case, tool: str, base: Path, factory: RouteFactory) -> None:
    """Lay the case out under ``base``, send it on one route, and check everything."""
    canary = new_canary("file")
    materialize(case, base, canary)
    config = Config(base / case["root"], command_timeout=30)
    async with factory(config) as route:
        if "between" in case:
            name, arguments = _warm_up(tool)
            assert "ok" == (await route(name, arguments)).code
            _between(case, base)
        before = snapshot(base, ROOT_NAMES)
        path = _path(case, base)
        name, arguments = _arguments(tool, path, base / case["root"])
        answer = await route(name, arguments)
    _verify(case, tool, base, canary, (before, answer, path, arguments))


def _verify(
    case: Case,
    tool: str,
    base: Path,
    canary: str,
    seen: tuple[dict[str, tuple[str, bytes]], Answer, str, dict[str, Any]],
) -> None:
    """Everything one answer must (and must not) be, and the disk around it."""
    before, answer, path, arguments = seen
    allowed = [case["tools"][tool], *case.get("also", {}).get(tool, [])]
    assert answer.code in allowed, (case["tools"][tool], answer.code, answer.content)
    forbidden = [os.fspath(base), os.path.realpath(base)]
    if not (answer.ok and tool == "read" and case.get("reads_outside")):
        forbidden.append(canary)
    visible = without_output(answer) if tool == "shell-workdir" else answer
    visible = without_named_root(visible, os.fspath(base / case["root"]))
    assert [] == leaks(visible, forbidden, json.dumps(arguments, ensure_ascii=False))
    assert [] == temporary_files(base)
    if case.get("between") != "swap_root_for_link":
        assert before == snapshot(base, ROOT_NAMES)
    if answer.ok:
        _check_success(case, tool, answer, base, path)


def test_the_data_file_is_what_the_generator_writes() -> None:
    """The committed corpus matches its generator, so the two never drift apart."""
    assert dump(build_corpus()) == dump(CORPUS)


def test_the_corpus_is_large_and_every_case_names_its_codes() -> None:
    """At least 200 cases, unique ids, and an expected code for each listed tool."""
    ids = [case["id"] for case in CORPUS]
    assert len(ids) >= MINIMUM_CASES
    assert len(ids) == len(set(ids))
    assert all(set(case["tools"]) <= set(TOOLS) and case["tools"] for case in CORPUS)


@pytest.mark.parametrize(("case", "tool"), PAIRS)
async def test_a_corpus_path_gets_its_code_through_the_dispatcher(
    case: Case, tool: str, tmp_path: Path
) -> None:
    """Through the Dispatcher the path gets its code and nothing outside is touched."""
    await run_case(case, tool, tmp_path, dispatcher_route)


@pytest.mark.parametrize(("case", "tool"), PAIRS)
async def test_a_corpus_path_gets_its_code_through_the_mcp_server(
    case: Case, tool: str, tmp_path: Path
) -> None:
    """Through the MCP server in process the path gets the same code and leaks nothing."""
    await run_case(case, tool, tmp_path, mcp_route)


def _codes(cases: list[Case]) -> Mapping[str, int]:
    counts: dict[str, int] = {}
    for case in cases:
        for code in case["tools"].values():
            counts[code] = counts.get(code, 0) + 1
    return counts


def test_the_corpus_covers_every_confinement_code() -> None:
    """Each code of the confinement rules is expected somewhere in the corpus."""
    counts = _codes(CORPUS)
    for code in ("ok", "invalid_arguments", "path_escape", "not_regular", "not_found"):
        assert counts.get(code, 0) > 0, code
