#!/usr/bin/env bash
# Runs the lab's pytest suite in lab/.venv. Installs Debian's chromium first if missing:
# the report tests render the HTML report in it. "No tests collected" (pytest exit 5) is
# a failure here: a suite that silently tests nothing must not pass CI.
set -uo pipefail
lab=$(cd "$(dirname "$0")" && pwd)
. "$lab/../scripts/lib/steps.sh"
STEP_TAG=lab/test
cd "$lab"
[ -x .venv/bin/pytest ] || { echo "lab/test: lab/.venv missing; run bash lab/setup.sh first" >&2; exit 1; }
bash "$lab/../scripts/apt-install.sh" chromium || { echo "lab/test: could not install chromium" >&2; exit 1; }
.venv/bin/pytest -ra "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "lab/test: FAILURE: pytest collected no tests (exit 5)" >&2
    exit 1
fi
exit $rc
