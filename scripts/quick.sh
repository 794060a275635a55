#!/usr/bin/env bash
# Sets up everything, then runs the lab's quick comparison on its embedded default
# scenario and prints the table; the HTML report's path is printed at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh
exec lab/.venv/bin/tarn-lab run quick "$@"
