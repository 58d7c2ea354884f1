"""The token file (``_mcp._tokens``), ``token add``, and the HTTP flags (``resolve_http``):
parsing (with hypothesis), the file's checks, constant-time verification, expiry at its
boundary, re-reading on change and failing closed."""

from __future__ import annotations

import asyncio
import datetime
import os
import string
from pathlib import Path

import pytest
from http_support import SCRIPT, WAIT
from hypothesis import given, settings
from hypothesis import strategies as st
from private_support import WINDOWS, is_private, open_up, private

from spice.agent.coding import _cli
from spice.agent.coding._mcp import _tokens as tokens
from spice.agent.coding._mcp._tokens import (
    MAXIMUM_FILE_BYTES,
    MAXIMUM_TOKEN_CHARS,
    TokenFileError,
    TokenStore,
    add_token,
    digest_of,
    parse_not_after,
    parse_scopes,
    parse_token_file,
    tools_for,
)
from spice.agent.coding._settings._serve import resolve_http
from spice.agent.coding._settings._values import SettingsError

NAMES = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=64).filter(
    lambda n: n[0].isalnum()
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    return tree


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "held", "tools"),
    [
        ("read", ("read",), {"read"}),
        ("write", ("read", "write"), {"read", "replace"}),
        ("shell", ("read", "write", "shell"), {"read", "replace", "shell"}),
        ("read,shell", ("read", "write", "shell"), {"read", "replace", "shell"}),
        (" write , read ", ("read", "write"), {"read", "replace"}),
    ],
)
def test_scopes_are_ordered_and_each_holds_the_ones_below(
    text: str, held: tuple[str, ...], tools: set[str]
) -> None:
    """read < write < shell: the highest named scope and every one below it."""
    assert held == parse_scopes(text)
    assert frozenset(tools) == tools_for(held)


@pytest.mark.parametrize("text", ["", "admin", "read,", "READ", "read;write"])
def test_unknown_scopes_are_refused(text: str) -> None:
    """Anything but a comma list of read, write, shell is refused."""
    with pytest.raises(TokenFileError):
        parse_scopes(text)


@settings(max_examples=60, deadline=None)
@given(
    entries=st.dictionaries(
        NAMES,
        st.tuples(st.sampled_from(["read", "write", "shell"]), st.binary(min_size=32, max_size=32)),
        max_size=8,
    )
)
def test_a_well_formed_file_parses_to_its_entries(entries: dict[str, tuple[str, bytes]]) -> None:
    """Any names, scopes and digests written as lines (with comments) come back the same."""
    text = "# tokens\n\n" + "".join(
        f"{name} {scope} {digest.hex().upper()}  # a comment\n"
        for name, (scope, digest) in entries.items()
    )
    parsed = parse_token_file(text)
    assert {name: (scope, digest) for name, (scope, digest) in entries.items()} == {
        e.name: (e.scopes[-1], e.digest) for e in parsed
    }


@settings(max_examples=80, deadline=None)
@given(line=st.text(max_size=120).filter(lambda t: "\n" not in t and "\r" not in t))
def test_an_arbitrary_line_parses_or_is_refused_with_the_fixed_text(line: str) -> None:
    """No line makes the parser raise anything but ``TokenFileError`` with fixed text."""
    try:
        parse_token_file(line)
    except TokenFileError as error:
        assert str(error) in {tokens.MALFORMED, tokens.TOO_LARGE}  # noqa: PT017 - any line


@pytest.mark.parametrize(
    "line",
    [
        "alice read abc",
        "alice read " + "g" * 64,
        "alice read " + "a" * 63,
        "-alice read " + "a" * 64,
        "alice admin " + "a" * 64,
        "alice read " + "a" * 64 + " tomorrow",
        "alice read " + "a" * 64 + " 2026-12-31T00:00:00",
        "alice read " + "a" * 64 + " x y",
        "alice read " + "a" * 64 + "\nalice read " + "b" * 64,
    ],
)
def test_malformed_lines_are_refused(line: str) -> None:
    """Short or non-hex digests, bad names or scopes, dates without offsets, duplicates."""
    with pytest.raises(TokenFileError, match="not NAME SCOPES"):
        parse_token_file(line)


def test_a_date_holds_through_its_last_second_utc() -> None:
    """``2026-12-31`` accepts at 23:59:59.999 UTC that day and refuses a second later."""
    end = parse_not_after("2026-12-31")
    last = datetime.datetime(2026, 12, 31, 23, 59, 59, tzinfo=datetime.UTC).timestamp()
    assert last < end < last + 1
    assert parse_not_after("2026-12-31T12:00:00Z") == parse_not_after("2026-12-31T13:00:00+01:00")


# --- the store ------------------------------------------------------------------------------


def test_verify_accepts_the_token_and_nothing_else(tmp_path: Path, root: Path) -> None:
    """The token's principal; a wrong, empty, over-long or near-miss token is ``None``."""
    file = private(tmp_path / "tokens", f"alice write {digest_of('s3cret-token')}\n")
    store = TokenStore(str(file), str(root))
    principal = store.verify("s3cret-token")
    assert principal is not None
    assert ("alice", ("read", "write")) == (principal.name, principal.scopes)
    for wrong in ("s3cret-tokeN", "", "s3cret-token ", "x" * (MAXIMUM_TOKEN_CHARS + 1)):
        assert None is store.verify(wrong)
    assert "s3cret" not in repr(store.verify("s3cret-token"))


def test_expiry_is_checked_at_its_boundary(tmp_path: Path, root: Path) -> None:
    """Accepted at ``NOT-AFTER``, refused just after it."""
    file = private(tmp_path / "tokens", f"bob read {digest_of('t')} 2030-01-01T00:00:00Z\n")
    store = TokenStore(str(file), str(root))
    end = parse_not_after("2030-01-01T00:00:00Z")
    assert store.verify("t", now=end) is not None
    assert store.verify("t", now=end + 0.001) is None


def test_the_store_rereads_a_changed_file_and_fails_closed(tmp_path: Path, root: Path) -> None:
    """A line added is accepted, one removed refused, an unparsable or opened-up or removed
    file accepts nothing until it is fixed."""
    file = private(tmp_path / "tokens", f"a read {digest_of('one')}\n")
    store = TokenStore(str(file), str(root))
    private(file, f"a read {digest_of('one')}\nb read {digest_of('two')}\n")
    assert store.verify("two") is not None
    assert ("a", "b") == store.names
    private(file, f"b read {digest_of('two')}\n")
    assert (None, "b") == (store.verify("one"), store.names[0])
    private(file, "garbage\n")
    assert None is store.verify("two")
    private(file, f"b read {digest_of('two')}\n")
    assert store.verify("two") is not None
    open_up(file)
    assert None is store.verify("two")
    private(file, f"b read {digest_of('two')}\n")
    assert store.verify("two") is not None
    file.unlink()
    assert None is store.verify("two")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("inside", tokens.BENEATH_ROOT),
        ("group", tokens.OPEN_TO_OTHERS),
        ("others", tokens.OPEN_TO_OTHERS),
        ("missing", tokens.MISSING),
        ("directory", tokens.NOT_A_FILE),
        ("link", tokens.UNREADABLE),
        ("large", tokens.TOO_LARGE),
    ],
)
def test_an_unusable_file_is_refused_at_start(
    tmp_path: Path, root: Path, setup: str, reason: str
) -> None:
    """Beneath the root, open to group or others, missing, not a file, a link, too large."""
    path = tmp_path / "tokens"
    if setup == "inside":
        path = private(root / "tokens", "")
    elif setup in ("group", "others"):
        if WINDOWS and setup == "group":
            pytest.skip("Windows has no group bits: the access list is one setup (others)")
        open_up(private(path, ""), 0o640 if setup == "group" else 0o604)
    elif setup == "directory":
        path.mkdir(mode=0o700)
    elif setup == "link":
        if WINDOWS:
            pytest.skip("making a symbolic link needs a privilege on Windows")
        private(tmp_path / "real", "")
        path.symlink_to(tmp_path / "real")
    elif setup == "large":
        private(path, "#" * (MAXIMUM_FILE_BYTES + 1))
    with pytest.raises(TokenFileError) as caught:
        TokenStore(str(path), str(root))
    if WINDOWS and setup == "directory":
        reason = tokens.UNREADABLE  # Windows opens no directory as a file
    if setup == "missing":  # the path, and how to make it (contract 12.4)
        reason = tokens.missing_problem(str(path))
        assert f"token add NAME --scopes read,write,shell --token-file {path}" in reason
    assert reason == str(caught.value)


def test_a_same_size_rewrite_within_one_clock_tick_is_still_seen(
    tmp_path: Path, root: Path
) -> None:
    """A rewrite whose ``stat`` matches what was read (a coarse clock: same size, inode and
    times) is still read while the file is recent (the store is told the rewritten file's
    identity is the one it read, as such a clock would make it)."""
    file = private(tmp_path / "tokens", f"a read {digest_of('one')}\n")
    store = TokenStore(str(file), str(root))
    private(file, f"a read {digest_of('two')}\n")
    store._identity = tokens._identity(file.stat())  # the coarse clock's view
    assert (None, "a") == (store.verify("one"), store.verify("two").name)  # type: ignore[union-attr]


def test_a_file_at_the_size_bound_is_read(tmp_path: Path, root: Path) -> None:
    """Exactly ``MAXIMUM_FILE_BYTES`` is accepted (the other side of the bound)."""
    line = f"a read {digest_of('x')}\n"
    path = private(tmp_path / "tokens", line + "#" * (MAXIMUM_FILE_BYTES - len(line)))
    assert ("a",) == TokenStore(str(path), str(root)).names


# --- token add ------------------------------------------------------------------------------


def test_add_token_creates_a_private_file_and_keeps_only_the_digest(
    tmp_path: Path, root: Path
) -> None:
    """A private file (0600, or the user's own access list) with the digest line; the token is
    >= 43 URL-safe chars and verifies."""
    path = tmp_path / "tokens"
    token = add_token(str(path), "ci", "read,write", str(root), "2999-01-01")
    assert 43 <= len(token)
    assert set(token) <= set(string.ascii_letters + string.digits + "-_")
    assert is_private(path)
    assert f"ci read,write {digest_of(token)} 2999-01-01\n".encode() == path.read_bytes()
    assert token not in path.read_text()
    second = add_token(str(path), "other", "shell", str(root))
    assert second != token
    store = TokenStore(str(path), str(root))
    assert ("ci", "other") == (store.verify(token).name, store.verify(second).name)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "scopes", "date", "reason"),
    [
        ("bad name", "read", None, tokens.BAD_NAME),
        ("ok", "root", None, tokens.BAD_SCOPES),
        ("ok", "read", "someday", tokens.BAD_DATE),
        ("dup", "read", None, tokens.NAME_TAKEN),
    ],
)
def test_add_token_refuses_bad_input(
    tmp_path: Path, root: Path, name: str, scopes: str, date: str | None, reason: str
) -> None:
    """A bad name, scopes or date, or a name already there: refused, the file unchanged."""
    path = tmp_path / "tokens"
    add_token(str(path), "dup", "read", str(root))
    before = path.read_text()
    with pytest.raises(TokenFileError) as caught:
        add_token(str(path), name, scopes, str(root), date)
    assert (reason, before) == (str(caught.value), path.read_text())


def test_add_token_refuses_beneath_the_root_and_an_open_file(tmp_path: Path, root: Path) -> None:
    """The same checks as serve's: not beneath the worktree, not open to others."""
    with pytest.raises(TokenFileError, match="beneath the worktree"):
        add_token(str(root / "tokens"), "a", "read", str(root))
    assert not (root / "tokens").exists()
    opened = open_up(tmp_path / "open", 0o644)
    with pytest.raises(TokenFileError) as caught:
        add_token(str(opened), "a", "read", str(root))
    assert (tokens.OPEN_TO_OTHERS, b"") == (str(caught.value), opened.read_bytes())


async def test_the_token_add_command_prints_the_token_once(tmp_path: Path, root: Path) -> None:
    """``spice-coding token add``: the token on stdout only; stderr says it is shown once."""
    path = tmp_path / "tokens"
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), "token", "add", "agent", "--scopes", "read", "--token-file", str(path),
        "--root", str(root), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(WAIT):
        out, err = await process.communicate()
    token = out.decode().strip()
    assert 0 == process.returncode
    assert 43 <= len(token)
    assert token.encode() not in err
    assert b"shown only this once" in err
    assert digest_of(token) in path.read_text()


# --- the HTTP flags -------------------------------------------------------------------------


def http_of(*argv: str) -> object:
    return resolve_http(_cli._parser().parse_args(["serve", *argv]))


def test_stdio_is_the_default_and_http_has_the_contract_defaults() -> None:
    """No --transport: stdio (None); http: 127.0.0.1, 8765, /mcp, 16 calls."""
    assert None is http_of()
    chosen = http_of("--transport", "http", "--token-file", "/t")
    assert ("127.0.0.1", 8765, "/mcp", 16) == (
        chosen.host,  # type: ignore[attr-defined]
        chosen.port,  # type: ignore[attr-defined]
        chosen.path,  # type: ignore[attr-defined]
        chosen.max_concurrent_calls,  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize(
    ("argv", "ok"),
    [
        (("--port", "0"), True),
        (("--port", "65535"), True),
        (("--port", "65536"), False),
        (("--port", "-1"), False),
        (("--host", "::1"), True),
        (("--host", "localhost"), True),
        (("--host", "example.com"), False),
        (("--host", "192.168.1.1"), False),
        (("--host", "192.168.1.1", "--allow-remote"), True),
        (("--max-calls-per-minute", "1"), True),
        (("--max-calls-per-minute", "0"), False),
        (("--max-concurrent-calls", "1024"), True),
        (("--max-concurrent-calls", "1025"), False),
        (("--shutdown-grace", "300"), True),
        (("--shutdown-grace", "300.5"), False),
        (("--allowed-origin", "https://a.example:8443"), True),
        (("--allowed-origin", "https://a.example/path"), False),
        (("--public-url", "https://user@a.example/mcp"), False),
        (("--path", "/a/b"), True),
        (("--path", "/a//b"), False),
        (("--path", "/a?b"), False),
    ],
)
def test_http_flags_are_judged_on_both_sides_of_their_bounds(
    argv: tuple[str, ...], ok: bool
) -> None:
    """Each bound accepts its edge and refuses one past it, with a line naming the flag."""
    full = ("--transport", "http", "--token-file", "/t", *argv)
    if ok:
        assert http_of(*full) is not None
    else:
        with pytest.raises(SettingsError) as caught:
            http_of(*full)
        assert argv[0] in str(caught.value) or "--host" in str(caught.value)


@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=40))
def test_any_port_text_is_a_port_or_one_fixed_line(text: str) -> None:
    """Whatever --port's text, it resolves to 0..65535 or a SettingsError naming --port."""
    try:
        chosen = http_of("--transport", "http", "--token-file", "/t", f"--port={text}")
    except SettingsError as error:
        message = str(error)
        assert message.startswith("--port")
    else:
        assert 0 <= chosen.port <= 65_535  # type: ignore[attr-defined]
        assert os.fspath(str(chosen.port)) == text.strip().lstrip("0") or chosen.port == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "contained", "remote", "expected"),
    [
        ((), True, False, []),
        (("--host", "10.0.0.1", "--allow-remote"), True, True, ["without TLS"]),
        (
            ("--host", "10.0.0.1", "--allow-remote", "--public-url", "https://a.example/mcp"),
            True,
            True,
            [],
        ),
        (
            ("--host", "10.0.0.1", "--allow-remote", "--public-url", "http://a.example/mcp"),
            True,
            True,
            ["without TLS"],
        ),
        ((), False, False, ["shell is not served"]),
        (("--allow-uncontained-shell",), False, False, ["served over HTTP uncontained"]),
    ],
)
def test_the_start_warns_for_a_remote_bind_without_tls_and_an_uncontained_shell(
    argv: tuple[str, ...], contained: bool, remote: bool, expected: list[str]
) -> None:
    """No TLS proxy named (an https --public-url) for a remote bind warns; so does shell
    withheld or served uncontained (no socket beyond loopback is opened to learn this)."""
    chosen = http_of("--transport", "http", "--token-file", "/t", *argv)
    warnings = _cli._http_warnings(chosen, contained, remote)  # type: ignore[arg-type]
    assert len(expected) == len(warnings)
    assert all(part in line for part, line in zip(expected, warnings, strict=True))


def test_the_audit_log_is_created_private_and_an_open_one_is_refused(tmp_path: Path) -> None:
    """A new log is 0600 and only appended to; an existing one open to others is refused."""
    from spice.agent.coding._mcp._audit import (  # noqa: PLC0415
        LOG_OPEN_TO_OTHERS,
        AuditLog,
        AuditLogError,
    )

    made = private(tmp_path / "audit.jsonl", "kept\n")
    log = AuditLog(str(made))
    log.close()
    opened = open_up(tmp_path / "open.jsonl", 0o644)
    with pytest.raises(AuditLogError) as caught:
        AuditLog(str(opened))
    assert LOG_OPEN_TO_OTHERS == str(caught.value)
    fresh = tmp_path / "fresh.jsonl"
    AuditLog(str(fresh)).close()
    assert (b"kept\n", True) == (made.read_bytes(), is_private(fresh))


def test_a_file_of_another_user_is_refused_at_start_and_by_token_add(
    tmp_path: Path, root: Path
) -> None:
    """A private file another user owns: refused by serve (``NOT_OWNED``), by ``token add``
    (unchanged) and as an audit log."""
    from spice.agent.coding._mcp._audit import LOG_NOT_OWNED, AuditLog, AuditLogError  # noqa: PLC0415

    if WINDOWS or os.geteuid() != 0:
        pytest.skip("only root can give a file to another user (test_private_files covers Windows)")
    path = private(tmp_path / "tokens", f"a read {digest_of('one')}\n")
    os.chown(path, 65534, 65534)
    with pytest.raises(TokenFileError) as at_start:
        TokenStore(str(path), str(root))
    with pytest.raises(TokenFileError) as adding:
        add_token(str(path), "b", "read", str(root))
    with pytest.raises(AuditLogError) as logging:
        AuditLog(str(path))
    assert (tokens.NOT_OWNED, tokens.NOT_OWNED, LOG_NOT_OWNED) == (
        str(at_start.value),
        str(adding.value),
        str(logging.value),
    )
    assert f"a read {digest_of('one')}\n".encode() == path.read_bytes()


def test_a_file_whose_access_cannot_be_read_is_unreadable(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam a platform fails through (``access_problem`` raising ``OSError``, as
    ``GetSecurityInfo`` may): serve, ``token add`` and the audit log refuse with their
    fixed lines, the system's text never shown."""
    from spice.agent.coding._mcp import _audit  # noqa: PLC0415

    def failing(fd: int, info: os.stat_result) -> str | None:
        raise OSError(5, "secret system text")

    path = private(tmp_path / "tokens", f"a read {digest_of('one')}\n")
    monkeypatch.setattr(tokens, "access_problem", failing)
    monkeypatch.setattr(_audit, "access_problem", failing)
    with pytest.raises(TokenFileError) as at_start:
        TokenStore(str(path), str(root))
    with pytest.raises(TokenFileError) as adding:
        add_token(str(path), "b", "read", str(root))
    with pytest.raises(_audit.AuditLogError) as logging:
        _audit.AuditLog(str(tmp_path / "audit.jsonl"))
    assert (tokens.UNREADABLE, tokens.UNREADABLE, _audit.LOG_UNUSABLE) == (
        str(at_start.value),
        str(adding.value),
        str(logging.value),
    )


def test_a_token_file_in_a_writable_place_is_refused_at_start_and_when_moved_there(
    tmp_path: Path, root: Path
) -> None:
    """R5-7: a token file inside an ``--allow-write`` directory is refused at start, by
    ``token add`` too; one whose path comes to resolve into such a place (a directory on its
    way swapped for a link) accepts no token from then on; beside it, it is served."""
    writable = tmp_path / "writable"
    writable.mkdir()
    inside = private(writable / "tokens", f"a read {digest_of('one')}\n")
    with pytest.raises(TokenFileError) as caught:
        TokenStore(str(inside), str(root), (str(writable),))
    assert tokens.IN_WRITABLE_PLACE == str(caught.value)
    with pytest.raises(TokenFileError) as added:
        tokens.add_token(str(writable / "new"), "b", "read", str(root), writable=(str(writable),))
    assert tokens.IN_WRITABLE_PLACE == str(added.value)
    assert not (writable / "new").exists()
    if WINDOWS:
        return
    outside = tmp_path / "outside"
    outside.mkdir()
    file = private(outside / "tokens", f"a read {digest_of('one')}\n")
    store = TokenStore(str(file), str(root), (str(writable),))
    assert "a" == store.verify("one").name  # type: ignore[union-attr]
    (outside / "tokens").rename(writable / "tokens2")
    outside.rmdir()
    outside.symlink_to(writable)
    (writable / "tokens2").rename(writable / "tokens")
    assert None is store.verify("one")
