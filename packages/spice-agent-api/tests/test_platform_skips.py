"""The list of POSIX-only tests names what exists, and tests/posix/ is POSIX-only whole.

Round 6's CI failed under Wine on a module moved into ``tests/posix/`` that nobody listed;
the directory rule closes that class: a module's place says it, no list has to follow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import platform_skips
import pytest

PACKAGES: Final = Path(__file__).resolve().parents[2]
TEST_MODULES: Final = tuple(PACKAGES.glob("*/tests/**/test_*.py"))


def test_every_module_beneath_tests_posix_is_posix_only() -> None:
    beneath = [path for path in TEST_MODULES if path.parent.name == "posix"]
    assert beneath, "the tests/posix/ directory holds test modules"
    for path in beneath:
        assert platform_skips._posix_only(path) == platform_skips.POSIX_TREE, path


def test_a_portable_module_is_not_posix_only_and_a_listed_one_is() -> None:
    portable = PACKAGES / "spice-agent-api" / "tests" / "test_dispatch.py"
    assert platform_skips._posix_only(portable) is None
    listed = PACKAGES / "spice-agent-tools-coding" / "tests" / "test_read.py"
    assert platform_skips._posix_only(listed) == platform_skips.ROOT


def test_a_directory_named_posix_elsewhere_is_not_taken_for_the_tree(tmp_path: Path) -> None:
    elsewhere = tmp_path / "src" / "posix" / "test_x.py"
    assert platform_skips._posix_only(elsewhere) is None


@pytest.mark.parametrize("name", sorted(platform_skips.POSIX_ONLY_MODULES))
def test_every_listed_module_exists_outside_the_posix_tree(name: str) -> None:
    found = [path for path in TEST_MODULES if path.name == name]
    assert found, f"{name} is listed as POSIX-only but no such test module exists"
    assert all(path.parent.name != "posix" for path in found), f"{name}: its place says it"


@pytest.mark.parametrize("node", sorted(platform_skips.POSIX_ONLY_TESTS))
def test_every_listed_test_names_an_existing_module_and_function(node: str) -> None:
    module, _, function = node.partition("::")
    path = PACKAGES.parent / module
    assert path.is_file(), node
    assert f"def {function}(" in path.read_text(encoding="utf-8"), node
