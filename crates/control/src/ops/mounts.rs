//! `tarn mount` of another dataset of a held pool, `tarn umount`, and the list of a
//! daemon's mounts with their FUSE transport (`tarn stats fuse`): what only the daemon
//! that holds the pool can do or know (one daemon per pool serves all its mounts).
//!
//! Owns: the wire form of both. Promises: `umount` of the last mount answers only once the
//! daemon has committed and closed the pool (as a `tarn umount` of a daemon always did).
//! Must never: run where no daemon holds the pool (the CLI starts a daemon instead).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::OpError;
use crate::op::{Finish, Held, Op};

/// Mounts a dataset of the held pool in its daemon.
#[derive(Serialize, Deserialize)]
pub struct Mount {
    pub dataset: String,
    /// Absolute; `None`: the dataset's `mountpoint` property.
    pub mountpoint: Option<PathBuf>,
    pub threads: usize,
    /// The `-o` list as given (`ro,noatime`), empty for none.
    #[serde(default)]
    pub options: String,
}

impl Op for Mount {
    const NAME: &'static str = "mount";
    type Output = PathBuf;
    fn run(self, on: &Held<'_>) -> Result<PathBuf, OpError> {
        let d = on.daemon("no daemon can mount a dataset of it")?;
        d.mount(&self.dataset, self.mountpoint.as_deref(), self.threads, &self.options)
    }
}

/// Unmounts one mount (a mountpoint or a dataset) of the held pool.
#[derive(Serialize, Deserialize)]
pub struct Umount {
    pub target: String,
    /// Even with files open (their I/O then fails).
    pub force: bool,
}

impl Op for Umount {
    const NAME: &'static str = "umount";
    type Output = ();
    fn run(self, on: &Held<'_>) -> Result<(), OpError> {
        let d = on.daemon("nothing of it is mounted")?;
        if d.unmount(&self.target, self.force)? {
            on.finish_with(Finish::Close);
        }
        Ok(())
    }
}

/// One mount a daemon serves, as `tarn stats fuse` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountInfo {
    pub dataset: String,
    pub mountpoint: PathBuf,
    /// How the kernel's requests reach the daemon now: `dev` (/dev/fuse) or `uring`.
    pub transport: String,
    /// Requests served by the io_uring rings and on /dev/fuse, counted by a session tarn
    /// runs itself (a `--transport uring` mount); `None` for a fuser session.
    pub ring_requests: Option<u64>,
    pub dev_requests: Option<u64>,
    /// Why a mount asked for `uring` is served over /dev/fuse (the kernel refused it).
    #[serde(default)]
    pub fallback: Option<String>,
}

/// The mounts of the held pool (none if no daemon holds it).
#[derive(Serialize, Deserialize)]
pub struct Mounts {}

impl Op for Mounts {
    const NAME: &'static str = "mounts";
    type Output = Vec<MountInfo>;
    fn run(self, on: &Held<'_>) -> Result<Vec<MountInfo>, OpError> {
        Ok(on.daemon.map(|d| d.mount_list()).unwrap_or_default())
    }
}
