"""The worker of ``replace`` on Windows: the parent beneath the root handle, then the engine.

The Windows counterpart of ``_replace._work`` (which runs it in the same worker thread,
under the same lease and cancellation rules). Names are opened beneath held NT handles
(``_windows._root``); the engine is ``_windows._commit``. The edit form reads the current
file through the same engine's inspection (retried while another process holds it),
checks the digest first, and applies the same pure edit rule (``_edits``).

Under the worktree's journal (``config.journal``, contract 13.2) the engine runs inside
``Journal.replacing``, as on POSIX: the entry names the cleaned path (the one opened beneath
the root handle, never through a reparse point) and the directories the create made.
"""

from __future__ import annotations

import dataclasses

from .._commit import CommitGate
from .._config import Config
from .._decision import ABORTED, JOURNAL_FAILED, Outcome, Request
from .._gitdir import git_spelling
from .._journal_records import JournalError
from .._protected import PROTECTED
from .._replace_arguments import Arguments, Edits, Whole
from .._replace_judge import refused_by_judge
from .._replace_work import Change, Done, Refused, edited, protected, withdrawn
from .._root import MadeDirectory, PathError
from . import _commit as cw
from . import _root as rw
from ._after import WindowsAfter


def work(
    config: Config, arguments: Arguments, gate: CommitGate, call_id: str | None = None
) -> Done:
    """The blocking part of one call, in a worker thread."""
    body = arguments.body
    change = Change(body.data, body.sha256) if isinstance(body, Whole) else None
    if gate.cancelled:
        return Done(ABORTED, change)
    refused = protected(config, arguments.path)  # before the engine: the policy's matcher
    if refused is not None:
        return Done(refused, change)
    try:
        root = rw.open_root(config.root)
    except PathError as error:
        return Done(Outcome(error.code, error.message), change)
    made: list[MadeDirectory] = []
    try:
        done = _write_beneath(config, root, (arguments, gate, call_id), made, change)
        if made and not done.outcome.committed:
            return Done(_withdraw(root, made, done.outcome), done.change)
        return done
    finally:
        rw.close(root)


def _write_beneath(
    config: Config,
    root: int,
    call: tuple[Arguments, CommitGate, str | None],
    made: list[MadeDirectory],
    change: Change | None,
) -> Done:
    arguments, gate, call_id = call
    creating = arguments.expected is None
    parent, leaf = rw.split_parent(arguments.path)
    try:
        directory = rw.open_directory(root, parent, create_missing=creating, made=made)
    except PathError as error:
        return Done(Outcome(error.code, error.message), change)
    try:
        limit = config.max_write_bytes
        if isinstance(arguments.body, Edits):
            # The edits form: the current file and the result are bounded by max_edit_bytes.
            limit = config.max_edit_bytes
            edited = _edit(directory, leaf, arguments, arguments.body, limit, gate)
            if isinstance(edited, Outcome):
                return Done(edited, None)
            if isinstance(edited, Refused):  # the hint goes into the answer, as on POSIX
                return Done(edited.outcome, None, edited.failure)
            change = edited
        assert change is not None  # noqa: S101 - the content form set it in work()
        # The one policy's judge, as on POSIX: names are never followed here, so the
        # cleaned path is the real one; spelled as git reads it (the file system folds case).
        relative = git_spelling(arguments.path)
        after = WindowsAfter(root, relative, change.data)
        if refused_by_judge(config, after, relative, change.data, creating, len(made)):
            return Done(Outcome("path_unavailable", PROTECTED), change)
        request = Request(leaf, change.data, change.sha256, arguments.expected, limit)
        outcome = _journaled(config, directory, request, gate, (call_id, arguments.path, made))
        if outcome.created and outcome.durable and parent != ".":
            outcome = cw.flush_ancestors(root, parent, outcome)
        return Done(outcome, change)
    finally:
        rw.close(directory)


def _journaled(
    config: Config,
    directory: int,
    request: Request,
    gate: CommitGate,
    entry: tuple[str | None, str, list[MadeDirectory]],
) -> Outcome:
    """Run the engine, under the worktree's journal when there is one (contract 13.2)."""
    journal = config.journal
    if journal is None:
        return cw.write_file(directory, request, gate)
    call_id, path, made = entry
    directories = [(directory_made.path, None) for directory_made in made]
    try:
        with journal.replacing(call_id, path, directories) as pending:
            request = dataclasses.replace(request, journal=pending)
            outcome = cw.write_file(directory, request, gate)
            pending.finish(outcome.committed)
    except (JournalError, OSError):
        return Outcome("journal_failed", JOURNAL_FAILED)
    return outcome


def _edit(
    directory: int, leaf: str, arguments: Arguments, body: Edits, limit: int, gate: CommitGate
) -> Change | Outcome | Refused:
    """Read the current file (retried while held), then apply the edit form's rule."""
    found = cw.inspect_settled(directory, leaf, limit, gate)
    if isinstance(found, Outcome):
        return found
    return edited(found, arguments, body, limit)


def _withdraw(root: int, made: list[MadeDirectory], outcome: Outcome) -> Outcome:
    """Remove the directories a create made before it failed or stopped (contract 9.1)."""
    return withdrawn(outcome, rw.remove_made(root, made))
