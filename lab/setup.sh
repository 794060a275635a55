#!/usr/bin/env bash
# Sets up tarn-lab: the Debian packages its stacks and workloads need, and lab/.venv with
# the package installed editable plus its test extras. Says what it does with the time so
# far; pip shows its own progress. Idempotent: a re-run only checks.
set -euo pipefail
lab=$(cd "$(dirname "$0")" && pwd)
. "$lab/../scripts/lib/steps.sh"
STEP_TAG=lab/setup

apt_packages=(
    fuse3 e2fsprogs xfsprogs btrfs-progs btrfs-compsize zfs-fuse
    mariadb-server mariadb-client mariadb-backup sysbench util-linux procps python3-venv
)
bash "$lab/../scripts/apt-install.sh" "${apt_packages[@]}"
bash "$lab/../scripts/quiet-services.sh" mariadb zfs-fuse

stamp="$lab/.venv/.installed-from"
want=$(sha256sum "$lab/pyproject.toml" | cut -d' ' -f1)
if [ ! -x "$lab/.venv/bin/python" ]; then
    step "creating lab/.venv"
    python3 -m venv "$lab/.venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    step "pip install -e lab[test] (pip's progress follows)"
    "$lab/.venv/bin/pip" install --disable-pip-version-check -e "$lab[test]"
    echo "$want" > "$stamp"
fi
step "lab ready: $lab/.venv/bin/tarn-lab"
