#!/usr/bin/env bash
# Mount benchmark, tarn against ext4 in one run. Each gets an equal image file: ext4 on
# a loop device over one, a tarn pool (dataset recordsize=16K, compression=lz4, mounted
# with FUSE) on the other. On each:
#   1. fio 16 KiB random writes with an fsync after each (--fsync=1): fsync latency p50/p99
#   2. a private MariaDB (small buffer pool, data >= 4x it, O_DIRECT): sysbench
#      oltp_read_write then oltp_read_only, 8 threads
# and prints one table with the ratios tarn/ext4.
# Usage: bash bench/mount.sh [--time SECS] [--long] [--work DIR]   (root; scripts/setup.sh first)
#   --time SECS  seconds per fio and sysbench run (default 15); --long = 120
# Cleans up what it made (its mariadbd, the tarn daemon, the ext4 mount, the loop
# device), each by its own pid or path, also when interrupted.
set -euo pipefail
secs=15
work=""
while [ $# -gt 0 ]; do
    case "$1" in
        --time) secs=$2; shift 2 ;;
        --long) secs=120; shift ;;
        --work) work=$2; shift 2 ;;
        *) echo "usage: $0 [--time SECS] [--long] [--work DIR]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/mount.sh: run as root (loop devices, mounts)" >&2; exit 1; }
for t in fio sysbench mariadbd mariadb-install-db losetup mkfs.ext4 python3; do
    command -v "$t" >/dev/null || { echo "bench/mount.sh: $t is missing (run scripts/setup.sh)" >&2; exit 1; }
done
here=$(cd "$(dirname "$0")/.." && pwd)
tarn="$here/target/release/tarn"
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

cargo build --release -q -p tarn-cli --manifest-path "$here/Cargo.toml"

setup_ext4() {
    truncate -s "$img_size" "$work/ext4.img"
    loop=$(losetup --find --show "$work/ext4.img")
    mkfs.ext4 -q "$loop"
    mkdir -p "$work/ext4"
    mount "$loop" "$work/ext4"
}

setup_tarn() {
    "$tarn" pool create "$pool" "$work/tarn.img" --size "$img_size" >/dev/null
    "$tarn" ds create -o recordsize=16K -o compression=lz4 "$pool/db"
    mkdir -p "$work/tarn"
    "$tarn" mount "$pool/db" "$work/tarn"
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

start_mariadb() {
    local datadir=$1
    mariadb-install-db --no-defaults --datadir="$datadir" --user=root \
        --auth-root-authentication-method=normal --skip-test-db >/dev/null
    mariadbd --no-defaults --datadir="$datadir" --socket="$work/sock" --skip-networking --user=root \
        --innodb-buffer-pool-size="$bp" --innodb-log-file-size=64M --innodb-flush-method=O_DIRECT \
        --pid-file="$work/m.pid" >"$work/mariadbd.log" 2>&1 &
    mysqld_pid=$!
    for _ in $(seq 120); do mariadb --socket="$work/sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && return; sleep 1; done
    echo "mariadbd did not start; log:" >&2; cat "$work/mariadbd.log" >&2; exit 1
}

stop_mariadb() {
    mariadb-admin --socket="$work/sock" -uroot shutdown
    wait "$mysqld_pid" || true
    mysqld_pid=""
}

sb() {
    sysbench "$1" --db-driver=mysql --mysql-socket="$work/sock" --mysql-user=root --mysql-db=sbtest \
        --tables="$tables" --table-size="$rows" --threads="$threads" --time="$secs" "${@:2}"
}

# sysbench on a fresh MariaDB in DIR: prints "rw_tps ro_tps data_mib".
oltp() {
    local dir=$1
    start_mariadb "$dir/data"
    mariadb --socket="$work/sock" -uroot -e "CREATE DATABASE sbtest"
    sb oltp_read_write --threads=4 prepare >/dev/null
    local mib
    mib=$(du -sm "$dir/data/sbtest" | cut -f1)
    # Restart so both runs start from a cold buffer pool.
    stop_mariadb; start_mariadb "$dir/data"
    local rw ro
    rw=$(sb oltp_read_write run | awk '/transactions:/ {gsub(/\(/,"",$3); print $3}')
    ro=$(sb oltp_read_only run | awk '/transactions:/ {gsub(/\(/,"",$3); print $3}')
    stop_mariadb
    echo "$rw $ro $mib"
}

echo "bench/mount.sh: ${secs}s per run, $threads threads, buffer pool $bp, $tables x $rows rows; work dir $work" >&2
setup_ext4
setup_tarn
echo "fio fsync: ext4" >&2; read -r e_p50 e_p99 e_iops < <(fio_fsync "$work/ext4")
echo "fio fsync: tarn" >&2; read -r t_p50 t_p99 t_iops < <(fio_fsync "$work/tarn")
echo "sysbench: ext4" >&2; read -r e_rw e_ro e_mib < <(oltp "$work/ext4")
echo "sysbench: tarn" >&2; read -r t_rw t_ro t_mib < <(oltp "$work/tarn")

ratio() { python3 -c "print(f'{$2/$1:.2f}')" "" 2>/dev/null || echo "?"; }
printf '\n%-36s %12s %12s %10s\n' "metric" "ext4" "tarn" "tarn/ext4"
row() { printf '%-36s %12s %12s %10s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
row "fio 16k randwrite fsync p50 (us)" "$e_p50" "$t_p50"
row "fio 16k randwrite fsync p99 (us)" "$e_p99" "$t_p99"
row "fio 16k randwrite+fsync IOPS" "$e_iops" "$t_iops"
row "sysbench oltp_read_write tps" "$e_rw" "$t_rw"
row "sysbench oltp_read_only tps" "$e_ro" "$t_ro"
printf '%-36s %12s %12s\n' "sbtest data (MiB), buffer pool $bp" "$e_mib" "$t_mib"
