"""The loopback rule: which hosts name this machine alone (one owner, review D7).

Used where a host is let through for being local: the HTTP server's bind address (no
``--allow-remote`` needed, ``--insecure-no-auth`` allowed, loopback ``Host`` and
``Origin`` names) and an OAuth issuer reached over plain ``http://``.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address literal, or ``localhost``) is a loopback address.

    An IPv4-mapped IPv6 address is judged by the IPv4 address it carries
    (``::ffff:127.0.0.1`` is loopback, whatever Python's version says); a name other than
    ``localhost`` is not (it is not resolved here).
    """
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
