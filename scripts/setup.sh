#!/usr/bin/env bash
# Sets up everything tarn and tarn-lab need on a fresh Debian 12 machine (run as root):
# Debian packages, the Rust build of the workspace, and the lab's Python environment.
# Says what it does step by step with the time so far; apt's output goes to a log file
# (path printed; shown in full if apt fails); cargo and pip show their own progress.
# Services installed only as dependencies are left disabled (scripts/quiet-services.sh).
# Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
. scripts/lib/steps.sh

apt_packages=(
    build-essential pkg-config fuse3 libfuse3-dev
    e2fsprogs xfsprogs btrfs-progs btrfs-compsize zfs-fuse
    mariadb-server mariadb-client sysbench fio util-linux procps
    python3-venv sqlite3 postgresql
)
step "Debian packages: checking ${#apt_packages[@]}"
bash scripts/apt-install.sh "${apt_packages[@]}"
bash scripts/quiet-services.sh mariadb postgresql zfs-fuse
modprobe fuse 2>/dev/null || true

if ! command -v cargo >/dev/null; then
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
command -v cargo >/dev/null || { step "FAILED: cargo not found; install Rust with rustup first" >&2; exit 1; }
# The lint step of scripts/test.sh needs rustfmt and clippy.
for tool in fmt clippy; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null || { step "FAILED: cargo $tool is missing and rustup is not there to add it" >&2; exit 1; }
        step "rustup component add $tool"
        rustup component add "$([ "$tool" = fmt ] && echo rustfmt || echo clippy)"
    fi
done
# The POSIX suites the mount tests run (Rust rewrites of pjdfstest and fsx).
for tool in pjdfstest fsx; do
    if ! command -v "$tool" >/dev/null; then
        step "cargo install $tool (a few minutes; cargo's progress follows)"
        cargo install "$tool"
    fi
done
step "building the workspace: cargo build --release (cargo's progress follows)"
cargo build --release
step "workspace built"
# The binary on PATH, mount(8)'s helper for fuse.tarn, man pages, completions, units.
step "installing tarn, its mount helper, man pages, completions and units"
bash scripts/install-system.sh

if [ -f lab/setup.sh ]; then
    bash lab/setup.sh
fi
step "setup done"
