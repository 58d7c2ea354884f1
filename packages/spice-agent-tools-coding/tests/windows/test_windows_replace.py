"""``replace`` on Windows: temporary beneath the directory handle, flushed, renamed relative
to it; bounded, cancellation-aware retries while another process holds the target.

Runs under Windows CPython (real Windows, or Wine: ``make test-windows``); skipped
elsewhere with that reason. The retry tests are driven by a second Windows process that
holds the target with share mode 0 (``windows_helpers.Holder``): sharing-violation on
open, access-denied on rename, on demand.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

import pytest
from windows_helpers import (
    UNDER_WINE,
    WINE_NO_POSIX_RENAME,
    WINE_SYNTHETIC_ACLS,
    Holder,
    dacl_sddl,
    make_junction,
    make_symlink,
    nobody_holds,
    set_dacl,
    windows_only,
)

from spice.agent.tool import Call, Result, interruption_of
from spice.agent.tools.coding import Config, new_replace
from spice.agent.tools.coding._decision import EDIT_NOT_FOUND
from spice.agent.tools.coding._windows import _commit as _commit_windows
from spice.agent.tools.coding._windows._commit import (
    REFUSED_ATTEMPTS,
    REPLACE_ATTEMPTS,
    RETRY_FIRST_DELAY_SECONDS,
    RETRY_MAXIMUM_DELAY_SECONDS,
)

pytestmark = windows_only

REFUSAL_WAIT_SECONDS = 120.0
"""Longest a test waits for the call's first refused attempt (Wine starts slowly)."""

PATIENT_ATTEMPTS = 400
"""``REPLACE_ATTEMPTS`` for a test that acts on a hold while the call waits: about 200 s of
waits (0.5 s each past the first few), so the call is still waiting however late the
test's event loop wakes. With the real 8 attempts all the waits take 1.6 s: a loaded
machine (CI runs Wine beside other work) woke the test after the call had already given
up, and the cancellation found a finished call."""


async def refused_after(seen: int) -> None:
    """Wait until an attempt after ``seen`` was refused: the call is in its retry loop."""
    assert await asyncio.to_thread(REFUSED_ATTEMPTS.wait_past, seen, REFUSAL_WAIT_SECONDS)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_of(result: Result) -> dict[str, object]:
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value


async def replace(root: Path, arguments: dict[str, object]) -> dict[str, object]:
    tool = new_replace(Config(str(root)))
    result = await tool.execute(Call("c", "replace", json.dumps(arguments)))
    content = content_of(result)
    assert (result.problem is None) == (content["ok"] is True)
    return content


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".spice-replace-*"))


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call keeps retrying until the test releases the hold or cancels (bounded)."""
    monkeypatch.setattr(_commit_windows, "REPLACE_ATTEMPTS", PATIENT_ATTEMPTS)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    worktree = tmp_path / "root"
    worktree.mkdir()
    (worktree / "a.txt").write_bytes(b"old\n")
    (tmp_path / "outside.txt").write_bytes(b"SECRET")
    return worktree


# ---- positive -------------------------------------------------------------------------------


async def test_create_writes_a_new_file_durably(root: Path) -> None:
    content = await replace(root, {"path": "new.txt", "content": "x\r\ny", "create": True})
    assert content["ok"] is True
    assert content["created"] is True
    assert content["committed"] is True
    assert content["durable"] is True
    assert b"x\r\ny" == (root / "new.txt").read_bytes()
    assert [] == leftovers(root)


async def test_create_makes_missing_parents_inside_the_root(root: Path) -> None:
    content = await replace(root, {"path": "d\\e\\f.txt", "content": "1", "create": True})
    assert "d/e/f.txt" == content["path"]
    assert b"1" == (root / "d" / "e" / "f.txt").read_bytes()
    assert content["durable"] is True


async def test_replace_with_the_expected_digest(root: Path) -> None:
    content = await replace(
        root, {"path": "a.txt", "content": "new\n", "expected_sha256": sha(b"old\n")}
    )
    assert content["ok"] is True
    assert content["changed"] is True
    assert content["durable"] is True
    assert sha(b"new\n") == content["sha256"]
    assert b"new\n" == (root / "a.txt").read_bytes()
    assert [] == leftovers(root)


async def test_the_same_content_is_a_durable_no_op(root: Path) -> None:
    before = os.stat(root / "a.txt").st_ino
    content = await replace(
        root, {"path": "a.txt", "content": "old\n", "expected_sha256": sha(b"old\n")}
    )
    assert content["ok"] is True
    assert content["changed"] is False
    assert content["committed"] is False
    assert content["durable"] is True
    assert before == os.stat(root / "a.txt").st_ino


async def test_edits_form(root: Path) -> None:
    (root / "e.txt").write_bytes(b"one\ntwo\n")
    content = await replace(
        root,
        {
            "path": "e.txt",
            "expected_sha256": sha(b"one\ntwo\n"),
            "edits": [{"old_text": "two", "new_text": "2"}],
        },
    )
    assert content["ok"] is True
    assert 1 == content["edits_applied"]
    assert b"one\n2\n" == (root / "e.txt").read_bytes()


@pytest.mark.parametrize(
    ("grown", "accepted"), [(1, True), (4, True), (5, False)], ids=["under", "at", "over"]
)
async def test_the_edits_form_is_bounded_by_max_edit_bytes_not_max_write_bytes(
    root: Path, grown: int, accepted: bool
) -> None:
    """Contract 10.2: the file and its result may reach ``max_edit_bytes`` (here 20 bytes,
    over ``max_write_bytes`` of 8); one byte more is ``file_too_large``, nothing written."""
    before = b"0123456789abcdef"  # 16 bytes: over max_write_bytes, under max_edit_bytes
    (root / "big.txt").write_bytes(before)
    arguments = {
        "path": "big.txt",
        "expected_sha256": sha(before),
        "edits": [{"old_text": "abc", "new_text": "abc" + "x" * grown}],
    }
    config = Config(str(root), max_write_bytes=8, max_edit_bytes=20)
    result = await new_replace(config).execute(Call("c", "replace", json.dumps(arguments)))
    content = content_of(result)
    if accepted:
        assert (True, 16 + grown) == (content["ok"], content["bytes"])
        assert before.replace(b"abc", b"abc" + b"x" * grown) == (root / "big.txt").read_bytes()
    else:
        assert (False, "file_too_large") == (content["ok"], content["code"])
        assert before == (root / "big.txt").read_bytes()


async def test_an_edit_not_found_carries_the_same_hint_as_on_posix(root: Path) -> None:
    """Contract 10.2: edit_not_found names the edit and the most similar line, as on POSIX."""
    before = b"alpha\n    value = compute(1)\nomega\n"
    (root / "h.txt").write_bytes(before)
    content = await replace(
        root,
        {
            "path": "h.txt",
            "expected_sha256": sha(before),
            "edits": [{"old_text": "value = compute(1)\n  omega", "new_text": ""}],
        },
    )
    assert ("edit_not_found", 0, 2) == (
        content["code"],
        content["edit_index"],
        content["similar_line"],
    )
    assert "value = compute(1)" in str(content["similar_text"])
    assert before == (root / "h.txt").read_bytes()


async def test_an_edit_of_a_missing_file_says_how_to_create_it(root: Path) -> None:
    """The edits form of a missing file points to content with create (as on POSIX)."""
    content = await replace(
        root,
        {
            "path": "gone.txt",
            "expected_sha256": sha(b""),
            "edits": [{"old_text": "a", "new_text": "b"}],
        },
    )
    assert ("not_found", EDIT_NOT_FOUND) == (content["code"], content["message"])
    assert not (root / "gone.txt").exists()


async def test_a_file_with_two_names_says_its_links_split(root: Path) -> None:
    os.link(root / "a.txt", root / "b.txt")
    content = await replace(
        root, {"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}
    )
    assert content["hard_links_split"] is True
    assert b"old\n" == (root / "b.txt").read_bytes()


async def test_the_replaced_files_protected_dacl_is_kept(root: Path) -> None:
    """A file the user restricted (an explicit, protected DACL) keeps it after a replace:
    the replacement does not take the directory's inherited ACL."""
    if UNDER_WINE:
        pytest.skip(WINE_SYNTHETIC_ACLS)
    (root / "fresh.txt").write_bytes(b"")
    inherited = dacl_sddl(root / "fresh.txt")  # what a new file gets here
    set_dacl(root / "a.txt", "D:P(A;;FA;;;SY)(A;;FR;;;WD)")
    before = dacl_sddl(root / "a.txt")
    assert before != inherited  # the test would be vacuous otherwise
    content = await replace(
        root, {"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}
    )
    assert content["ok"] is True
    assert before == dacl_sddl(root / "a.txt")
    assert content["owner_changed"] is False


async def test_a_created_file_takes_the_directorys_acl(root: Path) -> None:
    if UNDER_WINE:
        pytest.skip(WINE_SYNTHETIC_ACLS)
    (root / "fresh.txt").write_bytes(b"")
    inherited = dacl_sddl(root / "fresh.txt")
    set_dacl(root / "a.txt", "D:P(A;;FA;;;SY)(A;;FR;;;WD)")
    await replace(root, {"path": "new.txt", "content": "n", "create": True})
    assert inherited == dacl_sddl(root / "new.txt")


@pytest.mark.parametrize(
    ("state", "ok", "code"),
    [("refused", True, None), ("failed", False, "durability_unconfirmed")],
)
async def test_a_directory_flush_windows_refuses_is_not_durable(
    root: Path, monkeypatch: pytest.MonkeyPatch, state: str, ok: bool, code: str | None
) -> None:
    """Injected (Wine flushes directories): a flush Windows does not allow gives a
    committed success with ``durable: false``; an I/O failure gives
    ``durability_unconfirmed``. A failed flush is never retried into ``durable: true``."""
    from spice.agent.tools.coding._windows import _root as _root_windows  # noqa: PLC0415 - Windows only

    calls: list[int] = []

    def flush_directory(directory: int) -> str:
        calls.append(directory)
        return state

    monkeypatch.setattr(_root_windows, "flush_directory", flush_directory)
    content = await replace(
        root, {"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}
    )
    assert 1 == len(calls)
    assert ok is content["ok"]
    assert code == content.get("code")
    assert content["committed"] is True
    assert content["durable"] is False
    assert b"n" == (root / "a.txt").read_bytes()


# ---- negative -------------------------------------------------------------------------------


async def test_a_stale_digest_changes_nothing(root: Path) -> None:
    content = await replace(root, {"path": "a.txt", "content": "n", "expected_sha256": "0" * 64})
    assert "stale" == content["code"]
    assert sha(b"old\n") == content["current_sha256"]
    assert b"old\n" == (root / "a.txt").read_bytes()
    assert [] == leftovers(root)


async def test_create_never_overwrites(root: Path) -> None:
    content = await replace(root, {"path": "a.txt", "content": "n", "create": True})
    assert "already_exists" == content["code"]
    assert b"old\n" == (root / "a.txt").read_bytes()


async def test_create_into_an_existing_name_with_other_case_never_overwrites(root: Path) -> None:
    content = await replace(root, {"path": "A.TXT", "content": "n", "create": True})
    assert "already_exists" == content["code"]
    assert b"old\n" == (root / "a.txt").read_bytes()


async def test_a_directory_is_not_regular(root: Path) -> None:
    (root / "d").mkdir()
    content = await replace(root, {"path": "d", "content": "n", "expected_sha256": "0" * 64})
    assert "not_regular" == content["code"]


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "a.txt:s", "CON", "a.txt.", "\\\\localhost\\c$\\x", "D:\\x", "PROGRA~1"],
)
async def test_names_windows_would_read_otherwise_are_invalid(root: Path, path: str) -> None:
    content = await replace(root, {"path": path, "content": "n", "create": True})
    assert "invalid_arguments" == content["code"]
    assert b"SECRET" == (root.parent / "outside.txt").read_bytes()


async def test_a_failed_create_removes_the_parents_it_made(root: Path) -> None:
    (root / "x").mkdir()
    (root / "x" / "y").write_bytes(b"file, not a directory")
    content = await replace(root, {"path": "x/y/z/f.txt", "content": "n", "create": True})
    assert content["code"] in {"not_regular", "path_unavailable"}
    content = await replace(root, {"path": "p/q/CON", "content": "n", "create": True})
    assert "invalid_arguments" == content["code"]
    assert not (root / "p").exists()


async def test_a_symlink_target_is_not_regular(root: Path) -> None:
    make_symlink(root / "link.txt", root.parent / "outside.txt")
    content = await replace(
        root, {"path": "link.txt", "content": "n", "expected_sha256": sha(b"SECRET")}
    )
    assert "not_regular" == content["code"]
    assert b"SECRET" == (root.parent / "outside.txt").read_bytes()


async def test_a_junction_on_the_way_is_an_escape(root: Path) -> None:
    make_junction(root / "j", root.parent)
    content = await replace(root, {"path": "j/new.txt", "content": "n", "create": True})
    assert "path_escape" == content["code"]
    assert not (root.parent / "new.txt").exists()


async def test_posix_rename_replaces_a_file_another_process_has_open(root: Path) -> None:
    """With POSIX semantics the name is replaced while another process has the old file
    open (sharing read, write and delete); the classic rename would be refused."""
    if UNDER_WINE:
        pytest.skip(WINE_NO_POSIX_RENAME)
    with Holder(root / "a.txt", share=7):
        content = await replace(
            root, {"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}
        )
    assert content["ok"] is True
    assert b"n" == (root / "a.txt").read_bytes()


# ---- the retry loop: a second Windows process holds the target ------------------------------


@pytest.mark.usefixtures("patient")
async def test_a_hold_that_clears_is_waited_out(root: Path) -> None:
    """Held with share mode 0 (sharing-violation on the check, access-denied on the
    rename), released during the retries: the replace then commits."""
    holder = Holder(root / "a.txt")
    tool = new_replace(Config(str(root)))
    call = Call(
        "c",
        "replace",
        json.dumps({"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}),
    )
    seen = REFUSED_ATTEMPTS.value
    task = asyncio.ensure_future(tool.execute(call))
    await refused_after(seen)
    assert not task.done()
    holder.release()
    content = content_of(await task)
    assert content["ok"] is True
    assert b"n" == (root / "a.txt").read_bytes()
    assert [] == leftovers(root)


async def test_a_hold_that_does_not_clear_exhausts_to_replace_failed(root: Path) -> None:
    """Every attempt is refused: after the bounded attempts, replace_failed; nothing changed,
    no temporary left."""
    seen = REFUSED_ATTEMPTS.value
    with Holder(root / "a.txt"):
        content = await replace(
            root, {"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}
        )
    assert "replace_failed" == content["code"]
    assert content["committed"] is False
    assert b"old\n" == (root / "a.txt").read_bytes()
    assert [] == leftovers(root)
    # Every one of the bounded attempts was made, and refused.
    assert REPLACE_ATTEMPTS == REFUSED_ATTEMPTS.value - seen


def test_the_retry_bound_is_a_few_seconds() -> None:
    """All waits together: the sum of the doubling delays, capped."""
    total, delay = 0.0, RETRY_FIRST_DELAY_SECONDS
    for _ in range(REPLACE_ATTEMPTS - 1):
        total += delay
        delay = min(2 * delay, RETRY_MAXIMUM_DELAY_SECONDS)
    assert total < 3.0


@pytest.mark.usefixtures("patient")
async def test_every_attempt_repeats_the_digest_check(root: Path) -> None:
    """Held, then changed by the holder itself while the call waits (it writes through its
    handle, then lets go): the next attempt sees the new digest and answers stale, without
    writing."""
    holder = Holder(root / "a.txt", writable=True)
    tool = new_replace(Config(str(root)))
    call = Call(
        "c",
        "replace",
        json.dumps({"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}),
    )
    seen = REFUSED_ATTEMPTS.value
    task = asyncio.ensure_future(tool.execute(call))
    await refused_after(seen)
    holder.release(write=b"theirs")
    content = content_of(await task)
    assert "stale" == content["code"]
    assert sha(b"theirs") == content["current_sha256"]
    assert b"theirs" == (root / "a.txt").read_bytes()


@pytest.mark.usefixtures("patient")
async def test_every_attempt_repeats_the_regular_file_check(root: Path) -> None:
    """Held, then replaced by a directory: the next attempt answers not_regular."""
    holder = Holder(root / "a.txt")
    tool = new_replace(Config(str(root)))
    call = Call(
        "c",
        "replace",
        json.dumps({"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}),
    )
    seen = REFUSED_ATTEMPTS.value
    task = asyncio.ensure_future(tool.execute(call))
    await refused_after(seen)
    holder.release()
    (root / "a.txt").unlink()
    (root / "a.txt").mkdir()
    content = content_of(await task)
    assert content["code"] in {"not_regular", "not_found"}
    assert (root / "a.txt").is_dir()
    assert [] == leftovers(root)


@pytest.mark.usefixtures("patient")
async def test_cancellation_during_the_retries_is_definitive(root: Path) -> None:
    """Cancelled while waiting on a hold: nothing was written, the Interruption says so,
    and the temporary is gone."""
    with Holder(root / "a.txt"):
        tool = new_replace(Config(str(root)))
        call = Call(
            "c",
            "replace",
            json.dumps({"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")}),
        )
        seen = REFUSED_ATTEMPTS.value
        task = asyncio.ensure_future(tool.execute(call))
        await refused_after(seen)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as raised:
            await task
        interruption = interruption_of(raised.value)
        assert interruption is not None
        assert "definitive" == interruption.state
        assert interruption.result is None
    assert b"old\n" == (root / "a.txt").read_bytes()
    assert [] == leftovers(root)


@pytest.mark.usefixtures("patient")
async def test_a_directory_renamed_while_held_never_redirects_the_write(root: Path) -> None:
    """The call holds ``sub``'s handle while it waits on a hold; ``sub`` is renamed
    meanwhile and a new ``sub`` made in its place. The impostor is never written. On
    Windows the write lands in the held directory under its new name; Wine resolves a
    rename's ``RootDirectory`` by the directory's old name (``STATUS_NO_SUCH_FILE``), so
    there the call fails closed (``replace_failed``, or ``temporary_failed`` when giving the
    temporary the target's DACL already fails that way), nothing written, and (Wine deleting by
    the old name too) the temporary left behind is reported, ``temporary_cleaned: false``."""
    (root / "sub").mkdir()
    (root / "sub" / "a.txt").write_bytes(b"old\n")
    holder = Holder(root / "sub" / "a.txt")
    tool = new_replace(Config(str(root)))
    arguments = {"path": "sub/a.txt", "content": "n", "expected_sha256": sha(b"old\n")}
    seen = REFUSED_ATTEMPTS.value
    task = asyncio.ensure_future(tool.execute(Call("c", "replace", json.dumps(arguments))))
    await refused_after(seen)
    try:
        (root / "sub").rename(root / "moved")
    except PermissionError:
        holder.release()
        await task
        pytest.skip("this file system refuses to rename a directory with a file open inside")
    (root / "sub").mkdir()
    (root / "sub" / "a.txt").write_bytes(b"impostor")
    holder.release()
    content = content_of(await task)
    assert b"impostor" == (root / "sub" / "a.txt").read_bytes()
    if UNDER_WINE:
        # Wine also deletes the temporary by the old name: it stays, and the answer says so.
        # (Its SetSecurityInfo works by the old name too: then the call stops earlier.)
        assert content["code"] in {"replace_failed", "temporary_failed"}, content
        assert b"old\n" == (root / "moved" / "a.txt").read_bytes()
        assert content["temporary_cleaned"] is False
        assert 1 == len(leftovers(root / "moved"))
    else:
        assert [] == leftovers(root)
        assert content["ok"] is True, content
        assert b"n" == (root / "moved" / "a.txt").read_bytes()


# ---- resources ------------------------------------------------------------------------------


async def test_no_handle_is_left_open(root: Path) -> None:
    await replace(root, {"path": "a.txt", "content": "n", "expected_sha256": sha(b"old\n")})
    await replace(root, {"path": "a.txt", "content": "m", "expected_sha256": "0" * 64})
    await replace(root, {"path": "s/t.txt", "content": "m", "create": True})
    await replace(root, {"path": "s/t.txt", "content": "m", "create": True})
    for touched in (root, root / "a.txt", root / "s", root / "s" / "t.txt"):
        assert nobody_holds(touched), touched
