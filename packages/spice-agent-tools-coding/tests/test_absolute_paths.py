"""Absolute paths beneath the root (contract 9.3) and paths naming the root (contract 9.1).

An absolute ``path`` (read, replace) or ``workdir`` (shell) that lies lexically beneath the
configured root, as configured or as resolved, means its relative remainder; any other
absolute path is ``invalid_arguments``. A path that cleans to the root itself is
``invalid_arguments`` for read and replace and the root for the shell.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from coding_strategies import path_strings, relative_paths
from fakes import FakeLauncher, FakeResolver, content_of, shell_call
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read, new_replace
from spice.agent.tools.coding._root import (
    MAXIMUM_NAME_BYTES,
    MAXIMUM_PATH_BYTES,
    PathError,
    clean_path,
)
from spice.agent.tools.coding._shell import build_shell

ROOT = "/work/tree"
INSIDE = b"inside\n"


def refused(raw: str, **options: object) -> str:
    """The message ``clean_path`` refuses ``raw`` with (the test fails if it is accepted)."""
    with pytest.raises(PathError) as caught:
        clean_path(raw, **options)  # type: ignore[arg-type]
    assert "invalid_arguments" == caught.value.code
    return caught.value.message


# -- clean_path ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/work/tree/a", "a"),
        ("/work/tree/a/b.txt", "a/b.txt"),
        ("/work/tree//a/./b/", "a/b"),
        ("/work/tree/a/../b", "b"),
        ("//work/tree/a", "a"),
        ("///work//tree///a", "a"),
        ("/work/tree/../tree/a", "a"),
        ("/work/./tree/a", "a"),
        ("/work/tree/a\\b", "a\\b"),
        ("/work/tree/é/𝄞", "é/𝄞"),
    ],
)
def test_an_absolute_path_beneath_the_root_means_its_remainder(raw: str, expected: str) -> None:
    """Cleaned lexically, the part below the configured root is the relative path."""
    assert expected == clean_path(raw, root=ROOT)


@pytest.mark.parametrize("raw", ["/work/tree", "/work/tree/", "/work/tree/.", "/work/tree/a/.."])
def test_the_root_s_own_absolute_path_is_the_root(raw: str) -> None:
    """The root's absolute path cleans to ``.``: the root for a workdir, refused for a file."""
    assert "." == clean_path(raw, root=ROOT)
    assert "path names the worktree root itself" == refused(raw, root=ROOT, names_root=False)


@pytest.mark.parametrize(
    "raw",
    [
        "/",
        "/work",
        "/work/",
        "/work/treehouse/a",
        "/work/tree-evil/a",
        "/work/tree/..",
        "/work/tree/../outside/a",
        "/work/tree/a/../../x",
        "/etc/passwd",
        "/tree/a",
        "/work/tre",
    ],
)
def test_any_other_absolute_path_is_invalid_arguments(raw: str) -> None:
    """A sibling sharing the root's prefix, a parent, or a cleaned escape: refused, and the
    message names the root (contract 10.2)."""
    assert f"an absolute path must lie beneath the worktree root ({ROOT})" == refused(
        raw, root=ROOT
    )


def test_without_a_root_every_absolute_path_is_refused() -> None:
    """The lexical cleaner alone knows no root, so it accepts relative paths only."""
    assert "an absolute path must lie beneath the worktree root" == refused("/work/tree/a")


async def test_read_through_a_symlinked_spelling_of_the_root(tree: Path) -> None:
    """The tool, end to end: the file read through a link to the root, shown relative; a
    directory that resolves outside is refused, naming the root."""
    (tree.parent / "spelled").symlink_to("root")
    content = await read(tree, f"{tree.parent}/spelled/f.txt")
    assert (True, "f.txt", "inside\n") == (content["ok"], content["path"], content["content"])
    escape = await read(tree, f"{tree.parent}/spelled/out/secret")
    assert (False, "invalid_arguments") == (escape["ok"], escape["code"])
    assert str(tree) in str(escape["message"])
    assert "secret\n" not in json.dumps(escape)


@pytest.mark.parametrize(
    ("raw", "names_root"), [(".", False), ("./", False), ("a/..", False), ("", True)]
)
def test_relative_paths_naming_the_root_are_refused_only_when_asked(
    raw: str, names_root: bool
) -> None:
    """``names_root=False`` refuses the root; the empty path is refused in any case."""
    refused(raw, root=ROOT, names_root=names_root)
    if raw:
        assert "." == clean_path(raw, root=ROOT)


def test_the_filesystem_root_as_worktree_takes_every_absolute_path() -> None:
    """With ``/`` as root every absolute path lies beneath it."""
    assert "etc/passwd" == clean_path("/etc/passwd", root="/")
    assert "." == clean_path("//", root="/")


def test_the_remainder_keeps_the_bounds_of_a_relative_path() -> None:
    """The whole path is bounded by MAXIMUM_PATH_BYTES, each name by MAXIMUM_NAME_BYTES."""
    name = "n" * MAXIMUM_NAME_BYTES
    assert name == clean_path(f"{ROOT}/{name}", root=ROOT)
    refused(f"{ROOT}/{name}n", root=ROOT)
    filler = "d/" * ((MAXIMUM_PATH_BYTES - len(ROOT) - 1) // 2)
    at_bound = f"{ROOT}/{filler}".ljust(MAXIMUM_PATH_BYTES, "x")
    assert MAXIMUM_PATH_BYTES == len(at_bound.encode())
    assert clean_path(at_bound, root=ROOT).startswith("d/d/")
    refused(at_bound + "x", root=ROOT)


@pytest.mark.parametrize("raw", ["/work/tree/a\0", " /work/tree/a", "/work/tree/a\n"])
def test_the_character_rules_apply_before_the_root(raw: str) -> None:
    """NUL, surrounding whitespace and control characters are refused as before."""
    refused(raw, root=ROOT)


def test_the_resolved_root_counts_as_well(tmp_path: Path) -> None:
    """A root configured through a symlink accepts paths through its real location too."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "other").symlink_to("real")
    configured = str(tmp_path / "link")
    assert "a" == clean_path(f"{configured}/a", root=configured)
    assert "a" == clean_path(f"{real}/a", root=configured)
    assert "." == clean_path(str(real), root=configured)
    # Another link to it counts too (contract 10.2): its directory resolves beneath the root.
    assert "a" == clean_path(f"{tmp_path}/other/a", root=configured)
    assert "." == clean_path(f"{tmp_path}/other", root=configured)


def test_a_symlinked_spelling_of_the_root_is_beneath_it(tmp_path: Path) -> None:
    """The root configured by its real path; the model names files through a link to it or
    to a directory in it: accepted, and the remainder is the path beneath the real root."""
    real = tmp_path / "real"
    (real / "src").mkdir(parents=True)
    (tmp_path / "spelled").symlink_to("real")
    (tmp_path / "into-src").symlink_to("real/src")
    root = str(real)
    assert "src/a.py" == clean_path(f"{tmp_path}/spelled/src/a.py", root=root)
    assert "src/new/b.py" == clean_path(f"{tmp_path}/spelled/src/new/b.py", root=root)
    assert "src/a.py" == clean_path(f"{tmp_path}/into-src/a.py", root=root)


def test_only_the_directory_is_resolved_never_the_final_name(tmp_path: Path) -> None:
    """A final name that is a link elsewhere keeps its name: it is opened (and refused)
    beneath the root; a link out of the root in the directory part is refused here."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "outside").mkdir()
    (real / "escape").symlink_to(tmp_path / "outside")
    (tmp_path / "elsewhere").symlink_to("outside")
    root = str(real)
    assert "escape" == clean_path(f"{real}/escape", root=root)
    message = refused(f"{tmp_path}/elsewhere/x", root=root)
    assert root in message


@given(relative=relative_paths)
@settings(max_examples=300)
def test_a_relative_path_and_its_absolute_form_clean_alike(relative: str) -> None:
    """Whatever a relative path cleans to, the root joined with it cleans to the same."""
    try:
        expected = clean_path(relative)
    except PathError:
        return
    assert expected == clean_path(f"{ROOT}/{relative}", root=ROOT)


@given(raw=st.one_of(path_strings, path_strings.map(lambda p: ROOT + "/" + p)))
@settings(max_examples=300)
def test_every_answer_is_refused_or_canonical_and_relative(raw: str) -> None:
    """Any string, absolute or not, cleans to an idempotent relative path or is refused."""
    code: str | None = None
    try:
        cleaned = clean_path(raw, root=ROOT)
    except PathError as error:
        code = error.code
    if code is not None:
        assert "invalid_arguments" == code
        return
    assert cleaned == clean_path(cleaned, root=ROOT)
    assert not cleaned.startswith("/")
    assert cleaned == "." or not {"", ".", ".."} & set(cleaned.split("/"))
    if raw.startswith("/"):
        absolute = "/" + os.path.normpath(raw).lstrip("/")
        assert absolute == (ROOT if cleaned == "." else f"{ROOT}/{cleaned}")


@given(raw=path_strings.map(lambda p: "/" + p.lstrip("/")))
@settings(max_examples=200)
def test_an_absolute_path_is_accepted_only_beneath_the_root(raw: str) -> None:
    """An absolute path whose cleaned form is not below ``/work/tree`` is always refused."""
    cleaned = "/" + os.path.normpath(raw).lstrip("/")
    beneath = cleaned == ROOT or cleaned.startswith(ROOT + "/")
    try:
        clean_path(raw, root=ROOT)
    except PathError:
        return
    assert beneath


# -- the tools ----------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``root/f.txt``, ``root/sub/``, an escaping link ``root/out`` and ``root-evil/x``."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "f.txt").write_bytes(INSIDE)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(b"secret\n")
    (root / "out").symlink_to(tmp_path / "outside")
    (tmp_path / "root-evil").mkdir()
    (tmp_path / "root-evil" / "x").write_bytes(b"evil\n")
    return root


async def read(root: Path, path: str, *, configured: Path | None = None) -> dict[str, object]:
    """One read call; its content."""
    tool = new_read(Config(configured or root))
    result = await tool.execute(Call("1", "read", json.dumps({"path": path})))
    return content_of(result)


async def test_read_takes_an_absolute_path_beneath_the_root(tree: Path) -> None:
    """The page of ``<root>/f.txt`` is the page of ``f.txt``, shown by its relative path."""
    content = await read(tree, f"{tree}/./f.txt")
    assert (True, "f.txt", "inside\n") == (content["ok"], content["path"], content["content"])
    assert str(tree) not in json.dumps(content)


async def test_read_through_the_resolved_root(tree: Path) -> None:
    """With the root configured through a link, the real absolute path is accepted too."""
    link = tree.parent / "rootlink"
    link.symlink_to("root")
    through_real = await read(tree, f"{tree}/f.txt", configured=link)
    through_link = await read(tree, f"{link}/f.txt", configured=link)
    assert ("f.txt", "f.txt") == (through_real["path"], through_link["path"])


@pytest.mark.parametrize(
    ("suffix", "code"),
    [
        ("", "invalid_arguments"),
        ("/", "invalid_arguments"),
        ("/sub/..", "invalid_arguments"),
        ("/../root-evil/x", "invalid_arguments"),
        ("-evil/x", "invalid_arguments"),
        ("/out/secret", "path_escape"),
        ("/missing", "not_found"),
        ("/sub", "not_regular"),
    ],
)
async def test_read_of_other_absolute_paths_keeps_every_rule(
    tree: Path, suffix: str, code: str
) -> None:
    """The root itself, siblings and escapes are refused; the remainder obeys _root's rules."""
    content = await read(tree, f"{tree}{suffix}")
    assert (False, code) == (content["ok"], content["code"])
    assert "secret" not in json.dumps(content)


async def test_replace_creates_and_replaces_through_absolute_paths(tree: Path) -> None:
    """Both modes accept an absolute path beneath the root and answer the relative one."""
    tool = new_replace(Config(tree))
    create = {"path": f"{tree}/sub/new.txt", "content": "made\n", "create": True}
    created = content_of(await tool.execute(Call("1", "replace", json.dumps(create))))
    digest = hashlib.sha256(INSIDE).hexdigest()
    change = {"path": f"{tree}//f.txt", "content": "changed\n", "expected_sha256": digest}
    replaced = content_of(await tool.execute(Call("2", "replace", json.dumps(change))))
    assert ("sub/new.txt", "f.txt") == (created["path"], replaced["path"])
    assert (b"made\n", b"changed\n") == (
        (tree / "sub" / "new.txt").read_bytes(),
        (tree / "f.txt").read_bytes(),
    )


@pytest.mark.parametrize("path", ["{root}", "{root}/", "{root}/../root-evil/new.txt", "/tmp/x"])
async def test_replace_refuses_the_root_and_absolute_paths_outside(tree: Path, path: str) -> None:
    """invalid_arguments, and nothing is created anywhere."""
    tool = new_replace(Config(tree))
    arguments = {"path": path.format(root=tree), "content": "x", "create": True}
    content = content_of(await tool.execute(Call("1", "replace", json.dumps(arguments))))
    assert "invalid_arguments" == content["code"]
    assert ["x"] == os.listdir(tree.parent / "root-evil")


@pytest.mark.parametrize(
    ("workdir", "shown"), [("{root}", "."), ("{root}/", "."), ("{root}/sub", "sub"), (".", ".")]
)
async def test_a_shell_workdir_may_be_absolute_beneath_the_root(
    tree: Path, workdir: str, shown: str
) -> None:
    """The launcher gets the real directory; the result shows the relative workdir."""
    launcher = FakeLauncher()
    tool, _ = build_shell(Config(tree), FakeResolver(), launcher, posix=True)
    arguments = {"argv": ["true"], "workdir": workdir.format(root=tree)}
    content = content_of(await tool.execute(shell_call(arguments)))
    assert (True, shown) == (content["ok"], content["workdir"])
    expected = (tree if shown == "." else tree / shown).resolve()
    assert str(expected) == launcher.specs[0].working_directory


@pytest.mark.parametrize("workdir", ["{root}/..", "{root}-evil", "/tmp", "{root}/../outside"])
async def test_a_shell_workdir_outside_the_root_is_invalid_arguments(
    tree: Path, workdir: str
) -> None:
    """Nothing is resolved or started for an absolute workdir outside the root."""
    resolver, launcher = FakeResolver(), FakeLauncher()
    tool, _ = build_shell(Config(tree), resolver, launcher, posix=True)
    arguments = {"argv": ["true"], "workdir": workdir.format(root=tree)}
    content = content_of(await tool.execute(shell_call(arguments)))
    assert "invalid_arguments" == content["code"]
    assert ([], []) == (resolver.lookups, launcher.specs)
