"""The loopback rule (``_netpolicy._loopback``): one owner for the HTTP bind host, its
``Host``/``Origin`` names and an OAuth issuer over plain ``http://`` (review D7)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding import _cli
from spice.agent.coding._mcp import _http, _oauth
from spice.agent.coding._netpolicy._loopback import is_loopback
from spice.agent.coding._settings import _serve
from spice.agent.coding._settings._serve import resolve_http
from spice.agent.coding._settings._values import SettingsError


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.255.255.254", True),  # the whole 127/8
        ("::1", True),
        ("::ffff:127.0.0.1", True),  # mapped: judged by its IPv4 address
        ("128.0.0.1", False),
        ("::2", False),
        ("::ffff:10.0.0.1", False),
        ("0.0.0.0", False),  # noqa: S104 - every interface is not loopback
        ("localhost.", False),  # a name is not resolved
        ("LOCALHOST.example", False),
        ("", False),
    ],
)
def test_the_rule_on_both_sides(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@given(st.ip_addresses())
def test_an_address_is_loopback_as_ipaddress_says_or_its_mapped_ipv4(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    mapped = getattr(address, "ipv4_mapped", None)
    expected = (mapped or address).is_loopback
    assert is_loopback(str(address)) is expected


def test_every_user_takes_the_one_rule() -> None:
    assert vars(_serve)["is_loopback"] is is_loopback
    assert vars(_oauth)["is_loopback"] is is_loopback
    assert vars(_http)["is_loopback"] is is_loopback
    assert vars(_cli)["is_loopback"] is is_loopback


def test_a_mapped_loopback_host_needs_no_allow_remote() -> None:
    """``::ffff:127.0.0.1`` binds to loopback: no ``--allow-remote`` (the old copies asked
    ``ipaddress``, which on Python 3.11 calls it not loopback); a mapped private one does."""
    base = ["serve", "--transport", "http", "--token-file", "/t", "--host"]
    parsed = _cli._parser().parse_args([*base, "::ffff:127.0.0.1"])
    assert resolve_http(parsed) is not None
    with pytest.raises(SettingsError, match="--allow-remote"):
        resolve_http(_cli._parser().parse_args([*base, "::ffff:10.0.0.1"]))
