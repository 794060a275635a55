#!/usr/bin/env bash
# A database's writes on a disk its reads already saturate (issue #11: steady under a
# saturated disk). On the lab's paced cloud disk (tarn-pacer: 500 IOPS, 8 MB/s, 16 KiB per
# I/O), fio runs three kinds of job at once over four files of 160 MiB (half compressible):
#   readers  4 jobs of 8 KiB random O_DIRECT reads: alone they use the whole disk
#   pages    4 jobs rewriting 8 KiB pages of the same files, 40 a second each, fdatasync
#            after every 8 (a buffer pool's page flushes)
#   wal      1 job appending 8 KiB with fdatasync after each, 15 a second (a redo log)
# on ext4 and on tarn (recordsize 8K, lz4, TARN_ARC_MAX 32M), each on a paced disk of its
# own. Per stack: read and write IOPS, write and fdatasync p99 and max latency; on tarn also
# its txg counters over the run (txgs committed, the longest sync, writers' waits at
# dirty_max). Then tarn / ext4.
# Before the fix of issue #11's stall a txg's commit waited for a moment with no reader at
# all: syncs of 20-50 s, writers held at dirty_max for tens of seconds (fsyncs of seconds).
# Usage: bash bench/saturated.sh [SECONDS]   (root; after scripts/setup.sh; SECONDS of fio per
# stack, default 90; each stack first lays out its files at the disk's 8 MB/s, ~80 s)
# TARN_BIN=PATH runs another tarn binary (two builds can be compared run by run).
# Everything it makes (pacers, loop devices, mounts, pools, images) is removed on exit,
# each by the id it was made with, also when interrupted.
set -euo pipefail
seconds=${1:-90}
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "usage: bash bench/saturated.sh [SECONDS]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/saturated.sh: run as root (loop devices, mounts)" >&2; exit 1; }
for t in fio losetup mkfs.ext4 python3; do
    command -v "$t" >/dev/null || { echo "bench/saturated.sh: $t is missing (run scripts/setup.sh)" >&2; exit 1; }
done
here=$(cd "$(dirname "$0")/.." && pwd)
tarn=${TARN_BIN:-$here/target/release/tarn}
pacer=${TARN_PACER:-$here/target/release/tarn-pacer}
for b in "$tarn" "$pacer"; do
    [ -x "$b" ] || { echo "bench/saturated.sh: $b not found (cargo build --release)" >&2; exit 1; }
done
work=$(mktemp -d /var/tmp/tarn-saturated.XXXXXX)
export TARN_CACHE_FILE="$work/cache.json" TARN_RUN_DIR="$work/run" TARN_ARC_MAX=32M
pacers=() loops=() ext4_mounts=() tarn_mounts=() pools=()
cleanup() {
    set +e
    cd /
    for m in "${tarn_mounts[@]}"; do mountpoint -q "$m" && { "$tarn" umount "$m" || umount "$m"; }; done
    for m in "${ext4_mounts[@]}"; do mountpoint -q "$m" && umount "$m"; done
    for p in "${pools[@]}"; do "$tarn" pool export "$p" 2>/dev/null; done
    for l in "${loops[@]}"; do losetup -d "$l"; done
    for p in "${pacers[@]}"; do
        kill "${p%%:*}" 2>/dev/null
        for _ in $(seq 50); do kill -0 "${p%%:*}" 2>/dev/null || break; sleep 0.1; done
        mountpoint -q "${p#*:}" && umount "${p#*:}"
    done
    rm -rf "$work"
}
trap cleanup EXIT

# Not run in $(...): the pacer and the loop device must be recorded in this shell for
# cleanup. Sets $disk to the loop device over the new paced disk.
paced_disk() { # name
    local dir="$work/$1" out pid
    mkdir -p "$dir/pacer"
    out=$("$pacer" --backing "$dir/disk.backing" --size 4294967296 --mountpoint "$dir/pacer" \
        --stats "$dir/pacer.json" --iops 500 --bandwidth 8388608 --max-io 16384)
    pid=$(tail -1 <<<"$out" | sed -n 's/^pid=//p')
    [ -n "$pid" ] || { echo "bench/saturated.sh: tarn-pacer did not start: $out" >&2; exit 1; }
    pacers+=("$pid:$dir/pacer")
    for _ in $(seq 100); do [ -e "$dir/pacer/disk" ] && break; sleep 0.1; done
    disk=$(losetup --find --show --direct-io=on "$dir/pacer/disk"); loops+=("$disk")
}

lay_out() { # dir
    fio --name=lay --directory="$1" --numjobs=4 --size=160M --bs=1M --rw=write \
        --buffer_compress_percentage=50 --refill_buffers --end_fsync=1 >/dev/null
}

# fio's JSON (one group: readers, pages and wal) -> "read_iops write_iops write_p99_ms
# write_max_ms sync_p99_ms sync_max_ms"
fio_summary() {
    python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
r, w, s = j["read"], j["write"], j["sync"]["lat_ns"]
ms = lambda ns: round(ns / 1e6, 1)
print(round(r["iops"]), round(w["iops"]), ms(w["clat_ns"]["percentile"]["99.000000"]), ms(w["clat_ns"]["max"]),
      ms(s["percentile"]["99.000000"]), ms(s["max"]))'
}

load() { # dir
    fio --directory="$1" --group_reporting --time_based --runtime="$seconds" --output-format=json \
        --name=readers --filename_format='lay.$jobnum.0' --numjobs=4 --rw=randread --bs=8k --direct=1 \
            --ioengine=psync --size=160M \
        --name=pages --filename_format='lay.$jobnum.0' --numjobs=4 --rw=randwrite --bs=8k --ioengine=psync \
            --size=160M --rate_iops=40 --buffer_compress_percentage=50 --fdatasync=8 \
        --name=wal --filename=wal --rw=write --bs=8k --size=64M --ioengine=psync --fdatasync=1 --rate_iops=15 \
        2>/dev/null | fio_summary
}

txg_counters() { # pool -> "synced max_sync_us dirty_max_waits dirty_max_wait_us"
    "$tarn" stats txg "$1" --json | python3 -c '
import json, sys
t = json.load(sys.stdin)
t = t.get("txg", t)
print(t["synced"], t["max_sync_us"], t["dirty_max_waits"], t["dirty_max_wait_us"])'
}

echo "bench/saturated.sh: ${seconds}s of fio per stack on a paced disk (500 IOPS, 8 MB/s, 16 KiB); tarn: $tarn"
paced_disk ext4
mkfs.ext4 -q -F "$disk"; mkdir -p "$work/ext4/mnt"; mount -o noatime "$disk" "$work/ext4/mnt"
ext4_mounts+=("$work/ext4/mnt")
echo "ext4: laying out the files"; lay_out "$work/ext4/mnt"
echo "ext4: running"; read -r e_rd e_wr e_wp99 e_wmax e_sp99 e_smax < <(load "$work/ext4/mnt")

paced_disk tarn
pool="satur$$"
"$tarn" pool create -f -o ashift=12 "$pool" "$disk" >/dev/null; pools+=("$pool")
"$tarn" ds create -o recordsize=8K -o compression=lz4 -o atime=off "$pool/db"
mkdir -p "$work/tarn/mnt"; "$tarn" mount "$pool/db" "$work/tarn/mnt"; tarn_mounts+=("$work/tarn/mnt")
echo "tarn: laying out the files"; lay_out "$work/tarn/mnt"
read -r s0 _ w0 wu0 < <(txg_counters "$pool")
echo "tarn: running"; read -r t_rd t_wr t_wp99 t_wmax t_sp99 t_smax < <(load "$work/tarn/mnt")
read -r s1 max_sync w1 wu1 < <(txg_counters "$pool")

python3 - "$e_rd" "$e_wr" "$e_wp99" "$e_wmax" "$e_sp99" "$e_smax" "$t_rd" "$t_wr" "$t_wp99" "$t_wmax" "$t_sp99" \
    "$t_smax" "$((s1 - s0))" "$max_sync" "$((w1 - w0))" "$((wu1 - wu0))" <<'EOF'
import sys
a = [float(x) for x in sys.argv[1:]]
e, t = a[0:6], a[6:12]
names = ["read IOPS", "write IOPS", "write p99 (ms)", "write max (ms)", "fdatasync p99 (ms)", "fdatasync max (ms)"]
print(f"\n{'metric':<22}{'ext4':>10}{'tarn':>10}{'tarn/ext4':>12}")
for n, x, y in zip(names, e, t):
    print(f"{n:<22}{x:>10g}{y:>10g}{(y / x if x else float('nan')):>12.2f}")
syncs, max_sync_us, waits, wait_us = a[12:16]
print(f"\ntarn txgs committed during the run: {syncs:g}; the longest sync (since mount): {max_sync_us / 1e6:.1f} s; "
      f"writers' waits at dirty_max: {waits:g} ({wait_us / 1e6:.1f} s in all)")
EOF
