"""The shell's ``dry_run`` (contract 13.2): decoded, refused where the launcher cannot run
a command dry (before anything starts), and routed to the launcher's dry start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeLauncher, FakeResolver, content_of, shell_call

from spice.agent.process import Process, Spec
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._arguments import ArgumentError
from spice.agent.tools.coding._shell import build_shell
from spice.agent.tools.coding._shell_arguments import parse, schema
from spice.agent.tools.coding._shell_description import DRY_RUN
from spice.agent.tools.coding._shell_launcher import DryRunLauncher, launcher_dry_runs


class DryLauncher:
    """A fake launcher that can run dry while ``staged``; records which start was used."""

    def __init__(self, *, staged: object = True, failing: bool = False) -> None:
        self._inner = FakeLauncher()
        self._staged = staged
        self._failing = failing
        self.dry: list[Spec] = []

    @property
    def specs(self) -> list[Spec]:
        return self._inner.specs

    async def start(self, spec: Spec) -> Process:
        return await self._inner.start(spec)

    @property
    def staged(self) -> bool:
        if self._failing:
            raise RuntimeError("a failing property")
        return self._staged  # type: ignore[return-value]

    async def start_dry_run(self, spec: Spec) -> Process:
        self.dry.append(spec)
        return await self._inner.start(spec)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, False),
        ({"dry_run": None}, False),
        ({"dry_run": False}, False),
        ({"dry_run": True}, True),
    ],
)
def test_dry_run_is_decoded(tmp_path: Path, given: dict[str, object], expected: bool) -> None:
    arguments = parse(json.dumps({"argv": ["true"], **given}), Config(tmp_path))
    assert arguments.dry_run is expected


@pytest.mark.parametrize("value", [1, "true", [], {}])
def test_a_dry_run_that_is_no_boolean_is_refused(tmp_path: Path, value: object) -> None:
    with pytest.raises(ArgumentError, match="dry_run"):
        parse(json.dumps({"argv": ["true"], "dry_run": value}), Config(tmp_path))


def test_the_schema_declares_dry_run(tmp_path: Path) -> None:
    properties = schema(Config(tmp_path))["properties"]
    assert isinstance(properties, dict)
    assert properties["dry_run"]["type"] == ["boolean", "null"]


@pytest.mark.parametrize(
    ("launcher", "expected"),
    [
        (FakeLauncher(), False),
        (DryLauncher(staged=False), False),
        (DryLauncher(staged=1), False),
        (DryLauncher(failing=True), False),
        (DryLauncher(), True),
    ],
)
def test_only_a_staged_dry_launcher_runs_dry(launcher: object, expected: bool) -> None:
    assert launcher_dry_runs(launcher) is expected


async def test_a_dry_run_without_a_dry_launcher_is_refused_before_any_start(
    tmp_path: Path,
) -> None:
    launcher = FakeLauncher()
    tool, _ = build_shell(Config(tmp_path), FakeResolver(), launcher, posix=True)
    content = content_of(await tool.execute(shell_call({"argv": ["true"], "dry_run": True})))
    assert (content["ok"], content["code"]) == (False, "invalid_arguments")
    assert "dry_run" in str(content["message"])
    assert launcher.specs == []
    assert DRY_RUN not in tool.definition.description


async def test_a_dry_run_goes_to_the_launchers_dry_start(tmp_path: Path) -> None:
    launcher = DryLauncher()
    assert isinstance(launcher, DryRunLauncher)
    tool, _ = build_shell(Config(tmp_path), FakeResolver(), launcher, posix=True)
    assert DRY_RUN in tool.definition.description
    content = content_of(await tool.execute(shell_call({"argv": ["true"], "dry_run": True})))
    assert content["ok"] is True
    assert len(launcher.dry) == 1
    content = content_of(await tool.execute(shell_call({"argv": ["true"]})))
    assert content["ok"] is True
    assert (len(launcher.dry), len(launcher.specs)) == (1, 2)
