"""Finding bubblewrap, probing it once, and the argv it gets (``_bwrap``), with real files."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._bwrap import (
    Namespaces,
    beneath,
    find_bwrap,
    resolve_namespaces,
    wrapper,
)
from spice.agent.coding._posix._containment import (
    INTERPRETER_BENEATH_ROOT,
    resolve_containment,
    unsafe_root,
)
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.coding._sandbox import ROOT_IS_SLASH, SLASH_ROOT_NEEDS_OFF, ContainmentUnavailable

SYSTEM: Final = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(SYSTEM is None, reason="no bwrap installed here")


def fake_bwrap(directory: Path, exit_code: int = 0) -> Path:
    """An executable named ``bwrap`` that exits with ``exit_code`` (a real file on PATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bwrap"
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# -- beneath ---------------------------------------------------------------------------------


def test_beneath_is_the_root_itself_or_below_it(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "ab").mkdir()
    assert beneath(str(tmp_path / "a"), str(tmp_path / "a"))
    assert beneath(str(tmp_path / "a" / "b"), str(tmp_path / "a"))
    assert not beneath(str(tmp_path / "ab"), str(tmp_path / "a"))  # a prefix, not a parent
    assert not beneath(str(tmp_path), str(tmp_path / "a"))


def test_beneath_follows_symlinks_to_the_real_place(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
    assert not beneath(str(tmp_path / "root" / "link"), str(tmp_path / "root"))
    (tmp_path / "outside" / "in").symlink_to(tmp_path / "root")
    assert beneath(str(tmp_path / "outside" / "in"), str(tmp_path / "root"))


@given(st.text(alphabet="abc/.", max_size=30))
def test_everything_lies_beneath_slash(path: str) -> None:
    assert beneath("/" + path, "/")


# -- find_bwrap ------------------------------------------------------------------------------


def test_a_bwrap_on_path_outside_the_root_is_found_resolved(tmp_path: Path) -> None:
    real = fake_bwrap(tmp_path / "bin")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "bwrap").symlink_to(real)
    (tmp_path / "root").mkdir()
    found, reason = find_bwrap(str(tmp_path / "root"), str(tmp_path / "links"))
    assert (str(real), None) == (found, reason)


def test_a_bwrap_beneath_the_root_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    fake_bwrap(root / "bin")
    monkeypatch.setattr(_bwrap, "_from_wheel", lambda: None)
    found, reason = find_bwrap(str(root), str(root / "bin"))
    assert (None, _bwrap.BWRAP_BENEATH_ROOT) == (found, reason)


def test_a_symlink_outside_to_a_bwrap_beneath_the_root_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    real = fake_bwrap(root / "bin")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "bwrap").symlink_to(real)
    monkeypatch.setattr(_bwrap, "_from_wheel", lambda: None)
    assert (None, _bwrap.BWRAP_BENEATH_ROOT) == find_bwrap(str(root), str(tmp_path / "links"))


def test_no_bwrap_anywhere_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bwrap, "_from_wheel", lambda: None)
    (tmp_path / "empty").mkdir()
    assert (None, _bwrap.NO_BWRAP) == find_bwrap(str(tmp_path), str(tmp_path / "empty"))


def test_the_wheels_bwrap_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = fake_bwrap(tmp_path / "wheel" / "_bin")
    monkeypatch.setattr(_bwrap, "_from_wheel", lambda: str(shipped))
    (tmp_path / "empty").mkdir()
    (tmp_path / "root").mkdir()
    found, _ = find_bwrap(str(tmp_path / "root"), str(tmp_path / "empty"))
    assert str(shipped) == found


# -- probe and resolve -----------------------------------------------------------------------


def test_a_bwrap_that_fails_is_no_namespaces(tmp_path: Path) -> None:
    failing = fake_bwrap(tmp_path / "bin", exit_code=1)
    assert _bwrap.PROBE_FAILED == _bwrap.probe(str(failing))


def test_a_bwrap_that_cannot_run_is_no_namespaces(tmp_path: Path) -> None:
    assert _bwrap.PROBE_FAILED == _bwrap.probe(str(tmp_path / "missing"))


@needs_bwrap
def test_the_systems_bwrap_makes_every_namespace_here(tmp_path: Path) -> None:
    made = resolve_namespaces(str(tmp_path))
    if not made.made:
        pytest.skip(f"the host does not allow namespaces: {made.reason}")
    assert made.bwrap == os.path.realpath(str(SYSTEM))


@needs_bwrap
def test_an_unprivileged_user_gets_namespaces_too(tmp_path: Path) -> None:
    """As uid 65534 the probe's argv runs (unprivileged user namespaces), or skip why not."""
    if os.getuid() != 0:
        pytest.skip("needs root to switch to uid 65534")
    assert SYSTEM is not None
    completed = subprocess.run(
        [*wrapper(os.path.realpath(SYSTEM), (), allow_network=False), "/bin/true"],
        user=65534,
        group=65534,
        extra_groups=[],
        env={},
        capture_output=True,
        check=False,
        timeout=30,
    )
    if completed.returncode != 0:
        pytest.skip("this host does not allow unprivileged user namespaces")
    assert completed.returncode == 0


def test_the_seams_decide_and_the_reason_is_kept(tmp_path: Path) -> None:
    calls: list[str] = []

    def prober(path: str) -> str | None:
        calls.append(path)
        return "refused here"

    made = resolve_namespaces(str(tmp_path), lambda _root: ("/x/bwrap", None), prober)
    assert (None, "refused here", ["/x/bwrap"]) == (made.bwrap, made.reason, calls)
    missing = resolve_namespaces(str(tmp_path), lambda _root: (None, "none"), prober)
    assert (Namespaces(None, "none"), ["/x/bwrap"]) == (missing, calls)


# -- wrapper ---------------------------------------------------------------------------------


def test_the_wrapper_isolates_every_namespace_and_binds_only_the_writable_places() -> None:
    argv = wrapper("/usr/bin/bwrap", ["/w", "/t"], allow_network=False)
    assert argv[0] == "/usr/bin/bwrap"
    assert argv[-1] == "--"
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"):
        assert flag in argv
    assert "--unshare-net" in argv
    text = " ".join(argv)
    assert "--ro-bind / /" in text
    assert "--bind /w /w" in text
    assert "--bind /t /t" in text
    assert "--tmpfs /dev/shm" in text
    assert "--cap-drop ALL" in text
    assert "--new-session" in argv
    assert "--die-with-parent" in argv
    assert text.count("--bind ") == 2


def test_allow_network_shares_the_hosts_network() -> None:
    assert "--unshare-net" not in wrapper("/b", [], allow_network=True)


# -- the policy: a root of / or one holding the interpreter -----------------------------------


def test_a_root_of_slash_is_refused_by_workspace_and_auto_runs_uncontained() -> None:
    assert ROOT_IS_SLASH == unsafe_root("/", "/usr/bin/python3", ())
    with pytest.raises(ContainmentUnavailable, match="root is /"):
        resolve_containment("workspace", probe=lambda: 7, root="/")
    auto = resolve_containment("auto", probe=lambda: 7, root="/")
    assert (False, False) == (auto.confined, auto.contained)
    assert auto.warning is not None
    assert ROOT_IS_SLASH in auto.warning


def test_a_root_holding_the_interpreter_is_refused(tmp_path: Path) -> None:
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.write_text("")
    assert INTERPRETER_BENEATH_ROOT == unsafe_root(str(tmp_path), str(python), ())
    assert INTERPRETER_BENEATH_ROOT == unsafe_root(str(tmp_path), "/usr/bin/x", (str(tmp_path),))
    assert unsafe_root(str(tmp_path / "bin" / "elsewhere"), str(python), ()) is None


def test_a_root_holding_the_servers_interpreter_is_refused_for_real() -> None:
    prefix = os.path.realpath(sys.base_prefix)
    with pytest.raises(ContainmentUnavailable, match="Python"):
        resolve_containment("workspace", probe=lambda: 7, root=prefix)


@pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")
def test_without_namespaces_workspace_runs_but_is_not_contained(tmp_path: Path) -> None:
    policy = resolve_containment(
        "workspace",
        root=str(tmp_path),
        namespaces=lambda _root: Namespaces(None, "none here"),
        seccomp_probe=lambda: False,
    )
    assert (True, False) == (policy.confined, policy.contained)
    report = policy.report()
    assert report["contained"] is False
    layers = report["layers"]
    assert isinstance(layers, dict)
    assert {"made": False, "reason": "none here"} == layers["namespaces"]


# -- the supervisor's check of the directory bwrap entered -------------------------------------


def _supervise(tmp_path: Path, workdir: str, marker: Path, lifeline: int | None = None) -> bytes:
    """Run the real supervisor (compiled from the sealed code, as in a call) told that the
    directory it was started in is ``workdir`` (``DEV:INO``) and, if given, that its
    lifeline to bwrap's monitor is ``lifeline``; its first report record."""
    from spice.agent.coding._posix import _launcher as _posix_launcher  # noqa: PLC0415
    from spice.agent.coding._posix._supervisor import _main as supervisor  # noqa: PLC0415

    blob = supervisor.SupervisorSpec(
        server=os.getpid(),
        executable=b"/usr/bin/touch",
        arguments=[os.fsencode(marker)],
        environment=[b"PATH=/bin"],
        workdir=workdir.encode(),
        lifeline=lifeline,
    ).encode()
    spec = os.memfd_create("t")
    os.write(spec, blob)
    os.lseek(spec, 0, os.SEEK_SET)
    code = _posix_launcher._code_fd()
    report_read, report_write = os.pipe()
    try:
        argv = [
            _posix_launcher.INTERPRETER, "-I", "-S", "-c", supervisor.BOOTSTRAP,
            str(code), str(spec), str(report_write),
        ]  # fmt: skip
        subprocess.run(
            argv,
            pass_fds=(code, spec, report_write, *(() if lifeline is None else (lifeline,))),
            cwd=tmp_path,
            capture_output=True,
            check=False,
            timeout=60,
        )
        os.close(report_write)
        report_write = -1
        with os.fdopen(report_read, "rb") as report:
            report_read = -1
            return report.read()[:1]
    finally:
        for fd in (spec, report_read, report_write):
            if fd >= 0:
                os.close(fd)


def test_the_supervisor_runs_the_command_in_the_directory_it_was_told(tmp_path: Path) -> None:
    here = os.stat(tmp_path)
    assert b"S" == _supervise(tmp_path, f"{here.st_dev}:{here.st_ino}", tmp_path / "ran")
    assert (tmp_path / "ran").exists()


def test_the_supervisor_starts_nothing_in_another_directory(tmp_path: Path) -> None:
    """bwrap enters the workdir again by name: another inode there means nothing starts."""
    here = os.stat(tmp_path)
    assert b"F" == _supervise(tmp_path, f"{here.st_dev}:{here.st_ino + 1}", tmp_path / "ran")
    assert not (tmp_path / "ran").exists()


def test_the_wrapper_makes_the_supervisor_init_with_a_private_bounded_tmp() -> None:
    """The supervisor is the PID namespace's init; /tmp is a tmpfs of a named size, mounted
    before the writable binds (so a worktree beneath /tmp is bound on top of it)."""
    argv = wrapper("/usr/bin/bwrap", ["/tmp/w"], allow_network=False)
    assert argv[-2:] == ["--as-pid-1", "--"]
    tmp = argv.index(_bwrap.PRIVATE_TMP)
    assert argv[tmp - 3 : tmp] == ["--size", str(_bwrap.PRIVATE_TMP_BYTES), "--tmpfs"]
    assert tmp < argv.index("/tmp/w")


@pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")
def test_the_cli_refuses_a_root_of_slash_in_one_line_unless_the_sandbox_is_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A root of ``/`` is refused (exit 2, one line naming ``--sandbox off``) with
    ``workspace`` and with ``auto``; only an explicit ``off`` serves it (contract 11.3)."""
    from spice.agent.coding import _cli  # noqa: PLC0415

    for mode in ("workspace", "auto"):
        assert 2 == _cli.main(["--root", "/", "--sandbox", mode, "tools"])
        refused = capsys.readouterr()
        assert [f"spice-coding: {SLASH_ROOT_NEEDS_OFF}"] == refused.err.strip().splitlines()
        assert "" == refused.out
    assert 0 == _cli.main(["--root", "/", "--sandbox", "off", "tools"])
    served = capsys.readouterr()
    assert '"contained": false' in served.out.replace('"contained":false', '"contained": false')


def test_only_places_beneath_tmp_are_kept_visible_outermost_first(tmp_path: Path) -> None:
    """The private /tmp hides the host's: of the server's own places, those strictly beneath
    it (real paths, a symlink followed) are bound again, each once, none inside another."""
    if not str(tmp_path).startswith(os.path.realpath("/tmp") + os.sep):
        pytest.skip("pytest's tmp_path is not beneath /tmp here")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "link").symlink_to(venv)
    elsewhere = os.path.realpath("/usr")
    places = [str(venv / "bin"), str(tmp_path / "link"), elsewhere, "/tmp"]
    assert [str(venv.resolve())] == _bwrap.under_private_tmp(places)
    assert [str(venv.resolve() / "bin")] == _bwrap.under_private_tmp([str(venv / "bin")])
    assert [] == _bwrap.under_private_tmp([elsewhere, "/tmp"])


def test_kept_places_are_bound_read_only_between_the_tmpfs_and_the_writable_binds() -> None:
    argv = wrapper("/usr/bin/bwrap", ["/tmp/w"], allow_network=False, visible=["/tmp/v"])
    kept = argv.index("/tmp/v")
    assert argv[kept - 1] == "--ro-bind"
    assert argv.index(_bwrap.PRIVATE_TMP) < kept < argv.index("/tmp/w")


def test_a_supervisor_whose_bwrap_is_gone_starts_nothing(tmp_path: Path) -> None:
    """bwrap's monitor died before the supervisor set its death signal (the join's "end
    now" during bwrap's start): its status pipe, the lifeline, is at its end (what the
    monitor wrote is read first), so ``F``, and nothing runs."""
    here = os.stat(tmp_path)
    read, write = os.pipe()
    os.write(write, b'{ "child-pid": 2 }\n')
    os.close(write)
    try:
        workdir = f"{here.st_dev}:{here.st_ino}"
        assert b"F" == _supervise(tmp_path, workdir, tmp_path / "ran", read)
        assert not (tmp_path / "ran").exists()
    finally:
        os.close(read)


def test_a_supervisor_whose_bwrap_lives_runs_the_command(tmp_path: Path) -> None:
    """The monitor still holds the write end (and wrote its status line): ``S``."""
    here = os.stat(tmp_path)
    read, write = os.pipe()
    os.write(write, b'{ "child-pid": 2 }\n')
    try:
        marker = tmp_path / "ran"
        assert b"S" == _supervise(tmp_path, f"{here.st_dev}:{here.st_ino}", marker, read)
        assert marker.exists()
    finally:
        os.close(read)
        os.close(write)


# -- the supervisor's pid, from bwrap's --info-fd ----------------------------------------------


def test_a_pidfd_is_opened_only_for_the_monitors_own_child() -> None:
    """The pidfd names the monitor's child; another parent (a recycled pid), or a pid
    that is gone, gives ``None``."""
    monitor = subprocess.Popen(
        ["/bin/sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE
    )
    try:
        assert monitor.stdout is not None
        child = int(monitor.stdout.readline())
        pidfd = _bwrap.open_child(child, monitor.pid)
        assert pidfd is not None
        os.close(pidfd)
        assert _bwrap.open_child(child, os.getpid()) is None
        assert _bwrap.open_child(monitor.pid, monitor.pid) is None
    finally:
        monitor.kill()
        monitor.wait()
        assert monitor.stdout is not None
        monitor.stdout.close()
        subprocess.run(["/bin/kill", "-9", str(child)], check=False, capture_output=True)
    gone = subprocess.Popen(["/bin/true"])
    gone.wait()
    assert _bwrap.open_child(gone.pid, os.getpid()) is None
