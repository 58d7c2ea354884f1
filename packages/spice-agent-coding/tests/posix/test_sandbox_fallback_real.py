"""The fallback path for real: a server that inherits a seccomp filter forbidding namespaces.

The other sandbox tests reach the fallback through the seam (``Namespaces(None, ...)``,
what ``resolve_namespaces`` gives a host without them). Here nothing is simulated: the
real ``spice-coding`` starts under a filter (installed in the child before ``exec``, so
the server, its probe and every ``bwrap`` it starts inherit it) that refuses ``unshare``
and any ``clone`` asking for a namespace, as a container runtime's default profile does.
The server must find out by itself, say so in ``tools``, and still confine writes with
Landlock and its own filter. The same commands without the filter take the namespace path,
so the filter is what makes the difference (the test is not vacuous).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._supervisor import _seccomp as seccomp
from spice.agent.coding._posix._supervisor._landlock import landlock_abi

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
BOUND: Final = 120
"""Hang guard for one CLI run (never a timing assertion)."""

NAMESPACE_FLAGS: Final = 0x7E02_0000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
SYSCALLS: Final = {
    # name: (unshare, clone, clone3)
    "x86_64": (272, 56, 435),
    "aarch64": (97, 220, 435),
}
ENOSYS: Final = 38

_ARCH = seccomp.architecture()
_NAMESPACES = _bwrap.resolve_namespaces("/tmp")

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="seccomp and Landlock are Linux's"),
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
    pytest.mark.skipif(
        _ARCH is None or _ARCH.name not in SYSCALLS, reason="no system-call table for this machine"
    ),
    pytest.mark.skipif(not seccomp.available(), reason="seccomp filters cannot be installed here"),
    pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed"),
]


def _forbidding_program() -> bytes:
    """BPF: ``unshare`` and ``clone`` with a namespace flag get EPERM, ``clone3`` ENOSYS
    (so the C library falls back to ``clone``, which is then judged); all else is allowed.
    A foreign architecture is allowed too (the server's own filter judges those)."""
    assert _ARCH is not None
    unshare, clone, clone3 = SYSCALLS[_ARCH.name]
    i = seccomp.INSTRUCTION.pack
    eperm = seccomp.SECCOMP_RET_ERRNO | 1
    program = [
        i(seccomp.BPF_LD_W_ABS, 0, 0, seccomp.OFFSET_ARCH),
        i(seccomp.BPF_JMP_JEQ_K, 0, 8, _ARCH.audit),  # foreign: to ALLOW
        i(seccomp.BPF_LD_W_ABS, 0, 0, seccomp.OFFSET_NR),
        i(seccomp.BPF_JMP_JEQ_K, 6, 0, unshare),  # to EPERM
        i(seccomp.BPF_JMP_JEQ_K, 0, 1, clone3),
        i(seccomp.BPF_RET_K, 0, 0, seccomp.SECCOMP_RET_ERRNO | ENOSYS),
        i(seccomp.BPF_JMP_JEQ_K, 0, 3, clone),  # not clone: to ALLOW
        i(seccomp.BPF_LD_W_ABS, 0, 0, seccomp.offset_argument(0)),
        i(seccomp.BPF_ALU_AND_K, 0, 0, NAMESPACE_FLAGS),
        i(seccomp.BPF_JMP_JEQ_K, 0, 1, 0),  # no flag: ALLOW, else EPERM
        i(seccomp.BPF_RET_K, 0, 0, seccomp.SECCOMP_RET_ALLOW),
        i(seccomp.BPF_RET_K, 0, 0, eperm),
    ]
    return b"".join(program)


def _run(*argv: str, forbid: bool, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    program = _forbidding_program()

    def inherit_the_filter() -> None:
        seccomp.install(program)

    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    return subprocess.run(
        [str(SCRIPT), *argv],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
        preexec_fn=inherit_the_filter if forbid else None,
    )


@pytest.fixture
def place(visible_path: Path) -> tuple[Path, Path, Path]:
    """A worktree, a directory beside it and a home with a planted credential."""
    root, outside, home = (visible_path / name for name in ("root", "outside", "home"))
    for path in (root, outside, home / ".ssh"):
        path.mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("planted secret\n")
    return root, outside, home


def _tools(root: Path, home: Path, *, forbid: bool) -> dict[str, object]:
    done = _run(
        "tools", "--root", str(root), "--sandbox", "workspace", forbid=forbid, cwd=root, home=home
    )
    assert 0 == done.returncode, done.stderr
    sandbox = json.loads(done.stdout)["sandbox"]
    assert isinstance(sandbox, dict)
    return sandbox


def _shell(root: Path, home: Path, script: str, *, forbid: bool) -> dict[str, Any]:
    """``spice-coding call shell`` of ``/bin/sh -c script``, contained; its answer."""
    arguments = json.dumps({"argv": ["/bin/sh", "-c", script]})
    argv = ("--root", str(root), "--sandbox", "workspace", "call", "shell", arguments)
    done = _run(*argv, forbid=forbid, cwd=root, home=home)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_tools_finds_the_namespaces_forbidden_and_says_what_is_left(
    place: tuple[Path, Path, Path],
) -> None:
    root, _, home = place
    forbidden = _tools(root, home, forbid=True)
    layers = forbidden["layers"]
    assert isinstance(layers, dict)
    assert False is layers["namespaces"]["made"]
    assert layers["namespaces"].get("reason")
    assert forbidden["seccomp"], "the server's own filter still applies"
    not_confined = " ".join(map(str, forbidden["not_confined"]))  # type: ignore[call-overload]
    assert "reads" in not_confined
    if not _NAMESPACES.made:
        pytest.skip(f"without the filter there are no namespaces either: {_NAMESPACES.reason}")
    allowed = _tools(root, home, forbid=False)
    assert True is allowed["layers"]["namespaces"]["made"]  # type: ignore[index]


def test_a_call_under_the_filter_writes_inside_only_and_reads_what_namespaces_would_hide(
    place: tuple[Path, Path, Path],
) -> None:
    """Writes inside the worktree land, writes beside it are refused (Landlock); the
    planted credential is readable (no mount namespace to hide it), as tools said."""
    root, outside, home = place
    script = (
        f"echo in > {root}/made; "
        f"echo out > {outside}/made 2>/dev/null || echo refused; "
        f"cat {home}/.ssh/id_ed25519"
    )
    answer = _shell(root, home, script, forbid=True)
    assert 0 == answer["exit_code"], answer
    assert "in\n" == (root / "made").read_text()
    assert not (outside / "made").exists()
    assert "refused" in answer["stdout"]
    assert "planted secret" in answer["stdout"]
    if not _NAMESPACES.made:
        return
    hidden = _shell(root, home, script, forbid=False)
    assert "planted secret" not in hidden["stdout"], "with namespaces the credential is hidden"


def test_a_filter_the_kernel_refuses_is_a_failed_start_of_the_test_itself() -> None:
    """The helper's own failure side: a program that is not whole instructions."""
    with pytest.raises(ValueError, match="not a filter program"):
        seccomp.install(_forbidding_program()[:-1])
