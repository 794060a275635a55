#!/usr/bin/env bash
# Mount benchmark, tarn against ext4 in one run. Each gets an equal image file: ext4 on
# a loop device over one, a tarn pool (dataset recordsize=16K, compression=lz4, mounted
# with FUSE) on the other. On each, and on tarn once per FUSE transport asked:
#   1. fio 16 KiB random writes with an fsync after each (--fsync=1): fsync latency p50/p99
#   2. fio 16 KiB random reads with O_DIRECT, 4 jobs: IOPS
#   3. a private MariaDB (small buffer pool, data >= 4x it, O_DIRECT): sysbench
#      oltp_read_write then oltp_read_only, 8 threads
# and prints one table with the ratios tarn/ext4, a column per transport.
# Usage: bash bench/mount.sh [--time SECS] [--long] [--transport dev|uring|both]
#                            [--settings recommended|same] [--work DIR]
#   (root; scripts/setup.sh first)
#   --time SECS  seconds per fio and sysbench run (default 15); --long = 120
#   --transport  the FUSE transports to measure tarn on (default both; uring falls back to
#                dev where the kernel refuses it, and the table says which one served)
#   --settings   recommended (default): each stack as the README and the lab set it up —
#                on tarn innodb_doublewrite=0 and atime=off (a page write is applied whole,
#                so InnoDB's second copy buys nothing), on ext4 the doublewrite buffer
#                stays on (ext4 can tear a 16 KiB page), and on both innodb_lru_scan_depth
#                sized to the pool (README); same: both with MariaDB's defaults
#   --profile DIR  record each sysbench run with perf (whole system, call graphs) and write
#                DIR/STACK-WORKLOAD.folded and .svg, flame graphs drawn by inferno
#                (`cargo install inferno`), and DIR/STACK-WORKLOAD.top: the daemon's
#                heaviest frames
# TARN_BIN=PATH measures that `tarn` binary instead of building this tree's (two builds, run
# by run, in one window).
# Cleans up what it made (its mariadbd, the tarn daemon, the ext4 mount, the loop
# device), each by its own pid or path, also when interrupted.
set -euo pipefail
secs=15
work=""
transports="dev uring"
settings=recommended
profile=""
while [ $# -gt 0 ]; do
    case "$1" in
        --time) secs=$2; shift 2 ;;
        --long) secs=120; shift ;;
        --work) work=$2; shift 2 ;;
        --transport)
            case "$2" in
                dev|uring) transports=$2 ;;
                both) transports="dev uring" ;;
                *) echo "$0: --transport takes dev, uring or both, not '$2'" >&2; exit 2 ;;
            esac
            shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --settings)
            case "$2" in
                recommended|same) settings=$2 ;;
                *) echo "$0: --settings takes recommended or same, not '$2'" >&2; exit 2 ;;
            esac
            shift 2 ;;
        *) echo "usage: $0 [--time SECS] [--long] [--transport dev|uring|both] [--settings recommended|same] [--profile DIR] [--work DIR]" >&2
           exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/mount.sh: run as root (loop devices, mounts)" >&2; exit 1; }
for t in fio sysbench mariadbd mariadb-install-db losetup mkfs.ext4 python3; do
    command -v "$t" >/dev/null || { echo "bench/mount.sh: $t is missing (run scripts/setup.sh)" >&2; exit 1; }
done
if [ -n "$profile" ]; then
    for t in perf inferno-collapse-perf inferno-flamegraph; do
        command -v "$t" >/dev/null || {
            echo "bench/mount.sh: --profile needs $t (perf: apt-get install linux-perf; inferno: cargo install inferno)" >&2
            exit 1
        }
    done
    mkdir -p "$profile"
fi
here=$(cd "$(dirname "$0")/.." && pwd)
tarn=${TARN_BIN:-$here/target/release/tarn}
[ -n "$work" ] || work=$(mktemp -d /var/tmp/tarn-mount-bench.XXXXXX)
mkdir -p "$work"
export TARN_CACHE_FILE="$work/pools.json" TARN_RUN_DIR="$work/run"

img_size=4G
bp=32M          # InnoDB buffer pool; the data below is ~8 x 20 MiB = 160 MiB+ (>= 4x)
tables=8
rows=80000
threads=8
pool="mbench$$"

loop="" mysqld_pid=""
cleanup() {
    set +e
    [ -n "$mysqld_pid" ] && kill -9 "$mysqld_pid" 2>/dev/null && wait "$mysqld_pid" 2>/dev/null
    mountpoint -q "$work/tarn" && "$tarn" umount "$work/tarn"
    mountpoint -q "$work/ext4" && umount "$work/ext4"
    [ -n "$loop" ] && losetup -d "$loop"
    rm -rf "$work"
}
trap cleanup EXIT

[ -n "${TARN_BIN:-}" ] || cargo build --release -q -p tarn-cli --manifest-path "$here/Cargo.toml"

setup_ext4() {
    truncate -s "$img_size" "$work/ext4.img"
    loop=$(losetup --find --show "$work/ext4.img")
    mkfs.ext4 -q "$loop"
    mkdir -p "$work/ext4"
    mount "$loop" "$work/ext4"
}

# A fresh pool on a fresh image per transport, so each starts from the same state.
setup_tarn() {
    local transport=$1
    mountpoint -q "$work/tarn" && "$tarn" umount "$work/tarn"
    if "$tarn" pool list 2>/dev/null | grep -qw "$pool"; then "$tarn" pool destroy -f "$pool" >/dev/null; fi
    rm -f "$work/tarn.img"
    "$tarn" pool create "$pool" "$work/tarn.img" --size "$img_size" >/dev/null
    local atime=()
    [ "$settings" = recommended ] && atime=(-o atime=off)
    "$tarn" ds create -o recordsize=16K -o compression=lz4 "${atime[@]}" "$pool/db"
    mkdir -p "$work/tarn"
    "$tarn" mount --transport "$transport" "$pool/db" "$work/tarn"
}

# The transport the mount really uses (uring may have fallen back to dev).
transport_in_use() {
    "$tarn" stats fuse "$pool" --json | python3 -c '
import json, sys
mounts = json.load(sys.stdin)
mounts = mounts.get("mounts", mounts) if isinstance(mounts, dict) else mounts
print(",".join(sorted({m["transport"] for m in mounts})) or "?")'
}

# fio: prints "p50_us p99_us iops" of the fsync latency.
fio_fsync() {
    local dir=$1
    fio --name=fsync --directory="$dir" --size=256M --rw=randwrite --bs=16k --fsync=1 \
        --ioengine=psync --runtime="$secs" --time_based --output-format=json >"$work/fio.json"
    rm -f "$dir"/fsync.*
    python3 - "$work/fio.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
p = j["sync"]["lat_ns"]["percentile"]
print(f'{p["50.000000"]/1000:.1f} {p["99.000000"]/1000:.1f} {j["write"]["iops"]:.0f}')
EOF
}

# fio: prints the IOPS of 16 KiB random reads with O_DIRECT from 4 jobs.
fio_randread() {
    local dir=$1
    fio --name=randread --directory="$dir" --size=256M --numjobs=4 --rw=randread --bs=16k --direct=1 \
        --ioengine=psync --runtime="$secs" --time_based --group_reporting --output-format=json >"$work/fio.json"
    rm -f "$dir"/randread.*
    python3 - "$work/fio.json" <<'EOF'
import json, sys
print(f'{json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]:.0f}')
EOF
}

# start_mariadb DATADIR [DOUBLEWRITE]: DOUBLEWRITE 0 or 1 (default 1, MariaDB's own).
start_mariadb() {
    local datadir=$1 doublewrite=${2:-1}
    mariadb-install-db --no-defaults --datadir="$datadir" --user=root \
        --auth-root-authentication-method=normal --skip-test-db >/dev/null
    mariadbd --no-defaults --datadir="$datadir" --socket="$work/sock" --skip-networking --user=root \
        --innodb-buffer-pool-size="$bp" --innodb-log-file-size=64M --innodb-flush-method=O_DIRECT \
        --innodb-doublewrite="$doublewrite" "${lru_args[@]}" --pid-file="$work/m.pid" >"$work/mariadbd.log" 2>&1 &
    mysqld_pid=$!
    for _ in $(seq 120); do mariadb --socket="$work/sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && return; sleep 1; done
    echo "mariadbd did not start; log:" >&2; cat "$work/mariadbd.log" >&2; exit 1
}

stop_mariadb() {
    mariadb-admin --socket="$work/sock" -uroot shutdown
    wait "$mysqld_pid" || true
    mysqld_pid=""
}

# sb_run WORKLOAD LABEL: sysbench WORKLOAD's run, under perf when --profile is given;
# prints sysbench's output.
sb_run() {
    local wl=$1 label=$2
    [ -n "$profile" ] || { sb "$wl" run; return; }
    local out="$profile/$label-$wl"
    perf record -a -g --call-graph dwarf,16384 -F 199 -o "$out.data" -- sleep "$secs" >/dev/null 2>&1 &
    local perf_pid=$!
    sb "$wl" run
    wait "$perf_pid" || true
    perf script --no-inline -i "$out.data" 2>/dev/null | inferno-collapse-perf --all >"$out.folded"
    inferno-flamegraph --title "$label: $wl (whole system)" <"$out.folded" >"$out.svg"
    rm -f "$out.data"
    # The daemon's share of the CPU, and its heaviest frames (inclusive).
    python3 - "$out.folded" >"$out.top" <<'PY'
import collections, sys
total = daemon = 0
frames = collections.Counter()
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    n = int(n)
    total += n
    parts = stack.split(";")
    if parts[0].startswith(("fuser-", "tarn-", "txg_sync", "vdev-write")):
        daemon += n
        for f in set(parts[1:]):
            frames[f] += n
print(f"daemon threads: {100 * daemon / max(total, 1):.1f}% of all samples")
for f, n in frames.most_common(40):
    print(f"{100 * n / max(daemon, 1):5.1f}%  {f[:140]}")
PY
}

sb() {
    sysbench "$1" --db-driver=mysql --mysql-socket="$work/sock" --mysql-user=root --mysql-db=sbtest \
        --tables="$tables" --table-size="$rows" --threads="$threads" --time="$secs" "${@:2}"
}

# sysbench on a fresh MariaDB in DIR: sets o_rw, o_ro (TPS) and o_mib. Runs in this
# shell (not a subshell), so the cleanup trap knows mariadbd's pid. DOUBLEWRITE as for
# start_mariadb; LABEL names the profile files (--profile).
oltp() {
    local dir=$1 dw=$2 label=$3
    start_mariadb "$dir/data" "$dw"
    mariadb --socket="$work/sock" -uroot -e "CREATE DATABASE sbtest"
    sb oltp_read_write --threads=4 prepare >/dev/null
    local mib
    mib=$(du -sm "$dir/data/sbtest" | cut -f1)
    # Restart so both runs start from a cold buffer pool.
    stop_mariadb; start_mariadb "$dir/data" "$dw"
    o_rw=$(sb_run oltp_read_write "$label" | awk '/transactions:/ {gsub(/\(/,"",$3); print $3}')
    o_ro=$(sb_run oltp_read_only "$label" | awk '/transactions:/ {gsub(/\(/,"",$3); print $3}')
    stop_mariadb
    o_mib=$mib
}

# One column of results in col[LABEL]: "p50 p99 fsync_iops randread_iops rw_tps ro_tps data_mib".
# DOUBLEWRITE as for start_mariadb.
measure() {
    local dir=$1 label=$2 dw=$3
    local p50 p99 iops rr
    echo "fio fsync: $label" >&2; read -r p50 p99 iops < <(fio_fsync "$dir")
    echo "fio randread: $label" >&2; rr=$(fio_randread "$dir")
    echo "sysbench: $label" >&2; oltp "$dir" "$dw" "$label"
    col[$label]="$p50 $p99 $iops $rr $o_rw $o_ro $o_mib"
}

echo "bench/mount.sh: ${secs}s per run, $threads threads, buffer pool $bp, $tables x $rows rows;" \
     "tarn over: $transports; settings $settings; work dir $work" >&2
# The doublewrite buffer on tarn: off as the README recommends, or MariaDB's default.
tarn_dw=0
[ "$settings" = same ] && tarn_dw=1
# The page cleaner's free list, as the README recommends and the lab sets on every stack:
# 1/64 of the pool's pages within 100..1536 (MariaDB's default, 1536 pages, is 75% of this
# 32 MiB pool, held evicted and empty). MariaDB's default under --settings same.
lru_depth=$(( $(numfmt --from=iec "$bp") / 16384 / 64 ))
(( lru_depth < 100 )) && lru_depth=100
(( lru_depth > 1536 )) && lru_depth=1536
lru_args=(--innodb-lru-scan-depth="$lru_depth")
[ "$settings" = same ] && lru_args=()
setup_ext4
declare -A col
measure "$work/ext4" ext4 1
names=(ext4)
for t in $transports; do
    setup_tarn "$t"
    used=$(transport_in_use)
    name="tarn-$t"
    [ "$used" = "$t" ] || name="tarn-$t(served:$used)"
    measure "$work/tarn" "$name" "$tarn_dw"
    names+=("$name")
done

python3 - "${names[@]}" <<EOF
import sys
names = sys.argv[1:]
cols = {$(for n in "${names[@]}"; do printf '"%s": "%s".split(), ' "$n" "${col[$n]}"; done)}
metrics = ["fio 16k randwrite fsync p50 (us)", "fio 16k randwrite fsync p99 (us)", "fio 16k randwrite+fsync IOPS",
           "fio 16k randread O_DIRECT IOPS", "sysbench oltp_read_write tps", "sysbench oltp_read_only tps",
           "sbtest data (MiB), buffer pool $bp"]
print("\nsettings: $settings" + (" (tarn: innodb_doublewrite=0, atime=off; ext4: doublewrite on;"
                                  " both: innodb_lru_scan_depth=$lru_depth)"
                                  if "$settings" == "recommended" else " (MariaDB's defaults on every stack)"))
head = f"{'metric':<36}" + "".join(f"{n:>14}" for n in names) + "".join(f"{n + '/ext4':>20}" for n in names[1:])
print("\n" + head)
for i, m in enumerate(metrics):
    vals = [cols[n][i] for n in names]
    ratios = [f"{float(cols[n][i]) / float(cols['ext4'][i]):.2f}" if float(cols['ext4'][i]) else "?" for n in names[1:]]
    print(f"{m:<36}" + "".join(f"{v:>14}" for v in vals) + "".join(f"{r:>20}" for r in ratios))
EOF
