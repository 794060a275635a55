#!/usr/bin/env bash
# Control-socket benchmark (issue #10): how long `tarn` commands take when the mount daemon
# answers them while the pool serves a database, against the same commands on the same
# mounted pool when it is idle. A tarn pool on an image file, one dataset (recordsize=16K,
# lz4) mounted through FUSE, a private MariaDB on it (small buffer pool, O_DIRECT);
#   1. idle: each command N times in turn, wall time of each whole `tarn` process;
#   2. loaded: the same while sysbench oltp_read_write runs (8 threads);
# and prints p50/p99 per command for both and the loaded/idle ratio of the p99, the TPS,
# and whether every p99 under load is below 50 ms (the issue's bar).
# Usage: bash bench/control.sh [SECS] [--work DIR]   (root; scripts/setup.sh first)
#   SECS: length of the loaded run (default 60).
# Cleans up what it made (its mariadbd, the tarn daemon), each by its own pid or path,
# also when interrupted.
set -euo pipefail
secs=60
work=""
while [ $# -gt 0 ]; do
    case "$1" in
        --work) work=$2; shift 2 ;;
        [0-9]*) secs=$1; shift ;;
        *) echo "usage: $0 [SECS] [--work DIR]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/control.sh: run as root (mounts)" >&2; exit 1; }
for t in sysbench mariadbd mariadb-install-db python3; do
    command -v "$t" >/dev/null || { echo "bench/control.sh: $t is missing (run scripts/setup.sh)" >&2; exit 1; }
done
here=$(cd "$(dirname "$0")/.." && pwd)
tarn="$here/target/release/tarn"
[ -n "$work" ] || work=$(mktemp -d /var/tmp/tarn-control-bench.XXXXXX)
mkdir -p "$work"
export TARN_CACHE_FILE="$work/pools.json" TARN_RUN_DIR="$work/run"

img_size=4G
bp=32M
tables=8
rows=80000
threads=8
pool="cbench$$"
mnt="$work/mnt"

mysqld_pid="" sb_pid=""
cleanup() {
    set +e
    [ -n "$sb_pid" ] && kill "$sb_pid" 2>/dev/null && wait "$sb_pid" 2>/dev/null
    [ -n "$mysqld_pid" ] && kill -9 "$mysqld_pid" 2>/dev/null && wait "$mysqld_pid" 2>/dev/null
    mountpoint -q "$mnt" && "$tarn" umount -f "$mnt"
    rm -rf "$work"
}
trap cleanup EXIT

cargo build --release -q -p tarn-cli --manifest-path "$here/Cargo.toml"

"$tarn" pool create "$pool" "$work/tarn.img" --size "$img_size" >/dev/null
"$tarn" ds create -o recordsize=16K -o compression=lz4 -o atime=off "$pool/db"
"$tarn" ds create "$pool/aux"
mkdir -p "$mnt"
"$tarn" mount "$pool/db" "$mnt"

datadir="$mnt/data"
mariadb-install-db --no-defaults --datadir="$datadir" --user=root \
    --auth-root-authentication-method=normal --skip-test-db >/dev/null
mariadbd --no-defaults --datadir="$datadir" --socket="$work/sock" --skip-networking --user=root \
    --innodb-buffer-pool-size="$bp" --innodb-log-file-size=64M --innodb-flush-method=O_DIRECT \
    --pid-file="$work/m.pid" >"$work/mariadbd.log" 2>&1 &
mysqld_pid=$!
for _ in $(seq 120); do mariadb --socket="$work/sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && break; sleep 1; done
mariadb --socket="$work/sock" -uroot -e "CREATE DATABASE sbtest"
sb() {
    sysbench oltp_read_write --db-driver=mysql --mysql-socket="$work/sock" --mysql-user=root \
        --mysql-db=sbtest --tables="$tables" --table-size="$rows" "$@"
}
echo "bench/control.sh: preparing $tables x $rows rows (buffer pool $bp); work dir $work" >&2
sb --threads=4 prepare >/dev/null

# Times each command (a whole `tarn` process, as a script or an operator runs it) until
# the stop file appears or COUNT rounds are done; writes "command<TAB>seconds" lines.
measure() {
    python3 - "$tarn" "$pool" "$1" "$2" "$3" <<'EOF'
import subprocess, sys, time, os
tarn, pool, rounds, stop, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
cmds = {
    "pool status": ["pool", "status", pool],
    "pool list": ["pool", "list"],
    "ds list": ["ds", "list"],
    "get all": ["get", "all", f"{pool}/db"],
    "stats all --json": ["stats", "all", pool, "--json"],
    "set (a change)": ["set", "atime=on", f"{pool}/aux"],
    "pool history": ["pool", "history", pool],
}
with open(out, "w") as f:
    n = 0
    while n < rounds and not os.path.exists(stop):
        for name, args in cmds.items():
            t0 = time.perf_counter()
            r = subprocess.run([tarn, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            dt = time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit(f"tarn {' '.join(args)} failed: {r.stderr.decode().strip()}")
            f.write(f"{name}\t{dt}\n")
        n += 1
        time.sleep(0.05)
EOF
}

echo "idle: each command 100 times" >&2
measure 100 "$work/never" "$work/idle.tsv"

echo "loaded: oltp_read_write, $threads threads, ${secs}s" >&2
sb --threads="$threads" --time="$secs" --report-interval=0 run >"$work/sysbench.txt" 2>&1 &
sb_pid=$!
sleep 5   # past the warm-up of the first seconds
measure 100000 "$work/stop" "$work/loaded.tsv" &
m_pid=$!
wait "$sb_pid"; sb_pid=""
touch "$work/stop"
wait "$m_pid"
tps=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' "$work/sysbench.txt")

python3 - "$work/idle.tsv" "$work/loaded.tsv" "$tps" <<'EOF'
import sys
from collections import defaultdict
def load(p):
    d = defaultdict(list)
    for line in open(p):
        k, v = line.rstrip("\n").split("\t")
        d[k].append(float(v) * 1000)
    return d
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]
idle, loaded, tps = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
print(f"\n{'command (ms per tarn process)':<30} {'n':>5} {'idle p50':>9} {'idle p99':>9} {'load n':>7} {'load p50':>9} {'load p99':>9} {'p99 ratio':>10}")
worst = 0.0
for k in idle:
    i, l = idle[k], loaded.get(k, [])
    if not l:
        continue
    worst = max(worst, pct(l, 0.99))
    print(f"{k:<30} {len(i):>5} {pct(i,.5):>9.1f} {pct(i,.99):>9.1f} {len(l):>7} {pct(l,.5):>9.1f} {pct(l,.99):>9.1f} {pct(l,.99)/pct(i,.99):>9.2f}x")
print(f"\nsysbench oltp_read_write during the loaded run: {tps} tps")
print(f"worst p99 under load: {worst:.1f} ms -> {'under' if worst < 50 else 'OVER'} the 50 ms bar")
EOF
