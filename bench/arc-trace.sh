#!/usr/bin/env bash
# ARC benchmark on a recorded IO-bound trace: MariaDB (small buffer pool) on a tarn mount
# runs sysbench select_random_points over a hot table while a reporting query scans a
# cold one now and then (the mix that defeats a plain LRU), and tarn records every block
# read (TARN_READ_TRACE). The trace is replayed through a plain LRU, the ARC, tarn's
# default data policy and Belady's OPT at the same byte budget (crates/arc/benches/trace.rs).
# Usage: bash bench/arc-trace.sh [SECONDS] [BUDGET_MIB...]   (root; after scripts/setup.sh)
set -euo pipefail
seconds=${1:-60}
shift || true
budgets=("${@:-16 32}")
here=$(cd "$(dirname "$0")/.." && pwd)
tarn="$here/target/release/tarn"
work=$(mktemp -d /var/tmp/tarn-arc.XXXXXX)
export TARN_CACHE_FILE="$work/cache.json" TARN_RUN_DIR="$work/run"
mysqld_pid=""
cleanup() {
    [ -n "$mysqld_pid" ] && kill "$mysqld_pid" 2>/dev/null && wait "$mysqld_pid" 2>/dev/null || true
    "$tarn" umount "$work/mnt" 2>/dev/null || true
    "$tarn" pool destroy -f arcb 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

start_mysqld() {
    /usr/sbin/mariadbd --no-defaults --datadir="$work/mnt/data" --socket="$work/sock" --skip-networking \
        --user=root --innodb-buffer-pool-size=8M --innodb-flush-method=O_DIRECT --innodb-doublewrite=0 \
        --innodb-use-native-aio=0 --pid-file="$work/pid" >>"$work/mysqld.log" 2>&1 &
    mysqld_pid=$!
    for _ in $(seq 60); do [ -S "$work/sock" ] && return; sleep 1; done
    echo "mariadbd did not start: $(tail -5 "$work/mysqld.log")" >&2; exit 1
}
stop_mysqld() {
    mariadb-admin --socket="$work/sock" -uroot shutdown
    wait "$mysqld_pid" || true
    mysqld_pid=""
}
sb() { sysbench "$@" --db-driver=mysql --mysql-socket="$work/sock" --mysql-user=root --tables=4 --table-size=100000; }

cargo build --release -q -p tarn-cli
cargo bench -q -p tarn-arc --bench trace --no-run 2>/dev/null
mkdir -p "$work/mnt"
"$tarn" pool create --size 2G arcb "$work/pool.img"
"$tarn" ds create -o recordsize=16K -o compression=lz4 -o atime=off arcb/db
"$tarn" mount arcb/db "$work/mnt"
mariadb-install-db --datadir="$work/mnt/data" --user=root --auth-root-authentication-method=normal >/dev/null
start_mysqld
mariadb --socket="$work/sock" -uroot -e "CREATE DATABASE sbtest"
sb oltp_read_write prepare >/dev/null
stop_mysqld
"$tarn" umount "$work/mnt"
# Record only the measured run.
TARN_READ_TRACE="$work/trace.txt" "$tarn" mount arcb/db "$work/mnt"
start_mysqld
( end=$((SECONDS + seconds)); while [ $SECONDS -lt $end ]; do
    mariadb --socket="$work/sock" -uroot -e "SELECT SUM(LENGTH(c)) FROM sbtest.sbtest4" >/dev/null 2>&1 || true
    sleep 5
  done ) &
scanner=$!
sysbench select_random_points --db-driver=mysql --mysql-socket="$work/sock" --mysql-user=root \
    --tables=1 --table-size=100000 --threads=4 --time="$seconds" run | grep -E "transactions:|queries:" || true
wait "$scanner" || true
stop_mysqld
"$tarn" umount "$work/mnt"
echo "logical data: $(du -sb "$work/pool.img" >/dev/null; "$tarn" get -H -p logicalused,used,compressratio arcb/db | cut -f2,3 | tr '\n' ' ')"
for b in "${budgets[@]}"; do
    for x in $b; do
        echo "== budget ${x} MiB"
        "$(ls -t "$here"/target/release/deps/trace-* | grep -v '\.d$' | head -1)" "$work/trace.txt" "$x"
    done
done
