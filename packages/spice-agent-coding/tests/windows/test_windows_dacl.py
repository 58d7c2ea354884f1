"""A Windows file's access list read in Python (``_windows._dacl``): who besides the user
may open a token file or an audit log. Pure bytes, so it runs on every platform; the calls
that fetch and apply these bytes run under Wine (test_private_files.py)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.coding._windows import _dacl as dacl

USER = "S-1-5-21-1004336348-1177238915-682003330-1001"
USERS = "S-1-5-32-545"
AUTHENTICATED = "S-1-5-11"
TRUSTED = frozenset({USER, dacl.SYSTEM, dacl.ADMINISTRATORS})

ALLOW, DENY, AUDIT, ALLOW_OBJECT, ALLOW_CALLBACK = 0x00, 0x01, 0x02, 0x05, 0x09
INHERITED, INHERIT_ONLY = 0x10, 0x08
FILE_READ_DATA = 0x1
WRITE_DAC = 0x0004_0000
GENERIC_READ = 0x8000_0000


def ace(kind: int, mask: int, sid: str, flags: int = 0, tail: bytes = b"") -> bytes:
    body = struct.pack("<I", mask) + dacl.sid_bytes(sid) + tail
    return struct.pack("<BBH", kind, flags, 4 + len(body)) + body


def acl(*entries: bytes, revision: int = 2) -> bytes:
    body = b"".join(entries)
    return struct.pack("<BBHHH", revision, 0, 8 + len(body), len(entries), 0) + body


SIDS = st.builds(
    lambda authority, subs: "-".join(["S", "1", str(authority), *map(str, subs)]),
    st.integers(0, (1 << 48) - 1),
    st.lists(st.integers(0, (1 << 32) - 1), max_size=dacl.MAXIMUM_SUB_AUTHORITIES),
)


@given(SIDS)
def test_a_sid_reads_back_as_written(text: str) -> None:
    assert dacl.sid_text(dacl.sid_bytes(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "S-1",
        "S-2-5-18",
        "X-1-5-18",
        "S-1-5-",
        "S-1-5-x",
        "S-1-5-١٨",
        f"S-1-{1 << 48}-1",
        "S-1-5-" + "-".join(["1"] * 16),
        f"S-1-5-{1 << 32}",
    ],
)
def test_text_that_is_not_a_sid_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a SID"):
        dacl.sid_bytes(text)


def test_bytes_that_are_not_one_sid_are_refused() -> None:
    good = dacl.sid_bytes(dacl.SYSTEM)
    for bad in (b"", good[:7], good + b"\0", b"\2" + good[1:], bytes((1, 16)) + bytes(6 + 64)):
        with pytest.raises(ValueError, match="SID"):
            dacl.sid_text(bad)
    at_bound = "S-1-5-" + "-".join(["7"] * dacl.MAXIMUM_SUB_AUTHORITIES)
    assert dacl.sid_text(dacl.sid_bytes(at_bound)) == at_bound


def test_a_profile_files_defaults_are_private() -> None:
    """What a file in the user's profile inherits: SYSTEM, Administrators and the user."""
    listed = acl(
        ace(ALLOW, dacl.FILE_ALL_ACCESS, dacl.SYSTEM, INHERITED),
        ace(ALLOW, dacl.FILE_ALL_ACCESS, dacl.ADMINISTRATORS, INHERITED),
        ace(ALLOW, dacl.FILE_ALL_ACCESS, USER, INHERITED),
    )
    assert dacl.others_with_access(listed, TRUSTED) == ()
    assert dacl.others_with_access(acl(), TRUSTED) == ()  # an empty list: the owner alone


def test_others_who_may_read_or_write_are_named_once_each_in_order() -> None:
    listed = acl(
        ace(ALLOW, dacl.FILE_ALL_ACCESS, USER),
        ace(ALLOW, GENERIC_READ, USERS, INHERITED),
        ace(ALLOW, WRITE_DAC, AUTHENTICATED),
        ace(ALLOW_CALLBACK, FILE_READ_DATA, dacl.EVERYONE, tail=b"cond"),
        ace(ALLOW, FILE_READ_DATA, USERS),
    )
    assert dacl.others_with_access(listed, TRUSTED) == (USERS, AUTHENTICATED, dacl.EVERYONE)


def test_entries_that_let_nobody_in_are_ignored() -> None:
    listed = acl(
        ace(DENY, dacl.FILE_ALL_ACCESS, dacl.EVERYONE),
        ace(AUDIT, dacl.FILE_ALL_ACCESS, dacl.EVERYONE),
        ace(ALLOW, dacl.FILE_ALL_ACCESS, USERS, INHERIT_ONLY),
        ace(ALLOW, dacl.HARMLESS_ACCESS, dacl.EVERYONE),
    )
    assert dacl.others_with_access(listed, TRUSTED) == ()


@pytest.mark.parametrize("bit", [1 << n for n in range(32)])
def test_every_right_beyond_the_harmless_ones_lets_in(bit: int) -> None:
    """Each of the 32 bits alone: within HARMLESS_ACCESS nobody is named, past it Users is."""
    listed = acl(ace(ALLOW, bit, USERS))
    expected = () if bit & dacl.HARMLESS_ACCESS else (USERS,)
    assert dacl.others_with_access(listed, TRUSTED) == expected


def test_no_list_at_all_lets_everyone_in() -> None:
    assert dacl.others_with_access(None, TRUSTED) == (dacl.EVERYONE,)


def test_an_object_entry_is_never_private() -> None:
    object_entry = struct.pack("<BBHI", ALLOW_OBJECT, 0, 8, FILE_READ_DATA)
    assert dacl.others_with_access(acl(object_entry), TRUSTED) == (dacl.UNREADABLE,)


def test_malformed_lists_are_never_private() -> None:
    good = acl(ace(ALLOW, FILE_READ_DATA, USER))
    overrun = bytearray(good)
    overrun[10:12] = struct.pack("<H", 200)  # the entry claims more than the list holds
    tiny = bytearray(good)
    tiny[10:12] = struct.pack("<H", 2)  # an entry smaller than its own header
    short_sid = acl(struct.pack("<BBHI", ALLOW, 0, 10, FILE_READ_DATA) + b"\1\0")
    for bad in (b"", good[:7], bytes(overrun), bytes(tiny), acl(revision=9), good[:-1], short_sid):
        assert dacl.others_with_access(bad, TRUSTED) == (dacl.UNREADABLE,)
    claimed = bytearray(good)
    claimed[2:4] = struct.pack("<H", len(good) + 1)  # a size past the bytes given
    assert dacl.others_with_access(bytes(claimed), TRUSTED) == (dacl.UNREADABLE,)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_any_bytes_are_judged_without_raising(data: bytes) -> None:
    found = dacl.others_with_access(data, TRUSTED)
    assert all(isinstance(name, str) for name in found)


@given(SIDS)
def test_the_private_list_names_its_user_alone(user: str) -> None:
    listed = dacl.private_dacl(dacl.sid_bytes(user))
    assert dacl.others_with_access(listed, frozenset({user})) == ()
    assert dacl.others_with_access(listed, frozenset()) == (user,)


def test_the_private_descriptor_is_self_relative_protected_and_carries_the_list() -> None:
    user = dacl.sid_bytes(USER)
    descriptor = dacl.private_descriptor(user)
    revision, _, control, owner, group, sacl, offset = struct.unpack_from("<BBHIIII", descriptor)
    assert (revision, owner, group, sacl) == (1, 0, 0, 0)
    assert control == 0x8000 | 0x1000 | 0x0004  # self-relative, protected, DACL present
    assert descriptor[offset:] == dacl.private_dacl(user)


def test_a_private_list_needs_a_real_sid() -> None:
    with pytest.raises(ValueError, match="SID"):
        dacl.private_dacl(b"\1\1")
