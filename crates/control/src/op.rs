//! What a pool command is, wherever it runs: the [`Op`] trait, the pool it runs on
//! ([`Held`]), who asked ([`Caller`]), how it may end the pool's open life ([`Finish`]),
//! and what only a mount daemon can do ([`Daemon`]).
//!
//! A command is written once, as an `Op`. The CLI runs it in its own process when no
//! daemon holds the pool, or sends it over the socket, where the daemon runs the very
//! same `run` on the pool it holds; so the output and the errors are the same by
//! construction, and a new command (snapshots, cache devices, keys) is one `Op` and one
//! line in the registry (`ops::registry!`).
//!
//! Owns: the command contract and the history entry of a command that changed the pool.
//! Promises: a command that changed the pool is recorded in its history exactly when it
//! succeeded — for one that ends the pool's open life (export, destroy), only once the
//! datasets are unmounted and just before the pool is closed, so a refused export is not
//! recorded.
//! Must never: keep the pool past the command, or let a command consume the pool itself
//! (it asks for a [`Finish`], and whoever holds the pool carries it out).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tarn_pool::{HistoryEntry, Pool};

use crate::error::OpError;

/// One command on a pool.
pub trait Op: Serialize + DeserializeOwned {
    /// The command's name on the wire (`pool.status`, `ds.create`…).
    const NAME: &'static str;
    /// Whether a success changes the pool (and so is recorded in its history).
    const CHANGES_POOL: bool = false;
    /// Whether a success means the holder let the pool go (export, destroy): a daemon
    /// then exits, and its caller waits for that, as the devices are free only then.
    const RELEASES_POOL: bool = false;
    /// Whether its history entry is committed before the command returns (a device
    /// added or removed: the pool's history must say so after any crash, as ZFS's does).
    const DURABLE_HISTORY: bool = false;
    type Output: Serialize + DeserializeOwned;

    fn run(self, on: &Held<'_>) -> Result<Self::Output, OpError>;
}

/// How a command leaves the pool when it is done.
#[derive(Clone, Debug, Default)]
pub enum Finish {
    /// Open as it was (a daemon goes on serving; a command's own open is closed).
    #[default]
    Stay,
    /// Commit and close (a daemon's last mount went away).
    Close,
    /// Unmount everything, commit, mark the pool exported and close it.
    Export { force: bool },
    /// Unmount everything, commit, mark the pool destroyed and close it.
    Destroy { force: bool },
}

impl Finish {
    pub fn is_stay(&self) -> bool {
        matches!(self, Finish::Stay)
    }
}

/// Who runs a command: the process (for messages) and the user (for the history).
#[derive(Clone, Debug)]
pub struct Caller {
    pub uid: u32,
    pub pid: u32,
    /// The command line as typed (`tarn ds create tank/db`).
    pub argv: Vec<String>,
}

impl Caller {
    /// This process, with its own command line.
    pub fn this_process() -> Caller {
        Caller {
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
            pid: std::process::id(),
            argv: std::env::args().collect(),
        }
    }

    /// The history entry recording this caller's command now.
    pub fn history_entry(&self) -> HistoryEntry {
        HistoryEntry {
            time: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            txg: 0,
            user: crate::peer::user_name(self.uid),
            uid: self.uid,
            host: crate::peer::hostname(),
            command: command_line(&self.argv),
        }
    }
}

/// `argv` as a shell would show it: the program as `tarn`, arguments quoted if needed.
fn command_line(argv: &[String]) -> String {
    let mut words = vec!["tarn".to_string()];
    for a in argv.iter().skip(1) {
        let plain = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "/._-=:,@+%".contains(c));
        words.push(if plain { a.clone() } else { format!("'{}'", a.replace('\'', "'\\''")) });
    }
    words.join(" ")
}

/// What only the process that holds a pool can do: the `tarn mount` daemon's side.
pub trait Daemon: Send + Sync {
    /// The daemon's process id (for messages).
    fn pid(&self) -> u32;
    /// The pool, while it is open (`None` once the daemon is closing it).
    fn pool(&self) -> Option<Arc<Pool>>;
    /// Mounts `dataset` on `mountpoint` (or its `mountpoint` property) with `threads`
    /// FUSE workers and the `-o` options as the user gave them (`ro,noatime`; empty for
    /// none); returns the mountpoint.
    fn mount(
        &self,
        dataset: &str,
        mountpoint: Option<&Path>,
        threads: usize,
        options: &str,
    ) -> Result<PathBuf, OpError>;
    /// The mountpoint of `dataset`, if this daemon serves it.
    fn mounted(&self, dataset: &str) -> Option<PathBuf>;
    /// Unmounts the mount of `target` (a mountpoint or a dataset) and waits for its
    /// session to end; a mount with open files is refused unless `force` (their I/O then
    /// fails). `Ok(true)`: it was the last one, and the daemon now closes.
    fn unmount(&self, target: &str, force: bool) -> Result<bool, OpError>;
    /// The mounts this daemon serves, with their FUSE transport and its counters.
    fn mount_list(&self) -> Vec<crate::ops::mounts::MountInfo>;
    /// Carries out `how` (unmounting first for export and destroy), logs `history` just
    /// before closing the pool, then calls `reply` with the outcome. A refusal (a busy
    /// mount) is replied at once and changes nothing.
    fn finish(&self, how: Finish, history: Option<HistoryEntry>, reply: Reply);
}

/// Where the outcome of a finishing command goes (the connection that asked).
pub type Reply = Box<dyn FnOnce(Result<(), OpError>) + Send>;

/// The pool a command runs on, as held by whoever runs it.
pub struct Held<'a> {
    pub pool: &'a Pool,
    /// Some in the mount daemon.
    pub daemon: Option<&'a dyn Daemon>,
    pub caller: &'a Caller,
    finish: RefCell<Finish>,
    /// The history entry of a finishing command, logged by the finisher.
    pending: RefCell<Option<HistoryEntry>>,
}

impl<'a> Held<'a> {
    pub fn new(pool: &'a Pool, daemon: Option<&'a dyn Daemon>, caller: &'a Caller) -> Held<'a> {
        Held { pool, daemon, caller, finish: RefCell::new(Finish::Stay), pending: RefCell::new(None) }
    }

    /// Asks whoever holds the pool to end its open life this way once the command is done.
    pub fn finish_with(&self, how: Finish) {
        *self.finish.borrow_mut() = how;
    }

    /// How the command asked to finish, and the history entry to log then.
    pub fn take_finish(&self) -> (Finish, Option<HistoryEntry>) {
        (self.finish.take(), self.pending.take())
    }

    /// The daemon, or a refusal saying what needs one.
    pub fn daemon(&self, what: &str) -> Result<&'a dyn Daemon, OpError> {
        self.daemon.ok_or_else(|| OpError::NotHeld(format!("pool '{}' is not mounted, so {what}", self.pool.name())))
    }
}

/// Runs `op` on the pool `on` holds and records it in the history if it changed the pool
/// (a finishing command's entry is handed to the finisher instead, see the module).
pub fn execute<O: Op>(op: O, on: &Held<'_>) -> Result<O::Output, OpError> {
    let out = op.run(on)?;
    if O::CHANGES_POOL {
        let entry = on.caller.history_entry();
        if on.finish.borrow().is_stay() {
            on.pool.log_history(entry);
            if O::DURABLE_HISTORY {
                on.pool.sync()?;
            }
        } else {
            *on.pending.borrow_mut() = Some(entry);
        }
    }
    Ok(out)
}

/// Carries out a finish on a pool this process opened itself: logs the history entry,
/// then closes, exports or destroys.
pub fn finish_local(pool: Pool, how: Finish, history: Option<HistoryEntry>) -> Result<(), OpError> {
    if let Some(entry) = history {
        pool.log_history(entry);
    }
    match how {
        Finish::Stay | Finish::Close => pool.close()?,
        Finish::Export { .. } => pool.export()?,
        Finish::Destroy { .. } => pool.destroy()?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_is_shown_as_typed_with_quotes_where_needed() {
        let argv: Vec<String> = ["/usr/bin/tarn", "set", "mountpoint=/mnt/a b", "tank/db"].map(String::from).into();
        assert_eq!(command_line(&argv), "tarn set 'mountpoint=/mnt/a b' tank/db");
        let argv: Vec<String> = ["tarn", "ds", "create", "-o", "recordsize=16K", "tank/db"].map(String::from).into();
        assert_eq!(command_line(&argv), "tarn ds create -o recordsize=16K tank/db");
    }
}
