"""The namespace addressing of one call: bwrap's info document, the supervisor's pidfd, the
lifeline (contract 11.4, review C4/C5).

With namespaces, bwrap's monitor leads the call's process group and the supervisor runs
inside as the PID namespace's init; the server signals the supervisor itself, by a pidfd
opened from the pid bwrap writes on its ``--info-fd``.

- ``InfoParser`` is sans-IO (h11's shape): ``feed(bytes)`` what was read, ``eof()`` when the
  pipe closed (bwrap closes it after the document's ``}``); it parses once, at the end,
  and keeps the answer. bwrap writes the document in several ``write``s, so a read at
  readability can see a prefix: the parser never parses a prefix (round 3 read once and
  lost the rest).
- ``Namespace`` owns the info descriptor (read on the loop until end of file), the pidfd
  (opened while bwrap's monitor, unreaped, is still the supervisor's parent, so it names
  the supervisor for good) and the lifeline (the read end of bwrap's status pipe, kept
  open until the join so the monitor's last write never meets a closed pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Callable
from typing import Final, final

from ._bwrap import open_child

__all__ = ["INFO_BOUND_BYTES", "InfoParser", "Namespace"]

INFO_BOUND_BYTES: Final = 4096
"""The most of bwrap's ``--info-fd`` document kept (it is one short JSON object)."""

_READ_BYTES: Final = 1024


@final
class InfoParser:
    """bwrap's ``--info-fd`` document, fed until end of file; no I/O of its own.

    >>> parser = InfoParser()
    >>> parser.feed(b'{"child-pid": 4')
    >>> parser.feed(b'2, "net-namespace": 1}')
    >>> parser.eof()
    42
    """

    __slots__ = ("_buffer", "_ended", "_over", "_pid")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._ended = False
        self._over = False
        self._pid: int | None = None

    @property
    def ended(self) -> bool:
        """Whether ``eof`` was called (the answer is final)."""
        return self._ended

    @property
    def pid(self) -> int | None:
        """The supervisor's pid once the whole document was read, else ``None``."""
        return self._pid

    def feed(self, data: bytes) -> None:
        """Take bytes read from the pipe (after ``eof``: ignored)."""
        if self._ended or self._over:
            return
        if len(self._buffer) + len(data) > INFO_BOUND_BYTES:
            self._over = True  # not bwrap's document: no answer
            self._buffer.clear()
            return
        self._buffer += data

    def eof(self) -> int | None:
        """The pipe closed: parse the document once; the supervisor's pid or ``None``."""
        if not self._ended:
            self._ended = True
            if not self._over:
                self._pid = _child_pid(bytes(self._buffer))
            self._buffer.clear()
        return self._pid


def _child_pid(document: bytes) -> int | None:
    try:
        pid = json.loads(document)["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


@final
class Namespace:
    """One call's namespace addressing: ``listen``, ``until_known``, ``signal``, ``close``.

    ``monitor`` answers bwrap's monitor's pid while it is unreaped and running (else
    ``None``): the pidfd is opened only then, and only for its child.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        info: int,
        lifeline: int | None,
        monitor: Callable[[], int | None],
    ) -> None:
        self._loop = loop
        self._info: int | None = info
        self._lifeline = lifeline
        self._monitor = monitor
        self._parser = InfoParser()
        self._pidfd: int | None = None
        self._reading = False
        self._known = asyncio.Event()

    def listen(self) -> None:
        """Read the info document as bwrap writes it (on the loop, until end of file)."""
        if self._info is not None and not self._reading:
            os.set_blocking(self._info, False)
            self._loop.add_reader(self._info, self._read)
            self._reading = True

    def _read(self) -> None:
        while self._info is not None:
            try:
                data = os.read(self._info, _READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._parser.eof()
                self._close_info()
                return
            self._parser.feed(data)

    def _close_info(self) -> None:
        if self._info is None:
            return
        if self._reading:
            self._loop.remove_reader(self._info)
            self._reading = False
        with contextlib.suppress(OSError):
            os.close(self._info)
        self._info = None
        self._known.set()

    @property
    def pid(self) -> int | None:
        """The supervisor's pid, once bwrap's document is whole."""
        return self._parser.pid

    async def until_known(self, bound: float) -> bool:
        """Wait (at most ``bound``) for the whole document; whether it named the supervisor."""
        self._read()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self._known.wait()
        return self._parser.pid is not None

    def signal(self, signum: signal.Signals) -> bool:
        """Signal the supervisor inside the namespaces; whether it could be named."""
        if self._pidfd is None:
            self._read()
            pid, monitor = self._parser.pid, self._monitor()
            if pid is None or monitor is None:
                return False
            self._pidfd = open_child(pid, monitor)
            if self._pidfd is None:
                return False
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._pidfd, signum)
        return True

    def close(self) -> None:
        """Let go of the info pipe, the pidfd and the lifeline (at the join)."""
        self._close_info()
        for fd in (self._pidfd, self._lifeline):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._pidfd = self._lifeline = None
