"""Worktree confinement of ``_root``: the whole table, through both resolution routes."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from coding_strategies import path_strings
from hypothesis import given, settings

from spice.agent.tools.coding import _openat2, _paths, _root
from spice.agent.tools.coding._root import (
    MAXIMUM_NAME_BYTES,
    MAXIMUM_PATH_BYTES,
    MAXIMUM_SYMLINKS,
    PathError,
    clean_path,
    open_beneath,
    open_directory,
    open_root,
    split_parent,
)

INSIDE = b"inside\n"
INNER = b"inner\n"
SENTINEL = b"OUTSIDE-SENTINEL\n"


@dataclass(frozen=True, slots=True)
class Tree:
    """A worktree with every kind of symlink, and things outside it."""

    base: Path
    root: Path
    outside: Path


def build_tree(base: Path) -> Tree:
    """Create the confinement table's files and links under ``base``."""
    root = base / "root"
    outside = base / "outside"
    evil = base / "root-evil"
    for directory in (root / "sub" / "deep", outside / "deep", evil, root / "xonly"):
        directory.mkdir(parents=True)
    (root / "file.txt").write_bytes(INSIDE)
    (root / "sub" / "inner.txt").write_bytes(INNER)
    (outside / "secret.txt").write_bytes(SENTINEL)
    (evil / "secret.txt").write_bytes(SENTINEL)
    (root / "xonly" / "readable.txt").write_bytes(INSIDE)
    decoy = root / base.name / "root"  # a directory named like the root's parent
    decoy.mkdir(parents=True)
    (decoy / "file.txt").write_bytes(INNER)
    links = {
        "link_inside": "sub/inner.txt",
        "link_dir": "sub",
        "link_updown": "sub/deep/../inner.txt",
        "link_escape": "../outside/secret.txt",
        "link_escape_dir": "../outside",
        "link_sibling": "../root-evil/secret.txt",
        "link_abs_inside": str(root / "file.txt"),
        "link_abs_outside": str(outside / "secret.txt"),
        "link_file_slash": "file.txt/",
        "link_dot": ".",
        "dangling": "nowhere",
        "loop_a": "loop_b",
        "loop_b": "loop_a",
        "self_loop": "self_loop",
        "proc_root": "/proc/self/root",
        "proc_cwd": "/proc/self/cwd",
        "proc_relative": "../" * 32 + "proc/self/root",
        "link_dev_zero": "/dev/zero",
        "sub/up_ok": "../file.txt",
        "sub/up_escape": "../../outside/secret.txt",
        "sub/zigzag": "../../root/file.txt",
        "sub/deep/up_two": "../../file.txt",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    for length in (MAXIMUM_SYMLINKS, MAXIMUM_SYMLINKS + 1):
        # chain_N -> chain_N_1 -> ... -> file.txt: exactly `length` links to follow.
        names = [f"chain_{length}"] + [f"chain_{length}_{i}" for i in range(1, length)]
        for current, following in zip(names, [*names[1:], "file.txt"], strict=True):
            (root / current).symlink_to(following)
    os.mkfifo(root / "fifo")
    (root / "xonly").chmod(0o111)
    return Tree(base, root, outside)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    """The confinement tree in ``tmp_path`` (the execute-only directory made readable after)."""
    built = build_tree(tmp_path)
    yield built
    (built.root / "xonly").chmod(0o755)


@pytest.fixture(params=["openat2", "portable"])
def route(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test through the openat2 fast path and through the portable walk."""
    if request.param == "portable":
        with _root.portable_only():
            yield "portable"
        return
    if sys.platform != "linux":
        pytest.skip("openat2 exists only on Linux")
    yield "openat2"


@pytest.fixture
def root_fd(tree: Tree) -> Iterator[int]:
    """A descriptor of the tree's root, closed after the test."""
    fd = open_root(str(tree.root))
    yield fd
    os.close(fd)


def read_through(root_fd: int, raw: str, *, follow_final: bool = True) -> bytes | str:
    """The bytes ``raw`` opens to, or the PathError code it fails with."""
    try:
        fd = open_beneath(
            root_fd, clean_path(raw), os.O_RDONLY, follow_final=follow_final, regular=True
        )
    except PathError as error:
        return error.code
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


FIXED_TEXTS = frozenset(
    value
    for module in (_root, _paths)
    for name, value in vars(module).items()
    if name.lstrip("_").isupper() and isinstance(value, str)
)
"""Every fixed problem text of ``_root`` and ``_paths`` (a message is always one of them)."""

CONFINEMENT_TABLE: list[tuple[str, bytes | str]] = [
    ("file.txt", INSIDE),
    ("./sub/../file.txt", INSIDE),
    ("sub//inner.txt", INNER),
    ("../x", "invalid_arguments"),
    ("a/../../x", "invalid_arguments"),
    ("/etc/passwd", "invalid_arguments"),
    ("../root-evil/secret.txt", "invalid_arguments"),
    ("../outside/secret.txt", "invalid_arguments"),
    ("file.txt\0", "invalid_arguments"),
    (" file.txt", "invalid_arguments"),
    ("file.txt ", "invalid_arguments"),
    ("file.txt\n", "invalid_arguments"),
    ("", "invalid_arguments"),
    (".", "not_regular"),
    ("sub", "not_regular"),
    ("link_inside", INNER),
    ("link_dir/inner.txt", INNER),
    ("link_updown", INNER),
    ("link_dir/../file.txt", INSIDE),  # `..` is lexical in the model's own path
    ("sub/up_ok", INSIDE),
    ("sub/deep/up_two", INSIDE),
    ("link_escape", "path_escape"),
    ("link_escape_dir/secret.txt", "path_escape"),
    ("link_sibling", "path_escape"),
    ("link_abs_inside", "path_escape"),
    ("link_abs_outside", "path_escape"),
    ("sub/up_escape", "path_escape"),
    ("sub/zigzag", "path_escape"),
    (f"chain_{MAXIMUM_SYMLINKS}", INSIDE),
    (f"chain_{MAXIMUM_SYMLINKS + 1}", "path_escape"),
    ("loop_a", "path_escape"),
    ("self_loop", "path_escape"),
    ("proc_root/etc/passwd", "path_escape"),
    ("proc_root", "path_escape"),
    ("proc_cwd", "path_escape"),
    ("proc_relative", "path_escape"),
    ("link_dev_zero", "path_escape"),
    ("link_file_slash", "not_regular"),
    ("link_dot", "not_regular"),
    ("link_dot/file.txt", INSIDE),
    ("dangling", "not_found"),
    ("missing.txt", "not_found"),
    ("missing/x.txt", "not_found"),
    ("file.txt/x", "not_regular"),
    ("fifo", "not_regular"),
    ("xonly/readable.txt", INSIDE),
]


@pytest.mark.parametrize(("raw", "expected"), CONFINEMENT_TABLE)
def test_confinement_table_gives_the_same_answer_on_both_routes(
    tree: Tree, root_fd: int, route: str, raw: str, expected: bytes | str
) -> None:
    """Each path of the table opens to its inside content or fails with its code."""
    assert expected == read_through(root_fd, raw)
    if route == "openat2":
        assert _root.fast_path_available()


def test_directory_named_like_the_roots_parent_is_an_ordinary_directory(
    tree: Tree, root_fd: int, route: str
) -> None:
    """A name equal to the root's parent directory does not confuse resolution."""
    assert INNER == read_through(root_fd, f"{tree.base.name}/root/file.txt")
    assert "invalid_arguments" == read_through(root_fd, f"../{tree.base.name}/root/file.txt")


def test_a_final_symlink_is_not_regular_when_it_must_not_be_followed(
    tree: Tree, root_fd: int, route: str
) -> None:
    """``follow_final=False`` refuses a final symlink, even one pointing inside."""
    assert "not_regular" == read_through(root_fd, "link_inside", follow_final=False)
    assert INNER == read_through(root_fd, "link_dir/inner.txt", follow_final=False)
    assert INSIDE == read_through(root_fd, "file.txt", follow_final=False)


def test_a_unix_socket_is_not_regular_and_never_blocks(
    tree: Tree, root_fd: int, route: str
) -> None:
    """A bound unix socket inside the root is inspected, never opened."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        cwd = Path.cwd()
        os.chdir(tree.root)  # a short relative name: AF_UNIX paths are limited to ~108 bytes
        try:
            server.bind("sock")
        finally:
            os.chdir(cwd)
        assert "not_regular" == read_through(root_fd, "sock")
    finally:
        server.close()


def test_a_device_node_inside_the_root_is_not_regular(tree: Tree, root_fd: int, route: str) -> None:
    """A character device inside the worktree is refused without being opened."""
    try:
        os.mknod(tree.root / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    assert "not_regular" == read_through(root_fd, "zero")


def test_a_fifo_opened_without_the_regular_check_does_not_block(
    tree: Tree, root_fd: int, route: str
) -> None:
    """``open_beneath`` adds ``O_NONBLOCK``: a FIFO with no writer opens at once."""
    fd = open_beneath(root_fd, "fifo", os.O_RDONLY, follow_final=False)
    try:
        assert stat.S_ISFIFO(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_an_escaping_final_symlink_is_refused_without_the_regular_check(
    tree: Tree, root_fd: int, route: str
) -> None:
    """Generic opens follow the same confinement rules as regular-file opens."""
    for raw, code in [
        ("link_escape", "path_escape"),
        ("link_abs_inside", "path_escape"),
        ("loop_a", "path_escape"),
        ("dangling", "not_found"),
    ]:
        with pytest.raises(PathError) as caught:
            open_beneath(root_fd, raw, os.O_RDONLY, follow_final=True)
        assert code == caught.value.code
    with pytest.raises(PathError) as final_link:
        open_beneath(root_fd, "link_inside", os.O_RDONLY, follow_final=False)
    assert "not_regular" == final_link.value.code


DIRECTORY_TABLE: list[tuple[str, bool, str]] = [
    (".", False, "root"),
    ("sub/deep", False, "sub/deep"),
    ("link_dir", False, "path_escape"),
    ("link_dir/deep", False, "path_escape"),
    ("link_dot/sub", False, "path_escape"),
    ("link_dir", True, "sub"),
    ("link_dir/deep", True, "sub/deep"),
    ("link_escape_dir", True, "path_escape"),
    ("proc_root", True, "path_escape"),
    ("file.txt", True, "not_regular"),
    ("file.txt", False, "not_regular"),
    ("link_inside", True, "not_regular"),
    ("link_inside", False, "path_escape"),
    ("missing", True, "not_found"),
    ("missing", False, "not_found"),
    ("loop_a", True, "path_escape"),
]


@pytest.mark.parametrize(("raw", "follow", "expected"), DIRECTORY_TABLE)
def test_open_directory_follows_symlinks_only_when_asked(
    tree: Tree, root_fd: int, route: str, raw: str, follow: bool, expected: str
) -> None:
    """A directory opens to the real directory, or fails with the table's code."""
    failed: str | None
    try:
        fd = open_directory(root_fd, raw, follow_symlinks=follow)
    except PathError as error:
        failed = error.code
    else:
        failed = None
    if failed is not None:
        assert expected == failed
        return
    try:
        opened = os.fstat(fd)
    finally:
        os.close(fd)
    real = tree.root if expected == "root" else tree.root / expected
    assert (real.stat().st_dev, real.stat().st_ino) == (opened.st_dev, opened.st_ino)


def test_create_missing_makes_real_directories_inside_the_root(
    tree: Tree, root_fd: int, route: str
) -> None:
    """Missing components are created one by one in held directories."""
    fd = open_directory(root_fd, "new/a/b", follow_symlinks=False, create_missing=True)
    os.close(fd)
    assert (tree.root / "new" / "a" / "b").is_dir()
    again = open_directory(root_fd, "new/a/b", follow_symlinks=False, create_missing=True)
    os.close(again)


@pytest.mark.parametrize(
    ("raw", "follow", "code"),
    [
        ("link_dir/made", True, "path_escape"),
        ("link_dir/made", False, "path_escape"),
        ("link_escape_dir/made", True, "path_escape"),
        ("dangling/made", True, "path_escape"),
        ("file.txt/made", True, "not_regular"),
    ],
)
def test_create_missing_never_creates_through_a_symlink(
    tree: Tree, root_fd: int, route: str, raw: str, follow: bool, code: str
) -> None:
    """No directory appears at, or beneath, the target of a symlink."""
    before = {p.name for p in (tree.root / "sub").iterdir()}
    outside_before = {p.name for p in tree.outside.iterdir()}
    with pytest.raises(PathError) as caught:
        open_directory(root_fd, raw, follow_symlinks=follow, create_missing=True)
    assert code == caught.value.code
    assert before == {p.name for p in (tree.root / "sub").iterdir()}
    assert outside_before == {p.name for p in tree.outside.iterdir()}
    assert not (tree.root / "nowhere").exists()


def test_open_root_refuses_a_missing_root_and_a_file(tmp_path: Path) -> None:
    """A missing root, a file and a NUL root are ``root_unavailable``."""
    (tmp_path / "plain").write_bytes(b"x")
    for root in (tmp_path / "missing", tmp_path / "plain"):
        with pytest.raises(PathError) as caught:
            open_root(str(root))
        assert "root_unavailable" == caught.value.code
        assert str(tmp_path) not in str(caught.value)
    with pytest.raises(PathError):
        open_root("/tmp/\0")


def test_open_root_follows_symlinks_in_the_configured_root(tree: Tree) -> None:
    """The root's own path is trusted configuration: a symlinked root works."""
    alias = tree.base / "alias"
    alias.symlink_to(tree.root)
    fd = open_root(str(alias))
    try:
        assert INSIDE == read_through(fd, "file.txt")
    finally:
        os.close(fd)


def test_uncleaned_paths_are_refused_by_the_openers(root_fd: int, route: str) -> None:
    """The openers take only ``clean_path`` output (a caller bug cannot widen access)."""
    for raw in ("/etc/passwd", "../outside/secret.txt", "sub/../file.txt", "", "a//b"):
        with pytest.raises(PathError) as caught:
            open_beneath(root_fd, raw, os.O_RDONLY, follow_final=True)
        assert "invalid_arguments" == caught.value.code
        with pytest.raises(PathError):
            open_directory(root_fd, raw, follow_symlinks=True)


def test_no_descriptor_leaks_across_failing_and_succeeding_calls(
    tree: Tree, root_fd: int, route: str
) -> None:
    """Every descriptor but the returned one is closed, on every path."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("counting descriptors needs /proc/self/fd")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        for raw, _expected in CONFINEMENT_TABLE:
            read_through(root_fd, raw)
        for raw, follow, _code in DIRECTORY_TABLE:
            with contextlib.suppress(PathError):
                os.close(open_directory(root_fd, raw, follow_symlinks=follow))
    assert before == len(os.listdir("/proc/self/fd"))


# ---- clean_path and split_parent -------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a", "a"),
        ("a/b/c", "a/b/c"),
        ("./a//b/", "a/b"),
        ("a/..", "."),
        (".", "."),
        ("./", "."),
        ("a\\..\\b", "a\\..\\b"),
        ("é/𝄞", "é/𝄞"),
        ("...", "..."),
        ("a /b", "a /b"),
    ],
)
def test_clean_path_returns_the_slash_separated_display_path(raw: str, expected: str) -> None:
    """Cleaning drops ``.`` and empty parts, applies ``..`` and keeps backslashes."""
    assert expected == clean_path(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "/",
        "/a",
        "..",
        "../a",
        "a/../..",
        "a\0b",
        " a",
        "a ",
        "\ta",
        "a\n",
        "a\x1bb",
        "a\x7f",
        "a\ud800",
    ],
)
def test_clean_path_rejects_what_cannot_be_a_relative_worktree_path(raw: str) -> None:
    """Empty, absolute, escaping, NUL, whitespace-wrapped and control characters."""
    with pytest.raises(PathError) as caught:
        clean_path(raw)
    assert "invalid_arguments" == caught.value.code


def test_clean_path_bounds_the_path_and_each_component() -> None:
    """A path of the path bound and a name of the name bound pass; one byte more fails."""
    name = "n" * MAXIMUM_NAME_BYTES
    assert name == clean_path(name)
    with pytest.raises(PathError):
        clean_path(name + "n")
    at_bound = ("d" * 127 + "/") * 31 + "x" * (MAXIMUM_PATH_BYTES - 31 * 128)
    assert MAXIMUM_PATH_BYTES == len(at_bound.encode())
    assert at_bound == clean_path(at_bound)
    with pytest.raises(PathError):
        clean_path(at_bound + "x")
    assert "é" * 127 == clean_path("é" * 127)  # 254 bytes
    with pytest.raises(PathError):
        clean_path("é" * 128)  # 256 bytes


@given(path_strings)
@settings(max_examples=200)
def test_clean_path_either_refuses_or_returns_a_canonical_relative_path(raw: str) -> None:
    """Any string cleans to a canonical, idempotent relative path or to invalid_arguments."""
    refused: tuple[str, bool] | None
    try:
        cleaned = clean_path(raw)
    except PathError as error:
        refused = (error.code, error.message in FIXED_TEXTS)
    else:
        refused = None
    if refused is not None:
        assert ("invalid_arguments", True) == refused
        return
    assert cleaned == clean_path(cleaned)
    assert not cleaned.startswith("/")
    parts = cleaned.split("/")
    assert cleaned == "." or not {"", ".", ".."} & set(parts)


@pytest.mark.parametrize("raw", ["0 /", "a /.", "b/../ c", "c/../ d/e"])
def test_a_path_that_would_clean_to_surrounding_whitespace_is_refused(raw: str) -> None:
    """Cleaning never produces a path that cleaning itself would refuse (found by Hypothesis)."""
    with pytest.raises(PathError) as caught:
        clean_path(raw)
    assert "invalid_arguments" == caught.value.code


def test_split_parent_gives_the_parent_and_the_leaf() -> None:
    """Top-level names have the parent ``.``; the root itself has no leaf."""
    assert ("a/b", "c") == split_parent("a/b/c")
    assert (".", "c") == split_parent("c")
    with pytest.raises(PathError) as caught:
        split_parent(".")
    assert "invalid_arguments" == caught.value.code


# ---- bounds of the walk ----------------------------------------------------------------


def test_the_walk_step_budget_allows_the_bound_and_refuses_one_more(
    tree: Tree, root_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sub/inner.txt`` costs two directory steps: a budget of 2 passes, 1 fails."""
    with _root.portable_only():
        monkeypatch.setattr(_root, "MAXIMUM_WALK_STEPS", 2)
        assert INNER == read_through(root_fd, "sub/inner.txt")
        monkeypatch.setattr(_root, "MAXIMUM_WALK_STEPS", 1)
        assert "path_unavailable" == read_through(root_fd, "sub/inner.txt")


def test_a_long_dotdot_zigzag_in_a_link_stays_bounded(tree: Tree, root_fd: int) -> None:
    """A link making the walk re-descend from the root many times ends within the budget."""
    depth = 128
    deep = tree.root.joinpath(*["z"] * depth)
    deep.mkdir(parents=True)
    (deep / "x").mkdir()
    (deep / "zig").symlink_to("x/../" * 800 + "x")
    with _root.portable_only():
        assert "path_unavailable" == read_through(root_fd, "/".join(["z"] * depth) + "/zig")
    # The fast path ends in ELOOP (not_regular); renames elsewhere on the system racing
    # its 800 ``..`` (EAGAIN each time) hand it to the walk, whose budget ends it first.
    fast = read_through(root_fd, "/".join(["z"] * depth) + "/zig")
    assert fast in {"not_regular", "path_unavailable"}


def test_the_fast_path_is_used_on_this_linux(tree: Tree, root_fd: int) -> None:
    """On Linux >= 5.6 the fast path is really in use (else the two routes are one)."""
    if sys.platform != "linux":
        pytest.skip("openat2 exists only on Linux")
    assert INSIDE == read_through(root_fd, "file.txt")
    assert _root.fast_path_available()
    with _root.portable_only():
        assert not _root.fast_path_available()


def describe(root_fd: int, raw: str) -> bytes | tuple[str, str]:
    """The bytes ``raw`` opens to, or the PathError's code and message."""
    try:
        fd = open_beneath(root_fd, clean_path(raw), os.O_RDONLY, follow_final=True, regular=True)
    except PathError as error:
        return error.code, error.message
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def test_both_routes_give_identical_codes_and_messages(tree: Tree, root_fd: int) -> None:
    """The fast path and the portable walk agree on every answer, word for word."""
    if sys.platform != "linux":
        pytest.skip("openat2 exists only on Linux")
    for raw, _expected in CONFINEMENT_TABLE:
        fast = describe(root_fd, raw)
        with _root.portable_only():
            portable = describe(root_fd, raw)
        assert portable == fast
        assert isinstance(fast, bytes) or fast[1] in FIXED_TEXTS


NOBODY = 65534
"""The unprivileged uid and gid the execute-only case runs as."""


def test_an_execute_only_directory_is_crossed_as_an_unprivileged_user() -> None:
    """As uid 65534, a file under a ``--x`` directory opens on both routes (Linux O_PATH)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid in a child")
    import shutil  # noqa: PLC0415 - only this test needs it
    import tempfile  # noqa: PLC0415 - pytest's tmp_path is not reachable by another user

    base = Path(tempfile.mkdtemp(prefix="spice-xonly-"))
    try:
        base.chmod(0o755)
        (base / "xonly").mkdir()
        (base / "xonly" / "readable.txt").write_bytes(INSIDE)
        (base / "xonly" / "readable.txt").chmod(0o644)
        (base / "xonly").chmod(0o111)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop privileges, answer through the pipe, never return
            code = 1
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                fd = open_root(str(base))
                answers = [read_through(fd, "xonly/readable.txt")]
                with _root.portable_only():
                    answers.append(read_through(fd, "xonly/readable.txt"))
                try:
                    os.listdir(base / "xonly")
                    answers.append(b"listed")
                except PermissionError:
                    answers.append(b"unlisted")
                os.write(write_end, repr(answers).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
        _, status = os.waitpid(pid, 0)
        assert 0 == os.waitstatus_to_exitcode(status)
        portable = INSIDE if _root._O_PATH else "path_unavailable"
        assert repr([INSIDE, portable, b"unlisted"]).encode() == answer
    finally:
        (base / "xonly").chmod(0o755)
        shutil.rmtree(base)


def _changing(
    monkeypatch: pytest.MonkeyPatch, changes: int
) -> list[int]:  # the number of resolutions made
    """Make the first ``changes`` resolutions fail as if the file changed under them."""
    made: list[int] = []
    real_walk = _root._walk

    def walk(*args: object, **kwargs: object) -> int:
        made.append(1)
        if len(made) <= changes:
            raise _root._changed()
        return real_walk(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_root, "_fast_path_enabled", lambda _fd: False)
    monkeypatch.setattr(_root, "_walk", walk)
    return made


def _open_for(root_fd: int, opener: str) -> int:
    if opener == "file":
        return open_beneath(root_fd, "file.txt", os.O_RDONLY, follow_final=True, regular=True)
    return open_directory(root_fd, "sub", follow_symlinks=False)


@pytest.mark.parametrize("opener", ["file", "directory"])
def test_a_resolution_that_sees_a_change_is_retried_up_to_the_bound(
    tree: Tree, root_fd: int, monkeypatch: pytest.MonkeyPatch, opener: str
) -> None:
    """``CHANGE_ATTEMPTS - 1`` changes (a file atomically replaced meanwhile) still open."""
    made = _changing(monkeypatch, _root.CHANGE_ATTEMPTS - 1)
    os.close(_open_for(root_fd, opener))
    assert _root.CHANGE_ATTEMPTS == len(made)


@pytest.mark.parametrize("opener", ["file", "directory"])
def test_one_change_past_the_bound_is_path_unavailable(
    tree: Tree, root_fd: int, monkeypatch: pytest.MonkeyPatch, opener: str
) -> None:
    """``CHANGE_ATTEMPTS`` changes in a row fail closed: ``path_unavailable``, no retry more."""
    made = _changing(monkeypatch, _root.CHANGE_ATTEMPTS)
    with pytest.raises(PathError) as caught:
        _open_for(root_fd, opener)
    assert ("path_unavailable", _root.CHANGE_ATTEMPTS) == (caught.value.code, len(made))


def test_other_failures_are_never_retried(
    tree: Tree, root_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing file is answered after one resolution: only changes are retried."""
    made = _changing(monkeypatch, 0)
    with pytest.raises(PathError) as caught:
        open_beneath(root_fd, "missing.txt", os.O_RDONLY, follow_final=True, regular=True)
    assert ("not_found", 1) == (caught.value.code, len(made))


@pytest.mark.parametrize("opener", ["file", "directory"])
def test_the_retry_reads_the_changed_flag_never_the_message_text(
    tree: Tree, root_fd: int, monkeypatch: pytest.MonkeyPatch, opener: str
) -> None:
    """The change text without the flag is answered at once; the flag alone is retried."""
    made: list[str] = []

    def walk(*_args: object, **_kwargs: object) -> int:
        made.append("unflagged" if len(made) == 0 else "flagged")
        if len(made) == 1:
            raise PathError("path_unavailable", _root._CHANGED)
        raise PathError("path_unavailable", "another text", changed=True)

    monkeypatch.setattr(_root, "_fast_path_enabled", lambda _fd: False)
    monkeypatch.setattr(_root, "_walk", walk)
    with pytest.raises(PathError) as unflagged:
        _open_for(root_fd, opener)
    assert (["unflagged"], False) == (made, unflagged.value.changed)
    with pytest.raises(PathError) as flagged:
        _open_for(root_fd, opener)
    assert _root.CHANGE_ATTEMPTS == made.count("flagged")
    assert ("path_unavailable", True) == (flagged.value.code, flagged.value.changed)


@pytest.mark.parametrize("answers", [_root.OPENAT2_ATTEMPTS - 1, _root.OPENAT2_ATTEMPTS, 10_000])
def test_renames_racing_the_fast_path_hand_the_open_to_the_walk(
    tree: Tree, root_fd: int, monkeypatch: pytest.MonkeyPatch, answers: int
) -> None:
    """``openat2`` answers ``EAGAIN`` while any rename on the system races a ``..`` (the
    kernel's check is global): a ``..`` path stays readable however often that happens,
    through the portable walk after ``OPENAT2_ATTEMPTS``; an escape is still one."""
    (tree.root / "d").mkdir()
    (tree.root / "f.txt").write_text("f\n")
    (tree.root / "d" / "up").symlink_to("../../outside/secret.txt")
    real = _openat2.openat2
    left = [answers]

    def racing(*arguments: object) -> int:
        if left[0] > 0:
            left[0] -= 1
            return -errno.EAGAIN
        return real(*arguments)  # type: ignore[arg-type]

    monkeypatch.setattr(_root, "openat2", racing)
    assert b"f\n" == read_through(root_fd, "d/../f.txt")
    left[0] = answers
    assert "path_escape" == read_through(root_fd, "d/up")
