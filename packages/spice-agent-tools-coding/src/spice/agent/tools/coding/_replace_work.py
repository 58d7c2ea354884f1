"""What a ``replace`` worker hands back, and the rules both engines' workers share.

The POSIX worker (``_replace``) and the Windows worker (``_windows._replace``) differ only
in how they open names and commit bytes. What they answer, how the edit form turns the
current file into new bytes, and how a create that could not withdraw the directories
it made says so, live here once: neither worker imports the other.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Final, final

from ._config import Config
from ._decision import (
    DIRECTORIES_LEFT,
    EDIT_NOT_FOUND,
    NOTHING_CHANGED,
    STALE,
    Absent,
    Current,
    Occupied,
    Outcome,
)
from ._edits import EditFailure, apply_edits, unified_diff
from ._protected import PROTECTED
from ._replace_arguments import Arguments, Edits

NOT_TEXT: Final = "the file is not valid UTF-8 text; edits need text (replace it with content)"


@final
@dataclass(frozen=True, slots=True)
class Change:
    """The bytes a call writes and, for the edit form, what its edits did."""

    data: bytes = field(repr=False)
    sha256: str
    edits_applied: int | None = None
    diff: str = field(default="", repr=False)
    diff_truncated: bool = False


@final
@dataclass(frozen=True, slots=True)
class Refused:
    """An edit that could not apply: the engine's outcome and the edit rule's reason."""

    outcome: Outcome
    failure: EditFailure


@final
@dataclass(frozen=True, slots=True)
class Done:
    """What the worker did, and what it wrote (``None`` when it never got that far)."""

    outcome: Outcome
    change: Change | None
    refused: EditFailure | None = None


def edited(
    found: Current | Absent | Occupied, arguments: Arguments, body: Edits, limit: int
) -> Change | Outcome | Refused:
    """The edit form's rule, given what the engine found at the target.

    Missing or special targets answer as the engine says; a digest other than the
    expected one is ``stale`` before any edit is looked at; bytes that are not UTF-8 are
    ``not_text``; then the pure edit rule gives the new bytes or the reason it failed.
    """
    if isinstance(found, Absent):
        return Outcome("not_found", EDIT_NOT_FOUND)
    if isinstance(found, Occupied):
        return Outcome(found.code, found.message)
    if found.sha256 != arguments.expected:
        return Outcome("stale", STALE, current_sha256=found.sha256)
    try:
        before = found.data.decode("utf-8")
    except UnicodeDecodeError:
        return Outcome("not_text", NOT_TEXT)
    result = apply_edits(before, len(found.data), body.edits, limit)
    if isinstance(result, EditFailure):
        return Refused(Outcome(result.code, result.message), result)
    data = result.text.encode("utf-8")
    diff, truncated = unified_diff(arguments.path, before, result.text)
    digest = hashlib.sha256(data).hexdigest()
    return Change(data, digest, result.replacements, diff, truncated)


def withdrawn(outcome: Outcome, cleaned: bool) -> Outcome:
    """The answer of a create that made directories and then failed or stopped.

    When some could not be removed (no longer empty, no longer the one made), the
    answer never says that nothing was changed, and says ``directories_cleaned: false``.
    """
    if cleaned:
        return outcome
    message = outcome.message.removesuffix(NOTHING_CHANGED) + DIRECTORIES_LEFT
    return dataclasses.replace(outcome, message=message, directories_cleaned=False)


def protected(config: Config, relative: str) -> Outcome | None:
    """``path_unavailable`` when ``config.protected_paths`` protects ``relative`` (12.1).

    Both workers ask before the engine: by the cleaned path as the model sent it, and
    (POSIX) again by the real path of the directory the call opened.
    """
    if config.protected_paths.protects(config.root, relative):
        return Outcome("path_unavailable", PROTECTED)
    return None
