"""``Config``: the validated bounds of one tool suite, and the security warning."""

from __future__ import annotations

import math
import ntpath
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Final, final

from ._journal import Journal
from ._protected import ProtectedPaths

SECURITY_WARNING: Final = (
    "Security warning: the Spice coding tools read and write files, run processes, and "
    "use network and environment access with your operating-system user's privileges. "
    "They provide no sandbox and no approval prompt; a process started by the shell tool "
    "is not confined to the worktree unless the application's launcher confines it (each "
    "shell result says whether it was contained), and even then it can read what the user "
    "can. Run them only on worktrees and with agents you trust."
)

ROOT_ENVIRONMENT_VARIABLE: Final = "SPICE_AGENT_WORKTREE"
"""The variable naming the worktree root: its one owner, with its rule (``Config.root_in``)."""
DEFAULT_BYTES: Final = 262_144
MAXIMUM_BYTES: Final = 524_288
DEFAULT_EDIT_BYTES: Final = 4 * 1024 * 1024
"""Default ``max_edit_bytes``: the largest file ``read`` gives ``file_sha256`` and the edits
form of ``replace`` may produce (contract 10.2)."""
MAXIMUM_EDIT_BYTES: Final = 64 * 1024 * 1024
"""Most ``max_edit_bytes`` may be."""
DEFAULT_COMMAND_TIMEOUT: Final = 120.0
MAXIMUM_COMMAND_TIMEOUT: Final = 1800.0
WINDOWS_ENVIRONMENT_NAMES: Final = (
    "COMSPEC",
    "PATHEXT",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "TMP",
    "USERPROFILE",
)
"""What a program needs to start on Windows (winsock needs SYSTEMROOT, for one); added to
the default allowlist there (contract 10.4)."""
DEFAULT_ENVIRONMENT_ALLOWLIST: Final = tuple(
    sorted(
        ("HOME", "LANG", "PATH", "TMPDIR") + (WINDOWS_ENVIRONMENT_NAMES if os.name == "nt" else ())
    )
)


def _bytes_bound(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer")
    if not 1 <= value <= MAXIMUM_BYTES:
        raise ValueError(f"{field} must be within 1..{MAXIMUM_BYTES}")
    return value


def _edit_bound(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("max_edit_bytes must be an integer")
    if not 1 <= value <= MAXIMUM_EDIT_BYTES:
        raise ValueError(f"max_edit_bytes must be within 1..{MAXIMUM_EDIT_BYTES}")
    return value


def _timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("command_timeout must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 < seconds <= MAXIMUM_COMMAND_TIMEOUT:
        raise ValueError("command_timeout must be within 0 < seconds <= 1800")
    return seconds


def absolute(path: str, module: ModuleType = os.path) -> bool:
    """Whether ``path`` is absolute in ``module``'s spelling (the platform's by default).

    On Windows that needs a drive (``C:\\``) or a UNC share: before Python 3.13
    ``ntpath.isabs`` also took ``\\work``, which is relative to the current drive.
    """
    if not module.isabs(path):
        return False
    if module is not ntpath:
        return True
    drive = ntpath.splitdrive(path)[0]
    letter = len(drive) == 2 and drive[0].isascii() and drive[0].isalpha() and drive[1] == ":"
    return letter or drive[:2] in {"\\\\", "//", "\\/", "/\\"}


def _root(value: object) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError("root must be a non-empty path")
    if "\0" in value:
        raise ValueError("root must not contain NUL")
    if not absolute(value):
        raise ValueError("root must be an absolute path")
    cleaned = os.path.normpath(value)
    # POSIX keeps a leading "//"; the root is a plain absolute path.
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def _allowlist(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise ValueError("environment_allowlist must be a collection of names")
    names: set[str] = set()
    for raw in value:
        if not isinstance(raw, str):
            raise ValueError("environment_allowlist names must be strings")
        name = raw.strip()
        if not name or "=" in name or "\0" in name:
            raise ValueError("environment_allowlist names must be non-empty, without '=' or NUL")
        names.add(name)
    return tuple(sorted(names))


@final
@dataclass(frozen=True, slots=True, init=False)
class Config:
    """The worktree root and the bounds shared by ``read``, ``replace`` and ``shell``.

    Construction validates and normalizes; it never touches the disk.

    >>> Config("/work/tree").max_read_bytes
    262144
    """

    root: str
    max_read_bytes: int
    max_write_bytes: int
    max_output_bytes: int
    command_timeout: float
    environment_allowlist: tuple[str, ...]
    max_edit_bytes: int
    """The largest file whose ``read`` pages carry ``file_sha256``, and the largest result
    the edits form of ``replace`` may produce; ``max_write_bytes`` bounds ``content``."""
    protected_paths: ProtectedPaths
    """The paths beneath the root no agent may change (contract 12.1): ``replace`` refuses
    them; the application's sandbox obeys the same value. The default protects nothing."""
    journal: Journal | None
    """The worktree's journal (contract 13.2): each ``replace`` that changes a file is an
    entry of it, so ``spice-coding undo`` takes it back. ``None`` (the default): not
    journaled. The application opens it for the root it serves."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        max_read_bytes: int = DEFAULT_BYTES,
        max_write_bytes: int = DEFAULT_BYTES,
        max_output_bytes: int = DEFAULT_BYTES,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        environment_allowlist: Iterable[str] | str = DEFAULT_ENVIRONMENT_ALLOWLIST,
        max_edit_bytes: int = DEFAULT_EDIT_BYTES,
        protected_paths: ProtectedPaths = ProtectedPaths(),  # noqa: B008 - frozen value
        journal: Journal | None = None,
    ) -> None:
        object.__setattr__(self, "root", _root(root))
        object.__setattr__(self, "max_read_bytes", _bytes_bound(max_read_bytes, "max_read_bytes"))
        object.__setattr__(
            self, "max_write_bytes", _bytes_bound(max_write_bytes, "max_write_bytes")
        )
        object.__setattr__(
            self, "max_output_bytes", _bytes_bound(max_output_bytes, "max_output_bytes")
        )
        object.__setattr__(self, "command_timeout", _timeout(command_timeout))
        object.__setattr__(self, "environment_allowlist", _allowlist(environment_allowlist))
        object.__setattr__(self, "max_edit_bytes", _edit_bound(max_edit_bytes))
        if not isinstance(protected_paths, ProtectedPaths):
            raise ValueError("protected_paths must be a ProtectedPaths")
        object.__setattr__(self, "protected_paths", protected_paths)
        if journal is not None and not isinstance(journal, Journal):
            raise ValueError("journal must be a Journal")
        object.__setattr__(self, "journal", journal)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> Config:
        """Build a ``Config`` whose root is ``SPICE_AGENT_WORKTREE`` (``os.environ`` by default;
        unset or empty is a ``ValueError``: ``root_in``).

        Keyword ``overrides`` set the other fields.
        """
        root = cls.root_in(os.environ if environ is None else environ)
        if root is None:
            raise ValueError(f"{ROOT_ENVIRONMENT_VARIABLE} is not set")
        return cls(root, **overrides)  # type: ignore[arg-type]

    @staticmethod
    def root_in(environ: Mapping[str, str]) -> str | None:
        """The worktree root ``SPICE_AGENT_WORKTREE`` names in ``environ``; ``None`` when it
        is unset or empty (an empty value counts as unset, as a shell's ``VAR=`` means).

        The one rule for the variable: ``from_environment`` and the application's
        composition root (which then takes the current directory) both follow it.
        """
        return environ.get(ROOT_ENVIRONMENT_VARIABLE) or None
