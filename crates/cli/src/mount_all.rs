//! `tarn mount -a` and `tarn umount -a`: what boot and shutdown run
//! (contrib/systemd/tarn-import.service), as `zfs mount -a` and `zfs unmount -a`.
//!
//! Owns: going over every imported pool (the cache file) or every recorded mount.
//! Promises: `mount -a` opens each imported pool no daemon holds (replaying its intent
//! log, as any import does) and mounts its datasets whose mountpoint property is a path,
//! one daemon per pool; pools already held are left as they are. `umount -a` returns
//! once every daemon has committed and exited. Both go on past a pool that fails and
//! then fail with one line naming each failure.
//! Must never: stop at the first failing pool (one missing disk must not keep the other
//! pools unmounted at boot), or open a pool a daemon holds.

use std::time::Duration;

use crate::access;
use crate::error::CliError;
use crate::pool_cmd::{datasets_with_mountpoints, mount_at_import};

/// `tarn mount -a`.
pub fn mount_all() -> Result<(), CliError> {
    let mut failed = Vec::new();
    for pool in access::pool_names(None)? {
        if held(&pool) {
            continue;
        }
        if let Err(e) = mount_pool(&pool) {
            failed.push(format!("{pool}: {}", e.one_line()));
        }
    }
    all_done("mount", "pool", failed)
}

/// Mounts the datasets of `pool` that have a mountpoint (nothing if none has one).
fn mount_pool(pool: &str) -> Result<(), CliError> {
    let p = access::open_local(pool)?;
    let to_mount = datasets_with_mountpoints(&p);
    p.close()?;
    mount_at_import(pool, to_mount)
}

/// True if a live `tarn mount` daemon holds `pool`.
fn held(pool: &str) -> bool {
    tarn_fuse::state::load(pool).ok().flatten().is_some_and(|r| r.is_alive())
}

/// How long `umount -a` waits for a daemon already unmounted from outside to finish its
/// final commit (as long as `tarn umount` waits for one it unmounts itself).
const FINISH_WAIT: Duration = Duration::from_secs(300);

/// `tarn umount -a`: every mount of every daemon (a dead daemon's mounts are detached).
pub fn umount_all() -> Result<(), CliError> {
    let mut failed = Vec::new();
    for record in tarn_fuse::state::all() {
        if record.is_alive() && record.is_finishing() {
            // Unmounted from outside already: only its final commit is left to wait for.
            if let Err(e) = tarn_fuse::state::wait_until_finished(&record, FINISH_WAIT) {
                failed.push(e.to_string());
            }
            continue;
        }
        for (dataset, mountpoint) in record.served() {
            let target = mountpoint.to_string_lossy();
            if let Err(e) = tarn_fuse::umount(&target, false) {
                failed.push(format!("{dataset} on {target}: {e}"));
            }
        }
    }
    all_done("unmount", "mount", failed)
}

/// Ok if nothing failed, else one error naming every failure.
fn all_done(verb: &str, noun: &str, failed: Vec<String>) -> Result<(), CliError> {
    match failed.len() {
        0 => Ok(()),
        1 => Err(CliError::Refused(format!("could not {verb} one {noun}: {}", failed[0]))),
        n => Err(CliError::Refused(format!("could not {verb} {n} {noun}s: {}", failed.join("; ")))),
    }
}
