"""Gemini CLI and the google-genai SDK list and call the three tools (contract 11.3).

Each client runs its own code against the real server (``spice-coding serve`` over stdio,
started by the client) and a loopback stand-in for the Gemini API that plays a model: it
calls ``read`` of a file, a ``replace`` of a typo in it, and ``shell`` with ``true``, then
answers ``done``. The stand-in keeps every request, so the test reads what the client
declared to the model (each tool's parameters must pass the Gemini API's ``Schema`` rules,
which the server's canonical schemas break) and what the tools answered (the three
answers reach the model's later requests, and the file is fixed on disk). Nothing leaves
the machine: both clients are pointed at the stand-in by their documented settings.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from asyncio.subprocess import PIPE
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import procutil
import pytest
from gemini_schema import gemini_problems
from gemini_standin import DONE_TEXT, SCHEMA_FIELDS, StandIn, declarations_of, function_responses
from google import genai
from google.genai import types
from test_examples import (
    EXAMPLES,
    RUN_BOUND_SECONDS,
    SPICE_CODING,
    _node_version,
    listed_tools,
    substituted,
)

from spice.agent.coding._mcp._dialects import Dialect, schema_in
from spice.agent.coding._mcp._text_block import TEXT_NOTE

pytestmark = pytest.mark.filterwarnings(
    # Once fastmcp is imported (pydantic-ai's tests do, earlier in the same process) it makes
    # the MCP SDK's v1 field names warn, and google-genai reads ``inputSchema`` and
    # ``isError``: a warning of another library's choice, not an error of ours.
    "ignore:Accessing `.*` is deprecated; MCP SDK v2 renamed:DeprecationWarning"
)

GEMINI_CLI_DIRECTORY: Final = EXAMPLES / "gemini-cli"
GEMINI_CLI_PACKAGE: Final = "@google/gemini-cli"
GEMINI_CLI_PREFIX: Final = "mcp_spice-coding_"
"""How Gemini CLI names an MCP tool for the model: ``mcp_``, the server's name, ``_``."""
INSPECTOR_NODE: Final = EXAMPLES / "inspector" / "node_modules" / ".bin" / "node"
MODEL: Final = "gemini-2.5-flash"
"""The model both clients are told to use (Gemini CLI then routes no request elsewhere)."""
TOOL_NAMES: Final = ("read", "replace", "shell")
SOURCE: Final = 'def greet(name):\n    return "Helo, " + name\n'
FIXED: Final = SOURCE.replace("Helo", "Hello")


@pytest.fixture(autouse=True)
def _loopback() -> None:
    """The stand-in listens on 127.0.0.1: up it comes in verify-offline's namespace, or skip."""
    reason = procutil.loopback_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "greeting.py").write_text(SOURCE)
    return root


def script() -> list[tuple[str, dict[str, Any]]]:
    """The model's three calls: read the file, fix its typo by an edit, run ``true``."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()
    edit = {"old_text": "Helo", "new_text": "Hello"}
    return [
        ("read", {"path": "greeting.py"}),
        ("replace", {"path": "greeting.py", "expected_sha256": digest, "edits": [edit]}),
        ("shell", {"argv": ["true"]}),
    ]


def _ours(name: object, prefix: str) -> str | None:
    """Which of our tools a declared function name is (``prefix`` + the tool's name)."""
    for tool in TOOL_NAMES:
        if name == prefix + tool:
            return tool
    return None


def declared_parameters(standin: StandIn) -> dict[str, dict[str, Any]]:
    """Our tools' parameter schemas as the client declared them, in every model request;
    the same in each (the last one's is returned)."""
    found: dict[str, dict[str, Any]] = {}
    for body in standin.offering():
        for declaration in declarations_of(body):
            tool = _ours(declaration.get("name"), standin.prefix)
            if tool is None:
                continue
            [field] = [key for key in SCHEMA_FIELDS if key in declaration]
            assert found.setdefault(tool, declaration[field]) == declaration[field]
    return found


def answered(standin: StandIn) -> list[tuple[str | None, dict[str, Any]]]:
    """Each tool answer the model was shown (from the last request: it holds the whole
    conversation), as (our tool, the answer's JSON object)."""
    body = standin.offering()[-1]
    return [
        (_ours(response.get("name"), standin.prefix), _answer_in(response.get("response")))
        for response in function_responses(body)
    ]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _answer_in(response: object) -> dict[str, Any]:
    """The answer's JSON text inside a function response (google-genai sends the MCP result,
    Gemini CLI its text wrapped in markers), decoded."""
    for text in _strings(response):
        start = text.find('{"ok":')
        if start >= 0:
            value, _ = json.JSONDecoder().raw_decode(text, start)
            assert isinstance(value, dict)
            return value
    raise AssertionError("a function response without a tool answer")


def check_the_run(standin: StandIn, worktree: Path) -> None:
    """Declarations the Gemini API accepts; three answers, in order, all ok; the file fixed."""
    parameters = declared_parameters(standin)
    assert sorted(TOOL_NAMES) == sorted(parameters)
    for tool in TOOL_NAMES:
        assert [] == gemini_problems(parameters[tool]), tool
    # Each answer reaches the model's next request: 0, 1, 2, then all 3 answers.
    assert [0, 1, 2, 3] == [len(function_responses(body)) for body in standin.offering()]
    shown = answered(standin)
    assert list(TOOL_NAMES) == [tool for tool, _ in shown]
    read, replaced, ran = (answer for _, answer in shown)
    assert (True, SOURCE) == (read["ok"], read["content"])
    assert (True, 1) == (replaced["ok"], replaced["edits_applied"])
    assert (True, 0) == (ran["ok"], ran["exit_code"])
    assert FIXED == (worktree / "greeting.py").read_text()


# --- the google-genai SDK ----------------------------------------------------------------------


def _genai_example() -> ModuleType:
    """``examples/google-genai/google_genai_agent.py``, imported as a module of its own."""
    path = EXAMPLES / "google-genai" / "google_genai_agent.py"
    spec = importlib.util.spec_from_file_location("spice_example_google_genai", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_google_genai_lists_and_calls_the_three_tools(worktree: Path) -> None:
    """The README's google-genai example: the SDK lists the session's tools, converts them
    with its own code into declarations the Gemini API accepts, calls each as the model
    asks, and shows the answers to the model."""
    with StandIn(script()) as standin:
        client = genai.Client(
            api_key="stand-in", http_options=types.HttpOptions(base_url=standin.url)
        )
        async with asyncio.timeout(RUN_BOUND_SECONDS):
            text = await _genai_example().main(client, SPICE_CODING, str(worktree), MODEL)
        check_the_run(standin, worktree)
        fields = {key for body in standin.offering() for d in declarations_of(body) for key in d}
    assert DONE_TEXT == text
    assert "parameters" in fields  # the SDK's own conversion, not the raw schema


async def test_the_google_genai_example_is_not_cut_off_after_the_sdks_ten_calls(
    worktree: Path,
) -> None:
    """A task of more calls than the SDK's default of 10 runs to its end: each of 12
    ``shell`` calls is answered and the model's last request holds all 12 answers."""
    calls = [("shell", {"argv": ["true"]})] * 12
    with StandIn(calls) as standin:
        client = genai.Client(
            api_key="stand-in", http_options=types.HttpOptions(base_url=standin.url)
        )
        async with asyncio.timeout(RUN_BOUND_SECONDS):
            text = await _genai_example().main(client, SPICE_CODING, str(worktree), MODEL)
        answers = [_answer_in(r["response"]) for r in function_responses(standin.recorded()[-1])]
    assert DONE_TEXT == text
    assert [(True, 0)] * 12 == [(answer["ok"], answer["exit_code"]) for answer in answers]


async def test_the_google_genai_example_sends_each_answer_once(worktree: Path) -> None:
    """Issue 47: the SDK sent the model the text block and the structured content, the same
    256 KiB page twice (535,397 characters). The example's session hands it one copy: the
    function response is at most 1.1 times the answer's own JSON."""
    (worktree / "big.py").write_bytes(BIG_PAGE)
    with StandIn([("read", {"path": "big.py"})]) as standin:
        client = genai.Client(
            api_key="stand-in", http_options=types.HttpOptions(base_url=standin.url)
        )
        async with asyncio.timeout(RUN_BOUND_SECONDS):
            await _genai_example().main(client, SPICE_CODING, str(worktree), MODEL)
        [response] = function_responses(standin.recorded()[-1])
    answer = _answer_in(response["response"])
    assert BIG_PAGE.decode() == answer["content"]
    sent = len(json.dumps(response))
    assert sent <= 1.1 * len(json.dumps(answer, separators=(",", ":"))), sent


# --- Gemini CLI (npm) ----------------------------------------------------------------------------


async def test_the_gemini_cli_settings_start_the_real_server(worktree: Path) -> None:
    """``settings.json``'s ``mcpServers`` entry serves the three tools (without Node too),
    and its timeout leaves room for the longest command (1800 s)."""
    settings = json.loads(
        substituted((GEMINI_CLI_DIRECTORY / "settings.json").read_text(), worktree)
    )
    server = settings["mcpServers"]["spice-coding"]
    assert list(TOOL_NAMES) == await listed_tools(server["command"], server["args"])
    assert server["timeout"] > 1800 * 1000  # milliseconds


def _gemini_cli() -> tuple[str, str]:
    """The Node and the Gemini CLI entry point the Makefile installed, or a precise skip."""
    installed = GEMINI_CLI_DIRECTORY / "node_modules" / GEMINI_CLI_PACKAGE
    if not (installed / "package.json").is_file():
        pytest.skip("the pinned Gemini CLI is not installed (make bootstrap runs npm ci)")
    package = json.loads((installed / "package.json").read_text())
    minimum = tuple(int(part) for part in re.findall(r"\d+", package["engines"]["node"]))
    for node in (str(INSPECTOR_NODE) if INSPECTOR_NODE.exists() else None, shutil.which("node")):
        if node is not None and _node_version(node)[: len(minimum)] >= minimum:
            return node, str(installed / package["bin"]["gemini"])
    pytest.skip(f"no Node {package['engines']['node']} for Gemini CLI")


def _gemini_home(home: Path, worktree: Path, command: str) -> None:
    """``~/.gemini`` as a user of the README would have it: the example's ``mcpServers``
    entry, an API key as the sign-in, the worktree trusted; no telemetry, no update check."""
    settings = json.loads(
        substituted((GEMINI_CLI_DIRECTORY / "settings.json").read_text(), worktree)
    )
    settings["mcpServers"]["spice-coding"]["command"] = command
    settings |= {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True},
    }
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(worktree): "TRUST_FOLDER"})
    )


async def _run_gemini_cli(standin: StandIn, worktree: Path, home: Path) -> str:
    """``gemini -p PROMPT --yolo -m MODEL`` in the worktree; its standard output."""
    node, entry = _gemini_cli()
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "GEMINI_API_KEY": "stand-in",
        "GOOGLE_GEMINI_BASE_URL": standin.url,
        "NO_COLOR": "1",
    }
    prompt = "Fix the typo in greeting.py, then run true."
    process = await asyncio.create_subprocess_exec(
        node, entry, "-p", prompt, "--yolo", "-m", MODEL,
        cwd=worktree, env=env, stdin=subprocess.DEVNULL, stdout=PIPE, stderr=PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(RUN_BOUND_SECONDS):
            out, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert 0 == process.returncode
    return out.decode()


async def test_gemini_cli_lists_and_calls_the_three_tools(worktree: Path, tmp_path: Path) -> None:
    """Gemini CLI with the README's settings.json entry: it lists the tools (in the Gemini
    dialect, by its name), declares them as the Gemini API accepts, calls each as the
    model asks, and shows the answers to the model."""
    _gemini_cli()
    home = tmp_path / "home"
    _gemini_home(home, worktree, SPICE_CODING)
    with StandIn(script(), GEMINI_CLI_PREFIX) as standin:
        out = await _run_gemini_cli(standin, worktree, home)
        check_the_run(standin, worktree)
        parameters = declared_parameters(standin)
    assert DONE_TEXT == out.strip()
    canonical = await canonical_schemas(worktree)
    for tool in TOOL_NAMES:  # the Gemini dialect, and the CLI's own wait_for_previous
        declared = parameters[tool]
        assert "boolean" == declared["properties"].pop("wait_for_previous")["type"]
        assert schema_in(Dialect.GEMINI, canonical[tool]) == declared


async def canonical_schemas(root: Path) -> dict[str, dict[str, Any]]:
    """The definitions' own input schemas, as ``spice-coding tools`` prints them."""
    done = await asyncio.to_thread(
        subprocess.run,
        [SPICE_CODING, "tools", "--root", str(root)],
        capture_output=True,
        check=True,
        timeout=RUN_BOUND_SECONDS,
    )
    return {tool["name"]: tool["input_schema"] for tool in json.loads(done.stdout)["tools"]}


def _portable_only(tmp_path: Path) -> str:
    """``spice-coding`` that lists the portable dialect to every client (the old listing
    for Gemini CLI: no client-named dialect)."""
    program = tmp_path / "portable_only.py"
    program.write_text(
        "import sys\n"
        "from spice.agent.coding._mcp import _server\n"
        "from spice.agent.coding._mcp._dialects import Dialect\n"
        "_server.dialect_of = lambda name: Dialect.PORTABLE\n"
        "from spice.agent.coding._cli import main\n"
        "sys.exit(main())\n"
    )
    wrapper = tmp_path / "portable-only"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{program}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


async def test_without_its_dialect_gemini_cli_declares_what_the_gemini_api_refuses(
    worktree: Path, tmp_path: Path
) -> None:
    """The other side: served the portable listing, Gemini CLI passes ``exclusiveMinimum``
    and ``{"type": "null"}`` on to the API (which refuses them); the Gemini dialect is
    what makes its declarations acceptable."""
    _gemini_cli()
    home = tmp_path / "home"
    _gemini_home(home, worktree, _portable_only(tmp_path))
    with StandIn(script(), GEMINI_CLI_PREFIX) as standin:
        await _run_gemini_cli(standin, worktree, home)
        parameters = declared_parameters(standin)
    assert "parameters.properties[timeout_seconds].exclusiveMinimum: unknown field" in (
        gemini_problems(parameters["shell"])
    )
    assert "parameters.properties[encoding].anyOf[1].type: unknown type 'null'" in (
        gemini_problems(parameters["replace"])
    )


BIG_PAGE: Final = b"".join(b"value_%06d = compute(%d)\n" % (n, n) for n in range(12_000))[:262_144]
GEMINI_CUT: Final = "Output too large"
"""What Gemini CLI writes in place of an answer past its 40,000 characters."""


async def _gemini_reads_big(worktree: Path, tmp_path: Path, command: str) -> str:
    """Gemini CLI reads a 256 KiB file once; the text of the function response the model
    was shown (every string in it, joined)."""
    _gemini_cli()
    (worktree / "big.py").write_bytes(BIG_PAGE)
    home = tmp_path / "home"
    _gemini_home(home, worktree, command)
    with StandIn([("read", {"path": "big.py"})], GEMINI_CLI_PREFIX) as standin:
        await _run_gemini_cli(standin, worktree, home)
        [response] = function_responses(standin.offering()[-1])
    return "".join(_strings(response.get("response")))


async def test_gemini_cli_shows_its_model_a_shorter_page_that_says_so(
    worktree: Path, tmp_path: Path
) -> None:
    """Contract 12.4: Gemini CLI cuts an answer past 40,000 characters to its first 8,000
    and last 32,000 (the JSON broken, the end of the page without its start). Its dialect
    keeps the text block within that: the model reads a whole, shorter page with
    ``next_offset`` and the note, and Gemini CLI does not cut it."""
    shown = await _gemini_reads_big(worktree, tmp_path, SPICE_CODING)
    assert GEMINI_CUT not in shown
    answer = _answer_in(shown)
    kept = answer["bytes"]
    assert (True, kept, BIG_PAGE[:kept].decode()) == (
        answer["truncated"],
        answer["next_offset"],
        answer["content"],
    )
    assert 30_000 < kept < 40_000
    assert TEXT_NOTE == answer["text_note"]
    assert hashlib.sha256(BIG_PAGE).hexdigest() == answer["file_sha256"]


async def test_gemini_cli_over_http_shows_its_model_a_shorter_page_too(
    worktree: Path, tmp_path: Path
) -> None:
    """Issue 47: over streamable HTTP the stateless server did not know Gemini CLI, served
    the portable dialect and a 265,865-character page, which Gemini CLI cut. The real CLI,
    configured with ``httpUrl`` and a bearer token, now gets the page it gets on stdio."""
    from http_support import http_server  # noqa: PLC0415 - the HTTP leg only

    _gemini_cli()
    (worktree / "big.py").write_bytes(BIG_PAGE)
    home = tmp_path / "home"
    _gemini_home(home, worktree, SPICE_CODING)
    settings_file = home / ".gemini" / "settings.json"
    async with http_server(tmp_path, worktree) as server:
        settings = json.loads(settings_file.read_text())
        settings["mcpServers"]["spice-coding"] = {
            "httpUrl": server.url,
            "headers": {"Authorization": f"Bearer {server.tokens['full']}"},
            "timeout": settings["mcpServers"]["spice-coding"]["timeout"],
        }
        settings_file.write_text(json.dumps(settings))
        with StandIn([("read", {"path": "big.py"})], GEMINI_CLI_PREFIX) as standin:
            await _run_gemini_cli(standin, worktree, home)
            [response] = function_responses(standin.offering()[-1])
    shown = "".join(_strings(response.get("response")))
    assert GEMINI_CUT not in shown
    answer = _answer_in(shown)
    kept = answer["bytes"]
    assert (True, kept) == (answer["truncated"], answer["next_offset"])
    assert 30_000 < kept < 40_000


async def test_without_its_answer_bound_gemini_cli_cuts_the_page(
    worktree: Path, tmp_path: Path
) -> None:
    """The other side: a server that sends Gemini CLI the whole text (no character bound):
    Gemini CLI replaces it with its cut, which the model cannot parse as the answer."""
    program = tmp_path / "unbounded.py"
    program.write_text(
        "import sys\n"
        "from spice.agent.coding._mcp import _server\n"
        "_server.text_chars_of = lambda dialect: None\n"
        "from spice.agent.coding._cli import main\n"
        "sys.exit(main())\n"
    )
    wrapper = tmp_path / "unbounded"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{program}" "$@"\n')
    wrapper.chmod(0o755)
    shown = await _gemini_reads_big(worktree, tmp_path, str(wrapper))
    assert GEMINI_CUT in shown
