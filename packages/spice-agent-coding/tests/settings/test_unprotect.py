"""``--unprotect`` and the application's one protected-paths policy (contract 12.1).

The application sets the product's ``Config.protected_paths`` and hands the same value to
the sandbox; ``replace`` through the CLI refuses ``.git/config`` (R5-1), ``tools`` lists
what is protected and what was given back, and a path that cannot be given back is a
start error (exit 2, one line naming it).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from http_support import http_server, sdk_client

from spice.agent.coding._cli import main, protecting_http
from spice.agent.coding._mcp._http_settings import HttpSettings
from spice.agent.coding._settings._protection import (
    MAXIMUM_UNPROTECT,
    NAMED_CHARACTERS,
    UnprotectError,
    policy_of,
    protection_report,
)
from spice.agent.coding._settings._reload import kept_extra
from spice.agent.coding._settings._resolve import Flags, resolve_settings
from spice.agent.coding._settings._values import SettingsError
from spice.agent.tools.coding import ProtectedPaths


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    (tree / ".git" / "config").write_text("[core]\n\tbare = false\n")
    return tree


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_settings_protect_the_standard_set_by_default(worktree: Path) -> None:
    settings = resolve_settings(Flags(root=str(worktree)), {})
    policy = settings.config.protected_paths
    assert policy == ProtectedPaths.default()
    assert settings.sandbox_request().protected is policy  # one value for both writers


def test_unprotect_gives_back_a_protected_path(worktree: Path) -> None:
    settings = resolve_settings(
        Flags(root=str(worktree), unprotect=(".vscode", str(worktree / ".git" / "hooks"))), {}
    )
    policy = settings.config.protected_paths
    assert str(worktree / ".vscode") in policy.unprotect
    assert not policy.protects(str(worktree), ".vscode/tasks.json")
    assert not policy.protects(str(worktree), ".git/hooks/pre-commit")
    assert policy.protects(str(worktree), ".git/config")


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("src/a.py", "is not protected"),
        (".", "is not protected"),
        ("/elsewhere/.vscode", "lies outside the worktree"),
        ("../other/.vscode", "lies outside the worktree"),
        ("", "needs a path"),
    ],
)
def test_a_path_that_cannot_be_given_back_is_refused(
    worktree: Path, given: str, named: str
) -> None:
    with pytest.raises(SettingsError, match=named) as refused:
        resolve_settings(Flags(root=str(worktree), unprotect=(given,)), {})
    assert "\n" not in str(refused.value)
    if given:
        assert repr(given) in str(refused.value)


def test_the_count_and_the_named_length_are_bounded(worktree: Path) -> None:
    root = str(worktree)
    at_bound = [f".vscode/{index}" for index in range(MAXIMUM_UNPROTECT)]
    assert len(policy_of(at_bound, root).unprotect) >= MAXIMUM_UNPROTECT
    with pytest.raises(UnprotectError, match="more than"):
        policy_of([*at_bound, ".idea"], root)
    long = "x" * (NAMED_CHARACTERS + 50)
    with pytest.raises(UnprotectError) as refused:
        policy_of([long], root)
    assert long[:NAMED_CHARACTERS] + "..." in str(refused.value)
    assert long not in str(refused.value)


def test_an_allow_write_place_holds_paths_to_give_back(worktree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    policy = policy_of([str(cache / ".envrc")], str(worktree), [str(cache)])
    assert not policy.protects(str(cache), ".envrc")


def test_the_cli_refuses_it_at_start_with_exit_2(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(capsys, "--root", str(worktree), "--unprotect", "README", "tools")
    assert (2, "") == (code, out)
    assert "--unprotect 'README' is not protected" in err
    assert 1 == err.count("\n")


def test_tools_lists_what_is_protected_and_given_back(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_main(
        capsys, "--root", str(worktree), "--sandbox", "off", "tools", "--unprotect", ".idea"
    )
    assert code == 0
    protected = json.loads(out)["protected"]
    assert protected == protection_report(
        ProtectedPaths.default(
            unprotect=[str(worktree / ".idea"), os.path.realpath(worktree / ".idea")]
        )
    )
    assert any(".mcp.json" in line for line in protected["protected"])
    assert "Makefile" in protected["stays_open"]


def test_replace_through_the_cli_refuses_git_config(
    worktree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R5-1: the application's ``replace`` obeys the policy; the file keeps its bytes."""
    config = worktree / ".git" / "config"
    before = config.read_bytes()
    arguments = {
        "path": ".git/config",
        "content": "[core]\n\tfsmonitor = touch /tmp/x\n",
        "expected_sha256": hashlib.sha256(before).hexdigest(),
    }
    code, out, _ = run_main(
        capsys,
        "--root",
        str(worktree),
        "--sandbox",
        "off",
        "call",
        "replace",
        json.dumps(arguments),
    )
    content = json.loads(out)
    assert (1, False, "path_unavailable") == (code, content["ok"], content["code"])
    assert "--unprotect" in content["message"]
    assert config.read_bytes() == before
    code, out, _ = run_main(
        capsys,
        "--root",
        str(worktree),
        "--sandbox",
        "off",
        "--unprotect",
        ".git/config",
        "call",
        "replace",
        json.dumps(arguments),
    )
    assert (0, True) == (code, json.loads(out)["ok"])


def test_the_http_servers_own_files_are_protected(worktree: Path, tmp_path: Path) -> None:
    """The token file and the audit log join the policy (12.1: the server's own files):
    ``replace`` refuses them where they lie beneath the root, the sandbox obeys the same."""
    tokens = worktree / "secrets" / "tokens"
    audit = tmp_path / "audit.log"
    settings = resolve_settings(Flags(root=str(worktree), unprotect=(".vscode",)), {})
    served = protecting_http(settings, HttpSettings(token_file=str(tokens), audit_log=str(audit)))
    policy = served.config.protected_paths
    assert policy.protects(str(worktree), "secrets/tokens")
    assert not policy.protects(str(worktree), "secrets/other")
    assert not policy.protects(str(worktree), ".vscode/x")  # what was given back stays so
    assert str(audit) in policy.extra
    assert served.sandbox_request().protected is policy
    assert protecting_http(settings, HttpSettings()).config == settings.config


async def test_a_write_token_over_http_cannot_plant_what_git_runs(
    tmp_path: Path, worktree: Path
) -> None:
    """R5-1 over HTTP: a token with only the ``write`` scope replaces ``.git/config``
    with a planted ``core.fsmonitor``: refused, the file keeps its bytes; an ordinary file
    is still written."""
    config = worktree / ".git" / "config"
    before = config.read_bytes()
    async with (
        http_server(tmp_path, worktree, "--sandbox", "off") as server,
        sdk_client(server.url, server.tokens["writer"]) as client,
    ):
        planted = await client.call_tool(
            "replace",
            {
                "path": ".git/config",
                "content": "[core]\n\tfsmonitor = touch /tmp/x\n",
                "expected_sha256": hashlib.sha256(before).hexdigest(),
            },
        )
        made = await client.call_tool(
            "replace", {"path": "notes.txt", "content": "x\n", "create": True}
        )
    assert planted.is_error is True
    assert planted.structured_content is not None
    assert planted.structured_content["code"] == "path_unavailable"
    assert config.read_bytes() == before
    assert made.is_error is False


def test_a_changed_settings_file_keeps_the_servers_own_files_protected(
    worktree: Path, tmp_path: Path
) -> None:
    """Settings resolved again (the settings file changed) keep the start's token file and
    audit log in the policy: the sandbox built again still protects them."""
    tokens = worktree / "tokens"
    start = protecting_http(
        resolve_settings(Flags(root=str(worktree)), {}), HttpSettings(token_file=str(tokens))
    )
    again = kept_extra(resolve_settings(Flags(root=str(worktree), unprotect=(".idea",)), {}), start)
    assert again.config.protected_paths.protects(str(worktree), "tokens")
    assert not again.config.protected_paths.protects(str(worktree), ".idea/x")
    assert again.sandbox_request().protected is again.config.protected_paths
    plain = resolve_settings(Flags(root=str(worktree)), {})
    assert kept_extra(plain, plain) is plain


def test_the_settings_files_unprotect_joins_the_flags_and_is_refused_by_its_line(
    worktree: Path, tmp_path: Path
) -> None:
    """The settings file's ``unprotect`` gives paths back with ``--unprotect``'s; one that
    is not protected is refused naming the file and the key."""
    directory = tmp_path / "config"
    directory.mkdir(mode=0o700)
    path = directory / "settings.toml"
    path.write_text(f'unprotect = ["{worktree / ".idea"}"]\n')
    path.chmod(0o600)
    flags = Flags(root=str(worktree), settings=str(path), unprotect=(".vscode",))
    policy = resolve_settings(flags, {"HOME": str(tmp_path)}).config.protected_paths
    assert not policy.protects(str(worktree), ".idea/x")
    assert not policy.protects(str(worktree), ".vscode/x")
    assert policy.protects(str(worktree), ".claude/x")
    path.write_text(f'unprotect = ["{worktree / "README"}"]\n')
    with pytest.raises(SettingsError) as refused:
        resolve_settings(flags, {"HOME": str(tmp_path)})
    assert str(path) in str(refused.value)
    assert "unprotect" in str(refused.value)
    assert "is not protected" in str(refused.value)


@pytest.mark.parametrize("named_by", ["flag", "file"])
def test_unprotect_never_follows_a_link_a_call_made(
    worktree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], named_by: str
) -> None:
    """R6-5: ``.vscode -> .git`` made by a call; ``--unprotect .vscode`` (flag or settings
    file) is refused at start, exit 2, one line, and never gives ``.git`` back. A real
    ``.vscode`` directory there is given back (positive), and so is a link outside every
    writable place (``--unprotect`` of a path beneath a link the user made elsewhere)."""
    (worktree / ".vscode").symlink_to(".git")
    if named_by == "flag":
        flags = Flags(root=str(worktree), unprotect=(".vscode",))
        argv = ["--root", str(worktree), "--unprotect", ".vscode", "tools"]
    else:
        directory = tmp_path / "config"
        directory.mkdir(mode=0o700)
        path = directory / "settings.toml"
        path.write_text(f'unprotect = ["{worktree / ".vscode"}"]\n')
        path.chmod(0o600)
        flags = Flags(root=str(worktree), settings=str(path))
        argv = ["--root", str(worktree), "--settings", str(path), "tools"]
    with pytest.raises(SettingsError, match="symbolic link inside a writable place") as refused:
        resolve_settings(flags, {"HOME": str(tmp_path)})
    assert "\n" not in str(refused.value)
    if named_by == "file":
        assert "unprotect" in str(refused.value)
    code, out, err = run_main(capsys, *argv)
    assert (2, "") == (code, out)
    assert 1 == err.count("\n")
    # Beneath the link too (``.vscode/x`` through ``.vscode -> .git``).
    with pytest.raises(UnprotectError, match="symbolic link"):
        policy_of([".vscode/config"], str(worktree))
    (worktree / ".vscode").unlink()
    (worktree / ".vscode").mkdir()
    policy = resolve_settings(flags, {"HOME": str(tmp_path)}).config.protected_paths
    assert not policy.protects(str(worktree), ".vscode/tasks.json")
    assert policy.protects(str(worktree), ".git/config")
    assert all(not path.endswith("/.git") for path in policy.unprotect)
