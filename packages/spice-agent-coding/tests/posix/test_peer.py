"""Who connected (``_posix._net._peer``): the kernel's word on a UNIX socket's peer, and its
descent from a call's leader, with real processes (R5-10's check; the two servers are
in ``test_proxy_contained``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from spice.agent.coding._posix._net import _peer as peer
from spice.agent.coding._posix._net._peer import (
    MAXIMUM_PEER_DEPTH,
    descends_from,
    from_tree,
    peer_pid,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CHAIN = "import os, subprocess, sys\nprint(os.getpid(), flush=True)\nsys.stdin.read()\n"


def test_the_kernel_names_the_process_that_connected() -> None:
    first, second = socket.socketpair()
    with first, second:
        assert peer_pid(first) == os.getpid()
        assert from_tree(first, os.getpid())
        assert from_tree(first, os.getppid())  # the leader may lie further up


def test_a_process_descends_from_its_ancestors_only() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    sibling = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        assert descends_from(pid, pid)
        assert descends_from(pid, os.getpid())
        assert not descends_from(pid, sibling.pid)
        assert not descends_from(os.getpid(), pid)  # an ancestor is not below its child
        assert not descends_from(pid, 1)  # init leads nothing the proxy serves
    finally:
        for process in (child, sibling):
            assert process.stdin is not None
            process.stdin.close()
            process.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert not descends_from(pid, os.getpid())  # gone: its /proc entry says nothing


def test_the_depth_bound_holds_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk from this process up to its grandparent takes two links."""
    assert MAXIMUM_PEER_DEPTH == 128
    grandparent = peer._parent(os.getppid())
    assert grandparent is not None
    assert grandparent > 1
    monkeypatch.setattr(peer, "MAXIMUM_PEER_DEPTH", 2)
    assert descends_from(os.getpid(), grandparent)
    monkeypatch.setattr(peer, "MAXIMUM_PEER_DEPTH", 1)
    assert not descends_from(os.getpid(), grandparent)


def test_without_the_kernels_word_the_check_fails_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second = socket.socketpair()
    with first, second:
        monkeypatch.delattr(socket, "SO_PEERCRED")
        assert peer_pid(first) is None
        assert not from_tree(first, os.getpid())
    closed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    closed.close()
    monkeypatch.undo()
    assert peer_pid(closed) is None
