#!/usr/bin/env bash
# Runs the POSIX conformance suites against a fresh tarn mount and prints pass counts:
# pjdfstest (Rust rewrite) and fsx (Rust rewrite), both from the Rust package registry.
#   bash scripts/posix-suites.sh [FSX_OPS]
# Installs them with `cargo install` if missing. Uses a private pool in a temp dir;
# stops its own mount daemon (by pid) on exit.
# Exclusions / skips (pjdfstest): tests needing a secondary file system (EXDEV), remounts
# (read-only/EROFS), and an unknown LINK_MAX are skipped by pjdfstest itself; nothing is
# listed as an expected failure.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
fsx_ops=${1:-20000}
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
command -v pjdfstest >/dev/null || cargo install --quiet pjdfstest
command -v fsx >/dev/null || cargo install --quiet fsx
# TARN_BIN: a tarn binary to test (the cargo test passes its own); else build one.
if [ -n "${TARN_BIN:-}" ]; then
    tarn=$TARN_BIN
else
    cargo build --release --quiet --manifest-path "$here/Cargo.toml" -p tarn-cli
    tarn="$here/target/release/tarn"
fi

work=$(mktemp -d)
chmod 755 "$work"  # the suites switch to unprivileged users, who must reach the mount
export TARN_CACHE_FILE="$work/pools.json" TARN_RUN_DIR="$work/run"
mnt="$work/mnt"
cleanup() {
    if [ -f "$TARN_RUN_DIR/suites.mount" ]; then
        "$tarn" umount "$mnt" || { kill -9 "$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$TARN_RUN_DIR/suites.mount")" 2>/dev/null; umount -l "$mnt" 2>/dev/null; }
    fi
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$mnt"
"$tarn" pool create suites "$work/d0.img" --size 2G
"$tarn" ds create suites/fs
# TARN_TEST_TRANSPORT=dev|uring: the FUSE transport to mount with (unset: tarn's default).
# A uring mount the kernel refuses is served over /dev/fuse: that run would test the wrong
# transport, so it stops here instead.
transport=()
if [ -n "${TARN_TEST_TRANSPORT:-}" ]; then
    [ "$TARN_TEST_TRANSPORT" = uring ] && echo 1 > /sys/module/fuse/parameters/enable_uring
    transport=(--transport "$TARN_TEST_TRANSPORT")
fi
"$tarn" mount "${transport[@]}" suites/fs "$mnt"
served=$("$tarn" stats fuse suites | sed -n 's/^fuse .* transport //p')
echo "posix-suites: FUSE transport $served"
if [ -n "${TARN_TEST_TRANSPORT:-}" ] && [ "$served" != "$TARN_TEST_TRANSPORT" ]; then
    echo "posix-suites: asked for transport $TARN_TEST_TRANSPORT, the mount is served over $served" >&2
    exit 1
fi

# pjdfstest needs two unprivileged users with their own groups.
cat > "$work/pjdfstest.toml" <<'TOML'
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}
[settings]
naptime = 0.001
allow_remount = false
expected_failures = []
[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
TOML
mkdir "$mnt/pjd"
pjd_rc=0
(cd "$work" && pjdfstest -c "$work/pjdfstest.toml" -p "$mnt/pjd" > "$work/pjdfstest.log" 2>&1) || pjd_rc=$?
grep -E "FAILED$" "$work/pjdfstest.log" || true
echo "pjdfstest: $(grep '^Summary' "$work/pjdfstest.log" || echo "no summary (exit $pjd_rc)")"

fsx_rc=0
(cd "$work" && fsx -N "$fsx_ops" -S 1 -P "$work" "$mnt/fsx.file" > "$work/fsx.log" 2>&1) || fsx_rc=$?
if [ $fsx_rc -eq 0 ]; then
    echo "fsx: $fsx_ops operations passed"
else
    echo "fsx: FAILED (exit $fsx_rc):"; tail -20 "$work/fsx.log"
fi
[ $pjd_rc -eq 0 ] && [ $fsx_rc -eq 0 ]
