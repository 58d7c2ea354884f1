"""`make dist`: the three distributions' wheels and sdists in `dist/`, the same bytes each time.

What is built is what git tracks, as it stands in the working tree (edits included,
untracked and ignored files left out): the tracked files are copied to a scratch
directory and `uv build --all-packages` builds there with `SOURCE_DATE_EPOCH` set to the
last commit's time (or the caller's `SOURCE_DATE_EPOCH`). The build backend (`uv_build`,
built into the pinned uv, so nothing is downloaded) writes fixed timestamps and modes, so
two runs on the same sources give the same bytes. `dist/` is replaced only once the new
set is complete: it then holds exactly one wheel and one sdist per distribution named in
`spice-release.json`, nothing else (uv's own `.gitignore` aside).

`scripts/release_check.py` reuses `build` and `artifact_names` for the release gate.

Usage: python scripts/build_dist.py [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
UV: Final = os.environ.get("UV", "uv")
# Bounds: one command (git or a whole `uv build`) and the files git may list.
COMMAND_TIMEOUT_SECONDS: Final = 600
MAX_TRACKED_FILES: Final = 20_000
# The epoch of a source tree that is not a git checkout: 1980-01-01, the earliest a zip holds.
FALLBACK_EPOCH: Final = "315532800"
ARTIFACT_SUFFIXES: Final = (".whl", ".tar.gz")


class DistError(Exception):
    """A build step failed; the message names the step, never a command's output."""


def run(*argv: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    """Run a command; on failure echo its own output to stderr and raise naming the step."""
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DistError(f"{argv[0]} did not finish in {COMMAND_TIMEOUT_SECONDS} s") from None
    except OSError:
        raise DistError(f"{argv[0]} cannot be run (is it installed?)") from None
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise DistError(f"{argv[0]} {argv[1] if len(argv) > 1 else ''} failed")
    return done.stdout


def release(root: Path = ROOT) -> dict[str, object]:
    """The release file (`spice-release.json`): names, the one version."""
    loaded = json.loads((root / "spice-release.json").read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise DistError("spice-release.json is not an object")
    return loaded


def artifact_names(root: Path = ROOT) -> list[str]:
    """The file names `make dist` makes: one wheel and one sdist per distribution, sorted."""
    meta = release(root)
    version = meta["version"]
    distributions = meta["distributions"]
    if not isinstance(version, str) or not isinstance(distributions, list):
        raise DistError("spice-release.json lacks the version or the distributions")
    names: list[str] = []
    for entry in distributions:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise DistError("spice-release.json names a distribution without a name")
        stem = f"{entry['name'].replace('-', '_')}-{version}"
        names += [f"{stem}-py3-none-any.whl", f"{stem}.tar.gz"]
    return sorted(names)


def source_epoch(root: Path = ROOT) -> str:
    """`SOURCE_DATE_EPOCH`: the caller's, else the last commit's time, else `FALLBACK_EPOCH`."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given:
        if not given.isdigit():
            raise DistError("SOURCE_DATE_EPOCH is not a number of seconds")
        return given
    if not (root / ".git").exists():
        return FALLBACK_EPOCH
    return run("git", "log", "-1", "--format=%ct", cwd=root).strip()


def export_tracked(root: Path, dest: Path) -> int:
    """Copy the files git tracks, as they are in the working tree, to `dest`; count them.

    A tracked file deleted in the working tree is left out, as the build would see it.
    Outside a git checkout the whole tree is copied.
    """
    if not (root / ".git").exists():
        shutil.copytree(root, dest, dirs_exist_ok=True, symlinks=True)
        return sum(1 for _ in dest.rglob("*"))
    listed = run("git", "ls-files", "-z", "--cached", cwd=root).split("\0")
    names = [name for name in listed if name]
    if len(names) > MAX_TRACKED_FILES:
        raise DistError(f"git tracks more than {MAX_TRACKED_FILES} files")
    copied = 0
    for name in names:
        source = root / name
        if not source.is_file() and not source.is_symlink():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
        copied += 1
    return copied


def build(source: Path, out: Path, epoch: str) -> dict[str, str]:
    """Build every distribution of the workspace `source` into `out`: file name -> SHA-256."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": epoch}
    run(
        UV,
        "build",
        "--all-packages",
        "--offline",
        "--no-build-logs",
        "--quiet",
        "-o",
        str(out),
        cwd=source,
        env=env,
    )
    artifacts = [p for p in sorted(out.iterdir()) if p.name.endswith(ARTIFACT_SUFFIXES)]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in artifacts}


def make_dist(out: Path, root: Path = ROOT) -> dict[str, str]:
    """Build the tracked sources of `root` into `out`, replacing what `out` held."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dist-", dir=out.parent) as scratch:
        work = Path(scratch)
        source = work / "source"
        source.mkdir()
        export_tracked(root, source)
        built = work / "built"
        digests = build(source, built, source_epoch(root))
        if sorted(digests) != artifact_names(root):
            raise DistError("the build did not make exactly the files spice-release.json names")
        # uv writes a .gitignore of "*" beside the artifacts; it stays, so dist/ is ignored
        # even where the repository's own .gitignore is not in force.
        if out.exists():
            shutil.rmtree(out)
        built.rename(out)
    return digests


def main(argv: Sequence[str] | None = None) -> int:
    """Build into `--out` (default `dist/`) and print each file with its SHA-256."""
    parser = argparse.ArgumentParser(description="build the wheels and sdists into dist/")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="default: dist/")
    options = parser.parse_args(argv)
    try:
        digests = make_dist(options.out)
    except DistError as error:
        sys.stderr.write(f"make dist: {error}\n")
        return 1
    for name, digest in digests.items():
        print(f"{digest}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
