#!/usr/bin/env bash
# Run pytest with Windows Python under Wine on a fresh copy of PROJECT_DIR.
# usage: [PY=3.13] run-tests.sh PROJECT_DIR STATE_DIR [pytest args...]
#   e.g. run-tests.sh "$P" "$S" packages/spice-agent-api/tests -q -ra
# Pass --junitxml='C:\results\x.xml' for a report: it lands in STATE_DIR/prefix/drive_c/results.
# COVERAGE=1 runs pytest under coverage and prints the branch coverage of the Windows-only
# modules (_*windows*.py, _win*.py; scripts/windows/coverage.ini).
# SPICE_WINDOWS_RUN_BOUND (seconds, default 1800): the longest one pytest run may take; past
# it the run is killed and fails (exit 124), so a hang under Wine cannot stall CI.
set -euo pipefail
P=$(cd "$1" && pwd); S=$(cd "$2" && pwd); shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
TAG=${PY:-3.13}; TAG=${TAG/./}
"$HERE/build-env.sh" "$P" "$S" sync >/dev/null
# The host's certificate variables name Linux paths that Windows Python cannot open (an httpx
# client builds its SSL context even for http://): Windows Python uses its own store.
unset SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE
export WINEPREFIX="$S/prefix" WINEDEBUG=${WINEDEBUG:--all} WINEDLLOVERRIDES="mscoree,mshtml="
mkdir -p "$WINEPREFIX/drive_c/results"
cd "$WINEPREFIX/drive_c/src"     # the current drive must be C: (see the note)
PYEXE="C:\\python$TAG\\python.exe"
BOUND=(timeout --kill-after=30 "${SPICE_WINDOWS_RUN_BOUND:-1800}")
set +e
if [ "${COVERAGE:-0}" = 1 ]; then   # branch coverage of the Windows-only modules
  RC='--rcfile=C:\src\scripts\windows\coverage.ini'
  "${BOUND[@]}" wine "$PYEXE" -m coverage run "$RC" -m pytest -p no:cacheprovider "$@" </dev/null 2>&1 | cat
  rc=${PIPESTATUS[0]}
  wine "$PYEXE" -m coverage combine "$RC" -q </dev/null 2>&1 | cat
  wine "$PYEXE" -m coverage report "$RC" </dev/null 2>&1 | cat
else
  "${BOUND[@]}" wine "$PYEXE" -m pytest -p no:cacheprovider "$@" </dev/null 2>&1 | cat
  rc=${PIPESTATUS[0]}
fi
wineserver -k 2>/dev/null   # end this prefix's leftover Windows processes, if any
exit "$rc"
