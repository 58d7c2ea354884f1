"""`make dist` and the installs the README shows, each proven with no package index.

The build is the script `make dist` runs (`scripts/build_dist.py`), into directories the
tests own. The installs (pip into an empty environment, `uv tool install`, `pipx install`,
`uvx --from git+file://...`) resolve every package from local directories: our three
distributions from the build, the third-party ones from the locked wheelhouse that `make
bootstrap` fetched (standing in for PyPI, which a user would have). `--no-index` (and
`UV_OFFLINE=1`) makes an index unreachable, so a test passes only if the local files suffice.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Final

import pytest
from dist_support import (
    BUILD_SCRIPT,
    REPOSITORY,
    TOOLS,
    Served,
    base_python,
    build_dist,
    contained_or_skip,
    quiet_environment,
    release_names,
    release_version,
    run,
    served,
    wheelhouse_or_skip,
)

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="the installs use POSIX environments (bin/)"
)

APP: Final = "spice-agent-coding"
SIBLINGS: Final = ("spice-agent-api", "spice-agent-tools-coding")


def wheel_named(dist: Path, distribution: str) -> Path:
    [wheel] = dist.glob(distribution.replace("-", "_") + "-*.whl")
    return wheel


def clone(tmp_path: Path) -> Path:
    """A clone of this repository's last commit (what a user's `git clone` would hold)."""
    target = tmp_path / "clone"
    done = run(["git", "clone", "--quiet", "--no-hardlinks", str(REPOSITORY), str(target)])
    if done.returncode != 0:
        pytest.skip("this checkout cannot be cloned with git")
    return target


# --- the build -------------------------------------------------------------------------


def test_dist_builds_exactly_the_release_files_and_the_same_bytes_twice(tmp_path: Path) -> None:
    """One wheel and one sdist per distribution; a second build is identical, byte for byte."""
    first = build_dist(tmp_path / "first")
    second = build_dist(tmp_path / "second")
    assert release_names() == first == second
    for name in first:
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()


def test_dist_wheels_carry_the_release_version_and_pin_their_siblings(tmp_path: Path) -> None:
    """The app's wheel names both siblings at the one version: they must come from dist/."""
    dist = tmp_path / "dist"
    build_dist(dist)
    version = release_version()
    with zipfile.ZipFile(wheel_named(dist, APP)) as wheel:
        [meta] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        text = wheel.read(meta).decode("utf-8")
    assert f"Version: {version}\n" in text
    for sibling in SIBLINGS:
        assert f"Requires-Dist: {sibling}=={version}\n" in text


def test_dist_builds_what_git_tracks_as_it_stands(tmp_path: Path) -> None:
    """An edit to a tracked file is built; an untracked file beside it is not."""
    source = clone(tmp_path)
    package = source / "packages" / "spice-agent-api" / "src" / "spice" / "agent" / "tool"
    marker = "# edited after the last commit\n"
    tracked = package / "__init__.py"
    tracked.write_text(tracked.read_text(encoding="utf-8") + marker, encoding="utf-8")
    (package / "stray.py").write_text("STRAY = 1\n", encoding="utf-8")
    dist = tmp_path / "dist"
    build_dist(dist, source / "scripts" / "build_dist.py")
    with zipfile.ZipFile(wheel_named(dist, "spice-agent-api")) as wheel:
        names = wheel.namelist()
        built = wheel.read("spice/agent/tool/__init__.py").decode("utf-8")
    with tarfile.open(next(dist.glob("spice_agent_api-*.tar.gz"))) as sdist:
        sdist_names = sdist.getnames()
    assert built.endswith(marker)
    assert "spice/agent/tool/stray.py" not in names
    assert not [n for n in sdist_names if n.endswith("stray.py")]
    assert not [n for n in names + sdist_names if "__pycache__" in n or n.endswith(".pyc")]


def test_dist_replaces_what_the_output_held(tmp_path: Path) -> None:
    """An older build's files do not survive next to the new ones (find-links would see them)."""
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "spice_agent_coding-0.0.1-py3-none-any.whl").write_bytes(b"old")
    assert release_names() == build_dist(dist)
    assert {".gitignore", *release_names()} == {p.name for p in dist.iterdir()}


def test_a_failed_dist_leaves_the_previous_one_and_no_scratch(tmp_path: Path) -> None:
    """A release file that disagrees with the build fails the build; dist/ is left as it was."""
    source = clone(tmp_path)
    dist = tmp_path / "dist"
    build_dist(dist, source / "scripts" / "build_dist.py")
    before = {p.name: p.read_bytes() for p in dist.iterdir()}
    release = source / "spice-release.json"
    release.write_text(
        release.read_text(encoding="utf-8").replace('"version": "0.1.0"', '"version": "9.9.9"'),
        encoding="utf-8",
    )
    done = run([sys.executable, str(source / "scripts" / "build_dist.py"), "--out", str(dist)])
    assert 1 == done.returncode
    assert "make dist: the build did not make exactly the files" in done.stderr
    assert before == {p.name: p.read_bytes() for p in dist.iterdir()}
    assert not list(tmp_path.glob(".dist-*"))


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SOURCE_DATE_EPOCH", "yesterday", "SOURCE_DATE_EPOCH is not a number"),
        ("UV", "/nonexistent/uv", "/nonexistent/uv cannot be run"),
    ],
)
def test_a_bad_environment_fails_the_build_by_name(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    """A bad epoch or a missing uv fails in one line naming it, and makes no dist/."""
    env = {**os.environ, variable: value}
    done = run([sys.executable, str(BUILD_SCRIPT), "--out", str(tmp_path / "dist")], env=env)
    assert 1 == done.returncode
    assert done.stderr.startswith(f"make dist: {message}")
    assert 1 == done.stderr.count("\n")
    assert [] == list(tmp_path.iterdir())


def test_dist_and_the_wheelhouse_are_ignored_by_git() -> None:
    """Build output never shows up as something to commit."""
    for path in ("dist/x.whl", ".wheelhouse/x.whl", ".dist-abc/x", ".wheelhouse.tmp/x"):
        assert 0 == run(["git", "check-ignore", "-q", path], cwd=REPOSITORY).returncode, path
    assert 1 == run(["git", "check-ignore", "-q", "scripts/x.py"], cwd=REPOSITORY).returncode


def test_make_dist_runs_this_build() -> None:
    """`make dist` is the script these tests run, writing to dist/, after the pinned uv."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = run(["make", "-n", "dist"], cwd=REPOSITORY)
    assert 0 == done.returncode
    assert f"python3 {BUILD_SCRIPT.relative_to(REPOSITORY)} --out dist" in done.stdout
    assert done.stdout.index("uv==") < done.stdout.index("build_dist.py")


def pinned_uv() -> str:
    """The uv version the Makefile pins (UV_VERSION)."""
    text = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^UV_VERSION := (\S+)$", text, re.MULTILINE)
    assert found is not None
    return found.group(1)


BARE_PATH: Final = "/usr/bin:/bin"
"""Where a machine with only python3, pip, make and git keeps them (no uv)."""


def bare_clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A clone with this checkout's Makefile and .gitignore; an environment with no uv on PATH."""
    if shutil.which("uv", path=BARE_PATH) is not None:
        pytest.skip(f"uv is installed in {BARE_PATH}: the bare machine cannot be shown here")
    for tool in ("python3", "make", "git"):
        if shutil.which(tool, path=BARE_PATH) is None:
            pytest.skip(f"{tool} is not in {BARE_PATH}")
    if 0 != run(["python3", "-m", "pip", "--version"], env={"PATH": BARE_PATH}).returncode:
        pytest.skip(f"the python3 in {BARE_PATH} has no pip")
    source = clone(tmp_path)
    for name in ("Makefile", ".gitignore"):
        shutil.copy2(REPOSITORY / name, source / name)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": BARE_PATH, "HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    return source, env


@pytest.mark.slow
def test_make_dist_works_with_only_python3_pip_make_and_git(tmp_path: Path) -> None:
    """With no uv on PATH, `make dist` installs the pinned uv beneath .tools/ with pip (from
    the wheelhouse's copy of PyPI's wheel: no index) and builds the release files; a second
    run installs nothing and makes the same bytes."""
    tools = REPOSITORY / ".wheelhouse" / "tools"
    if not list(tools.glob("uv-*.whl")):
        pytest.skip("no uv wheel in .wheelhouse/tools: run `make bootstrap` once with PyPI")
    source, env = bare_clone(tmp_path)
    env["PIP_FIND_LINKS"] = str(tools)
    first = run(["make", "--no-print-directory", "dist"], env=env, cwd=source)
    assert 0 == first.returncode, first.stderr
    names = sorted(p.name for p in (source / "dist").iterdir() if p.name != ".gitignore")
    assert release_names() == names
    [uv] = (source / ".tools").glob("uv-*/bin/uv")
    built = {name: (source / "dist" / name).read_bytes() for name in names}
    env["PIP_FIND_LINKS"] = str(tmp_path / "nothing")  # a second install would fail
    second = run(["make", "--no-print-directory", "dist"], env=env, cwd=source)
    assert 0 == second.returncode, second.stderr
    assert "pip" not in second.stdout
    assert built == {name: (source / "dist" / name).read_bytes() for name in names}
    assert uv.is_file()
    assert 0 == run(["git", "status", "--porcelain"], cwd=source).stdout.count(".tools")


@pytest.mark.slow
def test_make_dist_without_uv_or_an_index_fails_in_one_line(tmp_path: Path) -> None:
    """Where pip cannot get uv either, `make dist` fails naming what it needs, builds nothing
    and leaves no half-installed uv."""
    source, env = bare_clone(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    env["PIP_FIND_LINKS"] = str(empty)
    done = run(["make", "--no-print-directory", "dist"], env=env, cwd=source)
    assert 0 != done.returncode
    wanted = f"uv {pinned_uv()} could not be installed with python3 -m pip (it needs PyPI once)"
    assert wanted in done.stderr
    assert not (source / "dist").exists()
    assert [] == list(source.glob(".tools/*"))


def test_make_dist_refuses_a_given_uv_of_another_version(tmp_path: Path) -> None:
    """A UV the caller names that is not the pinned version is refused by name, not replaced."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    fake = tmp_path / "uv"
    fake.write_text("#!/bin/sh\necho uv 0.0.1\n", encoding="utf-8")
    fake.chmod(0o755)
    done = run(["make", "--no-print-directory", "dist", f"UV={fake}"], cwd=REPOSITORY)
    assert 0 != done.returncode
    assert f"UV={fake} is not uv {pinned_uv()}" in done.stderr


# --- installs with no index --------------------------------------------------------------


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("built") / "dist"
    build_dist(out)
    return out


def pip_environment(tmp_path: Path) -> Path:
    """An empty virtual environment (pip only) from the base interpreter."""
    venv = tmp_path / "venv"
    done = run([base_python(), "-m", "venv", str(venv)], env=quiet_environment())
    if done.returncode != 0:
        pytest.skip("the base interpreter cannot make a virtual environment with pip")
    return venv


def pip_install(venv: Path) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip", "install"]


def find_links(*directories: Path) -> list[str]:
    """No index at all: only these directories."""
    links = ["--no-index"]
    for directory in directories:
        links += ["--find-links", str(directory)]
    return links


def distributions_in(venv: Path) -> dict[str, str]:
    """Name -> version of what is installed in ``venv``, read by its own interpreter."""
    probe = (
        "import importlib.metadata as m\n"
        "for d in m.distributions(): print(d.metadata['Name'], d.version)\n"
    )
    done = run([str(venv / "bin" / "python"), "-c", probe])
    assert 0 == done.returncode
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


@pytest.mark.slow
async def test_pip_installs_the_app_from_dist_with_no_index_and_it_serves(
    dist: Path, tmp_path: Path
) -> None:
    """`pip install --no-index --find-links dist spice-agent-coding` into an empty environment:
    the siblings come from dist/, and the installed server answers MCP `tools/list`."""
    wheelhouse = wheelhouse_or_skip()
    venv = pip_environment(tmp_path)
    before = distributions_in(venv)
    done = run([*pip_install(venv), *find_links(dist, wheelhouse), APP], env=quiet_environment())
    assert 0 == done.returncode, done.stderr
    installed = distributions_in(venv)
    version = release_version()
    assert not {APP, *SIBLINGS} & set(before)
    assert dict.fromkeys((APP, *SIBLINGS), version) == {
        name: installed[name] for name in (APP, *SIBLINGS)
    }
    tree = tmp_path / "tree"
    tree.mkdir()
    answered = await served([str(venv / "bin" / "spice-coding")], tree)
    assert Served(TOOLS, "hello\n", contained_or_skip()) == answered


@pytest.mark.slow
def test_the_app_wheel_alone_does_not_install_with_no_index(dist: Path, tmp_path: Path) -> None:
    """Without its siblings beside it the app cannot install (why dist/ holds all three)."""
    wheelhouse = wheelhouse_or_skip()
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(wheel_named(dist, APP), alone)
    venv = pip_environment(tmp_path)
    done = run([*pip_install(venv), *find_links(alone, wheelhouse), APP], env=quiet_environment())
    assert 0 != done.returncode
    assert "spice-agent-api" in done.stderr or "spice-agent-tools-coding" in done.stderr
    assert APP not in distributions_in(venv)


def uv_command(name: str = "uv") -> str:
    """The pinned ``uv`` (or ``uvx``): beside the uv that runs the suite (``uv run`` names it
    in ``UV``; on a machine without uv, ``make`` keeps it beneath ``.tools/``), else the
    one on PATH; the test skips without either."""
    given = os.environ.get("UV")
    if given:
        beside = Path(given).with_name(name)
        if beside.is_file():
            return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not on PATH (make bootstrap installs it)")
    return found


def uv_tool_environment(tmp_path: Path, cache: Path) -> dict[str, str]:
    """Offline, scratch tool directories, uv's cache at ``cache``, uv's default link mode."""
    return quiet_environment(
        UV_OFFLINE="1",
        UV_TOOL_DIR=str(tmp_path / "tools"),
        UV_TOOL_BIN_DIR=str(tmp_path / "bin"),
        UV_CACHE_DIR=str(cache),
        UV_PYTHON_DOWNLOADS="never",
    )


def linked_server_files(prefix: Path) -> list[Path]:
    """The application's installed modules under ``prefix`` that are hard links (uv's cache)."""
    modules = prefix.glob("**/site-packages/spice/agent/coding/**/*.py")
    return [path for path in modules if path.stat().st_nlink > 1]


def uv_tool_install(tmp_path: Path, dist: Path, wheelhouse: Path, cache: Path) -> Path:
    """The README's `uv tool install --find-links dist spice-agent-coding`, uv's link mode as
    it comes (hard links from its cache); the installed `spice-coding`."""
    done = run(
        [
            uv_command(),
            "tool",
            "install",
            "--python",
            base_python(),
            *find_links(dist, wheelhouse),
            APP,
        ],
        env=uv_tool_environment(tmp_path, cache),
    )
    assert 0 == done.returncode, done.stderr
    return tmp_path / "bin" / "spice-coding"


@pytest.mark.slow
async def test_uv_tool_install_from_dist_with_no_index(dist: Path, tmp_path: Path) -> None:
    """`uv tool install --find-links dist spice-agent-coding`, offline, into scratch tool dirs:
    its modules are hard links into uv's cache, which no call can write, so the server
    contains its commands (contract 12.2)."""
    wheelhouse = wheelhouse_or_skip()
    script = uv_tool_install(tmp_path, dist, wheelhouse, tmp_path / "cache")
    version = run([str(script), "--version"])
    assert f"spice-coding {release_version()}\n" == version.stdout
    assert linked_server_files(tmp_path / "tools")
    tree = tmp_path / "tree"
    tree.mkdir()
    assert Served(TOOLS, "hello\n", contained_or_skip()) == await served([str(script)], tree)


@pytest.mark.slow
async def test_uv_tool_install_linked_from_a_cache_in_the_worktree_is_not_contained(
    dist: Path, tmp_path: Path
) -> None:
    """The same install with uv's cache beneath the worktree root: a call could write the
    server's own modules through the cache's links, so `auto` answers `contained: false`
    and `workspace` refuses to start, naming the file and UV_LINK_MODE=copy."""
    wheelhouse = wheelhouse_or_skip()
    tree = tmp_path / "tree"
    tree.mkdir()
    script = uv_tool_install(tmp_path, dist, wheelhouse, tree / ".uv-cache")
    assert linked_server_files(tmp_path / "tools")
    contained_or_skip()
    assert Served(TOOLS, "hello\n", contained=False) == await served([str(script)], tree)
    refused = run([str(script), "--root", str(tree), "--sandbox", "workspace", "tools"])
    assert 2 == refused.returncode
    assert "has a hard link in a writable place" in refused.stderr
    assert str(tree / ".uv-cache") in refused.stderr
    assert "UV_LINK_MODE=copy" in refused.stderr


@pytest.mark.slow
async def test_pipx_install_from_dist_with_no_index(dist: Path, tmp_path: Path) -> None:
    """`pipx install` with pip's arguments `--no-index --find-links dist`, into scratch pipx
    dirs, with the backend pipx picks wherever uv is on PATH (uv): its modules are hard links
    into uv's cache, which no call can write, so the server contains its commands. (pipx's
    pip backend needs a newer pip from an index for its shared libraries: not tried here.)"""
    wheelhouse = wheelhouse_or_skip()
    pip_args = " ".join(find_links(dist, wheelhouse))
    pipx = Path(sys.executable).parent / "pipx"
    if not pipx.is_file():
        pytest.skip("pipx is not installed in this environment (the dev group pins it)")
    uv = uv_command()
    env = quiet_environment(
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        UV_OFFLINE="1",
        PATH=os.pathsep.join([str(Path(uv).parent), os.environ.get("PATH", "")]),
    )
    done = run(
        [
            str(pipx),
            "install",
            "--backend",
            "uv",
            "--python",
            base_python(),
            "--pip-args",
            pip_args,
            APP,
        ],
        env=env,
    )
    assert 0 == done.returncode, done.stderr
    assert linked_server_files(tmp_path / "pipx")
    script = tmp_path / "bin" / "spice-coding"
    tree = tmp_path / "tree"
    tree.mkdir()
    assert Served(TOOLS, "hello\n", contained_or_skip()) == await served([str(script)], tree)


@pytest.mark.slow
async def test_uvx_from_a_git_clone_resolves_the_siblings_from_the_checkout(tmp_path: Path) -> None:
    """`uvx --from git+file://CLONE#subdirectory=packages/spice-agent-coding spice-coding`:
    uv builds the app and both siblings from the same commit of the clone (workspace sources)."""
    wheelhouse = wheelhouse_or_skip()
    source = clone(tmp_path)
    commit = run(["git", "rev-parse", "HEAD"], cwd=source).stdout.strip()
    env = quiet_environment(
        UV_OFFLINE="1", UV_CACHE_DIR=str(tmp_path / "cache"), UV_PYTHON_DOWNLOADS="never"
    )
    url = f"git+file://{source}#subdirectory=packages/{APP}"
    uvx = [
        uv_command("uvx"),
        "--python",
        base_python(),
        "--no-index",
        "--find-links",
        str(wheelhouse),
        "--from",
        url,
        "spice-coding",
    ]
    helped = run([*uvx, "--help"], env=env, cwd=tmp_path)
    assert 0 == helped.returncode, helped.stderr
    assert helped.stdout.startswith("usage: spice-coding")
    for name in (APP, *SIBLINGS):
        assert f"Built {name} @ git+file://{source}@{commit}#subdirectory=packages/{name}" in (
            helped.stderr
        )
    tools = run([*uvx, "--root", str(source), "tools"], env=env, cwd=tmp_path)
    assert 0 == tools.returncode, tools.stderr
    assert all(f'"name": "{name}"' in tools.stdout for name in TOOLS)
    # uv's ephemeral environment is hard-linked from its cache, which no call can write.
    assert linked_server_files(tmp_path / "cache")
    tree = tmp_path / "tree"
    tree.mkdir()
    assert Served(TOOLS, "hello\n", contained_or_skip()) == await served(uvx, tree, env)


@pytest.mark.slow
def test_uvx_from_git_without_the_wheelhouse_cannot_reach_an_index(tmp_path: Path) -> None:
    """The index-free proofs are real: with no index and no wheelhouse, mcp cannot be found."""
    wheelhouse_or_skip()
    source = clone(tmp_path)
    env = quiet_environment(
        UV_OFFLINE="1", UV_CACHE_DIR=str(tmp_path / "cache"), UV_PYTHON_DOWNLOADS="never"
    )
    url = f"git+file://{source}#subdirectory=packages/{APP}"
    done = run(
        [
            uv_command("uvx"),
            *("--python", base_python(), "--no-index", "--from", url),
            *("spice-coding", "--help"),
        ],
        env=env,
        cwd=tmp_path,
    )
    assert 0 != done.returncode
    assert "mcp" in done.stderr
