#!/usr/bin/env bash
# fsync latency: a redo-log pattern (4 KiB appends, fdatasync after each) with fio, on
#   ext4 on the data image, ext4 on the fast image (the "log device"),
#   tarn on the data image (intent log in the pool), tarn with the fast image as its SLOG,
#   tarn with sync=disabled (what fsync costs when it is not honoured, for scale).
# The fast image lives in /dev/shm (RAM), standing in for a local NVMe.
# Usage: bash bench/fsync.sh [SECONDS]     (root; after scripts/setup.sh)
set -euo pipefail
seconds=${1:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
tarn="$here/target/release/tarn"
work=$(mktemp -d /var/tmp/tarn-fsync.XXXXXX)
fast=$(mktemp -d /dev/shm/tarn-fsync.XXXXXX)
export TARN_CACHE_FILE="$work/cache.json" TARN_RUN_DIR="$work/run"
loops=()
cleanup() {
    for m in "$work"/m-*; do
        mountpoint -q "$m" 2>/dev/null && { "$tarn" umount "$m" 2>/dev/null || umount "$m"; }
    done
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    for p in fa fb fc; do "$tarn" pool destroy -f "$p" 2>/dev/null || true; done
    rm -rf "$work" "$fast"
}
trap cleanup EXIT

fio_p() { # dir -> "p50_us p99_us iops"
    fio --name=redo --directory="$1" --rw=write --bs=4k --size=256m --fdatasync=1 --ioengine=psync \
        --time_based --runtime="$seconds" --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; s=j["sync"]["lat_ns"]["percentile"]; print(round(s["50.000000"]/1000,1), round(s["99.000000"]/1000,1), round(j["write"]["iops"]))'
}
ext4_on() { # image -> mountpoint
    local img=$1 m=$2
    truncate -s 2G "$img"
    local l; l=$(losetup --find --show "$img"); loops+=("$l")
    mkfs.ext4 -q -F "$l"; mkdir -p "$m"; mount -o noatime "$l" "$m"
}
tarn_on() { # pool mountpoint [sync] data [log]
    local pool=$1 m=$2 sync=$3 data=$4 log=${5:-}
    "$tarn" pool create --size 2G "$pool" "$data" ${log:+log "$log"}
    "$tarn" ds create -o recordsize=16K -o compression=lz4 -o atime=off -o sync="$sync" "$pool/fs"
    mkdir -p "$m"; "$tarn" mount "$pool/fs" "$m"
}

cargo build --release -q -p tarn-cli
ext4_on "$work/e1.img" "$work/m-ext4"
ext4_on "$fast/e2.img" "$work/m-ext4-fast"
truncate -s 2G "$fast/slog.img"
tarn_on fa "$work/m-tarn" standard "$work/t1.img"
tarn_on fb "$work/m-tarn-slog" standard "$work/t2.img" "$fast/slog.img"
tarn_on fc "$work/m-tarn-nosync" disabled "$work/t3.img"

printf '%-34s %10s %10s %8s\n' "4 KiB append + fdatasync" "p50 us" "p99 us" "IOPS"
declare -A res
for s in ext4 ext4-fast tarn tarn-slog tarn-nosync; do
    res[$s]=$(fio_p "$work/m-$s")
    read -r p50 p99 iops <<<"${res[$s]}"
    printf '%-34s %10s %10s %8s\n' "$s" "$p50" "$p99" "$iops"
done
python3 - "${res[ext4]}" "${res[ext4-fast]}" "${res[tarn]}" "${res[tarn-slog]}" <<'PY'
import sys
e, ef, t, ts = (list(map(float, a.split())) for a in sys.argv[1:])
print(f"tarn / ext4 on the data image:        p50 {t[0]/e[0]:.2f}x  p99 {t[1]/e[1]:.2f}x")
print(f"tarn with SLOG / ext4 on the fast image: p50 {ts[0]/ef[0]:.2f}x  p99 {ts[1]/ef[1]:.2f}x")
PY
