"""The README is a user's README, and every link of the documentation works (contract 12.4).

At most 300 lines, a quick start at the top (the install line, adding the server to a
client, ``make demo``, ``make verify``), snippets that use the installed ``spice-coding``.
What moved went to ``docs/``: every relative Markdown link in the README, ``docs/*.md`` and
``benchmarks/README.md`` names a file that exists and, with a ``#fragment``, a heading of it
(GitHub's anchors); every ``docs/NAME.md`` written in code is a file too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

REPOSITORY: Final = Path(__file__).resolve().parents[3]
README: Final = REPOSITORY / "README.md"
MOST_LINES: Final = 300
QUICK_START_LINES: Final = 20
"""The quick start's commands all lie within the README's first lines."""
PAGES: Final = (
    README,
    *sorted((REPOSITORY / "docs").glob("*.md")),
    REPOSITORY / "benchmarks" / "README.md",
)
_LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE_DOC: Final = re.compile(r"`(docs/[\w.-]+\.md)")
_FENCE: Final = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text(encoding="utf-8")))


def broken(page: Path) -> list[str]:
    """The relative links of ``page`` that name no file, or no heading of it."""
    problems = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # a URL: not this repository's to check
        path, _, fragment = target.partition("#")
        resolved = page if not path else (page.parent / path).resolve()
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{target}: no such heading")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPOSITORY)))
def test_every_link_names_a_file_and_a_heading_that_exist(page: Path) -> None:
    assert [] == broken(page)
    for name in _CODE_DOC.findall(page.read_text(encoding="utf-8")):
        assert (REPOSITORY / name).is_file(), name


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    """The other side: a missing file and a missing heading are both reported."""
    (tmp_path / "other.md").write_text("# Present\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#present) [b](other.md#absent) [c](gone.md) [d](https://x.y)\n")
    assert ["other.md#absent: no such heading", "gone.md: no such file"] == broken(page)


def test_the_slugs_are_github_s() -> None:
    assert "the-mcp-client-python" == slug("The `mcp` client (Python)")
    assert "claude-agent-sdk-python" == slug("Claude Agent SDK (Python)")
    assert "google-genai-python" == slug("google-genai (Python)")


def test_the_readme_is_short_and_starts_with_a_quick_start() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= MOST_LINES
    top = "\n".join(lines[:QUICK_START_LINES])
    assert "## Quick start" in top
    for command in (
        "uv tool install --find-links dist spice-agent-coding",
        "claude mcp add spice-coding -- spice-coding serve --root",
        "make demo",
        "make verify",
    ):
        assert command in top, command


def test_the_readme_s_snippets_use_the_installed_command() -> None:
    text = README.read_text(encoding="utf-8")
    assert "/path/to/spice" not in text
    assert ".venv/bin/spice-coding" not in text


_NPX_INSPECTOR: Final = re.compile(r"\bnpx\b(?P<options>[^\n`|]*?)@modelcontextprotocol/inspector")


def inspector_lines_without_yes(text: str) -> list[str]:
    """The ``npx`` runs of the MCP Inspector in ``text`` that lack ``-y`` (with npm's
    ``yes=false`` npx asks, and a pasted line is cancelled)."""
    return [
        found.group(0)
        for found in _NPX_INSPECTOR.finditer(text)
        if not {"-y", "--yes"} & set(found.group("options").split())
    ]


def test_every_inspector_line_of_the_docs_and_examples_has_y() -> None:
    """Issue 47: ``docs/agents.md`` ran ``npx @modelcontextprotocol/inspector`` without
    ``-y``; the README had it."""
    shells = sorted((REPOSITORY / "examples").glob("*.sh"))
    for page in (*PAGES, *shells):
        assert [] == inspector_lines_without_yes(page.read_text(encoding="utf-8")), page
    assert inspector_lines_without_yes("npx @modelcontextprotocol/inspector@2 --cli") != []
    assert inspector_lines_without_yes("npx --yes @modelcontextprotocol/inspector --cli") == []
