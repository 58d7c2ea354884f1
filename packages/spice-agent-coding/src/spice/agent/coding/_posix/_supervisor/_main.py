"""The per-call supervisor, and the spec and report it speaks with the launcher.

Standard library only and free of package imports but its siblings ``_seccomp``,
``_landlock``, ``_renames``, ``_tmpdir`` and ``_bridge`` (held to the same rule), on purpose: this
module's code is run by the launcher once per command, ``python -I -S -c BOOTSTRAP
CODE_FD SPEC_FD REPORT_FD``: the five modules compiled once when the server started and
kept in a sealed memory file (``CODE_FD``), never read again from a path a command could
write (contract 10.1). That process, the *supervisor*, is single-threaded when it forks
(the bridge's thread, when there is one, starts after the fork), so it may run Python
between ``fork`` and ``exec`` without the deadlocks that ``preexec_fn`` risks in the
threaded server (see ``docs/decisions.md``).
It:

1. reads the command (executable, argv, environment) and the policy from the
   memory file ``SPEC_FD`` (never from its argv or environment, which other users
   can see or which Python itself would alter);
2. asks for ``SIGHUP`` when its parent (the server) dies (``PR_SET_PDEATHSIG``),
   becomes a child subreaper (every orphan of the call's tree is reparented to it)
   and makes itself non-dumpable;
3. builds the Landlock ruleset, forks, and in the child sets ``PR_SET_PDEATHSIG(SIGKILL)``,
   ``no_new_privs`` and ``landlock_restrict_self``, drops every capability and installs
   the seccomp filter (``_seccomp``) before it ``execve``\\s the command (so the
   command's domain does not include the supervisor, which the command therefore
   cannot signal). With namespaces the server runs this supervisor itself inside
   ``bwrap`` (``--as-pid-1``: it is the init of the call's PID namespace, and the kernel
   ends every process in it when it exits); its parent is then ``bwrap``'s monitor,
   whose death (the server's "end now", or the server's own death) is its death signal,
   and it first checks that the directory ``bwrap`` entered is the one the server held.
   With the ``PROXY_BRIDGE`` bit it binds ``127.0.0.1:3128`` in the call's network
   namespace before the fork and, after it, relays that port to the server's proxy in
   one thread (``_bridge``); with ``PRIVATE_NETWORK`` the command's Landlock leaves TCP
   alone and its filter lets ``AF_INET``/``AF_INET6`` through (the namespace is its own);
4. reports on ``REPORT_FD``, two bytes a record: ``S`` started (with the ``LAYER_*``
   bits the command was put under: Landlock, seccomp, capabilities), ``F`` could not
   start, ``X``+code exited, ``K``+signal killed, ``D`` the whole tree is gone, ``R``
   the sweep's bound ran out with processes remaining;
5. forwards a stop (``SIGTERM``): with namespaces to the command's own group (the command
   leads a new session there, as the server's children do), without them to the command
   when it has left the server's group; on ``SIGHUP`` (the server's "end now", or the
   server's death) ends the whole subtree, round after round (each round freezes every
   descendant with ``SIGSTOP``, then kills them all; orphans come back to this subreaper
   and are reaped here), reports ``D`` only when none is left (else ``R``), and exits
   with the command's status mirrored (a signal death as a signal death; through
   ``bwrap``, 128+N).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys
import time

if __package__:
    from . import _bridge as bridge
    from . import _landlock as landlock
    from . import _renames as renames
    from . import _tmpdir as tmpdir
else:  # the supervisor: ``BOOTSTRAP`` put the modules, compiled at start, in sys.modules
    import _bridge as bridge  # type: ignore[import-not-found,no-redef]
    import _landlock as landlock  # type: ignore[import-not-found,no-redef]
    import _renames as renames  # type: ignore[import-not-found,no-redef]
    import _tmpdir as tmpdir  # type: ignore[import-not-found,no-redef]

# Every command pays this module's imports (the supervisor's start): ``typing``,
# ``collections.abc`` and ``contextlib`` are left out at run time (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Final, NoReturn


# -- the supervisor ----------------------------------------------------------------------

SPEC_VERSION: Final = b"spice-supervisor-4"
# POSIX-only signals are read with a default so that this module imports on Windows,
# where no supervisor ever runs (contract 10.4).
END_SIGNAL: Final[signal.Signals] = getattr(signal, "SIGHUP", signal.SIGTERM)
"""What the server sends the supervisor for "end the whole tree now" (and its death signal)."""

SWEEP_BOUND_SECONDS: Final = 1.5
"""Longest the supervisor spends killing and reaping its tree before it exits anyway."""

WATCH_SECONDS: Final = 1.0
"""How often an idle supervisor re-checks that its server is alive (besides the signal)."""

_SWEEP_WAIT_SECONDS: Final = 0.02
_LIFELINE_READS: Final = 8
_WATCHED: Final[frozenset[signal.Signals]] = frozenset(
    {getattr(signal, "SIGCHLD", signal.SIGTERM), signal.SIGTERM, signal.SIGINT, END_SIGNAL}
)
_CANNOT_START: Final = 127
COMMAND_OOM_SCORE_ADJ: Final = 1000
"""The command's ``oom_score_adj``: where memory runs out, the kernel picks it first."""

REPORT_STARTED: Final = ord("S")
REPORT_FAILED: Final = ord("F")
REPORT_EXITED: Final = ord("X")
REPORT_KILLED: Final = ord("K")
REPORT_DONE: Final = ord("D")
_LAYERS_RECORD: Final = ord("L")
REPORT_REMAINING: Final = ord("R")
"""The sweep's bound ran out with processes of the call still alive (never ``D`` then)."""

BOOTSTRAP: Final = (
    "import marshal, os, sys\n"
    "f = int(sys.argv.pop(1))\n"
    "d = b''\n"
    "while c := os.pread(f, 1 << 20, len(d)):\n"
    "    d += c\n"
    "os.close(f)\n"
    "*helpers, main = marshal.loads(d)\n"
    "for name, code in helpers:\n"
    "    m = type(sys)(name)\n"
    "    exec(code, m.__dict__)\n"
    "    sys.modules[name] = m\n"
    "exec(main[1], {'__name__': '__main__'})\n"
)
"""What ``python -I -S -c`` runs: ``_seccomp`` and this module, compiled once by the server
at start and kept in a sealed memory file (the descriptor is ``argv[1]``) as marshalled
``(name, code)`` pairs, the supervisor last; nothing is read from a path."""

SHARED_MEMORY: Final = b"/dev/shm"
"""The private, writable ``/dev/shm`` of the namespace path (a Landlock rule inside)."""


class SupervisorSpec:
    """One call's instructions to its supervisor: a typed value, encoded once (contract 12.5).

    The server makes it (``_plan.CallPlan.spec``, or ``_launcher`` for an uncontained
    call), ``encode`` writes it to the call's sealed memory file, and the supervisor reads
    it back with ``decode``; ``decode(encode(spec)) == spec`` for every spec (a hypothesis
    test). The encoding is NUL-separated fields after ``SPEC_VERSION``: no bytes field may
    hold a NUL (``ValueError``). A plain class, not a dataclass: the supervisor imports as
    little as it can (every command pays its start).

    - ``server``: the pid the supervisor's parent must be (0 inside a PID namespace);
    - ``abi``: the Landlock ABI, 0 for no Landlock (``writable`` is then ignored);
    - ``writable``: the Landlock write rules; ``allow_network``: no network rules;
    - ``executable``, ``arguments`` (without ``argv[0]``), ``environment`` (``NAME=VALUE``);
    - ``temporary``: the call's host ``TMPDIR``, which the supervisor removes itself when
      the server dies (otherwise the server's join does); empty with namespaces;
    - ``layers``: the ``LAYER_*`` bits (and ``PRIVATE_IPC``/``PRIVATE_NETWORK``) the
      command must be put under besides Landlock; the start fails when one cannot be;
    - ``workdir``: ``DEV:INO`` of the directory the server held, on the namespace path
      (``bwrap`` enters it again by its name), empty without namespaces;
    - ``lifeline``: (namespaces) the read end of the pipe whose write end is ``bwrap``'s
      ``--json-status-fd``: only bwrap's monitor holds that, so its end of file says the
      monitor died, also before the supervisor's death signal was set;
    - ``cgroups``: descriptors of the call's ``cgroup.procs`` files: the command writes
      ``0`` to each before ``execve`` (moving itself in), and a failure is "not started";
    - ``processes``: the command's ``RLIMIT_NPROC`` where no cgroup bounds it (0: none).
    """

    __slots__ = (
        "abi",
        "allow_network",
        "arguments",
        "cgroups",
        "environment",
        "executable",
        "layers",
        "lifeline",
        "processes",
        "server",
        "temporary",
        "workdir",
        "writable",
    )

    def __init__(
        self,
        *,
        server: int,
        executable: bytes,
        arguments: Sequence[bytes] = (),
        environment: Sequence[bytes] = (),
        abi: int = 0,
        writable: Sequence[bytes] = (),
        allow_network: bool = False,
        temporary: bytes = b"",
        layers: int = 0,
        workdir: bytes = b"",
        lifeline: int | None = None,
        cgroups: Sequence[int] = (),
        processes: int = 0,
    ) -> None:
        self.server = server
        self.abi = abi
        self.writable = tuple(writable)
        self.allow_network = allow_network
        self.executable = executable
        self.arguments = tuple(arguments)
        self.environment = tuple(environment)
        self.temporary = temporary
        self.layers = layers
        self.workdir = workdir
        self.lifeline = lifeline
        self.cgroups = tuple(cgroups)
        self.processes = processes

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SupervisorSpec) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        # No argv, environment or path of the call: only its shape.
        return (
            f"SupervisorSpec(abi={self.abi}, layers={self.layers}, "
            f"arguments={len(self.arguments)}, environment={len(self.environment)})"
        )

    @property
    def argv(self) -> list[bytes]:
        """``execve``'s argv: the executable, then the arguments."""
        return [self.executable, *self.arguments]

    @property
    def environ(self) -> dict[bytes, bytes]:
        """``execve``'s environment: each ``NAME=VALUE`` entry (empty ones skipped)."""
        found: dict[bytes, bytes] = {}
        for entry in self.environment:
            if entry:
                name, _, value = entry.partition(b"=")
                found[name] = value
        return found

    def encode(self) -> bytes:
        """The supervisor's input (see the class docstring)."""
        texts = (
            *self.writable,
            self.executable,
            *self.arguments,
            *self.environment,
            self.temporary,
            self.workdir,
        )
        if any(b"\0" in text for text in texts):
            raise ValueError("a supervisor spec field holds a NUL byte")
        fields = [
            SPEC_VERSION,
            str(self.server).encode(),
            str(self.abi).encode(),
            b"1" if self.allow_network else b"0",
            self.temporary,
            str(self.layers).encode(),
            str(len(self.writable)).encode(),
            *self.writable,
            self.workdir,
            b"" if self.lifeline is None else str(self.lifeline).encode(),
            b",".join(str(fd).encode() for fd in self.cgroups),
            str(self.processes).encode(),
            self.executable,
            str(len(self.arguments)).encode(),
            *self.arguments,
            *self.environment,
        ]
        return b"\0".join(fields)

    def to_memory_file(self) -> int:
        """A close-on-exec memory file holding ``encode()``, at its start: what the launcher
        hands the supervisor, which reads it once (``_prepare``)."""
        data = memoryview(self.encode())
        fd = os.memfd_create("spice-command", os.MFD_CLOEXEC)
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @classmethod
    def decode(cls, blob: bytes) -> SupervisorSpec:
        """The spec ``encode`` wrote; ``ValueError`` for anything else."""
        fields = blob.split(b"\0")
        if fields[0] != SPEC_VERSION:
            raise ValueError("unknown supervisor spec")
        try:
            count = int(fields[6])
            rest = fields[7 + count :]
            argument_count = int(rest[5])
            if count < 0 or argument_count < 0 or len(rest) < 6 + argument_count:
                raise ValueError("a truncated supervisor spec")
            return cls(
                server=int(fields[1]),
                abi=int(fields[2]),
                allow_network=fields[3] == b"1",
                temporary=fields[4],
                layers=int(fields[5]),
                writable=fields[7 : 7 + count],
                workdir=rest[0],
                lifeline=int(rest[1]) if rest[1] else None,
                cgroups=[int(fd) for fd in rest[2].split(b",") if fd],
                processes=int(rest[3]),
                executable=rest[4],
                arguments=rest[6 : 6 + argument_count],
                environment=rest[6 + argument_count :],
            )
        except IndexError:
            raise ValueError("a truncated supervisor spec") from None


def bwrap_gone(spec: SupervisorSpec) -> bool:
    """With namespaces: whether ``bwrap``'s monitor (the lifeline's only writer) is gone.

    The monitor writes a line or two of status there (read and dropped, at most
    ``_LIFELINE_READS`` reads a look); its death is the end of file.
    """
    if spec.lifeline is None:
        return False
    for _ in range(_LIFELINE_READS):
        readable, _, _ = select.select([spec.lifeline], [], [], 0)
        if not readable:
            return False
        if not os.read(spec.lifeline, 4096):
            return True
    return False


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _report(fd: int, kind: int, value: int = 0) -> None:
    with landlock.suppress(OSError):  # the server is gone: nobody to tell
        os.write(fd, bytes((kind, value & 0xFF)))


def _child(
    spec: SupervisorSpec,
    ruleset: int | None,
    status: int,
    mask: Iterable[int],
    parent: int,
    handoff: int | None = None,
) -> NoReturn:
    """In the forked child: the command's last preparations, then ``execve``.

    On ``status`` the child writes ``L`` and the ``LAYER_*`` bits it applied just before
    ``execve`` (close-on-exec, so a start ends the pipe), or ``F`` when it cannot start.
    """
    try:
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)
        landlock.prctl(landlock.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(_CANNOT_START)  # the supervisor died before the death signal was set
        _bound(spec)
        if spec.workdir:  # inside the namespaces: the command's own session and group
            os.setsid()
        applied = landlock.apply_layers(ruleset, spec.layers, spec.allow_network, _handing(handoff))
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.write(status, bytes((_LAYERS_RECORD, applied)))
        os.execve(spec.executable, spec.argv, spec.environ)  # noqa: S606 - the point
    except BaseException:  # noqa: BLE001 - any failure here means "not started"
        with landlock.suppress(OSError):
            os.write(status, b"F")
    os._exit(_CANNOT_START)


def _handing(handoff: int | None) -> Callable[[bytes], None] | None:
    """With a stage: install the filter with its listener and hand that to the supervisor
    (``SCM_RIGHTS`` on ``handoff``), keeping no copy."""
    if handoff is None:
        return None

    def listen(program: bytes) -> None:
        listener = renames.install(program)
        try:
            renames.send_listener(handoff, listener)
        finally:
            os.close(listener)

    return listen


def _bound(spec: SupervisorSpec) -> None:
    """The command's bounds, in the forked child: into the call's cgroup (``0`` to each
    ``cgroup.procs``: this process, and so every descendant), the OOM killer's first
    choice, and ``RLIMIT_NPROC`` where no cgroup bounds it. Any failure raises."""
    for fd in spec.cgroups:
        os.write(fd, b"0")
        os.close(fd)
    # Non-dumpable (inherited from the supervisor), /proc/self is root's and this user
    # could not write there; the command is dumpable after ``execve`` anyway.
    landlock.prctl(landlock.PR_SET_DUMPABLE, 1)
    adjust = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(adjust, str(COMMAND_OOM_SCORE_ADJ).encode())
    finally:
        os.close(adjust)
    if spec.processes > 0:
        import resource  # noqa: PLC0415 - only where no cgroup bounds the command

        resource.setrlimit(resource.RLIMIT_NPROC, (spec.processes, spec.processes))


class _Supervisor:
    def __init__(self, spec: SupervisorSpec, report: int) -> None:
        self.spec = spec
        self.report = report
        self.command = 0
        self.status: int | None = None
        self.announced = False
        self.listener: int | None = None
        """With a stage: the command's rename listener (``_renames``)."""
        self.ruleset: int | None = None

    def wait(self) -> signal.struct_siginfo | None:
        """The next watched signal within ``WATCH_SECONDS``; with a stage, serving the
        command's renames meanwhile (each bounded: ``_renames.serve``)."""
        if self.listener is None:
            return signal.sigtimedwait(_WATCHED, WATCH_SECONDS)
        deadline = time.monotonic() + WATCH_SECONDS
        while True:
            received = signal.sigtimedwait(_WATCHED, 0)
            if received is not None or time.monotonic() >= deadline:
                return received
            if renames.wait(self.listener):
                renames.serve(self.listener, self.ruleset)
            renames.overdue()

    def reap(self) -> None:
        """Collect every exited child; remember the command's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.listener is not None:
                renames.reaped(self.listener, pid)
            if pid == self.command and self.status is None:
                self.status = status

    def announce(self) -> None:
        """Report the command's exit while the rest of its tree still runs (once)."""
        if self.announced or self.status is None:
            return
        self.announced = True
        if os.WIFSIGNALED(self.status):
            _report(self.report, REPORT_KILLED, os.WTERMSIG(self.status))
        else:
            _report(self.report, REPORT_EXITED, os.WEXITSTATUS(self.status))

    def forward_stop(self) -> None:
        """A stop reached us; pass it on to the command's group where the server's cannot.

        Inside namespaces the stop came to the supervisor alone (the server signals it
        by its pidfd; bwrap's monitor leads the server's group): the command's own group
        gets it, what is left of it too once the command exited (a group's id is not
        reused while it has members). Without namespaces the server signalled the group
        the command was started in: the command gets it only if it left that group.
        """
        with landlock.suppress(OSError):
            if self.spec.workdir:
                os.killpg(self.command, signal.SIGTERM)
            elif self.status is None and os.getpgid(self.command) != os.getpgid(0):
                os.kill(self.command, signal.SIGTERM)

    def sweep(self) -> bool:
        """End the whole subtree, round after round, and reap it; ``True`` once none is left.

        Each round freezes every descendant (``SIGSTOP``, so none forks again), walks
        the tree once more for those forked meanwhile, and kills them all; orphans come
        back to this subreaper and are reaped here. Bounded by ``SWEEP_BOUND_SECONDS``.
        """
        me = os.getpid()
        deadline = time.monotonic() + SWEEP_BOUND_SECONDS
        while True:
            self.reap()
            tree = landlock.descendants(me)
            if not tree:
                return True
            for pid in tree:
                with landlock.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            for pid in {*tree, *landlock.descendants(me)}:
                with landlock.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() >= deadline:
                self.reap()
                return not landlock.descendants(me)
            signal.sigtimedwait({signal.SIGCHLD}, _SWEEP_WAIT_SECONDS)

    def run(self) -> NoReturn:
        """Wait for the command; end the tree on request, on the server's death, or alone.

        When the command exits and nothing else of its tree is left, the supervisor
        exits at once with the command's status. When descendants remain it reports the
        command's exit and stays, pinning the group, until they end, it is told to end
        (the join), or the server dies.
        """
        me = os.getpid()
        while os.getppid() == self.spec.server and not bwrap_gone(self.spec):
            received = self.wait()
            if received is None:
                continue
            if received.si_signo == signal.SIGCHLD:
                self.reap()
                if self.status is not None:
                    if not landlock.children(me):
                        break
                    self.announce()
            elif received.si_signo == signal.SIGTERM:
                self.forward_stop()
            elif received.si_signo == END_SIGNAL:
                break
        # The command's outcome is said by the supervisor alone, always before ``D``:
        # through bwrap the exit status the server sees is the monitor's (128+N).
        self.announce()
        emptied = self.sweep()
        self.announce()
        self.remove_temporary()
        _report(self.report, REPORT_DONE if emptied else REPORT_REMAINING)
        self.mirror()

    def remove_temporary(self) -> None:
        """Remove the call's TMPDIR once the tree is gone (the server's join does it too).

        Here as well because a dying server cannot; and a death signal can come while
        the server's other threads still make ``getppid`` look unchanged (the parent
        death signal follows the thread that forked), so the supervisor never relies
        on seeing its parent change.
        """
        if self.spec.temporary:
            tmpdir.remove_tree(self.spec.temporary)

    def mirror(self) -> NoReturn:
        """Exit as the command did: its code, or death by its signal."""
        status = self.status
        if status is not None and not os.WIFSIGNALED(status):
            os._exit(os.WEXITSTATUS(status))
        # Not reaped within the sweep's bound: it has SIGKILL pending, so it died of that.
        number = signal.SIGKILL if status is None else os.WTERMSIG(status)
        with landlock.suppress(OSError, ValueError):
            if number not in {signal.SIGKILL, signal.SIGSTOP}:
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
            os.kill(os.getpid(), number)
        os._exit(128 + number)


def _prepare(spec_fd: int) -> tuple[SupervisorSpec, set[int | signal.Signals], int | None]:
    """Before the fork: the spec, the signal mask to restore, the ruleset (or none)."""
    spec = SupervisorSpec.decode(_read_all(spec_fd))
    # Read once, here: the command must never inherit it (R4-7).
    os.set_inheritable(spec_fd, False)  # noqa: FBT003 - os's positional-only flag
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    landlock.prctl(landlock.PR_SET_PDEATHSIG, END_SIGNAL)
    if spec.lifeline is not None:
        os.set_inheritable(spec.lifeline, False)  # noqa: FBT003 - os's positional-only flag
    for fd in spec.cgroups:
        os.set_inheritable(fd, False)  # noqa: FBT003 - os's positional-only flag
    if os.getppid() != spec.server:
        os._exit(_CANNOT_START)  # the server died while we started: start nothing
    if bwrap_gone(spec):
        raise OSError(errno.ESRCH, "bwrap's monitor is gone")  # "end now" came first
    landlock.prctl(landlock.PR_SET_CHILD_SUBREAPER, 1)
    landlock.prctl(landlock.PR_SET_DUMPABLE, 0)
    if spec.workdir:
        # Namespaces: bwrap entered the workdir again by its name; a directory swapped
        # meanwhile (a symlink out of the worktree) is caught here and nothing starts.
        # Through a stage's overlay (``*``) the directory keeps its inode number alone.
        here = os.stat(".")
        device, _, inode = spec.workdir.partition(b":")
        same = device in (b"*", str(here.st_dev).encode()) and inode == str(here.st_ino).encode()
        if not same:
            raise OSError(errno.ESTALE, "the working directory changed")
    ruleset: int | None = None
    if spec.abi > 0:
        # Inside the namespaces the paths are the mount namespace's (the same inodes,
        # bound), plus its private /dev/shm.
        writable = [*spec.writable, SHARED_MEMORY] if spec.workdir else spec.writable
        # A network namespace of its own: TCP reaches only the call's loopback.
        tcp = spec.allow_network or bool(spec.layers & landlock.PRIVATE_NETWORK)
        ruleset = landlock.build_ruleset(spec.abi, writable, tcp)
    return spec, mask, ruleset


def supervise(spec_fd: int, report: int) -> NoReturn:
    """The supervisor's whole life (see the module docstring).

    Until the fork nothing of the command exists: any failure there is reported ``F``
    (the server then knows nothing was started). After it, only the command's own
    start word says whether it started: ``L`` and the layers it applied, then its
    status pipe closing on ``exec``.
    """
    os.set_inheritable(report, False)  # noqa: FBT003 - os's positional-only flag
    try:
        spec, mask, ruleset = _prepare(spec_fd)
        # The proxy's port on the call's loopback, taken before the command exists.
        listener = bridge.listen() if spec.layers & landlock.PROXY_BRIDGE else None
        status_read, status_write = os.pipe()
        handoff = renames.handoff() if spec.layers & landlock.STAGE else None
        parent = os.getpid()
        command = os.fork()
    except BaseException:  # noqa: BLE001 - before the fork, any failure means "not started"
        _report(report, REPORT_FAILED)
        os._exit(_CANNOT_START)
    if command == 0:
        os.close(status_read)
        _child(spec, ruleset, status_write, mask, parent, handoff and handoff[1])
    os.close(status_write)
    os.close(spec_fd)
    for fd in spec.cgroups:
        os.close(fd)
    if listener is not None:
        bridge.start(listener)
    said = _read_all(status_read)
    os.close(status_read)
    supervisor = _Supervisor(spec, report)
    supervisor.command = command
    if handoff is not None:  # the helpers enter the command's Landlock domain's rules
        supervisor.listener = renames.take_listener(handoff)
        supervisor.ruleset = ruleset
    elif ruleset is not None:
        os.close(ruleset)
    if len(said) != 2 or said[0] != _LAYERS_RECORD:  # "F", or "L" then "F": not started
        with landlock.suppress(ChildProcessError):
            os.waitpid(command, 0)
        _report(report, REPORT_FAILED)
        os._exit(_CANNOT_START)
    _report(report, REPORT_STARTED, said[1])
    # The command holds the pipes now; ours would keep them open after it exits.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    supervisor.run()


if __name__ == "__main__":
    supervise(int(sys.argv[1]), int(sys.argv[2]))
