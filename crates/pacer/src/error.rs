//! Every way tarn-pacer can refuse to start, as one typed error.
//!
//! Owns: the wording of startup failures. Promises: each message names the object at
//! fault and the fix, on one line, so a lab script can show it as-is. Must never: hide
//! the underlying OS error when there is one.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PacerError {
    #[error("mountpoint {0} does not exist: create it first (mkdir -p {0})")]
    MountpointMissing(PathBuf),

    #[error("mountpoint {0} is not a directory: pass an empty directory as --mountpoint")]
    MountpointNotDir(PathBuf),

    #[error("mountpoint {0} is busy: something is already mounted there; unmount it first (umount {0})")]
    MountpointBusy(PathBuf),

    #[error("cannot inspect mountpoint {path}: {source}")]
    MountpointIo { path: PathBuf, source: io::Error },

    #[error("/dev/fuse is missing: load the FUSE module (modprobe fuse) or give the container the device (--device /dev/fuse)")]
    NoFuseDevice,

    #[error(
        "backing file {path} is {current} bytes, larger than --size {requested}: refusing to \
         shrink it (that would lose data); pass --size {current} or a new --backing path"
    )]
    WouldShrink { path: PathBuf, current: u64, requested: u64 },

    #[error("backing {path} is not a regular file: pass an image file path as --backing")]
    BackingNotFile { path: PathBuf },

    #[error("cannot prepare backing file {path}: {source}")]
    Backing { path: PathBuf, source: io::Error },

    #[error(
        "cannot mount FUSE at {path}: {source} (is /dev/fuse usable and are you root or is fusermount3 installed?)"
    )]
    Mount { path: PathBuf, source: io::Error },

    #[error("cannot daemonize: {0}")]
    Daemon(#[from] tarn_daemon::DaemonError),

    #[error("daemon failed during startup: {0}")]
    Startup(String),
}
