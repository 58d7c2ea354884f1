"""Directory renames inside a stage (contract 13.1): an overlay in a user namespace
(``userxattr``: no ``redirect_dir``) refuses to rename a directory of its lower layer;
the stage's filter sends renames to the supervisor's ``_renames``, which carries them out.

Real parts: an overlay mounted in ``unshare -rm``, real git, real ``mv``, a real seccomp
listener (``stage_renames_support`` serves it as the supervisor does). Five sides:
positive (git mv, os.rename, mv, as root and as uid 65534), negative (files continue,
other mounts and places outside keep ``EXDEV``, rename's own errors), boundary (the
tree's bounds, at and one past), cancellation (the command killed mid-copy), failure (a
full upper, an unreadable file).
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix._containment import Containment
from spice.agent.coding._posix._supervisor import _landlock as landlock
from spice.agent.coding._posix._supervisor import _renames as renames
from spice.agent.coding._posix._supervisor import _seccomp as seccomp
from spice.agent.process import Outcome, Spec

SUPPORT = Path(__file__).resolve().parents[1] / "stage_renames_support.py"
NOBODY = 65534
AS_NOBODY = [
    "setpriv",
    f"--reuid={NOBODY}",
    f"--regid={NOBODY}",
    "--clear-groups",
    "--inh-caps=-all",
]
TIMEOUT = 120

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not renames.available() or not shutil.which("unshare"),
    reason="needs Linux with seccomp user notification and unshare",
)


def _git(lower: Path, *arguments: str) -> None:
    subprocess.run(
        ["git", "-C", str(lower), "-c", "user.name=u", "-c", "user.email=u@u", *arguments],
        check=True,
        capture_output=True,
    )


def _tree(root: Path, owner: int | None = None) -> Path:
    """``root/lower``: a git repository with a tracked ``pkg`` of every kind of entry."""
    lower = root / "lower"
    (lower / "pkg" / "sub").mkdir(parents=True)
    (lower / "pkg" / "empty").mkdir()
    (lower / "lib").mkdir()
    (lower / "pkg" / "m.py").write_text("x\n")
    (lower / "pkg" / "sub" / "s.py").write_text("s\n")
    (lower / "pkg" / "sub" / "s.py").chmod(0o755)
    (lower / "pkg" / "link").symlink_to("m.py")
    os.link(lower / "pkg" / "m.py", lower / "pkg" / "hard.py")
    (lower / "pkg" / "keep").write_text("k\n")
    (lower / "lib" / "l.py").write_text("l\n")
    (lower / "a.txt").write_text("a\n")
    _git(lower, "init", "-q", "-b", "master")
    _git(lower, "add", "-A")
    _git(lower, "commit", "-qm", "init")
    if owner is not None:
        for path in [root, *root.rglob("*")]:
            os.lchown(path, owner, owner)
    return lower


def _stage(
    root: Path, script: str, *options: str, user: list[str] | None = None, python: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (sh) in the stage's merged view of ``root/lower``."""
    command = [
        *(user or []),
        "unshare",
        "-rm",
        python or sys.executable,
        str(SUPPORT),
        *options,
        str(root),
        "--",
        "sh",
        "-c",
        script,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _nobody_python() -> str | None:
    """An interpreter uid 65534 can run that can read the support script (the venv's may
    live under ``/root``, the checkout beneath a directory only root may enter)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        probe = subprocess.run(
            [*AS_NOBODY, "unshare", "-rm", candidate, "-c", f"open({str(SUPPORT)!r}).close()"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return candidate
    return None


def _python(code: str) -> str:
    return f"{sys.executable} -c '{textwrap.dedent(code)}'"


def _listing(top: Path) -> list[tuple[str, str, int, str]]:
    """Each entry under ``top``: path, kind, mode, content or link target."""
    found = []
    for path in sorted(top.rglob("*")):
        info = path.lstat()
        kind = stat.S_IFMT(info.st_mode)
        data = (
            os.readlink(path) if path.is_symlink() else path.read_text() if path.is_file() else ""
        )
        found.append((str(path.relative_to(top)), oct(kind), stat.S_IMODE(info.st_mode), data))
    return found


@pytest.fixture
def root(tmp_path: Path) -> Path:
    probe = tmp_path / "probe"
    (probe / "lower").mkdir(parents=True)
    result = _stage(probe, "true")
    if result.returncode != 0:
        pytest.skip(f"no overlay in a user namespace here (rc {result.returncode})")
    return tmp_path / "stage"


def _whiteout(path: Path) -> bool:
    info = path.lstat()
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


# -- positive --------------------------------------------------------------------------


def test_without_the_stage_the_kernel_refuses_git_mv(root: Path) -> None:
    """The baseline the stage answers: git mv of a lower directory fails with EXDEV."""
    _tree(root)
    result = _stage(root, "git -c safe.directory='*' mv pkg pkg2", "--no-stage")
    assert result.returncode == 128
    assert "Invalid cross-device link" in result.stderr


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_git_mv_of_a_tracked_directory_works(
    root: Path, user: str, request: pytest.FixtureRequest
) -> None:
    owner = NOBODY if user == "nobody" and os.geteuid() == 0 else None
    python = ""
    if owner is not None:
        python = _nobody_python() or ""
        if not python:
            pytest.skip(
                f"uid {NOBODY} can run no Python interpreter that reads this checkout here "
                "(a clone beneath a directory only root may enter)"
            )
        scratch = Path(tempfile.mkdtemp(prefix="stage-renames-"))
        request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
        scratch.chmod(0o755)
        root = scratch / "stage"
    lower = _tree(root, owner)
    before = _listing(lower / "pkg")
    script = (
        "git -c safe.directory='*' mv pkg pkg2 && "
        "git -c safe.directory='*' -c user.name=u -c user.email=u@u commit -qm mv && "
        "git -c safe.directory='*' status --porcelain && echo STATUS-DONE && "
        "test ! -e pkg && stat -c '%i %h' pkg2/m.py pkg2/hard.py"
    )
    result = _stage(root, script, user=AS_NOBODY if owner else None, python=python)
    assert result.returncode == 0, result.stderr
    status, _, links = result.stdout.partition("STATUS-DONE\n")
    assert status == ""  # git status clean after the commit
    first, second = links.split("\n")[:2]
    assert first == second  # the hard link within the tree is kept
    upper = root / "layers" / "upper"
    assert _listing(upper / "pkg2") == before  # content, modes, symlink, empty dir
    assert _whiteout(upper / "pkg")
    mtime = (lower / "pkg" / "sub" / "s.py").stat().st_mtime_ns
    assert (upper / "pkg2" / "sub" / "s.py").stat().st_mtime_ns == mtime
    assert not list(upper.glob(renames.TEMPORARY_PREFIX + "*"))


@pytest.mark.parametrize(
    "script",
    [
        _python('import os; os.rename("pkg", "pkg2")'),
        "mv pkg pkg2",
        _python(
            'import os; d = os.open(".", os.O_RDONLY); '
            'os.rename("pkg", "pkg2", src_dir_fd=d, dst_dir_fd=d)'
        ),
        _python('import os; os.rename(os.path.abspath("pkg"), os.path.abspath("pkg2"))'),
    ],
    ids=["os.rename", "mv", "renameat", "absolute"],
)
def test_other_renames_work(root: Path, script: str) -> None:
    lower = _tree(root)
    result = _stage(root, script)
    assert result.returncode == 0, result.stderr
    upper = root / "layers" / "upper"
    assert _listing(upper / "pkg2") == _listing(lower / "pkg")
    assert _whiteout(upper / "pkg")


def test_an_empty_directory_destination_is_replaced(root: Path) -> None:
    lower = _tree(root)
    (lower / "target").mkdir()
    result = _stage(
        root, _python('import os; os.rename("pkg", "target"); print(sorted(os.listdir("target")))')
    )
    assert result.returncode == 0, result.stderr
    assert "m.py" in result.stdout


# -- negative --------------------------------------------------------------------------

_RENAMEAT2 = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
flags = int(sys.argv[3]) if len(sys.argv) > 3 else 0
rc = libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), flags)
print("errno", 0 if rc == 0 else ctypes.get_errno())
"""


def _renameat2(old: str, new: str, flags: int = 0) -> str:
    return f"{sys.executable} -c '{_RENAMEAT2}' {old} {new} {flags}"


@pytest.mark.parametrize(
    ("prepare", "old", "new", "flags", "expected"),
    [
        ("mkdir target", "pkg", "target", renames.RENAME_NOREPLACE, errno.EEXIST),
        ("", "pkg", "lib", 0, errno.ENOTEMPTY),
        ("", "pkg", "a.txt", 0, errno.ENOTDIR),
        ("", "pkg", "pkg/sub/inner", 0, errno.EINVAL),
        ("", "pkg", "lib", renames.RENAME_EXCHANGE, errno.EXDEV),
        ("", "pkg", "pkg2", renames.RENAME_WHITEOUT, errno.EINVAL),  # the overlay's own
        ("", "pkg", "missing/pkg2", 0, errno.ENOENT),
        ("", "pkg", "pkg", 0, 0),
        ("", "a.txt", "b.txt", 0, 0),
        ("", "a.txt", "b.txt", renames.RENAME_NOREPLACE, 0),
        ("", "pkg", "pkg2", renames.RENAME_NOREPLACE, 0),
    ],
    ids=[
        "noreplace",
        "not-empty",
        "file-destination",
        "inside-itself",
        "exchange",
        "whiteout",
        "no-parent",
        "itself",
        "file",
        "file-noreplace",
        "dir-noreplace-free",
    ],
)
def test_rename_semantics(
    root: Path, prepare: str, old: str, new: str, flags: int, expected: int
) -> None:
    _tree(root)
    script = (f"{prepare} && " if prepare else "") + _renameat2(old, new, flags)
    result = _stage(root, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["errno", str(expected)]
    if expected:
        upper = root / "layers" / "upper"
        assert not (upper / "pkg").exists()  # the source untouched
        assert not list(upper.glob(renames.TEMPORARY_PREFIX + "*"))


def test_a_file_rename_is_left_to_the_kernel(root: Path) -> None:
    _tree(root)
    result = _stage(root, "mv a.txt b.txt && cat b.txt")
    assert result.returncode == 0, result.stderr
    upper = root / "layers" / "upper"
    assert (upper / "b.txt").read_text() == "a\n"
    assert _whiteout(upper / "a.txt")


@pytest.mark.parametrize(
    "new", ["other/pkg", "/tmp/stage-renames-outside"], ids=["other-mount", "outside"]
)
def test_a_rename_off_the_overlay_keeps_exdev(root: Path, new: str) -> None:
    _tree(root)
    result = _stage(root, _renameat2("pkg", new), "--other-mount")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["errno", str(errno.EXDEV)]
    assert not Path("/tmp/stage-renames-outside").exists()


def test_landlock_binds_the_helper_as_it_binds_the_command(root: Path) -> None:
    """The helper enters the command's ruleset: only ``lib/`` is writable, so moving
    ``pkg`` into it is refused (removing ``pkg`` is not the command's to do)."""
    if landlock.landlock_abi() < 2:
        pytest.skip("no Landlock here")
    _tree(root)
    merged = root / "merged"
    result = _stage(
        root,
        _renameat2("pkg", "lib/pkg") + "; " + _renameat2("lib/l.py", "lib/m.py"),
        "--landlock",
        str(merged / "lib"),
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.split("\n")[:2]
    assert first in {f"errno {errno.EACCES}", f"errno {errno.EXDEV}"}
    assert second == "errno 0"
    upper = root / "layers" / "upper"
    assert not (upper / "lib" / "pkg").exists()
    assert not (upper / "pkg").exists()


# -- boundary --------------------------------------------------------------------------


def _sizes(top: Path) -> tuple[int, int]:
    paths = list(top.rglob("*"))
    data = sum(p.lstat().st_size for p in paths if p.is_file() and not p.is_symlink())
    return len(paths) + 1, data


def _remove_layers(layers: Path) -> None:
    """Remove a stage's layers: the overlay leaves its work directory without permissions
    (``d---------``), which only root may enter, so its owner opens it again first."""
    for path in [layers, *layers.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o700)
    shutil.rmtree(layers)


@pytest.mark.parametrize("option", ["--entries-max", "--bytes-max"])
def test_the_tree_bounds_at_and_past(root: Path, option: str) -> None:
    lower = _tree(root)
    entries, data = _sizes(lower / "pkg")
    bound = entries if option == "--entries-max" else data
    at = _stage(root, _renameat2("pkg", "pkg2"), option, str(bound))
    assert at.stdout.split() == ["errno", "0"], at.stderr
    _remove_layers(root / "layers")
    shutil.rmtree(root / "merged")
    past = _stage(root, _renameat2("pkg", "pkg2"), option, str(bound - 1))
    assert past.stdout.split() == ["errno", str(errno.EXDEV)], past.stderr
    assert not (root / "layers" / "upper" / "pkg2").exists()


def test_the_named_bounds() -> None:
    assert renames.PATH_MAX == 4096
    assert renames.TREE_ENTRIES_MAX > 0
    assert renames.TREE_BYTES_MAX > 0
    assert 0 < renames.POLL_SECONDS < renames.NOTIFICATION_SECONDS
    table = seccomp.architecture()
    assert table is not None
    assert len(renames.numbers(table)) == (3 if table.name == "x86_64" else 2)


# -- cancellation ----------------------------------------------------------------------


def test_a_command_killed_mid_copy_leaves_no_tree(root: Path) -> None:
    lower = _tree(root)
    result = _stage(root, "exec " + _renameat2("pkg", "pkg2"), "--kill-while-copying")
    assert result.returncode == 128 + 9
    upper = root / "layers" / "upper"
    assert not (upper / "pkg2").exists()
    assert not (upper / "pkg").exists()
    assert not list(upper.glob(renames.TEMPORARY_PREFIX + "*"))
    assert (lower / "pkg" / "m.py").read_text() == "x\n"


# -- failure ---------------------------------------------------------------------------


def test_a_full_upper_answers_enospc_and_leaves_nothing(root: Path) -> None:
    lower = _tree(root)
    (lower / "pkg" / "big.bin").write_bytes(os.urandom(1 << 20))
    result = _stage(root, _renameat2("pkg", "pkg2"), "--tmpfs-upper", "256k")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["errno", str(errno.ENOSPC)]
    # The tmpfs is gone with the namespace: what the command saw is checked inside.
    check = _stage(
        root,
        _renameat2("pkg", "pkg2") + "; ls -A; ls pkg",
        "--tmpfs-upper",
        "256k",
    )
    lines = check.stdout.split("\n")
    assert lines[0] == f"errno {errno.ENOSPC}"
    assert not any(line.startswith((renames.TEMPORARY_PREFIX, "pkg2")) for line in lines[1:])
    assert "m.py" in lines


def test_an_unreadable_file_answers_eacces_and_leaves_nothing(root: Path) -> None:
    lower = _tree(root)
    (lower / "pkg" / "secret").write_text("s\n")
    (lower / "pkg" / "secret").chmod(0)
    result = _stage(root, _renameat2("pkg", "pkg2") + "; ls -A")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == f"errno {errno.EACCES}"
    assert "pkg" in lines
    assert "pkg2" not in lines
    upper = root / "layers" / "upper"
    assert not (upper / "pkg2").exists()
    assert not list(upper.glob(renames.TEMPORARY_PREFIX + "*"))


# -- the real supervisor -----------------------------------------------------------------


async def test_the_supervisor_serves_its_commands_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``STAGE`` the supervisor's command runs under the listener (``Seccomp: 2``)
    and every rename is answered (here on no overlay: the kernel's, by ``CONTINUE``); a
    supervisor that served none would leave the command blocked past the bound."""
    if landlock.landlock_abi() < 1 or not seccomp.available():
        pytest.skip("needs Landlock and seccomp")
    staged = Containment.layers.fget  # type: ignore[attr-defined]
    monkeypatch.setattr(Containment, "layers", property(lambda self: staged(self) | landlock.STAGE))
    policy = Containment("workspace", "workspace", landlock.landlock_abi(), seccomp=True)
    (tmp_path / "d" / "inner").mkdir(parents=True)
    script = (
        "mv d e && mv e/inner e/moved && mkdir f && "
        f'{sys.executable} -c \'import os; os.rename("f", "g")\' && '
        "ls && grep Seccomp: /proc/self/status"
    )
    out, err = Collect(), Collect()
    spec = Spec("/bin/sh", ("-c", script), str(tmp_path), ("PATH=/usr/bin:/bin",), b"", out, err)
    process = await PosixLauncher.build(policy, str(tmp_path)).start(spec)
    try:
        async with asyncio.timeout(60):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(60):
            await process.wait()
    assert process.result() == Outcome.exited(0), err.data
    assert out.data.decode().split() == ["e", "g", "Seccomp:", "2"]
    assert (tmp_path / "e" / "moved").is_dir()


def test_a_failed_removal_puts_the_source_back(root: Path) -> None:
    """The source's removal fails part-way (injected): what it took comes back from the
    copy, the copy goes, the errno is answered."""
    _tree(root)
    result = _stage(root, _renameat2("pkg", "pkg2") + "; ls -A; cat pkg/m.py", "--fail-removal")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == f"errno {errno.EIO}"
    assert "pkg2" not in lines
    assert lines[-2] == "x"  # m.py is back
    assert not list((root / "layers" / "upper").glob(renames.TEMPORARY_PREFIX + "*"))


def test_past_the_notification_deadline_the_answer_is_exdev(root: Path) -> None:
    _tree(root)
    result = _stage(root, _renameat2("pkg", "pkg2"), "--notification-seconds", "0")
    assert result.stdout.split() == ["errno", str(errno.EXDEV)], result.stderr
    upper = root / "layers" / "upper"
    assert not (upper / "pkg2").exists()
    assert not list(upper.glob(renames.TEMPORARY_PREFIX + "*"))
