"""The shell's arguments: the input schema, and the one decoder that enforces it.

Every rule the schema states (and those it cannot, such as the argv's byte bound or a
workdir that stays in the root) is checked here, before anything is looked up or run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

from ._arguments import (
    ArgumentError,
    decode_object,
    take_boolean,
    take_number,
    take_string,
    take_string_list,
)
from ._config import Config, absolute
from ._paths import ABSOLUTE_ELSEWHERE
from ._platform import batch_file, clean_path, is_windows
from ._root import PathError
from ._shell_description import MAXIMUM_ARGV_BYTES, MAXIMUM_ARGV_ITEMS, _number
from ._shell_problems import globbed, path_globbed

__all__ = ["ShellArguments", "parse", "schema"]


def schema(config: Config) -> dict[str, object]:
    """The input schema: optional properties are nullable (null means absent).

    Defaults and bounds are stated in the descriptions, not as ``default`` or
    ``minLength`` keywords, which clients that make schemas strict refuse; the decoder
    enforces every rule itself.
    """
    timeout = _number(config.command_timeout)
    return {
        "type": "object",
        "properties": {
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": MAXIMUM_ARGV_ITEMS,
                "description": (
                    f"The program and its arguments: 1 to {MAXIMUM_ARGV_ITEMS} non-empty "
                    f"strings, at most {MAXIMUM_ARGV_BYTES} bytes together, passed literally "
                    "(no shell). argv[0] without '/' is looked up in PATH only; use ./name "
                    "for a program in the workdir."
                ),
            },
            "workdir": {
                "type": ["string", "null"],
                "description": (
                    "The directory to run in: relative to the worktree root, or absolute "
                    "beneath it; default the root."
                ),
            },
            "timeout_seconds": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "maximum": config.command_timeout,
                "description": (
                    f"Seconds before the program is stopped: more than 0, at most {timeout}; "
                    f"default {timeout}."
                ),
            },
            "dry_run": {
                "type": ["boolean", "null"],
                "description": (
                    "true: run the command on a stage of the worktree and answer what it "
                    "would add, modify or delete (changes), applying nothing; default false."
                ),
            },
        },
        "required": ["argv"],
        "additionalProperties": False,
    }


@final
@dataclass(frozen=True, slots=True)
class ShellArguments:
    """A decoded call: the argv, the cleaned workdir, the timeout, and what the answer needs
    to know of the argv (so no later step looks at it again for a hint)."""

    argv: tuple[str, ...]
    workdir: str
    timeout: float
    batch_file: bool
    """argv[0] names a batch file on Windows: refused, with the workdir in the answer."""
    program_globbed: bool
    """argv[0] holds a glob character (a ``command_not_found`` gets the glob hint)."""
    arguments_globbed: bool
    """An argument looks like a file pattern (``path_globbed``: not a program's own text
    after ``-c``/``-e``); a ``command_failed`` gets the glob hint."""
    dry_run: bool = False
    """The command's changes are listed, none applied (a staged launcher's)."""


def parse(arguments: str, config: Config) -> ShellArguments:
    """The call's arguments, checked against every rule the schema states, or
    ``ArgumentError`` naming the first rule broken."""
    values = decode_object(arguments, frozenset({"argv", "workdir", "timeout_seconds", "dry_run"}))
    if "argv" not in values:
        raise ArgumentError("argv is required")
    argv = take_string_list(values, "argv")
    if not argv:
        raise ArgumentError("argv must name a program: it needs at least 1 element")
    if len(argv) > MAXIMUM_ARGV_ITEMS:
        raise ArgumentError(f"argv must have at most {MAXIMUM_ARGV_ITEMS} elements")
    if any(not item for item in argv):
        raise ArgumentError("argv elements must not be empty")
    if any("\0" in item for item in argv):
        raise ArgumentError("argv elements must not contain NUL")
    if sum(len(item.encode("utf-8")) for item in argv) > MAXIMUM_ARGV_BYTES:
        raise ArgumentError(f"argv must be at most {MAXIMUM_ARGV_BYTES} bytes together")
    workdir = take_string(values, "workdir", required=False)
    timeout = take_number(values, "timeout_seconds")
    if timeout is None:
        timeout = config.command_timeout
    elif not timeout > 0:
        raise ArgumentError("timeout_seconds must be greater than 0")
    elif not (math.isfinite(timeout) and timeout <= config.command_timeout):
        raise ArgumentError("timeout_seconds must be at most the configured command timeout")
    try:
        cleaned = "." if workdir is None else clean_path(workdir, root=config.root)
    except PathError as error:
        # An absolute workdir elsewhere: the path check's own words, which name the root
        # (as read and replace answer); on Windows also a path rooted on the current drive.
        if config.root in error.message:
            raise ArgumentError(f"workdir: {error.message}") from None
        if workdir is not None and (absolute(workdir) or workdir[:1] in {"/", "\\"}):
            raise ArgumentError(f"workdir: {ABSOLUTE_ELSEWHERE} ({config.root})") from None
        raise ArgumentError(
            "workdir must be a relative path, or an absolute one beneath the worktree "
            "root, that stays in the root"
        ) from None
    return ShellArguments(
        tuple(argv),
        cleaned,
        timeout,
        batch_file=is_windows() and batch_file(argv[0]),
        program_globbed=globbed(argv[:1]),
        arguments_globbed=path_globbed(argv[1:]),
        dry_run=take_boolean(values, "dry_run") is True,
    )
