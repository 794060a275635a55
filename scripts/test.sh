#!/usr/bin/env bash
# Sets up everything, then runs every test: the Rust workspace and the lab's pytest suite.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

echo "== cargo test (workspace)"
cargo test --release --workspace 2>&1

if [ -f lab/test.sh ]; then
    echo "== lab tests"
    bash lab/test.sh
fi
