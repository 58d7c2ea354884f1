"""Schemas and descriptions of ``read`` and ``shell`` that real clients accept (contract 9.3).

Optional properties are nullable and ``null`` means absent; the schemas survive a client's
"strict" conversion (every property required, no additional properties) and use only
keywords strict clients accept; descriptions state every default and bound in the
configured numbers, the PATH-only lookup and the allow-listed variables by name, within
``MAXIMUM_MESSAGE_BYTES``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
from pathlib import Path
from typing import Final

import pytest
from fakes import FakeLauncher, FakeResolver, content_of, shell_call
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.process import Process, Spec
from spice.agent.tool import MAXIMUM_MESSAGE_BYTES, Call, Definition, Tool
from spice.agent.tools.coding import Config, new_read, new_replace
from spice.agent.tools.coding._shell import build_shell
from spice.agent.tools.coding._shell_description import (
    MAXIMUM_ARGV_BYTES,
    MAXIMUM_ARGV_ITEMS,
    UNCONFINED,
)
from spice.agent.tools.coding._shell_launcher import (
    MAXIMUM_CONTAINMENT_BYTES,
    launcher_containment,
)

STRICT_KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "description",
        "enum",
        "const",
        "anyOf",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "pattern",
        "format",
    }
)
"""The JSON Schema keywords strict-schema clients (OpenAI structured outputs) accept."""

OPTIONAL: Final = {
    "read": ("offset", "limit"),
    "replace": ("content", "create", "edits", "encoding", "expected_sha256"),
    "shell": ("workdir", "timeout_seconds", "dry_run"),
}


def shell_tool(root: Path, launcher: object | None = None, **config: object) -> Tool:
    """A shell over fakes."""
    tool, _ = build_shell(
        Config(root, **config),  # type: ignore[arg-type]
        FakeResolver(),
        launcher or FakeLauncher(),  # type: ignore[arg-type]
        posix=True,
    )
    return tool


def real(path: Path) -> str:
    """``path`` with its symlinks resolved (what the launcher is given)."""
    return str(path.resolve())


def schema_of(definition: Definition) -> dict[str, object]:
    """The definition's input schema as a dict."""
    value = json.loads(definition.input_schema)
    assert isinstance(value, dict)
    return value


def strict(schema: dict[str, object]) -> dict[str, object]:
    """What a strict-schema client makes of a schema: every property required, no others."""
    converted = copy.deepcopy(schema)
    properties = converted.get("properties")
    if isinstance(properties, dict):
        converted["required"] = list(properties)
        converted["additionalProperties"] = False
    return converted


def keywords(schema: object) -> set[str]:
    """Every keyword used anywhere in ``schema`` (property names excluded)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key == "properties" and isinstance(value, dict):
                for inner in value.values():
                    found |= keywords(inner)
            elif key in {"items", "anyOf"}:
                found |= keywords(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= keywords(item)
    return found


def definitions(root: Path) -> dict[str, Definition]:
    """The three definitions, for ``root``."""
    return {
        "read": new_read(Config(root)).definition,
        "replace": new_replace(Config(root)).definition,
        "shell": shell_tool(root).definition,
    }


# -- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["read", "replace", "shell"])
def test_every_optional_property_is_nullable(tmp_path: Path, name: str) -> None:
    """Optional properties admit ``null``; required ones do not."""
    schema = schema_of(definitions(tmp_path)[name])
    properties = schema["properties"]
    assert isinstance(properties, dict)
    required = schema["required"]
    assert isinstance(required, list)
    assert set(OPTIONAL[name]) == set(properties) - set(required)
    for property_name, entry in properties.items():
        nullable = isinstance(entry["type"], list) and "null" in entry["type"]
        assert nullable == (property_name in OPTIONAL[name]), property_name


@pytest.mark.parametrize("name", ["read", "replace", "shell"])
def test_the_schemas_use_only_keywords_strict_clients_accept(tmp_path: Path, name: str) -> None:
    """No ``default``, ``minLength`` or other keyword a strict client refuses."""
    schema = strict(schema_of(definitions(tmp_path)[name]))
    assert set() == keywords(schema) - STRICT_KEYWORDS
    assert schema["additionalProperties"] is False


def test_a_strict_keyword_check_catches_a_default() -> None:
    """The keyword walk sees nested keywords (so the test above can fail)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer", "default": 0}}}
    assert {"default"} == keywords(schema) - STRICT_KEYWORDS


async def test_read_with_every_optional_property_null_is_the_default_read(
    tmp_path: Path,
) -> None:
    """What a strict client sends (``null`` for the unused) reads like the bare call."""
    (tmp_path / "f").write_bytes(b"hello\n")
    tool = new_read(Config(tmp_path))
    bare = await tool.execute(Call("1", "read", '{"path": "f"}'))
    nulls = await tool.execute(Call("1", "read", '{"path": "f", "offset": null, "limit": null}'))
    assert bare.content == nulls.content
    assert content_of(nulls)["ok"] is True


async def test_shell_with_every_optional_property_null_runs_in_the_root(tmp_path: Path) -> None:
    """``workdir: null`` is the root and ``timeout_seconds: null`` the configured timeout."""
    launcher = FakeLauncher()
    tool, _ = build_shell(Config(tmp_path), FakeResolver(), launcher, posix=True)
    arguments = {"argv": ["true"], "workdir": None, "timeout_seconds": None}
    content = content_of(await tool.execute(shell_call(arguments)))
    assert (True, ".") == (content["ok"], content["workdir"])
    assert real(tmp_path) == launcher.specs[0].working_directory


@pytest.mark.parametrize(
    "arguments",
    [{"path": None}, {"path": None, "offset": None, "limit": None}, {"offset": 0}],
)
async def test_a_required_property_given_as_null_is_missing(
    tmp_path: Path, arguments: dict[str, object]
) -> None:
    """``null`` for ``path`` is no path at all: invalid_arguments."""
    tool = new_read(Config(tmp_path))
    content = content_of(await tool.execute(Call("1", "read", json.dumps(arguments))))
    assert "invalid_arguments" == content["code"]


@given(
    offset=st.one_of(st.none(), st.just("absent"), st.integers(0, 12)),
    limit=st.one_of(st.none(), st.just("absent"), st.integers(1, 12)),
)
@settings(max_examples=60, deadline=None)
def test_null_and_absent_give_the_same_page(
    offset: int | str | None, limit: int | str | None
) -> None:
    """For every mix of absent, null and set optional properties, null acts as absent."""
    with_nulls: dict[str, object] = {"path": "f"}
    without: dict[str, object] = {"path": "f"}
    for key, value in (("offset", offset), ("limit", limit)):
        if value != "absent":
            with_nulls[key] = value
            if value is not None:
                without[key] = value
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "f").write_bytes(b"0123456789")
        tool = new_read(Config(scratch))

        async def both() -> tuple[str, str]:
            first = await tool.execute(Call("1", "read", json.dumps(with_nulls)))
            second = await tool.execute(Call("1", "read", json.dumps(without)))
            return first.content, second.content

        first, second = asyncio.run(both())
    assert first == second


# -- descriptions: numbers, names, bounds --------------------------------------------------------


def test_the_read_description_and_schema_state_the_configured_page(tmp_path: Path) -> None:
    """The configured page size is the limit's default and maximum, in numbers."""
    definition = new_read(Config(tmp_path, max_read_bytes=12_345)).definition
    limit = schema_of(definition)["properties"]["limit"]  # type: ignore[index]
    assert 12_345 == limit["maximum"]
    assert "default and maximum 12345" in definition.description
    assert "default 12345" in limit["description"]
    assert "default 0" in definition.description
    assert "absolute beneath it" in definition.description


def test_the_shell_description_states_every_bound_in_configured_numbers(tmp_path: Path) -> None:
    """Timeout default and maximum, output bound, argv limits: the configured numbers."""
    tool = shell_tool(tmp_path, command_timeout=7.5, max_output_bytes=4_096)
    text = tool.definition.description
    for fragment in (
        "default 7.5, at most 7.5",
        "at most 4096 bytes of stdout and stderr together",
        f"1 to {MAXIMUM_ARGV_ITEMS} non-empty strings",
        f"at most {MAXIMUM_ARGV_BYTES} bytes",
        "looked up in PATH only",
        "./name",
        "absolute beneath it",
        "command_failed",
    ):
        assert fragment in text, fragment
    timeout = schema_of(tool.definition)["properties"]["timeout_seconds"]  # type: ignore[index]
    assert 7.5 == timeout["maximum"]
    assert "at most 7.5; default 7.5" in timeout["description"]


def test_a_whole_number_timeout_is_written_without_a_fraction(tmp_path: Path) -> None:
    """``120.0`` reads as ``120``."""
    assert "default 120, at most 120" in shell_tool(tmp_path).definition.description


def test_the_shell_description_names_the_allow_listed_variables(tmp_path: Path) -> None:
    """Every allow-listed name, sorted as the configuration keeps them."""
    tool = shell_tool(tmp_path, environment_allowlist=["PATH", "JAVA_HOME", "VIRTUAL_ENV"])
    text = tool.definition.description
    assert "when set: JAVA_HOME, PATH, VIRTUAL_ENV." in text
    assert "needs a '/'" not in text


def test_without_path_in_the_allowlist_the_description_says_argv0_needs_a_slash(
    tmp_path: Path,
) -> None:
    """The PATH-only lookup has no PATH then; the description says what follows."""
    assert (
        "needs a '/'" in shell_tool(tmp_path, environment_allowlist=["HOME"]).definition.description
    )
    assert (
        "no host variable" in shell_tool(tmp_path, environment_allowlist=[]).definition.description
    )


@pytest.mark.parametrize(
    ("names", "shown"),
    [
        ([f"VARIABLE_{index:04d}_{'X' * 40}" for index in range(400)], "more"),
        (["A" * 5_000], "too long to list"),
        (["A" * 5_000, "B"], "too long to list"),
    ],
)
def test_a_long_allowlist_is_shortened_to_fit_the_message_bound(
    tmp_path: Path, names: list[str], shown: str
) -> None:
    """The description never exceeds MAXIMUM_MESSAGE_BYTES; it says how many it left out."""
    text = shell_tool(tmp_path, environment_allowlist=names).definition.description
    assert len(text.encode("utf-8")) <= MAXIMUM_MESSAGE_BYTES
    assert shown in text


def test_an_allowlist_that_just_fits_is_listed_whole(tmp_path: Path) -> None:
    """Names are shortened only when they must be: a list near the bound is whole."""
    base = shell_tool(tmp_path, environment_allowlist=["A"]).definition.description
    room = MAXIMUM_MESSAGE_BYTES - len(base.encode())
    names = ["A", "B" * (room - 3)]  # ", " and one more byte than "A" alone
    text = shell_tool(tmp_path, environment_allowlist=names).definition.description
    assert MAXIMUM_MESSAGE_BYTES - 1 == len(text.encode())
    assert "more" not in text
    longer = shell_tool(tmp_path, environment_allowlist=["A", "B" * room]).definition
    assert "and 1 more" in longer.description


@pytest.mark.parametrize("max_bytes", [1, 524_288])
def test_descriptions_fit_at_every_configured_extreme(tmp_path: Path, max_bytes: int) -> None:
    """The smallest and largest bounds give descriptions within the message bound."""
    read = new_read(Config(tmp_path, max_read_bytes=max_bytes)).definition
    shell = shell_tool(tmp_path, max_output_bytes=max_bytes, command_timeout=1800).definition
    assert f"maximum {max_bytes})" in read.description
    assert f"at most {max_bytes} bytes of stdout" in shell.description
    for definition in (read, shell):
        assert len(definition.description.encode()) <= MAXIMUM_MESSAGE_BYTES


# -- the launcher's containment text -------------------------------------------------------------


class _Described:
    """A launcher with an optional ``containment`` text."""

    def __init__(self, containment: object) -> None:
        self.containment = containment
        self.inner = FakeLauncher()

    async def start(self, spec: Spec) -> Process:
        """Start through a fake."""
        return await self.inner.start(spec)


class _Raising:
    """A launcher whose ``containment`` property raises."""

    @property
    def containment(self) -> str:
        """Fails."""
        raise RuntimeError("launcher internals")

    async def start(self, spec: Spec) -> Process:
        """Never called here."""
        raise NotImplementedError


SANDBOX_TEXT: Final = "Sandbox: writes only beneath the worktree; do not retry a refused write."


def test_a_launcher_s_containment_text_replaces_the_unconfined_sentence(tmp_path: Path) -> None:
    """The launcher says what it confines; the product only carries the text."""
    text = shell_tool(tmp_path, _Described(SANDBOX_TEXT)).definition.description
    assert SANDBOX_TEXT in text
    assert UNCONFINED not in text
    assert "contained field" in text


@pytest.mark.parametrize(
    "containment",
    [None, 42, "", "   ", "x" * (MAXIMUM_CONTAINMENT_BYTES + 1), "line\nbreak", "\ud800"],
)
def test_an_unusable_containment_text_is_ignored(tmp_path: Path, containment: object) -> None:
    """Absent, empty, too long, with control characters or not text: the default sentence."""
    text = shell_tool(tmp_path, _Described(containment)).definition.description
    assert UNCONFINED in text


def test_containment_texts_at_the_bound_and_from_a_raising_property(tmp_path: Path) -> None:
    """A text of exactly the bound is used; a property that raises is ignored."""
    at_bound = "é" * (MAXIMUM_CONTAINMENT_BYTES // 2)
    assert at_bound == launcher_containment(_Described(at_bound))
    assert launcher_containment(_Raising()) is None
    assert launcher_containment(FakeLauncher()) is None
    text = shell_tool(tmp_path, _Described(at_bound), environment_allowlist=["A" * 3000])
    assert len(text.definition.description.encode()) <= MAXIMUM_MESSAGE_BYTES
