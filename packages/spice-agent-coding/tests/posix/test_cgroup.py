"""A cgroup per call (``_posix._cgroup``): where it is made, its bounds, its end.

The hosts' ``/proc/self/cgroup`` and ``mountinfo`` are given through the reader seam
(a v2-only host, a hybrid one like this machine, one without cgroups); the real
cgroup is made where the test may (root, or a delegated subtree), else skipped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._cgroup import (
    MAX_DEFAULT_MEMORY_BYTES,
    Cgroups,
    default_max_memory,
    resolve_cgroups,
)
from spice.agent.coding._sandbox import DEFAULT_MAX_PROCESSES, MIN_MEMORY_BYTES
from spice.agent.coding._settings._resolve import Flags, resolve_settings
from spice.agent.coding._settings._values import MAXIMUM_PROCESSES, SettingsError

UNDER_LOAD = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Hypothesis without its per-example deadline: the machine is shared (no timing assertions)."""

HYBRID_CGROUP: Final = "8:pids:/\n4:memory:/a/b\n6:freezer:/\n0::/\n"
HYBRID_MOUNTS: Final = (
    "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    "31 25 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "33 25 0:29 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
)


def _host(files: dict[str, str]) -> object:
    def reader(path: str) -> str:
        if path in files:
            return files[path]
        raise FileNotFoundError(path)

    return reader


def test_the_default_memory_bound_is_a_quarter_at_most_16_gib() -> None:
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert default_max_memory() == max(MIN_MEMORY_BYTES, min(MAX_DEFAULT_MEMORY_BYTES, total // 4))


def test_a_host_without_cgroup_files_bounds_nothing_and_says_so() -> None:
    cgroups = resolve_cgroups(reader=_host({}))  # type: ignore[arg-type]
    assert not cgroups.made
    assert cgroups.reason is not None
    report = cgroups.report()
    assert report["cgroup"] is None
    if os.geteuid() == 0:
        assert report["bounded"] == "not bounded: no cgroup can be made here"
        assert cgroups.rlimit_processes == 0
    else:
        assert "RLIMIT_NPROC" in str(report["bounded"])
        assert cgroups.rlimit_processes == DEFAULT_MAX_PROCESSES


def test_a_hybrid_host_whose_v2_has_no_controllers_takes_v1_when_it_may() -> None:
    files = {
        "/proc/self/cgroup": HYBRID_CGROUP,
        "/proc/self/mountinfo": HYBRID_MOUNTS,
        "/sys/fs/cgroup/unified/cgroup.subtree_control": "hugetlb\n",
    }
    cgroups = resolve_cgroups(64, 1 << 30, reader=_host(files))  # type: ignore[arg-type]
    if cgroups.made:  # this process may make cgroups beneath those paths
        assert cgroups.version == "v1"
        assert cgroups.parents[0].startswith("/sys/fs/cgroup/pids/spice-server-")
        assert cgroups.parents[1:] == ("/sys/fs/cgroup/memory/a/b",)
    else:
        assert cgroups.reason is not None
        assert "delegated" in cgroups.reason or "pids and memory" in cgroups.reason
    assert (cgroups.max_processes, cgroups.max_memory) == (64, 1 << 30)


def test_a_v2_host_without_the_controllers_enabled_and_without_v1_bounds_nothing() -> None:
    files = {
        "/proc/self/cgroup": "0::/user.slice/x\n",
        "/proc/self/mountinfo": "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        "/sys/fs/cgroup/user.slice/x/cgroup.subtree_control": "cpu io\n",
    }
    cgroups = resolve_cgroups(reader=_host(files))  # type: ignore[arg-type]
    assert not cgroups.made
    assert cgroups.reason == "no cgroup hierarchy with the pids and memory controllers is available"


def test_making_a_cgroup_where_none_is_made_is_an_error() -> None:
    with pytest.raises(OSError, match="no cgroup"):
        Cgroups(reason="none").make()


@pytest.fixture
def cgroups() -> Cgroups:
    made = resolve_cgroups(16, 64 * 1024**2)
    if not made.made:
        pytest.skip(f"no cgroup can be made here: {made.reason}")
    return made


def test_a_call_cgroup_is_bounded_ended_and_removed(cgroups: Cgroups) -> None:
    """Made with both bounds; a process moved in is ended by ``end``; ``remove`` leaves
    nothing."""
    call = cgroups.make()
    try:
        assert (Path(call.paths[0]) / "pids.max").read_text().strip() == "16"
        memory = Path(call.paths[-1]) / (
            "memory.max" if call.version == "v2" else "memory.limit_in_bytes"
        )
        assert int(memory.read_text()) == 64 * 1024**2
        # A process that ignores SIGTERM, moved in as the supervisor's child moves itself.
        child = subprocess.Popen(
            [sys.executable, "-c", "import signal, time; signal.signal(15, 1); time.sleep(60)"]
        )
        for fd in call.procs:
            os.write(fd, str(child.pid).encode())
        assert call.members() == [child.pid]
        assert call.end()
        child.wait()
        assert child.returncode == -signal.SIGKILL
        assert call.members() == []
    finally:
        for fd in call.procs:
            os.close(fd)
        assert call.remove()
    assert not any(os.path.exists(path) for path in call.paths)


def test_a_cgroup_that_cannot_be_bounded_is_not_left_behind(cgroups: Cgroups) -> None:
    """A memory bound the kernel refuses: ``make`` fails and removes what it made."""
    import dataclasses  # noqa: PLC0415

    refused = dataclasses.replace(cgroups, max_memory=-5)
    before = set(os.listdir(cgroups.parents[0]))
    with pytest.raises(OSError, match=r"[Ii]nvalid"):
        refused.make()
    assert set(os.listdir(cgroups.parents[0])) == before


# -- the settings ------------------------------------------------------------------------


def _settings(**flags: str) -> tuple[int, int | None]:
    settings = resolve_settings(Flags(root="/", **flags), {})  # type: ignore[arg-type]
    return settings.max_processes, settings.max_memory


def test_the_bounds_default_to_2048_and_a_quarter_of_the_memory() -> None:
    assert _settings() == (DEFAULT_MAX_PROCESSES, None)


@UNDER_LOAD
@given(st.integers(1, MAXIMUM_PROCESSES))
def test_any_process_bound_in_range_is_taken(number: int) -> None:
    assert _settings(max_processes=str(number))[0] == number


@pytest.mark.parametrize("text", ["0", str(MAXIMUM_PROCESSES + 1), "-1", "2k", "", "1" * 40])
def test_a_process_bound_out_of_range_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(SettingsError) as raised:
        _settings(max_processes=text)
    assert "--max-processes" in str(raised.value)
    assert text not in str(raised.value) or text in {"", "0", "-1"}


@UNDER_LOAD
@given(st.integers(16, 4096), st.sampled_from(["M", "m"]))
def test_a_memory_bound_takes_binary_units(number: int, unit: str) -> None:
    assert _settings(max_memory=f"{number}{unit}")[1] == number * 1024**2


@pytest.mark.parametrize("text", ["15M", "1T", "0", "12.5G", "G", "-1G", "2P", "1" * 40])
def test_a_memory_bound_out_of_range_or_malformed_is_refused(text: str) -> None:
    with pytest.raises(SettingsError) as raised:
        _settings(max_memory=text)
    assert "--max-memory" in str(raised.value)


def test_the_memory_bound_boundaries() -> None:
    assert _settings(max_memory="16M")[1] == MIN_MEMORY_BYTES
    assert _settings(max_memory=str(MIN_MEMORY_BYTES))[1] == MIN_MEMORY_BYTES
    with pytest.raises(SettingsError):
        _settings(max_memory=str(MIN_MEMORY_BYTES - 1))


def test_the_variables_give_the_bounds_and_the_flags_win() -> None:
    environ = {"SPICE_AGENT_MAX_PROCESSES": "100", "SPICE_AGENT_MAX_MEMORY": "1G"}
    settings = resolve_settings(Flags(root="/"), environ)
    assert (settings.max_processes, settings.max_memory) == (100, 1024**3)
    settings = resolve_settings(Flags(root="/", max_processes="7"), environ)
    assert settings.max_processes == 7


# -- bwrap's version (review C10) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "numbers"),
    [
        (b"bubblewrap 0.8.0\n", (0, 8, 0)),
        (b"bubblewrap 0.6.1\n", (0, 6, 1)),
        (b"bubblewrap 0.11\n", (0, 11)),
        (b"bwrap 0.8.0\n", None),
        (b"bubblewrap\n", None),
        (b"bubblewrap 0.x.1\n", None),
        (b"", None),
    ],
)
def test_bwraps_version_is_read_or_not_at_all(answer: bytes, numbers: object) -> None:
    assert _bwrap.parse_version(answer) == numbers


def test_a_bwrap_older_than_0_7_is_used_without_size_never_called_unable() -> None:
    """0.6.1 (Ubuntu 22.04) has no ``--size``: namespaces are still made, without it."""
    seen: list[str] = []

    def prober(bwrap: str) -> None:
        seen.append(bwrap)

    made = _bwrap.resolve_namespaces(
        "/nonexistent",
        finder=lambda _: ("/usr/bin/bwrap", None),
        prober=prober,
        versioner=lambda _: (0, 6, 1),
    )
    assert made.made
    assert made.sized is False
    assert "--size" not in _bwrap.wrapper(
        "/usr/bin/bwrap", (), allow_network=False, sized=made.sized
    )
    newer = _bwrap.resolve_namespaces(
        "/nonexistent",
        finder=lambda _: ("/usr/bin/bwrap", None),
        prober=prober,
        versioner=lambda _: (0, 7, 0),
    )
    assert newer.sized is True
    argv = _bwrap.wrapper("/usr/bin/bwrap", (), allow_network=False, sized=True)
    shm = argv.index("/dev/shm")
    assert argv[shm - 3 : shm] == ["--size", str(_bwrap.PRIVATE_SHM_BYTES), "--tmpfs"]


def test_tools_says_how_processes_and_memory_are_bounded() -> None:
    """The launcher's report carries the bounds and the way they hold (or do not)."""
    from spice.agent.coding import PosixLauncher  # noqa: PLC0415

    nowhere = Cgroups(reason="none here")
    report = PosixLauncher(cgroups=nowhere).report()
    if sys.platform.startswith("linux"):
        assert report["bounds"] == nowhere.report()
        assert nowhere.report()["processes"] == DEFAULT_MAX_PROCESSES
    assert "bounds" not in PosixLauncher().report()


def test_empty_call_cgroups_of_dead_servers_are_removed_at_start(cgroups: Cgroups) -> None:
    """A server killed before its join leaves an empty call cgroup: the next start removes
    it; one of a live server, or one holding a process, stays."""
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    host = Path(cgroups.parents[0]).parent  # the calls' cgroups lie in the server's
    stale = host / f"spice-call-{dead.pid}-1"
    live = host / f"spice-call-{os.getpid()}-999999"
    stale.mkdir()
    live.mkdir()
    try:
        resolve_cgroups(16, 64 * 1024**2)
        assert not stale.exists()
        assert live.exists()
    finally:
        for path in (stale, live):
            if path.exists():
                path.rmdir()


async def test_a_cgroup_that_cannot_be_emptied_makes_the_join_fail_retryably(
    cgroups: Cgroups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member left past the end's bound (a process in uninterruptible sleep cannot be
    made here: the end is faulted at its seam): the join is not clean and says it may be
    tried again; the retry ends and removes the cgroup."""
    import asyncio  # noqa: PLC0415

    from procutil import Collect  # noqa: PLC0415

    from spice.agent.coding import PosixLauncher  # noqa: PLC0415
    from spice.agent.coding._posix._cgroup import CallCgroup  # noqa: PLC0415
    from spice.agent.process import ProcessFailure, Spec  # noqa: PLC0415

    real_end = CallCgroup.end
    monkeypatch.setattr(CallCgroup, "end", lambda _self, _bound=0.0: False)
    launcher = PosixLauncher(cgroups=cgroups)
    spec = Spec("/bin/true", (), str(tmp_path), (), b"", Collect(), Collect())
    process = await launcher.start(spec)
    async with asyncio.timeout(60):
        await process.wait_exit()
        with pytest.raises(ProcessFailure) as raised:
            await process.wait()
        assert raised.value.retryable
        monkeypatch.setattr(CallCgroup, "end", real_end)
        await process.wait()
    own = f"spice-call-{os.getpid()}-"
    assert not [p for p in os.listdir(cgroups.parents[0]) if p.startswith(own)]


def test_tools_names_a_bwrap_too_old_for_size_limits() -> None:
    """A bwrap before 0.7 is used without ``--size``, and ``tools`` says so (C10)."""
    import dataclasses  # noqa: PLC0415

    from spice.agent.coding._posix._containment import resolve_containment  # noqa: PLC0415

    base = resolve_containment("workspace")
    old = dataclasses.replace(
        base, namespaces=_bwrap.Namespaces("/usr/bin/bwrap", None, sized=False)
    )
    layers = old.report()["layers"]
    assert isinstance(layers, dict)
    if old.confined:
        assert layers["namespaces"]["tmpfs_size"] == "bwrap older than 0.7: no size limit"
    new = dataclasses.replace(base, namespaces=_bwrap.Namespaces("/usr/bin/bwrap", None))
    new_layers = new.report()["layers"]
    assert isinstance(new_layers, dict)
    assert "tmpfs_size" not in new_layers["namespaces"]


def test_a_frozen_call_cgroup_of_a_dead_server_is_thawed_at_start(cgroups: Cgroups) -> None:
    """A server killed between its freeze and its thaw (v1) left a member frozen with
    SIGKILL pending: the next start thaws it, and it dies."""
    if cgroups.freezer is None:
        pytest.skip("no v1 freezer here")
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    # Made under a name no server's start sweeps, then renamed (v1 renames a cgroup in
    # place): another test worker's start cannot remove it half made (seen in a run).
    making = Path(cgroups.freezer) / f"spice-test-{os.getpid()}-{dead.pid}"
    stale = Path(cgroups.freezer) / f"spice-call-{dead.pid}-1"
    making.mkdir()
    member = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (making / "cgroup.procs").write_text(str(member.pid))
        (making / "freezer.state").write_text("FROZEN")
        deadline = time.monotonic() + 10
        while (making / "freezer.state").read_text().strip() != "FROZEN":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        member.send_signal(signal.SIGKILL)
        assert member.poll() is None  # frozen: the kill waits for the thaw
        making.rename(stale)
        resolve_cgroups(16, 64 * 1024**2)
        assert member.wait(60) == -signal.SIGKILL
    finally:
        member.kill()
        member.wait()
        deadline = time.monotonic() + 10
        for left in (making, stale):
            while left.exists() and time.monotonic() < deadline:
                try:
                    left.rmdir()
                except OSError:
                    with contextlib.suppress(OSError):
                        (left / "freezer.state").write_text("THAWED")
                    time.sleep(0.05)
    assert not stale.exists()
    assert not making.exists()
