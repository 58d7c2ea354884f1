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

__all__ = ["TITLES", "output_schema", "title_of"]

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
        "content": _STRING,
        "sha256": _STRING,
        "file_sha256": _STRING,
    },
    "replace": {
        "path": _STRING,
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
        "diff": _STRING_OR_NULL,
        "diff_truncated": _BOOLEAN,
    },
    "shell": {
        "workdir": _STRING_OR_NULL,
        "exit_code": _INTEGER,
        "timed_out": _BOOLEAN,
        "managed_cleanup_completed": _BOOLEAN,
        "contained": _BOOLEAN,
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


def output_schema(name: str) -> dict[str, object]:
    """The JSON Schema (draft 2020-12) that every content object of tool ``name`` satisfies."""
    properties = {**_COMMON, **_FIELDS.get(name, {})}
    return {
        "type": "object",
        "properties": {key: dict(value) for key, value in properties.items()},
        "required": ["ok"],
    }
