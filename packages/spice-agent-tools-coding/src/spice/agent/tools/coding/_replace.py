"""The ``replace`` tool: stale-protected, atomic, durable and idempotent file writes.

A call reports progress, validates its arguments (``_replace_arguments``), takes the
instance's write lease and runs the engine (``_commit.write_file``) in a worker thread.
The lease is held until that thread has finished, whatever happens to the calling task.

The two input forms end in the same engine. The content form knows its bytes at once.
The edit form reads the current file in the worker, under the lease: missing, special or
oversized targets answer as for the content form, a digest other than
``expected_sha256`` is ``stale`` before any edit is looked at, bytes that are not UTF-8
are ``not_text``; then the pure edit rule (``_edits``) gives the new text or an edit
failure, and the new bytes go to ``write_file`` like any content (which inspects the
file again, so a change in between is ``stale`` there).

Cancellation: the worker checks a :class:`~._commit.CommitGate` before its commit point.
No worker is started after an observed cancellation (``settling.deliver_cancellation``).
A cancelled call sets the flag, waits (``settling.settle``: bounded by
``SETTLE_SECONDS``, repeated cancellations held back, no wake-up of its own) for the
worker to stop or to finish its commit, attaches an ``Interruption`` that matches the
disk, and re-raises the first ``CancelledError``:

- stopped before the commit: ``definitive``/``allowed``, no result, nothing changed;
- committed: ``definitive``/``allowed`` with the committed ``Result``;
- still running after the bound: ``definitive``/``allowed`` if it had not reached the
  commit point (it will stop there), else ``uncertain``/``never``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import stat
import sys
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tool import (
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    ExecutionState,
    Interruption,
    ReplaySafety,
    Reporter,
    Result,
    RetryDisposition,
    Tool,
)

from ._commit import POSIX, Checkpoint, CommitGate, Syscalls, inspect, write_file
from ._config import Config
from ._decision import ABORTED, DURABILITY_UNCONFIRMED, JOURNAL_FAILED, Outcome, Request
from ._edits import EditFailure
from ._journal import JournalError
from ._platform import root_supported
from ._progress import attach, report_progress
from ._protected import PROTECTED
from ._replace_arguments import Arguments, Edits, Invalid, Whole, decode, description, schema
from ._replace_judge import DiskAfter, refused_by_judge
from ._replace_work import Change, Done, Refused, edited, protected, withdrawn
from ._results import failure, success
from ._root import MadeDirectory, PathError, open_directory, open_root, remove_made, split_parent
from ._where import real_relative
from .settling import deliver_cancellation, in_thread, settle

NAME: Final = "replace"
SETTLE_SECONDS: Final = 30.0
"""How long a cancelled call waits for its worker thread to stop or finish committing."""
_DEFINITIVE: Final = ExecutionState.DEFINITIVE
_ALLOWED: Final = RetryDisposition.ALLOWED

PROGRESS: Final = "replace: writing a file under the root"
WRONG_TOOL: Final = "the call names another tool"
UNSUPPORTED: Final = "replace on Windows needs the Windows API, which this system does not have"
UNEXPECTED: Final = "replace failed unexpectedly"
UNPLACED: Final = (
    "the directory's place beneath the root cannot be told, so whether the path is "
    "protected cannot be either; nothing was changed"
)


@final
class ReplaceTool:
    """The ``replace`` tool of one ``Config``; ``syscalls`` is a seam for fault tests."""

    def __init__(
        self, config: Config, *, syscalls: Syscalls = POSIX, platform: str = sys.platform
    ) -> None:
        self._config = config
        self._syscalls = syscalls
        self._platform = platform
        self._worker = _windows_work if platform == "win32" else _work
        self._lease = asyncio.Lock()
        self._definition = Definition(
            NAME,
            description(config),
            schema(config.max_write_bytes),
            Effect.MUTATING,
            ReplaySafety.IDEMPOTENT,
            (Capability.FILESYSTEM_READ, Capability.FILESYSTEM_WRITE),
        )

    @property
    def definition(self) -> Definition:
        """Name ``replace``, mutating, idempotent, reads and writes files."""
        return self._definition

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        """Write the file as the call asks; see the module docstring for cancellation."""
        # One progress message first, before any check (as read and shell do).
        await report_progress(call, reporter, PROGRESS, _ALLOWED)
        if not root_supported(self._platform):
            return _refused(call, "unsupported_platform", UNSUPPORTED)
        if call.name != NAME:
            return _refused(call, "invalid_arguments", WRONG_TOOL)
        try:
            arguments = decode(call.arguments, self._config)
        except Invalid as invalid:
            return _refused(call, invalid.code, invalid.message)
        try:
            await self._lease.acquire()
        except asyncio.CancelledError as cancelled:
            attach(cancelled, Interruption(call.id, _DEFINITIVE, _ALLOWED))
            raise
        gate = CommitGate()
        try:
            # No worker after an observed cancellation: one requested while the call
            # reported progress (or before it started) is delivered here, not at the
            # first await after the thread was started.
            await deliver_cancellation()
            # A future the thread completes from its own end (no task around it), so
            # the loop's shutdown cannot mark it done while the thread still runs.
            worker = in_thread(self._worker, self._config, self._syscalls, arguments, gate, call.id)
        except asyncio.CancelledError as cancelled:
            self._lease.release()
            attach(cancelled, Interruption(call.id, _DEFINITIVE, _ALLOWED))
            raise
        except BaseException:
            self._lease.release()
            raise
        # The lease is released when the thread is done (its own end completes the
        # future), not when this task leaves or the loop cancels its tasks.
        worker.add_done_callback(self._release)
        try:
            done = await asyncio.shield(worker)
        except asyncio.CancelledError as cancelled:
            attach(cancelled, await self._settle(call, arguments, worker, gate))
            raise
        except Exception:  # noqa: BLE001 - a defect in the worker is a host failure
            state, retry = _unknown(gate)
            raise ExecutionError(call.id, state, retry, UNEXPECTED) from None
        return _answer(call, arguments, done)

    def _release(self, _worker: asyncio.Future[Done]) -> None:
        self._lease.release()

    async def _settle(
        self,
        call: Call,
        arguments: Arguments,
        worker: asyncio.Future[Done],
        gate: CommitGate,
    ) -> Interruption:
        """Stop the worker before its commit point or let it finish; say what happened."""
        gate.cancel()
        # Repeated cancellations are held back (``settling``); the caller re-raises the first.
        settled = await settle(worker, SETTLE_SECONDS)
        if not settled.done or worker.cancelled() or worker.exception() is not None:
            state, retry = _unknown(gate)
            return Interruption(call.id, state, retry)
        done = worker.result()
        if done.outcome.committed:
            return Interruption(call.id, _DEFINITIVE, _ALLOWED, _answer(call, arguments, done))
        return Interruption(call.id, _DEFINITIVE, _ALLOWED)


def _work(
    config: Config, syscalls: Syscalls, arguments: Arguments, gate: CommitGate, call_id: str
) -> Done:
    """The blocking part, in a worker thread."""
    body = arguments.body
    change = Change(body.data, body.sha256) if isinstance(body, Whole) else None
    if gate.cancelled:
        return Done(ABORTED, change)
    refused = protected(config, arguments.path)
    if refused is not None:
        return Done(refused, change)
    try:
        root_fd = open_root(config.root)
    except PathError as error:
        return Done(Outcome(error.code, error.message), change)
    made: list[MadeDirectory] = []
    try:
        done = _write_beneath(
            config, syscalls, root_fd, _Write(arguments, gate, call_id), made, change
        )
        if made and not done.outcome.committed:
            return Done(_withdraw(root_fd, made, done.outcome), done.change)
        return done
    finally:
        with contextlib.suppress(OSError):
            os.close(root_fd)


def _windows_work(
    config: Config, _syscalls: Syscalls, arguments: Arguments, gate: CommitGate, call_id: str
) -> Done:
    """The Windows worker (``_windows._replace``); ``unsupported_platform`` without its API."""
    from ._windows import _api as _winapi  # noqa: PLC0415 - the Windows modules load only on this route

    if not _winapi.available():
        body = arguments.body
        change = Change(body.data, body.sha256) if isinstance(body, Whole) else None
        return Done(Outcome("unsupported_platform", UNSUPPORTED), change)
    from ._windows._replace import work  # noqa: PLC0415 - the Windows modules load only here

    return work(config, arguments, gate, call_id)


@final
@dataclass(frozen=True, slots=True)
class _Write:
    """One call's write: its arguments, its gate and its id (the journal's entry names it)."""

    arguments: Arguments
    gate: CommitGate
    call_id: str


def _write_beneath(
    config: Config,
    syscalls: Syscalls,
    root_fd: int,
    write: _Write,
    made: list[MadeDirectory],
    change: Change | None,
) -> Done:
    """Open (a create: make) the parent, edit (edit form), run the engine, sync ancestors."""
    arguments = write.arguments
    creating = arguments.expected is None
    parent, leaf = split_parent(arguments.path)
    try:
        dir_fd = open_directory(
            root_fd, parent, follow_symlinks=True, create_missing=creating, made=made
        )
    except PathError as error:
        return Done(Outcome(error.code, error.message), change)
    try:
        where = real_relative(root_fd, dir_fd) if not config.protected_paths.empty else "."
        refused = _protected_beneath(config, where, leaf)
        if refused is not None:
            return Done(refused, change)
        limit = config.max_write_bytes
        if isinstance(arguments.body, Edits):
            # The edits form: the current file and the result are bounded by max_edit_bytes.
            limit = config.max_edit_bytes
            edited = _edit(syscalls, dir_fd, leaf, arguments, arguments.body, limit)
            if isinstance(edited, Outcome):
                return Done(edited, None)
            if isinstance(edited, Refused):
                return Done(edited.outcome, None, edited.failure)
            change = edited
            syscalls.checkpoint(Checkpoint.EDITS_APPLIED)
        assert change is not None  # noqa: S101 - the content form set it in _work
        assert where is not None  # noqa: S101 - _protected_beneath refused an unplaced one
        relative = leaf if where == "." else f"{where}/{leaf}"
        after = DiskAfter(root_fd, relative, change.data)
        if refused_by_judge(config, after, relative, change.data, creating, len(made)):
            return Done(Outcome("path_unavailable", PROTECTED), change)
        request = Request(leaf, change.data, change.sha256, arguments.expected, limit)
        outcome = _journaled(config, syscalls, (root_fd, dir_fd), request, write, made)
        if outcome.created and outcome.durable and parent != ".":
            outcome = _sync_ancestors(syscalls, root_fd, parent, outcome)
        return Done(outcome, change)
    finally:
        with contextlib.suppress(OSError):
            os.close(dir_fd)


def _journaled(
    config: Config,
    syscalls: Syscalls,
    fds: tuple[int, int],
    request: Request,
    write: _Write,
    made: list[MadeDirectory],
) -> Outcome:
    """Run the engine, under the worktree's journal when there is one (contract 13.2):
    the entry names the file's real place beneath the root and the directories made."""
    journal = config.journal
    if journal is None:
        return write_file(syscalls, fds[1], request, write.gate)
    root_fd, dir_fd = fds
    where = real_relative(root_fd, dir_fd)
    if where is None:
        return Outcome("path_unavailable", UNPLACED)
    path = request.leaf if where == "." else f"{where}/{request.leaf}"
    try:
        directories = _made_places(root_fd, where, len(made))
        with journal.replacing(write.call_id, path, directories) as pending:
            request = dataclasses.replace(request, journal=pending)
            outcome = write_file(syscalls, dir_fd, request, write.gate)
            pending.finish(outcome.committed)
    except (JournalError, OSError):
        return Outcome("journal_failed", JOURNAL_FAILED)
    return outcome


def _made_places(root_fd: int, where: str, count: int) -> list[tuple[str, int]]:
    """The real paths and modes of the ``count`` directories a create made: the last
    components of ``where`` (made on the way, each beneath the one before)."""
    parts = where.split("/") if where != "." else []
    places = ["/".join(parts[:depth]) for depth in range(len(parts) - count + 1, len(parts) + 1)]
    return [
        (place, stat.S_IMODE(os.stat(place, dir_fd=root_fd, follow_symlinks=False).st_mode))
        for place in places
    ]


def _protected_beneath(config: Config, where: str | None, leaf: str) -> Outcome | None:
    """The policy asked again by where the opened directory really lies (``where``: a
    symbolic link on the way may lead into a protected one); one that cannot be told is
    refused."""
    if config.protected_paths.empty:
        return None
    if where is None:
        return Outcome("path_unavailable", UNPLACED)
    return protected(config, leaf if where == "." else f"{where}/{leaf}")


def _edit(
    syscalls: Syscalls, dir_fd: int, leaf: str, arguments: Arguments, body: Edits, limit: int
) -> Change | Outcome | Refused:
    """Read the current file, then apply the edit form's rule (``_replace_work.edited``)."""
    return edited(inspect(syscalls, dir_fd, leaf, limit), arguments, body, limit)


def _sync_ancestors(syscalls: Syscalls, root_fd: int, parent: str, outcome: Outcome) -> Outcome:
    """Persist the entries of directories a create may have made, or withdraw ``durable``.

    A create may have made every directory on the way to ``parent``; each one's entry
    lives in its own parent, so the root and every ancestor above ``parent`` are
    fsynced (``parent`` itself was synced by the commit). Without this a crash could
    lose the whole new path after ``durable: true`` was reported.
    """
    unconfirmed = dataclasses.replace(
        outcome, code="durability_unconfirmed", message=DURABILITY_UNCONFIRMED, durable=False
    )
    names = parent.split("/")
    ancestors = [".", *("/".join(names[:depth]) for depth in range(1, len(names)))]
    for ancestor in ancestors:
        try:
            fd = (
                root_fd
                if ancestor == "."
                else open_directory(root_fd, ancestor, follow_symlinks=True)
            )
        except PathError:
            return unconfirmed
        try:
            syscalls.fsync(fd)
        except OSError:
            return unconfirmed
        finally:
            if fd != root_fd:
                with contextlib.suppress(OSError):
                    os.close(fd)
    return outcome


def _withdraw(root_fd: int, made: list[MadeDirectory], outcome: Outcome) -> Outcome:
    """Remove the directories a create made before it failed or stopped (contract 9.1)."""
    return withdrawn(outcome, remove_made(root_fd, made))


def _unknown(gate: CommitGate) -> tuple[ExecutionState, RetryDisposition]:
    if gate.entered:
        return ExecutionState.UNCERTAIN, RetryDisposition.NEVER
    return _DEFINITIVE, _ALLOWED


def _refused(call: Call, code: str, message: str) -> Result:
    """An answer before any write: nothing changed; it names the call (contract 13.2)."""
    return failure(call, code, message, _DEFINITIVE, _ALLOWED, {"call_id": call.id})


def _answer(call: Call, arguments: Arguments, done: Done) -> Result:
    """The model's answer for what the worker did."""
    outcome, change = done.outcome, done.change
    if change is not None and (outcome.code is None or outcome.committed):
        content: dict[str, object] = {
            "call_id": call.id,
            "path": arguments.path,
            "bytes": len(change.data),
            "sha256": change.sha256,
            "created": outcome.created,
            "changed": outcome.changed,
            "committed": outcome.committed,
            "durable": outcome.durable,
            "temporary_cleaned": outcome.temporary_cleaned,
            "hard_links_split": outcome.hard_links_split,
            "owner_changed": outcome.owner_changed,
        }
        if change.edits_applied is not None:
            content["edits_applied"] = change.edits_applied
            content["diff"] = change.diff
            content["diff_truncated"] = change.diff_truncated
        if outcome.code is None:
            return success(call, content, _DEFINITIVE, _ALLOWED)
        return failure(call, outcome.code, outcome.message, _DEFINITIVE, _ALLOWED, content)
    extra: dict[str, object] = {
        "call_id": call.id,
        "path": arguments.path,
        "committed": False,
    }
    if done.refused is not None:
        extra.update(_refusal_fields(done.refused))
    if outcome.current_sha256 is not None:
        if change is not None:  # an edit that never ran has no new digest to compare
            extra["sha256"] = change.sha256
        extra["current_sha256"] = outcome.current_sha256
    if not outcome.temporary_cleaned:
        extra["temporary_cleaned"] = False
    if not outcome.directories_cleaned:
        extra["directories_cleaned"] = False
    code = outcome.code or "replace_failed"
    return failure(call, code, outcome.message, _DEFINITIVE, _ALLOWED, extra)


def _refusal_fields(refused: EditFailure) -> dict[str, object]:
    """Which edit failed and, for one not found, where the file holds a similar passage."""
    fields: dict[str, object] = {"edit_index": refused.index}
    if refused.code == "edit_ambiguous":
        fields["occurrences"] = refused.occurrences
    similar = refused.similar
    if similar is not None:
        fields["similar_line"] = similar.line
        fields["similar_difference"] = similar.difference
        fields["similar_text"] = similar.quote
    return fields


def new_replace(config: Config) -> Tool:
    """Build the ``replace`` tool for ``config``; performs no filesystem action."""
    return ReplaceTool(config)
