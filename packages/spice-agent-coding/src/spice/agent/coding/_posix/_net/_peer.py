"""Who connected to a call's proxy: only its own call's processes are served (contract 12.1).

A call's proxy listens on a UNIX socket in the host's ``/tmp`` (``_posix._net._proxy``). A
command of another server on the fallback path (Landlock and seccomp, no namespaces, the
same user) can connect to any such socket (R5-10): the file's mode holds only other
users back. So the proxy asks the kernel who connected and serves only a process of its
own call's tree:

- ``SO_PEERCRED`` names the process that called ``connect`` (the kernel sets it then; a
  process cannot name another one, and it is translated into the server's PID
  namespace, so a process inside the call's namespace is named by its host pid);
- that pid must descend from the call's leader (``bwrap``'s monitor, or the supervisor
  without namespaces), walking ``/proc/PID/stat``'s parent field at most
  ``MAXIMUM_PEER_DEPTH`` steps. The parent link is the kernel's, and no process can
  leave the tree it was forked in: an orphan is re-parented to the call's supervisor
  (a child subreaper; the init of the call's PID namespace) and stays in it. The
  leader's own pid cannot be recycled while the call runs (the server reaps it only at
  the join, after the proxy is closed);
- where the kernel gives a pidfd of the peer (``SO_PEERPIDFD``, Linux 6.5), the peer
  must still be alive once its tree was read: a pid that died and was reused by
  another process while the proxy read it is refused (the walk read someone else).

Anything else (not Linux, an unreadable ``/proc``) is refused: the check fails closed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
from typing import Final

__all__ = ["MAXIMUM_PEER_DEPTH", "from_tree", "peer_pid"]

MAXIMUM_PEER_DEPTH: Final = 128
"""At most this many parent links are walked from a peer to the call's leader (a process
nested deeper in its call is refused)."""

_SO_PEERPIDFD: Final = getattr(socket, "SO_PEERPIDFD", 77)
"""Linux's ``SO_PEERPIDFD`` (6.5 and later); Python names it from 3.12 on some hosts."""

_CREDENTIALS: Final = struct.Struct("3i")


def peer_pid(connection: socket.socket) -> int | None:
    """The pid of the process that connected ``connection`` (``None`` where unknown)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        raw = connection.getsockopt(socket.SOL_SOCKET, option, _CREDENTIALS.size)
    except OSError:
        return None
    pid, _, _ = _CREDENTIALS.unpack(raw)
    return pid if pid > 0 else None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def descends_from(pid: int, leader: int) -> bool:
    """Whether ``pid`` is ``leader`` or below it, within ``MAXIMUM_PEER_DEPTH`` links."""
    current: int | None = pid
    for _ in range(MAXIMUM_PEER_DEPTH + 1):
        if current is None or current <= 1:
            return False
        if current == leader:
            return True
        current = _parent(current)
    return False


def from_tree(connection: socket.socket, leader: int) -> bool:
    """Whether ``connection`` was made by a process of the tree led by ``leader`` (and,
    where the kernel names the peer by a pidfd, one still alive once read)."""
    pid = peer_pid(connection)
    if pid is None:
        return False
    pidfd = None
    with contextlib.suppress(OSError):
        pidfd = connection.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
    try:
        if not descends_from(pid, leader):
            return False
        if pidfd is not None and hasattr(signal, "pidfd_send_signal"):
            try:
                signal.pidfd_send_signal(pidfd, 0)
            except ProcessLookupError:
                return False  # it died: the pid read may be another process's
            except OSError:
                pass  # not allowed to signal it (it exists): the walk stands
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)
