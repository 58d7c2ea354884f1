"""Real work with one flag (contract 12.2): the host's index, registry and CA, end to end.

Round 4 on a host behind a mirror and a re-signing CA: a contained ``uv sync`` needed
``--allow-domain python --allow-private-address --allow-env SSL_CERT_FILE``, found one
restart at a time. Here the real server (``spice-coding call shell``) runs with the host's
configuration in its environment and home, and ``--allow-domain python`` or ``npm`` as the
only flag: a PEP 503 index and an npm registry on the host's ``127.0.0.2`` stand in for the
mirror (named by ``PIP_INDEX_URL``, ``UV_INDEX_URL``, ``~/.npmrc``), a CA made here stands
in for the re-signing one (named by ``SSL_CERT_FILE`` and ``CURL_CA_BUNDLE``, its file
beneath the hidden home). The home is made outside ``/tmp``.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from test_contained_installs import INDEX_HOST, MARKER, PACKAGE, Index, _pip_works
from test_contained_installs import index as index  # noqa: PLC0414 - the fixture, shared
from test_contained_installs import registry as registry  # noqa: PLC0414 - the fixture, shared
from test_sandbox_fs import _real_uv

from spice.agent.coding._posix import _bwrap
from spice.agent.coding._posix._supervisor._landlock import landlock_abi

SCRIPT: Final = Path(sys.executable).parent / "spice-coding"
PYTHON: Final = os.path.realpath(sys.executable)
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
BOUND: Final = 180.0
"""Longest one server call runs before the test says it hung (never a timing assertion)."""
SECRET: Final = "npm_planted-token-5e1d"  # noqa: S105 - a marker, not a password

pytestmark = [
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
    pytest.mark.skipif(not NAMESPACES.made, reason=f"no namespaces here: {NAMESPACES.reason}"),
]


def call(
    root: Path, home: Path, argv: list[str], flags: list[str], **variables: str
) -> dict[str, object]:
    """One ``spice-coding call shell`` of the real server; its answer."""
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **variables}
    arguments = json.dumps({"argv": argv, "timeout_seconds": 120})
    command = [str(SCRIPT), "--root", str(root), "--sandbox", "workspace", *flags]
    done = subprocess.run(
        [*command, "call", "shell", arguments],
        capture_output=True,
        env=environ,
        timeout=BOUND,
        check=False,
    )
    assert done.stdout, done.stderr
    answer = json.loads(done.stdout)
    assert isinstance(answer, dict)
    assert answer.get("contained") is True, answer
    return answer


def output(answer: dict[str, object]) -> str:
    return f"{answer.get('stdout', '')}{answer.get('stderr', '')}"


def installed(root: Path) -> str:
    return (root / "deps" / PACKAGE / "__init__.py").read_text()


# -- presets know the host's index and registry ----------------------------------------------


def test_pip_installs_from_the_index_pip_index_url_names_with_the_preset_alone(
    index: Index, root: Path, home: Path
) -> None:
    """``--allow-domain python`` admits the configured index on a loopback address."""
    if not _pip_works():
        pytest.skip("this interpreter has no pip")
    argv = [PYTHON, "-I", "-m", "pip", "install", "--no-input", "--retries", "0"]
    argv += ["--trusted-host", f"{INDEX_HOST}:{index.port}", "--target", "deps", PACKAGE]
    answer = call(root, home, argv, ["--allow-domain", "python"], PIP_INDEX_URL=index.url)
    assert 0 == answer["exit_code"], output(answer)
    assert MARKER in installed(root)
    assert f"/simple/{PACKAGE}/" in index.asked


def test_uv_installs_from_the_index_uv_index_url_names_with_the_preset_alone(
    index: Index, root: Path, home: Path
) -> None:
    uv = _real_uv()
    if uv is None:
        pytest.skip("no uv binary here")
    argv = [uv, "pip", "install", "--no-config", "--python", PYTHON, "--target", "deps", PACKAGE]
    answer = call(root, home, argv, ["--allow-domain", "python"], UV_INDEX_URL=index.url)
    assert 0 == answer["exit_code"], output(answer)
    assert MARKER in installed(root)


def test_npm_installs_from_the_registry_of_the_users_npmrc_and_never_sees_its_token(
    registry: Index, root: Path, home: Path
) -> None:
    """``~/.npmrc`` stays hidden (it holds the token): its registry reaches npm as
    ``npm_config_registry``, and ``--allow-domain npm`` admits it."""
    npm = shutil.which("npm", path="/usr/bin:/bin")
    if npm is None:
        pytest.skip("no npm here")
    url = f"http://{INDEX_HOST}:{registry.port}/"
    (home / ".npmrc").write_text(
        f"registry={url}\n//{INDEX_HOST}:{registry.port}/:_authToken={SECRET}\n"
    )
    argv = [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--fetch-retries=0"]
    argv += ["--update-notifier=false", PACKAGE]
    answer = call(root, home, argv, ["--allow-domain", "npm"])
    assert 0 == answer["exit_code"], output(answer)
    assert MARKER in (root / "node_modules" / PACKAGE / "index.js").read_text()
    shown = call(root, home, ["/bin/sh", "-c", "cat ~/.npmrc; env"], ["--allow-domain", "npm"])
    assert SECRET not in output(shown)
    assert f"npm_config_registry={url}" in output(shown)


def test_a_configured_index_is_refused_without_its_preset_and_the_hint_names_the_preset(
    index: Index, root: Path, home: Path
) -> None:
    """Round 4's hint named the bare host (one restart more for the files host)."""
    code = f"import urllib.request; urllib.request.urlopen({index.url!r}, timeout=20)"
    answer = call(root, home, [PYTHON, "-I", "-c", code], [], PIP_INDEX_URL=index.url)
    assert 0 != answer["exit_code"]
    assert [] == index.asked
    assert "--allow-domain python" in str(answer.get("sandbox_hint")), answer


def test_the_configured_index_is_not_admitted_by_another_preset(
    index: Index, root: Path, home: Path
) -> None:
    code = f"import urllib.request; urllib.request.urlopen({index.url!r}, timeout=20)"
    answer = call(
        root, home, [PYTHON, "-I", "-c", code], ["--allow-domain", "npm"], PIP_INDEX_URL=index.url
    )
    assert 0 != answer["exit_code"]
    assert [] == index.asked


def test_a_typo_of_a_preset_is_refused_at_start_naming_it(root: Path, home: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "--root", str(root), "--allow-domain", "pythn", "tools"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
        timeout=BOUND,
        check=False,
    )
    assert 2 == done.returncode
    assert "did you mean 'python'" in done.stderr


def test_tools_names_the_configured_hosts_and_where_they_came_from(root: Path, home: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "--root", str(root), "--allow-domain", "python", "tools"],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "PIP_INDEX_URL": "https://mirror.corp.example:8443/simple",
        },
        timeout=BOUND,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    domains = json.loads(done.stdout)["sandbox"]["domains"]
    assert "mirror.corp.example:8443" in domains["allowed"]
    assert ["mirror.corp.example:8443 (python, from PIP_INDEX_URL)"] == domains[
        "configured_by_host"
    ]
    rules = json.loads(done.stdout)["sandbox"]["rules"]
    assert "allow_domains python (--allow-domain)" in rules
    assert "allow_domains pypi.org (preset python)" in rules
    assert (
        "allow_domains mirror.corp.example:8443 (host configuration: python, from PIP_INDEX_URL)"
        in rules
    )


# -- the host's certificate authority ---------------------------------------------------------


def _authority(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for ``INDEX_HOST`` signed by it (PEM files:
    the CA's certificate, the server's chain and its key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spice test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, INDEX_HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(INDEX_HOST))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True)
    ca_file, chain_file, key_file = (directory / n for n in ("ca.pem", "chain.pem", "key.pem"))
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, chain_file, key_file


@pytest.fixture
def tls_index(visible_path: Path, home: Path) -> Iterator[tuple[int, Path, list[str]]]:
    """``https://127.0.0.2:PORT/simple/`` answering ``MARKER``; the CA's file (in the home)."""
    import http.server  # noqa: PLC0415 - only this fixture serves TLS

    ca_file, chain, key = _authority(home / ".corp-ca")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key)
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = MARKER.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    try:
        server = http.server.ThreadingHTTPServer((INDEX_HOST, 0), Handler)
    except OSError as error:
        pytest.skip(f"cannot listen on {INDEX_HOST} here ({error.strerror})")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], ca_file, asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(BOUND)
    del visible_path


FETCH: Final = (
    "import sys, urllib.request\n"
    "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())\n"
)


def test_the_hosts_ca_reaches_the_command_and_its_file_is_readable_beneath_the_hidden_home(
    tls_index: tuple[int, Path, list[str]], root: Path, home: Path
) -> None:
    """Round 4: ``invalid peer certificate: UnknownIssuer`` until ``--allow-env
    SSL_CERT_FILE``. Now the variable passes by default and its file (beneath the home,
    which is hidden) is shown; the index is reached through the proxy with ``python``."""
    port, ca_file, asked = tls_index
    url = f"https://{INDEX_HOST}:{port}/simple/"
    answer = call(
        root,
        home,
        [PYTHON, "-I", "-c", FETCH, url],
        ["--allow-domain", "python"],
        SSL_CERT_FILE=str(ca_file),
        PIP_INDEX_URL=url,
    )
    assert 0 == answer["exit_code"], output(answer)
    assert MARKER in str(answer["stdout"])
    assert ["/simple/"] == asked
    curl = shutil.which("curl", path="/usr/bin:/bin")
    if curl is not None:
        answer = call(
            root,
            home,
            [curl, "-sS", "--fail", url],
            ["--allow-domain", "python"],
            CURL_CA_BUNDLE=str(ca_file),
            PIP_INDEX_URL=url,
        )
        assert 0 == answer["exit_code"], output(answer)
        assert MARKER in str(answer["stdout"])


def test_without_the_hosts_ca_the_certificate_is_refused(
    tls_index: tuple[int, Path, list[str]], root: Path, home: Path
) -> None:
    """Negative: the same call without ``SSL_CERT_FILE`` fails verification."""
    port, _, _ = tls_index
    url = f"https://{INDEX_HOST}:{port}/simple/"
    answer = call(
        root,
        home,
        [PYTHON, "-I", "-c", FETCH, url],
        ["--allow-domain", "python"],
        PIP_INDEX_URL=url,
    )
    assert 0 != answer["exit_code"]
    assert "CERTIFICATE_VERIFY_FAILED" in output(answer)
