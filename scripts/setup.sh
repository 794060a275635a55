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
    python3-venv sqlite3 postgresql
)
bash scripts/apt-install.sh "${apt_packages[@]}"
modprobe fuse 2>/dev/null || true

if ! command -v cargo >/dev/null; then
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust with rustup first" >&2; exit 1; }
# The lint step of scripts/test.sh needs rustfmt and clippy.
for tool in fmt clippy; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null || { echo "setup: cargo $tool is missing and rustup is not there to add it" >&2; exit 1; }
        rustup component add "$([ "$tool" = fmt ] && echo rustfmt || echo clippy)"
    fi
done
# The POSIX suites the mount tests run (Rust rewrites of pjdfstest and fsx).
command -v pjdfstest >/dev/null || cargo install --quiet pjdfstest
command -v fsx >/dev/null || cargo install --quiet fsx
echo "setup: building the workspace (cargo build --release)"
cargo build --release --quiet
# The binary on PATH, mount(8)'s helper for fuse.tarn, man pages, completions, units.
bash scripts/install-system.sh

if [ -f lab/setup.sh ]; then
    bash lab/setup.sh
fi
echo "setup: done"
