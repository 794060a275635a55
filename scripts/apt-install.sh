#!/usr/bin/env bash
# Installs the given Debian packages that are missing, without letting Debian start their
# services (tarn and the lab start private instances and stop them by their own pid).
# apt's own output goes to a log file whose path is printed; it is shown in full only if
# apt fails. Meanwhile a line every 10% of apt's progress says where it is.
# Env: TARN_SETUP_LOG_DIR (default /var/log/tarn-setup), TARN_POLICY_RC_D (default
# /usr/sbin/policy-rc.d: the file that keeps services from starting during the install).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/steps.sh"

missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

log_dir=${TARN_SETUP_LOG_DIR:-/var/log/tarn-setup}
mkdir -p "$log_dir"
log="$log_dir/apt-$(date +%Y%m%d-%H%M%S).log"
step "installing ${#missing[@]} Debian package(s): ${missing[*]}"
step "apt's output: $log"

fail() {
    echo "---- $log ----" >&2
    cat "$log" >&2
    echo "---- end of $log ----" >&2
    step "FAILED: $1 (its whole output is above, and in $log)" >&2
    exit 1
}

# apt's machine-readable progress (APT::Status-Fd): "dlstatus:N:PERCENT:what" while
# downloading, "pmstatus:PKG:PERCENT:what" while unpacking and configuring.
report_progress() {
    local kind pkg pct what last=""
    while IFS=: read -r kind pkg pct what; do
        case "$kind" in dlstatus) kind="downloading" ;; pmstatus) kind="installing" ;; *) continue ;; esac
        pct=${pct%%.*}
        local decade="$kind $(( ${pct:-0} / 10 * 10 ))"
        if [ "$decade" != "$last" ]; then
            step "apt: $kind ${pct:-0}% ($what)"
            last=$decade
        fi
    done
}

export DEBIAN_FRONTEND=noninteractive
step "apt-get update"
apt-get update >>"$log" 2>&1 || fail "apt-get update"

policy=${TARN_POLICY_RC_D:-/usr/sbin/policy-rc.d}
printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
trap 'rm -f "$policy"' EXIT
step "apt-get install (services are not started)"
apt-get install -y --no-install-recommends -o APT::Status-Fd=3 "${missing[@]}" \
    3> >(report_progress) >>"$log" 2>&1 || fail "apt-get install ${missing[*]}"
sleep 0.2  # let the progress reader print its last line before ours
step "installed: ${missing[*]}"
