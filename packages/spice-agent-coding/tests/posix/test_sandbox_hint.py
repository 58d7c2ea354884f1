"""``sandbox_hint`` and the sandbox's claims below Landlock ABI 6 (contract 11.1), no process.

The scanner is fed output as a launcher's sinks get it (any chunking); the claims are a
table over Landlock ABI 1..7 and namespaces made or not (review C2, C8, C9).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spice.agent.coding._netpolicy._domains import policy_of
from spice.agent.coding._posix._bwrap import Namespaces
from spice.agent.coding._posix._containment import (
    BUILD_FILES,
    MAXIMUM_SENTENCE_BYTES,
    OTHER_TERMINALS,
    PROTECTED_SENTENCE,
    SIGNAL_SCOPE_ABI,
    UNPROTECTED_GIT,
    UNSCOPED_PROCESSES,
    Containment,
    describe,
)
from spice.agent.coding._posix._hints import (
    CA_HINT,
    MAXIMUM_HINT_BYTES,
    MAXIMUM_LINE_BYTES,
    MAXIMUM_REFUSALS,
    RefusalScanner,
    Scanned,
    sandbox_hint,
)

WRITABLE: Final = ("/w/root", "/tmp")
REFUSALS: Final = (
    b"touch: cannot touch '/etc/zz': Read-only file system\n",
    b"/bin/sh: 1: cannot create /etc/zz: Permission denied\n",
    b"OSError: [Errno 30] Read-only file system: '/etc/zz'\n",
    b"npm ERR! EROFS: read-only file system, mkdir '/etc/zz'\n",
    b"error: failed to create directory `/etc/zz`: Read-only file system (os error 30)\n",
)


def hint_of(output: bytes, **options: object) -> str | None:
    scanner = RefusalScanner()
    scanner.feed(2, output)
    return sandbox_hint(
        scanner,
        options.get("writable", WRITABLE),  # type: ignore[arg-type]
        options.get("hidden", ()),  # type: ignore[arg-type]
        network_denied=bool(options.get("network_denied", True)),
        refused_hosts=options.get("refused_hosts", ()),  # type: ignore[arg-type]
        private_hosts=options.get("private_hosts", ()),  # type: ignore[arg-type]
        preset_of=options.get("preset_of"),  # type: ignore[arg-type]
        home=options.get("home"),  # type: ignore[arg-type]
        hidden_home=options.get("hidden_home"),  # type: ignore[arg-type]
        shown=options.get("shown", ()),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("line", REFUSALS)
def test_each_tools_refusal_names_allow_write_of_the_nearest_directory(line: bytes) -> None:
    hint = hint_of(line)
    assert hint is not None
    assert "--allow-write /etc " in hint
    assert "/etc/zz" in hint


def test_a_refusal_inside_a_writable_place_or_a_hidden_path_gets_no_hint() -> None:
    assert hint_of(b"cannot create /w/root/.git/config: Read-only file system\n") is None
    assert hint_of(b"cannot create .gitmodules: Read-only file system\n") is None  # relative
    hidden = b"open /home/u/.ssh/x: Read-only file system\n"
    assert hint_of(hidden, hidden=("/home/u/.ssh",)) is None
    assert hint_of(b"/proc/1/oom_score_adj: Permission denied\n") is None


def test_a_write_in_the_hosts_tmp_points_at_tmpdir() -> None:
    hint = hint_of(b"cannot create /tmp/x: Permission denied\n", writable=("/w/root",))
    assert hint is not None
    assert "$TMPDIR" in hint


def test_output_without_a_refusal_or_with_only_a_path_gets_no_hint() -> None:
    assert hint_of(b"") is None
    assert hint_of(b"wrote /etc/zz\nall fine\n") is None


def test_the_network_hints_name_allow_domain() -> None:
    dns = b"socket.gaierror: [Errno -3] Temporary failure in name resolution\n"
    hint = hint_of(dns)
    assert hint is not None
    assert "--allow-domain HOST" in hint
    assert hint_of(dns, network_denied=False) is None
    refused = hint_of(b"", refused_hosts=("pypi.org:443",))
    assert refused is not None
    assert "--allow-domain pypi.org." in refused
    # A bare host allows 80 and 443 only: another port is named with it.
    other = str(hint_of(b"", refused_hosts=("registry.lan:4873",)))
    assert "--allow-domain registry.lan:4873." in other
    # The proxy's first refused host was allowed by name but resolved to a private address.
    private = hint_of(
        b"", refused_hosts=("mirror.lan:443", "pypi.org:443"), private_hosts={"mirror.lan:443"}
    )
    assert private is not None
    assert "--allow-private-address" in private
    assert "--allow-domain" not in private
    assert "--allow-domain pypi.org" in str(
        hint_of(b"", refused_hosts=("pypi.org:443",), private_hosts={"mirror.lan:443"})
    )


def test_a_refused_host_of_a_preset_is_hinted_as_the_preset() -> None:
    """Contract 12.2: one flag admits the index and its files host (round 4: two restarts);
    a configured mirror is named as its preset too, a host of no preset as itself."""
    chosen = policy_of([], configured={"python": ["mirror.corp.example:8443"]})
    files = str(
        hint_of(b"", refused_hosts=("files.pythonhosted.org:443",), preset_of=chosen.preset_of)
    )
    assert "--allow-domain python." in files
    mirror = str(
        hint_of(b"", refused_hosts=("mirror.corp.example:8443",), preset_of=chosen.preset_of)
    )
    assert "--allow-domain python." in mirror
    other = str(
        hint_of(b"", refused_hosts=("mirror.corp.example:443",), preset_of=chosen.preset_of)
    )
    assert "--allow-domain mirror.corp.example." in other
    registry = str(
        hint_of(b"", refused_hosts=("registry.npmjs.org:443",), preset_of=chosen.preset_of)
    )
    assert "--allow-domain npm." in registry


def test_a_long_path_falls_back_to_a_sentence_within_the_bound() -> None:
    long = b"/etc/" + b"d" * 600
    hint = hint_of(b"cannot create " + long + b": Read-only file system\n")
    assert hint is not None
    assert len(hint.encode()) <= MAXIMUM_HINT_BYTES
    assert "--allow-write DIR" in hint


def test_the_scanner_keeps_at_most_its_bound_of_paths_and_lines() -> None:
    scanner = RefusalScanner()
    for index in range(MAXIMUM_REFUSALS + 5):
        scanner.feed(1, f"cannot create /etc/z{index}: Permission denied\n".encode())
    assert MAXIMUM_REFUSALS == len(scanner.paths)
    huge = RefusalScanner()
    huge.feed(1, b"x" * (MAXIMUM_LINE_BYTES * 3))
    huge.feed(1, b" /etc/q: Permission denied\n")  # past the bound of its line: not seen
    assert [] == huge.paths


class _Keep:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(REFUSALS), st.lists(st.integers(min_value=1, max_value=40), max_size=8))
def test_any_chunking_of_the_output_gives_the_same_hint(line: bytes, cuts: list[int]) -> None:
    output = b"noise line\n" + line + b"tail without newline"
    scanner = RefusalScanner()
    kept = _Keep()
    sink = Scanned(kept, scanner, 2)
    position = 0
    for cut in cuts:
        sink.write(output[position : position + cut])
        position += cut
    sink.write(output[position:])
    assert output == bytes(kept.data)  # handed on unchanged
    hint = sandbox_hint(scanner, WRITABLE, (), network_denied=True)
    assert hint == hint_of(output)


# -- claims below ABI 6 and without namespaces (C2, C8, C9) --------------------------------


@pytest.mark.parametrize("abi", range(1, 8))
@pytest.mark.parametrize("made", [True, False])
def test_the_claims_over_each_abi_with_and_without_namespaces(abi: int, made: bool) -> None:
    namespaces = Namespaces("/usr/bin/bwrap") if made else Namespaces(None, "simulated")
    policy = dataclasses.replace(
        Containment("workspace", "workspace", abi, seccomp=True), namespaces=namespaces
    )
    sentence = policy.sentence or ""
    assert policy.contained  # writes confined on every path (and more with namespaces)
    assert "a permission or read-only error" in sentence
    # The protected paths are held on both paths (contract 12.1): read-only or undone.
    assert PROTECTED_SENTENCE in sentence
    assert ".git/config" not in sentence
    unheld = describe(policy, protected=False) or ""
    assert PROTECTED_SENTENCE not in unheld
    assert ".git/config, hooks" in unheld
    kept = policy.not_confined
    assert UNPROTECTED_GIT not in kept
    assert BUILD_FILES in kept
    if made:
        assert "cannot see or signal other processes" in sentence
        assert UNSCOPED_PROCESSES not in kept
        assert OTHER_TERMINALS not in kept
    else:
        assert OTHER_TERMINALS in kept
        assert (UNSCOPED_PROCESSES in kept) is (abi < SIGNAL_SCOPE_ABI)
        if abi < SIGNAL_SCOPE_ABI:
            assert "may signal" in sentence
            assert "cannot signal" not in sentence
        else:
            assert "cannot signal or trace other processes" in sentence
    assert len(sentence.encode()) <= MAXIMUM_SENTENCE_BYTES


@pytest.mark.parametrize("abi", range(1, 8))
@pytest.mark.parametrize("made", [True, False])
def test_an_allow_write_path_of_ninety_characters_is_named_in_the_sentence(
    abi: int, made: bool
) -> None:
    """A scratch directory's length (``/tmp/spice-unprivileged.X/pytest-of-nobody/...``)."""
    path = "/" + "d" * 89
    namespaces = Namespaces("/usr/bin/bwrap") if made else Namespaces(None, "simulated")
    policy = Containment(
        "workspace", "workspace", abi, seccomp=True, namespaces=namespaces, allow_write=(path,)
    )
    sentence = policy.sentence or ""
    assert path in sentence
    assert len(sentence.encode()) <= MAXIMUM_SENTENCE_BYTES
    longer = dataclasses.replace(policy, allow_write=(path, path + "x" * 200))
    assert "the --allow-write directories (see tools)" in (longer.sentence or "")


# -- contract 13.4: the settings key, an unknown issuer, a hidden read ----------------------

UNKNOWN_ISSUER: Final = (
    b"error: invalid peer certificate: UnknownIssuer\n",  # rustls (uv)
    b"ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
    b"urllib3: unable to get local issuer certificate (_ssl.c:1006)\n",  # OpenSSL (Python)
    b"curl: (60) SSL certificate problem: unable to get local issuer certificate\n",
    b"npm ERR! code UNABLE_TO_GET_ISSUER_CERT_LOCALLY\n",  # Node
    b"npm ERR! code SELF_SIGNED_CERT_IN_CHAIN\n",
    b"sun.security.validator.ValidatorException: PKIX path building failed: x\n",  # Java
)


@pytest.mark.parametrize("line", UNKNOWN_ISSUER)
def test_an_unknown_issuer_names_ca_files_and_ssl_cert_file(line: bytes) -> None:
    hint = hint_of(b"Resolved 3 packages\n" + line, network_denied=False)
    assert hint == CA_HINT
    assert "ca_files" in hint
    assert "SSL_CERT_FILE" in hint
    assert len(hint.encode()) <= MAXIMUM_HINT_BYTES


def test_tls_words_without_a_failure_of_the_issuer_get_no_ca_hint() -> None:
    assert hint_of(b"certificate verify ok\nTLS handshake done\n", network_denied=False) is None
    # A refused host is the cause before any certificate: the network hint wins.
    refused = hint_of(UNKNOWN_ISSUER[0], refused_hosts=("pypi.org:443",))
    assert "--allow-domain pypi.org." in str(refused)


@pytest.mark.parametrize(
    ("output", "options", "key"),
    [
        (REFUSALS[0], {}, 'allow_write = ["/etc"]'),
        (b"", {"refused_hosts": ("pypi.org:443",)}, 'allow_domains = ["pypi.org"]'),
        (
            b"",
            {"refused_hosts": ("m.lan:443",), "private_hosts": {"m.lan:443"}},
            "allow_private_address = true",
        ),
        (b"Temporary failure in name resolution\n", {}, "allow_domains"),
    ],
)
def test_a_refusal_a_flag_lifts_names_its_settings_key_too(
    output: bytes, options: dict[str, object], key: str
) -> None:
    """Issue 47: the hints said the server "must be started with" a flag, though a running
    server takes the settings file's rule at its next call."""
    hint = str(hint_of(output, **options))
    assert key in hint
    assert "no restart" in hint
    assert "must be started" not in hint
    assert len(hint.encode()) <= MAXIMUM_HINT_BYTES


def test_a_failed_read_of_a_hidden_place_names_it_and_allow_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("x")
    (home / ".gitconfig").write_text("x")
    line = f"cat: {home}/.aws/credentials: No such file or directory\n".encode()
    seen = {
        "home": str(home),
        "hidden_home": str(home),
        "shown": (str(home / ".gitconfig"),),
        "writable": ("/w",),
    }
    hint = str(hint_of(line, **seen))
    assert f"{home}/.aws/credentials" in hint
    assert "--allow-read .aws/credentials " in hint
    assert 'allow_read = [".aws/credentials"]' in hint
    assert len(hint.encode()) <= MAXIMUM_HINT_BYTES
    # The other sides: a place that does not exist on the host is missing for real; a shown
    # place is not hidden; without a hidden home (no namespaces) nothing is said.
    missing = f"cat: {home}/.nothing: No such file or directory\n".encode()
    assert hint_of(missing, **seen) is None
    shown = f"cat: {home}/.gitconfig: No such file or directory\n".encode()
    assert hint_of(shown, **seen) is None
    assert hint_of(line, home=str(home), writable=("/w",)) is None
    # A masked credential (or a deny_read place) is hidden with or without a hidden home.
    masked = hint_of(line, home=str(home), hidden=(str(home / ".aws"),), writable=("/w",))
    assert "--allow-read .aws/credentials " in str(masked)
    denied = tmp_path / "secrets"
    denied.mkdir()
    elsewhere = f"open {denied}: Permission denied\n".encode()
    told = str(hint_of(elsewhere, home=str(home), hidden=(str(denied),), writable=("/w",)))
    assert "deny_read" in told
    assert str(denied) in told
