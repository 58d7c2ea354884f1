"""A stage for the rename tests: an overlay in a user namespace, a command under the stage's
seccomp filter, and this process serving its notifications as the supervisor does.

Run as ``unshare -rm python stage_renames_support.py [options] ROOT -- COMMAND...`` where
``ROOT`` holds ``lower/`` (and gets ``upper/``, ``work/``, ``merged/``). The command runs
in ``merged/`` with no capability; this process exits with its status (128+N for a signal).
Options: ``--tmpfs-upper SIZE`` (the upper and work on a tmpfs of that size: a full disk),
``--landlock DIR`` (the command's and the helpers' only writable place), ``--other-mount``
(a tmpfs mounted at ``merged/other``: a second mount for cross-mount renames).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spice.agent.coding._posix._supervisor import _landlock as landlock
    from spice.agent.coding._posix._supervisor import _renames as renames
    from spice.agent.coding._posix._supervisor import _seccomp as seccomp
else:  # by name, as the supervisor loads them: any interpreter, no package imported
    sys.path.insert(
        0,
        os.path.join(
            os.path.dirname(os.path.abspath(__file__)),
            "..",
            "src",
            "spice",
            "agent",
            "coding",
            "_posix",
            "_supervisor",
        ),
    )
    import _landlock as landlock
    import _renames as renames
    import _seccomp as seccomp


def _mount(root: str, tmpfs_upper: str | None, other: bool) -> str:
    import subprocess  # noqa: PLC0415

    layers = os.path.join(root, "layers")
    os.makedirs(layers, exist_ok=True)
    if tmpfs_upper:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={tmpfs_upper}", "tmpfs", layers], check=True
        )
    for name in ("upper", "work"):
        os.makedirs(os.path.join(layers, name), exist_ok=True)
    merged = os.path.join(root, "merged")
    os.makedirs(merged, exist_ok=True)
    options = f"lowerdir={root}/lower,upperdir={layers}/upper,workdir={layers}/work,userxattr"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, merged], check=True)
    if other:
        os.makedirs(os.path.join(merged, "other"), exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", os.path.join(merged, "other")], check=True)
    return merged


DEATH_BOUND_SECONDS = 30.0
"""How long the seam waits for the killed command to be dead (a hang guard, not a timing)."""


def _dead(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie or gone): its notification is no longer valid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return status.read().rpartition(b")")[2].split()[0] in {b"Z", b"X"}
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def _kill_while_copying(command: int) -> None:
    """The seam: the helper's first file copy kills the command first (a stop mid-copy),
    and goes on only once the command is dead: SIGKILL is delivered asynchronously, and a
    copy that finished before the kernel ended the waiting command would rightly be made
    visible (the rename happened before the kill), which is another case."""
    copy = renames.copy_file

    def killing(source: int, target: int, name: bytes, found: os.stat_result) -> None:
        os.kill(command, signal.SIGKILL)
        deadline = time.monotonic() + DEATH_BOUND_SECONDS
        while not _dead(command) and time.monotonic() < deadline:
            time.sleep(0.001)
        copy(source, target, name, found)

    renames.copy_file = killing


def _fail_removal() -> None:
    """The seam: the source's removal takes ``m.py``, then fails (``EIO``), once."""
    remove = renames._remove_tree
    first = [True]

    def failing(parent: int, name: bytes) -> None:
        if first.pop() if first else False:
            here = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            try:
                os.unlink("m.py", dir_fd=here)
            finally:
                os.close(here)
            raise OSError(errno.EIO, "injected")
        remove(parent, name)

    renames._remove_tree = failing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tmpfs-upper")
    parser.add_argument("--landlock")
    parser.add_argument("--other-mount", action="store_true")
    parser.add_argument("--no-stage", action="store_true")
    parser.add_argument("--entries-max", type=int)
    parser.add_argument("--bytes-max", type=int)
    parser.add_argument("--kill-while-copying", action="store_true")
    parser.add_argument("--fail-removal", action="store_true")
    parser.add_argument("--notification-seconds", type=float)
    parser.add_argument("root")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if options.entries_max is not None:
        renames.TREE_ENTRIES_MAX = options.entries_max  # type: ignore[misc]
    if options.notification_seconds is not None:
        renames.NOTIFICATION_SECONDS = options.notification_seconds  # type: ignore[misc]
    if options.fail_removal:
        _fail_removal()
    if options.bytes_max is not None:
        renames.TREE_BYTES_MAX = options.bytes_max  # type: ignore[misc]
    merged = _mount(options.root, options.tmpfs_upper, options.other_mount)
    os.chdir(merged)
    ruleset = None
    if options.landlock:
        abi = landlock.landlock_abi()
        ruleset = landlock.build_ruleset(abi, [os.fsencode(options.landlock)], allow_network=True)
    landlock.prctl(landlock.PR_SET_NO_NEW_PRIVS, 1)
    landlock.drop_capabilities()
    sys.stdout.flush()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = os.fork()
    if child == 0:
        ours.close()
        try:
            if ruleset is not None:
                landlock.restrict_self(ruleset)
            program = seccomp.build(os.getpid(), allow_network=True, stage=not options.no_stage)
            if options.no_stage:
                seccomp.install(program)
                listener = os.open("/dev/null", os.O_RDONLY)
            else:
                listener = renames.install(program)
            socket.send_fds(theirs, [b"L"], [listener])
            os.close(listener)
            theirs.close()
            os.execvp(command[0], command)  # noqa: S606
        except BaseException as failure:  # noqa: BLE001
            print("cannot start:", type(failure).__name__, failure, file=sys.stderr)
        os._exit(127)
    theirs.close()
    if options.kill_while_copying:
        _kill_while_copying(child)
    _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    listener = fds[0]
    status = None
    while True:
        if not options.no_stage and renames.wait(listener):
            renames.serve(listener, ruleset)
        renames.overdue()
        while True:
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            renames.reaped(listener, pid)
            if pid == child:
                status = code
        if status is not None and not landlock.children(os.getpid()):
            break
    sys.stdout.flush()
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
