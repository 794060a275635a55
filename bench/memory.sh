#!/usr/bin/env bash
# Memory against the budget (issue #11): the RSS of the `tarn mount` daemon, sampled every
# second, while it
#   write       writes DATA_GIB of 16 KiB-record data (fio, sequential, half compressible),
#   randwrite   writes random 16 KiB pages of it with an fsync after each, for 20 s,
#   randread    reads random 16 KiB pages of it for a while,
#   seqread     reads it all in order,
#   files       creates FILES small files (1,000 per directory),
#   readfiles   reads every one of them back,
#   shrink      is told `tarn tune POOL arc_max=SHRINK_TO` and left idle,
# with TARN_ARC_MAX=ARC_MAX. Writes memory.csv (time, phase, RSS, the budget, what the
# budget accounts for, ARC blocks, decoded metadata, hot copies, dirty data, and the rest of
# RSS split into live allocations outside the budget and the allocator's slack) and memory.png
# (RSS over time with the budget line and the stated bound arc_max + 64 MiB: dirty data is
# inside the budget) into OUT_DIR.
# DATA_GIB 0 skips the four data phases (the files alone: memory per file, issue #11).
# Usage: bash bench/memory.sh [DATA_GIB] [FILES] [OUT_DIR]   (root; after scripts/setup.sh
#        and lab/setup.sh — the plot uses lab/.venv's matplotlib)
#   defaults: 20 GiB, 1,000,000 files, bench/out/memory; ARC_MAX (256M) and SHRINK_TO (64M)
#   from the environment; TARN_BIN=PATH runs that `tarn` binary instead of building this
#   tree's (to measure another build in the same window). fio's report of the write phase
#   goes to OUT_DIR/write-fio.txt and its bandwidth is printed (the random writes' to
#   OUT_DIR/randwrite-fio.txt).
# Runtime: dominated by the disk — about 20 min for 20 GiB and 1M files on this 2-core
# machine; `bash bench/memory.sh 2 100000` takes ~3 min.
# Everything it makes (the mount, the pool, the images) is removed on exit, also when
# interrupted; the CSV and the PNG stay.
set -euo pipefail
data_gib=${1:-20}
files=${2:-1000000}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${3:-$here/bench/out/memory}
arc_max=${ARC_MAX:-256M}
shrink_to=${SHRINK_TO:-64M}
[[ $data_gib =~ ^[0-9]+$ && $files =~ ^[0-9]+$ ]] || { echo "usage: bash bench/memory.sh [DATA_GIB] [FILES] [OUT_DIR]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/memory.sh: run as root (FUSE mounts)" >&2; exit 1; }
py="$here/lab/.venv/bin/python"
for t in fio python3 cargo; do
    command -v "$t" >/dev/null || { echo "bench/memory.sh: $t is missing (run scripts/setup.sh)" >&2; exit 1; }
done
[ -x "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null || { echo "bench/memory.sh: no matplotlib in lab/.venv (run bash lab/setup.sh)" >&2; exit 1; }
if [ -n "${TARN_BIN:-}" ]; then
    tarn=$TARN_BIN
else
    (cd "$here" && cargo build --release -q -p tarn-cli)
    tarn="$here/target/release/tarn"
fi
work=$(mktemp -d /var/tmp/tarn-memory.XXXXXX)
export TARN_CACHE_FILE="$work/cache.json" TARN_RUN_DIR="$work/run"
mkdir -p "$out" "$work/mnt"
pool=memb sampler=""
cleanup() {
    set +e
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null
    mountpoint -q "$work/mnt" && "$tarn" umount "$work/mnt"
    "$tarn" pool destroy -f "$pool" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

size_bytes() { # 256M -> bytes
    "$py" -c 'import sys; v=sys.argv[1]; m={"K":1<<10,"M":1<<20,"G":1<<30}; print(int(v[:-1])*m[v[-1].upper()] if v[-1].upper() in m else int(v))' "$1"
}

img_gib=$(( data_gib * 3 / 4 + 4 + files / 200000 ))
"$tarn" pool create --size "${img_gib}G" "$pool" "$work/d0.img"
"$tarn" ds create -o recordsize=16K -o compression=lz4 -o atime=off "$pool/fs"
TARN_ARC_MAX=$arc_max "$tarn" mount "$pool/fs" "$work/mnt"
pid=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$TARN_RUN_DIR/$pool.mount")
echo "bench/memory.sh: daemon pid $pid, arc_max $arc_max, ${data_gib} GiB, $files files -> $out"

echo start > "$work/phase"
t0=$(date +%s)
sample() { # one CSV line a second: t, phase, rss, budget, accounted, arc blocks, decoded
    echo "t,phase,rss,arc_max,accounted,arc_blocks,decoded_indirect,decoded_objects,hot,dirty,heap_other,allocator_slack" > "$out/memory.csv"
    while kill -0 "$pid" 2>/dev/null; do
        local rss stats
        rss=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$pid/status" 2>/dev/null || echo 0)
        stats=$("$tarn" stats arc "$pool" --json 2>/dev/null | "$py" -c 'import json,sys; a=json.load(sys.stdin)["arc"]; print(",".join(str(a.get(k,0)) for k in ["max","accounted_size","size","decoded_indirect_size","decoded_objects_size","hot_copies_size","dirty_size","heap_other_size","allocator_slack_size"]))' 2>/dev/null || echo "0,0,0,0,0,0,0,0,0")
        echo "$(( $(date +%s) - t0 )),$(cat "$work/phase"),$rss,$stats" >> "$out/memory.csv"
        sleep 1
    done
}
sample &
sampler=$!
phase() { echo "$1" > "$work/phase"; echo "bench/memory.sh: $1 ($(( $(date +%s) - t0 )) s)"; }

if [ "$data_gib" -gt 0 ]; then
    phase write
    per_file=$(( data_gib * 1024 / 4 ))
    fio --name=write --directory="$work/mnt" --rw=write --bs=1M --size="${per_file}M" --numjobs=4 \
        --buffer_compress_percentage=50 --refill_buffers --end_fsync=1 --group_reporting > "$out/write-fio.txt"
    echo "bench/memory.sh: write phase: $(grep -m1 -o 'WRITE: bw=[^ ]* [^ ]*' "$out/write-fio.txt")"
    phase randwrite
    fio --name=write --directory="$work/mnt" --rw=randwrite --bs=16k --size="${per_file}M" --numjobs=4 \
        --fsync=1 --buffer_compress_percentage=50 --refill_buffers --time_based --runtime=20 \
        --group_reporting > "$out/randwrite-fio.txt"
    echo "bench/memory.sh: randwrite phase: $(grep -m1 -o 'write: IOPS=[^ ]* BW=[^ ]* [^ ]*' "$out/randwrite-fio.txt")"
    phase randread
    fio --name=write --directory="$work/mnt" --rw=randread --bs=16k --size="${per_file}M" --numjobs=4 \
        --time_based --runtime=$(( 30 + data_gib * 3 )) --group_reporting >/dev/null
    phase seqread
    cat "$work/mnt"/write.* > /dev/null
fi
phase files
"$py" - "$work/mnt/files" "$files" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "w") as f:
        f.write(f"file {i}\n")
EOF
phase readfiles
"$py" - "$work/mnt/files" <<'EOF'
import os, sys
for d, _, names in os.walk(sys.argv[1]):
    for n in names:
        with open(os.path.join(d, n)) as f:
            f.read()
EOF
phase shrink
"$tarn" tune "$pool" "arc_max=$shrink_to"
sleep 20
phase end
sleep 2
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; sampler=""

# The stated bound: the budget (which holds dirty data too) + 64 MiB fixed.
bound_extra=$(( 64 << 20 ))
"$py" - "$out/memory.csv" "$out/memory.png" "$bound_extra" "$data_gib" "$files" <<'EOF'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
extra, data_gib, files = int(sys.argv[3]), sys.argv[4], sys.argv[5]
mib = lambda k: [int(r[k]) / 2**20 for r in rows]
t = [int(r["t"]) for r in rows]
fig, ax = plt.subplots(figsize=(10, 5))
ax.plot(t, mib("rss"), label="RSS of the mount daemon", color="tab:red", lw=1.6)
ax.plot(t, mib("accounted"), label="accounted by the budget", color="tab:blue", lw=1)
ax.plot(t, mib("arc_max"), label="budget (arc_max)", color="black", ls="--", lw=1.2)
ax.plot(t, [m + extra / 2**20 for m in mib("arc_max")], label="bound: arc_max + 64 MiB", color="gray", ls=":", lw=1.2)
start = 0
for i in range(1, len(rows) + 1):
    if i == len(rows) or rows[i]["phase"] != rows[start]["phase"]:
        ax.axvspan(t[start], t[i - 1], alpha=0.06 if rows[start]["phase"] in ("write", "seqread", "readfiles") else 0.0, color="gray")
        ax.text((t[start] + t[i - 1]) / 2, ax.get_ylim()[1] * 0.02, rows[start]["phase"], ha="center", fontsize=8, rotation=90)
        start = i
ax.set_xlabel("seconds")
ax.set_ylabel("MiB")
ax.set_title(f"tarn mount daemon: RSS against the budget ({data_gib} GiB written and read, {files} files)")
ax.legend(loc="upper left", fontsize=8)
ax.set_ylim(bottom=0)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
peak = max(mib("rss"))
print(f"peak RSS {peak:.0f} MiB; RSS at the end {mib('rss')[-1]:.0f} MiB; plot {sys.argv[2]}")
EOF
