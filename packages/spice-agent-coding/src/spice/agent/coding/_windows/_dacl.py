"""A Windows file's access list, read in Python: who besides its user may open it.

The POSIX token file is refused when group or others have any mode bit. The Windows
counterpart is the file's discretionary access list (DACL): this module reads its bytes
(as ``GetSecurityInfo`` returns them, ``_windows._api.file_security``) and names every
account that an *allow* entry lets read, write or re-permission the file, other than the
trusted ones (the user, ``SYSTEM``, ``Administrators``). It also makes the bytes of a
private, protected DACL (the user alone, full access; nothing inherited) and of the
self-relative security descriptor that carries it into ``CreateFileW``.

Sans-IO and standard library only: the rules run and are tested on every platform; only
the calls that fetch and apply the bytes are Windows-only. Malformed bytes never raise
past :func:`others_with_access`: they count as open (refused), the safe side.

Layouts (Microsoft's ``ACL``, ``ACE_HEADER``, ``ACCESS_ALLOWED_ACE``, ``SID``, and
``SECURITY_DESCRIPTOR_RELATIVE``): little-endian except a SID's 48-bit identifier
authority, which is big-endian.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "ADMINISTRATORS",
    "EVERYONE",
    "FILE_ALL_ACCESS",
    "HARMLESS_ACCESS",
    "MAXIMUM_SUB_AUTHORITIES",
    "SYSTEM",
    "others_with_access",
    "private_dacl",
    "private_descriptor",
    "sid_bytes",
    "sid_text",
]

SYSTEM: Final = "S-1-5-18"
ADMINISTRATORS: Final = "S-1-5-32-544"
EVERYONE: Final = "S-1-1-0"
"""What a missing (NULL) DACL means: every account has every access."""
UNREADABLE: Final = "(unreadable)"
"""The name given to an entry whose bytes cannot be read (counted as open)."""

SYNCHRONIZE: Final = 0x0010_0000
READ_CONTROL: Final = 0x0002_0000
FILE_READ_ATTRIBUTES: Final = 0x0000_0080
HARMLESS_ACCESS: Final = SYNCHRONIZE | READ_CONTROL | FILE_READ_ATTRIBUTES
"""Rights another account may hold without reaching the file's content or its access list
(waiting on it, reading its security descriptor and its times)."""
FILE_ALL_ACCESS: Final = 0x001F_01FF

MAXIMUM_SUB_AUTHORITIES: Final = 15
"""``SID_MAX_SUB_AUTHORITIES``: a longer SID is malformed."""

_ACL_REVISION: Final = 2
_ACL_HEADER: Final = struct.Struct("<BBHHH")
_ACE_HEADER: Final = struct.Struct("<BBH")
_MASK: Final = struct.Struct("<I")
_DESCRIPTOR: Final = struct.Struct("<BBHIIII")

_INHERIT_ONLY: Final = 0x08
"""An entry that only passes to children: it grants nothing on the file itself."""
_ALLOW_TYPES: Final = frozenset({0x00, 0x09})
"""``ACCESS_ALLOWED_ACE_TYPE`` and ``ACCESS_ALLOWED_CALLBACK_ACE_TYPE`` (mask, then SID)."""
_ALLOW_OBJECT_TYPES: Final = frozenset({0x05, 0x0B})
"""Object allow entries (GUIDs before the SID): never on a file, so read as open."""

_SE_DACL_PRESENT: Final = 0x0004
_SE_DACL_PROTECTED: Final = 0x1000
_SE_SELF_RELATIVE: Final = 0x8000


def sid_text(data: bytes) -> str:
    """A SID's bytes as ``S-1-...`` text; ``ValueError`` when they are not exactly one SID."""
    if len(data) < 8:
        raise ValueError("a SID is at least 8 bytes")
    revision, count = data[0], data[1]
    if revision != 1 or count > MAXIMUM_SUB_AUTHORITIES or len(data) != 8 + 4 * count:
        raise ValueError("not a SID")
    authority = int.from_bytes(data[2:8], "big")
    subs = struct.unpack_from(f"<{count}I", data, 8)
    return "-".join(["S", "1", str(authority), *map(str, subs)])


def sid_bytes(text: str) -> bytes:
    """``S-1-...`` text as a SID's bytes; ``ValueError`` when it is not one."""
    parts = text.split("-")
    if len(parts) < 3 or parts[0] != "S" or parts[1] != "1":
        raise ValueError("not a SID")
    if not all(part.isdigit() and part.isascii() for part in parts[2:]):
        raise ValueError("not a SID")
    authority, *subs = (int(part) for part in parts[2:])
    if (
        authority >= 1 << 48
        or len(subs) > MAXIMUM_SUB_AUTHORITIES
        or any(s >= 1 << 32 for s in subs)
    ):
        raise ValueError("not a SID")
    return (
        bytes((1, len(subs))) + authority.to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)
    )


def _sid_at(data: bytes, start: int, end: int) -> str:
    """The SID that begins at ``start`` within an entry ending at ``end``."""
    if end - start < 8:
        raise ValueError("no room for a SID")
    count = data[start + 1]
    return sid_text(data[start : start + 8 + 4 * count])


def others_with_access(dacl: bytes | None, trusted: frozenset[str]) -> tuple[str, ...]:
    """The accounts besides ``trusted`` that an allow entry of ``dacl`` lets in, in order.

    ``None`` (no DACL at all) lets everyone in. Deny, audit and label entries, entries that
    only pass to children and grants within ``HARMLESS_ACCESS`` let nobody in. An entry or
    a list that cannot be read yields ``UNREADABLE``: an unreadable list is never private.
    """
    if dacl is None:
        return (EVERYONE,)
    try:
        return _others(dacl, trusted)
    except (ValueError, struct.error):
        return (UNREADABLE,)


def _others(dacl: bytes, trusted: frozenset[str]) -> tuple[str, ...]:
    revision, _, size, count, _ = _ACL_HEADER.unpack_from(dacl, 0)
    if revision not in (_ACL_REVISION, 4) or not _ACL_HEADER.size <= size <= len(dacl):
        raise ValueError("not an ACL")
    found: list[str] = []
    offset = _ACL_HEADER.size
    for _ in range(count):
        kind, flags, ace_size = _ACE_HEADER.unpack_from(dacl, offset)
        end = offset + ace_size
        if ace_size < _ACE_HEADER.size or end > size:
            raise ValueError("an entry overruns its ACL")
        if not flags & _INHERIT_ONLY:
            if kind in _ALLOW_OBJECT_TYPES:
                found.append(UNREADABLE)
            elif kind in _ALLOW_TYPES:
                (mask,) = _MASK.unpack_from(dacl, offset + _ACE_HEADER.size)
                sid = _sid_at(dacl, offset + _ACE_HEADER.size + _MASK.size, end)
                if mask & ~HARMLESS_ACCESS and sid not in trusted and sid not in found:
                    found.append(sid)
        offset = end
    return tuple(found)


def private_dacl(user: bytes) -> bytes:
    """A DACL of one entry: ``user`` (a SID's bytes) has full access, nobody else any."""
    sid_text(user)
    ace_size = _ACE_HEADER.size + _MASK.size + len(user)
    ace = _ACE_HEADER.pack(0x00, 0, ace_size) + _MASK.pack(FILE_ALL_ACCESS) + user
    return _ACL_HEADER.pack(_ACL_REVISION, 0, _ACL_HEADER.size + ace_size, 1, 0) + ace


def private_descriptor(user: bytes) -> bytes:
    """A self-relative security descriptor whose protected DACL is ``private_dacl(user)``.

    Protected: nothing is inherited from the directory, now or when its list changes.
    No owner or group is named, so the creator's own become the file's.
    """
    control = _SE_SELF_RELATIVE | _SE_DACL_PRESENT | _SE_DACL_PROTECTED
    head = _DESCRIPTOR.pack(1, 0, control, 0, 0, 0, _DESCRIPTOR.size)
    return head + private_dacl(user)
