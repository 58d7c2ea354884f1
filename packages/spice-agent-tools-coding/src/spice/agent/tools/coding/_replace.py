"""The ``replace`` tool: stale-protected, atomic, durable and idempotent whole-file writes.

A call reports progress, validates its arguments, takes the instance's write lease and
runs the engine (``_commit.write_file``) in a worker thread. The lease is held until
that thread has finished, whatever happens to the calling task.

Cancellation: the worker checks a :class:`~._commit.CommitGate` before its commit point.
No worker is started after an observed cancellation (``_settling.deliver_cancellation``).
A cancelled call sets the flag, waits (``_settling.settle``: bounded by
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
import base64
import binascii
import contextlib
import dataclasses
import hashlib
import os
import re
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

from ._arguments import ArgumentError, decode_object, take_boolean, take_string
from ._commit import (
    ABORTED,
    DIRECTORIES_LEFT,
    DURABILITY_UNCONFIRMED,
    NOTHING_CHANGED,
    POSIX,
    CommitGate,
    Outcome,
    Request,
    Syscalls,
    write_file,
)
from ._config import Config
from ._results import attach, failure, report_progress, success
from ._root import (
    MadeDirectory,
    PathError,
    clean_path,
    open_directory,
    open_root,
    remove_made,
    split_parent,
)
from ._settling import deliver_cancellation, settle

NAME: Final = "replace"
SETTLE_SECONDS: Final = 30.0
"""How long a cancelled call waits for its worker thread to stop or finish committing."""
ENCODINGS: Final = ("utf-8", "base64")
DIGEST: Final = re.compile(r"[0-9a-f]{64}")

_DEFINITIVE: Final = ExecutionState.DEFINITIVE
_ALLOWED: Final = RetryDisposition.ALLOWED
_PROPERTIES: Final = frozenset({"path", "content", "create", "expected_sha256", "encoding"})

PROGRESS: Final = "replace: writing a file under the root"
WRONG_TOOL: Final = "the call names another tool"
UNSUPPORTED: Final = "replace is not supported on this platform yet (only POSIX systems are)"
UNEXPECTED: Final = "replace failed unexpectedly"
ONE_MODE: Final = "pass exactly one of create: true (new file) and expected_sha256 (replace)"
CREATE_TRUE: Final = "create must be true when given; to replace a file pass expected_sha256"
BAD_DIGEST: Final = "expected_sha256 must be 64 lowercase hexadecimal digits"
BAD_ENCODING: Final = "encoding must be utf-8 or base64"
BAD_BASE64: Final = "content is not valid base64"
CONTENT_TOO_LARGE: Final = "the content is larger than max_write_bytes (counted in encoded bytes)"


def _description(limit: int) -> str:
    return (
        "Write the whole content of one file under the worktree root, atomically "
        "(a crash leaves the old or the new file, never a mix) and durably. "
        "To change an existing file, first read it completely with the read tool and "
        "pass the sha256 it returned as expected_sha256: if the file changed since, "
        "nothing is written and the answer is 'stale' with its current_sha256. "
        "To make a new file, pass create: true instead; it never overwrites anything "
        "and creates missing parent directories. Pass exactly one of the two. "
        "content is the complete new file; for binary data pass it base64-encoded with "
        f"encoding: base64. content may be at most {limit} bytes as sent. "
        "Repeating a call never writes twice: it answers 'stale' or 'already_exists', "
        "and current_sha256 equal to sha256 means the file already holds that content."
    )


def _schema(limit: int) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "File path relative to the worktree root, '/'-separated.",
            },
            "content": {
                "type": "string",
                "description": f"The complete new file content, at most {limit} bytes.",
            },
            "create": {
                "type": "boolean",
                "const": True,
                "description": "true to create a new file; never overwrites.",
            },
            "expected_sha256": {
                "type": "string",
                "pattern": "^[0-9a-f]{64}$",
                "description": "The sha256 the read tool returned for the current file.",
            },
            "encoding": {
                "type": "string",
                "enum": list(ENCODINGS),
                "default": "utf-8",
                "description": "How content is encoded: utf-8 text or base64 bytes.",
            },
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }


@final
class _Invalid(Exception):
    """A model-visible argument failure with its code and fixed text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@final
@dataclass(frozen=True, slots=True)
class _Arguments:
    path: str
    data: bytes
    sha256: str
    expected: str | None


def _decode(arguments: str, config: Config) -> _Arguments:
    limit = config.max_write_bytes
    try:
        values = decode_object(arguments, _PROPERTIES)
        raw_path = take_string(values, "path", required=True)
        content = take_string(values, "content", required=True)
        create = take_boolean(values, "create")
        expected = take_string(values, "expected_sha256", required=False)
        encoding = take_string(values, "encoding", required=False)
    except ArgumentError as error:
        raise _Invalid("invalid_arguments", str(error)) from None
    assert raw_path is not None  # noqa: S101 - required=True
    assert content is not None  # noqa: S101 - required=True
    if create is False:
        raise _Invalid("invalid_arguments", CREATE_TRUE)
    if (create is None) == (expected is None):
        raise _Invalid("invalid_arguments", ONE_MODE)
    if expected is not None and DIGEST.fullmatch(expected) is None:
        raise _Invalid("invalid_arguments", BAD_DIGEST)
    if encoding is not None and encoding not in ENCODINGS:
        raise _Invalid("invalid_arguments", BAD_ENCODING)
    try:
        path = clean_path(raw_path, root=config.root, names_root=False)
    except PathError as error:
        raise _Invalid(error.code, error.message) from None
    if len(content.encode("utf-8")) > limit:
        raise _Invalid("file_too_large", CONTENT_TOO_LARGE)
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise _Invalid("invalid_arguments", BAD_BASE64) from None
    else:
        data = content.encode("utf-8")
    return _Arguments(path, data, hashlib.sha256(data).hexdigest(), expected)


@final
class ReplaceTool:
    """The ``replace`` tool of one ``Config``; ``syscalls`` is a seam for fault tests."""

    def __init__(
        self, config: Config, *, syscalls: Syscalls = POSIX, platform: str = sys.platform
    ) -> None:
        self._config = config
        self._syscalls = syscalls
        self._platform = platform
        self._lease = asyncio.Lock()
        self._definition = Definition(
            NAME,
            _description(config.max_write_bytes),
            _schema(config.max_write_bytes),
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
        if self._platform == "win32":
            return failure(call, "unsupported_platform", UNSUPPORTED, _DEFINITIVE, _ALLOWED)
        if call.name != NAME:
            return failure(call, "invalid_arguments", WRONG_TOOL, _DEFINITIVE, _ALLOWED)
        try:
            arguments = _decode(call.arguments, self._config)
        except _Invalid as invalid:
            return failure(call, invalid.code, invalid.message, _DEFINITIVE, _ALLOWED)
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
            worker = asyncio.ensure_future(asyncio.to_thread(self._work, arguments, gate))
        except asyncio.CancelledError as cancelled:
            self._lease.release()
            attach(cancelled, Interruption(call.id, _DEFINITIVE, _ALLOWED))
            raise
        except BaseException:
            self._lease.release()
            raise
        # The lease is released when the thread is done, not when this task leaves.
        worker.add_done_callback(self._release)
        try:
            outcome = await asyncio.shield(worker)
        except asyncio.CancelledError as cancelled:
            attach(cancelled, await self._settle(call, arguments, worker, gate))
            raise
        except Exception:  # noqa: BLE001 - a defect in the worker is a host failure
            state, retry = _unknown(gate)
            raise ExecutionError(call.id, state, retry, UNEXPECTED) from None
        return _answer(call, arguments, outcome)

    def _release(self, _worker: asyncio.Future[Outcome]) -> None:
        self._lease.release()

    async def _settle(
        self,
        call: Call,
        arguments: _Arguments,
        worker: asyncio.Future[Outcome],
        gate: CommitGate,
    ) -> Interruption:
        """Stop the worker before its commit point or let it finish; say what happened."""
        gate.cancel()
        # Repeated cancellations are held back (``_settling``); the caller re-raises the first.
        settled = await settle(worker, SETTLE_SECONDS)
        if not settled.done or worker.exception() is not None:
            state, retry = _unknown(gate)
            return Interruption(call.id, state, retry)
        outcome = worker.result()
        if outcome.committed:
            return Interruption(call.id, _DEFINITIVE, _ALLOWED, _answer(call, arguments, outcome))
        return Interruption(call.id, _DEFINITIVE, _ALLOWED)

    def _work(self, arguments: _Arguments, gate: CommitGate) -> Outcome:
        """The blocking part, in a worker thread."""
        if gate.cancelled:
            return ABORTED
        try:
            root_fd = open_root(self._config.root)
        except PathError as error:
            return Outcome(error.code, error.message)
        made: list[MadeDirectory] = []
        try:
            outcome = self._write_beneath(root_fd, arguments, gate, made)
            if made and not outcome.committed:
                outcome = _withdraw(root_fd, made, outcome)
            return outcome
        finally:
            with contextlib.suppress(OSError):
                os.close(root_fd)

    def _write_beneath(
        self, root_fd: int, arguments: _Arguments, gate: CommitGate, made: list[MadeDirectory]
    ) -> Outcome:
        """Open (a create: make) the parent directory, run the engine, sync new ancestors."""
        creating = arguments.expected is None
        parent, leaf = split_parent(arguments.path)
        try:
            dir_fd = open_directory(
                root_fd, parent, follow_symlinks=True, create_missing=creating, made=made
            )
        except PathError as error:
            return Outcome(error.code, error.message)
        try:
            request = Request(
                leaf,
                arguments.data,
                arguments.sha256,
                arguments.expected,
                self._config.max_write_bytes,
            )
            outcome = write_file(self._syscalls, dir_fd, request, gate)
            if outcome.created and outcome.durable and parent != ".":
                outcome = self._sync_ancestors(root_fd, parent, outcome)
            return outcome
        finally:
            with contextlib.suppress(OSError):
                os.close(dir_fd)

    def _sync_ancestors(self, root_fd: int, parent: str, outcome: Outcome) -> Outcome:
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
                self._syscalls.fsync(fd)
            except OSError:
                return unconfirmed
            finally:
                if fd != root_fd:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        return outcome


def _withdraw(root_fd: int, made: list[MadeDirectory], outcome: Outcome) -> Outcome:
    """Remove the directories a create made before it failed or stopped (contract 9.1).

    When some cannot be removed (no longer empty, no longer the one made), the answer
    never says that nothing was changed, and says ``directories_cleaned: false``.
    """
    if remove_made(root_fd, made):
        return outcome
    message = outcome.message.removesuffix(NOTHING_CHANGED) + DIRECTORIES_LEFT
    return dataclasses.replace(outcome, message=message, directories_cleaned=False)


def _unknown(gate: CommitGate) -> tuple[ExecutionState, RetryDisposition]:
    if gate.entered:
        return ExecutionState.UNCERTAIN, RetryDisposition.NEVER
    return _DEFINITIVE, _ALLOWED


def _answer(call: Call, arguments: _Arguments, outcome: Outcome) -> Result:
    """The model's answer for ``outcome``."""
    if outcome.code is None or outcome.committed:
        content: dict[str, object] = {
            "path": arguments.path,
            "bytes": len(arguments.data),
            "sha256": arguments.sha256,
            "created": outcome.created,
            "changed": outcome.changed,
            "committed": outcome.committed,
            "durable": outcome.durable,
            "temporary_cleaned": outcome.temporary_cleaned,
            "hard_links_split": outcome.hard_links_split,
            "owner_changed": outcome.owner_changed,
        }
        if outcome.code is None:
            return success(call, content, _DEFINITIVE, _ALLOWED)
        return failure(call, outcome.code, outcome.message, _DEFINITIVE, _ALLOWED, content)
    extra: dict[str, object] = {"path": arguments.path, "committed": False}
    if outcome.current_sha256 is not None:
        extra["sha256"] = arguments.sha256
        extra["current_sha256"] = outcome.current_sha256
    if not outcome.temporary_cleaned:
        extra["temporary_cleaned"] = False
    if not outcome.directories_cleaned:
        extra["directories_cleaned"] = False
    code = outcome.code or "replace_failed"
    return failure(call, code, outcome.message, _DEFINITIVE, _ALLOWED, extra)


def new_replace(config: Config) -> Tool:
    """Build the ``replace`` tool for ``config``; performs no filesystem action."""
    return ReplaceTool(config)
