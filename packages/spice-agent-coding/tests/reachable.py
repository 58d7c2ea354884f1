"""What a child run as another (unprivileged) user needs of this checkout, made reachable.

A clone may lie under a directory only its owner may enter (``mktemp -d`` makes one 0700,
and so is a 0700 home): a server started there as uid 65534 cannot import the checkout's
sources (``ModuleNotFoundError: spice``). ``sources_for_others`` answers the three
distributions' ``src`` directories where every user may reach them, else a copy of them
in a directory the caller gives (the application's ``call`` runs on the standard library
and these sources alone, so nothing of ``.venv`` is needed).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Final

import spice.agent.coding
import spice.agent.process
import spice.agent.tools.coding

_ANCHORS: Final = (spice.agent.process, spice.agent.tools.coding, spice.agent.coding)


def source_roots() -> list[Path]:
    """Each distribution's ``src`` directory (the one holding ``spice``), resolved."""
    return [
        Path(module.__file__ or "").resolve().parents[len(module.__name__.split("."))]
        for module in _ANCHORS
    ]


def others_may_enter(path: Path) -> bool:
    """Whether every directory from ``/`` down to ``path`` lets other users search it."""
    return all(os.stat(part).st_mode & stat.S_IXOTH for part in (path, *path.parents))


def sources_for_others(spare: Path) -> list[str]:
    """The ``src`` directories as another user may import them.

    Where others may enter each one, the checkout's own; else a copy in ``spare/sources``
    (made once; ``spare`` must exist and be reachable by that user), readable by all.
    """
    roots = source_roots()
    if all(others_may_enter(root) for root in roots):
        return [str(root) for root in roots]
    copies: list[str] = []
    for number, root in enumerate(roots):
        target = spare / "sources" / str(number)
        if not target.exists():
            shutil.copytree(root, target, ignore=shutil.ignore_patterns("__pycache__"))
        for directory, _, files in os.walk(target):
            os.chmod(directory, 0o755)  # noqa: S103 - read by the other user, by design
            for name in files:
                os.chmod(os.path.join(directory, name), 0o644)
        copies.append(str(target))
    os.chmod(spare / "sources", 0o755)  # noqa: S103 - the same
    return copies
