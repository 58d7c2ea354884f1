"""Files only their user may open (``_mcp._private``): the token file and the audit log.

Created private and judged through the open descriptor: on POSIX by the owner and the mode
bits, on Windows (``make test-windows``, under Wine) by the owner and the access list the
system returns for the handle.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from pathlib import Path

import pytest
from private_support import security_of

from spice.agent.coding._mcp._private import (
    NOT_OWNED,
    OPEN_TO_OTHERS,
    access_problem,
    create_private,
)
from spice.agent.coding._windows import _dacl as dacl

WINDOWS = sys.platform == "win32"
FLAGS = (
    os.O_WRONLY
    | os.O_APPEND
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_BINARY", 0)
)
OTHER_UID = 65534
SYSTEM_ACCOUNTS = frozenset({dacl.SYSTEM, dacl.ADMINISTRATORS})
"""Trusted beside the user: Wine, for one, lists SYSTEM on every file it describes."""


def _user() -> bytes:
    from spice.agent.coding._windows import _api  # noqa: PLC0415 - Windows only

    return _api.current_user_sid()


def _descriptor(dacl_bytes: bytes, owner: bytes = b"") -> bytes:
    """A self-relative descriptor with a protected ``dacl_bytes`` (and ``owner`` if given)."""
    head = struct.Struct("<BBHIIII")
    owner_at = head.size + len(dacl_bytes) if owner else 0
    control = 0x8000 | 0x1000 | 0x0004
    return head.pack(1, 0, control, owner_at, 0, 0, head.size) + dacl_bytes + owner


def _entry(mask: int, sid: bytes) -> bytes:
    body = struct.pack("<I", mask) + sid
    return struct.pack("<BBH", 0, 0, 4 + len(body)) + body


def _listing(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<BBHHH", 2, 0, 8 + len(body), len(entries), 0) + body


def _make(path: Path, *, others: int = 0, owner: bytes = b"") -> None:
    """A file with ``others``'s access for everyone else (POSIX mode bits, or Everyone's
    rights on Windows), owned by ``owner`` where given (Windows)."""
    if WINDOWS:
        from spice.agent.coding._windows import _api  # noqa: PLC0415 - Windows only

        entries = [_entry(dacl.FILE_ALL_ACCESS, _user())]
        if others:
            entries.append(_entry(others, dacl.sid_bytes(dacl.EVERYONE)))
        _api.close_handle(_api.create_private(str(path), _descriptor(_listing(*entries), owner)))
        return
    path.write_bytes(b"")
    path.chmod(0o600 | others)


def _listed_beside(path: Path) -> tuple[str, ...]:
    """The accounts the file's list names beside the user and the system's (Windows)."""
    trusted = frozenset({dacl.sid_text(_user()), *SYSTEM_ACCOUNTS})
    return dacl.others_with_access(security_of(path)[1], trusted)


def _problem(path: Path) -> str | None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        return access_problem(fd, os.fstat(fd))
    finally:
        os.close(fd)


def test_a_new_file_is_created_private_and_takes_bytes_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    fd = create_private(str(path), FLAGS)
    try:
        assert access_problem(fd, os.fstat(fd)) is None
        os.write(fd, b"one\ntwo\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    if WINDOWS:
        _, listed = security_of(path)
        user = dacl.sid_text(_user())
        assert listed is not None
        assert dacl.others_with_access(listed, frozenset({user, *SYSTEM_ACCOUNTS})) == ()
        assert user in dacl.others_with_access(listed, SYSTEM_ACCOUNTS)
    else:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_existing_file_is_opened_as_it_is_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "log"
    _make(path)
    with open(path, "ab") as handle:
        handle.write(b"kept\n")
    fd = create_private(str(path), FLAGS)
    try:
        assert access_problem(fd, os.fstat(fd)) is None
        os.write(fd, b"added\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"kept\nadded\n"


def test_an_exclusive_creation_refuses_a_taken_name(tmp_path: Path) -> None:
    path = tmp_path / "taken"
    _make(path)
    with pytest.raises(FileExistsError):
        create_private(str(path), FLAGS | os.O_EXCL)


def test_a_creation_that_fails_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):  # noqa: PT011 - the system's own error, whichever it is
        create_private(str(tmp_path / "missing" / "tokens"), FLAGS)


# Each right alone (POSIX: group's and others' mode bits; Windows: Everyone's rights).
RIGHTS = (
    [0o040, 0o020, 0o010, 0o004, 0o002, 0o001]
    if not WINDOWS
    else [0x1, 0x2, 0x4, 0x0004_0000, 0x0008_0000, 0x8000_0000, 0x1000_0000]
)


@pytest.mark.parametrize("right", RIGHTS)
def test_a_file_others_may_open_is_named(tmp_path: Path, right: int) -> None:
    path = tmp_path / "open"
    _make(path, others=right)
    if WINDOWS and _listed_beside(path) == ():
        pytest.skip("this system kept no entry for that right (Wine keeps lists as mode bits)")
    assert _problem(path) == OPEN_TO_OTHERS


@pytest.mark.skipif(not WINDOWS, reason="Windows rights that reach neither content nor list")
def test_harmless_rights_of_others_keep_a_file_private(tmp_path: Path) -> None:
    path = tmp_path / "harmless"
    _make(path, others=dacl.HARMLESS_ACCESS)
    assert _problem(path) is None


def test_a_file_of_another_owner_is_named(tmp_path: Path) -> None:
    path = tmp_path / "foreign"
    if WINDOWS:
        foreign = dacl.sid_bytes("S-1-5-21-1-2-3-4242")
        try:
            _make(path, owner=foreign)
        except PermissionError:
            pytest.skip("this system refuses to create a file for another owner")
        if security_of(path)[0] != foreign:
            pytest.skip("this system keeps the creator as the owner (Wine maps owners to uids)")
    else:
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        _make(path)
        os.chown(path, OTHER_UID, OTHER_UID)
    assert _problem(path) == NOT_OWNED
