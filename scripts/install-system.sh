#!/usr/bin/env bash
# Installs the built tarn into the system (as root), so it works as other filesystems do:
#   /usr/local/bin/tarn                      the binary (a copy of target/release/tarn)
#   /sbin/mount.fuse.tarn                    mount(8)'s helper: `mount -t fuse.tarn`, fstab
#   /usr/local/share/man/man1/tarn*.1        man pages, generated from the command line
#   bash, zsh and fish completions           generated from the command line
#   /usr/local/lib/systemd/system/tarn-*     systemd units (installed, not enabled)
# Idempotent; run by scripts/setup.sh after the build.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
built=target/release/tarn
[ -x "$built" ] || { echo "install: $built is missing; run cargo build --release first" >&2; exit 1; }

install -D -C -m 0755 "$built" /usr/local/bin/tarn
# mount(8) looks for helpers in /sbin only (and runs them with no PATH).
install -D -C -m 0755 contrib/mount.fuse.tarn /sbin/mount.fuse.tarn

man=/usr/local/share/man/man1
mkdir -p "$man"
rm -f "$man"/tarn.1 "$man"/tarn-*.1 # pages of commands that no longer exist go too
/usr/local/bin/tarn man --dir "$man"

share=/usr/local/share
install -d "$share/bash-completion/completions" "$share/zsh/site-functions" "$share/fish/vendor_completions.d"
/usr/local/bin/tarn completions bash > "$share/bash-completion/completions/tarn"
/usr/local/bin/tarn completions zsh > "$share/zsh/site-functions/_tarn"
/usr/local/bin/tarn completions fish > "$share/fish/vendor_completions.d/tarn.fish"

units=/usr/local/lib/systemd/system
install -d "$units"
install -C -m 0644 contrib/systemd/*.service "$units"/
# Only where systemd runs (not in a container without it): let it see the new units.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload || true
fi
echo "install: tarn, mount.fuse.tarn, man pages, completions and systemd units installed"
