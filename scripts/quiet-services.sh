#!/usr/bin/env bash
# Services that setup installs only as dependencies (the system MariaDB, PostgreSQL and
# zfs-fuse) must not be left enabled or running: the lab and the tests start private
# servers, a system one competes with them for the machine being measured, and zfs-fuse
# allows one daemon per machine (the lab's zfs stack would wait for the system one).
# Each named unit that is enabled is disabled, and stopped if running; one line each says
# what was done and how to undo it. TARN_SETUP_KEEP_SERVICES=1 leaves them alone.
#   bash scripts/quiet-services.sh mariadb postgresql zfs-fuse
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/steps.sh"

if [ "${TARN_SETUP_KEEP_SERVICES:-0}" = 1 ]; then
    step "services: left as they are (TARN_SETUP_KEEP_SERVICES=1)"
    exit 0
fi
systemd_running() { [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ]; }

# The pid file a unit's daemon writes when it runs as the system service.
system_pidfiles() {
    case "$1" in
        mariadb) echo /run/mysqld/mysqld.pid ;;
        postgresql) ls /run/postgresql/*.pid 2>/dev/null ;;
        zfs-fuse) echo /run/zfs-fuse.pid /var/run/zfs-fuse.pid ;;
    esac
}

is_running() {
    if systemd_running; then
        systemctl is-active --quiet "$1"
        return
    fi
    local f
    for f in $(system_pidfiles "$1"); do
        [ -f "$f" ] && kill -0 "$(head -1 "$f")" 2>/dev/null && return 0
    done
    return 1
}

for unit in "$@"; do
    command -v systemctl >/dev/null || { step "services: no systemctl; $unit left as it is"; continue; }
    state=$(systemctl is-enabled "$unit" 2>/dev/null || true)
    [ "$state" = enabled ] || continue
    if ! out=$(systemctl disable "$unit" 2>&1); then
        step "services: could not disable $unit: $out" >&2
        continue
    fi
    step "services: disabled $unit.service (installed for the lab, which runs its own servers; undo: systemctl enable $unit)"
    if is_running "$unit"; then
        if systemd_running; then systemctl stop "$unit"; else service "$unit" stop >/dev/null 2>&1; fi
        step "services: stopped $unit"
    fi
done
exit 0
