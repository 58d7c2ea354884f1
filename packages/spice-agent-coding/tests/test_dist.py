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
    base_python,
    build_dist,
    quiet_environment,
    release_names,
    release_version,
    run,
    served_tools,
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
    """`make dist` is the script these tests run, writing to dist/."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = run(["make", "-n", "dist"], cwd=REPOSITORY)
    assert 0 == done.returncode
    assert f"python {BUILD_SCRIPT.relative_to(REPOSITORY)} --out dist" in done.stdout


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
    assert (TOOLS, "hello\n") == await served_tools(venv / "bin" / "spice-coding", tree)


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


@pytest.mark.slow
async def test_uv_tool_install_from_dist_with_no_index(dist: Path, tmp_path: Path) -> None:
    """`uv tool install --find-links dist spice-agent-coding`, offline, into scratch tool dirs."""
    wheelhouse = wheelhouse_or_skip()
    env = quiet_environment(
        UV_OFFLINE="1",
        UV_TOOL_DIR=str(tmp_path / "tools"),
        UV_TOOL_BIN_DIR=str(tmp_path / "bin"),
        UV_CACHE_DIR=str(tmp_path / "cache"),
        UV_PYTHON_DOWNLOADS="never",
    )
    done = run(
        ["uv", "tool", "install", "--python", base_python(), *find_links(dist, wheelhouse), APP],
        env=env,
    )
    assert 0 == done.returncode, done.stderr
    script = tmp_path / "bin" / "spice-coding"
    version = run([str(script), "--version"])
    assert f"spice-coding {release_version()}\n" == version.stdout
    tree = tmp_path / "tree"
    tree.mkdir()
    assert (TOOLS, "hello\n") == await served_tools(script, tree)


@pytest.mark.slow
async def test_pipx_install_from_dist_with_no_index(dist: Path, tmp_path: Path) -> None:
    """`pipx install` with pip told `--no-index --find-links dist`, into scratch pipx dirs."""
    wheelhouse = wheelhouse_or_skip()
    pip_args = " ".join(find_links(dist, wheelhouse))
    pipx = Path(sys.executable).parent / "pipx"
    if not pipx.is_file():
        pytest.skip("pipx is not installed in this environment (the dev group pins it)")
    env = quiet_environment(
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
    )
    done = run(
        [str(pipx), "install", "--python", base_python(), "--pip-args", pip_args, APP], env=env
    )
    assert 0 == done.returncode, done.stderr
    script = tmp_path / "bin" / "spice-coding"
    tree = tmp_path / "tree"
    tree.mkdir()
    assert (TOOLS, "hello\n") == await served_tools(script, tree)


@pytest.mark.slow
def test_uvx_from_a_git_clone_resolves_the_siblings_from_the_checkout(tmp_path: Path) -> None:
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
        "uvx",
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
        ["uvx", "--python", base_python(), "--no-index", "--from", url, "spice-coding", "--help"],
        env=env,
        cwd=tmp_path,
    )
    assert 0 != done.returncode
    assert "mcp" in done.stderr
