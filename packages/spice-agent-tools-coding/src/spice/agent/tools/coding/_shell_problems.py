"""The shell's model-visible words: each refusal's problem, and the hint a glob gets.

Fixed sentences only: nothing of a call's argv, environment or output is ever quoted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

__all__ = [
    "CODE_OPTIONS",
    "GLOB_CHARACTERS",
    "GLOB_HINT",
    "NOT_IN_A_PATH",
    "PROBLEMS",
    "globbed",
    "path_globbed",
]

PROBLEMS: Final = {
    "wrong_tool": "the call is not for the shell tool",
    "batch_file": (
        "argv[0] names a batch file (.bat, .cmd): Windows runs it through cmd.exe, whose "
        "parsing of its arguments cannot be made safe; run a program (.exe) instead"
    ),
    "unsupported_platform": "the shell tool is not supported on this platform yet",
    "shell_closing": "the shell tool is shutting down and accepts no new commands",
    "process_limit": "too many commands are running; wait for one to finish",
    "command_not_found": (
        "no executable matches argv[0]: a name without '/' is looked up in PATH only; "
        "use ./name for a program in the workdir"
    ),
    "split_argv": (
        "no executable matches argv[0], which holds spaces: argv is not split by a shell, "
        'so give the program and each argument as its own element, e.g. ["python3", "-m", '
        '"unittest"], not ["python3 -m unittest"]'
    ),
    "launch_failed": "the command could not be started",
    "dry_run_unavailable": (
        "dry_run needs a staged worktree, and this server runs commands unstaged (see tools)"
    ),
    "workdir_unavailable": "the workdir is not an existing directory",
    "workdir_changed": "the workdir changed before the command could start",
    "exited": "the command exited with a non-zero status",
    "signaled": "the command was ended by a signal",
    "unknown": "the command ended without a portable exit status",
    "timed_out": "the command did not finish within its timeout and was stopped",
}

GLOB_CHARACTERS: Final = frozenset("*?[")
"""Characters a command shell would expand as a file pattern; argv is never expanded."""
GLOB_HINT: Final = (
    "; argv holds *, ? or [, which nothing expands here (no shell runs the command): if it "
    'is a file pattern, list the files with ["find", ".", "-name", "*.py"], or run a shell '
    'yourself: ["sh", "-c", "ls *.py"]'
)
"""Added to the problem of a failing command whose argv holds a glob character (fixed
words: nothing of the argv is echoed)."""


CODE_OPTIONS: Final = re.compile(r"-[A-Za-z]?[ce]|-E|--eval|--command|--exec|--expression")
"""The options whose next argument is a program's own text (``sh -c``, ``bash -lc``,
``python -c``, ``node -e``, ``perl -e``, ``sed -e``): a glob character there is code."""

NOT_IN_A_PATH: Final = frozenset(" \t\n\r\"'`$;(){}|&<>\\")
"""Characters a file pattern an agent means as a path does not hold, but code does."""


def globbed(items: Sequence[str]) -> bool:
    """Whether any of ``items`` holds a character a shell would expand as a file pattern."""
    return any(not GLOB_CHARACTERS.isdisjoint(item) for item in items)


def path_globbed(arguments: Sequence[str]) -> bool:
    """Whether an argument looks like a file pattern meant for a shell to expand: it holds
    a glob character, no character of ``NOT_IN_A_PATH``, and does not follow an option of
    ``CODE_OPTIONS`` (``["python", "-c", "print(sys.argv[1:])"]`` is code, not a glob)."""
    after_code = False
    for item in arguments:
        if (
            not after_code
            and not GLOB_CHARACTERS.isdisjoint(item)
            and NOT_IN_A_PATH.isdisjoint(item)
        ):
            return True
        after_code = CODE_OPTIONS.fullmatch(item) is not None
    return False
