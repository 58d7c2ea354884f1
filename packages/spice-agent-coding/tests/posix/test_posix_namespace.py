"""bwrap's info document through the sans-IO ``InfoParser`` (review C4), without processes.

bwrap writes its ``--info-fd`` document in several ``write``s; a reader sees any split of
it. Whatever the split, the parser names the pid only at end of file, and then exactly the
one of the whole document.
"""

from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spice.agent.coding._posix._namespace import INFO_BOUND_BYTES, InfoParser

UNDER_LOAD = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Hypothesis without its per-example deadline: the machine is shared (no timing assertions)."""

DOCUMENT = (
    b'{\n    "child-pid": 4242,\n    "cgroup-namespace": 4026531835,\n'
    b'    "ipc-namespace": 4026532560\n}\n'
)


def _parse(chunks: list[bytes]) -> tuple[list[int | None], int | None]:
    parser = InfoParser()
    seen = []
    for chunk in chunks:
        parser.feed(chunk)
        seen.append(parser.pid)
    return seen, parser.eof()


@UNDER_LOAD
@given(st.lists(st.integers(0, len(DOCUMENT)), max_size=8))
def test_any_split_of_the_document_gives_its_pid_at_the_end_only(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(DOCUMENT)]
    chunks = [DOCUMENT[a:b] for a, b in itertools.pairwise(points)]
    seen, pid = _parse(chunks)
    assert pid == 4242
    assert all(p is None for p in seen)  # a prefix never names anything


@UNDER_LOAD
@given(st.integers(1, 2**31 - 1), st.integers(0, 64))
def test_the_pid_of_any_document_is_read_whole(pid: int, cut: int) -> None:
    document = json.dumps({"child-pid": pid, "net-namespace": 1}).encode()
    cut = min(cut, len(document))
    assert _parse([document[:cut], document[cut:]])[1] == pid


def test_a_prefix_at_end_of_file_names_nothing() -> None:
    assert _parse([b'{"child-pid": 42'])[1] is None


def test_documents_without_a_positive_integer_pid_name_nothing() -> None:
    for document in (
        b"",
        b'{"child-pid": "7"}',
        b'{"child-pid": 0}',
        b'{"child-pid": true}',
        b"[1]",
        b"\xff",
    ):
        assert _parse([document])[1] is None, document


def test_the_bound_holds_and_one_byte_past_it_names_nothing() -> None:
    padding = INFO_BOUND_BYTES - len(b'{"child-pid": 7, "x": ""}')
    at_bound = b'{"child-pid": 7, "x": "' + b"a" * padding + b'"}'
    assert len(at_bound) == INFO_BOUND_BYTES
    assert _parse([at_bound])[1] == 7
    past = b'{"child-pid": 7, "x": "' + b"a" * (padding + 1) + b'"}'
    assert _parse([past[:100], past[100:]])[1] is None


def test_end_of_file_is_final_and_later_bytes_are_ignored() -> None:
    parser = InfoParser()
    parser.feed(DOCUMENT)
    assert parser.eof() == 4242
    parser.feed(b"garbage")
    assert parser.eof() == 4242
    assert parser.ended


@UNDER_LOAD
@given(st.binary(max_size=INFO_BOUND_BYTES + 16))
def test_any_bytes_give_a_positive_pid_or_none(data: bytes) -> None:
    pid = _parse([data])[1]
    assert pid is None or pid > 0
