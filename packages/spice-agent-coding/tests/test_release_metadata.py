"""``spice-release.json`` is inert, canonical, and agrees with every ``pyproject.toml``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]
RELEASE_FILE = REPOSITORY / "spice-release.json"


def _release() -> dict[str, object]:
    loaded = json.loads(RELEASE_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _distributions() -> list[dict[str, str]]:
    listed = _release()["distributions"]
    assert isinstance(listed, list)
    return listed


def test_release_file_is_canonical_json() -> None:
    """The file is exactly its canonical form: sorted keys, two-space indent, final newline."""
    text = RELEASE_FILE.read_text(encoding="utf-8")
    assert json.dumps(_release(), indent=2, sort_keys=True) + "\n" == text


def test_release_file_names_the_profile_and_schema() -> None:
    """The profile and schema version are the ones this repository publishes under."""
    release = _release()
    assert ("python-distribution-v1", 1) == (release["profile"], release["schema_version"])


def test_release_lists_every_workspace_member() -> None:
    """Every package folder is listed once, and nothing else is."""
    on_disk = sorted(p.name for p in (REPOSITORY / "packages").iterdir() if p.is_dir())
    assert on_disk == sorted(d["name"] for d in _distributions())


@pytest.mark.parametrize("entry", _distributions(), ids=lambda e: e["name"])
def test_each_pyproject_agrees_with_the_release_file(entry: dict[str, str]) -> None:
    """Name, the one version, and the Python floor match the distribution's pyproject."""
    project = tomllib.loads((REPOSITORY / entry["path"] / "pyproject.toml").read_text())["project"]
    release = _release()
    assert (entry["name"], release["version"], release["python"]) == (
        project["name"],
        project["version"],
        project["requires-python"],
    )
    assert entry["version"] == release["version"]


@pytest.mark.parametrize("entry", _distributions(), ids=lambda e: e["name"])
def test_members_pin_each_other_exactly(entry: dict[str, str]) -> None:
    """A member's dependency on another member is an exact pin on the one version."""
    members = {d["name"] for d in _distributions()}
    project = tomllib.loads((REPOSITORY / entry["path"] / "pyproject.toml").read_text())["project"]
    version = _release()["version"]
    for requirement in project["dependencies"]:
        name = requirement.split("=")[0].split(">")[0].split("<")[0].strip()
        if name in members:
            assert f"{name}=={version}" == requirement
