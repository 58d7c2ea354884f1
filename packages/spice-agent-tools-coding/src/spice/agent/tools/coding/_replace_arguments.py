"""What a ``replace`` call asks for: its definition text, its schema, its argument rules.

Two input forms (contract 5 and 9.2), told apart by ``edits``:

- *content*: ``path``, ``content`` (the whole file, ``utf-8`` or ``base64``), and one
  of ``create: true`` or ``expected_sha256``;
- *edits*: ``path``, ``expected_sha256`` (required) and ``edits``, 1..``MAXIMUM_EDITS``
  objects ``{old_text, new_text, replace_all}``; mixing in ``content``, ``encoding``
  or ``create: true`` is ``invalid_arguments``.

JSON ``null`` is absent and ``create: false`` is no ``create`` (contract 9.3), so a
strict-schema client that sends every property works. Every rule here runs before the
target is looked at: content over ``max_write_bytes`` is ``invalid_arguments``
(contract 9.1).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias, final

from ._arguments import (
    ArgumentError,
    decode_object,
    take_boolean,
    take_string,
    unknown_properties,
)
from ._config import Config
from ._edits import MAXIMUM_DIFF_BYTES, MAXIMUM_EDITS, Edit
from ._platform import PathError, clean_path

ENCODINGS: Final = ("utf-8", "base64")
DIGEST: Final = re.compile(r"[0-9a-f]{64}")
PROPERTIES: Final = frozenset({"path", "content", "create", "expected_sha256", "encoding", "edits"})
EDIT_PROPERTIES: Final = frozenset({"old_text", "new_text", "replace_all"})

ONE_MODE: Final = "pass exactly one of create: true (new file) and expected_sha256 (replace)"
BAD_DIGEST: Final = "expected_sha256 must be 64 lowercase hexadecimal digits"
BAD_ENCODING: Final = "encoding must be utf-8 or base64"
BAD_BASE64: Final = "content is not valid base64"
CONTENT_TOO_LARGE: Final = "the content is larger than max_write_bytes (counted in encoded bytes)"
NO_CONTENT: Final = "pass content (the whole file) or edits (changes to an existing file)"
MIXED: Final = "edits cannot be combined with content, encoding or create; pass one form"
EDITS_NEED_DIGEST: Final = "edits need expected_sha256: the sha256 read returned for the file"
EDIT_COUNT: Final = f"edits must be an array of 1 to {MAXIMUM_EDITS} edit objects"
EDIT_SHAPE: Final = "must be an object with old_text, new_text and optional replace_all"
EMPTY_OLD: Final = "old_text must not be empty"


WORKFLOW: Final = (
    "To change part of a file, send only the change: read it (read with limit 1 returns "
    "file_sha256 cheaply, without the file), then call replace with expected_sha256 and "
    "edits: [{old_text, new_text}], old_text copied exactly from the file and found there "
    "once. The answer's sha256 is the next expected_sha256 of that file (no need to read "
    "it again). 'stale' means the file changed and nothing was written: read it again. "
)
"""The edit workflow (contract 12.4): in the description, because the server's instructions
reach only Claude Code; the same steps as the instructions."""


def description(config: Config) -> str:
    """The model-facing description: the edit workflow, both forms, every bound."""
    limit, edit_limit = config.max_write_bytes, config.max_edit_bytes
    return (
        "Change one file under the worktree root, atomically and durably (a crash leaves "
        "the old or the new file, never a mix). " + WORKFLOW + "EDITS: 1 to "
        f"{MAXIMUM_EDITS} objects {{old_text, new_text, replace_all}} applied in order, "
        "each to the result of the previous ones; old_text must match exactly (whitespace "
        "included) and occur once, or give replace_all: true for every non-overlapping "
        "occurrence. In a file whose line endings are all CRLF, LF in old_text matches "
        "CRLF and new_text is written with CRLF. 'edit_not_found' names the edit "
        "(edit_index) and, when the file has a similar passage, its similar_line, "
        "similar_difference (whitespace, line_endings or text) and similar_text. The "
        "answer has edits_applied and a unified diff (at most "
        f"{MAXIMUM_DIFF_BYTES} bytes; diff_truncated says if cut). The file and the result "
        f"may each be at most {edit_limit} bytes (max_edit_bytes); a file that is not UTF-8 "
        "text is 'not_text'. "
        "CONTENT, for new files and whole rewrites: content is the complete new file, at "
        f"most {limit} bytes as sent (max_write_bytes; binary data base64-encoded with "
        "encoding: base64), replacing a file of at most that size; pass create: true to "
        "make a new file (it never overwrites anything and creates missing parent "
        "directories), or expected_sha256 to rewrite an existing one. expected_sha256 is "
        "the sha256 (or, for a file read in several pages, the file_sha256) read returned. "
        "'stale' answers current_sha256. Unused properties may be null. A repeated call "
        "never writes twice: it answers 'stale' or 'already_exists'."
    )


def schema(limit: int) -> dict[str, object]:
    """The input schema: both forms in one object; every optional property nullable."""
    return {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": (
                    "The file: a path relative to the worktree root ('/'-separated), or an "
                    "absolute path beneath the root; not the root itself."
                ),
            },
            "expected_sha256": {
                "type": ["string", "null"],
                "pattern": "^[0-9a-f]{64}$",
                "description": (
                    "The sha256 (or file_sha256) read returned for the current file; "
                    "required with edits and to rewrite a file with content."
                ),
            },
            "edits": {
                "type": ["array", "null"],
                "minItems": 1,
                "maxItems": MAXIMUM_EDITS,
                "description": (
                    f"1 to {MAXIMUM_EDITS} exact replacements, applied in order; "
                    "not with content, encoding or create."
                ),
                "items": {
                    "type": "object",
                    "properties": {
                        "old_text": {
                            "type": "string",
                            "description": "Text to find (not empty), exactly as in the file.",
                        },
                        "new_text": {"type": "string", "description": "Its replacement."},
                        "replace_all": {
                            "type": ["boolean", "null"],
                            "description": "true: replace every occurrence (default false).",
                        },
                    },
                    "required": ["old_text", "new_text"],
                    "additionalProperties": False,
                },
            },
            "content": {
                "type": ["string", "null"],
                "description": f"The complete new file content, at most {limit} bytes.",
            },
            "create": {
                "type": ["boolean", "null"],
                "description": "true to create a new file (never overwrites); false = absent.",
            },
            "encoding": {
                "type": ["string", "null"],
                "enum": [*ENCODINGS, None],
                "description": "How content is encoded: utf-8 text (default) or base64 bytes.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }


@final
class Invalid(Exception):
    """A model-visible argument failure with its code and fixed text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@final
@dataclass(frozen=True, slots=True)
class Whole:
    """The content form: the new bytes, known before the file is looked at."""

    data: bytes = field(repr=False)
    sha256: str


@final
@dataclass(frozen=True, slots=True)
class Edits:
    """The edit form: the new bytes follow from the current file."""

    edits: tuple[Edit, ...]


Body: TypeAlias = Whole | Edits


@final
@dataclass(frozen=True, slots=True)
class Arguments:
    """A decoded call: ``expected`` is ``None`` for a create (content form only)."""

    path: str
    expected: str | None
    body: Body


def decode(arguments: str, config: Config) -> Arguments:
    """Decode and check a call's arguments; :class:`Invalid` says what is wrong."""
    try:
        values = decode_object(arguments, PROPERTIES)
        raw_path = take_string(values, "path", required=True)
        content = take_string(values, "content", required=False)
        create = take_boolean(values, "create") or None  # false means absent (9.3)
        expected = take_string(values, "expected_sha256", required=False)
        encoding = take_string(values, "encoding", required=False)
        edits = _take_edits(values) if values.get("edits") is not None else None
    except ArgumentError as error:
        raise Invalid("invalid_arguments", str(error)) from None
    assert raw_path is not None  # noqa: S101 - required=True
    if edits is not None and (content is not None or encoding is not None or create):
        raise Invalid("invalid_arguments", MIXED)
    if edits is None and content is None:
        raise Invalid("invalid_arguments", NO_CONTENT)
    if edits is not None and expected is None:
        raise Invalid("invalid_arguments", EDITS_NEED_DIGEST)
    if (create is None) == (expected is None):
        raise Invalid("invalid_arguments", ONE_MODE)
    if expected is not None and DIGEST.fullmatch(expected) is None:
        raise Invalid("invalid_arguments", BAD_DIGEST)
    if encoding is not None and encoding not in ENCODINGS:
        raise Invalid("invalid_arguments", BAD_ENCODING)
    try:
        path = clean_path(raw_path, root=config.root, names_root=False)
    except PathError as error:
        raise Invalid(error.code, error.message) from None
    if edits is not None:
        return Arguments(path, expected, Edits(edits))
    assert content is not None  # noqa: S101 - checked above
    return Arguments(path, expected, _whole(content, encoding, config.max_write_bytes))


def _whole(content: str, encoding: str | None, limit: int) -> Whole:
    if len(content.encode("utf-8")) > limit:
        raise Invalid("invalid_arguments", CONTENT_TOO_LARGE)
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid("invalid_arguments", BAD_BASE64) from None
    else:
        data = content.encode("utf-8")
    return Whole(data, hashlib.sha256(data).hexdigest())


def _take_edits(values: Mapping[str, object]) -> tuple[Edit, ...]:
    raw = values.get("edits")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAXIMUM_EDITS:
        raise ArgumentError(EDIT_COUNT)
    return tuple(_take_edit(index, item) for index, item in enumerate(raw))


def _take_edit(index: int, item: object) -> Edit:
    if not isinstance(item, dict):
        raise ArgumentError(f"edits[{index}] {EDIT_SHAPE}")
    if unknown := set(item) - EDIT_PROPERTIES:
        found = unknown_properties(unknown, EDIT_PROPERTIES)
        raise ArgumentError(f"edits[{index}] has {found}")
    try:
        old = take_string(item, "old_text", required=True)
        new = take_string(item, "new_text", required=True)
        every = take_boolean(item, "replace_all")
    except ArgumentError as error:
        raise ArgumentError(f"edits[{index}].{error}") from None
    assert old is not None  # noqa: S101 - required=True
    assert new is not None  # noqa: S101 - required=True
    if not old:
        raise ArgumentError(f"edits[{index}].{EMPTY_OLD}")
    return Edit(old, new, replace_all=bool(every))
