"""Contract 12.1 against the real kernel and the real git, on both paths: what a contained
command writes into a protected path is never obeyed by the user's git outside.

Each case plants, from inside a contained call, a program git would run
(``core.fsmonitor``, a hook) that writes a marker file; the user's own ``git`` then runs
outside, after the call, and the marker must not exist. The namespace path refuses what
exists at start (read-only binds); what appears during the call, and everything on the
fallback path (Landlock and seccomp only), is put back at the join. The reproductions
are ``sandbox-attacks-round4.md``'s R5-2, R5-4 and R5-8.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._mcp._outputs import output_schema
from spice.agent.coding._posix import _bwrap, _facts
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._process import PosixProcess
from spice.agent.coding._posix._stage._stage import stage_place
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Outcome, Spec
from spice.agent.tools.coding import ProtectedPaths
from spice.agent.tools.coding._sandbox_fields import stage_fields

PYTHON: Final = os.path.realpath(sys.executable)
BOUND: Final = 60.0
"""Hang guard for one command or git run (never a timing assertion)."""
ABI: Final = landlock_abi()
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
GIT: Final = shutil.which("git")

pytestmark = pytest.mark.skipif(ABI < 1 or GIT is None, reason="needs Landlock and git")


def _stage_here() -> bool:
    """Whether this kernel lets the server mount a stage (``_stage.stage_place``'s probe)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as base:
        root = Path(base) / "root"
        root.mkdir()
        place = stage_place(str(root), {"HOME": base}, [str(root)])
        return place.staged


STAGED: Final = NAMESPACES.made and _stage_here()


@pytest.fixture(params=("namespaces", "fallback"))
def policy(request: pytest.FixtureRequest) -> Containment:
    """The ``workspace`` policy on one path; the namespace path skips where it cannot be."""
    if request.param == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    made = NAMESPACES if request.param == "namespaces" else Namespaces(None, "simulated")
    return dataclasses.replace(resolve_containment("workspace"), namespaces=made)


@pytest.fixture
def marker(visible_path: Path) -> Path:
    """The file only planted code writes (outside the worktree)."""
    return visible_path / "MARKER"


def _environment(home: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.invalid",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_PROTOCOL_FROM_USER": "1",
    }


def git(cwd: Path, home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The user's git, outside every sandbox."""
    assert GIT is not None
    return subprocess.run(
        [GIT, "-c", "protocol.file.allow=always", *arguments],
        cwd=cwd,
        env=_environment(home),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


def launcher(policy: Containment, root: Path, home: Path, **options: object) -> PosixLauncher:
    facts = _facts.start_facts(
        str(root),
        policy.allow_write,
        bwrap=policy.namespaces.bwrap,
        environ={"HOME": str(home)},
        cache=True,
        **options,  # type: ignore[arg-type]
    )
    return PosixLauncher.build(policy, str(root), facts=facts)


async def run(
    chosen: PosixLauncher, cwd: Path, home: Path, script: str
) -> tuple[Outcome, str, tuple[tuple[str, ...], int]]:
    """One contained ``sh -c script``: its outcome, output and what was put back."""
    out, err = Collect(), Collect()
    environment = tuple(f"{name}={value}" for name, value in _environment(home).items())
    spec = Spec("/bin/sh", ("-c", script), str(cwd), environment, b"", out, err)
    process = await chosen.start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return process.result(), out.data.decode() + err.data.decode(), held(process)


def held(process: object) -> tuple[tuple[str, ...], int]:
    """What the call's policy held back: on a staged call (contract 13.1) the changes its
    commit refused, else what the join's guard put back; the paths (at most 16) and how
    many."""
    fields = stage_fields(process)
    if fields.get("staged") is True:
        refused = fields.get("protected_refused", [])
        count = fields.get("protected_refused_count", 0)
        assert isinstance(refused, list)
        assert isinstance(count, int)
        return tuple(str(path) for path in refused), count
    assert isinstance(process, PosixProcess)
    return process.protected_restored


def staged(policy: Containment) -> bool:
    """Whether calls under ``policy`` are staged here (namespaces and an overlay)."""
    return policy.namespaces.made and STAGED


def _init(path: Path, home: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    assert git(path, home, "init", "-q", "-b", "main").returncode == 0
    (path / "a.txt").write_text("one\n")
    assert git(path, home, "add", "a.txt").returncode == 0
    assert git(path, home, "commit", "-q", "-m", "first").returncode == 0


def _ran(marker: Path) -> bool:
    """Whether planted code ran (it wrote ``marker``)."""
    return marker.exists()


def _monitor(marker: Path) -> str:
    """A shell line that writes ``marker`` (what a planted ``core.fsmonitor`` runs)."""
    return f"touch {marker}; false"


@pytest.fixture
def superproject(root: Path, home: Path, visible_path: Path) -> Path:
    """A repository at the root with one submodule (``sub``) whose git directory is
    ``.git/modules/sub``, and a linked worktree beside the root."""
    upstream = visible_path / "upstream"
    _init(upstream, home)
    _init(root, home)
    added = git(root, home, "submodule", "add", "-q", str(upstream), "sub")
    assert added.returncode == 0, added.stderr
    assert git(root, home, "commit", "-q", "-m", "sub").returncode == 0
    return root


def _planted(marker: Path) -> str:
    return f"[core]\n\tfsmonitor = {_monitor(marker)}\n"


async def test_a_submodules_config_and_hooks_run_nothing_later(
    policy: Containment, superproject: Path, home: Path, marker: Path
) -> None:
    """R5-2: ``.git/modules/sub/config`` (fsmonitor) and ``hooks/post-checkout`` written
    from inside; the top-level ``git status`` and ``git submodule update`` run outside."""
    modules = superproject / ".git" / "modules" / "sub"
    config = (modules / "config").read_bytes()
    script = (
        f"printf '{_planted(marker)}' >> .git/modules/sub/config; "
        "mkdir -p .git/modules/sub/hooks; "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > .git/modules/sub/hooks/post-checkout; "
        "chmod +x .git/modules/sub/hooks/post-checkout; echo DONE"
    )
    _, text, restored = await run(launcher(policy, superproject, home), superproject, home, script)
    assert "DONE" in text
    assert (modules / "config").read_bytes() == config
    assert not (modules / "hooks" / "post-checkout").exists()
    assert git(superproject, home, "status").returncode == 0
    update = git(superproject, home, "submodule", "update", "--checkout", "--force")
    assert update.returncode == 0, update.stderr
    assert not _ran(marker)
    if not policy.namespaces.made:
        assert ".git/modules/sub/config" in restored[0]
    assert restored[1] >= len(restored[0])


async def test_a_linked_worktrees_commondir_is_put_back(
    policy: Containment, superproject: Path, home: Path, marker: Path, visible_path: Path
) -> None:
    """R5-2: a linked worktree's ``commondir`` pointed at a copy with a planted config."""
    linked = visible_path / "linked"
    assert git(superproject, home, "worktree", "add", "-q", str(linked)).returncode == 0
    worktrees = superproject / ".git" / "worktrees" / "linked"
    commondir = (worktrees / "commondir").read_bytes()
    script = (
        "cp -r .git evil && "
        f"printf '{_planted(marker)}' >> evil/config && "
        f"echo {superproject}/evil > .git/worktrees/linked/commondir; echo DONE"
    )
    _, text, _ = await run(launcher(policy, superproject, home), superproject, home, script)
    assert "DONE" in text
    assert (worktrees / "commondir").read_bytes() == commondir
    assert git(linked, home, "status").returncode == 0
    assert not _ran(marker)


async def test_config_worktree_and_a_new_commondir_are_removed(
    policy: Containment, superproject: Path, home: Path, marker: Path
) -> None:
    """``.git/config.worktree``, ``.git/commondir``, ``objects/info/alternates`` made
    during the call are gone before the answer, which names them."""
    script = (
        f"printf '{_planted(marker)}' > .git/config.worktree; "
        "echo ../evil > .git/commondir; "
        "echo /nonexistent > .git/objects/info/alternates; echo DONE"
    )
    _, text, restored = await run(launcher(policy, superproject, home), superproject, home, script)
    assert "DONE" in text
    git_dir = superproject / ".git"
    for name in ("config.worktree", "commondir", "objects/info/alternates"):
        assert not (git_dir / name).exists(), name
    assert {".git/config.worktree", ".git/commondir", ".git/objects/info/alternates"} <= set(
        restored[0]
    )
    assert git(superproject, home, "status").returncode == 0
    assert not _ran(marker)


NEW_REPOSITORY: Final = (
    "set -e\n"
    "git init -q -b main\n"
    "echo two > b.txt\n"
    "git add b.txt\n"
    "git commit -q -m contained\n"
    "git remote add origin https://example.invalid/r.git\n"
    "git config core.fsmonitor '{monitor}'\n"
    "git config core.hooksPath /tmp\n"
    "git config remote.evil.url 'ext::sh -c touch% {marker}'\n"
    "printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit\n"
    "chmod +x .git/hooks/pre-commit\n"
    "echo DONE\n"
)


async def test_a_new_repository_keeps_what_runs_nothing(
    policy: Containment, root: Path, home: Path, marker: Path
) -> None:
    """R5-8: ``git init``, ``add``, ``commit`` and ``remote add`` at a root with no
    ``.git`` work; the fsmonitor, the hooks path, an ``ext::`` remote and the hook do not
    survive the join: the user's ``git status`` and ``git commit`` run nothing."""
    script = NEW_REPOSITORY.format(monitor=_monitor(marker), marker=marker)
    outcome, text, restored = await run(launcher(policy, root, home), root, home, script)
    assert outcome.successful, text
    assert "DONE" in text
    assert ".git/hooks" in restored[0]
    if not staged(policy):  # a staged commit keeps the config by the allow-list: no refusal
        assert ".git/config" in restored[0]
    log = git(root, home, "log", "--format=%s")
    assert log.stdout.split() == ["contained"]
    remote = git(root, home, "remote", "get-url", "origin")
    assert remote.stdout.strip() == "https://example.invalid/r.git"
    config = (root / ".git" / "config").read_text()
    assert "fsmonitor" not in config
    assert "hookspath" not in config.lower()
    assert "ext::" not in config
    assert git(root, home, "status").returncode == 0
    (root / "c.txt").write_text("three\n")
    assert git(root, home, "add", "c.txt").returncode == 0
    assert git(root, home, "commit", "-q", "-m", "outside").returncode == 0
    assert not _ran(marker)


async def test_mcp_json_and_claude_settings_are_put_back_by_their_bytes(
    policy: Containment, root: Path, home: Path
) -> None:
    """R5-8: a contained command inserting ``--sandbox off`` into ``.mcp.json`` and
    making ``.claude/settings.json``: the bytes are the user's again after the call."""
    mcp = root / ".mcp.json"
    original = json.dumps({"mcpServers": {"spice": {"command": "spice-coding"}}}).encode()
    mcp.write_bytes(original)
    mcp.chmod(0o644)
    script = (
        "sed -i 's/spice-coding/spice-coding --sandbox off/' .mcp.json; "
        "mkdir -p .claude && echo '{}' > .claude/settings.json; "
        "mkdir -p pkg && echo '{}' > pkg/.mcp.json; echo DONE"
    )
    _, text, restored = await run(launcher(policy, root, home), root, home, script)
    assert "DONE" in text
    assert mcp.read_bytes() == original
    assert not (root / ".claude").exists()
    assert not (root / "pkg" / ".mcp.json").exists()
    assert (root / "pkg").is_dir()  # what is not protected stays
    if policy.namespaces.made and not staged(policy):  # .mcp.json was read-only
        assert set(restored[0]) == {".claude", "pkg/.mcp.json"}
    else:
        assert set(restored[0]) == {".mcp.json", ".claude", "pkg/.mcp.json"}
    assert restored[1] == len(restored[0])


async def test_unprotect_gives_a_path_back_and_nothing_else(
    policy: Containment, root: Path, home: Path
) -> None:
    chosen = launcher(
        policy, root, home, protected=ProtectedPaths.default(unprotect=[str(root / ".vscode")])
    )
    script = "mkdir .vscode .idea && echo x > .vscode/tasks.json && echo x > .idea/a; echo DONE"
    _, text, restored = await run(chosen, root, home, script)
    assert "DONE" in text
    assert (root / ".vscode" / "tasks.json").read_text() == "x\n"
    assert not (root / ".idea").exists()
    assert restored == ((".idea",), 1)


async def test_nothing_protected_is_the_seeds_behaviour(
    policy: Containment, root: Path, home: Path
) -> None:
    chosen = launcher(policy, root, home, protected=ProtectedPaths())
    _, text, restored = await run(chosen, root, home, "echo x > .mcp.json; echo DONE")
    assert "DONE" in text
    assert (root / ".mcp.json").read_text() == "x\n"
    assert restored == ((), 0)


async def test_more_than_sixteen_put_back_are_counted(
    policy: Containment, root: Path, home: Path
) -> None:
    script = "for i in $(seq 1 20); do mkdir -p d$i && echo x > d$i/.envrc; done; echo DONE"
    _, text, restored = await run(launcher(policy, root, home), root, home, script)
    assert "DONE" in text
    assert len(restored[0]) == 16
    assert restored[1] == 20
    assert not any((root / f"d{index}" / ".envrc").exists() for index in range(1, 21))


async def test_concurrent_calls_share_one_baseline(
    policy: Containment, superproject: Path, home: Path, marker: Path
) -> None:
    """A call that plants while another runs: the later call's join does not take the
    planted config for the user's (one baseline for the server's concurrent calls)."""
    chosen = launcher(policy, superproject, home)
    config = (superproject / ".git" / "modules" / "sub" / "config").read_bytes()
    slow = asyncio.create_task(run(chosen, superproject, home, "sleep 1; echo SLOW"))
    await asyncio.sleep(0.2)
    plant = f"printf '{_planted(marker)}' >> .git/modules/sub/config; echo DONE"
    await run(chosen, superproject, home, plant)
    await slow
    assert (superproject / ".git" / "modules" / "sub" / "config").read_bytes() == config
    assert git(superproject, home, "status").returncode == 0
    assert not _ran(marker)


KILLED_SERVER: Final = """
import os, signal, sys
from spice.agent.coding._posix import _facts
from spice.agent.coding._posix._guard import Guard
root, home = sys.argv[1], sys.argv[2]
facts = _facts.start_facts(root, environ={"HOME": home}, cache=True)
guard = Guard([p.path for p in facts.places], facts.protected, facts.records)
guard.begin()
with open(os.path.join(root, ".git", "commondir"), "w") as file:
    file.write(sys.argv[3] + "\\n")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("repair", ["start", "call"])
async def test_a_killed_servers_commondir_is_put_back_by_the_next(
    policy: Containment, superproject: Path, home: Path, marker: Path, repair: str
) -> None:
    """R5-4: a server SIGKILLed while its call had planted ``.git/commondir`` (pointing at
    a copy with a planted config): the next server's start, or its first call, removes
    it from the record the dead one kept outside the worktree."""
    evil = superproject.parent / "evil-git"
    shutil.copytree(superproject / ".git", evil)
    with (evil / "config").open("a") as file:
        file.write(_planted(marker))
    killed = subprocess.run(  # noqa: ASYNC221 - the killed server, before any call
        [sys.executable, "-c", KILLED_SERVER, str(superproject), str(home), str(evil)],
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    commondir = superproject / ".git" / "commondir"
    assert commondir.exists()
    records = _facts.records_directory(
        str(superproject), {"HOME": str(home)}, [_facts.place_of(str(superproject))]
    )
    assert records is not None
    assert len(os.listdir(records)) == 1  # the dead server's, outside the worktree
    if repair == "start":
        launcher(policy, superproject, home)
    else:
        chosen = launcher(policy, superproject, home, protected=ProtectedPaths())
        assert commondir.exists()  # a server that protects nothing repairs nothing
        await run(launcher(policy, superproject, home), superproject, home, "true")
        del chosen
    assert not commondir.exists()
    assert os.listdir(records) == []
    assert git(superproject, home, "status").returncode == 0
    assert not _ran(marker)


async def test_the_record_is_outside_and_gone_after_the_call(
    policy: Containment, root: Path, home: Path
) -> None:
    chosen = launcher(policy, root, home)
    records = _facts.records_directory(str(root), {"HOME": str(home)}, [_facts.place_of(str(root))])
    assert records is not None
    assert not records.startswith(str(root))
    held = chosen.report()["protected"]
    assert isinstance(held, dict)
    assert held["record"] == records
    assert "put back" in str(held["how"])
    seen = await run(chosen, root, home, f"ls {records} 2>&1; echo x > {records}/y; echo DONE")
    assert "DONE" in seen[1]
    assert os.listdir(records) == []


def test_a_records_directory_beneath_a_writable_place_is_not_used(root: Path) -> None:
    """A home inside the worktree: a command could write the record, so none is kept."""
    home = root / "home"
    home.mkdir()
    place = _facts.place_of(str(root))
    assert _facts.records_directory(str(root), {"HOME": str(home)}, [place]) is None


SERVER_ENTRY: Final = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"


def _search_path(visible_path: Path, namespaces: bool) -> str:
    """The server's ``PATH``: the system's, or one without ``bwrap`` (the fallback for real)."""
    if namespaces:
        return "/usr/bin:/bin"
    tools = visible_path / "nobwrap"
    tools.mkdir()
    for name in ("sh", "cp", "printf", "sleep", "true"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    return str(tools)


def _stages(home: Path) -> list[Path]:
    """The call stages beneath ``home``'s state directory (contract 13.1)."""
    return sorted((home / ".local" / "state" / "spice-coding" / "stages").glob("*/call-*"))


def _planted_in(root: Path, home: Path, staged_here: bool) -> bool:
    """Whether the plant is in place: in the worktree, or in the call's stage."""
    names = (Path(".git") / "commondir", Path(".mcp.json"))
    if not staged_here:
        return all((root / name).exists() for name in names)
    return any(all((stage / "upper" / name).exists() for name in names) for stage in _stages(home))


@pytest.mark.parametrize("path", ["namespaces", "fallback"])
def test_a_real_server_killed_mid_call_leaves_nothing_a_later_git_obeys(
    path: str, superproject: Path, home: Path, marker: Path, visible_path: Path
) -> None:
    """R5-4 with the real server: ``call shell`` plants ``.git/commondir`` (to a copy with
    a planted ``core.fsmonitor``) and ``.mcp.json``, then sleeps; the server is SIGKILLed.
    The plant survives the kill; the next start (``tools``) puts it back, and the user's
    ``git status`` runs nothing."""
    if path == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    staged_here = path == "namespaces" and STAGED
    environment = {
        "PATH": _search_path(visible_path, path == "namespaces"),
        "HOME": str(home),
    }
    plant = (
        f"cp -r .git evil && printf '{_planted(marker)}' >> evil/config && "
        "echo ../evil > .git/commondir && echo '{}' > .mcp.json && sleep 60"
    )
    server = [sys.executable, "-c", SERVER_ENTRY, "--root", str(superproject)]
    arguments = json.dumps({"argv": ["/bin/sh", "-c", plant]})
    commondir = superproject / ".git" / "commondir"
    with subprocess.Popen(
        [*server, "--sandbox", "workspace", "call", "shell", arguments],
        cwd=superproject,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as first:
        try:
            for _ in range(int(BOUND / 0.05)):
                if _planted_in(superproject, home, staged_here):
                    break
                assert first.poll() is None, "the server ended before the plant"
                time.sleep(0.05)
        finally:
            first.kill()
            first.wait(BOUND)
    if staged_here:  # the plant lives in the killed call's stage: never in the worktree
        assert not commondir.exists()
        assert _stages(home)
    else:
        assert commondir.read_text() == "../evil\n"  # the kill left it
    second = subprocess.run(
        [*server, "--sandbox", "workspace", "tools"],
        cwd=superproject,
        env=environment,
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    assert second.returncode == 0, second.stderr
    assert not commondir.exists()
    assert not (superproject / ".mcp.json").exists()
    assert not _stages(home)  # the next start removed the killed server's stage
    assert git(superproject, home, "status").returncode == 0
    assert not _ran(marker)


@pytest.mark.parametrize("path", ["namespaces", "fallback"])
def test_the_shell_answer_names_what_was_put_back(
    path: str, root: Path, home: Path, visible_path: Path
) -> None:
    """Through the real CLI: the answer carries ``protected_restored`` and its count, and
    the output schema declares both."""
    if path == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    environment = {"PATH": _search_path(visible_path, path == "namespaces"), "HOME": str(home)}
    plant = json.dumps({"argv": ["/bin/sh", "-c", "printf x > .mcp.json"]})
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SERVER_ENTRY,
            "--root",
            str(root),
            "--sandbox",
            "workspace",
            "call",
            "shell",
            plant,
        ],
        cwd=root,
        env=environment,
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    answer = json.loads(done.stdout)
    assert (answer["ok"], answer["contained"]) == (True, True), answer
    if answer.get("staged") is True:
        assert (answer["protected_refused"], answer["protected_refused_count"]) == (
            [".mcp.json"],
            1,
        )
    else:
        assert (answer["protected_restored"], answer["protected_restored_count"]) == (
            [".mcp.json"],
            1,
        )
    assert not (root / ".mcp.json").exists()
    declared = output_schema("shell")["properties"]
    assert isinstance(declared, dict)
    assert {"protected_restored", "protected_restored_count"} <= set(declared)
    assert {"protected_refused", "protected_refused_count", "staged", "changes"} <= set(declared)
