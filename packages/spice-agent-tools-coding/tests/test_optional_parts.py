"""A launcher's and a process's optional parts are protocols (``_optional``, review D15),
each on its own: one part present says nothing of the others, and a part whose property
raises is read as saying nothing (the readers in ``_shell_launcher`` and ``_sandbox_fields``)."""

from __future__ import annotations

from spice.agent.tools.coding import _optional
from spice.agent.tools.coding._sandbox_fields import network_fields, protected_fields
from spice.agent.tools.coding._shell_launcher import (
    launcher_contained,
    launcher_containment,
    process_cleaned_up,
    process_hint,
)


class Nothing:
    pass


class OnlyContained:
    contained = True


class Broken:
    @property
    def contained(self) -> bool:
        raise RuntimeError("broken")

    @property
    def cleanup_completed(self) -> bool:
        raise RuntimeError("broken")


class Sandboxed:
    cleanup_completed = False
    sandbox_hint = "pass --allow-domain example.org"
    network_refused = (("example.org:443",), 3)
    protected_restored = ((".mcp.json",), 1)


def test_has_part_never_runs_the_property() -> None:
    """The shell reads ``contained`` once per call: asking whether it is there must not."""
    broken = Broken()
    assert _optional.says_contained(broken)  # no RuntimeError
    assert not _optional.hints_sandbox(broken)


def test_each_part_is_its_own_protocol() -> None:
    assert isinstance(OnlyContained(), _optional.SaysContained)
    assert not isinstance(OnlyContained(), _optional.DescribesContainment)
    assert not isinstance(Nothing(), _optional.SaysContained)
    process = Sandboxed()
    for part in (
        _optional.ReportsCleanup,
        _optional.HintsSandbox,
        _optional.ReportsNetworkRefused,
        _optional.ReportsProtectedRestored,
    ):
        assert isinstance(process, part)
        assert not isinstance(Nothing(), part)


def test_the_readers_take_a_present_part_and_ignore_an_absent_one() -> None:
    assert launcher_contained(OnlyContained()) is True
    assert launcher_containment(OnlyContained()) is None
    assert launcher_contained(Nothing()) is False
    assert process_cleaned_up(Nothing()) is True  # absent counts as done
    process = Sandboxed()
    assert process_cleaned_up(process) is False
    assert process_hint(process) == "pass --allow-domain example.org"
    assert network_fields(process) == {
        "network_refused": ["example.org:443"],
        "network_refused_count": 3,
    }
    assert protected_fields(process)["protected_restored_count"] == 1


def test_a_part_that_raises_says_nothing() -> None:
    assert launcher_contained(Broken()) is False
    assert process_cleaned_up(Broken()) is False  # it cannot vouch for the cleanup
