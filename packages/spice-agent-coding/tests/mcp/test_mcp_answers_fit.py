"""Answers that fit the clients (contract 10.2): big fields last, the largest answer declared.

Claude Code saves an answer over 50,000 characters to a file and shows the model its first
2 KB, unless the tool's ``_meta`` declares ``anthropic/maxResultSizeChars``; a description
or the server's instructions over 2 KB are cut. So: every content object keeps its large
fields last (the digests and ``exit_code`` come first), each tool declares the largest text
it can return (computed from the bounds, tested against maximal answers), and the
instructions name the root and teach the edits form.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final

import pytest
from mcp import Client
from portable import ANY_ROOT, PYTHON, WINDOWS
from test_mcp_results import CORPUS, lay_out
from test_mcp_stdio import client_for

from spice.agent.coding import compose, mcp_server
from spice.agent.coding._mcp._outputs import largest_answer_chars
from spice.agent.coding._mcp._server import RESULT_SIZE_META, instructions_for, tool_of
from spice.agent.tool import MAXIMUM_PAYLOAD_BYTES, Call
from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES, Config

LARGE: Final = ("content", "diff", "stdout", "stderr")
PREVIEW_CHARS: Final = 2048
"""What Claude Code shows of an answer it saved to a file."""
DESCRIPTION_CHARS: Final = 2048
"""What Claude Code keeps of a description or of the server's instructions."""


def utf16_length(text: str) -> int:
    """Characters as JavaScript counts them (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_order(text: str) -> None:
    """``ok``; then ``code`` and ``message`` (failures); large fields last, in their order."""
    keys = list(json.loads(text))
    assert "ok" == keys[0], keys
    if "code" in keys:
        assert ["code", "message"] == keys[1:3], keys
    large = [key for key in keys if key in LARGE]
    assert large == keys[len(keys) - len(large) :], keys
    assert large == sorted(large, key=LARGE.index), keys


EXTRA: Final[list[tuple[str, dict[str, Any]]]] = [
    ("read", {"path": "a.txt", "limit": 1}),
    ("read", {"path": "crlf.txt"}),
    (
        "replace",
        {
            "path": "crlf.txt",
            "expected_sha256": sha(b"one\r\ntwo\r\n"),
            "edits": [{"old_text": "one\ntwo", "new_text": "1\n2"}],
        },
    ),
    (
        "replace",
        {
            "path": "ws.txt",
            "expected_sha256": sha(b"one two\n"),
            "edits": [{"old_text": "one  two", "new_text": "x"}],
        },
    ),
    (
        "replace",
        {
            "path": "ws.txt",
            "expected_sha256": sha(b"one two\n"),
            "edits": [{"old_text": "o", "new_text": "x"}],
        },
    ),
    (
        "shell",
        {
            "argv": [
                PYTHON,
                "-c",
                "import sys; sys.stdout.write('x' * 3000); sys.stderr.write('err\\n'); sys.exit(1)",
            ]
            if WINDOWS
            else ["sh", "-c", "printf 'x%.0s' $(seq 1 3000); echo err >&2; exit 1"]
        },
    ),
]


async def test_every_answer_keeps_its_large_fields_last(tmp_path: Path) -> None:
    """Every result kind of the corpus (success and each failure of each tool)."""
    root = lay_out(tmp_path / "root")
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (root / "ws.txt").write_bytes(b"one two\n")
    codes: set[tuple[str, str]] = set()
    async with compose(Config(root)) as dispatcher:
        for number, (name, arguments) in enumerate([*CORPUS, *EXTRA]):
            result = await dispatcher.dispatch(Call(f"c{number}", name, json.dumps(arguments)))
            check_order(result.content)
            codes.add((name, str(result.content_object.get("code", "ok"))))
    assert {
        ("read", "ok"),
        ("replace", "ok"),
        ("replace", "edit_not_found"),
        ("replace", "edit_ambiguous"),
        ("replace", "stale"),
        ("shell", "ok"),
        ("shell", "command_failed"),
        ("shell", "timed_out"),
    } <= codes


@pytest.mark.parametrize("kind", ["read", "shell"])
async def test_a_long_answer_shows_its_digest_or_exit_code_in_the_first_2_kb(
    tmp_path: Path, kind: str
) -> None:
    """A 256 KiB page (about 290,000 characters) has sha256 and file_sha256 in its first
    2 KB; a long test run's answer has exit_code there, and its output's tail at the end."""
    root = tmp_path / "root"
    root.mkdir()
    page = b"".join(b"    value_%06d = compute(%d)\n" % (n, n) for n in range(20_000))
    (root / "big.py").write_bytes(page[:262_144])
    async with compose(Config(root)) as dispatcher:
        if kind == "read":
            result = await dispatcher.dispatch(Call("r", "read", '{"path": "big.py"}'))
            head = result.content[:PREVIEW_CHARS]
            assert f'"file_sha256":"{sha(page[:262_144])}"' in head
            assert '"sha256"' in head
        else:
            argv = (
                ["cmd", "/c", "type big.py & echo FAILED-AT-THE-END& exit 1"]
                if WINDOWS
                else ["sh", "-c", "cat big.py; echo FAILED-AT-THE-END; exit 1"]
            )
            result = await dispatcher.dispatch(Call("s", "shell", json.dumps({"argv": argv})))
            assert '"exit_code":1' in result.content[:PREVIEW_CHARS]
            assert "FAILED-AT-THE-END" in json.loads(result.content)["stdout"][-200:]
    assert utf16_length(result.content) > 50_000  # the answer Claude Code would have saved
    assert utf16_length(result.content) <= largest_answer_chars(kind, Config(root))


def test_the_declared_sizes_follow_the_bounds() -> None:
    """Small bounds give small declarations; the defaults give half the answer bound for read
    and shell (an answer is written twice); replace is bounded by its diff; an unknown tool
    gets half the answer bound."""
    small = Config(ANY_ROOT, max_read_bytes=1000, max_output_bytes=1000)
    assert largest_answer_chars("read", small) < 60_000
    # 140,000: the shell's fixed part holds network_refused and protected_restored (12.1)
    # and the stage's fields (13.1: changes, conflicts, protected_refused, ...).
    assert largest_answer_chars("shell", small) < 140_000
    big = Config(ANY_ROOT)
    assert MAXIMUM_ANSWER_BYTES // 2 == largest_answer_chars("read", big)
    assert MAXIMUM_ANSWER_BYTES // 2 == largest_answer_chars("shell", big)
    assert 50_000 < largest_answer_chars("replace", big) < 500_000
    assert MAXIMUM_ANSWER_BYTES // 2 == largest_answer_chars("grep", big)
    assert largest_answer_chars(
        "read", Config(ANY_ROOT, max_read_bytes=1001)
    ) > largest_answer_chars("read", small)


async def test_maximal_answers_fit_their_declarations(tmp_path: Path) -> None:
    """Worst cases under small bounds: a page of control bytes (each escaped to 6 characters),
    shell output of control bytes, and an edit whose diff and hint are control characters,
    with the longest path a tool accepts."""
    root = tmp_path / "root"
    root.mkdir()
    config = Config(root, max_read_bytes=1000, max_output_bytes=1000)
    deep = "/".join(["d" * 200] * 3)
    (root / deep).mkdir(parents=True)
    control = b"\x01" * 999 + b"\n"
    (root / deep / "c.txt").write_bytes(control)
    lines = b"".join(b"\x02" * 60 + b"\nk\n" for _ in range(400))
    (root / deep / "e.txt").write_bytes(lines)
    (root / deep / "f.txt").write_bytes(lines)
    calls = [
        ("read", {"path": f"{deep}/c.txt"}),
        (
            "shell",
            {
                "argv": [PYTHON, "-c", "import sys; sys.stdout.write(chr(1) * 2000); sys.exit(3)"]
                if WINDOWS
                else ["sh", "-c", "printf '\\001%.0s' $(seq 1 2000); exit 3"]
            },
        ),
        (
            "replace",
            {
                "path": f"{deep}/e.txt",
                "expected_sha256": sha(lines),
                "edits": [{"old_text": "\x02" * 60, "new_text": "\x03" * 60, "replace_all": True}],
            },
        ),
        (
            "replace",
            {
                "path": f"{deep}/f.txt",
                "expected_sha256": sha(lines),
                "edits": [{"old_text": ("\x02" * 60 + "\nk\n") * 15 + "\x04", "new_text": ""}],
            },
        ),
    ]
    async with compose(config) as dispatcher:
        for number, (name, arguments) in enumerate(calls):
            result = await dispatcher.dispatch(Call(f"m{number}", name, json.dumps(arguments)))
            assert utf16_length(result.content) <= largest_answer_chars(name, config), name
            shown = (name, sorted(json.loads(result.content)))
            assert utf16_length(result.content) > 4000, shown  # the worst case was reached


async def test_the_mcp_listing_declares_the_sizes_and_the_instructions_teach_the_edits_form(
    tmp_path: Path,
) -> None:
    """In process with the config: each tool's _meta carries the computed size; the
    instructions name the root, the edits form, the sha256 chain and read with limit 1."""
    root = lay_out(tmp_path / "root")
    config = Config(root, max_read_bytes=4096)
    async with (
        compose(config) as dispatcher,
        Client(mcp_server(dispatcher, config=config)) as client,
    ):
        tools = (await client.list_tools()).tools
        instructions = client.instructions
    declared = {tool.name: (tool.meta or {}).get(RESULT_SIZE_META) for tool in tools}
    assert {name: largest_answer_chars(name, config) for name in declared} == declared
    assert instructions is not None
    assert str(root) in instructions
    for phrase in ("edits", "old_text", "expected_sha256", "limit 1", "file_sha256", "sha256"):
        assert phrase in instructions
    assert utf16_length(instructions) <= DESCRIPTION_CHARS
    for tool in tools:
        assert utf16_length(tool.description or "") <= DESCRIPTION_CHARS, tool.name


async def test_over_stdio_the_real_client_sees_the_declarations_and_the_root(
    tmp_path: Path,
) -> None:
    """``spice-coding serve``: the real client reads the same _meta and instructions."""
    root = lay_out(tmp_path / "root")
    async with client_for(root) as client:
        tools = (await client.list_tools()).tools
        instructions = client.instructions
        page = await client.call_tool("read", {"path": "big.txt", "limit": 1})
    assert instructions is not None
    assert str(root) in instructions
    config = Config(root)
    assert all(
        (tool.meta or {}).get(RESULT_SIZE_META) == largest_answer_chars(tool.name, config)
        for tool in tools
    )
    assert (page.structured_content or {})["file_sha256"] == sha(b"b" * 100_000)


def test_without_a_config_the_instructions_do_not_invent_a_root() -> None:
    """Built without the config: still teaches edits; each size is the payload bound."""
    text = instructions_for(None)
    assert "edits" in text
    assert "{" not in text.replace("{old_text", "")
    config = Config(ANY_ROOT)
    from spice.agent.tools.coding import new_read  # noqa: PLC0415 - beside its one use

    definition = new_read(config).definition
    assert MAXIMUM_PAYLOAD_BYTES == (tool_of(definition).meta or {})[RESULT_SIZE_META]
    assert (
        largest_answer_chars("read", config)
        == (tool_of(definition, config).meta or {})[RESULT_SIZE_META]
    )


async def test_over_stdio_the_issue_s_edit_workflow_works_end_to_end(tmp_path: Path) -> None:
    """The real client and ``spice-coding serve``: a 262,144-byte CRLF file; read with limit
    1 for file_sha256; an LF three-line edit that grows it by 13 bytes; the next edit chained
    on the answer's sha256; then an edit with the wrong indentation answers where to look."""
    root = tmp_path / "root"
    root.mkdir()
    lines = [f"    value_{n:06d} = compute({n})\r\n" for n in range(10_000)]
    data = "".join(lines).encode()[:262_144]
    data = data[: data.rfind(b"\r\n") + 2]
    data += b"x" * (262_144 - len(data))
    (root / "big.py").write_bytes(data)
    old = "".join(line.replace("\r\n", "\n") for line in lines[100:103])
    new = old.replace("compute(100)", "compute(100, a=1)").replace(
        "compute(102)", "compute(102)  # 13 b"
    )
    assert 13 == len(new) - len(old)
    async with client_for(root) as client:
        page = (await client.call_tool("read", {"path": "big.py", "limit": 1})).structured_content
        assert page is not None
        first = await client.call_tool(
            "replace",
            {
                "path": "big.py",
                "expected_sha256": page["file_sha256"],
                "edits": [{"old_text": old, "new_text": new}],
            },
        )
        answer = first.structured_content or {}
        assert (False, True, 262_157) == (first.is_error, answer["ok"], answer.get("bytes")), {
            k: v for k, v in answer.items() if k in {"code", "message"}
        }
        chained = await client.call_tool(
            "replace",
            {
                "path": "big.py",
                "expected_sha256": answer["sha256"],
                "edits": [{"old_text": "a=1", "new_text": "a=2"}],
            },
        )
        assert (chained.structured_content or {})["ok"] is True
        missing = await client.call_tool(
            "replace",
            {
                "path": "big.py",
                "expected_sha256": (chained.structured_content or {})["sha256"],
                "edits": [
                    {"old_text": "value_000200 = compute(200)\n  value_000201", "new_text": ""}
                ],
            },
        )
    after = (root / "big.py").read_bytes()
    expected = data.replace(b"compute(100)\r\n", b"compute(100, a=2)\r\n").replace(
        b"compute(102)\r\n", b"compute(102)  # 13 b\r\n"
    )
    assert expected == after
    hint = missing.structured_content or {}
    assert (True, "edit_not_found", 0, 201, "whitespace") == (
        missing.is_error,
        hint["code"],
        hint["edit_index"],
        hint["similar_line"],
        hint["similar_difference"],
    )
    assert "value_000200 = compute(200)\r\n    value_000201" in hint["similar_text"]


async def test_the_replace_description_carries_the_instructions_workflow(tmp_path: Path) -> None:
    """Contract 12.4: the server's instructions reach only Claude Code, so the ``replace``
    description holds the same workflow (read with limit 1, expected_sha256 and edits,
    old_text exactly once, the sha256 chain, 'stale' means read again), within the 2 KB
    Claude Code keeps, at the largest bounds too."""
    from spice.agent.tools.coding._config import MAXIMUM_BYTES, MAXIMUM_EDIT_BYTES  # noqa: PLC0415
    from spice.agent.tools.coding._replace_arguments import WORKFLOW  # noqa: PLC0415

    root = lay_out(tmp_path / "root")
    largest = Config(root, max_write_bytes=MAXIMUM_BYTES, max_edit_bytes=MAXIMUM_EDIT_BYTES)
    for config in (Config(root), largest):
        async with (
            compose(config) as dispatcher,
            Client(mcp_server(dispatcher, config=config)) as client,
        ):
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            instructions = client.instructions or ""
        described = tools["replace"].description or ""
        assert WORKFLOW in described
        phrases = ("limit 1", "file_sha256", "expected_sha256", "[{old_text, new_text}]")
        for phrase in (*phrases, "exactly", "once", "next expected_sha256", "read it again"):
            assert phrase in described, phrase
        for phrase in ("limit 1", "expected_sha256", "old_text", "'stale'"):
            assert phrase in instructions, phrase
        assert utf16_length(described) <= DESCRIPTION_CHARS
