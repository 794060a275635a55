#!/usr/bin/env bash
# The space maps' memory (issue #11: RSS bounded at any pool size). Creates a pool of
# POOL_GIB on a sparse image, mounts a 16K/lz4 dataset with TARN_ARC_MAX=64M, writes
# WRITE_GIB with fio (4 jobs, 1 MiB writes, half compressible), then CHURN_S seconds of
# random 16 KiB overwrites (0: none), and prints one line: the mount's time, the daemon's
# RSS after mount and after the writes, the space maps' memory (`map_memory_bytes`) and the
# live allocations outside the budget (`heap_other_size`), then the RSS of a fresh mount
# of the same pool (what a long-lived pool costs before any work).
# Usage: bash bench/space-maps.sh [POOL_GIB] [WRITE_GIB] [CHURN_S]   (root, after
#        scripts/setup.sh); defaults 24 16 0. TARN_BIN=PATH measures that `tarn` binary
#        (another build, in the same window). About 2 min at the defaults.
# Everything it makes (the mount, the pool, the image) is removed on exit.
set -euo pipefail
pool_gib=${1:-24} write_gib=${2:-16} churn_s=${3:-0}
here=$(cd "$(dirname "$0")/.." && pwd)
[[ $pool_gib =~ ^[0-9]+$ && $write_gib =~ ^[0-9]+$ && $churn_s =~ ^[0-9]+$ ]] ||
    { echo "usage: bash bench/space-maps.sh [POOL_GIB] [WRITE_GIB] [CHURN_S]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/space-maps.sh: run as root (FUSE mounts)" >&2; exit 1; }
command -v fio >/dev/null || { echo "bench/space-maps.sh: fio is missing (run scripts/setup.sh)" >&2; exit 1; }
if [ -n "${TARN_BIN:-}" ]; then
    tarn=$TARN_BIN
else
    (cd "$here" && cargo build --release -q -p tarn-cli)
    tarn="$here/target/release/tarn"
fi
work=$(mktemp -d /var/tmp/tarn-space-maps.XXXXXX)
export TARN_CACHE_FILE="$work/cache.json" TARN_RUN_DIR="$work/run"
mkdir -p "$work/mnt"
pool=spmap$$
cleanup() {
    set +e
    mountpoint -q "$work/mnt" && "$tarn" umount "$work/mnt"
    "$tarn" pool destroy -f "$pool" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
daemon_pid() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$TARN_RUN_DIR/$pool.mount"; }
mount_timed() { # prints the seconds the mount took
    local t0 t1
    t0=$(date +%s.%N)
    TARN_ARC_MAX=64M "$tarn" mount "$pool/fs" "$work/mnt"
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}

"$tarn" pool create --size "${pool_gib}G" "$pool" "$work/d0.img" 2>/dev/null
"$tarn" ds create -o recordsize=16K -o compression=lz4 -o atime=off "$pool/fs"
mount_s=$(mount_timed)
pid=$(daemon_pid)
sleep 3
rss_mount=$(rss_kib "$pid")
per_job=$(( write_gib * 1024 / 4 ))
if [ "$per_job" -gt 0 ]; then
    fio --name=w --directory="$work/mnt" --rw=write --bs=1M --size="${per_job}M" --numjobs=4 \
        --buffer_compress_percentage=50 --refill_buffers --end_fsync=1 --group_reporting >/dev/null
fi
if [ "$churn_s" -gt 0 ] && [ "$per_job" -gt 0 ]; then
    fio --name=w --directory="$work/mnt" --rw=randwrite --bs=16k --size="${per_job}M" --numjobs=4 \
        --buffer_compress_percentage=50 --refill_buffers --time_based --runtime="$churn_s" \
        --end_fsync=1 --group_reporting >/dev/null
fi
sleep 8 # a txg or two: the frees released
rss_written=$(rss_kib "$pid")
read -r map_bytes heap_other < <("$tarn" stats all "$pool" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["space"].get("map_memory_bytes", "-"), s["arc"]["heap_other_size"])')
"$tarn" umount "$work/mnt"
remount_s=$(mount_timed)
pid=$(daemon_pid)
sleep 3
rss_remount=$(rss_kib "$pid")
mib() { python3 -c "import sys; v=sys.argv[1]; print(v if v == '-' else f'{int(v) / 2**20:.2f}')" "$1"; }
echo "pool ${pool_gib} GiB, wrote ${write_gib} GiB, ${churn_s} s of overwrites: mount ${mount_s} s, RSS $(mib $(( rss_mount * 1024 ))) MiB;" \
    "after the writes RSS $(mib $(( rss_written * 1024 ))) MiB, space maps $(mib "$map_bytes") MiB, heap_other $(mib "$heap_other") MiB;" \
    "fresh mount ${remount_s} s, RSS $(mib $(( rss_remount * 1024 ))) MiB"
