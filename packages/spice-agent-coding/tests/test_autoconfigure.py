"""``spice.agent.tools.coding.autoconfigure``: the declarative fallback record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spice.agent.coding import PosixLauncher, PosixResolver
from spice.agent.starter import AutoConfiguration
from spice.agent.tool import Tool
from spice.agent.tools.coding import Config, autoconfigure
from spice.agent.tools.coding.autoconfigure import (
    default_read,
    default_replace,
    default_shell,
    spice_auto_configuration,
)


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_the_record_names_three_fallbacks_in_order() -> None:
    """read, replace, shell: each a fallback, none primary, each its default factory."""
    record = spice_auto_configuration()
    assert isinstance(record, AutoConfiguration)
    assert "docs/dependency-review.md" == record.review
    assert [
        ("read", default_read, True, False),
        ("replace", default_replace, True, False),
        ("shell", default_shell, True, False),
    ] == [(b.name, b.factory, b.fallback, b.primary) for b in record.beans]


def test_each_call_gives_an_equal_fresh_record() -> None:
    """The record is a value: equal each time, shared by nobody."""
    assert spice_auto_configuration() == spice_auto_configuration()


def test_the_factories_build_the_named_tools_without_touching_anything(tmp_path: Path) -> None:
    """Each default factory builds its tool for a root that does not exist, touching nothing."""
    config = Config(tmp_path / "missing")
    read, replace = default_read(config), default_replace(config)
    shell, cleanup = default_shell(config, PosixResolver(), PosixLauncher())
    assert ["read", "replace", "shell"] == [t.definition.name for t in (read, replace, shell)]
    assert all(isinstance(t, Tool) for t in (read, replace, shell))
    assert callable(cleanup)
    assert not (tmp_path / "missing").exists()


async def test_the_shell_cleanup_is_idempotent(tmp_path: Path) -> None:
    """The cleanup the shell factory hands back can run twice."""
    _, cleanup = default_shell(Config(tmp_path), PosixResolver(), PosixLauncher())
    await cleanup()
    await cleanup()


def test_importing_the_product_package_does_not_import_autoconfigure() -> None:
    """Importing spice.agent.tools.coding leaves the autoconfigure module unloaded."""
    code = (
        "import sys, spice.agent.tools.coding\n"
        "print('spice.agent.tools.coding.autoconfigure' in sys.modules)\n"
    )
    assert "False" == run_python(code)


def test_importing_autoconfigure_changes_no_global_state() -> None:
    """The import adds only the module itself: the product and starter namespaces are unchanged."""
    code = (
        "import spice.agent.tools.coding as c, spice.agent.starter as s\n"
        "before = (dict(vars(c)), dict(vars(s)))\n"
        "import spice.agent.tools.coding.autoconfigure as a\n"
        "after = (dict(vars(c)), dict(vars(s)))\n"
        "after[0].pop('autoconfigure')\n"
        "print(before == after)\n"
    )
    assert "True" == run_python(code)


def test_the_module_exports_exactly_its_four_names() -> None:
    """``__all__`` is the three factories and the record."""
    assert [
        "default_read",
        "default_replace",
        "default_shell",
        "spice_auto_configuration",
    ] == sorted(autoconfigure.__all__)
