"""replace by edits (contract 9.2): real files, every side, the same commit path."""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replace_helpers import (
    EDIT_SUCCESS_KEYS,
    INJECTED,
    WAIT_SECONDS,
    Pause,
    Recording,
    content_of,
    digest,
    make_call,
    make_tool,
    run,
    temporaries,
    watch_cancellation,
)

from spice.agent.tool import ExecutionState, RetryDisposition, interruption_of
from spice.agent.tools.coding._commit import Checkpoint
from spice.agent.tools.coding._edits import MAXIMUM_DIFF_BYTES, MAXIMUM_EDITS

OLD: Final = b"def greet(name):\n    return 'Helo, ' + name\n\n\nprint(greet('w'))\n"
FIXED: Final = OLD.replace(b"Helo", b"Hello")
DIFF: Final = (
    "--- a/f.py\n+++ b/f.py\n@@ -1,5 +1,5 @@\n def greet(name):\n"
    "-    return 'Helo, ' + name\n+    return 'Hello, ' + name\n \n \n print(greet('w'))\n"
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A worktree root holding ``f.py`` with ``OLD``."""
    tree = tmp_path / "root"
    tree.mkdir()
    (tree / "f.py").write_bytes(OLD)
    return tree


def edit(old: str, new: str, *, every: bool | None = None) -> dict[str, object]:
    """One edit object (``replace_all`` only when given)."""
    value: dict[str, object] = {"old_text": old, "new_text": new}
    if every is not None:
        value["replace_all"] = every
    return value


def edit_arguments(
    edits: list[dict[str, object]], current: bytes = OLD, path: str = "f.py"
) -> dict[str, object]:
    """Arguments of the edit form against a file whose bytes are ``current``."""
    return {"path": path, "expected_sha256": digest(current), "edits": edits}


def _unchanged(root: Path, inode: int | None = None) -> None:
    assert OLD == (root / "f.py").read_bytes()
    assert [] == temporaries(root)
    if inode is not None:
        assert inode == (root / "f.py").stat().st_ino


# -- positive -------------------------------------------------------------------------


async def test_an_edit_commits_through_the_replace_path_and_shows_its_diff(root: Path) -> None:
    """One edit: the usual success fields plus edits_applied, the diff, mode kept, new inode."""
    target = root / "f.py"
    target.chmod(0o751)
    inode = target.stat().st_ino
    result, content = await run(make_tool(root), edit_arguments([edit("Helo", "Hello")]))
    expected = {
        "ok": True,
        "call_id": "call-1",
        "path": "f.py",
        "bytes": len(FIXED),
        "sha256": digest(FIXED),
        "created": False,
        "changed": True,
        "committed": True,
        "durable": True,
        "temporary_cleaned": True,
        "hard_links_split": False,
        "owner_changed": False,
        "edits_applied": 1,
        "diff": DIFF,
        "diff_truncated": False,
    }
    assert expected == content
    assert result.problem is None
    assert FIXED == target.read_bytes()
    assert 0o751 == stat.S_IMODE(target.stat().st_mode)
    assert inode != target.stat().st_ino
    assert [] == temporaries(root)


async def test_edits_apply_in_order_and_count_every_replacement(root: Path) -> None:
    """A replace_all counts each replacement; a later edit sees the earlier result."""
    edits = [edit("name", "who", every=True), edit("who)", "person)"), edit("'w'", "'x'")]
    _, content = await run(make_tool(root), edit_arguments(edits))
    expected = OLD.replace(b"name", b"who").replace(b"who)", b"person)").replace(b"'w'", b"'x'")
    assert 4 == content["edits_applied"]
    assert expected == (root / "f.py").read_bytes()
    assert digest(expected) == content["sha256"]


async def test_crlf_and_non_ascii_bytes_are_kept_exactly(root: Path) -> None:
    """A CRLF file with non-ASCII text keeps every other byte; CR stays in the diff."""
    data = "caf\u00e9\r\nna\u00efve \U0001d11e\r\nend\r\n".encode()
    (root / "w.txt").write_bytes(data)
    arguments = edit_arguments([edit("na\u00efve", "naive")], data, "w.txt")
    _, content = await run(make_tool(root), arguments)
    after = "caf\u00e9\r\nnaive \U0001d11e\r\nend\r\n".encode()
    assert after == (root / "w.txt").read_bytes()
    assert "-na\u00efve \U0001d11e\r\n+naive \U0001d11e\r\n" in str(content["diff"])
    assert len(after) == content["bytes"]


async def test_edits_that_give_back_the_same_bytes_are_the_usual_no_op(root: Path) -> None:
    """Same bytes after the edits: success, nothing written, empty diff, durable."""
    syscalls = Recording()
    inode = (root / "f.py").stat().st_ino
    edits = [edit("Helo", "X"), edit("X", "Helo")]
    _, content = await run(make_tool(root, syscalls), edit_arguments(edits))
    assert (True, False, False) == (content["ok"], content["changed"], content["committed"])
    assert (2, "", False) == (content["edits_applied"], content["diff"], content["diff_truncated"])
    assert 0 == syscalls.calls["open_temporary"]
    assert 0 == syscalls.calls["rename"]
    _unchanged(root, inode)


async def test_a_strict_client_that_sends_every_property_with_nulls_works(root: Path) -> None:
    """Every property present, unused ones null (or create false): both forms work."""
    tool = make_tool(root)
    nulls = {"content": None, "create": None, "encoding": None}
    edits = [{**edit("Helo", "Hello"), "replace_all": None}]
    _, edited = await run(tool, {**edit_arguments(edits), **nulls})
    whole = {
        "path": "f.py",
        "content": "whole\n",
        "create": False,
        "encoding": None,
        "edits": None,
        "expected_sha256": digest(FIXED),
    }
    _, replaced = await run(tool, whole)
    created = {**whole, "path": "n.txt", "create": True, "expected_sha256": None}
    _, made = await run(tool, created)
    assert (True, True, True) == (edited["ok"], replaced["ok"], made["ok"])
    assert b"whole\n" == (root / "f.py").read_bytes()
    assert b"whole\n" == (root / "n.txt").read_bytes()


# -- negative -------------------------------------------------------------------------


async def test_an_old_text_found_nowhere_is_edit_not_found_and_nothing_is_written(
    root: Path,
) -> None:
    """edit_not_found names the edit's index; the file, its inode and the tree are unchanged."""
    inode = (root / "f.py").stat().st_ino
    edits = [edit("Helo", "Hello"), edit("missing", "x")]
    result, content = await run(make_tool(root), edit_arguments(edits))
    assert ("edit_not_found", False, False) == (
        content["code"],
        content["ok"],
        content["committed"],
    )
    assert str(content["message"]).startswith("edit 1:")
    assert result.problem == content["message"]
    _unchanged(root, inode)


async def test_an_old_text_found_twice_is_edit_ambiguous_with_index_and_count(
    root: Path,
) -> None:
    """edit_ambiguous says which edit and how many occurrences; nothing is written."""
    _, content = await run(make_tool(root), edit_arguments([edit("name", "who")]))
    assert "edit_ambiguous" == content["code"]
    assert str(content["message"]).startswith("edit 0: old_text occurs 2 times")
    _unchanged(root)


async def test_overlapping_occurrences_are_ambiguous_and_replace_all_takes_them_in_turn(
    root: Path,
) -> None:
    """ "aa" in "aaa": two places, so ambiguous; replace_all makes one replacement."""
    (root / "a.txt").write_bytes(b"aaa\n")
    tool = make_tool(root)
    _, ambiguous = await run(tool, edit_arguments([edit("aa", "X")], b"aaa\n", "a.txt"))
    every = edit_arguments([edit("aa", "X", every=True)], b"aaa\n", "a.txt")
    _, replaced = await run(tool, every)
    assert "edit_ambiguous" == ambiguous["code"]
    assert "occurs 2 times" in str(ambiguous["message"])
    assert 1 == replaced["edits_applied"]
    assert b"Xa\n" == (root / "a.txt").read_bytes()


async def test_a_new_text_containing_its_old_text_is_applied_once(root: Path) -> None:
    """Replacing Helo by HeloHelo does not loop; replace_all doubles each occurrence once."""
    _, content = await run(make_tool(root), edit_arguments([edit("Helo", "HeloHelo")]))
    assert OLD.replace(b"Helo", b"HeloHelo") == (root / "f.py").read_bytes()
    assert 1 == content["edits_applied"]


async def test_a_file_that_is_not_utf8_is_not_text(root: Path) -> None:
    """Bytes that are not UTF-8 cannot be edited: not_text, nothing written."""
    data = b"\xff\xfe binary \x00"
    (root / "b.bin").write_bytes(data)
    _, content = await run(make_tool(root), edit_arguments([edit("binary", "x")], data, "b.bin"))
    assert "not_text" == content["code"]
    assert data == (root / "b.bin").read_bytes()
    assert [] == temporaries(root)


@pytest.mark.parametrize(
    ("path", "data", "edits"),
    [
        pytest.param("f.py", OLD, [edit("missing", "x")], id="not-found"),
        pytest.param("f.py", OLD, [edit("name", "x")], id="ambiguous"),
        pytest.param("b.bin", b"\xff\xfe", [edit("x", "y")], id="not-text"),
        pytest.param("f.py", OLD, [edit("Helo", "x" * 64)], id="too-large"),
    ],
)
async def test_a_wrong_digest_is_stale_before_any_edit_problem(
    root: Path, path: str, data: bytes, edits: list[dict[str, object]]
) -> None:
    """stale beats every edit problem; it carries current_sha256 and no new digest."""
    (root / "b.bin").write_bytes(data)
    tool = make_tool(root, max_write_bytes=len(OLD) + 8)
    arguments = {**edit_arguments(edits, b"another version", path)}
    _, content = await run(tool, arguments)
    assert "stale" == content["code"]
    assert digest(data) == content["current_sha256"]
    assert "sha256" not in content
    _unchanged(root)


async def test_a_replayed_edit_is_stale_and_changes_nothing_more(root: Path) -> None:
    """The digest is consumed: the same call again answers stale with the new digest."""
    syscalls = Recording()
    tool = make_tool(root, syscalls)
    arguments = edit_arguments([edit("Helo", "Hello")])
    await run(tool, arguments)
    inode = (root / "f.py").stat().st_ino
    _, again = await run(tool, arguments)
    assert "stale" == again["code"]
    assert digest(FIXED) == again["current_sha256"]
    assert 1 == syscalls.calls["rename"]
    assert inode == (root / "f.py").stat().st_ino


async def test_targets_the_content_form_refuses_are_refused_the_same_way(root: Path) -> None:
    """Missing, symlink, directory, FIFO and oversized targets keep their codes."""
    (root / "link.py").symlink_to("f.py")
    (root / "dir").mkdir()
    os.mkfifo(root / "pipe")
    (root / "big.txt").write_bytes(b"Helo" * 20)
    tool = make_tool(root, max_edit_bytes=len(OLD))
    codes = []
    for path in ("missing.py", "no/such/f.py", "link.py", "dir", "pipe", "big.txt"):
        async with asyncio.timeout(WAIT_SECONDS):
            _, content = await run(tool, edit_arguments([edit("Helo", "Hello")], OLD, path))
        codes.append(content["code"])
    expected = ["not_found", "not_found", "not_regular", "not_regular", "not_regular"]
    assert [*expected, "file_too_large"] == codes
    assert b"Helo" * 20 == (root / "big.txt").read_bytes()
    assert not (root / "no").exists()
    _unchanged(root)


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"content": "x"}, id="with-content"),
        pytest.param({"encoding": "utf-8"}, id="with-encoding"),
        pytest.param({"create": True}, id="with-create"),
        pytest.param({"expected_sha256": None}, id="without-digest"),
        pytest.param({"edits": []}, id="no-edits"),
        pytest.param({"edits": [edit("Helo", "x")] * (MAXIMUM_EDITS + 1)}, id="65-edits"),
        pytest.param({"edits": {"old_text": "a", "new_text": "b"}}, id="not-an-array"),
        pytest.param({"edits": ["Helo"]}, id="not-an-object"),
        pytest.param({"edits": [{"new_text": "b"}]}, id="no-old-text"),
        pytest.param({"edits": [{"old_text": "Helo"}]}, id="no-new-text"),
        pytest.param({"edits": [edit("", "b")]}, id="empty-old-text"),
        pytest.param({"edits": [edit("Helo", 3)]}, id="number-new-text"),  # type: ignore[arg-type]
        pytest.param({"edits": [{**edit("Helo", "b"), "replace_all": "yes"}]}, id="string-all"),
        pytest.param({"edits": [{**edit("Helo", "b"), "count": 1}]}, id="unknown-key"),
        pytest.param({"expected_sha256": "A" * 64}, id="upper-digest"),
    ],
)
async def test_malformed_or_mixed_edit_arguments_are_invalid_and_touch_nothing(
    root: Path, arguments: dict[str, object]
) -> None:
    """Mixing forms or a malformed edit is invalid_arguments before the file is read."""
    syscalls = Recording()
    call = {**edit_arguments([edit("Helo", "Hello")]), **arguments}
    result, content = await run(make_tool(root, syscalls), call)
    assert "invalid_arguments" == content["code"]
    assert result.problem == content["message"]
    assert 0 == sum(syscalls.calls.values())
    _unchanged(root)


async def test_a_malformed_edit_is_named_by_its_index(root: Path) -> None:
    """The message says which edit is malformed."""
    edits = [edit("Helo", "x"), edit("Helo", "x"), {"old_text": 1, "new_text": "y"}]
    _, content = await run(make_tool(root), edit_arguments(edits))
    assert "edits[2].old_text must be a string" == content["message"]


# -- boundaries -----------------------------------------------------------------------


async def test_64_edits_are_accepted(root: Path) -> None:
    """The most edits a call may carry all apply, in order."""
    edits = [edit("Helo", "Helo1")] + [edit(f"Helo{n}", f"Helo{n + 1}") for n in range(1, 64)]
    assert MAXIMUM_EDITS == len(edits)
    _, content = await run(make_tool(root), edit_arguments(edits))
    assert 64 == content["edits_applied"]
    assert OLD.replace(b"Helo", b"Helo64") == (root / "f.py").read_bytes()


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)], ids=["at", "over"])
async def test_a_result_at_the_edit_bound_is_written_and_one_byte_over_is_too_large(
    root: Path, extra: int, ok: bool
) -> None:
    """The edited file may reach max_edit_bytes exactly; one more byte is file_too_large
    (max_write_bytes, far below, bounds only content)."""
    bound = len(OLD) + 10
    new = "Helo" + "o" * (10 + extra)
    tool = make_tool(root, max_write_bytes=1, max_edit_bytes=bound)
    _, content = await run(tool, edit_arguments([edit("Helo", new)]))
    assert ok == content["ok"]
    if ok:
        assert bound == len((root / "f.py").read_bytes())
    else:
        assert "file_too_large" == content["code"]
        _unchanged(root)


@pytest.mark.parametrize(("extra", "cut"), [(0, False), (1, True)], ids=["at", "over"])
async def test_the_diff_is_whole_at_16_kib_and_cut_one_byte_over(
    root: Path, extra: int, cut: bool
) -> None:
    """A diff of exactly MAXIMUM_DIFF_BYTES comes whole; one byte more is diff_truncated."""
    (root / "x.txt").write_bytes(b"x\n")
    header = len("--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-x\n+\n")
    new = "y" * (MAXIMUM_DIFF_BYTES - header + extra)
    _, content = await run(make_tool(root), edit_arguments([edit("x", new)], b"x\n", "x.txt"))
    assert content["ok"] is True
    assert cut == content["diff_truncated"]
    diff = str(content["diff"])
    assert (len(diff.encode()) == MAXIMUM_DIFF_BYTES) == (not cut)
    assert len(diff.encode()) <= MAXIMUM_DIFF_BYTES
    assert (new + "\n").encode() == (root / "x.txt").read_bytes()


# -- failures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "code"),
    [
        pytest.param({"lstat": [1]}, "path_unavailable", id="lstat-at-edit-read"),
        pytest.param({"read": [1]}, "read_failed", id="read-at-edit-read"),
        pytest.param({"read": [3]}, "read_failed", id="read-at-preflight"),
        pytest.param({"write": [1]}, "write_failed", id="write"),
        pytest.param({"fsync": [1]}, "sync_failed", id="fsync-temporary"),
        pytest.param({"rename": [1]}, "replace_failed", id="rename"),
    ],
)
async def test_failures_before_the_commit_change_nothing(
    root: Path, failures: dict[str, list[int]], code: str
) -> None:
    """Injected faults at the edit's read or in the commit path: nothing changes."""
    syscalls = Recording(failures=failures)
    result, content = await run(make_tool(root, syscalls), edit_arguments([edit("Helo", "Hi")]))
    assert (code, False) == (content["code"], content["committed"])
    assert INJECTED not in result.content
    _unchanged(root)


async def test_a_failed_post_commit_fsync_keeps_the_edit_fields(root: Path) -> None:
    """Committed but not durable: the content still carries edits_applied and the diff."""
    syscalls = Recording(failures={"fsync": [2]})
    _, content = await run(make_tool(root, syscalls), edit_arguments([edit("Helo", "Hello")]))
    assert ("durability_unconfirmed", True, False) == (
        content["code"],
        content["committed"],
        content["durable"],
    )
    assert EDIT_SUCCESS_KEYS | {"code", "message"} == set(content)
    assert DIFF == content["diff"]
    assert FIXED == (root / "f.py").read_bytes()


async def test_a_file_changed_after_the_edits_were_applied_is_stale(root: Path) -> None:
    """Another writer between the edit's read and the commit path: stale, theirs survives."""
    theirs = OLD + b"# theirs\n"

    def intrude() -> None:
        (root / "f.py").write_bytes(theirs)

    syscalls = Recording(hooks={Checkpoint.EDITS_APPLIED: intrude})
    _, content = await run(make_tool(root, syscalls), edit_arguments([edit("Helo", "Hello")]))
    assert "stale" == content["code"]
    assert (digest(FIXED), digest(theirs)) == (content["sha256"], content["current_sha256"])
    assert theirs == (root / "f.py").read_bytes()
    assert [] == temporaries(root)


# -- cancellation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "point",
    [Checkpoint.EDITS_APPLIED, Checkpoint.PREFLIGHT_DONE, Checkpoint.TEMPORARY_SYNCED],
    ids=str,
)
async def test_cancel_at_any_point_before_the_commit_changes_nothing(
    root: Path, point: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled before the commit: definitive/allowed, old bytes, no temporary, lease free."""
    pause = Pause()
    pause.release = watch_cancellation(monkeypatch)
    tool = make_tool(root, Recording(hooks={point: pause}))
    arguments = edit_arguments([edit("Helo", "Hello")])
    task = asyncio.ensure_future(tool.execute(make_call(arguments)))
    await pause.wait_reached()
    task.cancel()  # the worker goes on once the cancellation reached it
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(WAIT_SECONDS * 2):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert (ExecutionState.DEFINITIVE, RetryDisposition.ALLOWED, None) == (
        interruption.state,
        interruption.retry,
        interruption.result,
    )
    _unchanged(root)
    _, again = await run(tool, arguments)
    assert again["committed"] is True


async def test_cancel_after_the_commit_carries_the_edit_result(root: Path) -> None:
    """Cancelled after the rename: the Interruption's result has the diff and the count."""
    pause = Pause()
    tool = make_tool(root, Recording(hooks={Checkpoint.COMMITTED: pause}))
    task = asyncio.ensure_future(tool.execute(make_call(edit_arguments([edit("Helo", "Hello")]))))
    await pause.wait_reached()
    task.cancel()
    pause.release.set()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with asyncio.timeout(WAIT_SECONDS * 2):
            await task
    interruption = interruption_of(caught.value)
    assert interruption is not None
    assert interruption.result is not None
    content = content_of(interruption.result)
    assert (True, 1, DIFF) == (content["committed"], content["edits_applied"], content["diff"])
    assert FIXED == (root / "f.py").read_bytes()


# -- properties -----------------------------------------------------------------------

_words = st.sampled_from(["a", "b", "ab", "\n", "\r\n", "\u00e9"])
_file_texts = st.lists(_words, max_size=20).map("".join)
_edit_lists = st.lists(
    st.builds(
        edit,
        st.lists(_words, min_size=1, max_size=3).map("".join),
        st.lists(_words, max_size=3).map("".join),
        every=st.none() | st.booleans(),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_file_texts, edits=_edit_lists)
def test_any_edit_list_leaves_either_the_edited_file_or_the_old_one(
    text: str, edits: list[dict[str, object]]
) -> None:
    """On disk: the answer's digest on success, the old bytes otherwise; never a temporary."""
    data = text.encode()

    async def go(root: Path) -> dict[str, object]:
        _, content = await run(make_tool(root), edit_arguments(edits, data, "t.txt"))
        return content

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "t.txt").write_bytes(data)
        content = asyncio.run(go(root))
        after = (root / "t.txt").read_bytes()
        if content["ok"] is True:
            assert digest(after) == content["sha256"]
            assert content["changed"] == (after != data)
        else:
            assert content["code"] in {"edit_not_found", "edit_ambiguous"}
            assert data == after
        assert [] == temporaries(root)
