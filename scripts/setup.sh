#!/usr/bin/env bash
# Sets up everything tarn and tarn-lab need on a fresh Debian 12 machine (run as root):
# Debian packages, the Rust build of the workspace, and the lab's Python environment.
# Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

apt_packages=(
    build-essential pkg-config fuse3 libfuse3-dev
    e2fsprogs xfsprogs btrfs-progs btrfs-compsize zfs-fuse
    mariadb-server mariadb-client sysbench fio util-linux procps
    python3-venv sqlite3
)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # policy-rc.d keeps Debian from starting its own mariadb/zfs-fuse services: the lab
    # starts private instances and stops them by their own pid.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
    rm -f /usr/sbin/policy-rc.d
fi
modprobe fuse 2>/dev/null || true

if ! command -v cargo >/dev/null; then
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust with rustup first" >&2; exit 1; }
# The POSIX suites the mount tests run (Rust rewrites of pjdfstest and fsx).
command -v pjdfstest >/dev/null || cargo install --quiet pjdfstest
command -v fsx >/dev/null || cargo install --quiet fsx
echo "setup: building the workspace (cargo build --release)"
cargo build --release --quiet

if [ -f lab/setup.sh ]; then
    bash lab/setup.sh
fi
echo "setup: done"
