"""What the MCP server declares about each tool's answers: a title and an output schema.

The output schema admits every content object the tool can return, success and every
failure: each known field is declared with its type, only ``ok`` is required, and fields
not listed are allowed (a failure carries a subset; a newer tool may add fields). A tool
this module does not know gets the schema every content object satisfies.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from spice.agent.process import MAXIMUM_REFUSED_HOSTS
from spice.agent.tool import MAXIMUM_MESSAGE_BYTES
from spice.agent.tools.coding import MAXIMUM_ANSWER_BYTES, Config

__all__ = ["TITLES", "largest_answer_chars", "output_schema", "title_of"]

ESCAPED_CHARS_PER_BYTE: Final = 6
"""Most JSON characters one byte of text can become (a control byte is ``\\u001f``); a
character of 2 to 4 bytes becomes at most 2 (UTF-16 code units, as JavaScript counts)."""
PATH_BYTES: Final = 4096
"""Longest path a tool accepts (and so repeats in an answer)."""
SMALL_FIELDS_CHARS: Final = 2048
HINT_BYTES: Final = 512
"""The longest ``sandbox_hint`` a shell answer carries (the launcher's sentence)."""
NETWORK_REFUSED_CHARS: Final = MAXIMUM_REFUSED_HOSTS * (262 + 3) + 64
"""The shell's ``network_refused`` (``MAXIMUM_REFUSED_HOSTS`` ``host:port`` of name
characters, nothing to escape, quoted and separated) and ``network_refused_count`` with
their names."""
PROTECTED_RESTORED_CHARS: Final = 2 * 2048 + 16 * 3 + 64
"""The shell's ``protected_restored`` (at most 16 paths of 2,048 bytes in all, no control
character: at most 2 characters a byte once escaped, quoted and separated) and
``protected_restored_count`` with their names."""
STAGE_CHARS: Final = 2 * (8192 + 3 * 4096) + 96 * 3 + 2 * 512 + 512
"""The shell's stage fields: ``changes.paths`` (8,192 bytes in all) and three lists of 4,096
bytes (``conflicts``, ``protected_refused``, ``changes_failed``), printable text at most 2
characters a byte once escaped, quoted and separated, two short reasons, and their names."""
"""Room for the fixed keys and small values (numbers, booleans, digests) of any answer."""
DIFF_BYTES: Final = 16 * 1024
"""Longest ``diff`` of a ``replace`` answer (contract 9.2)."""
QUOTE_BYTES: Final = 1024
"""Longest ``similar_text`` of an ``edit_not_found`` answer (contract 10.2)."""

ANSWER_CHARS: Final = MAXIMUM_ANSWER_BYTES // 2
"""The most ``anthropic/maxResultSizeChars`` declares: half the wire's bound (Claude Code
caps the declaration at 500,000 anyway, and saves a longer answer to a file the model can
read; since round 5 an answer's structured content may be longer, its text block is
shaped beside it)."""

_STRING: Final = {"type": "string"}
_INTEGER: Final = {"type": "integer"}
_BOOLEAN: Final = {"type": "boolean"}
_STRING_OR_NULL: Final = {"type": ["string", "null"]}
_INTEGER_OR_NULL: Final = {"type": ["integer", "null"]}

_COMMON: Final[Mapping[str, Mapping[str, object]]] = {
    "ok": {"type": "boolean", "description": "true on success; false with code and message"},
    "code": {"type": "string", "description": "on failure: a stable code (snake_case)"},
    "message": {"type": "string", "description": "on failure: what went wrong, for the model"},
}

_FIELDS: Final[Mapping[str, Mapping[str, Mapping[str, object]]]] = {
    "read": {
        "path": _STRING,
        "offset": _INTEGER,
        "bytes": _INTEGER,
        "total_bytes": _INTEGER,
        "next_offset": _INTEGER,
        "truncated": _BOOLEAN,
        "encoding": _STRING,
        "mime_type": _STRING,
        "note": _STRING,
        "content": _STRING,
        "sha256": _STRING,
        "file_sha256": _STRING,
    },
    "replace": {
        "path": _STRING,
        "call_id": _STRING,
        "bytes": _INTEGER,
        "sha256": _STRING,
        "current_sha256": _STRING,
        "created": _BOOLEAN,
        "changed": _BOOLEAN,
        "committed": _BOOLEAN,
        "durable": _BOOLEAN,
        "temporary_cleaned": _BOOLEAN,
        "directories_cleaned": _BOOLEAN,
        "hard_links_split": _BOOLEAN,
        "owner_changed": _BOOLEAN,
        "edits_applied": _INTEGER,
        "diff_truncated": _BOOLEAN,
        "edit_index": _INTEGER,
        "occurrences": _INTEGER,
        "similar_line": _INTEGER,
        "similar_difference": {"type": "string", "enum": ["whitespace", "line_endings", "text"]},
        "similar_text": _STRING,
        "diff": _STRING_OR_NULL,
    },
    "shell": {
        "workdir": _STRING_OR_NULL,
        "exit_code": _INTEGER,
        "timed_out": _BOOLEAN,
        "managed_cleanup_completed": _BOOLEAN,
        "contained": _BOOLEAN,
        "network_refused": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "network_refused_count": _INTEGER,
        "protected_restored": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "protected_restored_count": _INTEGER,
        "staged": _BOOLEAN,
        "staged_reason": _STRING,
        "dry_run": _BOOLEAN,
        "call_id": _STRING,
        "journal_entry": _INTEGER,
        "changes": {
            "type": "object",
            "properties": {
                "added": _INTEGER,
                "modified": _INTEGER,
                "deleted": _INTEGER,
                "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 32},
            },
        },
        "changes_applied": _BOOLEAN,
        "changes_failed": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "changes_failed_count": _INTEGER,
        "conflicts": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "conflicts_count": _INTEGER,
        "protected_refused": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "protected_refused_count": _INTEGER,
        "stage_failure": _STRING,
        "sandbox_hint": _STRING,
        "encoding": _STRING,
        "stdout": _STRING,
        "stderr": _STRING,
        "stdout_bytes": _INTEGER,
        "stderr_bytes": _INTEGER,
        "output_truncated": _BOOLEAN,
        "stdout_omitted_bytes": _INTEGER,
        "stderr_omitted_bytes": _INTEGER,
        "stdout_omitted_at": _INTEGER_OR_NULL,
        "stderr_omitted_at": _INTEGER_OR_NULL,
    },
}

TITLES: Final[Mapping[str, str]] = MappingProxyType(
    {"read": "Read file", "replace": "Replace file", "shell": "Run command"}
)
"""The human titles of the coding tools; any other tool is titled by its name."""


def title_of(name: str) -> str:
    """The title shown to people for the tool ``name``."""
    return TITLES.get(name, name)


def largest_answer_chars(name: str, config: Config) -> int:
    """The most characters the text of an answer of tool ``name`` can have under ``config``.

    Each answer is compact JSON sent twice (its text and its structured content) within
    ``MAXIMUM_ANSWER_BYTES``, so its text has at most ``ANSWER_CHARS`` characters; within
    that, what a tool can say is bounded by its own bounds: the page (``read``), the diff,
    a quote and the message (``replace``), the output (``shell``), each escaped at worst,
    plus the path, the message and the small fields.
    A tool this module does not know gets ``ANSWER_CHARS``.
    """
    fixed = ESCAPED_CHARS_PER_BYTE * (PATH_BYTES + MAXIMUM_MESSAGE_BYTES) + SMALL_FIELDS_CHARS
    variable = {
        "read": config.max_read_bytes,
        "replace": DIFF_BYTES + QUOTE_BYTES,
        # stdout and stderr, the workdir, and a launcher's sandbox_hint (at most 512 bytes)
        "shell": config.max_output_bytes + PATH_BYTES + HINT_BYTES,
    }.get(name)
    if variable is None:
        return ANSWER_CHARS
    if name == "shell":
        fixed += NETWORK_REFUSED_CHARS + PROTECTED_RESTORED_CHARS + STAGE_CHARS
    return min(ANSWER_CHARS, fixed + ESCAPED_CHARS_PER_BYTE * variable)


def output_schema(name: str) -> dict[str, object]:
    """The JSON Schema (draft 2020-12) that every content object of tool ``name`` satisfies."""
    properties = {**_COMMON, **_FIELDS.get(name, {})}
    return {
        "type": "object",
        "properties": {key: dict(value) for key, value in properties.items()},
        "required": ["ok"],
    }
