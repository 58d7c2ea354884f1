"""Credentials inside shown home files are masked (round 5's R6-11).

A ``pip.conf`` whose ``index-url`` holds a password and a ``.gitconfig`` whose ``insteadOf``
rewrite and ``extraHeader`` hold tokens, in the server's home: a contained command (bwrap's
namespaces) reads both files, and git reads its configuration, yet no byte of the secrets
reaches it; the toolchain still sees the rest (the index host, the rewrite's target). The
masking itself is checked on its own with Hypothesis.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_sandbox_fs import GIT, NAMESPACES, launcher, policy, run

from spice.agent.coding._posix import _masked
from spice.agent.coding._posix._containment import Containment

__all__ = ["policy"]

SECRET: Final = "FAKESECRET"  # noqa: S105 - a marker, not a password
PIP_CONF: Final = (
    f"[global]\nindex-url = https://ci-user:{SECRET}-pipconf@index.corp.example/simple\n"
)
GITCONFIG: Final = (
    f'[url "https://x-access-token:{SECRET}-ghp@github.com/"]\n\tinsteadOf = https://github.com/\n'
    f"[http]\n\textraHeader = Authorization: Bearer {SECRET}-header\n"
    "[user]\n\tname = Shown User\n"
)


async def test_a_contained_command_reads_the_shown_files_without_their_secrets(
    policy: Containment, root: Path, home: Path
) -> None:
    if policy.namespaces.bwrap is None:
        pytest.skip("masking binds copies: the namespace path only (documented)")
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(PIP_CONF)
    (home / ".gitconfig").write_text(GITCONFIG)
    chosen = launcher(policy, root, home)
    outcome, text, _ = await run(
        chosen,
        root,
        home,
        ("/bin/cat", str(home / ".config/pip/pip.conf"), str(home / ".gitconfig")),
    )
    assert outcome.successful, text
    assert SECRET not in text
    assert "index.corp.example/simple" in text
    assert "ci-user:REDACTED@" in text
    assert "insteadOf = https://github.com/" in text
    assert "Shown User" in text
    if GIT is not None:
        outcome, text, _ = await run(chosen, root, home, (GIT, "config", "--global", "--list"))
        assert outcome.successful, text
        assert SECRET not in text
        assert "user.name=Shown User" in text
    # The originals are untouched on the host.
    assert SECRET in (home / ".gitconfig").read_text()


def test_nothing_is_bound_for_files_without_credentials(root: Path, home: Path) -> None:
    if not NAMESPACES.made:
        pytest.skip(f"no namespaces here: {NAMESPACES.reason}")
    (home / ".gitconfig").write_text("[user]\n\tname = Plain\n")
    copies = _masked.masked_copies(str(home), str(home / "masked"), os.devnull)
    assert () == copies


def test_a_file_that_cannot_be_judged_is_hidden(home: Path) -> None:
    (home / ".gitconfig").write_bytes(b"\xff\xfe not utf-8")
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("x" * (_masked.MAXIMUM_MASKED_BYTES + 1))
    (home / ".pip").mkdir()
    (home / ".pip" / "pip.conf").write_text("y" * _masked.MAXIMUM_MASKED_BYTES)  # at the bound
    made = _masked.masked_copies(str(home), str(home / "m"), "/empty")
    copies = {original: copy for copy, original in made}
    assert copies[str(home / ".gitconfig")] == "/empty"
    assert copies[str(home / ".config/pip/pip.conf")] == "/empty"
    assert str(home / ".pip/pip.conf") not in copies  # judged: no credential


def test_the_copies_are_shared_by_their_digest(home: Path) -> None:
    (home / ".gitconfig").write_text(GITCONFIG)
    first = _masked.masked_copies(str(home), str(home / "m"), "/empty")
    second = _masked.masked_copies(str(home), str(home / "m"), "/empty")
    assert first == second
    copy = first[0][0]
    assert SECRET not in Path(copy).read_text()
    assert 0o444 == os.stat(copy).st_mode & 0o777
    assert 0o700 == os.stat(home / "m").st_mode & 0o777


_USERINFO = st.text(
    st.characters(categories=("L", "N"), include_characters="-_.~%!$&*+,;="),
    min_size=1,
    max_size=30,
)


@given(_USERINFO, _USERINFO, st.sampled_from(["http", "https", "ftp", "ssh", "git+https"]))
def test_no_password_of_a_url_survives(user: str, password: str, scheme: str) -> None:
    text = f"index-url = {scheme}://{user}:{password}@host.example/path\n"
    masked = _masked.masked_text(text)
    assert masked is not None
    assert f":{password}@" not in masked
    assert f"{scheme}://{user}:{_masked.REDACTED}@host.example/path" in masked


@given(_USERINFO)
def test_a_lone_user_of_a_web_url_is_a_token_and_of_ssh_a_name(token: str) -> None:
    assert f"https://{_masked.REDACTED}@github.com/" in str(
        _masked.masked_text(f"x = https://{token}@github.com/\n")
    )
    assert _masked.masked_text(f"x = ssh://{token}@github.com/\n") is None
    assert _masked.masked_text("[user]\n\tname = A\n") is None
