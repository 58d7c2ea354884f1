"""Real installers, contained, from a package index allowed by name (issue 28).

The round-3 finding: a contained ``pip install``, ``uv pip install`` or ``npm install``
failed with a DNS error or "Read-only file system" and nothing said what to do. Here the
real ``pip`` (the interpreter's own), the real ``uv`` and the real ``npm`` install a
package from an index that stands in for PyPI (PEP 503) or for the npm registry: a
loopback HTTP server on the host's ``127.0.0.2`` (not in the
command's ``NO_PROXY``, so the installers go through the call's proxy, which reaches
the host's loopback only because the test allows private addresses). The wheel is
made here, hashed as the index says. What is checked: the package lands in the
worktree, the installer's cache lands in the worktree's private cache (not the home),
and an index that is not allowed sees no request at all.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from procutil import Collect
from test_sandbox_fs import _real_uv, environment, launcher, run

from spice.agent.coding._netpolicy._domains import DomainPolicy, parse_patterns
from spice.agent.coding._posix import _bwrap, _facts
from spice.agent.coding._posix._containment import Containment, resolve_containment
from spice.agent.coding._posix._process import PosixProcess
from spice.agent.coding._posix._supervisor._landlock import landlock_abi
from spice.agent.process import Spec

PYTHON: Final = os.path.realpath(sys.executable)
NAMESPACES: Final = _bwrap.resolve_namespaces(tempfile.gettempdir())
INDEX_HOST: Final = "127.0.0.2"
"""The host's loopback under a name the command's ``NO_PROXY`` does not list."""
PACKAGE: Final = "spicetinypkg"
VERSION: Final = "1.0"
NPM_VERSION: Final = "1.0.0"
MARKER: Final = "installed-through-the-proxy"
INSTALL_BOUND_SECONDS: Final = 120
"""Longest an installer runs before the test says it hung (its own timeouts are shorter)."""

pytestmark = [
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
    pytest.mark.skipif(not NAMESPACES.made, reason=f"no namespaces here: {NAMESPACES.reason}"),
]


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel() -> tuple[str, bytes]:
    """A pure-Python wheel of ``PACKAGE`` whose module holds ``MARKER``: name and bytes."""
    info = f"{PACKAGE}-{VERSION}.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": f"MARKER = {MARKER!r}\n".encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n".encode()
        ),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: spice-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
    return f"{PACKAGE}-{VERSION}-py3-none-any.whl", buffer.getvalue()


@dataclasses.dataclass
class Index:
    """The loopback index: its port and the paths it was asked for."""

    port: int
    asked: list[str]

    @property
    def url(self) -> str:
        return f"http://{INDEX_HOST}:{self.port}/simple/"


@pytest.fixture
def index() -> Iterator[Index]:
    name, data = wheel()
    link = f"../../files/{name}#sha256={hashlib.sha256(data).hexdigest()}"
    pages = {
        "/simple/": f'<html><body><a href="{PACKAGE}/">{PACKAGE}</a></body></html>'.encode(),
        f"/simple/{PACKAGE}/": f'<html><body><a href="{link}">{name}</a></body></html>'.encode(),
        f"/files/{name}": data,
    }
    typed = {
        path: ("text/html" if path.startswith("/simple/") else "application/octet-stream", page)
        for path, page in pages.items()
    }
    with _serving(typed) as served:
        yield served


@contextlib.contextmanager
def _serving(pages: dict[str, tuple[str, bytes]]) -> Iterator[Index]:
    """Serve ``pages`` (path: content type and body, read at each request) on
    ``INDEX_HOST``; record each path asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.answer(body=True)

        def do_HEAD(self) -> None:  # uv asks whether a wheel takes ranges
            self.answer(body=False)

        def answer(self, *, body: bool) -> None:
            asked.append(self.path)
            page = pages.get(self.path)
            if page is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", page[0])
            self.send_header("Content-Length", str(len(page[1])))
            self.send_header("Cache-Control", "max-age=600")  # as PyPI's: installers cache
            self.end_headers()
            if body:
                self.wfile.write(page[1])

        def log_message(self, *_: object) -> None:
            pass

    try:
        server = http.server.ThreadingHTTPServer((INDEX_HOST, 0), Handler)
    except OSError as error:
        pytest.skip(f"cannot listen on {INDEX_HOST} here ({error.strerror})")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Index(server.server_address[1], asked)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(INSTALL_BOUND_SECONDS)


def tarball() -> bytes:
    """An npm package of ``PACKAGE`` (``package/`` inside a gzipped tar) holding ``MARKER``."""
    files = {
        "package/package.json": json.dumps(
            {"name": PACKAGE, "version": NPM_VERSION, "main": "index.js"}
        ).encode(),
        "package/index.js": f"module.exports = {MARKER!r};\n".encode(),
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for path, data in files.items():
            member = tarfile.TarInfo(path)
            member.size, member.mtime, member.mode = len(data), 1_577_836_800, 0o644
            archive.addfile(member, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


@pytest.fixture
def registry() -> Iterator[Index]:
    """The npm registry's two documents: the package's packument and its tarball."""
    data = tarball()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    files = f"/{PACKAGE}/-/{PACKAGE}-{NPM_VERSION}.tgz"
    packument = {
        "name": PACKAGE,
        "dist-tags": {"latest": NPM_VERSION},
        "versions": {
            NPM_VERSION: {
                "name": PACKAGE,
                "version": NPM_VERSION,
                "dist": {
                    "tarball": f"http://{INDEX_HOST}:{{port}}{files}",
                    "shasum": hashlib.sha1(data).hexdigest(),  # noqa: S324 - npm's own field
                    "integrity": integrity,
                },
            }
        },
    }
    pages: dict[str, tuple[str, bytes]] = {files: ("application/octet-stream", data)}
    with _serving(pages) as served:
        # The tarball's address names the port, known once the server listens.
        pages[f"/{PACKAGE}"] = (
            "application/json",
            json.dumps(packument).replace("{port}", str(served.port)).encode(),
        )
        yield served


def another_port(served: Index) -> int:
    """A port next to ``served``'s: allowing it must not let ``served`` through."""
    return served.port + 1 if served.port < 65535 else served.port - 1


def allowing(*patterns: str) -> Containment:
    domains = DomainPolicy(parse_patterns(patterns), allow_private=True)
    chosen = resolve_containment("workspace", domains=domains)
    return dataclasses.replace(chosen, namespaces=NAMESPACES)


def _pip_works() -> bool:
    completed = subprocess.run(
        [PYTHON, "-I", "-m", "pip", "--version"],
        capture_output=True,
        timeout=INSTALL_BOUND_SECONDS,
        check=False,
    )
    return completed.returncode == 0


def pip_install(index: Index, *, cache_off: bool = False) -> tuple[str, ...]:
    return (
        PYTHON,
        "-I",
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--retries",
        "0",
        "--timeout",
        "20",
        *(("--no-cache-dir",) if cache_off else ()),
        "--index-url",
        index.url,
        "--trusted-host",  # pip caches plain HTTP only from a trusted host
        f"{INDEX_HOST}:{index.port}",
        "--target",
        "deps",
        PACKAGE,
    )


def installed(root: Path) -> str:
    return (root / "deps" / PACKAGE / "__init__.py").read_text()


def private_cache(root: Path, home: Path) -> Path:
    return Path(_facts.cache_directory(str(root), {"HOME": str(home)}) or "")


async def test_pip_installs_from_an_allowed_index_and_caches_privately(
    index: Index, root: Path, home: Path
) -> None:
    if not _pip_works():
        pytest.skip("this interpreter has no pip")
    chosen = launcher(allowing(f"{INDEX_HOST}:{index.port}"), root, home, cache=True)
    outcome, text, _ = await run(chosen, root, home, pip_install(index))
    assert outcome.successful, text
    assert MARKER in installed(root)
    assert f"/simple/{PACKAGE}/" in index.asked
    assert any(path.startswith("/files/") for path in index.asked)
    pip_cache = private_cache(root, home) / "pip"
    assert any(pip_cache.rglob("*")), "pip cached nothing in the private cache"
    # The home's own cache holds the server's directory and nothing of the call.
    assert sorted(p.name for p in (home / ".cache").iterdir()) == ["spice-coding"]


async def test_an_index_not_allowed_sees_no_request_and_nothing_is_installed(
    index: Index, root: Path, home: Path
) -> None:
    if not _pip_works():
        pytest.skip("this interpreter has no pip")
    other = another_port(index)
    chosen = launcher(allowing(f"{INDEX_HOST}:{other}"), root, home, cache=True)
    outcome, text, _ = await run(chosen, root, home, pip_install(index, cache_off=True))
    assert not outcome.successful, text
    assert index.asked == []
    assert not (root / "deps" / PACKAGE).exists()


async def test_uv_pip_installs_from_an_allowed_index_and_caches_privately(
    index: Index, root: Path, home: Path
) -> None:
    uv = _real_uv()
    if uv is None:
        pytest.skip("no uv binary here")
    chosen = launcher(allowing(f"{INDEX_HOST}:{index.port}"), root, home, cache=True)
    command = (
        uv,
        "pip",
        "install",
        "--no-config",
        "--python",
        PYTHON,
        "--index-url",
        index.url,
        "--target",
        "deps",
        PACKAGE,
    )
    outcome, text, _ = await run(chosen, root, home, command)
    assert outcome.successful, text
    assert MARKER in installed(root)
    assert f"/simple/{PACKAGE}/" in index.asked
    uv_cache = private_cache(root, home) / "uv"
    assert any(uv_cache.rglob("*")), "uv cached nothing in the private cache"
    assert sorted(p.name for p in (home / ".cache").iterdir()) == ["spice-coding"]


def npm_install(registry: Index) -> tuple[str, ...]:
    """The real ``npm install`` of ``PACKAGE`` from ``registry`` (skips without npm)."""
    npm = shutil.which("npm", path="/usr/bin:/bin")
    if npm is None:
        pytest.skip("no npm here")
    return (
        npm,
        "install",
        f"--registry=http://{INDEX_HOST}:{registry.port}/",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--fetch-retries=0",
        "--update-notifier=false",
        PACKAGE,
    )


async def test_npm_installs_from_an_allowed_registry_and_caches_privately(
    registry: Index, root: Path, home: Path
) -> None:
    command = npm_install(registry)
    chosen = launcher(allowing(f"{INDEX_HOST}:{registry.port}"), root, home, cache=True)
    outcome, text, _ = await run(chosen, root, home, command)
    assert outcome.successful, text
    assert MARKER in (root / "node_modules" / PACKAGE / "index.js").read_text()
    assert f"/{PACKAGE}" in registry.asked
    assert any(path.endswith(".tgz") for path in registry.asked)
    npm_cache = private_cache(root, home) / "npm"
    cached = [path for path in (npm_cache / "_cacache").rglob("*") if path.is_file()]
    assert cached, "npm cached nothing in the private cache"
    assert sorted(p.name for p in (home / ".cache").iterdir()) == ["spice-coding"]
    assert not (home / ".npm").exists()


async def test_a_registry_not_allowed_sees_no_request_and_npm_installs_nothing(
    registry: Index, root: Path, home: Path
) -> None:
    command = npm_install(registry)
    other = another_port(registry)
    chosen = launcher(allowing(f"{INDEX_HOST}:{other}"), root, home, cache=True)
    outcome, text, process = await run(chosen, root, home, command)
    assert not outcome.successful, text
    assert registry.asked == []
    assert not (root / "node_modules" / PACKAGE).exists()
    assert isinstance(process, PosixProcess)
    hint = str(process.sandbox_hint)
    assert f"--allow-domain {INDEX_HOST}:{registry.port}" in hint, hint


def test_the_wheel_is_what_its_record_says() -> None:
    """The stand-in wheel itself: every file's hash and size as its RECORD lists them."""
    _, data = wheel()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
        record = archive.read(f"{PACKAGE}-{VERSION}.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.split(",")
            if not digest:
                assert path.endswith("RECORD")
                continue
            content = archive.read(path)
            assert digest == f"sha256={_digest(content)}"
            assert int(size) == len(content)
    assert len(record) == len(names)


async def test_uv_links_by_copying_inside_with_no_warning_and_a_users_mode_is_kept(
    index: Index, root: Path, home: Path
) -> None:
    """The private cache is a mount of its own inside, so a hard link or a reflink from it
    into the worktree fails (``EXDEV``): uv is told to copy (no futile link per file, no
    warning in the answer), unless the command's environment names a mode itself."""
    uv = _real_uv()
    if uv is None:
        pytest.skip("no uv binary here")
    chosen = launcher(allowing(f"{INDEX_HOST}:{index.port}"), root, home, cache=True)
    command = (uv, "pip", "install", "--no-config", "--python", PYTHON, "--index-url", index.url)
    first = (*command, "--target", "deps", PACKAGE)
    outcome, text, _ = await run(chosen, root, home, first)
    assert outcome.successful, text
    # The second install comes from the warm private cache: linked, were it possible.
    again = (*command, "--target", "again", PACKAGE)
    outcome, text, _ = await run(chosen, root, home, again)
    assert outcome.successful, text
    assert "hardlink" not in text.lower()
    assert MARKER in (root / "again" / PACKAGE / "__init__.py").read_text()
    shown = ("/bin/sh", "-c", 'echo "MODE=${UV_LINK_MODE-unset}"')
    outcome, text, _ = await run(chosen, root, home, shown)
    assert "MODE=copy" in text, text
    out = Collect()
    mine = (*environment(home), "UV_LINK_MODE=symlink")
    process = await chosen.start(Spec(shown[0], shown[1:], str(root), mine, b"", out, Collect()))
    async with asyncio.timeout(INSTALL_BOUND_SECONDS):
        await process.wait_exit()
        await process.wait()
    assert b"MODE=symlink" in out.data
