"""The api distribution's shape: public surface, stdlib-only imports, and it works alone."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

API_SRC = Path(__file__).resolve().parents[1] / "src"
API_MODULES = (
    "spice.agent.tool",
    "spice.agent.dispatch",
    "spice.agent.process",
    "spice.agent.lifecycle",
    "spice.agent.starter",
)
PUBLIC_SURFACE: dict[str, set[str]] = {
    "spice.agent.tool": {
        "MAXIMUM_IDENTITY_BYTES",
        "MAXIMUM_MESSAGE_BYTES",
        "MAXIMUM_PAYLOAD_BYTES",
        "Call",
        "Capability",
        "Definition",
        "Effect",
        "ExecutionError",
        "ExecutionState",
        "Interruption",
        "Progress",
        "ReplaySafety",
        "Reporter",
        "Result",
        "RetryDisposition",
        "Tool",
        "interruption_of",
    },
    "spice.agent.dispatch": {"Dispatcher", "Interceptor", "Proceed"},
    "spice.agent.process": {
        "MAXIMUM_REFUSED_HOSTS",
        "ExecutableNotFound",
        "ExecutableResolver",
        "LaunchError",
        "Launcher",
        "Lookup",
        "Operation",
        "Outcome",
        "OutcomeKind",
        "Process",
        "ProcessFailure",
        "Sink",
        "Spec",
    },
    "spice.agent.lifecycle": {"Cleanup"},
    "spice.agent.starter": {"AutoBean", "AutoConfiguration"},
}
TIMEOUT_SECONDS = 60


def run_python(*arguments: str) -> subprocess.CompletedProcess[str]:
    """Run this interpreter in a child with ``arguments``; fail on a non-zero exit."""
    completed = subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert 0 == completed.returncode, completed.stderr
    return completed


@pytest.mark.parametrize("module_name", API_MODULES)
def test_each_api_package_exports_exactly_its_public_surface(module_name: str) -> None:
    """``__all__`` is exactly the intended names, without repeats, and each one exists."""
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert PUBLIC_SURFACE[module_name] == set(exported)
    assert len(exported) == len(set(exported))
    for name in exported:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module_name", API_MODULES)
def test_each_api_package_has_no_public_name_outside_its_all(module_name: str) -> None:
    """Every public attribute of the package is in ``__all__`` (helpers live in private modules)."""
    module = importlib.import_module(module_name)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert set() == public - set(module.__all__)


def test_result_offers_the_typed_path_for_a_tools_own_content() -> None:
    """``Result.from_content`` is a classmethod and ``content_object`` a read-only property."""
    from spice.agent.tool import Result  # noqa: PLC0415 - the surface under test

    assert isinstance(inspect.getattr_static(Result, "from_content"), classmethod)
    assert ["call_id", "content", "problem"] == list(
        inspect.signature(Result.from_content).parameters
    )
    prop = inspect.getattr_static(Result, "content_object")
    assert isinstance(prop, property)
    assert prop.fset is None
    assert ["call_id", "content", "problem"] == [f.name for f in dataclasses.fields(Result)]


def test_the_namespace_roots_have_no_init_and_every_package_is_typed() -> None:
    """``spice`` and ``spice.agent`` are PEP 420 namespaces; each package ships py.typed."""
    assert not (API_SRC / "spice" / "__init__.py").exists()
    assert not (API_SRC / "spice" / "agent" / "__init__.py").exists()
    for module_name in API_MODULES:
        package = API_SRC.joinpath(*module_name.split("."))
        assert (package / "__init__.py").is_file()
        assert (package / "py.typed").is_file()


IMPORT_PROBE = """
import json, sys
before = set(sys.modules)
for name in {modules!r}:
    __import__(name)
loaded = sorted(set(sys.modules) - before)
files = {{n: getattr(sys.modules[n], "__file__", None) for n in loaded}}
print(json.dumps({{"loaded": loaded, "files": files}}))
"""


def test_the_api_imports_nothing_outside_the_standard_library() -> None:
    """In a fresh interpreter, importing every api module loads only stdlib and api modules."""
    probe = IMPORT_PROBE.format(modules=API_MODULES)
    report = json.loads(run_python("-I", "-c", probe).stdout)
    loaded: list[str] = report["loaded"]
    assert set(API_MODULES) <= set(loaded)
    outside: list[str] = []
    for name in loaded:
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names:
            continue
        if name in {"spice", "spice.agent"}:
            continue
        file = report["files"][name]
        if name.startswith("spice.agent.") and file and Path(file).is_relative_to(API_SRC):
            continue
        outside.append(name)
    assert [] == outside


STANDALONE_PROBE = """
import asyncio, importlib.util, json, sys
sys.path.insert(0, {src!r})
from spice.agent.dispatch import Dispatcher
from spice.agent.lifecycle import Cleanup
from spice.agent.process import Lookup, Outcome
from spice.agent.starter import AutoBean
from spice.agent.tool import Call, Definition, Result

assert importlib.util.find_spec("spice.agent.tools") is None, "an implementation is visible"
assert not any(p.endswith("site-packages") for p in sys.path), sys.path

class Echo:
    definition = Definition("echo", "Echo.", {{"type": "object"}}, "read_only", "safe", [])
    async def execute(self, call, reporter=None):
        return Result(call.id, call.arguments)

async def main():
    dispatcher = Dispatcher([Echo()])
    ok = await dispatcher.dispatch(Call("1", "echo", '{{"x":1}}'))
    missing = await dispatcher.dispatch(Call("2", "nope"))
    return ok.content, json.loads(missing.content)["code"], dispatcher.definitions[0].fingerprint

print(json.dumps(asyncio.run(main())))
"""


def test_the_contract_works_alone_with_no_implementation_installed() -> None:
    """With only the api's src on the path (no site), all modules import and a dispatch runs."""
    probe = STANDALONE_PROBE.format(src=str(API_SRC))
    content, code, fingerprint = json.loads(run_python("-I", "-S", "-c", probe).stdout)
    assert '{"x":1}' == content
    assert "unknown_tool" == code
    assert 64 == len(fingerprint)
