"""What a process says about its sandbox's network becomes answer fields, checked
(``_sandbox_fields``); a hint reaches only a contained command's failed answer."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
from fakes import AnsweringLauncher, FakeProcess, FakeResolver, content_of, shell_call

from spice.agent.process import Outcome
from spice.agent.tools.coding import Config
from spice.agent.tools.coding._ownership import Timing
from spice.agent.tools.coding._sandbox_fields import (
    LISTED_PATH_BYTES,
    MAXIMUM_HOST_BYTES,
    MAXIMUM_PATH_BYTES,
    MAXIMUM_REFUSED_HOSTS,
    MAXIMUM_RESTORED,
    network_fields,
    protected_fields,
    sandbox_fields,
)
from spice.agent.tools.coding._shell import build_shell

HINT = (
    "The sandbox's proxy refused example.com:443: start the server with --allow-domain example.com."
)


class Reporting:
    """A process with the two optional attributes (values or exceptions to raise)."""

    def __init__(self, refused: object, hint: object, outcome: Outcome) -> None:
        self.inner = FakeProcess(outcome=outcome)
        self._refused = refused
        self._hint = hint

    @property
    def network_refused(self) -> object:
        if isinstance(self._refused, BaseException):
            raise self._refused
        return self._refused

    @property
    def sandbox_hint(self) -> object:
        if isinstance(self._hint, BaseException):
            raise self._hint
        return self._hint

    def done(self) -> bool:
        return self.inner.done()

    async def wait_exit(self) -> None:
        await self.inner.wait_exit()

    def result(self) -> Outcome:
        return self.inner.result()

    async def request_stop(self) -> None:
        await self.inner.request_stop()

    async def force_kill(self) -> None:
        await self.inner.force_kill()

    async def wait(self) -> None:
        await self.inner.wait()


async def answer(tmp_path: Path, process: Reporting) -> dict[str, object]:
    tool, _ = build_shell(
        Config(tmp_path),
        FakeResolver(),
        AnsweringLauncher(process),
        timing=Timing(),
        grace_seconds=0.01,
        posix=True,
    )
    return content_of(await tool.execute(shell_call({"argv": ["x"]})))


async def test_refusals_reach_a_failed_commands_answer(tmp_path: Path) -> None:
    process = Reporting((("example.com:443", "[::1]:80"), 5), HINT, Outcome.exited(6))
    content = await answer(tmp_path, process)
    assert content["ok"] is False
    assert content["network_refused"] == ["example.com:443", "[::1]:80"]
    assert content["network_refused_count"] == 5
    assert "sandbox_hint" not in content  # this launcher contains nothing: no hint


async def test_a_successful_command_gets_the_refusals_but_no_hint(tmp_path: Path) -> None:
    process = Reporting((("example.com:443",), 1), HINT, Outcome.exited(0))
    content = await answer(tmp_path, process)
    assert content["ok"] is True
    assert content["network_refused"] == ["example.com:443"]
    assert "sandbox_hint" not in content


async def test_nothing_to_say_is_no_field(tmp_path: Path) -> None:
    content = await answer(tmp_path, Reporting(((), 0), None, Outcome.exited(1)))
    assert not {"network_refused", "network_refused_count", "sandbox_hint"} & set(content)


@pytest.mark.parametrize(
    "refused",
    [
        None,
        ("a:1", 1),
        (["a:1"], 1),
        (("a:1",), True),
        (("a:1",), 0),
        (("a:1", "b:2"), 1),
        (("bad host:1",), 1),
        (("\x1b[31m:1",), 1),
        (("x" * (MAXIMUM_HOST_BYTES + 1),), 1),
        (tuple(f"h{n}:1" for n in range(MAXIMUM_REFUSED_HOSTS + 1)), 17),
        (("a:1",), 2**31),
        OSError("x"),
    ],
)
def test_a_refusal_report_out_of_bounds_is_no_field(refused: object) -> None:
    assert network_fields(Reporting(refused, None, Outcome.exited(0))) == {}


def test_the_refusal_bounds_hold_at_their_edge() -> None:
    hosts = tuple(f"{'x' * (MAXIMUM_HOST_BYTES - 5)}:{n:04d}" for n in range(MAXIMUM_REFUSED_HOSTS))
    fields = network_fields(Reporting((hosts, 2**31 - 1), None, Outcome.exited(0)))
    assert fields["network_refused"] == list(hosts)
    assert fields["network_refused_count"] == 2**31 - 1


class Restoring:
    """A process whose ``protected_restored`` is a value or raises."""

    def __init__(self, restored: object) -> None:
        self._restored = restored

    @property
    def protected_restored(self) -> object:
        if isinstance(self._restored, BaseException):
            raise self._restored
        return self._restored


def test_what_was_put_back_becomes_two_fields() -> None:
    fields = protected_fields(Restoring(((".git/config", ".mcp.json"), 20)))
    assert fields == {
        "protected_restored": [".git/config", ".mcp.json"],
        "protected_restored_count": 20,
    }
    assert protected_fields(Restoring(((), 0))) == {}
    both = sandbox_fields(Restoring(((".envrc",), 1)))
    assert both == {"protected_restored": [".envrc"], "protected_restored_count": 1}


@pytest.mark.parametrize(
    "restored",
    [
        None,
        (".envrc", 1),
        ([".envrc"], 1),
        ((".envrc",), True),
        ((".envrc",), 0),
        ((".envrc", ".idea"), 1),
        (("",), 1),
        (("a\nb",), 1),
        (("\ud800",), 1),
        (tuple(f"d{n}/.envrc" for n in range(MAXIMUM_RESTORED + 1)), 17),
        (("x" * (MAXIMUM_PATH_BYTES + 1),), 1),
        ((".envrc",), 2**31),
        OSError("x"),
    ],
)
def test_a_put_back_report_out_of_bounds_is_no_field(restored: object) -> None:
    assert protected_fields(Restoring(restored)) == {}


def test_the_put_back_bounds_hold_at_their_edge() -> None:
    size = MAXIMUM_PATH_BYTES // MAXIMUM_RESTORED
    paths = tuple(f"{n:04d}" + "y" * (size - 4) for n in range(MAXIMUM_RESTORED))
    fields = protected_fields(Restoring((paths, 2**31 - 1)))
    assert fields["protected_restored"] == list(paths)
    assert fields["protected_restored_count"] == 2**31 - 1
    assert protected_fields(Restoring((("é" * (MAXIMUM_PATH_BYTES // 2),), 1))) != {}


class Staging(Reporting):
    """A process that says what its stage did (``stage_fields``), a value or an exception."""

    def __init__(self, fields: object) -> None:
        super().__init__(((), 0), None, Outcome.exited(0))
        self._fields = fields

    @property
    def stage_fields(self) -> object:
        if isinstance(self._fields, BaseException):
            raise self._fields
        return self._fields


STAGED: Final = {
    "staged": True,
    "changes": {"added": 1, "modified": 0, "deleted": 0, "paths": ["A n.txt"]},
    "changes_applied": True,
    "journal_entry": 7,
}


async def test_a_staged_answer_names_its_call_and_its_journal_entry(tmp_path: Path) -> None:
    """Contract 13.2: a staged shell answer carries ``call_id`` (the call's id, as every
    ``replace`` answer) beside ``changes`` and the journal entry ``undo`` takes."""
    content = await answer(tmp_path, Staging(STAGED))
    assert content["call_id"] == shell_call({"argv": ["x"]}).id
    assert content["journal_entry"] == 7
    assert content["changes"] == STAGED["changes"]


@pytest.mark.parametrize(
    "fields",
    [
        {"staged": False, "staged_reason": "commands run without user namespaces"},
        {**STAGED, "changes": {"added": 1}},
        {**STAGED, "journal_entry": -1},
        {**STAGED, "conflicts": ["x" * (LISTED_PATH_BYTES + 1)]},
        {**STAGED, "surprise": 1},
        OSError("x"),
    ],
)
async def test_an_unstaged_or_malformed_stage_names_no_call(tmp_path: Path, fields: object) -> None:
    """``staged: false`` (said as is) or a malformed stage (said not at all): no ``call_id``."""
    content = await answer(tmp_path, Staging(fields))
    assert "call_id" not in content
    if isinstance(fields, dict) and fields.get("staged") is False:
        assert content["staged"] is False
    else:
        assert "changes" not in content
