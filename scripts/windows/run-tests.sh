#!/usr/bin/env bash
# Run pytest with Windows Python under Wine on a fresh copy of PROJECT_DIR.
# usage: [PY=3.13] run-tests.sh PROJECT_DIR STATE_DIR [pytest args...]
#   e.g. run-tests.sh "$P" "$S" packages/spice-agent-api/tests -q -ra
# Pass --junitxml='C:\results\x.xml' for a report: it lands in STATE_DIR/prefix/drive_c/results.
set -euo pipefail
P=$(cd "$1" && pwd); S=$(cd "$2" && pwd); shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
TAG=${PY:-3.13}; TAG=${TAG/./}
"$HERE/build-env.sh" "$P" "$S" sync >/dev/null
export WINEPREFIX="$S/prefix" WINEDEBUG=${WINEDEBUG:--all} WINEDLLOVERRIDES="mscoree,mshtml="
mkdir -p "$WINEPREFIX/drive_c/results"
cd "$WINEPREFIX/drive_c/src"     # the current drive must be C: (see the note)
set +e
wine "C:\\python$TAG\\python.exe" -m pytest -p no:cacheprovider "$@" </dev/null 2>&1 | cat
rc=${PIPESTATUS[0]}
wineserver -k 2>/dev/null   # end this prefix's leftover Windows processes, if any
exit "$rc"
