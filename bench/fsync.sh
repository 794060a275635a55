#!/usr/bin/env bash
# fsync latency, tarn against ext4 in one run, with fio (psync, one job, fdatasync after
# every write), in two patterns:
#   redo   4 KiB appends (a redo/WAL log)
#   pages  16 KiB random overwrites within a 256 MiB file (database data pages); the file
#          is written and fdatasync'ed first, then left to settle past a txg, untimed
# on these stacks:
#   ext4            ext4 on the data image
#   ext4-fast       ext4 on the fast image (the "log device")
#   tarn            tarn on the data image, intent log in the pool, logbias=latency
#   tarn-thr        the same with logbias=throughput
#   tarn-slog       tarn with the fast image as its SLOG, logbias=latency
#   tarn-slog-thr   the same with logbias=throughput
#   tarn-nosync     tarn with sync=disabled (what fsync costs when it is not honoured, for scale)
# The fast image lives in /dev/shm (RAM), standing in for a local NVMe.
# Per pattern: a table (fdatasync p50/p99, write() p50/p99, IOPS = write+fdatasync pairs
# per second), then ratios: every tarn variant against ext4 on the data image, and the
# SLOG variants against ext4 on the fast image (issue #5's aim: p50 within 1.5x there).
# Usage: bash bench/fsync.sh [SECONDS] [--transport dev|uring]
#   (root; after scripts/setup.sh; SECONDS per fio run, default 10; --transport: the FUSE
#   transport every tarn stack is mounted with, default tarn's own, /dev/fuse; the table
#   says which one served)
# Everything it makes (mounts, loop devices, pools, images) is removed on exit, each by
# the id it was made with, also when interrupted.
set -euo pipefail
usage="usage: bash bench/fsync.sh [SECONDS] [--transport dev|uring]"
seconds=10
transport=()
while [ $# -gt 0 ]; do
    case "$1" in
        --transport)
            case "${2:-}" in
                dev|uring) transport=(--transport "$2") ;;
                *) echo "bench/fsync.sh: --transport takes dev or uring, not '${2:-}'" >&2; exit 2 ;;
            esac
            shift 2 ;;
        *) seconds=$1; shift ;;
    esac
done
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "$usage" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/fsync.sh: run as root (loop devices, mounts)" >&2; exit 1; }
for t in fio losetup mkfs.ext4 python3 cargo; do
    command -v "$t" >/dev/null || { echo "bench/fsync.sh: $t is missing (run scripts/setup.sh)" >&2; exit 1; }
done
here=$(cd "$(dirname "$0")/.." && pwd)
tarn="$here/target/release/tarn"
work=$(mktemp -d /var/tmp/tarn-fsync.XXXXXX)
fast=$(mktemp -d /dev/shm/tarn-fsync.XXXXXX)
# A private pool cache and run dir: this script sees and touches only its own pools.
export TARN_CACHE_FILE="$work/cache.json" TARN_RUN_DIR="$work/run"
loops=() pools=() ext4_mounts=() tarn_mounts=()
cleanup() {
    set +e
    for m in "${tarn_mounts[@]}"; do
        mountpoint -q "$m" && { "$tarn" umount "$m" || umount "$m"; }
    done
    for m in "${ext4_mounts[@]}"; do mountpoint -q "$m" && umount "$m"; done
    for l in "${loops[@]}"; do losetup -d "$l"; done
    for p in "${pools[@]}"; do "$tarn" pool destroy -f "$p" 2>/dev/null; done
    rm -rf "$work" "$fast"
}
trap cleanup EXIT

ext4_on() { # image mountpoint
    local img=$1 m=$2
    truncate -s 2G "$img"
    local l; l=$(losetup --find --show "$img"); loops+=("$l")
    mkfs.ext4 -q -F "$l"; mkdir -p "$m"; mount -o noatime "$l" "$m"; ext4_mounts+=("$m")
}
tarn_on() { # pool mountpoint sync logbias data [log]
    local pool=$1 m=$2 sync=$3 logbias=$4 data=$5 log=${6:-}
    "$tarn" pool create --size 2G "$pool" "$data" ${log:+log "$log"}; pools+=("$pool")
    "$tarn" ds create -o recordsize=16K -o compression=lz4 -o atime=off \
        -o sync="$sync" -o logbias="$logbias" "$pool/fs"
    mkdir -p "$m"; "$tarn" mount "${transport[@]}" "$pool/fs" "$m"; tarn_mounts+=("$m")
    served+=("$("$tarn" stats fuse "$pool" | sed -n 's/^fuse .* transport //p')")
}
served=()

# fio's JSON -> "sync_p50_us sync_p99_us write_p50_us write_p99_us iops"
fio_summary() {
    python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
s, w = j["sync"]["lat_ns"]["percentile"], j["write"]["clat_ns"]["percentile"]
us = lambda p, k: round(p[k] / 1000, 1)
print(us(s, "50.000000"), us(s, "99.000000"), us(w, "50.000000"), us(w, "99.000000"), round(j["write"]["iops"]))'
}
run_redo() { # dir
    fio --name=redo --directory="$1" --rw=write --bs=4k --size=256m --fdatasync=1 --ioengine=psync \
        --time_based --runtime="$seconds" --output-format=json 2>/dev/null | fio_summary
    rm -f "$1"/redo.*
}
run_pages() { # dir
    # The file first, written whole and made durable, so the timed phase only overwrites;
    # then past a txg (tarn commits every 5 s) so the layout's commit is not timed either.
    fio --name=pages --directory="$1" --rw=write --bs=1m --size=256m --end_fsync=1 --ioengine=psync \
        --output-format=json >/dev/null 2>&1
    sleep 6
    fio --name=pages --directory="$1" --rw=randwrite --bs=16k --size=256m --overwrite=1 --fdatasync=1 \
        --ioengine=psync --time_based --runtime="$seconds" --output-format=json 2>/dev/null | fio_summary
    rm -f "$1"/pages.*
}

cargo build --release -q -p tarn-cli --manifest-path "$here/Cargo.toml"
stacks=(ext4 ext4-fast tarn tarn-thr tarn-slog tarn-slog-thr tarn-nosync)
ext4_on "$work/e1.img" "$work/m-ext4"
ext4_on "$fast/e2.img" "$work/m-ext4-fast"
tarn_on "fs$$lat" "$work/m-tarn" standard latency "$work/t1.img"
tarn_on "fs$$thr" "$work/m-tarn-thr" standard throughput "$work/t2.img"
tarn_on "fs$$slat" "$work/m-tarn-slog" standard latency "$work/t3.img" "$fast/slog1.img"
tarn_on "fs$$sthr" "$work/m-tarn-slog-thr" standard throughput "$work/t4.img" "$fast/slog2.img"
tarn_on "fs$$nos" "$work/m-tarn-nosync" disabled latency "$work/t5.img"

echo "tarn stacks served over FUSE transport: $(printf '%s\n' "${served[@]}" | sort -u | paste -sd,)"
for pattern in redo pages; do
    case $pattern in
        redo) title="4 KiB append + fdatasync" ;;
        pages) title="16 KiB random write + fdatasync" ;;
    esac
    echo
    printf '%-32s %11s %11s %11s %11s %8s\n' "$title" "sync p50us" "sync p99us" "wr p50us" "wr p99us" "IOPS"
    results=()
    for s in "${stacks[@]}"; do
        r=$("run_$pattern" "$work/m-$s")
        read -r p50 p99 w50 w99 iops <<<"$r"
        printf '%-32s %11s %11s %11s %11s %8s\n' "$s" "$p50" "$p99" "$w50" "$w99" "$iops"
        results+=("$s=$r")
    done
    python3 - "${results[@]}" <<'PY'
import sys
r = {}
for arg in sys.argv[1:]:
    name, values = arg.split("=", 1)
    r[name] = list(map(float, values.split()))
def ratio(a, b):
    x, y = r[a], r[b]
    q = lambda i: f"{x[i] / y[i]:.2f}x" if y[i] > 0 else "n/a"
    return f"fdatasync p50 {q(0)}  p99 {q(1)}  IOPS {q(4)}"
for t in ("tarn", "tarn-thr", "tarn-slog", "tarn-slog-thr", "tarn-nosync"):
    print(f"{t + ' / ext4 (data image)':<40} {ratio(t, 'ext4')}")
for t in ("tarn-slog", "tarn-slog-thr"):
    print(f"{t + ' / ext4-fast (fast image)':<40} {ratio(t, 'ext4-fast')}   (aim: p50 <= 1.50x)")
PY
done
