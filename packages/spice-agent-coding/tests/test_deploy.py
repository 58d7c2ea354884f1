"""The `Dockerfile` and the Kubernetes example, read as the tools that run them would.

Neither is run here (no container engine, no cluster): the Dockerfile must copy exactly
the wheels a real `make dist` build makes and run a `spice-coding serve` command that the
application's own argument parser and settings accept; the manifest must keep one pod per
worktree, run that same command, mount the token file read-only and never widen the pod's
privileges. Each check is a function returning the problems it found, so the tests below
also show each one failing on a broken copy. The Dockerfile's build stage is also run
here, outside a container, with the locked wheels standing in for PyPI.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations
from dist_support import (
    REPOSITORY,
    TOOLS,
    base_python,
    build_dist,
    quiet_environment,
    run,
    served_tools,
    wheelhouse_or_skip,
)

from spice.agent.coding import _cli
from spice.agent.coding._settings._resolve import flags_of, resolve_settings
from spice.agent.coding._settings._values import SettingsError

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="the image and the pod are Linux; make dist runs on POSIX"
)

DOCKERFILE: Final = REPOSITORY / "Dockerfile"
DOCKERIGNORE: Final = REPOSITORY / ".dockerignore"
MANIFEST: Final = REPOSITORY / "examples" / "kubernetes" / "spice-coding.yaml"
SCALE_RULE: Final = "Scale is more servers, never replicas of one"

PENDING_HTTP_FLAGS: Final = {
    "--transport": True,
    "--host": True,
    "--port": True,
    "--path": True,
    "--token-file": True,
    "--public-url": True,
    "--allowed-origin": True,
    "--allow-remote": False,
    "--insecure-no-auth": False,
}
"""The HTTP transport's flags (contract 11.2) -> whether each takes a value.

While `serve`'s parser does not know one of these yet, the checks below leave it (and its
value) out before parsing; once the parser knows it, it is parsed like every other flag and
must take a value exactly when listed so. Any other flag the parser does not know fails."""

TOKEN_MODES: Final = (0o400, 0o600)
"""The only modes a mounted token file may have: its owner reads it, nobody else."""


# --- the Dockerfile ------------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not line.strip() and not pending):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, rest = whole.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def expand(text: str, values: dict[str, str]) -> str:
    """``${NAME}`` and ``$NAME`` replaced by the ARG defaults in force."""
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text
    )


class Stage:
    """One ``FROM`` and what follows it, with the ARG defaults expanded."""

    def __init__(self, image: str, name: str | None) -> None:
        self.image = image
        self.name = name
        self.steps: list[tuple[str, str]] = []


def stages(text: str) -> list[Stage]:
    """The Dockerfile's stages; global ARGs expand ``FROM``, a stage's ARGs its own steps."""
    global_args: dict[str, str] = {}
    found: list[Stage] = []
    scope: dict[str, str] = {}
    for keyword, rest in instructions(text):
        if keyword == "ARG":
            variable, _, default = rest.partition("=")
            (scope if found else global_args)[variable.strip()] = default.strip()
        elif keyword == "FROM":
            words = expand(rest, global_args).split()
            stage = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(words[0], stage))
            scope = {}
        else:
            assert found, f"{keyword} before FROM"
            found[-1].steps.append((keyword, expand(rest, scope)))
    return found


def context_copies(text: str) -> list[str]:
    """Every file a ``COPY``/``ADD`` takes from the build context (not from another stage)."""
    copied: list[str] = []
    for stage in stages(text):
        for keyword, rest in stage.steps:
            if keyword not in {"COPY", "ADD"}:
                continue
            words = shlex.split(rest)
            flags = [w for w in words if w.startswith("--")]
            if any(f.startswith("--from=") for f in flags):
                continue
            copied += [w for w in words if not w.startswith("--")][:-1]
    return copied


def entrypoint(text: str) -> list[str]:
    """The final stage's ENTRYPOINT in exec form (JSON), with CMD appended when present."""
    final = stages(text)[-1]
    command: list[str] = []
    for keyword, rest in final.steps:
        if keyword == "ENTRYPOINT":
            command = json.loads(rest)
        elif keyword == "CMD":
            command = [*command, *json.loads(rest)]
    return command


def dockerignore_admits(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` reaches the build context (the last matching pattern decides)."""
    admitted = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatchcase(path, pattern.removeprefix("!")):
            admitted = negated
    return admitted


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def dockerfile_problems(text: str, wheels: list[str], paths: dict[str, Path]) -> list[str]:
    """What is wrong with a Dockerfile's text for the wheels `make dist` made."""
    problems: list[str] = []
    copied = context_copies(text)
    if sorted(copied) != sorted(f"dist/{name}" for name in wheels):
        problems.append(f"copies {sorted(copied)} instead of dist/'s wheels {sorted(wheels)}")
    patterns = dockerignore_patterns()
    problems += [
        f".dockerignore leaves out {c}" for c in copied if not dockerignore_admits(c, patterns)
    ]
    found = stages(text)
    if not all(re.fullmatch(r"python:3\.\d+-slim(-\w+)?", s.image) for s in found):
        problems.append("a stage is not a Python slim image")
    final = found[-1]
    users = [rest for keyword, rest in final.steps if keyword == "USER"]
    if not users or users[-1].split(":")[0] in {"0", "root"}:
        problems.append("the final stage runs as root")
    runs = " ".join(rest for keyword, rest in final.steps if keyword == "RUN")
    if not re.search(r"apt-get install [^&]*\bbubblewrap\b", runs):
        problems.append("the final stage does not install bubblewrap from Debian")
    command = entrypoint(text)
    problems += serve_problems(command, paths)
    exposed = [rest for keyword, rest in final.steps if keyword == "EXPOSE"]
    if exposed != [option_value(command, "--port")]:
        problems.append("EXPOSE is not the port the server listens on")
    return problems


# --- the command ---------------------------------------------------------------------------


def serve_subparser() -> argparse.ArgumentParser:
    parser = _cli._parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    serve = commands.choices["serve"]
    assert isinstance(serve, argparse.ArgumentParser)
    return serve


def known_flags() -> dict[str, argparse.Action]:
    return dict(serve_subparser()._option_string_actions)


def option_value(argv: list[str], flag: str) -> str | None:
    """The value given to ``flag`` (``--flag VALUE`` or ``--flag=VALUE``), the last one wins."""
    value = None
    for index, word in enumerate(argv):
        if word == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif word.startswith(flag + "="):
            value = word.partition("=")[2]
    return value


def without_pending(argv: list[str], known: Mapping[str, argparse.Action]) -> list[str]:
    """``argv`` without the pending HTTP flags the parser does not know yet (and their values)."""
    kept: list[str] = []
    words = iter(argv)
    for word in words:
        flag = word.partition("=")[0]
        if flag in PENDING_HTTP_FLAGS and flag not in known:
            if PENDING_HTTP_FLAGS[flag] and "=" not in word:
                next(words, None)
            continue
        kept.append(word)
    return kept


def serve_problems(command: list[str], paths: dict[str, Path]) -> list[str]:
    """Why ``command`` is not a `spice-coding serve` that the parser and settings accept.

    ``paths`` maps the deployment's paths (the worktree, the token file) to real ones here,
    so that settings which look at them see a directory and a private file.
    """
    if command[:2] != ["spice-coding", "serve"]:
        return [f"the command is {command[:2]}, not spice-coding serve"]
    argv = [str(paths.get(word, word)) for word in command[1:]]
    argv = without_pending(argv, known_flags())
    try:
        options = _cli._parser().parse_args(argv)
    except SystemExit:
        return ["the argument parser refuses the command"]
    try:
        resolve_settings(flags_of(options))
    except SettingsError as error:
        return [f"the settings refuse the command: {error}"]
    return []


# --- the Kubernetes manifest ---------------------------------------------------------------


def manifest_documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d.get("kind") == kind]


def manifest_problems(text: str, image_command: list[str], paths: dict[str, Path]) -> list[str]:
    """What is wrong with the manifest for one server per worktree running ``image_command``."""
    problems = [] if SCALE_RULE in text else ["the manifest does not say scale is more servers"]
    return problems + documents_problems(manifest_documents(text), image_command, paths)


def documents_problems(
    documents: list[dict[str, Any]], image_command: list[str], paths: dict[str, Path]
) -> list[str]:
    """What is wrong with the manifest's objects (see ``manifest_problems``)."""
    problems: list[str] = []
    workloads = of_kind(documents, "StatefulSet") + of_kind(documents, "Deployment")
    if len(workloads) != 1:
        return [*problems, "the manifest has not exactly one workload"]
    [workload] = workloads
    spec = workload["spec"]
    if spec.get("replicas") != 1:
        problems.append("replicas is not 1")
    if workload["kind"] == "Deployment" and spec.get("strategy", {}).get("type") != "Recreate":
        problems.append("a Deployment's rolling update would run two servers on one worktree")
    pod = spec["template"]["spec"]
    problems += [
        f"the pod sets {key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)
    ]
    if pod.get("automountServiceAccountToken") is not False:
        problems.append("a service-account token would be mounted where shell runs")
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        problems.append("the pod may run as root")
    everyone = pod.get("initContainers", []) + pod["containers"]
    for container in everyone:
        context = container.get("securityContext", {})
        if context.get("privileged") or context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"container {container['name']} may gain privileges")
        if context.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"container {container['name']} keeps capabilities")
    [server] = [c for c in pod["containers"] if c["name"] == workload["metadata"]["name"]]
    command = [*server.get("command", image_command), *server.get("args", [])]
    if server.get("command") not in (None, image_command):
        problems.append("the container's command is not the image's")
    problems += serve_problems(command, paths)
    problems += token_problems(pod, server, command, documents)
    problems += probe_problems(server, command)
    problems += exposure_problems(documents, server, command)
    return problems


def mounts_of(container: dict[str, Any]) -> list[dict[str, Any]]:
    return list(container.get("volumeMounts", []))


def token_problems(
    pod: dict[str, Any], server: dict[str, Any], command: list[str], documents: list[dict[str, Any]]
) -> list[str]:
    """The token file: from the manifest's Secret, read-only, owner-only."""
    problems: list[str] = []
    token_path = option_value(command, "--token-file")
    if token_path is None:
        return ["the command names no token file"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    secrets = {s["metadata"]["name"] for s in of_kind(documents, "Secret")}
    secret_volumes = {
        name for name, v in volumes.items() if v.get("secret", {}).get("secretName") in secrets
    }
    if not secret_volumes:
        problems.append("no volume holds the manifest's Secret")
    if any(volumes[n]["secret"].get("defaultMode") not in TOKEN_MODES for n in secret_volumes):
        problems.append("the Secret's files are readable by others than their owner")
    problems += [
        f"container {container['name']} mounts the Secret writable"
        for container in pod.get("initContainers", []) + pod["containers"]
        for mount in mounts_of(container)
        if mount["name"] in secret_volumes and mount.get("readOnly") is not True
    ]
    holding = [
        m
        for m in mounts_of(server)
        if token_path == m["mountPath"] or token_path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    if len(holding) != 1 or holding[0].get("readOnly") is not True:
        return [*problems, "the token file is not on one read-only mount of the server"]
    [mount] = holding
    if mount["name"] in secret_volumes:
        return problems
    # A copy: an init container must have written it from the Secret, owner-only.
    writers = [
        c
        for c in pod.get("initContainers", [])
        if token_path in c.get("command", [])
        and any(m["name"] in secret_volumes for m in mounts_of(c))
    ]
    if not writers:
        problems.append("the token file comes from neither the Secret nor a copy of it")
    for writer in writers:
        words = writer["command"]
        if "-m" not in words or int(words[words.index("-m") + 1], 8) not in TOKEN_MODES:
            problems.append("the token file's copy is not owner-only")
    return problems


def probe_problems(server: dict[str, Any], command: list[str]) -> list[str]:
    """Every probe reaches the served port, and an HTTP probe the served path."""
    problems: list[str] = []
    port = int(option_value(command, "--port") or 0)
    names = {p.get("name"): p["containerPort"] for p in server.get("ports", [])}
    if port not in names.values():
        problems.append("the container does not declare the served port")
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = server.get(kind)
        if probe is None:
            continue
        target = probe.get("httpGet") or probe.get("tcpSocket") or {}
        probed = names.get(target.get("port"), target.get("port"))
        if probed != port:
            problems.append(f"{kind} does not reach the served port")
        if "httpGet" in probe and probe["httpGet"].get("path") != option_value(command, "--path"):
            problems.append(f"{kind} does not reach the served path")
    return problems


def exposure_problems(
    documents: list[dict[str, Any]], server: dict[str, Any], command: list[str]
) -> list[str]:
    """Service -> the served port; Ingress -> the Service at the served path, TLS on the host."""
    problems: list[str] = []
    names = {p.get("name"): p["containerPort"] for p in server.get("ports", [])}
    port = int(option_value(command, "--port") or 0)
    services = of_kind(documents, "Service")
    service_ports = {
        (s["metadata"]["name"], p.get("name")): p
        for s in services
        for p in s["spec"]["ports"]
        if names.get(p["targetPort"], p["targetPort"]) == port
    }
    if not service_ports:
        problems.append("no Service reaches the served port")
    public = urlsplit(option_value(command, "--public-url") or "")
    ingresses = of_kind(documents, "Ingress")
    if len(ingresses) != 1:
        return [*problems, "the manifest has not exactly one Ingress"]
    [ingress] = ingresses
    tls_hosts = {h for t in ingress["spec"].get("tls", []) for h in t.get("hosts", [])}
    for rule in ingress["spec"]["rules"]:
        if rule["host"] not in tls_hosts:
            problems.append(f"the Ingress serves {rule['host']} without TLS")
        if (public.scheme, public.hostname) != ("https", rule["host"]):
            problems.append("--public-url is not the Ingress's https:// host")
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            key = (backend["name"], backend["port"].get("name"))
            if path["path"] != option_value(command, "--path") or key not in service_ports:
                problems.append("the Ingress does not route the served path to the Service")
            if public.path != path["path"]:
                problems.append("--public-url's path is not the served path")
    return problems


# --- the tests -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `make dist` build (the same script, into a scratch directory)."""
    out = tmp_path_factory.mktemp("built") / "dist"
    build_dist(out)
    return out


@pytest.fixture
def wheels(dist: Path) -> list[str]:
    """The wheel names of that build."""
    return sorted(p.name for p in dist.glob("*.whl"))


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    """The image's worktree and token file, made real here (a directory, a 0600 file)."""
    root = tmp_path / "worktree"
    root.mkdir()
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    tokens = secrets / "spice-tokens"
    tokens.write_text("agent read " + "0" * 64 + "\n", encoding="utf-8")
    tokens.chmod(0o600)
    token_path = option_value(entrypoint(DOCKERFILE.read_text(encoding="utf-8")), "--token-file")
    assert token_path is not None
    return {"/worktree": root, token_path: tokens}


def test_the_dockerfile_copies_the_wheels_make_dist_makes_and_serves(
    wheels: list[str], paths: dict[str, Path]
) -> None:
    """The three wheels of a real build, a slim Python, bubblewrap, not root, a valid serve."""
    assert 3 == len(wheels)
    assert [] == dockerfile_problems(DOCKERFILE.read_text(encoding="utf-8"), wheels, paths)


def test_the_dockerfile_command_serves_http_on_all_interfaces_with_tokens() -> None:
    """The command is the remote deployment: HTTP, all interfaces, allowed, a token file."""
    command = entrypoint(DOCKERFILE.read_text(encoding="utf-8"))
    assert ("http", "0.0.0.0", "/worktree") == (  # noqa: S104 - the container's all interfaces
        option_value(command, "--transport"),
        option_value(command, "--host"),
        option_value(command, "--root"),
    )
    assert "--allow-remote" in command
    assert "--insecure-no-auth" not in command
    assert (option_value(command, "--token-file") or "").startswith("/run/secrets/")


@pytest.mark.parametrize(
    ("before", "after", "problem"),
    [
        ("ARG SPICE_VERSION=0.1.0", "ARG SPICE_VERSION=0.0.9", "instead of dist/'s wheels"),
        ("     /wheels/", "     dist/extra.whl /wheels/", "instead of dist/'s wheels"),
        ("USER 10001:10001", "USER root", "runs as root"),
        ("--no-install-recommends bubblewrap", "--no-install-recommends git", "bubblewrap"),
        ('"--port", "8765"', '"--port", "8766"', "EXPOSE is not the port"),
        ('"--root", "/worktree"', '"--root", "/worktree", "--no-such-flag"', "parser refuses"),
        ('"--root", "/worktree"', '"--root", "/worktree", "--sandbox", "bogus"', "settings refuse"),
        ('["spice-coding", "serve"', '["spice-coding", "tools"', "not spice-coding serve"),
        ("python:3.11-slim-bookworm", "python:3.11-bookworm", "Python slim image"),
    ],
)
def test_a_broken_dockerfile_is_caught(
    wheels: list[str], paths: dict[str, Path], before: str, after: str, problem: str
) -> None:
    """Each check fails on a Dockerfile broken in its one way (so none can pass vacuously)."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert before in text
    found = dockerfile_problems(text.replace(before, after), wheels, paths)
    assert any(problem in p for p in found), found


def stage_environment(stage: Stage) -> dict[str, str]:
    """A stage's ``ENV NAME=VALUE ...`` settings."""
    found: dict[str, str] = {}
    for keyword, rest in stage.steps:
        if keyword == "ENV":
            for word in shlex.split(rest):
                name, _, value = word.partition("=")
                found[name] = value
    return found


def run_build_stage(dist: Path, wheelhouse: Path, scratch: Path) -> Path:
    """Run the Dockerfile's build stage here: its COPY and RUN lines with the image's paths
    moved under ``scratch`` and PyPI replaced by ``wheelhouse`` (no index); its /opt/spice."""
    build = stages(DOCKERFILE.read_text(encoding="utf-8"))[0]
    moved = {"/opt/spice": scratch / "opt" / "spice", "/wheels": scratch / "wheels"}

    def here(text: str) -> str:
        for image_path, local in moved.items():
            text = text.replace(image_path, str(local))
        return text

    for keyword, rest in build.steps:
        if keyword == "COPY":
            *sources, target = shlex.split(rest)
            Path(here(target)).mkdir(parents=True, exist_ok=True)
            for source in sources:
                name = Path(source).name
                (Path(here(target)) / name).write_bytes((dist / name).read_bytes())
    for wheel in wheelhouse.glob("*.whl"):
        (moved["/wheels"] / wheel.name).symlink_to(wheel)
    bin_dir = scratch / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(base_python())
    env = quiet_environment(**stage_environment(build), PIP_NO_INDEX="1")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
    for keyword, rest in build.steps:
        if keyword == "RUN":
            done = run(["/bin/sh", "-c", here(rest)], env=env, cwd=scratch)
            assert 0 == done.returncode, done.stderr
    return moved["/opt/spice"]


@pytest.mark.slow
async def test_the_dockerfiles_build_stage_makes_a_server_that_serves(
    dist: Path, tmp_path: Path
) -> None:
    """The build stage's own COPY and RUN lines, run here (paths moved under a scratch
    directory, PyPI replaced by the locked wheelhouse, no index), make an environment
    without pip whose `spice-coding serve` answers MCP `tools/list` and a read."""
    venv = run_build_stage(dist, wheelhouse_or_skip(), tmp_path / "image")
    installed = sorted(p.name for p in (venv / "bin").iterdir())
    assert "spice-coding" in installed
    assert not [name for name in installed if name.startswith("pip")]
    tree = tmp_path / "worktree"
    tree.mkdir()
    assert (TOOLS, "hello\n") == await served_tools(venv / "bin" / "spice-coding", tree)


def test_dockerignore_admits_only_the_wheels() -> None:
    """The build context is dist/'s wheels and nothing else of the checkout."""
    patterns = dockerignore_patterns()
    assert dockerignore_admits("dist/spice_agent_coding-0.1.0-py3-none-any.whl", patterns)
    for path in ("pyproject.toml", "dist/spice_agent_coding-0.1.0.tar.gz", ".venv", "packages"):
        assert not dockerignore_admits(path, patterns), path


def test_pending_http_flags_are_missing_or_take_their_listed_values() -> None:
    """A flag leaves the pending list's shelter by existing: then its arity must match."""
    known = known_flags()
    for flag, takes_value in PENDING_HTTP_FLAGS.items():
        if flag in known:
            assert (known[flag].nargs != 0) == takes_value, flag


def test_a_flag_outside_the_pending_list_is_never_skipped() -> None:
    """Only the listed flags, while unknown, are left out (with their values); nothing else."""
    argv = [
        "--transport",
        "http",
        "--made-up",
        "1",
        "--path=/mcp",
        "--allow-remote",
        "--root",
        "/w",
    ]
    assert ["--made-up", "1", "--root", "/w"] == without_pending(argv, {})
    everything = dict.fromkeys(PENDING_HTTP_FLAGS, argparse.Action(["-x"], "x"))
    assert argv == without_pending(argv, everything)


def test_once_every_http_flag_exists_nothing_is_left_out(paths: dict[str, Path]) -> None:
    """When the HTTP transport has landed the whole command parses and resolves as it is."""
    known = known_flags()
    command = entrypoint(DOCKERFILE.read_text(encoding="utf-8"))
    if any(flag not in known for flag in PENDING_HTTP_FLAGS):
        pytest.skip("the HTTP transport's flags are not all in serve's parser yet")
    assert command[1:] == without_pending(command[1:], known)
    assert [] == serve_problems(command, paths)


def test_the_kubernetes_example_is_one_server_per_worktree(paths: dict[str, Path]) -> None:
    """replicas 1, the image's command, a read-only owner-only token file, no privileges,
    probes on the served port, the Ingress's TLS host as the public URL."""
    command = entrypoint(DOCKERFILE.read_text(encoding="utf-8"))
    text = MANIFEST.read_text(encoding="utf-8")
    assert [] == manifest_problems(text, command, paths)
    kinds = sorted(d["kind"] for d in manifest_documents(text))
    assert ["Ingress", "NetworkPolicy", "Secret", "Service", "StatefulSet"] == kinds


def workload(d: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = of_kind(d, "StatefulSet")
    return found


def pod(d: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = workload(d)["spec"]["template"]["spec"]
    return found


def server(d: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = pod(d)["containers"][0]
    return found


def init(d: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = pod(d)["initContainers"][0]
    return found


def ingress(d: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = of_kind(d, "Ingress")
    return found


def as_rolling_deployment(d: list[dict[str, Any]]) -> None:
    workload(d)["kind"] = "Deployment"
    workload_spec = of_kind(d, "Deployment")[0]["spec"]
    workload_spec.pop("volumeClaimTemplates")


BREAKAGES: Final[dict[str, tuple[Callable[[list[dict[str, Any]]], object], str]]] = {
    "two replicas": (lambda d: workload(d)["spec"].update(replicas=2), "replicas is not 1"),
    "a rolling deployment": (as_rolling_deployment, "rolling update"),
    "host network": (lambda d: pod(d).update(hostNetwork=True), "hostNetwork"),
    "host PIDs": (lambda d: pod(d).update(hostPID=True), "hostPID"),
    "a service-account token": (
        lambda d: pod(d).update(automountServiceAccountToken=True),
        "service-account",
    ),
    "root allowed": (lambda d: pod(d)["securityContext"].pop("runAsNonRoot"), "may run as root"),
    "privileged": (lambda d: server(d)["securityContext"].update(privileged=True), "privileges"),
    "escalation": (
        lambda d: init(d)["securityContext"].pop("allowPrivilegeEscalation"),
        "may gain privileges",
    ),
    "capabilities kept": (
        lambda d: server(d)["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        "keeps capabilities",
    ),
    "the Secret mounted writable": (
        lambda d: init(d)["volumeMounts"][0].update(readOnly=False),
        "mounts the Secret writable",
    ),
    "the Secret readable by all": (
        lambda d: pod(d)["volumes"][0]["secret"].update(defaultMode=0o444),
        "readable by others",
    ),
    "no Secret": (lambda d: d.remove(of_kind(d, "Secret")[0]), "no volume holds"),
    "a group-readable copy": (
        lambda d: init(d)["command"].__setitem__(2, "0440"),
        "not owner-only",
    ),
    "the token file writable": (
        lambda d: server(d)["volumeMounts"][1].pop("readOnly"),
        "not on one read-only mount",
    ),
    "a probe off the path": (
        lambda d: server(d).update(readinessProbe={"httpGet": {"path": "/health", "port": "mcp"}}),
        "served path",
    ),
    "a probe off the port": (
        lambda d: server(d).update(livenessProbe={"tcpSocket": {"port": 9999}}),
        "served port",
    ),
    "another command": (
        lambda d: server(d).update(command=["spice-coding", "tools"]),
        "not the image's",
    ),
    "an invalid argument": (
        lambda d: server(d).update(args=["--sandbox", "bogus"]),
        "settings refuse",
    ),
    "a plain-HTTP public URL": (
        lambda d: server(d).update(args=["--public-url", "http://spice.example.com/mcp"]),
        "--public-url",
    ),
    "TLS for another host": (
        lambda d: ingress(d)["spec"]["tls"][0].update(hosts=["other.example.com"]),
        "without TLS",
    ),
    "another path": (
        lambda d: ingress(d)["spec"]["rules"][0]["http"]["paths"][0].update(path="/"),
        "does not route",
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES, ids=str)
def test_a_broken_manifest_is_caught(paths: dict[str, Path], breakage: str) -> None:
    """Each manifest check fails on a copy broken in its one way."""
    command = entrypoint(DOCKERFILE.read_text(encoding="utf-8"))
    documents = manifest_documents(MANIFEST.read_text(encoding="utf-8"))
    assert [] == documents_problems(copy.deepcopy(documents), command, paths)
    breaks, problem = BREAKAGES[breakage]
    breaks(documents)
    found = documents_problems(documents, command, paths)
    assert any(problem in p for p in found), found


def test_a_manifest_without_the_scale_rule_is_caught(paths: dict[str, Path]) -> None:
    command = entrypoint(DOCKERFILE.read_text(encoding="utf-8"))
    text = MANIFEST.read_text(encoding="utf-8").replace(SCALE_RULE, "Scale as you like")
    assert ["the manifest does not say scale is more servers"] == manifest_problems(
        text, command, paths
    )


def test_the_deploy_guide_names_the_files_it_describes() -> None:
    """docs/deploy.md points at the Dockerfile, the manifest and `make dist`."""
    guide = (REPOSITORY / "docs" / "deploy.md").read_text(encoding="utf-8")
    for name in ("make dist", "docker build", "examples/kubernetes/spice-coding.yaml"):
        assert name in guide, name
    assert os.path.isfile(MANIFEST)
