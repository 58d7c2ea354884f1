"""The worktree as a Windows ``replace`` would leave it: what the policy's ``judge`` reads.

The Windows counterpart of ``_replace_judge.DiskAfter``: every name is opened beneath the
held root handle one component at a time, never through a reparse point (``_root``), so
the judge sees what git would see there and nothing a link points at. A reparse point is
reported as a ``symlink`` (git's ``HEAD`` may be one), its target never read.
"""

from __future__ import annotations

from typing import Final, final

from .._changes import Kind
from .._root import PathError
from . import _api as w
from . import _root as rw

__all__ = ["WindowsAfter"]

_LOOK_ACCESS: Final = w.FILE_READ_ATTRIBUTES | w.SYNCHRONIZE
_CHUNK_BYTES: Final = 65_536


@final
class WindowsAfter:
    """The worktree beneath the root handle ``root`` with the file ``path`` holding ``data``."""

    def __init__(self, root: int, path: str, data: bytes) -> None:
        self._root = root
        self._path = path
        self._data = data

    def kind(self, path: str) -> Kind | None:
        if path == self._path:
            return "file"
        handle = self._open(path, _LOOK_ACCESS, 0)
        if handle is None:
            return None
        try:
            found = rw.kind(handle)
        except OSError:
            return None
        finally:
            rw.close(handle)
        if found.reparse_point:
            return "symlink"
        return "directory" if found.directory else "file"

    def read(self, path: str, limit: int) -> bytes | None:
        if path == self._path:
            return self._data[:limit]
        handle = self._open(path, rw.READ_ACCESS, w.FILE_NON_DIRECTORY_FILE)
        if handle is None:
            return None
        try:
            found = rw.kind(handle)
            if found.reparse_point or found.directory:
                return None
            chunks: list[bytes] = []
            size = 0
            while size < limit and (
                chunk := rw.read_handle(handle, min(_CHUNK_BYTES, limit - size), size)
            ):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            rw.close(handle)

    def _open(self, path: str, access: int, options: int) -> int | None:
        """``path``'s own handle (its last component not followed), or ``None``."""
        parent, leaf = rw.split_parent(path)
        try:
            directory = self._root if parent == "." else rw.open_directory(self._root, parent)
        except PathError:
            return None
        try:
            status, handle = rw.nt_open(directory, leaf, access, w.FILE_OPEN, options)
        except PathError:
            return None
        finally:
            if directory != self._root:
                rw.close(directory)
        return handle if status == w.STATUS_SUCCESS else None
