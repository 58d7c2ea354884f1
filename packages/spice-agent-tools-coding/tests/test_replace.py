"""The replace tool: success and failure shapes, modes, replay, bounds, special targets."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
from pathlib import Path

import pytest
from replace_helpers import (
    INJECTED,
    SUCCESS_KEYS,
    Recording,
    content_of,
    create_arguments,
    current_umask,
    digest,
    make_call,
    make_tool,
    replace_arguments,
    run,
    temporaries,
)

from spice.agent.tool import Capability, Effect, ReplaySafety
from spice.agent.tools.coding import Config, new_replace
from spice.agent.tools.coding._commit import Checkpoint
from spice.agent.tools.coding._replace import ReplaceTool

OLD = b"old content\n"
NEW = "new content \u00e9\n"
NEW_BYTES = NEW.encode("utf-8")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A worktree root holding ``f.txt`` with ``OLD``."""
    tree = tmp_path / "root"
    tree.mkdir()
    (tree / "f.txt").write_bytes(OLD)
    return tree


# -- definition -----------------------------------------------------------------------


def test_definition_is_mutating_idempotent_and_reads_and_writes(root: Path) -> None:
    """The definition declares the contract's name, effect, replay safety and capabilities."""
    definition = new_replace(Config(str(root))).definition
    assert "replace" == definition.name
    assert Effect.MUTATING == definition.effect
    assert ReplaySafety.IDEMPOTENT == definition.replay_safety
    assert (Capability.FILESYSTEM_READ, Capability.FILESYSTEM_WRITE) == definition.capabilities


def test_schema_names_each_property_and_allows_no_other(root: Path) -> None:
    """The schema lists both forms' properties, the digest pattern and the encodings."""
    schema = json.loads(new_replace(Config(str(root))).definition.input_schema)
    properties = schema["properties"]
    assert {"path", "content", "create", "expected_sha256", "encoding", "edits"} == set(properties)
    assert schema["additionalProperties"] is False
    assert ["path"] == schema["required"]
    assert "^[0-9a-f]{64}$" == properties["expected_sha256"]["pattern"]
    assert ["utf-8", "base64", None] == properties["encoding"]["enum"]


def test_every_optional_property_is_nullable_and_no_strict_mode_trick_is_used(
    root: Path,
) -> None:
    """Optional properties admit null (contract 9.3); no oneOf/anyOf/const/default keywords."""
    schema = json.loads(new_replace(Config(str(root))).definition.input_schema)
    properties = schema["properties"]
    item = properties["edits"]["items"]
    optional = [v for k, v in properties.items() if k != "path"]
    for declared in [*optional, item["properties"]["replace_all"]]:
        assert "null" in declared["type"]
    text = json.dumps(schema)
    for keyword in ("oneOf", "anyOf", "allOf", "const", "default", "$ref"):
        assert f'"{keyword}"' not in text, keyword
    assert (1, 64) == (properties["edits"]["minItems"], properties["edits"]["maxItems"])
    assert ["new_text", "old_text"] == sorted(item["required"])
    assert item["additionalProperties"] is False


def test_description_tells_the_model_to_read_first_and_pass_the_digest(root: Path) -> None:
    """The description explains the read-then-replace protocol and the create mode."""
    description = new_replace(Config(str(root))).definition.description
    assert "read" in description
    assert "expected_sha256" in description
    assert "create: true" in description


async def test_factory_touches_nothing_and_a_missing_root_is_root_unavailable(
    tmp_path: Path,
) -> None:
    """Construction succeeds for a missing root; a call then answers root_unavailable."""
    tool = make_tool(tmp_path / "missing")
    _, content = await run(tool, create_arguments("a.txt", "x"))
    assert "root_unavailable" == content["code"]
    assert not (tmp_path / "missing").exists()


# -- create ---------------------------------------------------------------------------


async def test_create_writes_a_new_file_with_the_umask_mode(root: Path) -> None:
    """Create commits the bytes, says created/changed/committed/durable, mode 0o666&~umask."""
    result, content = await run(make_tool(root), create_arguments("new.txt", NEW))
    expected = {
        "ok": True,
        "call_id": "call-1",
        "path": "new.txt",
        "bytes": len(NEW_BYTES),
        "sha256": digest(NEW_BYTES),
        "created": True,
        "changed": True,
        "committed": True,
        "durable": True,
        "temporary_cleaned": True,
        "hard_links_split": False,
        "owner_changed": False,
    }
    assert expected == content
    assert result.problem is None
    assert NEW_BYTES == (root / "new.txt").read_bytes()
    assert 0o666 & ~current_umask() == stat.S_IMODE((root / "new.txt").stat().st_mode)
    assert [] == temporaries(root)


async def test_create_makes_missing_parent_directories(root: Path) -> None:
    """Missing parents inside the root are created as real directories."""
    _, content = await run(make_tool(root), create_arguments("a/b/c/new.txt", NEW))
    assert content["ok"] is True
    assert NEW_BYTES == (root / "a" / "b" / "c" / "new.txt").read_bytes()
    assert not (root / "a").is_symlink()


async def test_create_never_overwrites_and_reports_the_current_digest(root: Path) -> None:
    """Create over an existing file is already_exists; the file is untouched."""
    inode = (root / "f.txt").stat().st_ino
    result, content = await run(make_tool(root), create_arguments("f.txt", NEW))
    assert "already_exists" == content["code"]
    assert content["ok"] is False
    assert content["committed"] is False
    assert digest(OLD) == content["current_sha256"]
    assert digest(NEW_BYTES) == content["sha256"]
    assert result.problem == content["message"]
    assert OLD == (root / "f.txt").read_bytes()
    assert inode == (root / "f.txt").stat().st_ino


async def test_create_replay_answers_already_exists_with_the_same_content(root: Path) -> None:
    """A replayed create mutates once, then says the file already holds the content."""
    tool = make_tool(root)
    _, first = await run(tool, create_arguments("new.txt", NEW))
    inode = (root / "new.txt").stat().st_ino
    _, again = await run(tool, create_arguments("new.txt", NEW))
    assert first["committed"] is True
    assert "already_exists" == again["code"]
    assert again["sha256"] == again["current_sha256"]
    assert "already holds exactly the requested content" in str(again["message"])
    assert inode == (root / "new.txt").stat().st_ino
    assert [] == temporaries(root)


async def test_create_at_a_dangling_symlink_is_already_exists_and_not_followed(
    root: Path, tmp_path: Path
) -> None:
    """A dangling symlink at the target is never followed: nothing is created behind it."""
    (root / "link.txt").symlink_to("missing-target.txt")
    (root / "out.txt").symlink_to(tmp_path / "outside.txt")
    tool = make_tool(root)
    _, inside = await run(tool, create_arguments("link.txt", NEW))
    _, outside = await run(tool, create_arguments("out.txt", NEW))
    assert "already_exists" == inside["code"]
    assert "already_exists" == outside["code"]
    assert "current_sha256" not in inside
    assert not (root / "missing-target.txt").exists()
    assert not (tmp_path / "outside.txt").exists()
    assert (root / "link.txt").is_symlink()


async def test_create_through_an_escaping_symlinked_parent_is_path_escape(
    root: Path, tmp_path: Path
) -> None:
    """A parent symlink that leaves the root is refused; nothing is written outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "away").symlink_to(outside)
    _, content = await run(make_tool(root), create_arguments("away/new.txt", NEW))
    assert "path_escape" == content["code"]
    assert [] == list(outside.iterdir())


async def test_create_never_makes_a_directory_at_a_dangling_symlink(root: Path) -> None:
    """A dangling in-root symlink parent is not created through."""
    (root / "dangling").symlink_to("not-there")
    _, content = await run(make_tool(root), create_arguments("dangling/new.txt", NEW))
    assert content["ok"] is False
    assert not (root / "not-there").exists()


async def test_a_path_naming_the_root_itself_is_invalid_arguments(root: Path) -> None:
    """The root directory is no file: refused as an argument in both modes (contract 9.1)."""
    tool = make_tool(root)
    _, created = await run(tool, create_arguments(".", NEW))
    _, replaced = await run(tool, replace_arguments("dir/..", NEW, OLD))
    _, absolute = await run(tool, create_arguments(str(root) + "/", NEW))
    assert ["invalid_arguments"] * 3 == [created["code"], replaced["code"], absolute["code"]]
    assert ["f.txt"] == os.listdir(root)


# -- replace --------------------------------------------------------------------------


async def test_replace_commits_new_bytes_keeps_the_mode_and_changes_the_inode(
    root: Path,
) -> None:
    """Replace with the right digest writes atomically through a new inode, same mode."""
    target = root / "f.txt"
    target.chmod(0o640)
    inode = target.stat().st_ino
    result, content = await run(make_tool(root), replace_arguments("f.txt", NEW, OLD))
    expected = {
        "ok": True,
        "call_id": "call-1",
        "path": "f.txt",
        "bytes": len(NEW_BYTES),
        "sha256": digest(NEW_BYTES),
        "created": False,
        "changed": True,
        "committed": True,
        "durable": True,
        "temporary_cleaned": True,
        "hard_links_split": False,
        "owner_changed": False,
    }
    assert expected == content
    assert "ok" == next(iter(content))
    assert result.problem is None
    assert NEW_BYTES == target.read_bytes()
    assert 0o640 == stat.S_IMODE(target.stat().st_mode)
    assert inode != target.stat().st_ino
    assert [] == temporaries(root)


async def test_replace_keeps_special_mode_bits(root: Path) -> None:
    """An executable, group-writable mode survives the replacement."""
    target = root / "f.txt"
    target.chmod(0o775)
    await run(make_tool(root), replace_arguments("f.txt", NEW, OLD))
    assert 0o775 == stat.S_IMODE(target.stat().st_mode)


async def test_replace_replay_is_stale_and_says_the_content_is_already_there(
    root: Path,
) -> None:
    """A replayed replace does not write again: stale, current_sha256 equals sha256."""
    syscalls = Recording()
    tool = make_tool(root, syscalls)
    await run(tool, replace_arguments("f.txt", NEW, OLD))
    inode = (root / "f.txt").stat().st_ino
    result, again = await run(tool, replace_arguments("f.txt", NEW, OLD))
    assert "stale" == again["code"]
    assert again["sha256"] == again["current_sha256"] == digest(NEW_BYTES)
    assert again["committed"] is False
    assert "already holds exactly the requested content" in str(result.problem)
    assert 1 == syscalls.calls["rename"]
    assert inode == (root / "f.txt").stat().st_ino


async def test_replace_with_another_digest_is_stale_and_writes_nothing(root: Path) -> None:
    """A wrong expected digest is stale with the current digest; the file is untouched."""
    _, content = await run(make_tool(root), replace_arguments("f.txt", NEW, b"something else"))
    assert "stale" == content["code"]
    assert digest(OLD) == content["current_sha256"]
    assert "already holds" not in str(content["message"])
    assert OLD == (root / "f.txt").read_bytes()


async def test_same_digest_is_a_no_op_twice_without_temporary_file_or_rename(
    root: Path,
) -> None:
    """Replacing content with itself succeeds twice with no temporary file and no rename."""
    syscalls = Recording()
    tool = make_tool(root, syscalls)
    inode = (root / "f.txt").stat().st_ino
    arguments = replace_arguments("f.txt", OLD.decode(), OLD)
    for _ in range(2):
        _, content = await run(tool, arguments)
        assert content["ok"] is True
        assert content["changed"] is False
        assert content["committed"] is False
        assert content["durable"] is True  # nothing needed syncing (contract 9.1)
        assert content["owner_changed"] is False
        assert content["temporary_cleaned"] is True
    assert 0 == syscalls.calls["rename"]
    assert 0 == syscalls.calls["open_temporary"]
    assert 0 == syscalls.calls["fsync"]
    assert inode == (root / "f.txt").stat().st_ino
    assert [] == temporaries(root)


async def test_replacing_a_hard_linked_file_splits_the_link_and_says_so(root: Path) -> None:
    """The path gets a new inode; the other name keeps the old bytes."""
    os.link(root / "f.txt", root / "other.txt")
    _, content = await run(make_tool(root), replace_arguments("f.txt", NEW, OLD))
    assert content["hard_links_split"] is True
    assert NEW_BYTES == (root / "f.txt").read_bytes()
    assert OLD == (root / "other.txt").read_bytes()


async def test_a_symlink_target_is_not_regular_and_its_target_is_untouched(
    root: Path, tmp_path: Path
) -> None:
    """A symlink target is never followed, whether it points inside or outside the root."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OLD)
    (root / "out.txt").symlink_to(outside)
    (root / "in.txt").symlink_to("f.txt")
    tool = make_tool(root)
    _, out = await run(tool, replace_arguments("out.txt", NEW, OLD))
    _, inside = await run(tool, replace_arguments("in.txt", NEW, OLD))
    assert "not_regular" == out["code"]
    assert "not_regular" == inside["code"]
    assert OLD == outside.read_bytes()
    assert OLD == (root / "f.txt").read_bytes()
    assert (root / "out.txt").is_symlink()


async def test_a_fifo_target_is_not_regular_without_blocking(root: Path) -> None:
    """A FIFO is refused without being opened for writing or blocking the call."""
    os.mkfifo(root / "pipe")
    async with asyncio.timeout(5):
        _, replaced = await run(make_tool(root), replace_arguments("pipe", NEW, b""))
        _, created = await run(make_tool(root), create_arguments("pipe", NEW))
    assert "not_regular" == replaced["code"]
    assert "already_exists" == created["code"]
    assert stat.S_ISFIFO((root / "pipe").lstat().st_mode)


async def test_a_directory_target_is_not_regular(root: Path) -> None:
    """A directory is not replaced."""
    (root / "dir").mkdir()
    _, content = await run(make_tool(root), replace_arguments("dir", NEW, b""))
    assert "not_regular" == content["code"]


async def test_a_missing_target_is_not_found(root: Path) -> None:
    """Replace needs an existing file; the answer points at create."""
    _, content = await run(make_tool(root), replace_arguments("missing.txt", NEW, OLD))
    assert "not_found" == content["code"]
    assert "create" in str(content["message"])


async def test_a_missing_parent_is_not_found_and_nothing_is_created(root: Path) -> None:
    """Replace never creates parent directories."""
    _, content = await run(make_tool(root), replace_arguments("no/such/f.txt", NEW, OLD))
    assert "not_found" == content["code"]
    assert not (root / "no").exists()


# -- bounds ---------------------------------------------------------------------------


async def test_a_target_at_the_bound_is_replaced_and_one_past_is_too_large(
    root: Path,
) -> None:
    """The current file may hold max_write_bytes bytes; one more is file_too_large."""
    tool = make_tool(root, max_write_bytes=16)
    (root / "at.bin").write_bytes(b"a" * 16)
    (root / "past.bin").write_bytes(b"a" * 17)
    _, at = await run(tool, replace_arguments("at.bin", "x", b"a" * 16))
    _, past = await run(tool, replace_arguments("past.bin", "x", b"a" * 17))
    assert at["ok"] is True
    assert "file_too_large" == past["code"]
    assert b"a" * 17 == (root / "past.bin").read_bytes()


async def test_multibyte_content_at_the_bound_is_accepted_and_one_byte_past_is_not(
    root: Path,
) -> None:
    """The bound counts UTF-8 bytes: 5 x 'é' is 10 bytes; one more is invalid_arguments."""
    tool = make_tool(root, max_write_bytes=10)
    _, at = await run(tool, create_arguments("at.txt", "\u00e9" * 5))
    _, past = await run(tool, create_arguments("past.txt", "\u00e9" * 5 + "a"))
    assert at["ok"] is True
    assert 10 == at["bytes"]
    assert "invalid_arguments" == past["code"]
    assert not (root / "past.txt").exists()


async def test_content_over_the_bound_is_refused_before_the_target_is_looked_at(
    root: Path,
) -> None:
    """Contract 9.1: too much content is invalid_arguments, not found or not, no syscall."""
    syscalls = Recording()
    tool = make_tool(root, syscalls, max_write_bytes=4)
    _, missing = await run(tool, replace_arguments("missing/x.txt", "12345", OLD))
    _, existing = await run(tool, replace_arguments("f.txt", "12345", OLD))
    assert ("invalid_arguments", "invalid_arguments") == (missing["code"], existing["code"])
    assert 0 == sum(syscalls.calls.values())


async def test_base64_content_is_written_as_bytes_and_bounded_as_text(root: Path) -> None:
    """Binary content travels as base64; the bound counts the base64 text."""
    data = bytes(range(256))[:12]
    text = base64.b64encode(data).decode()
    tool = make_tool(root, max_write_bytes=len(text))
    _, content = await run(tool, {**create_arguments("b.bin", text), "encoding": "base64"})
    past = base64.b64encode(data + b"xyz").decode()
    _, over = await run(tool, {**create_arguments("c.bin", past), "encoding": "base64"})
    assert content["ok"] is True
    assert len(data) == content["bytes"]
    assert digest(data) == content["sha256"]
    assert data == (root / "b.bin").read_bytes()
    assert "invalid_arguments" == over["code"]


async def test_explicit_utf8_encoding_writes_the_text(root: Path) -> None:
    """encoding utf-8 is the default spelled out."""
    _, content = await run(make_tool(root), {**create_arguments("u.txt", NEW), "encoding": "utf-8"})
    assert content["ok"] is True
    assert NEW_BYTES == (root / "u.txt").read_bytes()


# -- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"path": "f.txt", "content": "x"}, id="neither-mode"),
        pytest.param(
            {"path": "f.txt", "content": "x", "create": True, "expected_sha256": "0" * 64},
            id="both-modes",
        ),
        pytest.param({"path": "f.txt", "content": "x", "create": False}, id="create-false"),
        pytest.param({"path": "f.txt", "content": "x", "expected_sha256": "A" * 64}, id="upper"),
        pytest.param({"path": "f.txt", "content": "x", "expected_sha256": "0" * 63}, id="short"),
        pytest.param(
            {"path": "f.txt", "content": "x", "expected_sha256": "0" * 64 + "\n"}, id="newline"
        ),
        pytest.param({"path": "f.txt", "content": "x", "create": 1}, id="create-integer"),
        pytest.param({"path": "f.txt", "content": 3, "create": True}, id="content-number"),
        pytest.param({"content": "x", "create": True}, id="no-path"),
        pytest.param({"path": "f.txt", "create": True}, id="no-content"),
        pytest.param(
            {"path": "f.txt", "content": "x", "create": True, "encoding": "latin-1"},
            id="encoding",
        ),
        pytest.param(
            {"path": "f.txt", "content": "not base64!", "create": True, "encoding": "base64"},
            id="bad-base64",
        ),
        pytest.param(
            {"path": "f.txt", "content": "QQ=", "create": True, "encoding": "base64"},
            id="bad-padding",
        ),
        pytest.param({"path": "f.txt", "content": "x", "create": True, "mode": 1}, id="unknown"),
        pytest.param({"path": "../f.txt", "content": "x", "create": True}, id="dotdot"),
        pytest.param({"path": "/etc/passwd", "content": "x", "create": True}, id="absolute"),
        pytest.param({"path": "", "content": "x", "create": True}, id="empty-path"),
    ],
)
async def test_malformed_arguments_are_invalid_arguments_and_touch_nothing(
    root: Path, arguments: dict[str, object]
) -> None:
    """Every malformed argument object is invalid_arguments; the tree is unchanged."""
    before = sorted(os.listdir(root))
    result, content = await run(make_tool(root), arguments)
    assert "invalid_arguments" == content["code"]
    assert content["ok"] is False
    assert result.problem == content["message"]
    assert before == sorted(os.listdir(root))
    assert OLD == (root / "f.txt").read_bytes()


async def test_a_call_for_another_tool_is_invalid_arguments(root: Path) -> None:
    """The tool answers only to its own name."""
    call = make_call(create_arguments("n.txt", "x"))
    other = type(call)(call.id, "read", call.arguments)
    result = await make_tool(root).execute(other)
    assert "invalid_arguments" == content_of(result)["code"]
    assert not (root / "n.txt").exists()


async def test_windows_route_without_the_windows_api_is_unsupported_platform(root: Path) -> None:
    """The Windows route (``platform="win32"``) on a system without the Windows API is a
    model-visible unsupported_platform failure that writes nothing (the route itself is
    tested under Windows Python: test_windows_replace.py)."""
    tool = ReplaceTool(Config(str(root)), platform="win32")
    _, content = await run(tool, create_arguments("n.txt", "x"))
    assert "unsupported_platform" == content["code"]
    assert not (root / "n.txt").exists()


# -- failures through the seam --------------------------------------------------------


def _assert_untouched(root: Path) -> None:
    assert OLD == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


@pytest.mark.parametrize(
    ("failures", "code"),
    [
        pytest.param({"open_temporary": [1]}, "temporary_failed", id="open-temporary"),
        pytest.param({"fchmod": [1]}, "temporary_failed", id="fchmod"),
        pytest.param({"write": [1]}, "write_failed", id="write"),
        pytest.param({"fsync": [1]}, "sync_failed", id="fsync-temporary"),
        pytest.param({"close_temporary": [1]}, "close_failed", id="close-temporary"),
        pytest.param({"rename": [1]}, "replace_failed", id="rename"),
        pytest.param({"read": [1]}, "read_failed", id="read-current"),
        pytest.param({"lstat": [1]}, "path_unavailable", id="lstat"),
        pytest.param({"read": [3]}, "read_failed", id="read-at-recheck"),
    ],
)
async def test_pre_commit_failures_change_nothing_and_leave_no_temporary(
    root: Path, failures: dict[str, list[int]], code: str
) -> None:
    """A failure before the commit answers its code, committed false, and changes nothing."""
    result, content = await run(
        make_tool(root, Recording(failures=failures)), replace_arguments("f.txt", NEW, OLD)
    )
    assert code == content["code"]
    assert content["committed"] is False
    assert "durable" not in content
    assert INJECTED not in result.content
    _assert_untouched(root)


@pytest.mark.parametrize(
    ("failures", "code"),
    [
        pytest.param({"open_temporary": [1]}, "temporary_failed", id="open-temporary"),
        pytest.param({"write": [1]}, "write_failed", id="write"),
        pytest.param({"fsync": [1]}, "sync_failed", id="fsync"),
        pytest.param({"close_temporary": [1]}, "close_failed", id="close"),
        pytest.param({"link": [1]}, "create_failed", id="link"),
    ],
)
async def test_create_failures_before_commit_create_nothing(
    root: Path, failures: dict[str, list[int]], code: str
) -> None:
    """A create that fails before its link leaves no file and no temporary file."""
    _, content = await run(
        make_tool(root, Recording(failures=failures)), create_arguments("n.txt", NEW)
    )
    assert code == content["code"]
    assert not (root / "n.txt").exists()
    assert [] == temporaries(root)


async def test_short_writes_are_continued_until_everything_is_written(root: Path) -> None:
    """A write that takes one byte at a time still commits every byte."""
    syscalls = Recording(write_limit=1)
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.txt", NEW, OLD))
    assert content["ok"] is True
    assert NEW_BYTES == (root / "f.txt").read_bytes()
    assert len(NEW_BYTES) == syscalls.calls["write"]


async def test_a_write_that_makes_no_progress_is_write_failed(root: Path) -> None:
    """A zero-byte write never loops forever: write_failed, nothing changed."""
    _, content = await run(
        make_tool(root, Recording(write_limit=0)), replace_arguments("f.txt", NEW, OLD)
    )
    assert "write_failed" == content["code"]
    _assert_untouched(root)


@pytest.mark.parametrize("failing", [2, 3], ids=["file", "directory"])
async def test_a_failed_post_commit_fsync_is_durability_unconfirmed_and_never_retried(
    root: Path, failing: int
) -> None:
    """Committed, then an fsync fails: committed true, durable false, no second fsync."""
    syscalls = Recording(failures={"fsync": [failing]})
    result, content = await run(make_tool(root, syscalls), replace_arguments("f.txt", NEW, OLD))
    assert "durability_unconfirmed" == content["code"]
    assert content["ok"] is False
    assert content["committed"] is True
    assert content["changed"] is True
    assert content["durable"] is False
    assert content["temporary_cleaned"] is True
    assert SUCCESS_KEYS | {"code", "message"} == set(content)
    assert ["ok", "code", "message"] == list(content)[:3]
    assert result.problem == content["message"]
    assert 3 == syscalls.calls["fsync"]
    assert NEW_BYTES == (root / "f.txt").read_bytes()
    assert [] == temporaries(root)


async def test_a_failed_temporary_removal_after_create_is_cleanup_incomplete(
    root: Path,
) -> None:
    """Create committed, then unlinking the temporary name failed: cleanup_incomplete."""
    syscalls = Recording(failures={"unlink": [1]})
    _, content = await run(make_tool(root, syscalls), create_arguments("n.txt", NEW))
    assert "cleanup_incomplete" == content["code"]
    assert content["committed"] is True
    assert content["durable"] is True
    assert content["temporary_cleaned"] is False
    assert NEW_BYTES == (root / "n.txt").read_bytes()
    left = temporaries(root)
    assert 1 == len(left)
    assert NEW_BYTES == left[0].read_bytes()


async def test_both_post_commit_problems_report_durability_first(root: Path) -> None:
    """A failed fsync and a failed removal: durability_unconfirmed, both flags false."""
    syscalls = Recording(failures={"unlink": [1], "fsync": [2]})
    _, content = await run(make_tool(root, syscalls), create_arguments("n.txt", NEW))
    assert "durability_unconfirmed" == content["code"]
    assert content["durable"] is False
    assert content["temporary_cleaned"] is False


async def test_a_failed_removal_after_a_pre_commit_failure_is_reported(root: Path) -> None:
    """When a temporary file cannot be removed after a failure, the failure says so."""
    syscalls = Recording(failures={"fsync": [1], "unlink": [1]})
    _, content = await run(make_tool(root, syscalls), replace_arguments("f.txt", NEW, OLD))
    assert "sync_failed" == content["code"]
    assert content["temporary_cleaned"] is False
    assert OLD == (root / "f.txt").read_bytes()
    assert 1 == len(temporaries(root))


async def test_create_that_loses_the_name_to_another_writer_is_already_exists(
    root: Path,
) -> None:
    """A file created between the check and the link is never overwritten."""

    def intrude() -> None:
        (root / "n.txt").write_bytes(b"theirs")

    syscalls = Recording(hooks={Checkpoint.TEMPORARY_SYNCED: intrude})
    _, content = await run(make_tool(root, syscalls), create_arguments("n.txt", NEW))
    assert "already_exists" == content["code"]
    assert digest(b"theirs") == content["current_sha256"]
    assert b"theirs" == (root / "n.txt").read_bytes()
    assert [] == temporaries(root)


async def test_a_create_target_that_cannot_be_inspected_is_path_unavailable(root: Path) -> None:
    """When the target cannot even be stat'ed, create neither guesses nor writes."""
    _, content = await run(
        make_tool(root, Recording(failures={"lstat": [1]})), create_arguments("n.txt", NEW)
    )
    assert "path_unavailable" == content["code"]
    assert not (root / "n.txt").exists()


async def test_a_nested_create_also_syncs_every_directory_it_may_have_made(root: Path) -> None:
    """Creating ``a/b/c/x`` fsyncs the root, ``a`` and ``a/b`` too: three more than flat."""
    flat = Recording()
    _, flat_content = await run(make_tool(root, flat), create_arguments("flat.txt", NEW))
    nested = Recording()
    _, content = await run(make_tool(root, nested), create_arguments("a/b/c/x.txt", NEW))
    assert (True, True) == (flat_content["durable"], content["durable"])
    assert flat.calls["fsync"] + 3 == nested.calls["fsync"]


async def test_a_failed_ancestor_sync_withdraws_the_durable_claim(root: Path) -> None:
    """When a new parent's entry cannot be synced, the committed create is not durable."""
    probe = Recording()
    await run(make_tool(root, probe), create_arguments("p/q/probe.txt", NEW))
    last_fsync = probe.calls["fsync"]
    failing = Recording(failures={"fsync": [last_fsync]})
    result, content = await run(make_tool(root, failing), create_arguments("m/n/x.txt", NEW))
    assert ("durability_unconfirmed", True, False) == (
        content["code"],
        content["committed"],
        content["durable"],
    )
    assert result.is_error
    assert NEW_BYTES == (root / "m" / "n" / "x.txt").read_bytes()
