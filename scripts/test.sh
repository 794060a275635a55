#!/usr/bin/env bash
# Sets up everything, then runs every test: the Rust workspace and the lab's pytest suite.
# A compiler warning in the test build fails the run (scripts/check-warnings.sh).
# Ends with one line "tests: N passed, N failed" over both.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/setup.sh || { echo "test: setup failed" >&2; exit 1; }
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

echo "== cargo test --release --workspace"
cargo test --release --workspace 2>&1 | tee "$logs/cargo.log"
cargo_rc=${PIPESTATUS[0]}
echo "== compiler warnings in the test build"
bash scripts/check-warnings.sh "$logs/cargo.log"
warn_rc=$?

echo "== lab tests"
bash lab/test.sh 2>&1 | tee "$logs/lab.log"
lab_rc=${PIPESTATUS[0]}

passed=0 failed=0
while read -r p f; do passed=$((passed + p)); failed=$((failed + f)); done < <(
    sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$logs/cargo.log")
lab_summary=$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$logs/lab.log" | tail -1)
lp=$(sed -n 's/.* \([0-9]*\) passed.*/\1/p' <<<"$lab_summary"); lf=$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$lab_summary")
le=$(sed -n 's/.* \([0-9]*\) errors\?.*/\1/p' <<<"$lab_summary")
passed=$((passed + ${lp:-0})); failed=$((failed + ${lf:-0} + ${le:-0}))
[ "$cargo_rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
[ "$lab_rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
warnings=""
[ "$warn_rc" -ne 0 ] && warnings=", and the build has compiler warnings (see \"compiler warnings\" above)"
echo "tests: $passed passed, $failed failed$warnings"
[ "$cargo_rc" -eq 0 ] && [ "$lab_rc" -eq 0 ] && [ "$warn_rc" -eq 0 ]
