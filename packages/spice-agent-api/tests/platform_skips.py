"""Which tests are POSIX-only: skipped on Windows, with the reason, in one place.

A pytest plugin (the root ``conftest.py`` loads it). On Windows, every module beneath a
``tests/posix/`` directory (it mirrors the ``_posix`` package, whose subject does not exist
there) and every module listed in ``POSIX_ONLY_MODULES`` is reported as one skipped module
with its reason (it is never imported: many read POSIX-only names at import), and a test
listed in ``POSIX_ONLY_TESTS`` is skipped with its reason. Everything else runs on both
platforms. On other platforms the plugin changes nothing.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Final

import pytest

WINDOWS: Final = sys.platform == "win32"

ROOT: Final = (
    "the POSIX side of read and replace (modes, FIFOs, symlinks, the POSIX syscall seam, "
    "the Linux inline route); the Windows root has its own tests (test_windows_*.py)"
)
LAUNCHER: Final = "the POSIX launcher, resolver and sandbox (Windows has its own launcher)"
SIGNALS: Final = "POSIX signals, process groups, /proc or file descriptors"
OWNERSHIP: Final = "POSIX owners, modes and setuid bits"
STRACE: Final = "strace (Linux)"
POSIX_PATHS: Final = "POSIX executables (/bin/sh, true) and paths"
POSIX_CLI: Final = (
    "expects the POSIX answers (read and replace working, Landlock's warnings, the four-name "
    "allowlist, POSIX roots); Windows' CLI is tested in test_windows_serve.py and "
    "test_platform.py"
)
PLATFORM: Final = "the POSIX platform is the default (test_platform.py checks Windows')"
MESSAGES_POSIX: Final = (
    "the expected words are written with POSIX paths (a Windows path is shown with its "
    "backslashes escaped): the same refusals are made there"
)
PEAK_RSS: Final = "a process's peak resident memory, read from /proc/PID/status"
EXAMPLES: Final = "the examples group (agent frameworks) is not installed (make test-windows)"
JOURNAL: Final = (
    "the worktree's journal's descriptor-based engine (contract 13.2), POSIX modes, owners, "
    "flock and signals; on Windows, where only replace is journaled, the journal runs in "
    "tests/windows/test_windows_journal.py and the app's test_windows_journal_cli.py "
    "(test_replace_journal runs the Windows route's pure-Python parts as win32 on POSIX)"
)

POSIX_DIRECTORY: Final = "posix"
"""The test directory that mirrors the ``_posix`` package: all of it is POSIX-only."""
POSIX_TREE: Final = (
    "beneath tests/posix/, the POSIX launcher, sandbox, stage, proxy and supervisor "
    "(Windows has its own launcher, tested beneath tests/windows/)"
)

HTTP_SERVE_POSIX: Final = (
    "a served HTTP process stopped by SIGTERM/SIGINT and killed by SIGKILL, read through "
    "/proc, its token file opened by mode bits: POSIX subjects (under Windows the transport "
    "runs in the http leg of test_mcp_stdio and test_mcp_edits, test_http_app, test_http_gate "
    "and test_http_tokens)"
)

POSIX_ONLY_MODULES: Final[dict[str, str]] = {
    # spice-agent-tools-coding
    "test_absolute_paths.py": ROOT,
    "test_cancellation_load.py": ROOT,
    "test_read.py": ROOT,
    "test_read_file_sha256.py": ROOT,
    "test_read_inline.py": ROOT,
    "test_read_properties.py": ROOT,
    "test_replace.py": ROOT,
    "test_replace_edits.py": ROOT,
    "test_replace_ownership.py": OWNERSHIP,
    "test_replace_parents.py": ROOT,
    "test_replace_races.py": ROOT,
    "test_replace_strace.py": STRACE,
    "test_replace_round3.py": ROOT,
    "test_regular.py": ROOT,
    "test_read_fanotify.py": "fanotify (Linux)",
    "test_hardening.py": ROOT,
    "test_root.py": ROOT,
    "test_root_cached.py": ROOT,
    "test_root_race.py": ROOT,
    # spice-agent-coding
    "test_adv_crash.py": SIGNALS,
    "test_adv_race.py": SIGNALS,
    "test_adv_hostility.py": SIGNALS,
    "test_adv_fuzz.py": ROOT,
    "test_adv_traversal.py": ROOT,
    "test_lifetime.py": SIGNALS,
    "test_network_policy.py": LAUNCHER,
    "test_proxy_http.py": LAUNCHER,
    "test_http_serve.py": HTTP_SERVE_POSIX,
    "test_journal.py": JOURNAL,
    "test_journal_whole.py": JOURNAL,
    "test_journal_index.py": JOURNAL,
    "test_journal_records.py": JOURNAL,
    "test_journal_devices.py": JOURNAL,
    "test_journal_mark.py": JOURNAL,
    "test_journal_sync.py": JOURNAL,
    "test_replace_journal.py": JOURNAL,
    "test_journal_cli.py": JOURNAL,
    "test_mcp_journal.py": JOURNAL,
    "test_host_config.py": (
        "the host's installer configuration read for the POSIX proxy's presets (POSIX homes "
        "and files)"
    ),
    "test_settings_file.py": (
        "the settings file judged by its POSIX owner and mode bits (on Windows neither is "
        "judged: docs/platform.md says so)"
    ),
    "test_settings_reload.py": (
        "the settings file judged by its POSIX owner and mode bits (on Windows neither is "
        "judged: docs/platform.md says so)"
    ),
    "test_startup_imports.py": (
        "on Windows pywin32's .pth loads pywin32_bootstrap at every start, before our code "
        "(site), so the count of third-party modules differs"
    ),
    # spice-agent-api
}
"""Test modules (by file name) whose subject exists only on POSIX systems."""

POSIX_ONLY_TESTS: Final[dict[str, str]] = {
    "packages/spice-agent-coding/tests/mcp/test_http_tokens.py::"
    "test_an_unusable_file_is_refused_at_start": MESSAGES_POSIX,
    "packages/spice-agent-coding/tests/test_refusals_teach_cli.py::"
    "test_a_missing_token_file_names_its_path_and_token_add": MESSAGES_POSIX,
    "packages/spice-agent-coding/tests/test_refusals_teach_cli.py::"
    "test_an_allow_write_refusal_names_the_path_and_why": MESSAGES_POSIX,
    "packages/spice-agent-coding/tests/mcp/test_stdin_exit.py::"
    "test_the_console_script_runs_console": (
        "the console script is a Python file on POSIX; on Windows an .exe launcher"
    ),
    "packages/spice-agent-coding/tests/settings/test_unprotect.py::"
    "test_the_settings_files_unprotect_joins_the_flags_and_is_refused_by_its_line": (POSIX_PATHS),
    "packages/spice-agent-coding/tests/settings/test_unprotect.py::"
    "test_unprotect_never_follows_a_link_a_call_made": (
        "a symbolic link made as a call would, and the settings file's POSIX mode bits"
    ),
    "packages/spice-agent-tools-coding/tests/test_config.py::"
    "test_the_root_is_normalized_lexically": "POSIX path spelling (//, /)",
    "packages/spice-agent-tools-coding/tests/test_shell.py::test_lookup_and_spec_are_exact": (
        POSIX_PATHS
    ),
    "packages/spice-agent-coding/tests/test_compose.py::"
    "test_resolve_config_uses_the_environment_without_a_flag": POSIX_PATHS,
    "packages/spice-agent-coding/tests/test_compose.py::"
    "test_the_shell_fallback_gets_the_posix_platform_by_default": PLATFORM,
    "packages/spice-agent-coding/tests/test_compose_dishka.py::"
    "test_the_fallback_platform_is_posix": PLATFORM,
    "packages/spice-agent-tools-coding/tests/test_replace_arguments.py::"
    "test_any_argument_object_gives_a_result_and_stays_inside_the_root": ROOT,
    "packages/spice-agent-tools-coding/tests/test_replace_arguments.py::"
    "test_any_json_document_gives_a_result": ROOT,
    "packages/spice-agent-tools-coding/tests/test_schemas.py::"
    "test_a_required_property_given_as_null_is_missing": ROOT,
    "packages/spice-agent-tools-coding/tests/test_schemas.py::"
    "test_read_with_every_optional_property_null_is_the_default_read": ROOT,
    "packages/spice-agent-tools-coding/tests/test_settling.py::"
    "test_a_replace_cancelled_again_and_again_waits_for_its_worker_without_spinning": ROOT,
    "packages/spice-agent-tools-coding/tests/test_settling.py::"
    "test_a_replace_worker_past_the_bound_is_still_answered_honestly": ROOT,
    "packages/spice-agent-tools-coding/tests/test_settling.py::"
    "test_a_replace_at_loop_shutdown_keeps_its_interruption_and_its_lease": ROOT,
    "packages/spice-agent-coding/tests/mcp/test_mcp_pipes.py::"
    "test_divert_points_the_descriptors_away_while_serving_and_restores_them": (
        "which file a descriptor names, told by st_ino (0 for every pipe on Windows)"
    ),
    "packages/spice-agent-coding/tests/mcp/test_mcp_pipes.py::"
    "test_a_divert_that_fails_at_any_step_leaks_nothing_and_restores_both": (
        "the open descriptors, listed in /proc/self/fd"
    ),
    "packages/spice-agent-coding/tests/mcp/test_mcp_shutdown.py::"
    "test_a_command_past_the_grace_period_is_stopped_and_the_server_exits_0": SIGNALS,
    "packages/spice-agent-coding/tests/mcp/test_mcp_load.py::"
    "test_pipelined_large_requests_keep_the_peak_rss_growth_bounded": PEAK_RSS,
    "packages/spice-agent-coding/tests/mcp/test_mcp_load.py::"
    "test_two_thousand_pipelined_large_requests_keep_the_peak_rss_growth_bounded": PEAK_RSS,
    "packages/spice-agent-coding/tests/mcp/test_mcp_shutdown.py::"
    "test_a_cancelled_replace_waits_out_its_slow_worker_without_spinning": ROOT,
    "packages/spice-agent-coding/tests/mcp/test_mcp_shutdown.py::"
    "test_a_cancelled_command_that_ignores_sigterm_is_waited_out_without_spinning": SIGNALS,
    "packages/spice-agent-coding/tests/test_settling_anyio.py::"
    "test_a_tool_cancelled_in_an_anyio_scope_waits_for_its_worker_idle": ROOT,
    "packages/spice-agent-coding/tests/mcp/test_gemini_clients.py::"
    "test_without_its_dialect_gemini_cli_declares_what_the_gemini_api_refuses": (
        "the server variant it starts is a /bin/sh wrapper"
    ),
    "packages/spice-agent-coding/tests/test_cli_root.py::test_a_link_to_slash_is_slash": (
        "a symbolic link to / (Wine makes none)"
    ),
    "packages/spice-agent-coding/tests/test_cli_root.py::"
    "test_a_link_to_a_directory_is_a_usable_root": (
        "a symbolic link as the root (Wine makes none; Windows links are refused beneath the "
        "root, test_windows_*.py)"
    ),
}
"""Single tests (by node id without parameters) that are POSIX-only in a portable module."""


EXAMPLE_MODULES: Final[dict[str, str]] = {
    "test_examples.py": "agents",
    "test_claude_code_answers.py": "claude_agent_sdk",
    # Both import test_examples (agents) and google-genai, of the same group.
    "test_mcp_dialects.py": "agents",
    "test_gemini_clients.py": "agents",
    # Both take the console script's path and bounds from test_examples (agents).
    "test_langchain_example.py": "agents",
    "test_mcp_seed_answers.py": "agents",
}
"""Test modules that need a package of the examples group, which the Wine environment of
``make test-windows`` does not install (on Windows they run where it is installed)."""


def _posix_only(module_path: Path) -> str | None:
    """Why the module is POSIX-only: where it lives, or its listing; None when it is not."""
    if module_path.parent.name == POSIX_DIRECTORY and module_path.parent.parent.name == "tests":
        return POSIX_TREE
    return POSIX_ONLY_MODULES.get(module_path.name)


class _SkippedModule(pytest.Module):
    """A module that is reported as skipped instead of being imported."""

    reason: str = ""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        raise pytest.skip.Exception(self.reason, allow_module_level=True)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    """On Windows, a POSIX-only module becomes one skipped entry with its reason."""
    reason = _posix_only(module_path) if WINDOWS else None
    needs = EXAMPLE_MODULES.get(module_path.name)
    if WINDOWS and needs is not None and find_spec(needs) is None:
        reason = EXAMPLES
    if reason is None:
        return None
    module = _SkippedModule.from_parent(parent, path=module_path)
    module.reason = reason if reason == EXAMPLES else f"POSIX-only: {reason}"
    return module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On Windows, skip each listed POSIX-only test with its reason."""
    if not WINDOWS:
        return
    for item in items:
        reason = POSIX_ONLY_TESTS.get(item.nodeid.partition("[")[0].replace("\\", "/"))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"POSIX-only: {reason}"))
