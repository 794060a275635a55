#!/usr/bin/env bash
# Runs the lab's pytest suite in lab/.venv. "No tests collected" (pytest exit 5) is a
# failure here: a suite that silently tests nothing must not pass CI.
set -uo pipefail
lab=$(cd "$(dirname "$0")" && pwd)
cd "$lab"
[ -x .venv/bin/pytest ] || { echo "lab/test: lab/.venv missing; run bash lab/setup.sh first" >&2; exit 1; }
.venv/bin/pytest -ra "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "lab/test: FAILURE: pytest collected no tests (exit 5)" >&2
    exit 1
fi
exit $rc
