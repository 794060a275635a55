#!/usr/bin/env bash
# Fails when a cargo log holds a compiler warning: the test build must stay warning-free,
# so a new warning fails CI instead of scrolling by. Prints each warning with the lines
# rustc gives for it (where it is, why), then one summary line.
#   bash scripts/check-warnings.sh CARGO_LOG
# (cargo replays the warnings of crates it does not rebuild, so a cached build is checked too.)
set -uo pipefail
log=${1:?usage: check-warnings.sh CARGO_LOG}
# A warning block: from "warning: ..." to the blank line that ends rustc's message. The
# per-crate tally ("warning: `x` (test "y") generated 1 warning") is not a warning itself.
blocks=$(awk '
    /^warning: `[^`]+` \(.*\) generated [0-9]+ warnings?/ { next }
    /^warning: .* generated [0-9]+ warnings?( \(.*\))?$/ { next }
    /^warning:/ { inside = 1; n++ }
    inside { print }
    inside && /^$/ { inside = 0 }
    END { exit n > 0 ? 1 : 0 }
' "$log")
if [ $? -ne 0 ]; then
    count=$(grep -c '^warning:' <<<"$blocks")
    echo "$blocks"
    echo "warnings: FAILURE: the build printed $count compiler warning(s) (above); fix them, do not allow them"
    exit 1
fi
echo "warnings: none"
