"""What the host configures for installers (contract 12.2): ``_netpolicy._hostconfig``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spice.agent.coding._netpolicy._hostconfig import (
    CERTIFICATE_VARIABLES,
    MAXIMUM_CONFIGURATION_BYTES,
    MAXIMUM_CONFIGURED_HOSTS,
    Configured,
    authority_of,
    read_host_configuration,
)


def test_a_urls_authority_keeps_a_port_other_than_80_and_443() -> None:
    assert "pypi.example" == authority_of("https://pypi.example/simple")
    assert "pypi.example" == authority_of("http://PyPI.example:80/simple")
    assert "127.0.0.2:39647" == authority_of("http://127.0.0.2:39647/simple/")
    assert "[2001:db8::1]:8443" == authority_of("https://[2001:db8::1]:8443/")
    assert "mirror" == authority_of("https://user:secret@mirror/simple")  # never the user


@pytest.mark.parametrize(
    "text",
    ["file:///srv/wheels", "/srv/wheels", "", "ftp://x.example/", "https://", "http://x:99999/"],
)
def test_what_is_no_http_url_has_no_authority(text: str) -> None:
    assert authority_of(text) is None


@given(st.text(max_size=60))
def test_any_text_is_an_authority_or_none(text: str) -> None:
    found = authority_of(text)
    assert found is None or (found and " " not in found)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def test_the_variables_name_the_python_and_npm_hosts(tmp_path: Path) -> None:
    environ = {
        "PIP_INDEX_URL": "http://127.0.0.2:39647/simple",
        "PIP_EXTRA_INDEX_URL": "https://a.example/simple https://b.example/simple",
        "UV_INDEX": "corp=https://c.example/simple",
        "UV_DEFAULT_INDEX": "file:///srv/wheels",
        "npm_config_registry": "http://127.0.0.2:4873/",
    }
    found = read_host_configuration(environ, str(_home(tmp_path)))
    assert ("127.0.0.2:39647", "a.example", "b.example", "c.example") == found.authorities("python")
    assert ("127.0.0.2:4873",) == found.authorities("npm")
    assert Configured("python", "c.example", "UV_INDEX") in found.hosts
    assert found.npm_registry is None  # the environment names it already


def test_pip_uv_and_npmrc_files_name_hosts_and_the_npmrc_token_is_never_read(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://pip.example/simple\ncert = /etc/hostname\n"
        "[install]\nextra-index-url =\n  https://extra.example/simple\n  file:///x\n"
    )
    (home / ".config" / "uv").mkdir(parents=True)
    (home / ".config" / "uv" / "uv.toml").write_text(
        'index-url = "https://uv.example/simple"\n'
        '[[index]]\nname = "corp"\nurl = "https://uvindex.example:8443/simple"\n'
        '[pip]\nextra-index-url = ["https://uvpip.example/simple"]\n'
    )
    (home / ".npmrc").write_text(
        "registry=https://npm.example/\n@corp:registry=https://scoped.example/\n"
        "//npm.example/:_authToken=npm_SECRET\ncafile=/etc/hostname\n"
    )
    found = read_host_configuration({}, str(home))
    python = found.authorities("python")
    for host in (
        "pip.example",
        "extra.example",
        "uv.example",
        "uvindex.example:8443",
        "uvpip.example",
    ):
        assert host in python
    assert ("npm.example", "scoped.example") == found.authorities("npm")
    assert "https://npm.example/" == found.npm_registry
    assert os.path.realpath("/etc/hostname") in found.certificates
    assert "SECRET" not in repr(found)


def test_an_npmrc_registry_with_a_user_is_admitted_but_never_passed_on(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home / ".npmrc").write_text("registry=https://me:pw@npm.example/\n")
    found = read_host_configuration({}, str(home))
    assert ("npm.example",) == found.authorities("npm")
    assert found.npm_registry is None


def test_a_configuration_file_too_large_unparsable_or_not_regular_counts_as_absent(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    (home / ".config" / "uv").mkdir(parents=True)
    (home / ".config" / "uv" / "uv.toml").write_text("index-url = [unclosed\n")
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://big.example/\n" + "#" * MAXIMUM_CONFIGURATION_BYTES
    )
    (home / ".npmrc").mkdir()
    found = read_host_configuration({}, str(home))
    assert not {"big.example"} & set(found.authorities("python"))
    assert () == found.authorities("npm")
    # Exactly at the bound it is read.
    text = "[global]\nindex-url = https://fits.example/\n"
    (home / ".config" / "pip" / "pip.conf").write_text(
        text + "#" * (MAXIMUM_CONFIGURATION_BYTES - len(text))
    )
    assert "fits.example" in read_host_configuration({}, str(home)).authorities("python")


def test_the_configured_hosts_are_bounded(tmp_path: Path) -> None:
    many = " ".join(f"https://h{n}.example/" for n in range(MAXIMUM_CONFIGURED_HOSTS + 5))
    found = read_host_configuration({"PIP_EXTRA_INDEX_URL": many}, str(_home(tmp_path)))
    assert MAXIMUM_CONFIGURED_HOSTS == len(found.hosts)


def test_the_ca_variables_name_files_that_exist(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    directory = tmp_path / "certs"
    directory.mkdir()
    environ = dict.fromkeys(CERTIFICATE_VARIABLES, str(tmp_path / "absent.pem"))
    environ |= {"SSL_CERT_FILE": str(ca), "SSL_CERT_DIR": str(directory), "PIP_CERT": "rel.pem"}
    found = read_host_configuration(environ, None)
    assert str(ca) in found.certificates
    assert str(directory) in found.certificates
    assert str(tmp_path / "absent.pem") not in found.certificates
