#!/usr/bin/env bash
# Space benchmark: a real MariaDB datadir (after `sysbench oltp_read_write prepare`) on
# ext4, copied into tarn datasets with lz4 and zstd (recordsize=16K), against the
# packing limit (each 16 KiB page compressed alone with the same codec).
# Usage: bash bench/space.sh [TABLES] [ROWS]     (root; needs scripts/setup.sh first)
set -euo pipefail
tables=${1:-4}
rows=${2:-100000}
here=$(cd "$(dirname "$0")/.." && pwd)
tarn="$here/target/release/tarn"
work=$(mktemp -d /var/tmp/tarn-space.XXXXXX)
loop="" mysqld_pid=""
cleanup() {
    [ -n "$mysqld_pid" ] && kill "$mysqld_pid" 2>/dev/null && wait "$mysqld_pid" 2>/dev/null || true
    mountpoint -q "$work/ext4" && umount "$work/ext4"
    [ -n "$loop" ] && losetup -d "$loop"
    rm -rf "$work"
}
trap cleanup EXIT

cargo build --release -q -p tarn-cli -p tarn-zio --example packing_limit
truncate -s 4G "$work/ext4.img"
loop=$(losetup --find --show "$work/ext4.img")
mkfs.ext4 -q "$loop"
mkdir -p "$work/ext4"
mount "$loop" "$work/ext4"
datadir="$work/ext4/data"
mariadb-install-db --datadir="$datadir" --user=root --auth-root-authentication-method=normal >/dev/null
/usr/sbin/mariadbd --no-defaults --datadir="$datadir" --socket="$work/sock" --skip-networking \
    --user=root --innodb-buffer-pool-size=256M --innodb-log-file-size=64M --pid-file="$work/pid" \
    >"$work/mysqld.log" 2>&1 &
mysqld_pid=$!
for _ in $(seq 60); do [ -S "$work/sock" ] && break; sleep 1; done
mariadb --socket="$work/sock" -uroot -e "CREATE DATABASE sbtest"
sysbench oltp_read_write --db-driver=mysql --mysql-socket="$work/sock" --mysql-user=root \
    --tables="$tables" --table-size="$rows" prepare >/dev/null
mariadb-admin --socket="$work/sock" -uroot shutdown
wait "$mysqld_pid" || true
mysqld_pid=""
sync
ext4_bytes=$(du -s --block-size=1 "$datadir" | cut -f1)
logical=$(du -s --apparent-size --block-size=1 "$datadir" | cut -f1)

export TARN_CACHE_FILE="$work/cache.json"
"$tarn" pool create --size 4G space "$work/pool.img"
declare -A used limit
for codec in lz4 zstd; do
    "$tarn" ds create -o recordsize=16K -o compression=$codec "space/$codec"
    "$tarn" put "$datadir" "space/$codec"
    used[$codec]=$("$tarn" get -H -p used "space/$codec" | cut -f3)
    limit[$codec]=$("$here/target/release/examples/packing_limit" $codec "$datadir" | sed 's/.*"packed": \([0-9]*\).*/\1/')
done
"$tarn" pool destroy -f space

echo "MariaDB datadir after sysbench prepare ($tables tables x $rows rows): logical $logical bytes"
printf '%-22s %14s %10s %12s\n' "stack" "bytes on disk" "vs ext4" "vs limit"
printf '%-22s %14s %10s %12s\n' "ext4" "$ext4_bytes" "1.00" "-"
for codec in lz4 zstd; do
    b=${used[$codec]}
    python3 - "$codec" "$b" "$ext4_bytes" "${limit[$codec]}" <<'PY'
import sys
codec, b, ext4, lim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"{'tarn ' + codec + ' 16K':<22} {b:>14} {b/ext4:>10.3f} {b/lim:>12.3f}")
print(f"{'  packing limit ' + codec:<22} {lim:>14} {lim/ext4:>10.3f} {'1.000':>12}")
PY
done
