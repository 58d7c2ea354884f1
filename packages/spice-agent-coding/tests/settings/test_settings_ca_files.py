"""The settings file's ``ca_files`` (contract 13.4, issue 47): PEM files of public
certificates that every contained command trusts too, through a bundle of the host's store
and them. What is taken, and what is refused in the settings file's way (the file, the
line, the key): missing, unreadable, not a regular file, not PEM, a private key, past the
count bound; and the bundle itself (content-addressed, certificates only, read-only)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.coding import _cli
from spice.agent.coding._netpolicy._cabundle import (
    BUNDLE_VARIABLES,
    MAXIMUM_CA_FILE_BYTES,
    MAXIMUM_CA_FILES,
    bundle_sources,
    ca_file_problem,
    trust_store,
    write_bundle,
)
from spice.agent.coding._netpolicy._hostconfig import CERTIFICATE_VARIABLES
from spice.agent.coding._settings._resolve import Settings, flags_of, resolve_settings
from spice.agent.coding._settings._values import SettingsError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the POSIX sandbox's settings")

ONE: Final = "-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n"
"""A PEM block (the settings check looks for PEM, the commands' TLS library for DER)."""
KEY: Final = "-----BEGIN PRIVATE KEY-----\nMIIEAAAA\n-----END PRIVATE KEY-----\n"


def throwaway_ca(directory: Path) -> tuple[Path, Path]:
    """A throwaway CA certificate and its key, made by the ``openssl`` command."""
    cert, key = directory / "ca.pem", directory / "ca.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=spice throwaway CA"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A worktree, a home, and a private settings directory (0700) outside both."""
    root, home, config = (tmp_path / name for name in ("root", "home", "config"))
    for path in (root, home, config):
        path.mkdir()
    config.chmod(0o700)
    return root, home, config


def resolved(layout: tuple[Path, Path, Path], text: str) -> Settings:
    root, home, config = layout
    file = config / "settings.toml"
    file.write_text(text)
    file.chmod(0o600)
    argv = ["--root", str(root), "--settings", str(file), "tools"]
    return resolve_settings(flags_of(_cli._parser().parse_args(argv)), {"HOME": str(home)})


def refusal(layout: tuple[Path, Path, Path], text: str) -> str:
    with pytest.raises(SettingsError) as caught:
        resolved(layout, text)
    return str(caught.value)


def test_a_pem_file_is_taken_once_by_its_real_path_and_reaches_the_sandbox_request(
    layout: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(ONE)
    link = tmp_path / "link.pem"
    link.symlink_to(ca)
    chosen = resolved(layout, f'ca_files = ["{ca}", "{link}"]\n')
    assert (str(ca.resolve()),) == chosen.ca_files
    assert chosen.sandbox_request().ca_files == chosen.ca_files
    assert (f"ca_files {ca.resolve()}", f"settings file {layout[2] / 'settings.toml'}") in (
        chosen.origins
    )
    assert () == resolved(layout, "").ca_files


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ("missing", "does not exist"),
        ("relative", "is not an absolute path"),
        ("directory", "is not a regular file"),
        ("not pem", "holds no PEM certificate"),
        ("private key", "holds a private key"),
        ("certificate and key", "holds a private key"),
        ("too large", f"is larger than {MAXIMUM_CA_FILE_BYTES} bytes"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_file_the_line_and_the_key(
    layout: tuple[Path, Path, Path], tmp_path: Path, shape: str, words: str
) -> None:
    path = tmp_path / "entry"
    if shape == "directory":
        path.mkdir()
    elif shape == "not pem":
        path.write_text("not a certificate\n")
    elif shape == "private key":
        path.write_text(KEY)
    elif shape == "certificate and key":
        path.write_text(ONE + KEY)
    elif shape == "too large":
        path.write_bytes(ONE.encode() + b"\n" * MAXIMUM_CA_FILE_BYTES)
    value = "ca.pem" if shape == "relative" else str(path)
    message = refusal(layout, f'allow_domains = ["python"]\nca_files = ["{value}"]\n')
    settings_file = layout[2] / "settings.toml"
    assert message.startswith(f"settings file {settings_file}, line 2: ca_files: ")
    assert words in message
    assert "MIIE" not in message  # nothing of the file's content


def test_an_unreadable_entry_is_refused_as_a_user_who_cannot_read_it(
    layout: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """As root every file reads; a mode the server's user cannot read is the case for a
    non-root server, so the check is taken where no read is possible: a FIFO stands for a
    file that cannot be opened as a regular file."""
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)
    assert "is not a regular file" in refusal(layout, f'ca_files = ["{fifo}"]\n')
    if os.geteuid() != 0:
        closed = tmp_path / "closed.pem"
        closed.write_text(ONE)
        closed.chmod(0)
        assert "cannot be read" in refusal(layout, f'ca_files = ["{closed}"]\n')


def test_the_count_bound_holds_on_both_sides(
    layout: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    files = []
    for index in range(MAXIMUM_CA_FILES + 1):
        path = tmp_path / f"ca{index}.pem"
        path.write_text(ONE)
        files.append(f'"{path}"')
    at_bound = resolved(layout, f"ca_files = [{', '.join(files[:MAXIMUM_CA_FILES])}]\n")
    assert MAXIMUM_CA_FILES == len(at_bound.ca_files)
    assert f"at most {MAXIMUM_CA_FILES}" in refusal(layout, f"ca_files = [{', '.join(files)}]\n")


def test_a_worktree_table_adds_its_ca_files_and_a_wrong_type_is_refused(
    layout: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    one, two = tmp_path / "one.pem", tmp_path / "two.pem"
    one.write_text(ONE)
    two.write_text(ONE)
    text = f'ca_files = ["{one}"]\n[worktree."{layout[0]}"]\nca_files = ["{two}"]\n'
    assert (str(one), str(two)) == resolved(layout, text).ca_files
    assert "ca_files must be a list of strings" in refusal(layout, f'ca_files = "{one}"\n')


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x7f"),
        min_size=1,
        max_size=40,
    )
)
def test_any_entry_text_is_taken_or_refused_with_the_keys_line(
    layout: tuple[Path, Path, Path], text: str
) -> None:
    line = f"ca_files = [{json.dumps(text, ensure_ascii=False)}]\n"
    if ca_file_problem(text) is None:
        assert (os.path.realpath(text),) == resolved(layout, line).ca_files
    else:
        with pytest.raises(SettingsError, match=", line 1: ca_files: "):
            resolved(layout, line)


# -- the bundle ------------------------------------------------------------------------------


def test_the_bundle_joins_the_store_and_the_files_certificates_only(tmp_path: Path) -> None:
    ca, key = throwaway_ca(tmp_path)
    mixed = tmp_path / "mixed.pem"
    mixed.write_text("comment line\n" + ca.read_text() + key.read_text())
    sources = bundle_sources([], [str(mixed), str(ca)])
    store = trust_store()
    assert sources == (*([store] if store else []), str(mixed), str(ca))
    bundle = write_bundle(str(tmp_path / "bundles"), sources)
    assert bundle is not None
    data = Path(bundle).read_text()
    assert ca.read_text().strip() in data
    assert "PRIVATE KEY" not in data
    assert "comment line" not in data
    assert stat.S_IMODE(os.stat(bundle).st_mode) == 0o444
    assert stat.S_IMODE(os.stat(tmp_path / "bundles").st_mode) == 0o700
    # Content-addressed: the same sources give the same file; another CA another one.
    assert bundle == write_bundle(str(tmp_path / "bundles"), sources)
    other, _ = throwaway_ca(tmp_path / "bundles")
    assert bundle != write_bundle(str(tmp_path / "bundles"), (*sources, str(other)))


def test_a_bundle_of_nothing_readable_is_none_and_an_unwritable_place_is_none(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    assert write_bundle(str(tmp_path / "b"), [str(empty), str(tmp_path / "gone")]) is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one = tmp_path / "one.pem"
    one.write_text(ONE)
    assert write_bundle(str(blocker / "sub"), [str(one)]) is None


def test_every_file_variable_of_contract_12_2_names_the_bundle() -> None:
    assert set(BUNDLE_VARIABLES) == set(CERTIFICATE_VARIABLES) - {"SSL_CERT_DIR"}
