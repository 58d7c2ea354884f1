"""One audit line per tool call over HTTP: who, from where, what, how it ended, how big.

A line is one JSON object: ``time`` (UTC, ISO 8601), ``token`` (the token's *name*),
``peer`` (address and port of the connection), ``tool`` (a served tool's name, else
``"(unknown)"``), ``call_id`` (the server's own id, also in an execution error's data),
``arguments_sha256`` (of the arguments' compact JSON), ``outcome`` (``ok``, a failure code,
``forbidden``, ``busy``, ``cancelled``, ``execution_error``), ``ms`` and ``bytes_out`` (UTF-8
bytes of the answer's text block). Never a token, an argument, file content or output.
Lines go to stderr (prefixed ``spice-coding: audit``), or to ``--audit-log PATH``, a file
created private (mode 0600, or the user's own access list on Windows: ``_private``),
refused when another user owns it or others may open it, or when it lies beneath the
worktree or inside an ``--allow-write`` directory (a command could truncate it: R5-7), and
only appended to.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import sys
from dataclasses import asdict, dataclass
from typing import Final, TextIO, final

from ._private import NOT_OWNED, OPEN_TO_OTHERS, access_problem, create_private, inside

AUDIT_PREFIX: Final = "spice-coding: audit "
UNKNOWN_TOOL: Final = "(unknown)"
MAXIMUM_PEER_CHARS: Final = 64
"""A peer's text is cut to this many characters (an address and a port fit)."""

LOG_OPEN_TO_OTHERS: Final = (
    "the audit log may be read or written by group or others (chmod 600 it)"
    if sys.platform != "win32"
    else "the audit log's access list lets other accounts open it (remove it, or them with icacls)"
)
LOG_NOT_OWNED: Final = "the audit log belongs to another user"
LOG_UNUSABLE: Final = "the audit log cannot be opened for appending"
LOG_BENEATH_ROOT: Final = "the audit log lies beneath the worktree root: a command could change it"
LOG_IN_WRITABLE_PLACE: Final = (
    "the audit log lies inside an --allow-write directory: a command could change it"
)
_LOG_PROBLEMS: Final = {OPEN_TO_OTHERS: LOG_OPEN_TO_OTHERS, NOT_OWNED: LOG_NOT_OWNED}


class AuditLogError(ValueError):
    """An audit log that cannot be used; one fixed line."""


@final
@dataclass(frozen=True, slots=True)
class AuditRecord:
    """What one audit line says."""

    time: str
    token: str
    peer: str
    tool: str
    call_id: str
    arguments_sha256: str
    outcome: str
    ms: int
    bytes_out: int


def now_text() -> str:
    """The current UTC time, ISO 8601 with milliseconds."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


@final
class AuditLog:
    """Writes audit lines to stderr, or appends them to a private file."""

    __slots__ = ("_fd", "_stream")

    def __init__(
        self,
        path: str | None = None,
        stream: TextIO | None = None,
        *,
        root: str | None = None,
        writable: tuple[str, ...] = (),
    ) -> None:
        """``root`` and ``writable``: where a command could change the file (refused)."""
        self._stream = sys.stderr if stream is None else stream
        self._fd: int | None = None
        if path is not None:
            if root is not None and inside(path, (root,)):
                raise AuditLogError(LOG_BENEATH_ROOT)
            if inside(path, writable):
                raise AuditLogError(LOG_IN_WRITABLE_PLACE)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            flags |= getattr(os, "O_BINARY", 0)
            try:
                fd = create_private(path, flags)
            except OSError:
                raise AuditLogError(LOG_UNUSABLE) from None
            try:
                info = os.fstat(fd)
                problem = access_problem(fd, info) if _regular(info) else LOG_UNUSABLE
            except OSError:
                problem = LOG_UNUSABLE
            if problem is not None:
                os.close(fd)
                raise AuditLogError(_LOG_PROBLEMS.get(problem, LOG_UNUSABLE))
            self._fd = fd

    def write(self, record: AuditRecord) -> None:
        """Write one line; a failing write is dropped (the call's answer is not held up)."""
        line = json.dumps(asdict(record), separators=(",", ":"), ensure_ascii=True)
        try:
            if self._fd is not None:
                os.write(self._fd, (line + "\n").encode("ascii"))
            else:
                self._stream.write(AUDIT_PREFIX + line + "\n")
                self._stream.flush()
        except (OSError, ValueError):
            return

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _regular(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode)
