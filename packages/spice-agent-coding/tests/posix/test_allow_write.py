"""``--allow-write DIR`` (contract 10.1): parsed, checked, and enforced by the real kernel."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procutil import Collect

from spice.agent.coding import PosixLauncher, _cli
from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import resolve_containment
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.coding._settings._resolve import Settings, flags_of, resolve_settings
from spice.agent.coding._settings._values import (
    ALLOW_WRITE_VARIABLE,
    MAXIMUM_ALLOW_WRITE,
    SettingsError,
)
from spice.agent.process import Outcome, Spec

PYTHON: Final = os.path.realpath(sys.executable)
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())


def parsed(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    return resolve_settings(flags_of(_cli._parser().parse_args(argv)), environ or {})


def test_each_flag_adds_a_resolved_directory_once(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")  # outside every writable place: followed
    argv = ["--root", str(tmp_path / "root"), "--allow-write", str(tmp_path / "a"), "serve"]
    argv += ["--allow-write", str(tmp_path / "b"), "--allow-write", str(tmp_path / "link")]
    chosen = parsed(argv).allow_write
    assert (str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve())) == chosen


def test_the_variable_is_split_on_the_path_separator_and_the_flag_wins(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    joined = os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")])
    from_variable = parsed(["--root", str(tmp_path), "serve"], {ALLOW_WRITE_VARIABLE: joined})
    assert 2 == len(from_variable.allow_write)
    flag = ["--root", str(tmp_path), "--allow-write", str(tmp_path / "a"), "serve"]
    assert 1 == len(parsed(flag, {ALLOW_WRITE_VARIABLE: joined}).allow_write)
    assert () == parsed(["--root", str(tmp_path), "serve"], {ALLOW_WRITE_VARIABLE: " "}).allow_write


@pytest.mark.parametrize("kind", ["relative", "missing", "file", "slash", "nul"])
def test_what_is_not_an_existing_absolute_directory_is_refused(tmp_path: Path, kind: str) -> None:
    (tmp_path / "file").write_text("")
    value = {
        "relative": "tree",
        "missing": str(tmp_path / "missing"),
        "file": str(tmp_path / "file"),
        "slash": "/",
        "nul": str(tmp_path) + "\0x",
    }[kind]
    with pytest.raises(SettingsError) as caught:
        parsed(["--root", str(tmp_path), "serve"], {ALLOW_WRITE_VARIABLE: value})
    message = str(caught.value)
    # The refusal names the path the person gave (escaped: a NUL is shown, never sent) and
    # why (contract 12.4), on one line.
    reason = {
        "relative": "is relative",
        "missing": "does not exist",
        "file": "is not a directory",
        "slash": "cannot be /",
        "nul": "NUL character",
    }[kind]
    assert reason in message
    if kind != "slash":  # "/" is named by the reason itself
        assert repr(value.encode("unicode_escape").decode("ascii")) in message
    assert "\0" not in message
    assert "\n" not in message


def test_the_number_of_directories_is_bounded_on_both_sides(tmp_path: Path) -> None:
    for index in range(MAXIMUM_ALLOW_WRITE + 1):
        (tmp_path / f"d{index}").mkdir()
    at_bound = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(MAXIMUM_ALLOW_WRITE))
    environ = {ALLOW_WRITE_VARIABLE: at_bound}
    assert MAXIMUM_ALLOW_WRITE == len(
        parsed(["--root", str(tmp_path), "serve"], environ).allow_write
    )
    over = at_bound + os.pathsep + str(tmp_path / f"d{MAXIMUM_ALLOW_WRITE}")
    with pytest.raises(SettingsError, match=str(MAXIMUM_ALLOW_WRITE)):
        parsed(["--root", str(tmp_path), "serve"], {ALLOW_WRITE_VARIABLE: over})


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_any_text_is_accepted_only_as_an_existing_absolute_directory(
    tmp_path: Path, text: str
) -> None:
    try:
        chosen = parsed(["--root", str(tmp_path), "serve"], {ALLOW_WRITE_VARIABLE: text})
    except SettingsError:
        return
    for path in chosen.allow_write:
        assert os.path.isabs(path)
        assert os.path.isdir(path)
        assert path != "/"


@pytest.mark.parametrize("where", ["root", "other"])
def test_a_link_inside_a_writable_place_is_refused_naming_it(tmp_path: Path, where: str) -> None:
    """R4-5: a link beneath the root, or beneath another --allow-write directory, is not
    followed; the refusal names the link (what the user named is a path a command made)."""
    root, other, outside = tmp_path / "root", tmp_path / "other", tmp_path / "outside"
    for directory in (root, other, outside):
        directory.mkdir()
    holder = root if where == "root" else other
    (holder / "x").mkdir()
    (holder / "x" / "sub").symlink_to(outside)
    argv = ["--root", str(root), "--allow-write", str(other)]
    argv += ["--allow-write", str(holder / "x" / "sub"), "serve"]
    with pytest.raises(SettingsError) as caught:
        parsed(argv)
    message = str(caught.value)
    assert str(holder.resolve() / "x" / "sub") in message
    assert "symbolic link inside a writable place" in message
    assert str(outside) not in message.replace(str(holder.resolve()), "")


def test_a_link_above_every_writable_place_is_followed(tmp_path: Path) -> None:
    """A link that no command could make (its directory is writable by none of them)."""
    root, real = tmp_path / "root", tmp_path / "real"
    root.mkdir()
    (real / "cache").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    argv = ["--root", str(root), "--allow-write", str(tmp_path / "alias" / "cache"), "serve"]
    assert (str((real / "cache").resolve()),) == parsed(argv).allow_write


def test_a_directory_swapped_for_a_link_by_a_command_is_refused_at_the_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R4-5 across starts: a contained command replaced the parent of an --allow-write
    directory with one holding a link of that name; the next start exits 2 naming it."""
    if landlock_abi() < 1:
        pytest.skip("the kernel has no Landlock")
    root, outside = (tmp_path / "root").resolve(), (tmp_path / "outside").resolve()
    (root / "x" / "sub").mkdir(parents=True)
    outside.mkdir()
    allowed = ["--root", str(root), "--allow-write", str(root / "x" / "sub")]
    swap = f"mv x y && mkdir x && ln -s {outside} x/sub"
    arguments = json.dumps({"argv": ["/bin/sh", "-c", swap]})
    code = _cli.main([*allowed, "--sandbox", "workspace", "call", "shell", arguments])
    answer = json.loads(capsys.readouterr().out)
    escape = json.dumps({"argv": ["/bin/sh", "-c", f"echo escaped > {outside}/AWR"]})
    if answer.get("staged") is True:
        # A staged worktree cannot move a directory that holds a mount (the --allow-write
        # bind): the swap fails inside, and nothing is changed outside.
        assert (1, False) == (code, answer["ok"])
        _cli.main([*allowed, "--sandbox", "workspace", "call", "shell", escape])
        capsys.readouterr()
        assert [] == os.listdir(outside)
        assert (root / "x" / "sub").is_dir()
        return
    assert (0, True, True) == (code, answer["ok"], answer["contained"])
    code = _cli.main([*allowed, "--sandbox", "workspace", "call", "shell", escape])
    err = capsys.readouterr().err
    assert (2, 1) == (code, len(err.strip().splitlines()))
    assert str(root / "x" / "sub") in err
    assert [] == os.listdir(outside)


def test_a_bad_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _cli.main(["--root", str(tmp_path), "--allow-write", "relative", "tools"])
    err = capsys.readouterr().err
    assert (2, 1) == (code, len(err.strip().splitlines()))


# -- enforced, on both paths ------------------------------------------------------------------


@pytest.fixture(params=("namespaces", "fallback"))
def path_kind(request: pytest.FixtureRequest) -> str:
    if landlock_abi() < 1:
        pytest.skip("the kernel has no Landlock")
    if request.param == "namespaces" and not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    return str(request.param)


async def test_a_contained_command_writes_an_allowed_directory_and_nothing_beside_it(
    tmp_path: Path, path_kind: str
) -> None:
    root, cache, sibling = (tmp_path / n for n in ("root", "cache", "sibling"))
    for directory in (root, cache, sibling):
        directory.mkdir()
    made = NAMESPACES if path_kind == "namespaces" else Namespaces(None, "simulated")
    policy = dataclasses.replace(
        resolve_containment("workspace", allow_write=(str(cache),)), namespaces=made
    )
    code = (
        "import sys\n"
        "for target in sys.argv[1:]:\n"
        "    try:\n"
        "        open(target, 'w').write('x'); print('ok')\n"
        "    except OSError:\n"
        "        print('refused')\n"
    )
    out, err = Collect(), Collect()
    spec = Spec(
        PYTHON,
        ("-I", "-c", code, str(cache / "f"), str(sibling / "f")),
        str(root),
        ("PATH=/usr/bin:/bin",),
        b"",
        out,
        err,
    )
    process = await PosixLauncher.build(policy, str(root)).start(spec)
    async with asyncio.timeout(60):
        await process.wait_exit()
        await process.wait()
    assert Outcome.exited(0) == process.result(), err.data
    assert ["ok", "refused"] == out.data.decode().split()
    assert ["f"] == os.listdir(cache)
    assert [] == os.listdir(sibling)
    assert str(cache) in (policy.sentence or "")
    assert [str(cache)] == policy.report()["allow_write"]


def test_the_tools_output_lists_the_allowed_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cache").mkdir()
    code = _cli.main(["--root", str(tmp_path), "--allow-write", str(tmp_path / "cache"), "tools"])
    document = json.loads(capsys.readouterr().out)
    assert 0 == code
    assert [str((tmp_path / "cache").resolve())] == document["sandbox"]["allow_write"]
    if document["sandbox"]["mode"] == "workspace":
        shell = next(t for t in document["tools"] if t["name"] == "shell")
        assert str((tmp_path / "cache").resolve()) in shell["description"]
