"""Bearer tokens for the HTTP transport: the token file, its checks, scopes and ``token add``.

The file holds one token a line: ``NAME SCOPES SHA256HEX [NOT-AFTER]`` (``#`` starts a
comment). Only the SHA-256 digest of a token is ever stored or kept in memory; a presented
token is hashed and compared with every digest in constant time. The file is refused when
it lies beneath the worktree (``read`` would show it) or inside an ``--allow-write``
directory (a contained command could add a token: R5-7), when another user owns it, or
when others may read or write it (group or others' mode bits on POSIX, the access list
on Windows: ``_private``), and it is re-read whenever its identity, size or modification
time changes, so a line removed is a token revoked at the next request, without a restart.
A file that becomes unusable (removed, opened up, unparsable) accepts no token at all
until it is fixed. Standard library only.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, final

from ._private import NOT_OWNED as PRIVATE_NOT_OWNED
from ._private import access_problem, create_private, inside

READ: Final = "read"
WRITE: Final = "write"
SHELL: Final = "shell"
SCOPES: Final = (READ, WRITE, SHELL)
"""The scopes, each allowing what the ones before it allow: ``read`` < ``write`` < ``shell``."""

TOOL_SCOPES: Final = {"read": READ, "replace": WRITE, "shell": SHELL}
"""The scope each tool needs; a tool not named here is never served over HTTP."""

TOKEN_BYTES: Final = 32
"""A new token's entropy: 256 bits (43 characters of URL-safe base64)."""
MAXIMUM_TOKEN_CHARS: Final = 512
"""A presented token longer than this is refused without being hashed."""
MAXIMUM_FILE_BYTES: Final = 65_536
"""A token file larger than this is refused (read at most this much plus one byte)."""
MAXIMUM_TOKENS: Final = 1024
"""A token file with more lines of tokens than this is refused."""
MAXIMUM_NAME_CHARS: Final = 64
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
RACY_SECONDS: Final = 2.0
"""A file modified less than this long ago is read again at every request: a rewrite within
one tick of the file system's clock keeps the size and the time, so only reading shows it
(git's "racy" index rule)."""
_BINARY: Final = getattr(os, "O_BINARY", 0)
"""Windows: the file's bytes pass unchanged (no newline translation)."""
ANONYMOUS: Final = "anonymous"
"""The principal's name under ``--insecure-no-auth``."""

BENEATH_ROOT: Final = "the token file lies beneath the worktree root: the read tool would show it"
ADD_BENEATH_ROOT: Final = (
    "the token file lies beneath the worktree root {root}, where the read tool would show "
    "it; without --root the root is the current directory (or $SPICE_AGENT_WORKTREE): give "
    "--root the worktree the server will serve, or keep the file elsewhere"
)
"""``token add``'s ``BENEATH_ROOT``: it names the root it took and ``--root``."""
IN_WRITABLE_PLACE: Final = (
    "the token file lies inside an --allow-write directory: a command could add a token to it"
)
OPEN_TO_OTHERS: Final = (
    "the token file may be read or written by group or others (chmod 600 it)"
    if sys.platform != "win32"
    else "the token file's access list lets other accounts open it "
    "(make it anew with spice-coding token add, or remove them with icacls)"
)
NOT_A_FILE: Final = "the token file is not a regular file"
NOT_OWNED: Final = "the token file belongs to another user"
UNREADABLE: Final = "the token file cannot be read"
MISSING: Final = "the token file does not exist"
SHOWN_PATH_CHARS: Final = 200
"""Most characters of a configured path a refusal shows (escaped, one line)."""


def missing_problem(path: str) -> str:
    """The refusal of a token file that does not exist: its path, and how to make it."""
    shown = path[:SHOWN_PATH_CHARS].encode("unicode_escape").decode("ascii")
    return (
        f"the token file {shown} does not exist: make it with spice-coding token add NAME "
        f"--scopes read,write,shell --token-file {shown} (it prints the token once)"
    )


MALFORMED: Final = "the token file has a line that is not NAME SCOPES SHA256HEX [NOT-AFTER]"
TOO_LARGE: Final = "the token file is too large"
NAME_TAKEN: Final = "the token file already has a token of that name"
BAD_NAME: Final = (
    f"a token name is letters, digits, '.', '_' or '-', at most {MAXIMUM_NAME_CHARS} characters"
)
BAD_SCOPES: Final = "the scopes are a comma-separated list of read, write, shell"
BAD_DATE: Final = "the date is YYYY-MM-DD or an ISO 8601 time with its UTC offset"

_logger = logging.getLogger("spice.agent.coding")


class TokenFileError(ValueError):
    """A token file that cannot be used; the message is one fixed line without content."""


def scopes_of(level: str) -> tuple[str, ...]:
    """Every scope a token at ``level`` holds (``write`` holds ``read`` and ``write``)."""
    return SCOPES[: SCOPES.index(level) + 1]


def tools_for(scopes: Iterable[str]) -> frozenset[str]:
    """The tools a holder of ``scopes`` may list and call."""
    held = set(scopes)
    return frozenset(tool for tool, needed in TOOL_SCOPES.items() if needed in held)


def parse_scopes(text: str) -> tuple[str, ...]:
    """``read,write`` as the scopes held: the highest named and every one below it."""
    names = [part.strip() for part in text.split(",")]
    if not names or any(name not in SCOPES for name in names):
        raise TokenFileError(BAD_SCOPES)
    return scopes_of(max(names, key=SCOPES.index))


def parse_not_after(text: str) -> float:
    """A ``NOT-AFTER`` as the last POSIX second the token is accepted.

    A date (``2026-12-31``) means through the end of that day, UTC; a time must carry its
    offset (``2026-12-31T12:00:00+00:00`` or ``...Z``).
    """
    try:
        if _DATE.fullmatch(text):
            day = datetime.date.fromisoformat(text)
            end = datetime.datetime.combine(day, datetime.time.max, datetime.UTC)
            return end.timestamp()
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise TokenFileError(BAD_DATE) from None
    if moment.tzinfo is None:
        raise TokenFileError(BAD_DATE)
    return moment.timestamp()


def digest_of(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 bytes: what the file keeps."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@final
@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the token file: a name, the scopes held, a digest, an optional end."""

    name: str
    scopes: tuple[str, ...]
    digest: bytes
    not_after: float | None = None

    def __repr__(self) -> str:
        return f"Entry(name={self.name!r}, scopes={self.scopes!r})"


@final
@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token is: its name, scopes and end (never the token)."""

    name: str
    scopes: tuple[str, ...]
    not_after: float | None = None


def parse_token_file(text: str) -> tuple[Entry, ...]:
    """Every entry of a token file's text; ``TokenFileError`` for any bad line."""
    entries: list[Entry] = []
    names: set[str] = set()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) not in (3, 4) or len(entries) >= MAXIMUM_TOKENS:
            raise TokenFileError(MALFORMED if len(entries) < MAXIMUM_TOKENS else TOO_LARGE)
        name, scopes, digest = fields[0], fields[1], fields[2].lower()
        if _NAME.fullmatch(name) is None or name in names or _DIGEST.fullmatch(digest) is None:
            raise TokenFileError(MALFORMED)
        try:
            held = parse_scopes(scopes)
            end = parse_not_after(fields[3]) if len(fields) == 4 else None
        except TokenFileError:
            raise TokenFileError(MALFORMED) from None
        names.add(name)
        entries.append(Entry(name, held, bytes.fromhex(digest), end))
    return tuple(entries)


def _beneath(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def file_problem(fd: int, info: os.stat_result) -> str | None:
    """Why the open token file ``fd`` (whose ``fstat`` is ``info``) may not be used, or ``None``.

    ``OSError`` when its access list cannot be read (Windows).
    """
    if not stat.S_ISREG(info.st_mode):
        return NOT_A_FILE
    found = access_problem(fd, info)
    if found == PRIVATE_NOT_OWNED:
        return NOT_OWNED
    if found is not None:
        return OPEN_TO_OTHERS
    return None


def _read(path: str) -> tuple[os.stat_result, str]:
    """The file's ``fstat`` and text, opened without following a final link or blocking."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | _BINARY
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise TokenFileError(missing_problem(path)) from None
    except OSError:
        raise TokenFileError(UNREADABLE) from None
    try:
        info = os.fstat(fd)
        problem = file_problem(fd, info)
        if problem is not None:
            raise TokenFileError(problem)
        data = os.read(fd, MAXIMUM_FILE_BYTES + 1)
    except OSError:
        raise TokenFileError(UNREADABLE) from None
    finally:
        os.close(fd)
    if len(data) > MAXIMUM_FILE_BYTES:
        raise TokenFileError(TOO_LARGE)
    try:
        return info, data.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenFileError(MALFORMED) from None


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@final
class TokenStore:
    """The token file's digests, re-read when the file changes.

    ``TokenStore(path, root)`` raises ``TokenFileError`` when the file cannot be used at
    start (the CLI exits 2 with its line). Later, ``verify`` looks at the file's ``stat``
    first (one system call): a changed file is read again; a file that became unusable
    accepts no token until it is usable again (logged once per change, without content).
    """

    __slots__ = ("_entries", "_failing", "_identity", "_path", "_root", "_writable")

    def __init__(self, path: str, root: str, writable: tuple[str, ...] = ()) -> None:
        self._path = os.path.abspath(path)
        self._root = root
        self._writable = writable
        problem = self._placed()
        if problem is not None:
            raise TokenFileError(problem)
        info, text = _read(self._path)
        self._entries = parse_token_file(text)
        self._identity: tuple[int, ...] | None = _identity(info)
        self._failing: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the tokens currently accepted."""
        return tuple(entry.name for entry in self._entries)

    def _refresh(self) -> None:
        try:
            current = os.stat(self._path, follow_symlinks=False)
        except OSError:
            self._fail(MISSING)
            return
        settled = time.time() - current.st_mtime >= RACY_SECONDS
        if settled and _identity(current) == self._identity and self._failing is None:
            return
        problem = self._placed()
        if problem is not None:
            self._fail(problem)
            return
        try:
            info, text = _read(self._path)
            entries = parse_token_file(text)
        except TokenFileError as error:
            self._fail(str(error))
            return
        self._entries, self._identity, self._failing = entries, _identity(info), None

    def _placed(self) -> str | None:
        """Why the file's place is refused: beneath the root, or in a writable place."""
        if _beneath(self._path, self._root):
            return BENEATH_ROOT
        if inside(self._path, self._writable):
            return IN_WRITABLE_PLACE
        return None

    def _fail(self, reason: str) -> None:
        if self._failing != reason:
            _logger.warning("%s; no token is accepted until it is fixed", reason)
        self._entries, self._identity, self._failing = (), None, reason

    def verify(self, token: str, now: float | None = None) -> Principal | None:
        """The principal of ``token``, or ``None`` (unknown, expired, or the file unusable).

        Every digest is compared, in constant time, whatever matched first.
        """
        self._refresh()
        if not isinstance(token, str) or not 0 < len(token) <= MAXIMUM_TOKEN_CHARS:
            return None
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Entry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, presented) and found is None:
                found = entry
        if found is None:
            return None
        moment = time.time() if now is None else now
        if found.not_after is not None and moment > found.not_after:
            return None
        return Principal(found.name, found.scopes, found.not_after)


def new_token() -> str:
    """A new 256-bit token, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def add_token(
    path: str,
    name: str,
    scopes: str,
    root: str,
    not_after: str | None = None,
    writable: tuple[str, ...] = (),
) -> str:
    """Append a new token's line to ``path`` (created private: ``_private``); return the token.

    Refused (``TokenFileError``) for a bad name, scopes or date, a name already in the
    file, a file beneath ``root``, or an existing file that is not the user's own, private,
    regular file. The token itself is never written anywhere; only its digest is.
    """
    if _NAME.fullmatch(name) is None:
        raise TokenFileError(BAD_NAME)
    held = parse_scopes(scopes)
    if not_after is not None:
        parse_not_after(not_after)
    target = os.path.abspath(path)
    if _beneath(target, root):
        raise TokenFileError(ADD_BENEATH_ROOT.format(root=root))
    if inside(target, writable):
        raise TokenFileError(IN_WRITABLE_PLACE)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | _BINARY
    try:
        fd = create_private(target, flags)
    except OSError:
        raise TokenFileError(UNREADABLE) from None
    try:
        try:
            problem = file_problem(fd, os.fstat(fd))
        except OSError:
            raise TokenFileError(UNREADABLE) from None
        if problem is not None:
            raise TokenFileError(problem)
        _, text = _read(target)
        existing = parse_token_file(text)
        if any(entry.name == name for entry in existing):
            raise TokenFileError(NAME_TAKEN)
        if len(existing) >= MAXIMUM_TOKENS:
            raise TokenFileError(TOO_LARGE)
        token = new_token()
        fields = [name, ",".join(held), digest_of(token)]
        if not_after is not None:
            fields.append(not_after)
        line = " ".join(fields) + "\n"
        prefix = "" if not text or text.endswith("\n") else "\n"
        os.write(fd, (prefix + line).encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return token
