"""The ``read`` tool: one byte page of a regular file inside the worktree.

Confinement is ``_root``'s job (see its module docstring); this module decodes the
arguments, does the file work, and shapes the page:
UTF-8 text when the bytes are valid UTF-8 (a page the limit would cut inside a
character ends at the previous character boundary), base64 otherwise, when the page
from offset 0 starts with an image's signature (``mime_type``), or when its JSON-escaped
text would break the answer bound (``_results.answer_bytes``; the seed's rule). ``os.pread``
reads only the page, so the cost never depends on the file's size.

Where the file work runs: a read that can be answered from the kernel's caches on a
local file system, touching at most ``INLINE_READ_BYTES``, runs on the event loop
(``_cached.open_cached_regular`` opens without waiting, ``RWF_NOWAIT`` reads without
waiting); any step that would wait sends the whole call to a worker thread, which
starts again from the root. A read therefore does not block the loop on I/O, and the
thread hop (most of a small read's cost when calls are in flight) is paid only where it
buys something. One wait no flag can refuse is an open that a fanotify permission
listener (an on-access scanner) holds: the first such open is paid on the loop, and the
route then stays off for a while (``_cached.SLOW_OPEN_PAUSE_SECONDS``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from spice.agent.tool import (
    Call,
    Capability,
    Definition,
    Effect,
    ExecutionError,
    ExecutionState,
    Interruption,
    ReplaySafety,
    Reporter,
    Result,
    RetryDisposition,
    Tool,
)

from ._arguments import ArgumentError, decode_object, take_integer, take_string
from ._cached import open_cached_regular
from ._config import Config
from ._images import image_type
from ._platform import clean_path, open_regular, pread, root_supported
from ._progress import attach, report_progress
from ._results import ANSWER_COPIES, ANSWER_ROOM, answer_bytes, answer_fits, encode, failure
from ._root import PathError
from .settling import deliver_cancellation, settle

NAME: Final = "read"
PATH_DESCRIPTION: Final = (
    "The file: a path relative to the worktree root ('/'-separated), or an absolute path "
    "beneath the root; not the root itself. Symbolic links are followed only while they "
    "stay inside the root."
)


def read_description(config: Config) -> str:
    """The tool's description, with the configured page size in numbers."""
    page = config.max_read_bytes
    return (
        "Read one page of a file inside the worktree. `path` is relative to the worktree "
        "root or absolute beneath it; symbolic links are followed only while they stay "
        f"inside it. Returns up to `limit` bytes (default and maximum {page}) starting at "
        "byte `offset` (default 0): UTF-8 text, or base64 when the bytes are not valid "
        "UTF-8, are an image (`mime_type` names a PNG, JPEG, GIF or WebP file read from "
        "offset 0), or would pass 1 MiB once escaped as JSON (e.g. NUL bytes). When "
        "`truncated` is true, call again with `offset` = `next_offset`. A complete page "
        "(the whole file from offset 0) includes "
        f"its `sha256`. Every page of a file of at most {config.max_edit_bytes} bytes "
        "(max_edit_bytes, the replace tool's edit bound) includes `file_sha256`, the "
        "digest of the whole file (equal to `sha256` for a complete page): pass either to "
        "`replace` as `expected_sha256`, so a file read in several pages can be edited "
        "too. To get only the digest, read with `limit` 1: the answer is small and still "
        "has `file_sha256`. After a successful `replace`, its `sha256` is the next "
        "`expected_sha256` (no need to read again). Larger files have no digest. The "
        "digests come before `content` in the answer. Optional arguments may be null, "
        "which means the default."
    )


PROGRESS: Final = "reading a file"
LOOKAHEAD_BYTES: Final = 3
"""Bytes read past the page to tell a cut character from invalid UTF-8 (a UTF-8 character
has at most 4 bytes)."""
INLINE_READ_BYTES: Final = 65_536
"""Most bytes a call may read on the event loop (the page, or the whole file when it is
hashed for ``file_sha256``); a larger read runs in a worker thread, where hashing and
copying overlap the loop's other work."""
SETTLE_SECONDS: Final = 5.0
"""How long a cancelled call waits for its worker thread to close its descriptors."""
READ_FAILED: Final = "the file could not be read"
UNEXPECTED: Final = "the read failed unexpectedly; nothing was changed"
_STATE: Final = ExecutionState.DEFINITIVE
_RETRY: Final = RetryDisposition.ALLOWED
_PROPERTIES: Final = frozenset({"path", "offset", "limit"})
_RWF_NOWAIT: Final = getattr(os, "RWF_NOWAIT", 0)


def _schema(max_read_bytes: int) -> dict[str, object]:
    """The input schema: optional properties are nullable (null means absent).

    Defaults and bounds are stated in the descriptions, not as ``default`` or
    ``minLength`` keywords, which clients that make schemas strict refuse; the decoder
    enforces every rule itself.
    """
    return {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": PATH_DESCRIPTION},
            "offset": {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": (
                    "Byte offset of the page, at least 0; default 0. The file's size gives "
                    "an empty page; beyond it is invalid."
                ),
            },
            "limit": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": max_read_bytes,
                "description": (
                    f"Most bytes to return, 1 to {max_read_bytes}; default {max_read_bytes}."
                ),
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }


@dataclass(frozen=True, slots=True)
class _Request:
    path: str
    offset: int
    limit: int
    hash_limit: int
    """Files of at most this many bytes (``max_edit_bytes``) get ``file_sha256``."""


@dataclass(frozen=True, slots=True)
class _Failure:
    code: str
    message: str


def new_read(config: Config) -> Tool:
    """Build the ``read`` tool for ``config``; performs no filesystem action.

    >>> from spice.agent.tools.coding import Config
    >>> new_read(Config("/work/tree")).definition.name
    'read'
    """
    return _Read(config)


@final
class _Read:
    """The ``read`` tool (``read_only`` / ``safe`` / ``filesystem.read``)."""

    __slots__ = ("_config", "_definition")

    def __init__(self, config: Config) -> None:
        self._config = config
        self._definition = Definition(
            NAME,
            read_description(config),
            _schema(config.max_read_bytes),
            Effect.READ_ONLY,
            ReplaySafety.SAFE,
            [Capability.FILESYSTEM_READ],
        )

    @property
    def definition(self) -> Definition:
        return self._definition

    def __repr__(self) -> str:
        return "<read tool>"

    async def execute(self, call: Call, reporter: Reporter | None = None) -> Result:
        await report_progress(call, reporter, PROGRESS, _RETRY)
        if call.name != NAME:
            return failure(
                call, "invalid_arguments", "this call names another tool", _STATE, _RETRY
            )
        if not root_supported():
            return failure(
                call,
                "unsupported_platform",
                "read on Windows needs the Windows API, which this system does not have",
                _STATE,
                _RETRY,
            )
        try:
            request = _decode(call.arguments, self._config)
        except (ArgumentError, PathError) as error:
            return failure(call, "invalid_arguments", str(error), _STATE, _RETRY)
        try:
            await deliver_cancellation()  # no worker after an observed cancellation
        except asyncio.CancelledError as cancelled:
            attach(cancelled, Interruption(call.id, _STATE, _RETRY))
            raise
        try:
            outcome = _read_inline(self._config.root, request, call.id)
        except Exception:  # noqa: BLE001 - a bug or host fault is a host failure
            raise ExecutionError(call.id, _STATE, _RETRY, UNEXPECTED) from None
        if outcome is not None:
            return _answer(call, outcome)
        # The executor's own future (not a task around ``to_thread``): one hop, no extra task.
        worker = asyncio.get_running_loop().run_in_executor(
            None, _read_page, self._config.root, request, call.id
        )
        try:
            outcome = await asyncio.shield(worker)
        except asyncio.CancelledError as cancelled:
            attach(cancelled, Interruption(call.id, _STATE, _RETRY))
            await _settle(worker)
            raise
        except Exception:  # noqa: BLE001 - a bug or host fault in the worker is a host failure
            raise ExecutionError(call.id, _STATE, _RETRY, UNEXPECTED) from None
        return _answer(call, outcome)


def _answer(call: Call, outcome: Result | _Failure) -> Result:
    if isinstance(outcome, _Failure):
        return failure(call, outcome.code, outcome.message, _STATE, _RETRY)
    return outcome


async def _settle(worker: asyncio.Future[Result | _Failure]) -> None:
    """Wait (shielded, bounded) for a cancelled call's worker to finish closing its files."""
    # Repeated cancellations are held back (``settling``); the caller re-raises the first.
    worker.add_done_callback(_consume)
    await settle(worker, SETTLE_SECONDS)


def _consume(worker: asyncio.Future[Result | _Failure]) -> None:
    """Retrieve a finished worker's exception so nothing logs it as unretrieved."""
    if not worker.cancelled():
        worker.exception()


def _decode(arguments: str, config: Config) -> _Request:
    max_read_bytes = config.max_read_bytes
    values = decode_object(arguments, _PROPERTIES)
    raw = take_string(values, "path", required=True)
    offset = take_integer(values, "offset")
    limit = take_integer(values, "limit")
    if offset is None:
        offset = 0
    elif offset < 0:
        raise ArgumentError("offset must be at least 0")
    if limit is None:
        limit = max_read_bytes
    elif limit < 1:
        raise ArgumentError("limit must be at least 1")
    elif limit > max_read_bytes:
        raise ArgumentError(f"limit must be at most {max_read_bytes} (max_read_bytes)")
    assert raw is not None  # noqa: S101 - take_string(required=True) never answers None
    path = clean_path(raw, root=config.root, names_root=False)
    return _Request(path, offset, limit, config.max_edit_bytes)


class _WouldWait(Exception):
    """A step of the event-loop route would wait (data not in the page cache), or cannot tell."""


def _read_inline(root: str, request: _Request, call_id: str) -> Result | _Failure | None:
    """The call's answer when it can be had without waiting, else ``None`` (use a worker).

    Closes the descriptor it opens. ``None`` also for every failure to open or read:
    the worker's route starts again and gives the authoritative answer.
    """
    # The size is decided from the look, before the open: a file too large for the loop
    # is not opened twice (an open may wait on an on-access scanner).
    fd = open_cached_regular(
        root, request.path, admit=lambda size: _bytes_to_read(size, request) <= INLINE_READ_BYTES
    )
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if _bytes_to_read(info.st_size, request) > INLINE_READ_BYTES:
            return None
        return _page(fd, info, request, call_id, _pread_cached)
    except (_WouldWait, OSError):
        return None
    finally:
        os.close(fd)


def _bytes_to_read(size: int, request: _Request) -> int:
    """What ``_page`` reads of a file of ``size`` bytes: all of it when it is hashed, else the
    page and its lookahead."""
    if size <= request.hash_limit:
        return size
    return min(request.limit, max(size - request.offset, 0)) + LOOKAHEAD_BYTES


def _read_page(root: str, request: _Request, call_id: str) -> Result | _Failure:
    """The blocking route of a call, run in a worker thread; closes every descriptor it opens.

    A page's answer is built here, encoded once (see ``_shape``).
    """
    try:
        fd = open_regular(root, request.path)
    except PathError as error:
        return _Failure(error.code, error.message)
    try:
        return _page(fd, os.fstat(fd), request, call_id, _pread)
    except OSError:
        return _Failure("read_failed", READ_FAILED)
    finally:
        os.close(fd)


PREAD_CHUNK_BYTES: Final = 256 * 1024
"""The most one ``pread`` asks of the kernel; a longer read is several."""

_Reader = Callable[[int, int, int], bytes]
"""``(fd, count, offset) -> bytes``: ``count`` bytes at ``offset``, fewer only at the end."""


def _page(
    fd: int, info: os.stat_result, request: _Request, call_id: str, pread: _Reader
) -> Result | _Failure:
    if not stat.S_ISREG(info.st_mode):  # open_beneath(regular=True) already made sure
        return _Failure("not_regular", "the path is not a regular file")
    size = info.st_size
    whole = _whole_file(fd, size, request.hash_limit, pread)
    if whole is not None:
        size = len(whole)  # the page comes from the same bytes the digest covers
    offset = request.offset
    if offset > size:
        return _Failure("invalid_arguments", "offset is past the end of the file")
    want = min(request.limit, size - offset)
    extra = min(LOOKAHEAD_BYTES, size - offset - want)
    if whole is None:
        data, digest = pread(fd, want + extra, offset), None
    else:
        data, digest = whole[offset : offset + want + extra], hashlib.sha256(whole).hexdigest()
    page, lookahead = data[:want], data[want:]
    return _shape(call_id, request.path, offset, size, page, lookahead, digest)


def _whole_file(fd: int, size: int, limit: int, pread: _Reader) -> bytes | None:
    """All of a file of at most ``limit`` bytes (through ``fd``), else ``None``.

    At most ``limit + 1`` bytes are read, so a file that grew past the bound meanwhile
    costs no more than the bound and gets no ``file_sha256``.
    """
    if size > limit:
        return None
    # What fstat saw plus one byte first: a small file costs a buffer of its own size, not
    # one of the bound's (a 256 KiB buffer for a 4 KiB file costs more than the read).
    # A file that grew meanwhile is read again, up to the bound.
    data = pread(fd, size + 1, 0)
    if len(data) > size:
        data = pread(fd, limit + 1, 0)
    return data if len(data) <= limit else None


def _pread(fd: int, count: int, offset: int, once: _Reader = pread) -> bytes:
    """Read ``count`` bytes at ``offset`` (fewer only at end of file); the platform's
    positional read by default (``_platform.pread``).

    At most ``PREAD_CHUNK_BYTES`` per system call: a file whose size the kernel does not
    know (procfs says 0) is read up to the hash bound, and procfs refuses one read of
    4 MiB with ``ENOMEM``; small reads also keep the buffer of a short file small.
    """
    chunks: list[bytes] = []
    while count > 0:
        chunk = once(fd, min(count, PREAD_CHUNK_BYTES), offset)
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _pread_cached(fd: int, count: int, offset: int) -> bytes:
    """``_pread`` from the page cache only: ``_WouldWait`` where the data would need I/O."""
    return _pread(fd, count, offset, _pread_nowait)


def _pread_nowait(fd: int, count: int, offset: int) -> bytes:
    """One ``preadv2(RWF_NOWAIT)``: the bytes the page cache holds there (``b""`` at the end).

    ``EAGAIN`` (not cached) and ``EOPNOTSUPP`` (a file system that cannot tell) are
    ``_WouldWait``, like any other refusal: the worker's route decides.
    """
    buffer = bytearray(count)
    try:
        got = os.preadv(fd, (buffer,), offset, _RWF_NOWAIT)
    except OSError:
        raise _WouldWait from None
    del buffer[got:]
    return bytes(buffer)


def _text_prefix(page: bytes, lookahead: bytes) -> bytes | None:
    """The longest prefix of ``page`` that is UTF-8 text ending on a character boundary.

    ``page`` itself when it is valid; a shorter, non-empty prefix when the page ends inside
    a character the following bytes complete; ``None`` when the bytes are not text.
    """
    try:
        page.decode("utf-8")
    except UnicodeDecodeError as error:
        cut = error.start
        if cut == 0 or not lookahead or len(page) - cut >= 4:
            return None
        try:
            page[:cut].decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not _completes_a_character(page[cut:] + lookahead):
            return None
        return page[:cut]
    return page


def _completes_a_character(data: bytes) -> bool:
    """Whether ``data`` starts with one whole, valid UTF-8 character of 2..4 bytes."""
    for length in (2, 3, 4):
        try:
            data[:length].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def _shape(
    call_id: str,
    path: str,
    offset: int,
    size: int,
    page: bytes,
    lookahead: bytes,
    file_sha256: str | None,
) -> Result:
    """The page's answer: UTF-8 text when the page is text, no image, and its JSON-escaped
    text keeps the answer within the bound; else base64 (the seed's rule, contract 12.4).

    A page of NUL bytes, quotes or control bytes can escape to six times its size: such a
    page comes whole as base64 (4 characters for 3 bytes, nothing to escape) rather than
    shortened. Only a base64 answer still past the bound (a page larger than the product
    allows) keeps its longest prefix that fits, on a three-byte boundary, and says so
    with ``truncated`` and ``next_offset``. The answer's one encoding is both the check
    and the answer (``from_content`` neither encodes again nor parses it back).
    """
    mime_type = image_type(page) if offset == 0 else None
    text = None if mime_type is not None else _text_prefix(page, lookahead)
    if text is not None:
        fitting = _fitting(call_id, _content(path, offset, size, text, "utf-8", file_sha256, None))
        if fitting is not None:
            return fitting
    whole = _content(path, offset, size, page, "base64", file_sha256, mime_type)
    fitting = _fitting(call_id, whole)
    if fitting is not None:
        return fitting
    # The other fields of a shortened page take at most what they take here: its numbers
    # are no longer than the whole page's, and it has no ``sha256``. It is shorter than the
    # page by at least one byte (the whole page, with its ``sha256``, did not fit).
    marked = _content(path, offset, size + 1, page, "base64", file_sha256, mime_type, body="")
    room = ANSWER_ROOM - answer_bytes(encode(marked))
    # In base64, 3 bytes are 4 characters, nothing to escape.
    triples = page[: min(3 * (room // (4 * ANSWER_COPIES)), len(page) - 1)]
    shortened = _content(path, offset, size, triples, "base64", file_sha256, mime_type)
    return Result.from_content(call_id, shortened)


def _fitting(call_id: str, content: dict[str, object]) -> Result | None:
    """The answer ``content`` when it is within the answer bound, else ``None``."""
    try:
        result = Result.from_content(call_id, content)
    except ValueError:  # past the payload bound (escaping), so past the answer bound too
        return None
    return result if answer_fits(result.content) else None


def _content(
    path: str,
    offset: int,
    size: int,
    data: bytes,
    encoding: str,
    file_sha256: str | None,
    mime_type: str | None,
    body: str | None = None,
) -> dict[str, object]:
    """The answer for the page ``data`` (``body``: its text as written; by default ``data``
    in ``encoding``)."""
    if body is None:
        body = data.decode() if encoding == "utf-8" else base64.b64encode(data).decode("ascii")
    end = offset + len(data)
    truncated = end < size
    content: dict[str, object] = {
        "ok": True,
        "path": path,
        "offset": offset,
        "bytes": len(data),
        "total_bytes": size,
    }
    if truncated:
        content["next_offset"] = end
    content["truncated"] = truncated
    content["encoding"] = encoding
    if mime_type is not None:
        content["mime_type"] = mime_type
    # The digests before the page (contract 10.2): a client that shows only the start of
    # a long answer still shows them.
    if offset == 0 and not truncated:
        content["sha256"] = file_sha256 or hashlib.sha256(data).hexdigest()
    if file_sha256 is not None:
        content["file_sha256"] = file_sha256
    content["content"] = body
    return content
