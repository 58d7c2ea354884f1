"""The traversal corpus: its generator, its loader, and how one case is laid out on disk.

The data file ``tests/data/traversal_corpus.json`` is what the tests run; this module is
how it was written (``python adv_corpus.py`` regenerates it, and a test proves the file and
the generator agree). Every case is a path a model could send, a small file tree around it,
and the code each tool must answer according to ``contract.md`` §5 ("Details every
implementation gets right"):

* a lexical escape (``..`` leaving the root after cleaning, an absolute path, NUL,
  surrounding whitespace, the empty path) is ``invalid_arguments``;
* an escape found while resolving a symlink is ``path_escape``; an absolute symlink
  target always counts as an escape;
* a ``replace`` target that is itself a symlink is ``not_regular``;
* a ``shell`` workdir with any symlink component is ``path_escape``.

Layout (all relative to a fresh temporary *base* directory)::

    root/              the configured root (or ``rootlink`` -> root)
      file.txt  dir/inner.txt  dir/sub/deep.txt  empty/  café.txt (NFC)
    outside/           never to be read or written through the tools
      secret.txt  file.txt  inner.txt  deep.txt  dir/secret.txt
    root-evil/secret.txt   the sibling-prefix directory

Setup entries: ``{"op": "dir"|"file"|"symlink"|"hardlink"|"fifo", "at": base-relative,
"target": ...}``; a target may contain ``{base}`` (replaced by the absolute base path).
Codes: ``"ok"`` is a success; ``also`` lists other codes the contract leaves open (each
choice is written down in ``docs/decisions.md``).
"""

from __future__ import annotations

import itertools
import json
import os
import posixpath
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, TypedDict

CORPUS_PATH: Final = Path(__file__).parent / "data" / "traversal_corpus.json"
TOOLS: Final = ("read", "replace-create", "replace-expected", "shell-workdir")
NAME_MAX: Final = 255
PATH_MAX: Final = 4096
SENTINEL_PREFIX: Final = b"OUTSIDE-SENTINEL-"
INSIDE_PREFIX: Final = b"inside:"

OK: Final = "ok"
INVALID: Final = "invalid_arguments"
ESCAPE: Final = "path_escape"
NOT_FOUND: Final = "not_found"
NOT_REGULAR: Final = "not_regular"
EXISTS: Final = "already_exists"
WORKDIR: Final = "workdir_unavailable"
UNAVAILABLE: Final = "path_unavailable"
ROOT_GONE: Final = "root_unavailable"

BASE_DIRS: Final = (
    "root",
    "root/dir",
    "root/dir/sub",
    "root/empty",
    "outside",
    "outside/dir",
    "root-evil",
)
BASE_INSIDE_FILES: Final = ("root/file.txt", "root/dir/inner.txt", "root/dir/sub/deep.txt")
BASE_OUTSIDE_FILES: Final = (
    "outside/secret.txt",
    "outside/file.txt",
    "outside/inner.txt",
    "outside/deep.txt",
    "outside/dir/secret.txt",
    "root-evil/secret.txt",
)
NFC_NAME: Final = unicodedata.normalize("NFC", "caf\u00e9.txt")


class Entry(TypedDict, total=False):
    """One setup step."""

    op: str
    at: str
    target: str


class Case(TypedDict, total=False):
    """One corpus case (see the module docstring)."""

    id: str
    category: str
    path: str
    root: str
    between: str
    setup: list[Entry]
    tools: dict[str, str]
    also: dict[str, list[str]]
    reads_outside: bool
    note: str


def inside_bytes(base_relative: str) -> bytes:
    """The content planted in an inside file."""
    return INSIDE_PREFIX + base_relative.encode("utf-8", "surrogateescape") + b"\n"


def sentinel_bytes(canary: str, base_relative: str) -> bytes:
    """The content planted in an outside file: it carries the run's canary."""
    return SENTINEL_PREFIX + canary.encode() + b":" + base_relative.encode() + b"\n"


def _link(at: str, target: str) -> Entry:
    return {"op": "symlink", "at": at, "target": target}


def _dir(at: str) -> Entry:
    return {"op": "dir", "at": at}


def _file(at: str) -> Entry:
    return {"op": "file", "at": at}


# Expectation shorthands: (read, replace-create, replace-expected, shell-workdir).
def _all(code: str) -> dict[str, str]:
    return dict.fromkeys(TOOLS, code)


def _codes(read: str, create: str, expected: str, shell: str) -> dict[str, str]:
    return {
        "read": read,
        "replace-create": create,
        "replace-expected": expected,
        "shell-workdir": shell,
    }


EXISTING_FILE: Final = _codes(OK, EXISTS, OK, WORKDIR)
EXISTING_DIR: Final = _codes(NOT_REGULAR, EXISTS, NOT_REGULAR, OK)
# The root itself (contract 9.1): no file, so read and replace refuse it as an argument.
ROOT_ITSELF: Final = _codes(INVALID, INVALID, INVALID, OK)
MISSING_NAME: Final = _codes(NOT_FOUND, OK, NOT_FOUND, WORKDIR)
# A created name whose parent is a symlink inside the root: the contract says
# create "never [creates parents] through a symlink"; following an existing inside
# link to an existing directory is the implementation's documented choice.
DIR_ALSO: Final = {"replace-create": [NOT_REGULAR]}


class _Builder:
    def __init__(self) -> None:
        self.cases: list[Case] = []
        self._counts: dict[str, int] = {}

    def add(
        self,
        category: str,
        path: str,
        tools: Mapping[str, str],
        *,
        setup: Sequence[Entry] = (),
        also: Mapping[str, Sequence[str]] | None = None,
        root: str = "root",
        between: str = "",
        reads_outside: bool = False,
        note: str = "",
    ) -> None:
        number = self._counts.get(category, 0) + 1
        self._counts[category] = number
        case: Case = {
            "id": f"{category}-{number:03d}",
            "category": category,
            "path": path,
            "root": root,
            "setup": list(setup),
            "tools": dict(tools),
        }
        if also:
            case["also"] = {tool: list(codes) for tool, codes in also.items()}
        if between:
            case["between"] = between
        if reads_outside:
            case["reads_outside"] = True
        if note:
            case["note"] = note
        self.cases.append(case)


def _dot_segments(b: _Builder) -> None:
    for path in (
        "file.txt",
        "./file.txt",
        "././file.txt",
        ".//file.txt",
        "dir/../file.txt",
        "dir/sub/../../file.txt",
        "dir/./sub/.././../file.txt",
        "dir/inner.txt",
        "dir/./inner.txt",
        "dir//inner.txt",
        "dir/sub/../inner.txt",
        "./dir/sub/./deep.txt",
        "dir/sub/deep.txt",
        "empty/../dir/sub/../sub/deep.txt",
    ):
        b.add("dot", path, EXISTING_FILE)
    for path in (".", "./", "dir/..", "dir/sub/../..", "./.", "././"):
        b.add("dot", path, ROOT_ITSELF)
    for path in ("dir", "dir/", "dir/.", "dir/sub/..", "./dir/./", "empty"):
        b.add("dot", path, EXISTING_DIR, also={"replace-create": [NOT_REGULAR]})
    # Every position of a ".." that leaves the root: all lexical escapes.
    for path in (
        "..",
        "../",
        "../.",
        "./..",
        "../file.txt",
        "../root/file.txt",
        ".././root/file.txt",
        "../outside/secret.txt",
        "../root-evil/secret.txt",
        "dir/../..",
        "dir/../../outside/secret.txt",
        "dir/../../root/file.txt",
        "dir/sub/../../..",
        "dir/sub/../../../outside/secret.txt",
        "dir/./../../outside",
        "./../outside",
        "empty/../../outside/dir/secret.txt",
        "missing/../../outside/secret.txt",
        "a/b/c/../../../../x",
        "../../../../../../../../etc/passwd",
        "../" * 64 + "etc/passwd",
        "dir/sub/deep.txt/../../../../outside/secret.txt",
    ):
        b.add("dot", path, _all(INVALID))
    # Names made of dots that are not dot segments.
    for path in ("...", "....", "..a", "a..", ".hidden", "dir/...", ". .", "dir/sub/.. ."):
        b.add("dot", path, MISSING_NAME)


def _absolute(b: _Builder) -> None:
    for path in (
        "/",
        "//",
        "///",
        "/etc/passwd",
        "//etc/passwd",
        "/tmp",
        "/root",
        "/work",
        "{base}/root/file.txt",
        "{base}/root",
        "{base}/outside/secret.txt",
        "{base}/root-evil/secret.txt",
        "{base}/root/../outside/secret.txt",
        "/proc/self/root/etc/passwd",
        "/proc/self/cwd/file.txt",
        "/proc/self/fd/0",
        "/proc/self/environ",
        "/dev/zero",
        "/./etc/passwd",
        "/../etc/passwd",
    ):
        # Absolute paths beneath the root mean their relative remainder (contract 9.3).
        beneath = {"{base}/root/file.txt": EXISTING_FILE, "{base}/root": ROOT_ITSELF}
        b.add("absolute", path, beneath.get(path, _all(INVALID)))
    # Names that look absolute elsewhere but are plain relative names on POSIX.
    for path in ("C:/Windows", "C:", "file:/etc/passwd", "~/secret.txt", "~root", "%2e%2e/x"):
        b.add("absolute", path, MISSING_NAME)
    # The sibling-prefix directory reached through a link.
    b.add(
        "absolute",
        "evil/secret.txt",
        _codes(ESCAPE, ESCAPE, ESCAPE, ESCAPE),
        setup=[_link("root/evil", "../root-evil")],
    )
    b.add(
        "absolute",
        "evil",
        _codes(ESCAPE, NOT_REGULAR, NOT_REGULAR, ESCAPE),
        setup=[_link("root/evil", "{base}/root-evil")],
        also={"replace-create": [EXISTS, ESCAPE], "replace-expected": [ESCAPE]},
    )
    _absolute_beneath(b)


def _absolute_beneath(b: _Builder) -> None:
    """Absolute paths lexically beneath the root, as configured or as resolved (9.3)."""
    for path, tools in (
        ("{base}/root/", ROOT_ITSELF),
        ("{base}/root/.", ROOT_ITSELF),
        ("{base}/root/dir/..", ROOT_ITSELF),
        ("{base}//root//dir/inner.txt", EXISTING_FILE),
        ("{base}/root/./dir/sub/../inner.txt", EXISTING_FILE),
        ("{base}/root/../root/file.txt", EXISTING_FILE),
        ("{base}/root/dir/sub/deep.txt", EXISTING_FILE),
        ("{base}/root/new.txt", MISSING_NAME),
        ("{base}/root/missing/new.txt", _codes(NOT_FOUND, OK, NOT_FOUND, WORKDIR)),
        ("{base}/root-evil", _all(INVALID)),
        ("{base}/root/../root-evil/secret.txt", _all(INVALID)),
        ("{base}/root/dir/../../outside/secret.txt", _all(INVALID)),
        ("{base}/root/..", _all(INVALID)),
        ("{base}", _all(INVALID)),
    ):
        b.add("absolute-beneath", path, tools)
    b.add(
        "absolute-beneath",
        "{base}/root/dir",
        EXISTING_DIR,
        also={"replace-create": [NOT_REGULAR]},
    )
    b.add(
        "absolute-beneath",
        "{base}/root/evil/secret.txt",
        _all(ESCAPE),
        setup=[_link("root/evil", "../root-evil")],
        note="beneath the root by its text, outside it through a link: resolved by _root",
    )
    b.add(
        "absolute-beneath",
        "{base}/alias/file.txt",
        EXISTING_FILE,
        setup=[_link("alias", "root")],
        note="another link to the root: its directory resolves beneath the root (10.2)",
    )
    rootlink = [_link("rootlink", "root")]
    for path, tools in (
        ("{base}/rootlink/file.txt", EXISTING_FILE),
        ("{base}/root/file.txt", EXISTING_FILE),
        ("{base}/root/dir/inner.txt", EXISTING_FILE),
        ("{base}/rootlink", ROOT_ITSELF),
        ("{base}/root", ROOT_ITSELF),
        ("{base}/root/new.txt", MISSING_NAME),
        ("{base}/root-evil/secret.txt", _all(INVALID)),
    ):
        b.add(
            "absolute-beneath",
            path,
            tools,
            setup=rootlink,
            root="rootlink",
            note="the root is configured through a link: its configured and resolved forms",
        )


def _control(b: _Builder) -> None:
    for path in (
        "\x00",
        "file.txt\x00",
        "file.txt\x00.png",
        "dir\x00/inner.txt",
        "\x00../../etc/passwd",
        "dir/\x00",
        "",
        " ",
        " file.txt",
        "file.txt ",
        "\tfile.txt",
        "file.txt\n",
        "\nfile.txt",
        "\r\n",
        " ../outside/secret.txt",
        "file.txt\x0b",
        "\x0cfile.txt",
    ):
        b.add("control", path, _all(INVALID))
    # Control characters anywhere (Unicode Cc) are refused lexically: the contract is
    # silent, `_root.clean_path` decides (a name with a newline fools logs and humans).
    for path in (
        "a\x01b",
        "line\nbreak",
        "tab\tinside",
        "\x1b[31mred",
        "bell\x07",
        "del\x7f",
        "cr\rinside",
        "dir/\x02x",
        "c1\x85control",
    ):
        b.add("control", path, _all(INVALID))


def _long(b: _Builder) -> None:
    longest = "a" * NAME_MAX
    b.add("long", longest, MISSING_NAME)
    b.add("long", "dir/" + longest, MISSING_NAME)
    b.add("long", "\u00e9" * 127 + "a", MISSING_NAME, note="255 UTF-8 bytes")
    # Over-long names and paths are refused lexically, before any system call.
    for path in ("a" * (NAME_MAX + 1), "dir/" + "b" * (NAME_MAX + 1), "\u00e9" * 128):
        b.add("long", path, _all(INVALID), note="NAME_MAX+1 bytes")
    # A path of exactly PATH_MAX-1 bytes (the longest one system call takes) and of
    # exactly PATH_MAX (accepted by the cleaner, too long for one call): long components
    # keep the tree shallow (16 or 17 levels).
    at_bound = ("n" * NAME_MAX + "/") * 15 + "x" * NAME_MAX
    assert len(at_bound) == PATH_MAX - 1
    b.add("long", at_bound, MISSING_NAME, note="PATH_MAX-1 bytes")
    at_limit = ("e" * NAME_MAX + "/") * 15 + "f" * 200 + "/" + "y" * 55
    assert len(at_limit) == PATH_MAX
    b.add(
        "long",
        at_limit,
        MISSING_NAME,
        also={tool: [INVALID] for tool in TOOLS},
        note="exactly PATH_MAX bytes: accepted by the cleaner, too long for one syscall",
    )
    past = "d/" * (PATH_MAX // 2) + "x"
    assert len(past) == PATH_MAX + 1
    b.add("long", past, _all(INVALID), note="PATH_MAX+1 bytes")
    b.add("long", "../" * (PATH_MAX // 3 + 1), _all(INVALID), note="PATH_MAX+ of dot-dots")
    b.add(
        "long",
        "./" * (PATH_MAX // 2) + "file.txt",
        _all(INVALID),
        note="over PATH_MAX before cleaning (the bound is on the raw text)",
    )


def _unicode(b: _Builder) -> None:
    nfd = unicodedata.normalize("NFD", NFC_NAME)
    b.add("unicode", NFC_NAME, EXISTING_FILE, setup=[_file("root/" + NFC_NAME)])
    b.add(
        "unicode",
        nfd,
        MISSING_NAME,
        setup=[_file("root/" + NFC_NAME)],
        note="NFD spelling of an NFC name: a different name on Linux",
    )
    b.add(
        "unicode",
        NFC_NAME,
        MISSING_NAME,
        setup=[_file("root/" + nfd)],
        note="NFC spelling of an NFD name",
    )
    for path in (
        "\uff0e\uff0e/outside/secret.txt",
        "\u2024\u2024/outside/secret.txt",
        "..\u2215outside\u2215secret.txt",
        "..\u2044outside",
        "..\uff0foutside\uff0fsecret.txt",
        ".\u0307./x",
        "\u0430dir/inner.txt",
        "f\u0456le.txt",
        "\ufb01le.txt",
        "file.txt\u200b",
        "\u200b..",
        "evil\u202etxt.exe",
        "\U0001f600/x",
        "\ufeff..",
    ):
        b.add("unicode", path, MISSING_NAME)
    # Unicode whitespace around a path is surrounding whitespace (Python's str.strip).
    for path in ("\u00a0file.txt", "\u3000", "file.txt\u2029", "\u2003../x"):
        b.add("unicode", path, _all(INVALID))
    b.add(
        "unicode",
        "\uff44\uff49\uff52/secret.txt",
        _codes(ESCAPE, ESCAPE, ESCAPE, ESCAPE),
        setup=[_link("root/\uff44\uff49\uff52", "../outside")],
        note="a full-width look-alike of 'dir' that links outside",
    )
    b.add(
        "unicode",
        "\ud800",
        _all(INVALID),
        note="a lone surrogate never reaches the file system",
    )


def _backslash(b: _Builder) -> None:
    for path in (
        "..\\outside\\secret.txt",
        "dir\\inner.txt",
        "\\etc\\passwd",
        "..\\..\\..\\etc\\passwd",
        "\\\\?\\C:\\Windows",
        "\\\\server\\share",
        "dir\\..\\..\\outside",
        "\\",
    ):
        b.add("backslash", path, MISSING_NAME, also={tool: [INVALID] for tool in TOOLS})
    b.add(
        "backslash",
        "dir/..\\..\\secret.txt",
        MISSING_NAME,
        also={tool: [INVALID] for tool in TOOLS},
    )


def _trailing(b: _Builder) -> None:
    lenient = {
        "read": [NOT_REGULAR, UNAVAILABLE, NOT_FOUND, INVALID],
        "replace-expected": [NOT_REGULAR, UNAVAILABLE, NOT_FOUND, INVALID],
        "replace-create": [NOT_REGULAR, UNAVAILABLE, INVALID],
        "shell-workdir": [NOT_REGULAR, UNAVAILABLE],
    }
    for path in ("file.txt/", "dir/inner.txt/", "dir/inner.txt//", "file.txt/."):
        b.add(
            "trailing",
            path,
            EXISTING_FILE,
            also=lenient,
            note="cleaning drops the trailing slash; POSIX would say ENOTDIR",
        )
    for path in ("missing/", "dir/missing/"):
        b.add("trailing", path, MISSING_NAME, also={"replace-create": [INVALID, NOT_REGULAR]})
    b.add("trailing", "dir/sub/", EXISTING_DIR, also=DIR_ALSO)
    b.add(
        "trailing",
        "lfile/",
        _codes(OK, NOT_REGULAR, NOT_REGULAR, ESCAPE),
        setup=[_link("root/lfile", "file.txt")],
        also={**lenient, "replace-create": [EXISTS, INVALID]},
    )
    b.add(
        "trailing",
        "lout/",
        _codes(ESCAPE, NOT_REGULAR, NOT_REGULAR, ESCAPE),
        setup=[_link("root/lout", "../outside")],
        also={"replace-create": [EXISTS, ESCAPE, INVALID], "replace-expected": [ESCAPE]},
    )
    b.add(
        "trailing",
        "file.txt/x",
        _codes(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, WORKDIR),
        also={
            "read": [NOT_FOUND, NOT_REGULAR],
            "replace-expected": [NOT_FOUND, NOT_REGULAR],
            "replace-create": [NOT_REGULAR, "create_failed", NOT_FOUND],
        },
        note="a regular file used as a directory",
    )


# Where a symlink to a directory stands in a three-part path p1/p2/leaf.
_POSITIONS: Final = ("first", "middle", "last")


def _symlink_positions(b: _Builder) -> None:
    """Chains of 1..3 links in each position, staying inside or leaving, relative or absolute."""
    for position in _POSITIONS:
        for length in (1, 2, 3):
            for destination in ("inside", "outside", "absolute-inside"):
                setup: list[Entry] = [
                    _dir("root/p1"),
                    _dir("root/p1/p2"),
                    _file("root/p1/p2/leaf.txt"),
                    _dir("outside/p1"),
                    _dir("outside/p1/p2"),
                    _file("outside/p1/p2/leaf.txt"),
                    _dir("root/real"),
                    _dir("root/real/p2"),
                    _file("root/real/p2/leaf.txt"),
                    _file("root/real/leaf.txt"),
                ]
                # The link replaces the component at `position`; its chain ends at a real
                # directory (or file, for the last position) that has the same shape.
                if position == "first":
                    at, path = "root/l0", "l0/p2/leaf.txt"
                    inside_target, outside_target = "real", "../outside/p1"
                    abs_target = "{base}/root/real"
                elif position == "middle":
                    at, path = "root/p1/l0", "p1/l0/leaf.txt"
                    inside_target, outside_target = "../real/p2", "../../outside/p1/p2"
                    abs_target = "{base}/root/real/p2"
                else:
                    at, path = "root/p1/p2/l0", "p1/p2/l0"
                    inside_target, outside_target = (
                        "../../real/leaf.txt",
                        ("../../../outside/p1/p2/leaf.txt"),
                    )
                    abs_target = "{base}/root/real/leaf.txt"
                final = {
                    "inside": inside_target,
                    "outside": outside_target,
                    "absolute-inside": abs_target,
                }[destination]
                parent = posixpath.dirname(at)
                chain = [f"{parent}/l{i}" for i in range(length)]
                for here, nxt in itertools.pairwise(chain):
                    setup.append(_link(here, posixpath.basename(nxt)))
                setup.append(_link(chain[-1], final))
                escapes = destination != "inside"
                if position == "last":
                    tools = _codes(
                        ESCAPE if escapes else OK,
                        NOT_REGULAR,
                        NOT_REGULAR,
                        ESCAPE,
                    )
                    also = {"replace-create": [EXISTS]}
                    if escapes:
                        also["replace-create"] = [EXISTS, ESCAPE]
                        also["replace-expected"] = [ESCAPE]
                else:
                    tools = _codes(
                        ESCAPE if escapes else OK,
                        ESCAPE if escapes else EXISTS,
                        ESCAPE if escapes else OK,
                        ESCAPE,
                    )
                    also = {}
                b.add(
                    f"symlink-{position}",
                    path,
                    tools,
                    setup=setup,
                    also=also,
                    note=f"a chain of {length} link(s) to {destination}",
                )
                # The shell workdir variant: the directory that holds the leaf.
                if position != "last":
                    b.add(
                        f"symlink-{position}",
                        posixpath.dirname(path),
                        _codes(
                            ESCAPE if escapes else NOT_REGULAR,
                            ESCAPE if escapes else EXISTS,
                            ESCAPE if escapes else NOT_REGULAR,
                            ESCAPE,
                        ),
                        setup=setup,
                        also=_dir_variant_also(position, escapes=escapes),
                        note=f"the directory reached through a chain of {length} link(s)",
                    )


def _dir_variant_also(position: str, *, escapes: bool) -> dict[str, list[str]]:
    if not escapes:
        return {"replace-create": [NOT_REGULAR]}
    if position == "middle":
        # The path ends at the link itself: replace never follows a final link.
        return {"replace-create": [NOT_REGULAR, EXISTS], "replace-expected": [NOT_REGULAR]}
    return {}


def _fifo(at: str) -> Entry:
    return {"op": "fifo", "at": at}


def _symlinks(b: _Builder) -> None:
    _symlink_positions(b)
    final_inside = _codes(OK, NOT_REGULAR, NOT_REGULAR, ESCAPE)
    final_also = {"replace-create": [EXISTS]}
    final_out = _codes(ESCAPE, NOT_REGULAR, NOT_REGULAR, ESCAPE)
    final_out_also = {"replace-create": [EXISTS, ESCAPE], "replace-expected": [ESCAPE]}
    cases: list[tuple[str, list[Entry], dict[str, str], dict[str, list[str]]]] = [
        ("lfile", [_link("root/lfile", "file.txt")], final_inside, final_also),
        ("ldotted", [_link("root/ldotted", "dir/sub/../../file.txt")], final_inside, final_also),
        ("dir/lup", [_link("root/dir/lup", "../file.txt")], final_inside, final_also),
        ("lout", [_link("root/lout", "../outside/secret.txt")], final_out, final_out_also),
        (
            "dir/lout",
            [_link("root/dir/lout", "../../outside/secret.txt")],
            final_out,
            final_out_also,
        ),
        (
            "ldots",
            [_link("root/ldots", "dir/../../outside/secret.txt")],
            final_out,
            final_out_also,
        ),
        ("labs", [_link("root/labs", "{base}/root/file.txt")], final_out, final_out_also),
        ("lpasswd", [_link("root/lpasswd", "/etc/passwd")], final_out, final_out_also),
        ("lzero", [_link("root/lzero", "/dev/zero")], final_out, final_out_also),
        ("lslash", [_link("root/lslash", "/")], final_out, final_out_also),
        ("lback", [_link("root/lback", "../root/file.txt")], final_out, final_out_also),
        ("levil", [_link("root/levil", "../root-evil/secret.txt")], final_out, final_out_also),
        ("lproc/etc/passwd", [_link("root/lproc", "/proc/self/root")], _all(ESCAPE), {}),
        ("lproc", [_link("root/lproc", "/proc/self/root")], final_out, final_out_also),
        ("lcwd/file.txt", [_link("root/lcwd", "/proc/self/cwd")], _all(ESCAPE), {}),
        ("lfd", [_link("root/lfd", "/proc/self/fd/0")], final_out, final_out_also),
        ("lfd3/x", [_link("root/lfd3", "/proc/self/fd/3")], _all(ESCAPE), {}),
        (
            "lrproc/etc/passwd",
            [_link("root/lrproc", "../" * 24 + "proc/self/root")],
            _all(ESCAPE),
            {},
        ),
        ("lup/outside/secret.txt", [_link("root/lup", "..")], _all(ESCAPE), {}),
        ("lup/root/file.txt", [_link("root/lup", "..")], _all(ESCAPE), {}),
        (
            "ldot/file.txt",
            [_link("root/ldot", ".")],
            _codes(OK, EXISTS, OK, ESCAPE),
            {},
        ),
        (
            "ldot/ldot/ldot/dir/inner.txt",
            [_link("root/ldot", ".")],
            _codes(OK, EXISTS, OK, ESCAPE),
            {},
        ),
        (
            "dir/toroot/dir/toroot/file.txt",
            [_link("root/dir/toroot", "..")],
            _codes(OK, EXISTS, OK, ESCAPE),
            {},
        ),
        (
            "lds/inner.txt",
            [_link("root/lds", "dir/")],
            _codes(OK, EXISTS, OK, ESCAPE),
            {},
        ),
        (
            "lds",
            [_link("root/lds", "dir/")],
            _codes(NOT_REGULAR, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {"replace-create": [EXISTS]},
        ),
        ("lout/../file.txt", [_link("root/lout", "../outside")], EXISTING_FILE, {}),
        (
            "ldeep/../inner.txt",
            [_link("root/ldeep", "dir/sub")],
            MISSING_NAME,
            {},
        ),
        # Dangling links: never followed to create their target.
        (
            "dang",
            [_link("root/dang", "missing.txt")],
            _codes(NOT_FOUND, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {"replace-create": [EXISTS], "shell-workdir": [WORKDIR]},
        ),
        (
            "dango",
            [_link("root/dango", "../outside/new.txt")],
            _codes(ESCAPE, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {"replace-create": [EXISTS, ESCAPE], "replace-expected": [ESCAPE]},
        ),
        (
            "dangabs",
            [_link("root/dangabs", "{base}/outside/new.txt")],
            _codes(ESCAPE, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {"replace-create": [EXISTS, ESCAPE], "replace-expected": [ESCAPE]},
        ),
        (
            "dangd/x.txt",
            [_link("root/dangd", "../outside/newdir")],
            _all(ESCAPE),
            {},
        ),
        (
            "dangdi/x.txt",
            [_link("root/dangdi", "newdir")],
            _codes(NOT_FOUND, ESCAPE, NOT_FOUND, ESCAPE),
            {
                "replace-create": [NOT_FOUND, NOT_REGULAR, UNAVAILABLE],
                "shell-workdir": [WORKDIR],
            },
        ),
        (
            "dangdi/x.txt/y.txt",
            [_link("root/dangdi", "newdir/deeper")],
            _codes(NOT_FOUND, ESCAPE, NOT_FOUND, ESCAPE),
            {
                "replace-create": [NOT_FOUND, NOT_REGULAR, UNAVAILABLE],
                "shell-workdir": [WORKDIR],
            },
        ),
        # Loops and long chains.
        (
            "loopa",
            [_link("root/loopa", "loopb"), _link("root/loopb", "loopa")],
            _codes(UNAVAILABLE, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {
                "read": [ESCAPE, NOT_REGULAR],
                "replace-create": [EXISTS],
            },
        ),
        (
            "self/x",
            [_link("root/self", "self")],
            _codes(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, ESCAPE),
            {tool: [ESCAPE, NOT_REGULAR] for tool in TOOLS[:3]},
        ),
        (
            "c0",
            [_link(f"root/c{i}", f"c{i + 1}") for i in range(8)] + [_link("root/c8", "file.txt")],
            final_inside,
            final_also,
        ),
        (
            "c0",
            [_link(f"root/c{i}", f"c{i + 1}") for i in range(8)]
            + [_link("root/c8", "../outside/secret.txt")],
            final_out,
            final_out_also,
        ),
        (
            "c0",
            [_link(f"root/c{i}", f"c{i + 1}") for i in range(64)] + [_link("root/c64", "file.txt")],
            _codes(UNAVAILABLE, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {"read": [ESCAPE, NOT_REGULAR], "replace-create": [EXISTS]},
        ),
        # A FIFO behind an inside link is still not a regular file, and never blocks.
        (
            "lfifo",
            [_fifo("root/fifo"), _link("root/lfifo", "fifo")],
            _codes(NOT_REGULAR, NOT_REGULAR, NOT_REGULAR, ESCAPE),
            {"replace-create": [EXISTS]},
        ),
    ]
    for path, setup, tools, also in cases:
        b.add("symlink", path, tools, setup=setup, also=also)


def _special(b: _Builder) -> None:
    fifo = [_fifo("root/fifo")]
    b.add(
        "special",
        "fifo",
        _codes(NOT_REGULAR, EXISTS, NOT_REGULAR, WORKDIR),
        setup=fifo,
        also={"replace-create": [NOT_REGULAR]},
    )
    b.add(
        "special",
        "fifo/x",
        _codes(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, WORKDIR),
        setup=fifo,
        also={
            "read": [NOT_FOUND, NOT_REGULAR],
            "replace-expected": [NOT_FOUND, NOT_REGULAR],
            "replace-create": [NOT_REGULAR, "create_failed", NOT_FOUND],
        },
    )
    b.add("special", "empty/new.txt", MISSING_NAME)
    b.add("special", "a/b/c/new.txt", MISSING_NAME, note="create makes the parents")


def _hardlinks(b: _Builder) -> None:
    note = (
        "a hard link is a real name inside the root: reading it is allowed and returns "
        "the outside inode's bytes; replacing it gives the name a new inode"
    )
    for target in ("outside/secret.txt", "root-evil/secret.txt", "outside/dir/secret.txt"):
        b.add(
            "hardlink",
            "hl",
            EXISTING_FILE,
            setup=[{"op": "hardlink", "at": "root/hl", "target": target}],
            reads_outside=True,
            note=note,
        )
    b.add(
        "hardlink",
        "dir/hl",
        EXISTING_FILE,
        setup=[{"op": "hardlink", "at": "root/dir/hl", "target": "outside/secret.txt"}],
        reads_outside=True,
        note=note,
    )


def _roots(b: _Builder) -> None:
    setup = [_link("rootlink", "root")]
    for path, tools in (
        ("file.txt", EXISTING_FILE),
        ("dir/inner.txt", EXISTING_FILE),
        (".", ROOT_ITSELF),
        ("dir", EXISTING_DIR),
        ("new.txt", MISSING_NAME),
        ("../outside/secret.txt", _all(INVALID)),
        ("../root/file.txt", _all(INVALID)),
    ):
        b.add(
            "root-link",
            path,
            tools,
            setup=setup,
            root="rootlink",
            also=None if path == "." else DIR_ALSO,
            note="the configured root is itself reached through a symlink",
        )
    b.add(
        "root-link",
        "back/file.txt",
        _all(ESCAPE),
        setup=[*setup, _link("root/back", "../rootlink")],
        root="rootlink",
        note="a link out of the root and back in through the root's own link",
    )
    for between in ("rename_root", "delete_root"):
        for path in ("file.txt", "new.txt", "."):
            # read and replace refuse "." from the arguments alone, before the root.
            tools = _codes(INVALID, INVALID, INVALID, ROOT_GONE) if path == "." else _all(ROOT_GONE)
            b.add(
                "root-gone",
                path,
                tools,
                between=between,
                also={"shell-workdir": [WORKDIR]},
                note="the root disappears between two calls on one instance",
            )
    b.add(
        "root-swapped",
        "secret.txt",
        _codes(OK, EXISTS, OK, WORKDIR),
        between="swap_root_for_link",
        reads_outside=True,
        note=(
            "the configured root path is trusted configuration: when a same-user actor "
            "replaces it with a link, later calls follow it (a documented trust boundary)"
        ),
    )


def build_corpus() -> list[Case]:
    """Every case, in a stable order with stable ids."""
    builder = _Builder()
    for part in (
        _dot_segments,
        _absolute,
        _control,
        _long,
        _unicode,
        _backslash,
        _trailing,
        _symlinks,
        _special,
        _hardlinks,
        _roots,
    ):
        part(builder)
    return builder.cases


def dump(cases: Sequence[Case]) -> str:
    """The canonical JSON text of the data file (ASCII only, one case a line)."""
    lines = [json.dumps(case, ensure_ascii=True, sort_keys=True) for case in cases]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def load_corpus() -> list[Case]:
    """The cases of the data file."""
    cases: list[Case] = json.loads(CORPUS_PATH.read_text(encoding="ascii"))
    return cases


def materialize(case: Case, base: Path, canary: str) -> None:
    """Lay out the base tree and the case's own setup under ``base``."""
    for name in BASE_DIRS:
        (base / name).mkdir(exist_ok=True)
    for name in BASE_INSIDE_FILES:
        (base / name).write_bytes(inside_bytes(name))
    for name in BASE_OUTSIDE_FILES:
        (base / name).write_bytes(sentinel_bytes(canary, name))
    for entry in case["setup"]:
        at = base / entry["at"]
        op = entry["op"]
        if op == "dir":
            at.mkdir(exist_ok=True)
        elif op == "file":
            inside = entry["at"].startswith("root/")
            content = inside_bytes(entry["at"]) if inside else sentinel_bytes(canary, entry["at"])
            at.write_bytes(content)
        elif op == "symlink":
            os.symlink(entry["target"].replace("{base}", os.fspath(base)), at)
        elif op == "hardlink":
            os.link(base / entry["target"], at)
        elif op == "fifo":
            os.mkfifo(at)
        else:  # pragma: no cover - the generator writes only the ops above
            raise ValueError("unknown setup op")


if __name__ == "__main__":
    CORPUS_PATH.parent.mkdir(exist_ok=True)
    CORPUS_PATH.write_text(dump(build_corpus()), encoding="ascii")
