"""A call's stage removed after its answer, not before it (issue 44).

Once a call's commit is done, its stage holds nothing the worktree needs: the files it
applied were renamed out of the upper layer, and what is left (the upper's directories,
the overlay's work directory, what the policy refused or a conflict left) is only
removed. Removing it took about 20 ms of a call that rewrote 1,000 files (100
directories left), all of it on the answer's path. ``Removals`` does it on one thread
of the server's, in order, after the answer:

- at most ``MAXIMUM_WAITING`` stages wait; past that the caller removes its stage itself
  (the answer waits, memory stays bounded);
- the thread is a daemon (the interpreter's exit never waits on it) and the server's exit
  gives it ``EXIT_WAIT_SECONDS`` to finish (``atexit``, which ``exit_promptly`` runs too);
  after ``close`` every stage is removed by its caller;
- a stage still there when the server is gone (killed, or the wait ran out) is one of a
  server that is gone: the next start's ``remove_left`` removes it.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time
from typing import Final, final

from ._stage import Stage

__all__ = ["EXIT_WAIT_SECONDS", "MAXIMUM_WAITING", "REMOVALS", "Removals"]

MAXIMUM_WAITING: Final = 64
"""Stages waiting for the remover at most; past it a stage is removed by its caller."""
EXIT_WAIT_SECONDS: Final = 10.0
"""How long the server's exit waits for the stages still waiting to be removed."""


@final
class Removals:
    """Stages removed on one thread of their own, after their calls' answers."""

    def __init__(self, limit: int = MAXIMUM_WAITING) -> None:
        self._limit = limit
        self._waiting: collections.deque[Stage] = collections.deque()
        self._busy = 0
        """Stages queued or being removed (``settle`` waits for none)."""
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def later(self, stage: Stage) -> bool:
        """Remove ``stage`` after this returns (``True``), or now when ``MAXIMUM_WAITING``
        stages already wait or the remover is closed (``False``)."""
        with self._changed:
            queued = not self._closed and len(self._waiting) < self._limit
            if queued:
                self._start()
                self._waiting.append(stage)
                self._busy += 1
                self._changed.notify_all()
        if not queued:
            stage.remove()
        return queued

    def settle(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until no stage waits or is being removed;
        whether none does."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def close(self, timeout: float = EXIT_WAIT_SECONDS) -> bool:
        """Stop taking stages, and wait (at most ``timeout`` seconds) for those waiting to
        be removed; whether every one was."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        return self.settle(timeout)

    def _start(self) -> None:
        """Start the remover (with the condition held), once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="spice-stage-removal", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting:
                    if self._closed:
                        return
                    self._changed.wait()
                stage = self._waiting.popleft()
            try:
                stage.remove()
            except OSError:
                pass  # left for the next start's ``remove_left``
            finally:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()


REMOVALS: Final = Removals()
"""The server's remover: every staged call's commit hands its stage to it."""
