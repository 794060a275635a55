//! The pacer daemon's serve loop: rewriting the stats file, and a clean unmount at the
//! end. The fork, readiness pipe, signals and unmounting themselves are `tarn_daemon`'s.
//!
//! Owns: when the pacer stops. Promises: SIGTERM/SIGINT/SIGHUP unmount; a busy mount (a
//! loop device still attached) is detached lazily and served until its last user closes
//! it, so no in-flight I/O is failed; the stats file is rewritten once a second and once
//! more at the end. Must never: exit while a mounted filesystem above still depends on
//! us unless signalled twice.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::BackgroundSession;
use tarn_daemon::{Asked, Termination};

use crate::error::PacerError;
use crate::stats::Stats;

/// Serve until signalled (or unmounted from outside), rewriting the stats file once a
/// second and once more at the end.
pub fn serve(
    session: BackgroundSession,
    mountpoint: &Path,
    stats: &Arc<Stats>,
    stats_path: Option<&PathBuf>,
) -> Result<(), PacerError> {
    let write_stats = || {
        if let Some(path) = stats_path {
            let _ = stats.write_to(path); // a full stats disk must not stop the disk
        }
    };
    let mut termination = Termination::new();
    write_stats();
    while !session.guard.is_finished() {
        match termination.wait(Duration::from_secs(1)) {
            Asked::Nothing => {}
            Asked::Unmount => tarn_daemon::unmount_or_detach(mountpoint),
            Asked::StopNow => break,
        }
        write_stats();
    }
    write_stats();
    if session.guard.is_finished() {
        let _ = session.join();
    }
    Ok(())
}
