"""The Windows launcher's pipes follow the ``Sink`` rule (review D12), checked anywhere.

``_Pipes`` is the asyncio protocol the Proactor feeds on Windows; it is plain Python, so
its rule is checked on every platform (the whole launcher runs under Wine and on
windows-latest: ``test_windows_launcher.py``). A sink that raises gets nothing more, the
other stream is delivered as before, and nothing is left for the join to fail on: as on
POSIX (``tests/posix/test_posix_launcher.py``, the failing sink).
"""

from __future__ import annotations

from procutil import Collect, Failing

from spice.agent.coding._windows._launcher import _Pipes


async def test_a_failing_sink_is_cut_and_the_other_stream_delivered() -> None:
    failing, err = Failing(), Collect()
    pipes = _Pipes(failing, err)
    for chunk in (b"a", b"b", b"c"):
        pipes.pipe_data_received(1, chunk)
        pipes.pipe_data_received(2, chunk)
    assert failing.calls == 1  # cut at its first failure
    assert bytes(err.data) == b"abc"
    assert not hasattr(pipes, "failed")  # nothing for the join to fail on


async def test_data_for_an_unknown_descriptor_is_ignored() -> None:
    out, err = Collect(), Collect()
    pipes = _Pipes(out, err)
    pipes.pipe_data_received(3, b"x")
    pipes.pipe_data_received(1, b"y")
    assert (bytes(out.data), bytes(err.data)) == (b"y", b"")
