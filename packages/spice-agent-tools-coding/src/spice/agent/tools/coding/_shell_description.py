"""The ``shell`` tool's description: its bounds in numbers and its allowlist by name.

The argv bounds live here because the description states them; ``_shell`` enforces them.
"""

from __future__ import annotations

from typing import Final

from spice.agent.tool import MAXIMUM_MESSAGE_BYTES

from ._config import Config

MAXIMUM_ARGV_ITEMS: Final = 128
"""Most argv elements (the program included)."""

MAXIMUM_ARGV_BYTES: Final = 64 * 1024
"""Most bytes of argv together: the sum of each element's UTF-8 size (no separators)."""

UNCONFINED: Final = (
    "The program runs with the user's full privileges and is not confined to the worktree "
    "(contained: false)."
)
"""What the description says when the launcher gives no ``containment`` text."""


def _number(value: float) -> str:
    """``120.0`` as ``120``, ``0.5`` as ``0.5``."""
    return f"{value:g}"


def _environment_sentence(allowlist: tuple[str, ...], budget: int) -> str:
    """Which host variables reach the program, by name, within ``budget`` UTF-8 bytes."""
    if not allowlist:
        return (
            "Environment: no host variable reaches the program (no PATH either, so "
            "argv[0] needs a '/'). "
        )
    lead = "Environment: only these host variables reach the program, when set: "
    no_path = "" if "PATH" in allowlist else " PATH is not among them, so argv[0] needs a '/'."
    end = "." + no_path + " "
    shown: list[str] = []
    used = len((lead + end).encode("utf-8"))
    for index, name in enumerate(allowlist):
        cost = len(name.encode("utf-8")) + (2 if shown else 0)  # ", " between names
        after = len(allowlist) - index - 1
        reserve = len(f" and {after} more") if after else 0
        if used + cost + reserve > budget:
            break
        shown.append(name)
        used += cost
    left = len(allowlist) - len(shown)
    if not shown:
        listing = f"{left} names, too long to list"
    else:
        listing = ", ".join(shown) + (f" and {left} more" if left else "")
    return lead + listing + end


DRY_RUN: Final = (
    "dry_run: true runs the command on a stage of the worktree and answers what it would "
    "add, modify or delete (changes) without applying anything: use it first for a command "
    "whose effects you are unsure of. "
)
"""What the description says of ``dry_run`` where the launcher can do it (contract 13.2)."""


def shell_description(
    config: Config, containment: str | None = None, *, dry_run: bool = False
) -> str:
    """The tool's description, with the configured bounds and allowlist in numbers and names.

    ``containment`` is the launcher's own text about what it confines (see
    ``launcher_containment``); without one the description says the program is not
    confined. ``dry_run``: the launcher can run a command dry (``launcher_dry_runs``).
    The whole text stays within ``MAXIMUM_MESSAGE_BYTES``: the list of variable names is
    shortened ("and N more") when it would not fit.
    """
    timeout = _number(config.command_timeout)
    head = (
        "Run one program with discrete arguments in a directory of the worktree and return "
        "its exit code and output. argv: the program and its arguments, 1 to "
        f"{MAXIMUM_ARGV_ITEMS} non-empty strings of at most {MAXIMUM_ARGV_BYTES} bytes "
        "together, passed literally: never through a command shell, so no globbing, pipes, "
        "redirection or variable expansion. argv[0] without a '/' is looked up in PATH only "
        "(its absolute entries), never in the workdir: run a program of the worktree as "
        "./name (relative to the workdir) or by its path. workdir: a directory relative to "
        "the worktree root, or absolute beneath it; default the root. timeout_seconds: "
        f"default {timeout}, at most {timeout}; a program still running then is stopped "
        "and the answer is timed_out. stdin is empty. Output: at most "
        f"{config.max_output_bytes} bytes of stdout and stderr together are returned, as "
        "UTF-8 text, or as base64 (encoding) when they are not text or would pass 1 MiB "
        "once escaped as JSON; beyond that the start and the end of each stream are kept "
        "and the result says how many bytes were left out and where. "
    )
    confinement = (
        f"{containment} The result's contained field says whether the command ran confined."
        if containment
        else UNCONFINED
    )
    tail = (DRY_RUN if dry_run else "") + (
        "A non-zero exit is answered with ok false, code command_failed, its exit_code and "
        f"the output: read it. {confinement} A call can have effects even when it fails, "
        "times out or is cancelled. Optional arguments may be null, which means the default."
    )
    budget = MAXIMUM_MESSAGE_BYTES - len((head + tail).encode("utf-8"))
    return head + _environment_sentence(config.environment_allowlist, budget) + tail
