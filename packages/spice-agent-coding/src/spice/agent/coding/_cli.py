"""The ``spice-coding`` command line: ``tools``, ``call``, ``serve`` and ``cache``.

Exit codes: 0 success; 1 a model-visible failure (the tool's result says
why); 2 an execution error or unusable input (bad JSON, a bad root, a bad
flag); 130 interrupted. ``tools`` and ``call`` never import the MCP SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Final, NoReturn

from spice.agent.dispatch import Dispatcher
from spice.agent.tool import MAXIMUM_PAYLOAD_BYTES, Call, Definition, ExecutionError

from ._compose import compose
from ._exit import exit_promptly
from ._journal_cli import (
    ServedJournal,
    add_journal_arguments,
    clean_all_journals,
    clean_journal,
    list_journals,
    open_served_journal,
    release_journals,
    run_history,
    run_undo,
)
from ._mcp._http_settings import HttpSettings
from ._netpolicy._loopback import is_loopback
from ._platform import (
    WINDOWS,
    PlatformLauncher,
    clean_all_caches,
    clean_cache,
    expire_caches,
    harden,
    list_caches,
    platform_launcher,
    release_caches,
)
from ._sandbox import HELP as SANDBOX_HELP
from ._sandbox import SERVER_WARNING, ContainmentUnavailable, slash_root_problem
from ._settings._cache_age import CacheAgeError, add_cache_max_age, resolve_cache_max_age
from ._settings._journal_bounds import add_journal_bounds
from ._settings._protection import protection_report, with_extra
from ._settings._reload import watching
from ._settings._resolve import (
    Settings,
    add_arguments,
    flags_of,
    resolve_settings,
)
from ._settings._serve import add_serve_arguments, resolve_http
from ._settings._values import SettingsError

if TYPE_CHECKING:
    import socket

    from ._mcp._audit import AuditLog
    from ._mcp._oauth import JwtVerifier
    from ._mcp._tokens import TokenStore

PROGRAM: Final = "spice-coding"
CALL_ID: Final = "cli-1"
EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_ERROR: Final = 2
EXIT_INTERRUPTED: Final = 130
EPILOG: Final = f"{SANDBOX_HELP} {SERVER_WARNING}"
"""What every ``--help`` ends with: the sandbox as it is, then the product's warning."""
STDIN_ARGUMENT: Final = "-"
"""``call TOOL -`` reads the JSON arguments from stdin (at most the payload bound)."""

_BAD_JSON: Final = "the arguments are not a JSON text within the payload bound"
_BAD_TOOL_NAME: Final = "that is not a tool name"
_INTERNAL: Final = "an internal error stopped the command"
_TRANSPORT_FAILED: Final = "the MCP transport failed"


def _version() -> str:
    # Imported here: importlib.metadata costs tens of milliseconds on every start otherwise.
    import importlib.metadata  # noqa: PLC0415

    try:
        return importlib.metadata.version("spice-agent-coding")
    except importlib.metadata.PackageNotFoundError:
        return "0"


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one short line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for (keeps every other start fast)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: object) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{PROGRAM} {_version()}\n")
        parser.exit(0)


def _parser() -> argparse.ArgumentParser:
    root_help = "worktree root (default: $SPICE_AGENT_WORKTREE, else the current directory)"
    parser = _Parser(
        prog=PROGRAM,
        description="Serve the Spice coding tools (read, replace, shell) for one worktree.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--root", metavar="DIR", help=root_help)
    # ``cache clean --all``: named here too, hidden, or this parser would read the ``--all``
    # after the command word as an ambiguous prefix of the ``--allow-*`` options.
    parser.add_argument(
        "--all", dest="all_before_command", action="store_true", help=argparse.SUPPRESS
    )
    add_arguments(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name, summary in (
        ("tools", "print the tool definitions with their fingerprints as JSON"),
        ("call", "run one call through the dispatcher and print its result as JSON"),
        ("serve", "serve the tools over MCP on stdin/stdout, or streamable HTTP"),
        ("token", "add a bearer token for serve --transport http to a token file"),
        ("history", "the worktree's journal: every call that changed it, newest first"),
        ("undo", "put back every path a call changed (default: the newest not undone)"),
        (
            "cache",
            (
                "cache list: every worktree's private cache of contained commands (root, "
                "size, last use); cache clean: remove this worktree's, --all: every one not in use"
            ),
        ),
    ):
        sub = commands.add_parser(name, help=summary, description=summary, epilog=EPILOG)
        sub.add_argument("--root", metavar="DIR", default=argparse.SUPPRESS, help=root_help)
        add_arguments(sub, after_command=True)
        if name == "serve":
            add_serve_arguments(sub)
            add_cache_max_age(sub)
        if name in ("serve", "call"):
            add_journal_bounds(sub)
        if name == "token":
            sub.add_argument("action", choices=("add",), help="add: append a new token")
            sub.add_argument("name", metavar="NAME", help="the token's name (in audit lines)")
            sub.add_argument("--scopes", required=True, help="read, write or shell (or a list)")
            sub.add_argument("--token-file", required=True, metavar="PATH", help="the file")
            sub.add_argument("--not-after", metavar="DATE", help="last day (UTC) it is accepted")
        if name == "cache":
            sub.add_argument("action", metavar="list|clean", choices=("list", "clean"))
            sub.add_argument(
                "--all",
                action="store_true",
                help="clean: every worktree's cache that no running server holds",
            )
        if name in ("history", "undo"):
            add_journal_arguments(sub, name)
        if name == "call":
            sub.add_argument("tool", metavar="TOOL", help="the tool's name")
            sub.add_argument(
                "arguments", metavar="JSON", help="the arguments as a JSON object, or - for stdin"
            )
    return parser


def _out(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()


def _err(text: str) -> None:
    sys.stderr.buffer.write(f"{PROGRAM}: {text}\n".encode("utf-8", "backslashreplace"))
    sys.stderr.buffer.flush()


def _definition_json(definition: Definition) -> dict[str, object]:
    return {
        "name": definition.name,
        "description": definition.description,
        "input_schema": json.loads(definition.input_schema),
        "effect": definition.effect.value,
        "replay_safety": definition.replay_safety.value,
        "capabilities": [c.value for c in definition.capabilities],
        "fingerprint": definition.fingerprint,
    }


def tools_json(
    dispatcher: Dispatcher,
    sandbox: Mapping[str, object] | None = None,
    protected: Mapping[str, object] | None = None,
    journal: Mapping[str, object] | None = None,
) -> str:
    """The ``tools`` output: stable JSON (sorted keys, sorted tools), one document.

    ``sandbox`` (the launcher's containment report), ``protected`` (what no agent may
    change, what was given back: ``_settings._protection``) and ``journal`` (whether
    ``replace`` is journaled, and where) sit beside the definitions.
    """
    document: dict[str, object] = {"tools": [_definition_json(d) for d in dispatcher.definitions]}
    if sandbox is not None:
        document["sandbox"] = dict(sandbox)
    if protected is not None:
        document["protected"] = dict(protected)
    if journal is not None:
        document["journal"] = dict(journal)
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _composed(
    settings: Settings, launcher: PlatformLauncher
) -> AbstractAsyncContextManager[Dispatcher]:
    """The application for ``settings``: its Config, and the launcher its sandbox mode asks for."""
    return compose(settings.config, launcher=launcher)


async def _tools(settings: Settings, launcher: PlatformLauncher, journal: ServedJournal) -> int:
    async with _composed(settings, launcher) as dispatcher:
        protected = protection_report(settings.config.protected_paths)
        _out(tools_json(dispatcher, launcher.report(), protected, journal.report()))
    return EXIT_OK


async def _call(settings: Settings, launcher: PlatformLauncher, call: Call) -> int:
    async with _composed(settings, launcher) as dispatcher:
        try:
            result = await dispatcher.dispatch(call)
        except ExecutionError as error:
            _err(
                f"execution error ({error.state.value}, retry {error.retry.value}): {error.message}"
            )
            return EXIT_ERROR
    _out(result.content + "\n")
    if result.problem is not None:
        _err(result.problem)
        return EXIT_FAILURE
    return EXIT_OK


async def _serve(settings: Settings, launcher: PlatformLauncher) -> int:
    # Imported here so that `tools` and `call` never load the MCP SDK.
    from ._mcp._stdio import serve_stdio  # noqa: PLC0415 - keeps the SDK off the fast paths

    _start_logging()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = _stop_on_signals(loop, stop)
    try:
        async with _composed(settings, launcher) as dispatcher:
            serving = asyncio.ensure_future(serve_stdio(dispatcher, config=settings.config))
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                serving.cancel()
                stopping.cancel()
                await asyncio.wait({serving, stopping})
            failed = not serving.cancelled() and serving.exception() is not None
    finally:
        signals()
    if failed:
        _err(_TRANSPORT_FAILED)
        return EXIT_ERROR
    _err("stopped" + (" on a signal" if stop.is_set() else ": the client closed stdin"))
    return EXIT_OK


def _start_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=f"{PROGRAM}: %(message)s")
    _err(SERVER_WARNING)


async def _serve_http(settings: Settings, launcher: PlatformLauncher, http: HttpSettings) -> int:
    """``serve --transport http``: refusals first (exit 2, one line), then serve until a signal."""
    from ._mcp import _http  # noqa: PLC0415 - keeps the SDK and uvicorn off the fast paths
    from ._mcp._audit import AuditLog, AuditLogError  # noqa: PLC0415
    from ._mcp._oauth import OAuthStartError  # noqa: PLC0415
    from ._mcp._tokens import TokenFileError, TokenStore  # noqa: PLC0415

    try:
        store = (
            None
            if http.token_file is None
            else TokenStore(http.token_file, settings.config.root, settings.allow_write)
        )
        audit = AuditLog(http.audit_log, root=settings.config.root, writable=settings.allow_write)
    except (TokenFileError, AuditLogError) as error:
        _err(str(error))
        return EXIT_ERROR
    try:
        sock = _http.bind(http.host, http.port)
    except OSError as error:
        audit.close()
        _err(_http.listen_problem(http.host, http.port, error.errno))
        return EXIT_ERROR
    async with contextlib.AsyncExitStack() as stack:
        try:
            places = (settings.config.root, settings.allow_write)
            oauth = await _oauth_verifier(http, sock.getsockname()[1], places, stack)
        except OAuthStartError as error:
            sock.close()
            audit.close()
            _err(str(error))
            return EXIT_ERROR
        return await _serve_http_on(settings, launcher, http, (store, audit, oauth), sock)


async def _oauth_verifier(
    http: HttpSettings,
    port: int,
    places: tuple[str, tuple[str, ...]],
    stack: contextlib.AsyncExitStack,
) -> JwtVerifier | None:
    """``--oauth-issuer``: its metadata and keys fetched now (``OAuthStartError``)."""
    if http.oauth_issuer is None:
        return None
    from ._mcp import _http, _oauth  # noqa: PLC0415

    root, writable = places

    credentials = None
    if http.oauth_client_file is not None:
        credentials = _oauth.read_client_file(http.oauth_client_file, root, writable)
    client = await stack.enter_async_context(_oauth.new_client())
    resource = _http.resource_of(http, port, http.oauth_audience)
    asked = _oauth.OAuthSettings(http.oauth_issuer, http.oauth_introspection_url, credentials)
    return await _oauth.discover(asked, resource, client)


async def _serve_http_on(
    settings: Settings,
    launcher: PlatformLauncher,
    http: HttpSettings,
    auth: tuple[TokenStore | None, AuditLog, JwtVerifier | None],
    sock: socket.socket,
) -> int:
    """Serve on the bound ``sock`` until a signal."""
    from ._mcp import _http  # noqa: PLC0415

    store, audit, oauth = auth
    _start_logging()
    for warning in _http_warnings(http, launcher.contained, not is_loopback(http.host)):
        _err(warning)
    served = _http.Served(
        http, store, audit, launcher.contained or http.allow_uncontained_shell, oauth
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = _stop_on_signals(loop, stop)
    try:
        async with _composed(settings, launcher) as dispatcher:
            await _http.serve_http(dispatcher, served, sock, stop, _err, config=settings.config)
    finally:
        signals()
        sock.close()
    _err("stopped" + (" on a signal" if stop.is_set() else ""))
    return EXIT_OK


def _http_warnings(http: HttpSettings, contained: bool, remote: bool) -> list[str]:
    """The warnings ``serve --transport http`` starts with (``remote``: a non-loopback bind)."""
    warnings = []
    if http.insecure_no_auth:
        warnings.append("warning: --insecure-no-auth: any local process may call every tool")
    if remote and not (http.public_url or "").startswith("https://"):
        warnings.append(
            "warning: listening beyond loopback without TLS: put a TLS proxy or tunnel in "
            "front and name it with --public-url https://..."
        )
    if not contained and not http.allow_uncontained_shell:
        warnings.append(
            "shell is not served over HTTP: commands would run uncontained "
            "(--allow-uncontained-shell serves it anyway)"
        )
    elif not contained:
        warnings.append(
            "warning: shell is served over HTTP uncontained: a token with the shell scope "
            "runs any command as this user"
        )
    return warnings


def protecting_http(settings: Settings, http: HttpSettings) -> Settings:
    """``settings`` whose protected paths also hold the HTTP server's token file and audit
    log (contract 12.1: the server's own files), for ``replace`` and the sandbox alike."""
    policy = with_extra(settings.config.protected_paths, (http.token_file, http.audit_log))
    config = dataclasses.replace(settings.config, protected_paths=policy)
    return dataclasses.replace(settings, config=config)


def _token(settings: Settings, options: argparse.Namespace) -> int:
    """``token add NAME --scopes S --token-file PATH``: print the new token once."""
    from ._mcp._tokens import TokenFileError, add_token  # noqa: PLC0415 - stdlib only

    try:
        token = add_token(
            options.token_file,
            options.name,
            options.scopes,
            settings.config.root,
            options.not_after,
            settings.allow_write,
        )
    except TokenFileError as error:
        _err(str(error))
        return EXIT_ERROR
    _out(token + "\n")
    _err(f"added the token {options.name}: it is shown only this once; the file keeps its digest")
    return EXIT_OK


ENDING_SIGNALS: Final = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
"""The POSIX signals that stop ``serve`` through the joins (stdin's end does too)."""


def _stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> Callable[[], None]:
    """Set ``stop`` on every signal that ends the server (``ENDING_SIGNALS``: SIGTERM,
    SIGINT, SIGHUP, SIGQUIT), so that each goes through the calls' joins (13.1: a SIGHUP
    ended the server before the join that puts back what a call planted); returns the
    undo.

    Windows has no ``add_signal_handler``: there ``serve`` stops on stdin's end, on
    Ctrl+Break (``SIGBREAK``, through ``signal.signal``), and on Ctrl+C as ``asyncio.run``
    delivers it (cancellation). A server that is terminated ends its commands through
    their kill-on-close jobs.
    """
    if not WINDOWS:
        numbers = tuple(getattr(signal, name) for name in ENDING_SIGNALS)
        for number in numbers:
            loop.add_signal_handler(number, stop.set)

        def remove() -> None:
            for number in numbers:
                loop.remove_signal_handler(number)

        return remove
    brk = getattr(signal, "SIGBREAK", None)
    if brk is None:  # pragma: no cover - every Windows CPython has SIGBREAK
        return lambda: None
    previous = signal.signal(brk, lambda _number, _frame: loop.call_soon_threadsafe(stop.set))

    def restore() -> None:
        signal.signal(brk, previous)

    return restore


def _read_arguments(text: str) -> tuple[str | None, str]:
    """The call's arguments (``-`` reads stdin), or ``None`` and the problem naming where
    the text stops being JSON (its line, column and character)."""
    where = "on stdin" if text == STDIN_ARGUMENT else "(the argument after the tool's name)"
    if text == STDIN_ARGUMENT:
        data = sys.stdin.buffer.read(MAXIMUM_PAYLOAD_BYTES + 1)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            return None, f"the arguments {where} are not UTF-8: byte {error.start + 1} is not"
    return json_problem(text, where)


def json_problem(text: str, where: str) -> tuple[str | None, str]:
    """``text`` when it is one JSON text, else ``None`` and where it stops being one."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAXIMUM_PAYLOAD_BYTES:
        return None, f"the arguments {where} are {size} bytes: at most {MAXIMUM_PAYLOAD_BYTES}"
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return None, (
            f"the arguments {where} are not JSON: {error.msg} at line {error.lineno}, column "
            f"{error.colno} (character {error.pos + 1}); give one JSON object, e.g. "
            """'{"path": "README.md"}'"""
        )
    except (ValueError, RecursionError):
        return None, f"the arguments {where} are not JSON: {_BAD_JSON}"
    return text, ""


def _root_problem(root: str) -> str | None:
    """Why ``root`` cannot be the worktree (one line naming it), or ``None`` (contract 10.2).

    ``serve``, ``call`` and ``tools`` refuse to start on a root that does not exist or is
    not a directory, rather than answer every call ``root_unavailable``. The root's own
    path is trusted configuration: a symlink to a directory is a directory.
    """
    try:
        info = os.stat(root)
    except FileNotFoundError:
        return f"the worktree root {root} does not exist"
    except OSError:
        return f"the worktree root {root} cannot be used (it could not be looked at)"
    if not stat.S_ISDIR(info.st_mode):
        return f"the worktree root {root} is not a directory"
    return None


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run one command; returns the exit code."""
    options = _parser().parse_args(argv)
    flags = flags_of(options)
    try:
        settings = resolve_settings(flags)
    except SettingsError as error:
        _err(str(error))
        return EXIT_ERROR
    if options.command == "token":
        return _token(settings, options)
    if options.all_before_command:
        _err("--all goes after cache clean")
        return EXIT_ERROR
    if options.command == "cache" and (options.action == "list" or options.all):
        return _every_cache(options)
    try:
        http = resolve_http(options) if options.command == "serve" else None
        max_age = resolve_cache_max_age(options, os.environ)
    except (SettingsError, CacheAgeError) as error:
        _err(str(error))
        return EXIT_ERROR
    if http is not None:
        settings = protecting_http(settings, http)
    root = settings.config.root
    problem = _root_problem(root) or slash_root_problem(root, settings.sandbox)
    if problem is not None:
        _err(problem)
        return EXIT_ERROR
    if options.command == "cache":
        return _clean_cache(settings.config.root)
    if options.command == "history":
        return run_history(root, options, settings.journal)
    if options.command == "undo":
        return run_undo(root, options, settings.journal)
    try:
        launcher = watching(
            flags, os.environ, settings, platform_launcher(settings.sandbox_request())
        )
    except ContainmentUnavailable as error:
        _err(str(error))
        return EXIT_ERROR
    if launcher.sandbox.warning is not None:
        _err(launcher.sandbox.warning)
    if options.command == "serve":
        _expire_caches(max_age)
    served = open_served_journal(root, settings.journal)
    if served.problem is not None:
        _err(served.problem)
    config = dataclasses.replace(settings.config, journal=served.journal)
    settings = dataclasses.replace(settings, config=config)
    if options.command == "tools":
        return asyncio.run(_tools(settings, launcher, served))
    harden()
    if options.command == "call":
        arguments, problem = _read_arguments(options.arguments)
        if arguments is None:
            _err(problem)
            return EXIT_ERROR
        try:
            call = Call(CALL_ID, options.tool, arguments)
        except ValueError:
            _err(_BAD_TOOL_NAME if _bad_name(options.tool) else _BAD_JSON)
            return EXIT_ERROR
        return asyncio.run(_call(settings, launcher, call))
    if http is not None:
        return asyncio.run(_serve_http(settings, launcher, http))
    return asyncio.run(_serve(settings, launcher))


def _clean_cache(root: str) -> int:
    """``cache clean``: remove the worktree's private cache directory (contract 11.1),
    never while a running server holds it (12.2)."""
    cache, outcome = clean_cache(root)
    if cache is None:
        _err("no home or cache directory is known for the server's user")
        return EXIT_ERROR
    if outcome == "in_use":
        _err(f"the cache directory {cache} is in use by a running server: stop it first")
        return EXIT_ERROR
    if outcome == "failed":
        _err(f"the cache directory {cache} could not be removed whole")
        return EXIT_ERROR
    journal, journal_outcome = clean_journal(root)
    if journal_outcome == "in_use":
        _err(f"the journal {journal} is in use by a running server: stop it first")
        return EXIT_ERROR
    if journal_outcome == "failed":
        _err(f"the journal {journal} could not be removed whole")
        return EXIT_ERROR
    removed = cache if outcome == "removed" else None
    journal_removed = journal if journal_outcome == "removed" else None
    document = {
        "removed": removed,
        "cache": cache,
        "journal": journal,
        "journal_removed": journal_removed,
    }
    _out(json.dumps(document) + "\n")
    return EXIT_OK


def _every_cache(options: argparse.Namespace) -> int:
    """``cache list`` and ``cache clean --all`` (contract 12.2): JSON on stdout."""
    if options.action == "list":
        if options.all:
            _err("--all goes with cache clean (cache list lists every cache)")
            return EXIT_ERROR
        listed, truncated = list_caches()
        journals, more = list_journals()
        document = {
            "caches": listed,
            "truncated": truncated,
            "journals": journals,
            "journals_truncated": more,
        }
        _out(json.dumps(document, indent=2) + "\n")
        return EXIT_OK
    outcome = clean_all_caches()
    journals_outcome = clean_all_journals()
    _out(json.dumps({**outcome, "journals": journals_outcome}, indent=2) + "\n")
    if outcome["failed"]:
        _err(f"{len(outcome['failed'])} cache directories could not be removed whole")
    if journals_outcome["failed"]:
        _err(f"{len(journals_outcome['failed'])} journals could not be removed whole")
    return EXIT_ERROR if outcome["failed"] or journals_outcome["failed"] else EXIT_OK


def _expire_caches(max_age_days: int) -> None:
    """At ``serve``'s start: the caches unused too long go (one line on stderr if any)."""
    removed = expire_caches(max_age_days)
    if removed:
        _err(
            f"removed {len(removed)} private caches unused for more than {max_age_days} days "
            "(spice-coding cache list shows the rest)"
        )


def _bad_name(name: str) -> bool:
    try:
        Call(CALL_ID, name)
    except ValueError:
        return True
    return False


def console() -> NoReturn:
    """The ``spice-coding`` console script: ``main``, then a prompt exit (``_exit``)."""
    exit_promptly(main())


def main(argv: Sequence[str] | None = None) -> int:
    """What the ``spice-coding`` console script runs; returns the exit code."""
    try:
        return run(argv)
    except SystemExit as done:
        # argparse ends --help, --version and usage errors this way; answer with its code.
        return done.code if isinstance(done.code, int) else EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - no traceback reaches the user; the type is safe
        _err(f"{_INTERNAL} ({type(error).__name__})")
        return EXIT_ERROR
    finally:
        release_caches()
        release_journals()
