"""Shell workdirs on a real file system: symlinks, escapes, files, races before launch."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import FakeLauncher, FakeResolver, content_of, shell_call

from spice.agent.tools.coding import Config
from spice.agent.tools.coding._root import portable_only
from spice.agent.tools.coding._shell import build_shell


@pytest.fixture(params=["fast", "portable"])
def route(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run each test through the openat2 route (where present) and the portable walk."""
    if request.param == "portable":
        with portable_only():
            yield request.param
    else:
        yield request.param


async def run(
    root: Path, workdir: str | None, during: Callable[[], None] | None = None
) -> tuple[dict[str, object], FakeResolver, FakeLauncher]:
    """One call with ``workdir``; ``during`` runs while the executable is resolved."""
    resolver, launcher = FakeResolver(during=during), FakeLauncher()
    tool, _ = build_shell(Config(root), resolver, launcher, posix=True)
    arguments: dict[str, object] = {"argv": ["true"]}
    if workdir is not None:
        arguments["workdir"] = workdir
    result = await tool.execute(shell_call(arguments))
    return content_of(result), resolver, launcher


def require_symlinks(directory: Path) -> None:
    """Skip where this system makes no symbolic link: Wine's CreateSymbolicLinkW reports
    success and creates nothing; Windows needs a privilege or Developer Mode."""
    probe = directory / ".spice-link-probe"
    try:
        probe.symlink_to(directory)
    except OSError:
        pytest.skip("this system makes no symbolic link for this user")
    made = probe.is_symlink()
    if made:
        probe.unlink()
    if not made:
        pytest.skip("this system reports a symbolic link made but makes none (Wine)")


def open_descriptors() -> int:
    """Descriptors this process holds (Linux ``/proc``; elsewhere a constant)."""
    proc = Path("/proc/self/fd")
    return len(os.listdir(proc)) if proc.is_dir() else 0


async def test_a_nested_directory_is_the_workdir(tmp_path: Path, route: str) -> None:
    """A plain nested directory runs there, with its absolute path in the lookup."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    content, resolver, launcher = await run(tmp_path, "a/b/")
    assert (True, "a/b") == (content["ok"], content["workdir"])
    assert str(tmp_path / "a" / "b") == resolver.lookups[0].working_directory
    assert str(tmp_path / "a" / "b") == launcher.specs[0].working_directory


async def test_no_workdir_is_the_root(tmp_path: Path, route: str) -> None:
    """Without a workdir the command runs in the root."""
    content, resolver, _ = await run(tmp_path, None)
    assert (True, ".") == (content["ok"], content["workdir"])
    assert str(tmp_path) == resolver.lookups[0].working_directory


async def test_a_symlink_workdir_inside_the_root_is_path_escape(tmp_path: Path, route: str) -> None:
    """Even a symlink that stays inside the root is refused as a workdir."""
    require_symlinks(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    content, resolver, _ = await run(tmp_path, "link")
    assert ("path_escape", []) == (content["code"], resolver.lookups)


async def test_a_symlink_component_is_path_escape(tmp_path: Path, route: str) -> None:
    """A symlink anywhere along the workdir is refused."""
    require_symlinks(tmp_path)
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to("real")
    content, _, _ = await run(tmp_path, "link/inner")
    assert "path_escape" == content["code"]


async def test_a_symlink_leaving_the_root_is_path_escape(tmp_path: Path, route: str) -> None:
    """A link to a directory outside the root (absolute target) is an escape."""
    require_symlinks(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "out").symlink_to(outside)
    content, _, launcher = await run(root, "out")
    assert ("path_escape", []) == (content["code"], launcher.specs)


async def test_a_file_is_not_a_workdir(tmp_path: Path, route: str) -> None:
    """A regular file is ``workdir_unavailable``."""
    (tmp_path / "file").write_text("x")
    content, _, _ = await run(tmp_path, "file")
    assert "workdir_unavailable" == content["code"]


async def test_a_missing_directory_is_workdir_unavailable(tmp_path: Path, route: str) -> None:
    """A directory that does not exist is ``workdir_unavailable``."""
    content, _, _ = await run(tmp_path, "missing/deeper")
    assert "workdir_unavailable" == content["code"]


async def test_a_missing_root_is_root_unavailable(tmp_path: Path, route: str) -> None:
    """The configured root itself is gone."""
    content, _, _ = await run(tmp_path / "gone", None)
    assert "root_unavailable" == content["code"]


async def test_a_workdir_deleted_before_launch_is_caught(tmp_path: Path, route: str) -> None:
    """Deleted between the first check and the launch: nothing starts."""
    (tmp_path / "sub").mkdir()
    content, resolver, launcher = await run(tmp_path, "sub", during=(tmp_path / "sub").rmdir)
    assert ("workdir_unavailable", 1, []) == (
        content["code"],
        len(resolver.lookups),
        launcher.specs,
    )


async def test_a_workdir_swapped_for_another_directory_is_caught(
    tmp_path: Path, route: str
) -> None:
    """Replaced by another directory of the same name: the identity check refuses it."""
    (tmp_path / "sub").mkdir()

    def swap() -> None:
        (tmp_path / "sub").rename(tmp_path / "old")
        (tmp_path / "sub").mkdir()

    content, _, launcher = await run(tmp_path, "sub", during=swap)
    assert ("workdir_unavailable", []) == (content["code"], launcher.specs)


async def test_a_workdir_swapped_for_a_symlink_is_path_escape(tmp_path: Path, route: str) -> None:
    """Replaced by a symlink to the very same directory: still refused before launch."""
    require_symlinks(tmp_path)
    (tmp_path / "sub").mkdir()

    def swap() -> None:
        (tmp_path / "sub").rename(tmp_path / "real")
        (tmp_path / "sub").symlink_to("real")

    content, _, launcher = await run(tmp_path, "sub", during=swap)
    assert ("path_escape", []) == (content["code"], launcher.specs)


async def test_a_root_deleted_before_launch_is_root_unavailable(tmp_path: Path) -> None:
    """The root itself vanishing between the checks is caught too."""
    root = tmp_path / "root"
    root.mkdir()
    content, _, launcher = await run(root, None, during=lambda: shutil.rmtree(root))
    assert ("root_unavailable", []) == (content["code"], launcher.specs)


async def test_workdir_checks_leave_no_descriptor_open(tmp_path: Path) -> None:
    """Successful and failing checks close every descriptor they open."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to("sub")
    before = open_descriptors()
    for workdir in ["sub", "file", "link", "missing", None]:
        await run(tmp_path, workdir)
    assert before == open_descriptors()
