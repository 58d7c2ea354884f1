"""The call's plan (contract 11.1) as a pure value: no process, a table for the file system.

``plan_call`` looks at the file system only through ``kind``; here a dictionary answers,
so every rule is checked from all sides without a file or a process.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Callable, Mapping
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.coding._posix._bwrap import HIDDEN_HOME_BYTES
from spice.agent.coding._posix._plan import (
    CACHE_VARIABLES,
    GIT_PROTECTED,
    HOME_PROTECTED,
    MAXIMUM_PROTECTED_BINDS,
    CallPlan,
    Kind,
    Mask,
    Place,
    StartFacts,
    plan_call,
)
from spice.agent.coding._posix._supervisor import _main as supervisor
from spice.agent.coding._sandbox import CREDENTIALS, HOME_SHOWN, home_directory

D = Kind.DIRECTORY
F = Kind.FILE
ROOT = "/w/root"
HOME = "/home/u"
CACHE = "/home/u/.cache/spice-coding/0123456789abcdef"
EMPTY_DIR = "/home/u/.cache/spice-coding/.empty/directory"
EMPTY_FILE = "/home/u/.cache/spice-coding/.empty/file"


def table(entries: Mapping[str, Kind]) -> Callable[[str], Kind]:
    """``kind`` from a table; every parent of an entry is a directory."""
    known: dict[str, Kind] = {}
    for path, kind in entries.items():
        known[path] = kind
        parent = posixpath.dirname(path)
        while parent not in {"/", ""}:
            known.setdefault(parent, D)
            parent = posixpath.dirname(parent)
    return lambda path: known.get(path, Kind.ABSENT)


def facts(**changes: object) -> StartFacts:
    base = StartFacts(
        places=(Place(ROOT, 1, 2),),
        home=HOME,
        cache=CACHE,
        empty_directory=EMPTY_DIR,
        empty_file=EMPTY_FILE,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def plan(
    entries: Mapping[str, Kind],
    *,
    namespaces: bool = True,
    environment: tuple[str, ...] = (),
    **changes: object,
) -> CallPlan:
    return plan_call(
        facts(**changes),
        namespaces=namespaces,
        allow_network=False,
        environment=environment,
        temporary="/tmp" if namespaces else "/tmp/spice-call-x",
        kind=table(entries),
    )


def variables(result: CallPlan) -> dict[str, str]:
    return dict(entry.partition("=")[::2] for entry in result.environment)


# -- secrets -------------------------------------------------------------------------------


WRITABLE_HOME: Final = (Place(ROOT, 1, 2), Place(HOME, 1, 3))
"""A home that lies in a writable place: not hidden, so the deny-list is what hides."""


def test_each_existing_credential_is_masked_by_its_kind_and_an_absent_one_is_not() -> None:
    """Where the home is writable (not hidden), each credential is masked by its kind."""
    present = {f"{HOME}/.ssh": D, f"{HOME}/.netrc": F, f"{HOME}/.config/gh": D}
    result = plan({**present, f"{HOME}/.cache": D}, places=WRITABLE_HOME)
    assert result.home is None
    masks = {mask.path: mask for mask in result.masks if mask.hidden}
    assert set(present) == set(masks)
    assert all(
        masks[path].kind is kind and not masks[path].absent for path, kind in present.items()
    )
    assert f"{HOME}/.aws" not in result.hidden


def test_every_default_credential_is_hidden_where_it_exists() -> None:
    """In a writable home every default credential is masked (``.config/git/credentials``
    and ``.local/share/uv/credentials`` lie beneath others' parents: all counted)."""
    entries = {f"{HOME}/{name}": F for name in CREDENTIALS}
    result = plan(entries, places=WRITABLE_HOME)
    assert len(CREDENTIALS) == len(result.hidden)


def test_allow_read_takes_one_back_and_deny_read_hides_more() -> None:
    """``--allow-read`` shows a credential again, ``--deny-read`` hides one more path."""
    entries = {f"{HOME}/.ssh": D, f"{HOME}/.npmrc": F, "/srv/secret": F}
    result = plan(entries, allow_read=(".npmrc",), deny_read=("/srv/secret",))
    assert {"/srv/secret"} == set(result.hidden)
    assert f"{HOME}/.npmrc" in result.shown
    assert f"{HOME}/.ssh" not in result.shown
    kept = plan(entries, allow_read=(".npmrc",), deny_read=("/srv/secret",), places=WRITABLE_HOME)
    assert {f"{HOME}/.ssh", "/srv/secret"} == set(kept.hidden)


# -- the home through an allow-list (contract 12.2) ------------------------------------------


def test_the_home_is_hidden_and_only_the_allow_list_that_exists_is_shown() -> None:
    """An empty read-only tmpfs over the home; each ``HOME_SHOWN`` place that exists is
    bound read-only on it; an unlisted one (a credential no list knows) is not."""
    entries = {f"{HOME}/{name}": D for name in HOME_SHOWN}
    entries |= {f"{HOME}/.claude/.credentials.json": F, f"{HOME}/.env": F, f"{HOME}/.cache": D}
    result = plan(entries)
    assert HOME == result.home
    assert {f"{HOME}/{name}" for name in HOME_SHOWN} == set(result.shown)
    argv = result.bwrap_argv("/usr/bin/bwrap", None, None)
    tmpfs = argv.index(HOME) - 1
    assert "--tmpfs" == argv[tmpfs]
    assert argv.index("--remount-ro") > max(
        i for i, word in enumerate(argv) if word.startswith(HOME + "/")
    )
    assert ["--remount-ro", HOME] == argv[
        argv.index("--remount-ro") : argv.index("--remount-ro") + 2
    ]
    assert all(argv.index(path) > tmpfs for path in result.shown)
    assert f"{HOME}/.env" not in " ".join(argv)
    assert () == result.hidden  # nothing to mask: the tmpfs covers it
    assert ["--size", str(HIDDEN_HOME_BYTES)] == argv[tmpfs - 2 : tmpfs]
    unsized = result.bwrap_argv("/usr/bin/bwrap", None, None, sized=False)
    assert "--size" != unsized[unsized.index(HOME) - 2]


def test_a_credential_beneath_a_shown_place_is_masked_and_one_elsewhere_is_not() -> None:
    """git's and uv's credential stores lie inside shown places: masked there."""
    entries = {
        f"{HOME}/.config/git/credentials": F,
        f"{HOME}/.local/share/uv/credentials": D,
        f"{HOME}/.ssh": D,
    }
    result = plan(entries)
    assert {f"{HOME}/.config/git/credentials", f"{HOME}/.local/share/uv/credentials"} == set(
        result.hidden
    )


def test_shown_paths_are_outermost_never_denied_nor_inside_writable_places_and_exist() -> None:
    """Boundaries of what is shown: nested, denied, writable, absent, the home itself."""
    entries = {
        f"{HOME}/.local/lib": D,
        f"{HOME}/.local/lib/python": D,
        f"{HOME}/.pyenv": D,
        f"{HOME}/w/root": D,
        "/etc/ca.pem": F,
        "/tmp/ca.pem": F,
    }
    result = plan(
        entries,
        places=(Place(f"{HOME}/w/root", 1, 2),),
        deny_read=(f"{HOME}/.pyenv",),
        shown=(
            f"{HOME}/.local/lib/python",
            "/etc/ca.pem",
            "/tmp/ca.pem",
            f"{HOME}/w/root/x",
            HOME,
            "/gone",
        ),
        trusted=(f"{HOME}/w/root/.venv",),
    )
    # /etc is visible anyway: only what the hidden home and the private /tmp cover is bound.
    assert (f"{HOME}/.local/lib", "/tmp/ca.pem") == result.shown


def test_the_servers_code_beneath_a_hidden_home_is_shown() -> None:
    """The interpreter and modules the supervisor runs stay visible."""
    entries = {f"{HOME}/src/spice/.venv": D}
    result = plan(entries, trusted=(f"{HOME}/src/spice/.venv", "/usr/bin/bwrap"))
    assert (f"{HOME}/src/spice/.venv",) == result.shown


def test_a_home_in_a_writable_place_or_unknown_is_not_hidden() -> None:
    """Boundary: the home that is (or lies in) a writable place, or none at all."""
    assert plan({}, places=WRITABLE_HOME).home is None
    assert plan({}, home=None).home is None
    assert plan({}, places=(Place("/home", 1, 2),)).home is None
    assert HOME == plan({}, places=(Place(f"{HOME}/w", 1, 2),)).home


def test_without_namespaces_the_home_is_not_hidden_and_tools_says_so() -> None:
    """The fallback path reads everything: the plan says so and hides nothing."""
    result = plan({f"{HOME}/.env": F}, namespaces=False)
    assert result.home is None
    said = result.rules()["not_held_without_namespaces"]
    assert isinstance(said, list)
    assert "reads are not confined (credentials are readable)" in said


def test_a_path_inside_the_worktree_or_holding_a_writable_place_is_never_hidden() -> None:
    inside = f"{ROOT}/.ssh"
    holder = "/srv/data"
    entries = {inside: D, f"{holder}/cache": D, f"{HOME}/.ssh": D}
    result = plan(
        entries,
        home=ROOT,
        deny_read=(inside, holder),
        places=(Place(ROOT, 1, 2), Place(f"{holder}/cache", 1, 3)),
    )
    assert inside not in result.hidden
    assert holder not in result.hidden


def test_without_a_home_nothing_of_the_home_is_planned() -> None:
    result = plan({f"{HOME}/.ssh": D}, home=None)
    assert () == result.hidden
    assert variables(result)["XDG_CACHE_HOME"] == CACHE  # the cache, where it is
    assert CACHE in result.writable


# -- nothing persists outside ------------------------------------------------------------


def test_git_paths_inside_each_writable_place_are_read_only_or_masked_when_absent() -> None:
    other = "/w/other"
    entries = {
        f"{ROOT}/.git/config": F,
        f"{ROOT}/.git/hooks": D,
        f"{other}/.git/config": F,
    }
    result = plan(entries, places=(Place(ROOT, 1, 2), Place(other, 1, 3)))
    assert {f"{ROOT}/.git/config", f"{ROOT}/.git/hooks", f"{other}/.git/config"} <= set(
        result.read_only
    )
    absent = {mask.path: mask.kind for mask in result.mount_points}
    expected = {
        f"{ROOT}/.git/info": D,
        f"{ROOT}/.gitmodules": F,
        f"{other}/.git/hooks": D,
        f"{other}/.git/info": D,
        f"{other}/.gitmodules": F,
    }
    assert expected == absent
    assert len(GIT_PROTECTED) * 2 == len(result.protected)


def test_a_writable_place_without_a_git_directory_gets_no_git_rule() -> None:
    assert () == plan({f"{ROOT}/src": D}).protected
    pointer = plan({f"{ROOT}/.git": F, f"{ROOT}/src": D})  # a linked worktree's .git file
    assert (f"{ROOT}/.git",) == pointer.protected  # read-only: it cannot be redirected
    assert () == pointer.pinned


def test_the_directories_holding_protected_paths_are_pinned_top_down() -> None:
    repository = plan({f"{ROOT}/.git/config": F})
    assert (f"{ROOT}/.git",) == repository.pinned  # mv .git .git2 && mkdir .git: refused
    home = f"{ROOT}/users/u"
    nested = plan({f"{home}/.config": D, f"{home}/.bashrc": F}, home=home)
    assert (f"{ROOT}/users", home, f"{home}/.config") == nested.pinned
    argv = nested.bwrap_argv("/usr/bin/bwrap", None, None)
    binds = _binds(argv)
    assert binds.index(("--bind", home, home)) < binds.index(
        ("--ro-bind", f"{home}/.bashrc", f"{home}/.bashrc")
    )


def test_the_shell_files_are_protected_only_in_a_writable_home() -> None:
    outside = plan({f"{HOME}/.bashrc": F})
    assert not any(path.startswith(HOME) for path in outside.protected)
    inside = plan({f"{ROOT}/.bashrc": F, f"{ROOT}/.config": D}, home=ROOT)
    protected = set(inside.protected)
    assert f"{ROOT}/.bashrc" in inside.read_only
    assert {f"{ROOT}/{name}" for name, _ in HOME_PROTECTED} == protected
    missing = {mask.path for mask in inside.mount_points}
    assert f"{ROOT}/.config/git" in missing
    assert f"{ROOT}/.bashrc" not in missing


def test_a_protected_path_under_a_missing_parent_is_not_planned() -> None:
    inside = plan({}, home=ROOT)  # no ~/.config: .config/git would need two mount points
    assert f"{ROOT}/.config/git" not in inside.protected


# -- the server's own code -----------------------------------------------------------------


def test_the_servers_code_in_a_writable_place_is_read_only_and_elsewhere_untouched() -> None:
    venv = f"{ROOT}/.venv"
    src = f"{ROOT}/src"
    entries = {venv: D, src: D, "/usr/bin/python3": F}
    result = plan(entries, trusted=(venv, f"{venv}/lib", src, "/usr/bin/python3"))
    assert (venv, src) == result.read_only


def test_a_mount_point_is_not_planned_inside_a_read_only_place() -> None:
    entries = {f"{ROOT}/.git": D}
    result = plan(entries, trusted=(ROOT,))
    assert (ROOT,) == result.read_only
    assert () == result.mount_points


# -- caches --------------------------------------------------------------------------------


def test_the_cache_is_bound_over_the_homes_caches_that_exist() -> None:
    entries = {f"{HOME}/.cache": D, f"{HOME}/.npm": D, f"{HOME}/go/pkg/mod": D}
    result = plan(entries)
    assert (
        (CACHE, f"{HOME}/.cache"),
        (f"{CACHE}/npm", f"{HOME}/.npm"),
        (f"{CACHE}/go-mod", f"{HOME}/go/pkg/mod"),
    ) == result.caches
    env = variables(result)
    assert f"{HOME}/.cache" == env["XDG_CACHE_HOME"]
    assert f"{HOME}/.cache/uv" == env["UV_CACHE_DIR"]
    assert {name for name, _ in CACHE_VARIABLES} <= set(env)
    assert f"{HOME}/.npm" in result.landlock_writable()
    assert CACHE not in result.writable


def test_without_namespaces_the_variables_name_the_cache_itself() -> None:
    result = plan({f"{HOME}/.cache": D, f"{HOME}/.ssh": D}, namespaces=False)
    env = variables(result)
    assert f"{CACHE}/uv" == env["UV_CACHE_DIR"]
    assert (ROOT, CACHE) == result.writable
    assert () == result.caches
    assert () == result.masks
    assert () == result.read_only
    assert "/tmp/spice-call-x" == env["TMPDIR"]
    assert "reads are not confined" in str(result.rules())


def test_without_a_cache_no_variable_is_set_and_the_environment_is_kept() -> None:
    result = plan({}, cache=None, environment=("XDG_CACHE_HOME=/mine", "TMP=/old", "A=1"))
    env = variables(result)
    assert "/mine" == env["XDG_CACHE_HOME"]
    assert "/tmp" == env["TMP"] == env["TMPDIR"]
    assert "TEMP" not in env
    assert "1" == env["A"]


def test_the_cache_variables_replace_the_allow_listed_ones() -> None:
    result = plan({f"{HOME}/.cache": D}, environment=("UV_CACHE_DIR=/real/uv",))
    assert f"{HOME}/.cache/uv" == variables(result)["UV_CACHE_DIR"]


def test_with_namespaces_uv_is_told_to_copy_from_the_cache_mount() -> None:
    assert "copy" == variables(plan({f"{HOME}/.cache": D}))["UV_LINK_MODE"]
    assert "copy" == variables(plan({}))["UV_LINK_MODE"]  # the cache bound where it is


def test_a_link_mode_the_command_names_is_kept() -> None:
    result = plan({f"{HOME}/.cache": D}, environment=("UV_LINK_MODE=hardlink",))
    assert "hardlink" == variables(result)["UV_LINK_MODE"]


def test_no_link_mode_without_namespaces_without_a_cache_or_with_the_cache_inside() -> None:
    # Without namespaces the cache and the worktree are not mounts of their own: uv links.
    assert "UV_LINK_MODE" not in variables(plan({f"{HOME}/.cache": D}, namespaces=False))
    assert "UV_LINK_MODE" not in variables(plan({}, cache=None))
    # A cache inside a writable place lies on that place's mount: uv links there too.
    inside = plan({f"{HOME}/.cache": D}, places=WRITABLE_HOME)
    assert "UV_LINK_MODE" not in variables(inside)
    assert "UV_LINK_MODE" in str(plan({f"{HOME}/.cache": D}).rules())


# -- rendering -----------------------------------------------------------------------------


def _binds(argv: list[str]) -> list[tuple[str, str, str]]:
    found = []
    for index, word in enumerate(argv):
        if word in {"--bind", "--ro-bind"}:
            found.append((word, argv[index + 1], argv[index + 2]))
    return found


def test_bwraps_argv_binds_writable_then_caches_then_pinned_then_read_only_then_masks() -> None:
    entries = {
        f"{HOME}/.cache": D,
        f"{HOME}/.ssh": D,
        f"{HOME}/.netrc": F,
        f"{ROOT}/.git/config": F,
        "/srv/keys": D,
        "/srv/token": F,
    }
    result = plan(
        entries,
        places=(Place(ROOT, 1, 2), Place(f"{HOME}/.cache", 1, 3)),
        deny_read=("/srv/keys", "/srv/token"),
    )
    argv = result.bwrap_argv("/usr/bin/bwrap", 7, 8)
    binds = _binds(argv)[1:]  # after --ro-bind / /
    assert ("--bind", ROOT, ROOT) == binds[0]
    assert ("--bind", f"{HOME}/.cache", f"{HOME}/.cache") == binds[1]
    assert ("--bind", CACHE, f"{HOME}/.cache") == binds[2]
    assert ("--bind", f"{ROOT}/.git", f"{ROOT}/.git") == binds[3]  # pinned
    assert ("--ro-bind", f"{ROOT}/.git/config", f"{ROOT}/.git/config") == binds[4]
    masks = binds[5:]
    assert ("--ro-bind", EMPTY_DIR, "/srv/keys") in masks
    assert ("--ro-bind", EMPTY_FILE, "/srv/token") in masks
    assert ("--ro-bind", EMPTY_FILE, f"{ROOT}/.gitmodules") in masks
    assert "--unshare-net" in argv
    assert argv[-1] == "--"


def test_a_plan_without_namespaces_has_no_bwrap_argv_and_masks_need_templates() -> None:
    with pytest.raises(ValueError, match="no bwrap argv"):
        plan({}, namespaces=False).bwrap_argv("/b", None, None)
    with pytest.raises(ValueError, match="template"):
        plan({f"{HOME}/.ssh": D}, empty_directory=None, places=WRITABLE_HOME).bwrap_argv(
            "/b", None, None
        )


def test_the_supervisors_spec_is_rendered_from_the_same_plan() -> None:
    result = plan({f"{HOME}/.cache": D}, environment=("LANG=C",))
    told = result.spec(
        server=0,
        abi=7,
        layers=3,
        executable="/bin/true",
        arguments=("a",),
        workdir=b"1:2",
        lifeline=9,
    )
    decoded = supervisor.SupervisorSpec.decode(told.encode())
    assert told == decoded
    assert tuple(os.fsencode(p) for p in result.landlock_writable()) == decoded.writable
    assert decoded.environ[b"XDG_CACHE_HOME"] == os.fsencode(f"{HOME}/.cache")
    assert decoded.environ[b"LANG"] == b"C"
    assert 9 == decoded.lifeline
    assert [b"/bin/true", b"a"] == decoded.argv


def test_the_plan_is_immutable() -> None:
    result = plan({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.writable = ()  # type: ignore[misc]
    assert isinstance(Mask("/x", F, hidden=True), Mask)


# -- properties over generated trees --------------------------------------------------------

_NAMES = st.sampled_from(
    [".git", "hooks", "config", "info", ".gitmodules", ".ssh", ".cache", "src", "a", ".venv"]
)
_RELATIVE = st.lists(_NAMES, min_size=1, max_size=4).map("/".join)
_LOCATIONS = st.sampled_from([ROOT, HOME, "/srv", f"{ROOT}/sub"])
_ENTRIES = st.dictionaries(
    st.builds(posixpath.join, _LOCATIONS, _RELATIVE), st.sampled_from([D, F]), max_size=12
)


@settings(max_examples=200, deadline=None)
@given(
    _ENTRIES,
    st.booleans(),
    st.lists(st.builds(posixpath.join, _LOCATIONS, _RELATIVE), max_size=3),
    st.lists(st.sampled_from([ROOT, HOME, f"{ROOT}/.venv", "/srv"]), max_size=3),
)
def test_every_generated_plan_keeps_the_rules(
    entries: dict[str, Kind], writable_home: bool, denied: list[str], trusted: list[str]
) -> None:
    kind = table(entries)
    home = ROOT if writable_home else HOME
    start = facts(home=home, deny_read=tuple(denied), trusted=tuple(trusted))
    result = plan_call(
        start, namespaces=True, allow_network=False, environment=(), temporary="/tmp", kind=kind
    )
    again = plan_call(
        start, namespaces=True, allow_network=False, environment=(), temporary="/tmp", kind=kind
    )
    assert result == again  # pure: the same inputs give the same plan

    def inside(path: str) -> bool:
        return any(path == place or path.startswith(place + "/") for place in result.writable)

    for path in result.hidden:
        assert path != ROOT  # never the worktree
        assert not path.startswith(ROOT + "/")  # nor in it
        assert kind(path) is not Kind.ABSENT  # only what exists is masked
    for path in result.protected:
        assert inside(path)
    for mask in result.mount_points:
        assert kind(mask.path) is Kind.ABSENT
        assert kind(posixpath.dirname(mask.path)) is D  # one mount point, in a directory
        assert not any(
            mask.path.startswith(path + "/") for path in result.read_only
        )  # never inside a read-only bind
    paths = [mask.path for mask in result.masks]
    assert len(paths) == len(set(paths))
    for path in result.read_only:
        assert not any(path.startswith(other + "/") for other in result.read_only)
    env = variables(result)
    assert "/tmp" == env["TMPDIR"]


# -- the start facts' home and cache (the only lookups outside the plan) --------------------


def test_the_home_is_home_else_the_password_database() -> None:
    import pwd  # noqa: PLC0415 - POSIX only, as the plan

    database = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    assert database == home_directory({})
    assert database == home_directory({"HOME": "relative/home"})
    assert "/srv/h" == home_directory({"HOME": "/srv/h"})
    assert home_directory({"HOME": "/"}) is None  # a home of / hides nothing useful


def test_the_cache_is_per_root_under_the_users_cache_directory() -> None:
    from spice.agent.coding._posix import _facts  # noqa: PLC0415

    one = _facts.cache_directory("/w/a", {"HOME": "/srv/h"})
    two = _facts.cache_directory("/w/b", {"HOME": "/srv/h"})
    assert one is not None
    assert two is not None
    assert one != two
    assert one.startswith("/srv/h/.cache/spice-coding/")
    assert len(os.path.basename(one)) == _facts.ROOT_HASH_CHARACTERS
    moved = _facts.cache_directory("/w/a", {"HOME": "/srv/h", "XDG_CACHE_HOME": "/c"})
    assert moved == "/c/spice-coding/" + os.path.basename(one)
    relative = _facts.cache_directory("/w/a", {"HOME": "/srv/h", "XDG_CACHE_HOME": "c"})
    assert relative == one  # a relative XDG_CACHE_HOME is ignored, as the spec says


def test_the_existing_protected_paths_are_bound_read_only_up_to_the_bound() -> None:
    """``protected`` (the guard's baseline): bound read-only on themselves inside a
    writable place, at most ``MAXIMUM_PROTECTED_BINDS``; outside every place, never."""
    inside = [f"{ROOT}/p{index}/.mcp.json" for index in range(MAXIMUM_PROTECTED_BINDS + 1)]
    made = plan_call(
        StartFacts((Place(ROOT, 1, 1),)),
        namespaces=True,
        allow_network=False,
        environment=(),
        temporary="/tmp",
        kind=lambda _path: Kind.FILE,
        protected=(*inside, "/elsewhere/.mcp.json"),
    )
    assert set(inside[:MAXIMUM_PROTECTED_BINDS]) <= set(made.read_only)
    assert inside[-1] not in made.read_only
    assert "/elsewhere/.mcp.json" not in made.read_only
