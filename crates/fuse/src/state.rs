//! Running mounts, recorded in a small state directory (`/run/tarn`, or `$TARN_RUN_DIR`):
//! one JSON file per pool held by a `tarn mount` daemon, with its pid, pool, the first
//! dataset and mountpoint, and every (dataset, mountpoint) it serves (one daemon holds a
//! pool, so it serves all of that pool's mounts), plus the daemon's log.
//!
//! Owns: the record files and the liveness test of the process named in one.
//! Promises: a record whose process is gone (killed, crashed, a zombie, or a reused pid
//! that is not tarn) is stale: the next process to take the pool's devices detaches its
//! dead mounts and removes it ([`clear_stale`]); `tarn umount` finds a daemon's mounts
//! here; a daemon whose mounts were all unmounted from outside (`fusermount3 -u`,
//! `umount`) is finishing its final commit, and `umount -a` waits for it (at most
//! [`FINISH_WAIT`]).
//! Must never: signal a process, or touch a live daemon's mounts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::MountError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountRecord {
    pub pid: u32,
    pub pool: String,
    pub dataset: String,
    pub mountpoint: PathBuf,
    /// Every mount this daemon serves, the first one included; updated as they end.
    #[serde(default)]
    pub mounts: Vec<(String, PathBuf)>,
}

pub use tarn_control::protocol::run_dir;

fn record_path(pool: &str) -> PathBuf {
    run_dir().join(format!("{pool}.mount"))
}

/// Where a pool's mount daemon writes what it has to say after detaching.
pub fn log_path(pool: &str) -> PathBuf {
    run_dir().join(format!("{pool}.log"))
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> MountError + '_ {
    move |e| MountError::State(format!("{}: {e}", path.display()))
}

impl MountRecord {
    /// Writes the record (atomically: temp file, then rename).
    pub fn save(&self) -> Result<(), MountError> {
        let dir = run_dir();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let path = record_path(&self.pool);
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| MountError::State(e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err(&path))
    }

    /// Removes this pool's record if it is still ours.
    pub fn remove(&self) {
        if load(&self.pool).ok().flatten().is_some_and(|r| r.pid == self.pid) {
            let _ = std::fs::remove_file(record_path(&self.pool));
        }
    }

    /// The served mounts (a record from before `mounts` existed has just its first).
    pub fn served(&self) -> Vec<(String, PathBuf)> {
        if self.mounts.is_empty() {
            vec![(self.dataset.clone(), self.mountpoint.clone())]
        } else {
            self.mounts.clone()
        }
    }

    pub fn is_alive(&self) -> bool {
        process_is_tarn(self.pid)
    }

    /// True if none of the daemon's mounts is in the mount table any more: it was
    /// unmounted from outside and is committing before it exits. (A daemon still
    /// starting has recorded a mount it has not made yet, so this is only ever a reason
    /// to look again, not to act.)
    pub fn is_finishing(&self) -> bool {
        !self.served().iter().any(|(_, mp)| tarn_daemon::mounts::is_listed(mp))
    }

    /// The one line telling a user why the pool is busy and what to do.
    pub fn busy_message(&self) -> String {
        let mp = self.mountpoint.display();
        format!(
            "pool '{}' is in use by `tarn mount` (pid {}, dataset {} mounted on {mp}); run `tarn umount {mp}` first",
            self.pool, self.pid, self.dataset
        )
    }
}

/// The record for `pool`, if there is one (alive or not).
pub fn load(pool: &str) -> Result<Option<MountRecord>, MountError> {
    let path = record_path(pool);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// Every record in the state directory.
pub fn all() -> Vec<MountRecord> {
    let Ok(dir) = std::fs::read_dir(run_dir()) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "mount"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}

/// How long a command waits for a daemon that is finishing after its last unmount.
pub const FINISH_WAIT: Duration = Duration::from_secs(30);
/// After this long, the waiting command says what it is waiting for.
const FINISH_NOTICE: Duration = Duration::from_secs(2);

/// Called by a process that has just taken `pool`'s devices: what a killed daemon left
/// is stale. Its control socket is removed, its dead FUSE mounts (ENOTCONN to every
/// user) are detached and its record removed, so nothing it left blocks the next mount
/// or command. A record of a live daemon is left alone.
pub fn clear_stale(pool: &str) {
    tarn_control::server::remove_stale(pool);
    let Ok(Some(r)) = load(pool) else { return };
    if r.is_alive() {
        return;
    }
    for (_, mp) in r.served() {
        if tarn_daemon::umount(&mp, 0).is_err() {
            let _ = tarn_daemon::umount(&mp, libc::MNT_DETACH);
        }
    }
    let _ = std::fs::remove_file(record_path(pool));
}

/// Waits while `r`'s daemon is alive with all its mounts gone (unmounted from outside,
/// so it is committing and about to exit): Ok once it has exited. Err (the pool is
/// busy) as soon as one of its mounts is there, or if it is still running after
/// `bound`. Says once on stderr what it waits for if that takes more than a moment.
pub fn wait_until_finished(r: &MountRecord, bound: Duration) -> Result<(), MountError> {
    let start = Instant::now();
    let mut told = false;
    while r.is_alive() {
        if !r.is_finishing() {
            return Err(MountError::PoolBusy(r.busy_message()));
        }
        let waited = start.elapsed();
        if waited >= bound {
            return Err(MountError::PoolBusy(format!(
                "pool '{}' is still held by its `tarn mount` daemon (pid {}) {}s after its datasets were unmounted: it is still committing; try again later (its log: {})",
                r.pool,
                r.pid,
                waited.as_secs(),
                log_path(&r.pool).display()
            )));
        }
        if !told && waited >= FINISH_NOTICE.min(bound) {
            eprintln!(
                "tarn: waiting for the mount daemon of pool '{}' (pid {}) to finish its final commit (up to {}s)",
                r.pool,
                r.pid,
                bound.as_secs()
            );
            told = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// True if `pid` is a running (not zombie) process whose command is tarn's.
pub fn process_is_tarn(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: "pid (comm) state ...": comm may contain spaces, so split at the last ')'.
    let Some((head, tail)) = stat.rsplit_once(')') else {
        return false;
    };
    let comm = head.split_once('(').map(|(_, c)| c).unwrap_or("");
    let state = tail.trim_start().chars().next().unwrap_or('?');
    comm.starts_with("tarn") && state != 'Z' && state != 'X'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_pid_is_not_alive_and_this_test_is_not_tarn() {
        let r = MountRecord {
            pid: u32::MAX - 1,
            pool: "p".into(),
            dataset: "p/d".into(),
            mountpoint: "/x".into(),
            mounts: Vec::new(),
        };
        assert!(!r.is_alive());
    }

    #[test]
    fn busy_message_names_pid_mountpoint_and_fix() {
        let r = MountRecord {
            pid: 42,
            pool: "tank".into(),
            dataset: "tank/db".into(),
            mountpoint: "/mnt/x".into(),
            mounts: Vec::new(),
        };
        let m = r.busy_message();
        assert!(m.contains("pid 42") && m.contains("/mnt/x") && m.contains("tarn umount /mnt/x"), "{m}");
    }
}
