"""One audit line per tool call over HTTP: who, from where, what, how it ended, how big.

A line is one JSON object: ``time`` (UTC, ISO 8601), ``token`` (the token's *name*),
``peer`` (address and port of the connection), ``tool`` (a served tool's name, else
``"(unknown)"``), ``call_id`` (the server's own id, also in an execution error's data),
``arguments_sha256`` (of the arguments' compact JSON), ``outcome`` (``ok``, a failure code,
``forbidden``, ``busy``, ``cancelled``, ``execution_error``), ``ms`` and ``bytes_out`` (UTF-8
bytes of the answer's text block). Never a token, an argument, file content or output.
Lines go to stderr (prefixed ``spice-coding: audit``), or to ``--audit-log PATH``, a file
created with mode 0600 and only appended to.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import sys
from dataclasses import asdict, dataclass
from typing import Final, TextIO, final

AUDIT_PREFIX: Final = "spice-coding: audit "
UNKNOWN_TOOL: Final = "(unknown)"
POSIX: Final = os.name == "posix"
"""Whether the log's mode bits mean anything (Windows has none: not checked there)."""
MAXIMUM_PEER_CHARS: Final = 64
"""A peer's text is cut to this many characters (an address and a port fit)."""

LOG_OPEN_TO_OTHERS: Final = "the audit log may be read or written by group or others (chmod 600 it)"
LOG_UNUSABLE: Final = "the audit log cannot be opened for appending"


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

    def __init__(self, path: str | None = None, stream: TextIO | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        self._fd: int | None = None
        if path is not None:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            try:
                fd = os.open(path, flags, 0o600)
            except OSError:
                raise AuditLogError(LOG_UNUSABLE) from None
            info = os.fstat(fd)
            if (POSIX and info.st_mode & 0o077) or not _regular(info):
                os.close(fd)
                raise AuditLogError(LOG_OPEN_TO_OTHERS if _regular(info) else LOG_UNUSABLE)
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
