//! Engine counters of a mounted pool, published for `tarn stats` and for scrapers, and
//! the one tunable handed the other way (`tarn tune POOL arc_max=SIZE`).
//!
//! Owns: `<run dir>/<pool>.stats.json`, which the mount daemon rewrites once a second
//! and removes when it closes the pool, and `<run dir>/<pool>.arc_max`, a request left
//! by `tarn tune` that the daemon applies and removes within a second.
//! Promises: the stats file is replaced atomically (written beside, then renamed), so a
//! reader never sees half of it; only a live daemon's counters are read back.
//! Must never: block the daemon on a slow disk for long (one small file a second), or
//! stop a mount because a file here cannot be written (that is said once on its log).
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use tarn_pool::Pool;

use crate::state::run_dir;

pub fn path(pool: &str) -> PathBuf {
    run_dir().join(format!("{pool}.stats.json"))
}

/// Writes the current counters; a failure is reported once on the daemon's log (not
/// once a second for as long as the run directory stays unwritable).
pub fn publish(pool: &Pool) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let stats = pool.stats();
    let target = path(&stats.pool);
    let tmp = target.with_extension("json.tmp");
    let Ok(bytes) = serde_json::to_vec_pretty(&stats) else {
        return;
    };
    if let Err(e) = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, &target)) {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            eprintln!("tarn mount: cannot publish stats to {}: {e}", target.display());
        }
    }
}

pub fn remove(pool: &str) {
    let _ = std::fs::remove_file(path(pool));
}

/// The counters a running mount daemon last published, if it is alive.
pub fn read_published(pool: &str) -> Option<tarn_pool::PoolStats> {
    crate::state::load(pool).ok().flatten().filter(|r| r.is_alive())?;
    serde_json::from_slice(&std::fs::read(path(pool)).ok()?).ok()
}

/// Where `tarn tune` leaves a new ARC budget for a running mount daemon.
pub fn arc_max_request_path(pool: &str) -> PathBuf {
    run_dir().join(format!("{pool}.arc_max"))
}

/// Applies (and removes) a pending ARC budget request, if one is there.
pub fn apply_tuning(pool: &Pool) {
    let path = arc_max_request_path(pool.name());
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let _ = std::fs::remove_file(&path);
    match text.trim().parse::<u64>() {
        Ok(bytes) => pool.set_arc_max(bytes),
        Err(_) => eprintln!("tarn mount: ignoring a malformed ARC budget request: {text:?}"),
    }
}
