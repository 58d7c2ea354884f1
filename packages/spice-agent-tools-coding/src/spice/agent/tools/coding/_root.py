"""Root-confined file access (interface; implemented by the read issue).

Every name is opened relative to a held directory file descriptor, never by a
resolved path string. See the module docstring of the implementation for the
whole confinement story.
"""

from __future__ import annotations

from typing import final


@final
class PathError(Exception):
    """A model-visible path failure.

    ``code`` is one of ``invalid_arguments``, ``root_unavailable``, ``not_found``,
    ``path_unavailable``, ``path_escape``, ``not_regular``; ``str(error)`` is a fixed,
    model-safe text with no path of the machine and no OS error text.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def clean_path(raw: str) -> str:
    """Lexically check and clean a relative path; return the ``/``-separated display path.

    Raises ``PathError("invalid_arguments")`` for an empty path, NUL, surrounding
    whitespace, an absolute path, or a path whose cleaned form leaves the root.
    The root itself cleans to ``"."``.
    """
    raise NotImplementedError


def split_parent(cleaned: str) -> tuple[str, str]:
    """Split a cleaned path into (parent, leaf); the parent of a top-level name is ``"."``."""
    raise NotImplementedError


def open_root(root: str) -> int:
    """Open the configured root directory; ``PathError("root_unavailable")`` when it cannot be."""
    raise NotImplementedError


def open_beneath(root_fd: int, cleaned: str, flags: int, *, follow_final: bool) -> int:
    """Open ``cleaned`` beneath ``root_fd`` with ``flags`` (O_CLOEXEC is always added).

    Symlinks whose resolution stays inside the root are followed for intermediate
    components, and for the final one when ``follow_final``; otherwise a final symlink
    fails (``not_regular``). Escapes and absolute link targets are ``path_escape``;
    a missing component is ``not_found``; other failures ``path_unavailable``.
    """
    raise NotImplementedError


def open_directory(
    root_fd: int, cleaned: str, *, follow_symlinks: bool, create_missing: bool = False
) -> int:
    """Open the directory ``cleaned`` beneath ``root_fd``.

    ``follow_symlinks=False``: any symlink component is ``path_escape`` (shell workdir).
    ``create_missing=True``: missing components are created as real directories in a
    directory already held (``0o777 & ~umask``), never at the target of a symlink.
    A component that is not a directory is ``not_regular`` (or ``path_unavailable``).
    """
    raise NotImplementedError
