# The README's two commands are `make demo` and `make verify`; everything else here
# is what they are made of. Only `bootstrap` touches the network.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.9
# The pinned uv: `uv` on PATH when it is UV_VERSION, else a private copy beneath .tools/
# that `make bootstrap` and `make dist` install with pip (the `pinned-uv` target), so a
# machine with only python3, pip, make and git can run both. A UV given by the caller wins.
UV_PRIVATE := $(CURDIR)/.tools/uv-$(UV_VERSION)
ifeq ($(origin UV),undefined)
UV := $(shell [ "$$(uv --version 2>/dev/null | cut -d' ' -f2)" = "$(UV_VERSION)" ] && echo uv || echo $(UV_PRIVATE)/bin/uv)
endif
UV_RUN := $(UV) run --locked --no-sync
PACKAGES := spice-agent-api spice-agent-tools-coding spice-agent-coding
PACKAGE_SOURCES := packages/spice-agent-api/src:packages/spice-agent-tools-coding/src:packages/spice-agent-coding/src
PYTEST_WORKERS ?= 2

.PHONY: test-reverse help bootstrap pinned-uv system-packages inspector gemini-cli conformance oauth-server wheelhouse dist fast check format lint typecheck test test-unprivileged test-windows stress verify verify-offline verify-release demo soak bench clean

help:
	@echo "make demo     run the tools end to end over MCP on a sample worktree"
	@echo "make verify   bootstrap, then every gate and the whole test suite (CI runs this)"
	@echo "make fast     format check, lint and the fast unit tests"
	@echo "make check    format check, lint and mypy --strict"
	@echo "make soak     long race and crash sweeps (minutes)"
	@echo "make stress   the whole suite three times beside four busy processes (long)"
	@echo "make test-reverse  the whole suite with its tests in reverse order"
	@echo "make verify-release  verify, offline verify, reproducible builds, index-free install"
	@echo "make dist     the three wheels and sdists in dist/ (reproducible)"
	@echo "make bench    benchmarks beside their floors and peers"
	@echo "make test-windows  the suites under Wine with Windows CPython 3.13 and 3.11"

# Installs the pinned uv when it is missing (pinned-uv), the system tools the tests use,
# then the locked environment, with bytecode compiled: site-packages by uv, our editable
# sources by compileall, so the first start of a fresh clone is as fast as the hundredth
# (even where PYTHONDONTWRITEBYTECODE keeps Python from caching it). Idempotent; fast when
# already done.
WORKSPACE_SOURCES := $(foreach p,$(PACKAGES),packages/$(p)/src)
bootstrap: pinned-uv system-packages inspector gemini-cli conformance oauth-server
	@# Copies, not hard links into uv's cache: a server refuses to be contained while a
	@# module it runs is a hard link on the device of a writable place (contract 11.1);
	@# a .venv that holds hard links from an earlier bootstrap is reinstalled once.
	UV_LINK_MODE=copy $(UV) sync --locked --all-packages --all-extras --compile-bytecode \
	  $$(find .venv -type f -links +1 -print -quit 2>/dev/null | grep -q . && echo --reinstall) \
	  || { echo "uv sync failed: run 'make bootstrap' once with access to PyPI to fill the cache" >&2; exit 1; }
	$(UV_RUN) python -m compileall -q $(WORKSPACE_SOURCES)
	@$(MAKE) --no-print-directory wheelhouse

# The application's third-party wheels exactly as uv.lock pins them (hashes checked), for the
# tests that install `make dist`'s wheels with no index at all (test_dist.py): they stand in
# for PyPI there. Fetched with the environment's own interpreter's pip, once per change of
# uv.lock; without PyPI (or pip) it is only noted, and those tests skip.
WHEELHOUSE := .wheelhouse
wheelhouse: $(WHEELHOUSE)/requirements.txt $(WHEELHOUSE)/tools/uv-$(UV_VERSION).txt

$(WHEELHOUSE)/requirements.txt: uv.lock
	@rm -rf $(WHEELHOUSE).tmp && mkdir -p $(WHEELHOUSE).tmp
	@$(UV) export --locked --offline --quiet --no-dev --no-emit-workspace --no-header \
	  --package spice-agent-coding --format requirements-txt -o $(WHEELHOUSE).tmp/requirements.txt
	@python=$$(.venv/bin/python -c 'import sys; print(sys._base_executable)'); \
	if "$$python" -m pip download --quiet --disable-pip-version-check --no-deps \
	     --only-binary=:all: --require-hashes -d $(WHEELHOUSE).tmp \
	     -r $(WHEELHOUSE).tmp/requirements.txt >/dev/null 2>&1; then \
	  rm -rf $(WHEELHOUSE) && mv $(WHEELHOUSE).tmp $(WHEELHOUSE); \
	else \
	  rm -rf $(WHEELHOUSE).tmp; \
	  echo "the locked wheels could not be fetched: the index-free install tests will be skipped" >&2; \
	fi

# The pinned uv's wheel for this machine, for the test that runs `make dist` where only python3,
# pip, make and git are on PATH (pip installs uv from here, with no index). Made after the
# wheels above (which replace the whole wheelhouse); without PyPI only noted, and that test skips.
$(WHEELHOUSE)/tools/uv-$(UV_VERSION).txt: $(WHEELHOUSE)/requirements.txt
	@rm -rf $(WHEELHOUSE)/tools && mkdir -p $(WHEELHOUSE)/tools
	@if $(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
	     -d $(WHEELHOUSE)/tools "uv==$(UV_VERSION)" >/dev/null 2>&1; then \
	  echo "uv==$(UV_VERSION)" > $@; \
	else \
	  echo "uv $(UV_VERSION)'s wheel could not be fetched: the test of make dist on a bare PATH will be skipped" >&2; \
	fi

# The pinned uv (see UV above): nothing to do when $(UV) is that version, else pip installs it
# beneath .tools/ (--target: no environment of the system's is touched, and pip allows it
# where the system's Python is externally managed). PIP_NO_INDEX and PIP_FIND_LINKS reach pip
# as usual (the test of `make dist` on a bare PATH installs it from a directory).
pinned-uv:
	@[ "$$($(UV) --version 2>/dev/null | cut -d' ' -f2)" = "$(UV_VERSION)" ] || { \
	  [ "$(UV)" = "$(UV_PRIVATE)/bin/uv" ] \
	    || { echo "UV=$(UV) is not uv $(UV_VERSION): unset UV or point it to uv $(UV_VERSION)" >&2; exit 1; }; \
	  rm -rf $(UV_PRIVATE).tmp; \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
	    --target $(UV_PRIVATE).tmp "uv==$(UV_VERSION)" \
	    || { rm -rf $(UV_PRIVATE).tmp; echo "uv $(UV_VERSION) could not be installed with $(PYTHON) -m pip (it needs PyPI once)" >&2; exit 1; }; \
	  rm -rf $(UV_PRIVATE) && mv $(UV_PRIVATE).tmp $(UV_PRIVATE); \
	}

# The three distributions' wheels and sdists in dist/, built from what git tracks as it stands,
# the same bytes on every run (scripts/build_dist.py, standard library only, so the system's
# python3 runs it: no environment is needed). No network but the pinned uv's one install: uv
# builds with its built-in backend.
dist: pinned-uv
	UV=$(UV) $(PYTHON) scripts/build_dist.py --out dist

# The MCP Inspector CLI and a Node it runs on (it needs Node >= 22.19), pinned by
# examples/inspector/package-lock.json, for the test of the README's Inspector example.
# Installed again only when the lock changes; without npm that one test is skipped.
INSPECTOR := examples/inspector
inspector: $(INSPECTOR)/node_modules/.package-lock.json

$(INSPECTOR)/node_modules/.package-lock.json: $(INSPECTOR)/package.json $(INSPECTOR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix $(INSPECTOR) --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else \
	  echo "npm is missing: the Inspector example test will be skipped" >&2; \
	fi

# The MCP conformance suite and the Node it runs on (it needs Node >= 22), pinned by
# scripts/conformance/package-lock.json. The test run (packages/spice-agent-coding/tests/
# test_http_conformance.py, slow, so in `make test` and `make verify`) runs every server
# scenario against `spice-coding serve --transport http`, holds the results against
# scripts/conformance/baseline.toml, and bounds each leg (LEG_BOUND_SECONDS in
# tests/conformance_suite.py). Installed again only when the lock changes; without npm
# those tests are skipped with that reason.
CONFORMANCE := scripts/conformance
conformance: $(CONFORMANCE)/node_modules/.package-lock.json

$(CONFORMANCE)/node_modules/.package-lock.json: $(CONFORMANCE)/package.json $(CONFORMANCE)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix $(CONFORMANCE) --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else \
	  echo "npm is missing: the MCP conformance tests will be skipped" >&2; \
	fi

# A real OAuth 2.1 authorization server (oidc-provider), pinned by
# scripts/oauth-server/package-lock.json, that the HTTP transport's OAuth tests
# (packages/spice-agent-coding/tests/mcp/test_http_oauth.py) start on loopback: the mcp SDK
# client's own flow (discovery, dynamic registration, PKCE) against it. It runs on the
# system's Node (>= 20). Installed again only when the lock changes; without npm those
# tests are skipped with that reason.
OAUTH_SERVER := scripts/oauth-server
oauth-server: $(OAUTH_SERVER)/node_modules/.package-lock.json

$(OAUTH_SERVER)/node_modules/.package-lock.json: $(OAUTH_SERVER)/package.json $(OAUTH_SERVER)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix $(OAUTH_SERVER) --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else \
	  echo "npm is missing: the OAuth end-to-end tests will be skipped" >&2; \
	fi

# Gemini CLI, pinned by examples/gemini-cli/package-lock.json, for the test that it lists
# and calls the three tools against a loopback stand-in for the Gemini API. It needs Node
# >= 20: the test runs it on the Inspector's pinned Node, else on the system's; without
# npm, or without such a Node, that test is skipped.
GEMINI_CLI := examples/gemini-cli
LANGCHAIN := examples/langchain

langchain: $(LANGCHAIN)/.venv/installed

# LangChain's MCP adapters need the mcp 1.x SDK: their own environment, pinned (not in
# bootstrap: the LangChain example test skips, naming this target, until it is made).
$(LANGCHAIN)/.venv/installed: $(LANGCHAIN)/requirements.txt
	$(UV) venv --quiet --allow-existing --python 3.11 $(LANGCHAIN)/.venv
	$(UV) pip install --quiet --python $(LANGCHAIN)/.venv/bin/python -r $(LANGCHAIN)/requirements.txt
	@touch $@

gemini-cli: $(GEMINI_CLI)/node_modules/.package-lock.json

$(GEMINI_CLI)/node_modules/.package-lock.json: $(GEMINI_CLI)/package.json $(GEMINI_CLI)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix $(GEMINI_CLI) --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else \
	  echo "npm is missing: the Gemini CLI test will be skipped" >&2; \
	fi

# strace drives the crash-consistency tests of replace, GNU patch checks that cut diffs
# apply, bubblewrap makes the sandbox's namespaces, caddy parses the TLS proxy example
# (examples/caddy/Caddyfile); each is installed from Debian when missing (without root a
# missing bwrap or caddy is only noted: the namespace tests, the example's test then skip).
system-packages:
	@for pair in strace:strace patch:patch bwrap:bubblewrap caddy:caddy; do \
	  tool=$${pair%%:*}; package=$${pair##*:}; \
	  if ! command -v $$tool >/dev/null 2>&1; then \
	    if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$package >/dev/null; \
	    elif [ "$$tool" = bwrap ]; then \
	      echo "bwrap is missing: the sandbox's namespace tests will be skipped" >&2; \
	    elif [ "$$tool" = caddy ]; then \
	      echo "caddy is missing: the TLS proxy example's test will be skipped" >&2; \
	    else \
	      echo "$$tool is missing: install it with your package manager" >&2; exit 1; \
	    fi; \
	  fi; \
	done

format:
	$(UV_RUN) ruff format .

lint:
	$(UV_RUN) ruff format --check .
	$(UV_RUN) ruff check .

# mypy runs once per distribution so that each one's tests see only its own helpers.
typecheck:
	@for p in $(PACKAGES); do \
	  echo "mypy --strict packages/$$p"; \
	  MYPYPATH=packages/$$p/src:$$(find packages/$$p/tests -type d -not -name __pycache__ -not -path '*/data*' | paste -sd:) \
	    $(UV_RUN) mypy --strict packages/$$p/src packages/$$p/tests || exit 1; \
	done

	@echo "mypy --strict --platform win32 (the modules that run on Windows)"
	@MYPYPATH=$(PACKAGE_SOURCES) $(UV_RUN) mypy --strict --platform win32 $(WINDOWS_TYPED)

	@echo "mypy --strict scripts benchmarks examples"
	@MYPYPATH=benchmarks:scripts:$(PACKAGE_SOURCES) \
	  $(UV_RUN) mypy --strict scripts benchmarks examples

# Checked a second time as Windows sees them: the code behind `sys.platform == "win32"`.
APP_SOURCE := packages/spice-agent-coding/src/spice/agent/coding
TOOLS_SOURCE := packages/spice-agent-tools-coding/src/spice/agent/tools/coding
WINDOWS_TYPED := $(addprefix $(APP_SOURCE)/,_windows/_api.py _windows/_launcher.py \
  _windows/_resolver.py _windows/_private.py _windows/_dacl.py _mcp/_private.py _mcp/_tokens.py \
  _mcp/_audit.py _mcp/_threaded_io.py _platform.py _mcp/_stdio.py _cli.py _compose.py) \
  $(addprefix $(TOOLS_SOURCE)/,_windows/_api.py _windows/_root.py _windows/_after.py \
  _windows/_replace.py _windows/_commit.py _windows/_restore.py _gitdir.py _replace_judge.py)

check: lint typecheck

# The contract's and the tools' unit tests (under a minute on two workers); `test` runs everything.
FAST_TESTS := packages/spice-agent-api/tests packages/spice-agent-tools-coding/tests
fast: lint
	$(UV_RUN) pytest -q -n $(PYTEST_WORKERS) -m "not slow and not strace" -p no:cacheprovider $(FAST_TESTS)

# The whole suite on PYTEST_WORKERS processes (pytest-xdist; 0 runs it in this process),
# with branch coverage of every process it starts; below 94% it fails.
test:
	rm -f .coverage .coverage.*
	$(UV_RUN) pytest -q -n $(PYTEST_WORKERS) --cov --cov-branch --cov-report=term --cov-fail-under=94

verify: bootstrap check test test-unprivileged demo

# The tests whose answers depend on the runner's privileges (ownership and modes of
# replace, the call's TMPDIR cleanup, containment), run again as an unprivileged user
# when the runner is root (as CI is): setpriv drops to UNPRIVILEGED_UID with no groups
# and no capabilities. Nothing is copied: the sources and the environment are read in
# place; HOME, TMPDIR and Hypothesis's database go to a scratch directory that user owns.
# Skipped, with the reason printed, when the runner is not root (the suite itself then
# runs unprivileged), without setpriv, or when that user cannot read the environment.
UNPRIVILEGED_UID ?= 65534
UNPRIVILEGED_TESTS := \
  packages/spice-agent-tools-coding/tests/test_replace_ownership.py \
  packages/spice-agent-tools-coding/tests/test_replace.py \
  packages/spice-agent-tools-coding/tests/test_hardening.py \
  packages/spice-agent-tools-coding/tests/test_regular.py \
  packages/spice-agent-tools-coding/tests/test_read_fanotify.py \
  packages/spice-agent-tools-coding/tests/test_shell.py \
  packages/spice-agent-tools-coding/tests/test_replace_protected.py \
  packages/spice-agent-tools-coding/tests/test_replace_git_directory.py \
  packages/spice-agent-coding/tests/posix/test_guard.py \
  packages/spice-agent-coding/tests/posix/test_guard_fallback.py \
  packages/spice-agent-coding/tests/settings/test_settings_ca_files.py
# These start the environment's interpreter as that user (sys.executable): they need an
# interpreter that user may execute itself. Where .venv's lies beneath a directory that user
# cannot search (pyenv under /root), the same locked environment is made once more, from
# uv's cache, on the first of UNPRIVILEGED_PYTHONS that user can execute.
UNPRIVILEGED_PYTHONS ?= /usr/bin/python3 /usr/local/bin/python3
UNPRIVILEGED_SPAWNING_TESTS := \
  packages/spice-agent-coding/tests/posix/test_shell_posix.py \
  packages/spice-agent-coding/tests/posix/test_containment.py \
  packages/spice-agent-coding/tests/posix/test_sandbox_attacks.py \
  packages/spice-agent-coding/tests/posix/test_sandbox_layers.py \
  packages/spice-agent-coding/tests/posix/test_posix_bwrap.py \
  packages/spice-agent-coding/tests/posix/test_allow_write.py \
  packages/spice-agent-coding/tests/posix/test_sandbox_fs.py \
  packages/spice-agent-coding/tests/posix/test_sandbox_tools.py \
  packages/spice-agent-coding/tests/posix/test_seccomp.py \
  packages/spice-agent-coding/tests/posix/test_caches.py \
  packages/spice-agent-coding/tests/posix/test_protected_sandbox.py \
  packages/spice-agent-coding/tests/posix/test_stage.py \
  packages/spice-agent-coding/tests/posix/test_stage_attacks.py \
  packages/spice-agent-coding/tests/posix/test_stage_renames.py \
  packages/spice-agent-tools-coding/tests/test_journal.py \
  packages/spice-agent-tools-coding/tests/test_journal_whole.py \
  packages/spice-agent-tools-coding/tests/test_replace_journal.py \
  packages/spice-agent-coding/tests/test_journal_cli.py
test-unprivileged:
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "test-unprivileged: skipped: the runner is not root, so the suite already ran unprivileged"; exit 0; \
	fi; \
	if ! command -v setpriv >/dev/null 2>&1; then \
	  echo "test-unprivileged: skipped: setpriv (util-linux) is not installed"; exit 0; \
	fi; \
	scratch=$$(mktemp -d /tmp/spice-unprivileged.XXXXXX); \
	trap 'rm -rf "$$scratch"' EXIT; \
	chown $(UNPRIVILEGED_UID):$(UNPRIVILEGED_UID) "$$scratch"; \
	as_user="env HOME=$$scratch TMPDIR=$$scratch HYPOTHESIS_STORAGE_DIRECTORY=$$scratch/hypothesis \
	  PYTHONDONTWRITEBYTECODE=1 setpriv --reuid=$(UNPRIVILEGED_UID) --regid=$(UNPRIVILEGED_UID) \
	  --clear-groups --inh-caps=-all"; \
	if ! $$as_user .venv/bin/python -c 'import pytest, spice.agent.coding' >/dev/null 2>&1; then \
	  echo "test-unprivileged: skipped: uid $(UNPRIVILEGED_UID) cannot read the environment (.venv)"; exit 0; \
	fi; \
	tests="$(UNPRIVILEGED_TESTS)"; python=.venv/bin/python; \
	if ! $$as_user /bin/sh -c '"$$0" -c pass' $$python >/dev/null 2>&1; then \
	  for candidate in $(UNPRIVILEGED_PYTHONS); do \
	    if $$as_user /bin/sh -c '"$$0" -c pass' $$candidate >/dev/null 2>&1 \
	       && UV_LINK_MODE=copy UV_PROJECT_ENVIRONMENT=$$scratch/venv $(UV) sync --locked --all-packages --all-extras \
	            --python $$candidate --quiet >/dev/null 2>&1; then \
	      python=$$scratch/venv/bin/python; break; \
	    fi; \
	  done; \
	fi; \
	if $$as_user /bin/sh -c '"$$0" -c pass' $$python >/dev/null 2>&1; then \
	  tests="$$tests $(UNPRIVILEGED_SPAWNING_TESTS)"; \
	else \
	  echo "test-unprivileged: not run: $(UNPRIVILEGED_SPAWNING_TESTS)"; \
	  echo "  (uid $(UNPRIVILEGED_UID) can execute neither .venv's interpreter nor any of: $(UNPRIVILEGED_PYTHONS))"; \
	fi; \
	echo "test-unprivileged: as uid $(UNPRIVILEGED_UID) with $$python: $$tests"; \
	$$as_user $$python -m pytest -q -p no:cacheprovider $$tests

# The whole suite once more with the collected tests in reverse order (contract 12.5: no
# test depends on what ran before it), on PYTEST_WORKERS processes, without coverage.
test-reverse:
	$(UV_RUN) pytest -q -n $(PYTEST_WORKERS) -p no:cacheprovider --no-cov --reverse-order

# The whole suite STRESS_ROUNDS times beside STRESS_LOAD busy processes (yes > /dev/null),
# each round bounded by STRESS_ROUND_SECONDS; the load is stopped on every exit.
# STRESS_TESTS narrows the run (default: the whole suite).
STRESS_ROUNDS ?= 3
STRESS_LOAD ?= 4
STRESS_ROUND_SECONDS ?= 2400
STRESS_TESTS ?=
stress:
	@pids=""; \
	trap 'for p in $$pids; do kill $$p 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT INT TERM; \
	for _ in $$(seq $(STRESS_LOAD)); do yes > /dev/null & pids="$$pids $$!"; done; \
	echo "stress: $(STRESS_LOAD) busy processes ($$pids ), $(STRESS_ROUNDS) rounds"; \
	failed=""; \
	for round in $$(seq $(STRESS_ROUNDS)); do \
	  echo "stress: round $$round of $(STRESS_ROUNDS)"; \
	  timeout --kill-after=30 $(STRESS_ROUND_SECONDS) $(UV_RUN) pytest -q -p no:cacheprovider $(STRESS_TESTS) \
	    || failed="$$failed $$round"; \
	done; \
	if [ -n "$$failed" ]; then echo "stress: failures in round(s)$$failed" >&2; exit 1; fi

# The three suites under Wine with the official Windows CPython (3.13 and the 3.11 floor)
# and the locked dependencies as Windows wheels (scripts/windows/test-windows.sh; Debian's
# wine64 is installed when missing and this runs as root). Arguments: TEST_WINDOWS_ARGS.
TEST_WINDOWS_ARGS ?=
test-windows: pinned-uv
	UV="$(UV)" scripts/windows/test-windows.sh $(TEST_WINDOWS_ARGS)

# The main job end to end: a sample worktree served over MCP stdio to the real MCP client.
demo: bootstrap
	$(UV_RUN) python scripts/demo.py

# Everything but bootstrap works with no network once bootstrapped: uv is told to stay
# offline, and where the kernel allows it the whole run happens in a namespace with no network.
verify-offline:
	@if unshare --net true 2>/dev/null; then \
	  echo "verify-offline: running 'make verify' in a network namespace with no interfaces"; \
	  UV_OFFLINE=1 unshare --net $(MAKE) verify; \
	else \
	  echo "verify-offline: no network namespaces here; running 'make verify' with UV_OFFLINE=1"; \
	  UV_OFFLINE=1 $(MAKE) verify; \
	fi

# The release gate: verify, offline verify, the lock, reproducible builds, wheel metadata,
# and an index-free install of the wheels with a smoke test.
verify-release: verify verify-offline
	$(UV) lock --check --offline
	$(UV_RUN) python scripts/release_check.py

soak:
	SPICE_SOAK=1 $(UV_RUN) pytest -q -s -m slow -p no:cacheprovider

# Benchmarks (a few minutes on 2 cores): each figure beside its floor and its peer. The
# reference MCP filesystem server is installed from the npm registry, pinned by the lock file.
BENCH_FLAGS ?=
bench: bootstrap
	npm ci --prefix benchmarks --ignore-scripts --no-audit --no-fund
	$(UV_RUN) python benchmarks/run.py $(BENCH_FLAGS)

clean:
	rm -rf .venv .windows-env $(INSPECTOR)/node_modules $(CONFORMANCE)/node_modules $(GEMINI_CLI)/node_modules .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.* dist $(WHEELHOUSE) .tools
