"""Credentials inside the home files a command is shown, masked (round 5's R6-11).

The hidden home shows toolchain configuration (``_sandbox.HOME_SHOWN``), and some of it
holds credentials by habit: a ``pip.conf`` ``index-url`` with a password, a
``.gitconfig`` ``[url "https://x-access-token:TOKEN@github.com/"] insteadOf`` rewrite or an
``http.extraHeader`` with a bearer token. At start, each of ``MASKED_FILES`` that holds one
is copied with the credential replaced (``REDACTED``) into the server's private directory,
and the copy is bound read-only over the original in every call (namespaces only): the
toolchain still reads its configuration, the secret never enters the sandbox. A file that
cannot be judged (larger than ``MAXIMUM_MASKED_BYTES``, not UTF-8, unreadable) is hidden
(bound empty) instead. The copies are of the files as they were at start.

What counts as a credential: the userinfo of an ``http(s)``/``ftp`` URL (a password, or a
user alone, which is how tokens are written: ``https://TOKEN@host``), the password of any
other URL (``ssh://git@host`` keeps its user), and the value of an ``extraHeader`` key.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Final

__all__ = [
    "MASKED_FILES",
    "MAXIMUM_MASKED_BYTES",
    "REDACTED",
    "masked_copies",
    "masked_text",
]

MASKED_FILES: Final = (
    ".gitconfig",
    ".config/git/config",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".config/uv/uv.toml",
)
"""The shown home files (relative to the home) whose credentials are masked."""
MAXIMUM_MASKED_BYTES: Final = 256 * 1024
"""A larger file is hidden rather than read and masked."""
REDACTED: Final = "REDACTED"

_URL: Final = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31})://"
    r"(?P<userinfo>[^\s/@\"'<>]{1,1024})@",
)
"""A URL's scheme and userinfo, each bounded (no quadratic scan of a long line)."""
_HEADER: Final = re.compile(r"(?im)^(?P<key>\s*extraheader\s*=\s*)(?P<value>.*)$")
_OPEN_SCHEMES: Final = frozenset({"http", "https", "ftp", "ftps"})


def _userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match["scheme"], match["userinfo"]
    user, colon, _ = userinfo.partition(":")
    if colon:
        return f"{scheme}://{user}:{REDACTED}@"
    if scheme.lower() in _OPEN_SCHEMES:
        return f"{scheme}://{REDACTED}@"
    return match[0]


def masked_text(text: str) -> str | None:
    """``text`` with its credentials replaced, or ``None`` when it holds none."""
    masked = _URL.sub(_userinfo, text)
    masked = _HEADER.sub(lambda m: f"{m['key']}{REDACTED}", masked)
    return None if masked == text else masked


def _read(path: str) -> str | None:
    """The file's text; ``""`` when there is none (absent, not a regular file); ``None``
    when it cannot be judged (too large, not UTF-8, unreadable)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK  # a dotfile manager links them
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return ""
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        data = os.read(fd, MAXIMUM_MASKED_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAXIMUM_MASKED_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _write_once(path: str, data: bytes) -> None:
    """``data`` at ``path`` (named by its digest: servers share one copy, none is ever
    rewritten under a running one); an existing file must hold exactly ``data``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    except FileExistsError:
        if _read(path) != data.decode("utf-8"):
            raise OSError("a masked copy holds something else") from None
        return
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def masked_copies(home: str, directory: str, empty_file: str) -> tuple[tuple[str, str], ...]:
    """``(copy, original)`` for each of ``MASKED_FILES`` beneath ``home`` that holds a
    credential (its masked copy written into ``directory``, made private, named by its
    digest), or ``(empty_file, original)`` for one that cannot be judged."""
    found: list[tuple[str, str]] = []
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    for relative in MASKED_FILES:
        original = os.path.join(home, relative)
        text = _read(original)
        if text is None:
            found.append((empty_file, original))
            continue
        masked = masked_text(text)
        if masked is None:
            continue
        data = masked.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()[:32]
        copy = os.path.join(directory, f"{digest}-{os.path.basename(relative)}")
        _write_once(copy, data)
        found.append((copy, original))
    return tuple(found)
