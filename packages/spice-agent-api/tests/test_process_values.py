"""Contract §4: ``Lookup``, ``Spec``, ``Outcome``, the failures, ``Cleanup`` and the protocols."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import sys
from collections.abc import Awaitable

import pytest
from api_fakes import (
    CollectingSink,
    FakeTool,
    FinishedProcess,
    RecordingReporter,
    read_only_definition,
)

from spice.agent.lifecycle import Cleanup
from spice.agent.process import (
    ExecutableNotFound,
    ExecutableResolver,
    Launcher,
    LaunchError,
    Lookup,
    Operation,
    Outcome,
    OutcomeKind,
    Process,
    ProcessFailure,
    Sink,
    Spec,
)
from spice.agent.tool import Capability, Reporter, Tool

SECRET = "hunter2-secret-value"  # noqa: S105 - a marker the diagnostics must not show
WINDOWS = sys.platform == "win32"


def native(path: str) -> str:
    """``path``, written the POSIX way, as an absolute path of this platform (``C:`` first)."""
    return "C:" + path.replace("/", "\\") if WINDOWS else path


NOT_ABSOLUTE_AND_CANONICAL = (
    [
        "work",
        ".\\work",
        "C:work",
        "\\work",
        "/work",
        "C:/work",
        "C:\\work\\",
        "C:\\work\\..\\x",
        "C:\\work\\.\\x",
        "C:\\a\\\\b",
        "",
        "C:\\a\0b",
    ]
    if WINDOWS
    else ["work", "./work", "/work/", "/work/../x", "/work/./x", "//work", "/a//b", "", "/a\0b"]
)
"""Working directories this platform does not take: relative (to the current directory or,
on Windows, to the current drive or the drive's current directory), not in the platform's
one spelling (trailing, doubled or, on Windows, forward separators, dot components), empty,
with NUL."""


def sample_spec(**changes: object) -> Spec:
    """A valid spec, with ``changes`` applied to its arguments."""
    fields: dict[str, object] = {
        "executable": native("/usr/bin/env"),
        "arguments": ["env", f"--token={SECRET}"],
        "working_directory": native("/tmp/work"),
        "environment": [f"TOKEN={SECRET}", "HOME=/home/u"],
        "stdin": SECRET.encode(),
        "stdout": CollectingSink(),
        "stderr": CollectingSink(),
        "capabilities": list(Capability),
    }
    fields.update(changes)
    return Spec(**fields)  # type: ignore[arg-type]


# --- Lookup ---------------------------------------------------------------------------------


def test_a_lookup_keeps_its_fields_with_the_environment_sorted_by_name() -> None:
    """The environment becomes a tuple sorted by name (not by whole entry)."""
    lookup = Lookup("git", native("/work"), ["PATH=/bin", "A_B=2", "A=1=x", "HOME="])
    assert "git" == lookup.requested_executable
    assert native("/work") == lookup.working_directory
    assert ("A=1=x", "A_B=2", "HOME=", "PATH=/bin") == lookup.environment


def test_a_lookup_environment_defaults_to_empty() -> None:
    """No environment means an empty tuple."""
    assert () == Lookup("ls", native("/")).environment


@pytest.mark.parametrize("workdir", NOT_ABSOLUTE_AND_CANONICAL)
def test_a_lookup_workdir_must_be_absolute_and_canonical(workdir: str) -> None:
    """Relative, trailing-slash, dotted, doubled-slash, empty and NUL workdirs are rejected."""
    with pytest.raises(ValueError, match="working directory"):
        Lookup("ls", workdir)


@pytest.mark.parametrize(
    "workdir", ["C:\\", "C:\\work", "D:\\a b\\c"] if WINDOWS else ["/", "/work", "/a b/c"]
)
def test_a_lookup_workdir_absolute_and_canonical_is_kept(workdir: str) -> None:
    """The platform's root and absolute paths in its one spelling are taken as given."""
    assert workdir == Lookup("ls", workdir).working_directory


@pytest.mark.parametrize(
    ("environment", "rule"),
    [
        (["A=1", "A=2"], "unique"),
        (["NOVALUE"], "NAME=value"),
        (["=value"], "NAME=value"),
        (["A=\0"], "without NUL"),
        ([b"A=1"], "strings"),
        ("A=1", "collection"),
        (None, "collection"),
    ],
)
def test_a_lookup_environment_breaking_a_rule_is_rejected(environment: object, rule: str) -> None:
    """Duplicate names, entries without NAME=, NUL and non-collections are rejected."""
    with pytest.raises(ValueError, match=rule):
        Lookup("ls", native("/work"), environment)  # type: ignore[arg-type]


@pytest.mark.parametrize("requested", ["", "a\0b", None])
def test_a_lookup_needs_a_plain_requested_executable(requested: object) -> None:
    """An empty, NUL-bearing or non-text executable is rejected."""
    with pytest.raises(ValueError, match="requested executable"):
        Lookup(requested, native("/work"))  # type: ignore[arg-type]


def test_a_lookup_repr_contains_no_value() -> None:
    """The repr tells neither the executable, the workdir nor any environment value."""
    text = repr(Lookup(f"/opt/{SECRET}/tool", native(f"/home/{SECRET}"), [f"TOKEN={SECRET}"]))
    assert SECRET not in text
    assert "1 entries" in text


def test_a_lookup_is_immutable_and_comparable() -> None:
    """Lookups are frozen values; equal inputs give equal lookups."""
    lookup = Lookup("ls", native("/work"), ["B=1", "A=2"])
    assert Lookup("ls", native("/work"), ["A=2", "B=1"]) == lookup
    with pytest.raises(dataclasses.FrozenInstanceError):
        lookup.working_directory = "/"  # type: ignore[misc]


# --- Spec -----------------------------------------------------------------------------------


def test_a_spec_keeps_its_fields() -> None:
    """Every field is kept; arguments become a tuple, capabilities a sorted tuple."""
    out, err = CollectingSink(), CollectingSink()
    spec = Spec(native("/bin/true"), ["true"], native("/w"), ["Z=1", "A=2"], b"", out, err)
    assert (native("/bin/true"), ("true",), native("/w"), ("A=2", "Z=1"), b"") == (
        spec.executable,
        spec.arguments,
        spec.working_directory,
        spec.environment,
        spec.stdin,
    )
    assert (out, err) == (spec.stdout, spec.stderr)
    assert (Capability.PROCESS_EXECUTE,) == spec.capabilities
    full = sample_spec(capabilities=reversed(list(Capability)))
    assert tuple(sorted(Capability)) == full.capabilities


def test_a_spec_must_declare_process_execute() -> None:
    """Capabilities without ``process.execute`` are rejected."""
    with pytest.raises(ValueError, match=r"process\.execute"):
        sample_spec(capabilities=[Capability.FILESYSTEM_READ])
    with pytest.raises(ValueError, match=r"process\.execute"):
        sample_spec(capabilities=[])


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"executable": "env"}, "executable"),
        ({"executable": native("/usr/bin/../bin/env")}, "executable"),
        ({"working_directory": "w"}, "working directory"),
        ({"arguments": "env"}, "arguments"),
        ({"arguments": ["a\0"]}, "arguments"),
        ({"arguments": [1]}, "arguments"),
        ({"environment": ["X"]}, "NAME=value"),
        ({"stdin": "text"}, "stdin"),
        ({"stdin": bytearray(b"x")}, "stdin"),
        ({"stdout": object()}, "sinks"),
        ({"stderr": None}, "sinks"),
        ({"capabilities": "process.execute"}, "capabilities"),
        ({"capabilities": ["process.run"]}, "known capabilities"),
    ],
)
def test_a_spec_breaking_a_rule_is_rejected(changes: dict[str, object], rule: str) -> None:
    """Relative paths, bad arguments, text stdin, non-sinks and unknown capabilities fail."""
    with pytest.raises(ValueError, match=rule):
        sample_spec(**changes)


def test_a_spec_repr_contains_no_argument_environment_or_input() -> None:
    """The repr tells counts, never argv, environment values, stdin or paths."""
    text = repr(
        sample_spec(executable=native(f"/opt/{SECRET}"), working_directory=native(f"/w/{SECRET}"))
    )
    assert SECRET not in text
    assert "arguments=<2>" in text


def test_a_spec_rejected_for_a_bad_field_says_nothing_of_the_values() -> None:
    """A rejection message carries the rule, never the offending value."""
    with pytest.raises(ValueError, match="arguments") as caught:
        sample_spec(arguments=[f"{SECRET}\0"])
    assert SECRET not in str(caught.value)


# --- Outcome --------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 255, 2**32 - 1])
def test_an_exit_code_within_the_range_is_accepted(code: int) -> None:
    """Exit codes 0..2**32-1 are accepted; only 0 is successful."""
    outcome = Outcome.exited(code)
    assert (OutcomeKind.EXITED, code, code == 0) == (
        outcome.kind,
        outcome.exit_code,
        outcome.successful,
    )


@pytest.mark.parametrize("code", [-1, 2**32, True, 1.0, "0", None])
def test_an_exit_code_outside_the_range_or_not_an_integer_is_rejected(code: object) -> None:
    """-1, 2**32, booleans, floats, text and None are rejected."""
    with pytest.raises(ValueError, match="exit code"):
        Outcome.exited(code)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [(Outcome.signaled(), OutcomeKind.SIGNALED), (Outcome.unknown(), OutcomeKind.UNKNOWN)],
)
def test_signaled_and_unknown_outcomes_have_no_exit_code(
    outcome: Outcome, kind: OutcomeKind
) -> None:
    """A signal or an unknown end has no exit code and is never successful."""
    assert (kind, None, False) == (outcome.kind, outcome.exit_code, outcome.successful)


def test_only_an_exited_outcome_may_carry_an_exit_code() -> None:
    """Building a signaled outcome with a code, or an unknown kind, is rejected."""
    with pytest.raises(ValueError, match="only an exited outcome"):
        Outcome(OutcomeKind.SIGNALED, 9)
    with pytest.raises(ValueError, match="OutcomeKind"):
        Outcome("crashed")  # type: ignore[arg-type]
    assert Outcome(OutcomeKind.EXITED, 0) == Outcome("exited", 0)  # type: ignore[arg-type]


def test_outcome_kinds_have_the_contract_spellings() -> None:
    """``exited``, ``signaled``, ``unknown``."""
    assert ["exited", "signaled", "unknown"] == [k.value for k in OutcomeKind]


# --- failures -------------------------------------------------------------------------------


def test_operations_have_the_contract_spellings() -> None:
    """The six operations are spelled as the contract writes them."""
    assert ["launch", "resolve", "result", "request_stop", "force_kill", "wait"] == [
        o.value for o in Operation
    ]


@pytest.mark.parametrize("operation", list(Operation))
def test_a_process_failure_is_retryable_unless_known_terminal(operation: Operation) -> None:
    """The default is retryable; ``retryable=False`` is kept; text names only the operation."""
    assert ProcessFailure(operation).retryable
    failure = ProcessFailure(operation.value, retryable=False)
    assert (operation, False) == (failure.operation, failure.retryable)
    assert f"process operation {operation.value} failed" == str(failure)
    clone = pickle.loads(pickle.dumps(failure))  # noqa: S301 - our own bytes
    assert (operation, False) == (clone.operation, clone.retryable)


@pytest.mark.parametrize(
    ("operation", "retryable"), [("explode", True), (None, True), ([], True), ("wait", 1)]
)
def test_a_process_failure_rejects_unknown_operations_and_non_bool_retry(
    operation: object, retryable: object
) -> None:
    """Unknown operations and a non-bool ``retryable`` are ValueErrors."""
    with pytest.raises(ValueError, match=r"operation|retryable"):
        ProcessFailure(operation, retryable)  # type: ignore[arg-type]


def test_a_launch_error_carries_the_partial_process_for_its_caller() -> None:
    """``process`` is None by default and the created process when given."""
    assert LaunchError().process is None
    assert LaunchError(process=None).process is None
    partial = FinishedProcess(Outcome.unknown())
    error = LaunchError(process=partial)
    assert partial is error.process
    assert "the process could not be started" == str(error)


def test_executable_not_found_has_a_fixed_message() -> None:
    """The not-found error names nothing of the lookup."""
    assert "no executable matches the requested name" == str(ExecutableNotFound())


# --- protocols ------------------------------------------------------------------------------


class FixedResolver:
    """A hand-written resolver: one absolute path, or not found."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    async def resolve(self, lookup: Lookup) -> str:
        """Return the fixed path or raise ``ExecutableNotFound``."""
        if self.path is None:
            raise ExecutableNotFound
        return self.path


class PartialLauncher:
    """A hand-written launcher whose start fails after creating a process."""

    def __init__(self) -> None:
        self.created = FinishedProcess(Outcome.signaled())

    async def start(self, spec: Spec) -> Process:
        """Fail, handing the partial process over."""
        raise LaunchError(process=self.created)


def test_hand_written_classes_satisfy_the_runtime_checkable_protocols() -> None:
    """Plain classes satisfy Tool, Reporter, Sink, Process, ExecutableResolver and Launcher."""
    assert isinstance(FakeTool(read_only_definition()), Tool)
    assert isinstance(RecordingReporter(), Reporter)
    assert isinstance(CollectingSink(), Sink)
    assert isinstance(FinishedProcess(Outcome.exited(0)), Process)
    assert isinstance(FixedResolver("/bin/true"), ExecutableResolver)
    assert isinstance(PartialLauncher(), Launcher)


def test_objects_missing_a_method_do_not_satisfy_the_protocols() -> None:
    """An object without the protocol's methods is not an instance of it."""
    for protocol in (Tool, Reporter, Sink, Process, ExecutableResolver, Launcher):
        assert not isinstance(object(), protocol)


async def test_a_resolver_and_a_launcher_are_used_through_their_protocols() -> None:
    """Resolve then start: not found and a partial launch are typed, owned failures."""
    lookup = Lookup("true", native("/"))
    assert "/bin/true" == await FixedResolver("/bin/true").resolve(lookup)
    with pytest.raises(ExecutableNotFound):
        await FixedResolver(None).resolve(lookup)
    launcher = PartialLauncher()
    with pytest.raises(LaunchError) as caught:
        await launcher.start(
            Spec(
                native("/bin/true"),
                ["true"],
                native("/"),
                [],
                b"",
                CollectingSink(),
                CollectingSink(),
            )
        )
    owned = caught.value.process
    assert owned is launcher.created
    assert isinstance(owned, Process)
    await owned.wait_exit()
    await owned.force_kill()
    await owned.wait()
    assert (True, OutcomeKind.SIGNALED, 1) == (
        owned.done(),
        owned.result().kind,
        launcher.created.kills,
    )


async def test_a_failing_join_raises_a_process_failure() -> None:
    """A join that cannot prove release raises ProcessFailure(wait)."""
    process = FinishedProcess(Outcome.exited(0), join_fails=True)
    await process.request_stop()
    with pytest.raises(ProcessFailure) as caught:
        await process.wait()
    assert (Operation.WAIT, False, 1) == (
        caught.value.operation,
        caught.value.retryable,
        process.stops,
    )


async def test_a_cleanup_is_any_idempotent_coroutine_function() -> None:
    """A Cleanup is awaited bare, may run twice and concurrently, bounded by the caller."""
    runs: list[int] = []
    lock = asyncio.Lock()

    async def cleanup() -> None:
        async with lock:
            runs.append(len(runs))

    typed: Cleanup = cleanup
    async with asyncio.timeout(5):
        await asyncio.gather(typed(), typed())
        await typed()
    assert [0, 1, 2] == runs
    pending: Awaitable[None] = typed()
    await pending
    assert 4 == len(runs)
