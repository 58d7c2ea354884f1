"""``--allow-domain`` patterns, the presets, the address rule, and their settings."""

from __future__ import annotations

import ipaddress
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._cli import main
from spice.agent.coding._netpolicy._domains import (
    DEFAULT_PORTS,
    MAXIMUM_HOST_LENGTH,
    MAXIMUM_PATTERNS,
    PRESETS,
    RAW_SUFFIX,
    DomainPolicy,
    PatternError,
    address_of,
    global_address,
    nearest_preset,
    normal_host,
    parse_pattern,
    parse_patterns,
    pattern_allowing,
    policy_of,
)
from spice.agent.coding._settings._resolve import (
    ALLOW_DOMAINS_VARIABLE,
    ALLOW_PRIVATE_ADDRESS_VARIABLE,
    Flags,
    resolve_settings,
)
from spice.agent.coding._settings._values import SettingsError


def policy(*texts: str, private: bool = False) -> DomainPolicy:
    return DomainPolicy(parse_patterns(texts), private)


# -- patterns ---------------------------------------------------------------------------


def test_a_host_allows_itself_on_80_and_443_only() -> None:
    allowed = policy("pypi.org")
    assert allowed.permits("pypi.org", 443)
    assert allowed.permits("PyPI.org.", 80)  # case and the root's dot do not count
    assert not allowed.permits("pypi.org", 22)
    assert not allowed.permits("files.pypi.org", 443)
    assert not allowed.permits("evilpypi.org", 443)


def test_a_wildcard_allows_subdomains_only() -> None:
    allowed = policy("*.example.com")
    assert allowed.permits("a.example.com", 443)
    assert allowed.permits("a.b.example.com", 80)
    assert not allowed.permits("example.com", 443)
    assert not allowed.permits("badexample.com", 443)
    assert not allowed.permits("example.com.evil.org", 443)


def test_a_port_in_a_pattern_is_the_only_port_it_allows() -> None:
    allowed = policy("git.example.com:8443", "*.example.org:9000")
    assert allowed.permits("git.example.com", 8443)
    assert not allowed.permits("git.example.com", 443)
    assert allowed.permits("x.example.org", 9000)
    assert not allowed.permits("x.example.org", 80)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_allows_its_hosts_and_nothing_else(name: str) -> None:
    allowed = policy(name)
    for host in PRESETS[name]:
        for port in DEFAULT_PORTS:
            assert allowed.permits(host, port)
    assert not allowed.permits("example.com", 443)
    assert len(allowed.patterns) == len(PRESETS[name])


def test_a_tcp_pattern_allows_raw_bytes_on_its_port_only() -> None:
    """``HOST:PORT/tcp`` (git over ssh): that pair, raw; every other pattern: TLS alone."""
    allowed = policy("github.com:22/TCP", "*.example.org:2222/tcp", "[2001:db8::1]:22/tcp")
    assert allowed.permits("github.com", 22)
    assert allowed.raw("github.com", 22)
    assert not allowed.permits("github.com", 443)
    assert not allowed.raw("github.com", 443)
    assert allowed.raw("a.example.org", 2222)
    assert not allowed.raw("example.org", 2222)
    assert allowed.raw("2001:db8::1", 22)
    assert allowed.describe() == [
        "github.com:22/tcp",
        "*.example.org:2222/tcp",
        "[2001:db8::1]:22/tcp",
    ]
    tls_only = policy("github.com:22", "github")
    assert tls_only.permits("github.com", 22)
    assert not tls_only.raw("github.com", 22)
    assert not tls_only.raw("github.com", 443)
    both = policy("github.com:22", "github.com:22/tcp")
    assert both.raw("github.com", 22)
    assert len(both.patterns) == 2


def test_an_address_is_allowed_only_when_a_pattern_names_it() -> None:
    assert not policy("example.com").permits("93.184.215.14", 443)
    named = policy("192.0.2.7", "[2001:db8::1]:8443")
    assert named.permits("192.0.2.7", 443)
    assert named.permits("2001:db8::1", 8443)
    assert named.permits("2001:0db8:0:0::1", 8443)  # the same address, spelt longer
    assert not named.permits("2001:db8::1", 443)
    assert not named.permits("192.0.2.8", 443)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "*",
        "*.com",
        "http://pypi.org",
        "pypi.org/simple",
        "pypi.org:0",
        "pypi.org:65536",
        "pypi.org:http",
        "-pypi.org",
        "pypi-.org",
        "py pi.org",
        "pypi..org",
        "a" * 64 + ".org",
        "ä.example",
        "10",
        "[::1",
        "[::1]x",
        "fe80::1%eth0",
        "user@pypi.org",
        "github.com/tcp",  # raw TCP names its port
        "github.com:22/udp",
        "github.com:22/tcp/tcp",
        "github.com:/tcp",
        "github.com:0/tcp",
        "*.com:22/tcp",
        "[::1]/tcp",
        "/tcp",
    ],
)
def test_what_is_not_a_pattern_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(PatternError) as raised:
        parse_pattern(bad)
    assert repr(bad.encode("ascii", "backslashreplace").decode())[1:-1] in str(raised.value)


def test_the_number_of_patterns_is_bounded_on_both_sides() -> None:
    at_bound = [f"h{n}.example.com" for n in range(MAXIMUM_PATTERNS)]
    assert len(parse_patterns(at_bound)) == MAXIMUM_PATTERNS
    with pytest.raises(PatternError):
        parse_patterns([*at_bound, "one.more.com"])


def test_a_host_name_is_bounded_at_253_characters() -> None:
    longest = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(longest) == MAXIMUM_HOST_LENGTH
    assert normal_host(longest) == longest
    assert normal_host(longest + "e") is None


_LABEL = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=20)


@given(st.lists(_LABEL, min_size=2, max_size=4), st.integers(1, 65535))
def test_any_host_and_port_pattern_allows_exactly_that_pair(labels: list[str], port: int) -> None:
    host = ".".join(labels)
    if address_of(host) is not None:  # "1.2.3.4": an address pattern, judged as one
        assert parse_pattern(f"{host}:{port}")[0].address
        return
    if labels[-1].isdigit():
        with pytest.raises(PatternError):
            parse_pattern(f"{host}:{port}")
        return
    allowed = policy(f"{host}:{port}")
    assert allowed.permits(host, port)
    assert not allowed.permits(host, port % 65535 + 1)
    assert not allowed.permits("x." + host, port)


_REFUSED_HOST = st.one_of(
    st.lists(_LABEL, min_size=2, max_size=4)
    .map(".".join)
    .filter(lambda host: address_of(host) is None and not host.rpartition(".")[2].isdigit()),
    st.ip_addresses().map(lambda address: address.compressed),
)


@given(_REFUSED_HOST, st.integers(1, 65535))
def test_the_pattern_a_hint_names_allows_the_refused_host_and_port(host: str, port: int) -> None:
    """What ``sandbox_hint`` tells the user to pass admits what the proxy refused: a bare
    host where the port is 80 or 443, else ``host:port`` (a bare host allows no other)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # as the proxy's
    pattern = pattern_allowing(authority)
    assert policy(pattern).permits(host, port)
    assert (":" not in pattern.rpartition("]")[2]) == (port in DEFAULT_PORTS)


def test_a_hint_pattern_keeps_a_port_a_bare_host_would_not_allow() -> None:
    assert "pypi.org" == pattern_allowing("pypi.org:443")
    assert "pypi.org" == pattern_allowing("pypi.org:80")
    assert "pypi.org:8443" == pattern_allowing("pypi.org:8443")
    assert "[2001:db8::1]" == pattern_allowing("[2001:db8::1]:443")
    assert "[2001:db8::1]:81" == pattern_allowing("[2001:db8::1]:81")
    assert "pypi.org" == pattern_allowing("pypi.org")  # no port: as it is
    assert "pypi.org:0" == pattern_allowing("pypi.org:0")  # not a port: as it is


@given(_REFUSED_HOST, st.integers(1, 65535), st.sampled_from(["/tcp", "/TCP", "/Tcp"]))
def test_any_host_port_tcp_pattern_allows_raw_bytes_on_exactly_that_pair(
    host: str, port: int, suffix: str
) -> None:
    """The hint for a tunnel refused for carrying no TLS names ``authority/tcp``."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    (pattern,) = parse_pattern(authority + suffix)
    assert (pattern.raw, pattern.port) == (True, port)
    assert str(pattern) == authority.lower() + RAW_SUFFIX or pattern.address
    assert parse_pattern(str(pattern)) == (pattern,)
    allowed = policy(authority + RAW_SUFFIX)
    assert allowed.raw(host, port)
    assert not allowed.raw(host, port % 65535 + 1)
    assert not allowed.permits(host, port % 65535 + 1)


@given(st.text(max_size=80))
def test_any_text_is_a_pattern_or_a_pattern_error(text: str) -> None:
    try:
        patterns = parse_pattern(text)
    except PatternError:
        return
    assert patterns
    for pattern in patterns:
        assert parse_pattern(str(pattern)) == (pattern,)  # what tools prints reads back


# -- addresses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # the cloud metadata address
        "100.64.0.1",  # shared address space (CGNAT)
        "0.0.0.0",  # noqa: S104 - an address judged, never bound
        "::",
        "224.0.0.1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "192.0.2.1",  # documentation
        "240.0.0.1",  # reserved
    ],
)
def test_non_global_addresses_are_not_reachable_without_the_flag(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert not global_address(parsed)
    assert not DomainPolicy().reachable([parsed])
    assert DomainPolicy(allow_private=True).reachable([parsed])


def test_a_global_address_is_reachable_and_one_private_address_spoils_a_name() -> None:
    public = ipaddress.ip_address("93.184.215.14")
    assert global_address(public)
    assert global_address(ipaddress.ip_address("2606:4700::1111"))
    assert DomainPolicy().reachable([public])
    assert not DomainPolicy().reachable([public, ipaddress.ip_address("127.0.0.1")])
    assert not DomainPolicy().reachable([])


# -- settings -----------------------------------------------------------------------------


def test_the_flag_and_the_variable_make_the_policy(tmp_path: object) -> None:
    root = str(tmp_path)
    flags = Flags(root=root, allow_domain=("python", "*.example.com:8443"))
    settings = resolve_settings(flags, {})
    assert settings.domains.permits("files.pythonhosted.org", 443)
    assert settings.domains.permits("a.example.com", 8443)
    assert not settings.domains.allow_private
    environ = {ALLOW_DOMAINS_VARIABLE: " npm , crates ", ALLOW_PRIVATE_ADDRESS_VARIABLE: "yes"}
    from_environment = resolve_settings(Flags(root=root), environ)
    assert from_environment.domains.permits("registry.npmjs.org", 443)
    assert from_environment.domains.permits("index.crates.io", 443)
    assert from_environment.domains.allow_private
    # Flags replace the variable's patterns.
    both = resolve_settings(Flags(root=root, allow_domain=("go",)), environ)
    assert not both.domains.permits("registry.npmjs.org", 443)
    assert resolve_settings(Flags(root=root), {}).domains == DomainPolicy()


def test_a_bad_pattern_or_switch_is_a_settings_error(tmp_path: object) -> None:
    root = str(tmp_path)
    with pytest.raises(SettingsError, match=r"'http://x\.org'"):
        resolve_settings(Flags(root=root, allow_domain=("http://x.org",)), {})
    with pytest.raises(SettingsError, match="'bad_host'"):
        resolve_settings(Flags(root=root), {ALLOW_DOMAINS_VARIABLE: "pypi.org,bad_host"})
    with pytest.raises(SettingsError, match=ALLOW_PRIVATE_ADDRESS_VARIABLE):
        resolve_settings(Flags(root=root), {ALLOW_PRIVATE_ADDRESS_VARIABLE: "maybe"})


def test_the_cli_refuses_a_bad_pattern_at_start_with_exit_2(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--root", str(tmp_path), "--allow-domain", "pypi.org/simple", "tools"])
    assert code == 2
    assert "'pypi.org/simple'" in capsys.readouterr().err


def test_the_flags_are_read_before_and_after_the_command_word() -> None:
    from spice.agent.coding._cli import _parser  # noqa: PLC0415 - the parser's own test
    from spice.agent.coding._settings._resolve import flags_of  # noqa: PLC0415

    argv = ["--allow-domain", "python", "call", "--allow-domain", "npm"]
    options = _parser().parse_args([*argv, "--allow-private-address", "shell", "{}"])
    flags = flags_of(options)
    assert flags.allow_domain == ("python", "npm")
    assert flags.allow_private_address is True
    assert flags_of(_parser().parse_args(["tools"])) == Flags()


def test_ipv6_carrying_a_global_ipv4_address_is_global() -> None:
    assert global_address(ipaddress.ip_address("::ffff:93.184.215.14"))
    teredo_of_loopback = ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:80ff:fffe")
    assert teredo_of_loopback.teredo is not None
    assert not global_address(teredo_of_loopback)  # Teredo's client 127.0.0.1


# -- presets know the host (contract 12.2) --------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "nearest"),
    [
        ("pythn", "python"),
        ("pyhton", "python"),
        ("nmp", "npm"),
        ("crate", "crates"),
        ("gitub", "github"),
    ],
)
def test_a_one_word_pattern_that_is_no_preset_is_refused_naming_the_nearest(
    typo: str, nearest: str
) -> None:
    """Round 4 accepted ``--allow-domain pythn`` silently (it allowed nothing)."""
    with pytest.raises(PatternError, match=f"did you mean {nearest!r}"):
        parse_pattern(typo)
    assert nearest == nearest_preset(typo)


def test_a_single_label_with_a_port_is_a_host_and_without_one_is_refused() -> None:
    """Boundary: ``db:5432`` (a compose service) is a host; ``localhost`` alone is not."""
    assert policy("db:5432").permits("db", 5432)
    with pytest.raises(PatternError, match="not a preset"):
        parse_pattern("localhost")
    assert parse_pattern("Python") == parse_pattern("python")  # a preset in any case


@given(st.text(string.ascii_lowercase, min_size=1, max_size=20))
def test_every_single_word_is_a_preset_or_refused_naming_a_preset(word: str) -> None:
    if word in PRESETS:
        assert parse_pattern(word)
        return
    with pytest.raises(PatternError, match="did you mean '(" + "|".join(PRESETS) + ")'"):
        parse_pattern(word)


def test_a_configured_host_joins_its_chosen_preset_whatever_its_address() -> None:
    """The host's index (a mirror on a private address) is admitted with ``python``."""
    configured = {"python": ["127.0.0.2:39647", "mirror.corp.example"], "npm": ["npm.corp.example"]}
    chosen = policy_of(["python"], configured=configured)
    loopback = ipaddress.ip_address("127.0.0.2")
    assert chosen.permits("127.0.0.2", 39647)
    assert chosen.reachable([loopback], "127.0.0.2", 39647)
    assert chosen.permits("mirror.corp.example", 443)
    assert chosen.reachable([ipaddress.ip_address("10.0.0.7")], "mirror.corp.example", 443)
    # Not chosen: npm's configured registry is not admitted, nor any other private name.
    assert not chosen.permits("npm.corp.example", 443)
    assert not chosen.reachable([ipaddress.ip_address("10.0.0.7")], "pypi.org", 443)
    assert not chosen.reachable([loopback], "127.0.0.2", 39648)
    assert not chosen.reachable([loopback])
    # Without the preset nothing configured is admitted.
    assert not policy_of(["pypi.org"], configured=configured).permits("127.0.0.2", 39647)
    assert () == policy_of(["npm"], configured={"python": ["a.example"]}).configured


def test_preset_of_names_the_preset_of_a_host_chosen_or_not() -> None:
    chosen = policy_of(["npm"], configured={"python": ["127.0.0.2:39647"]})
    assert "python" == chosen.preset_of("127.0.0.2:39647")
    assert "python" == chosen.preset_of("pypi.org:443")
    assert "github" == chosen.preset_of("codeload.github.com:443")
    assert chosen.preset_of("pypi.org:22") is None
    assert chosen.preset_of("example.org:443") is None
    assert chosen.preset_of("pypi.org") is None  # no port: nothing to judge
    assert chosen.preset_of("bad host") is None


def test_a_configured_host_that_is_no_host_is_ignored() -> None:
    chosen = policy_of(["python"], configured={"python": ["not a host", "x:0"], "bogus": ["a.b"]})
    assert chosen.configured == ()
    assert chosen.preset_of("a.b:443") is None
