//! fuse — `tarn mount`: the POSIX face of a dataset, served to the kernel through FUSE,
//! and the daemon that holds the pool while a dataset is mounted.
//!
//! Layer: between `control` (below: the commands and the socket server the daemon runs)
//! and `cli` (above). It speaks to the engine only through `dataset` and `pool`: no
//! engine crate below `dataset` is a dependency or named in its sources
//! (`crates/cli/tests/layering.rs` checks both).
//! Owns: the FUSE filesystem — its transport-neutral core ([`ops::TarnFs`], one function
//! per operation) and the /dev/fuse transport that drives it through fuser
//! ([`fuser_front`]) — and its read-only `.tarn/snapshot` directory (`snapdir`), the order of the mount daemon's life
//! (start, mount, control socket, ready, serve, the end; the fork, readiness pipe,
//! signals and unmounting themselves are `tarn_daemon`'s), what the daemon does for the
//! control socket (`holder`: mounts, unmounts, export and destroy of a mounted pool),
//! and the record of running mounts ([`state`]).
//! Promises: `mount` returns only once the mount is usable (or with one clear error);
//! a clean unmount, SIGTERM or SIGINT commits everything (`Pool::close`) before the
//! daemon exits; `umount` returns once the daemon has let the mount go (and, for its
//! last, committed and released the pool); every command on the held pool is served
//! over `$TARN_RUN_DIR/POOL.sock` while the daemon runs.
//! Must never: fork after a thread exists, or leave a mount record that claims a pool
//! for a process that has gone.

pub mod fuser_front;
mod holder;
pub mod mount;
pub mod ops;
pub mod options;
mod snapdir;
pub mod state;
pub mod uring;
mod wire;

pub use mount::{mount, umount, MountRequest};
pub use options::{MountOptions, OptionError};

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The caller's `open_pool` failed (it says why: no such pool, devices gone…).
    #[error("{0}")]
    OpenPool(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The engine refused something the mount asked of the open pool.
    #[error(transparent)]
    Pool(#[from] tarn_pool::PoolError),
    /// The commit that closes the pool at the end of the mount failed.
    #[error("final commit failed: {0}")]
    FinalCommit(#[source] tarn_pool::PoolError),
    #[error("{0}")]
    PoolBusy(String),
    #[error("/dev/fuse is missing: load the fuse module (modprobe fuse) or run where FUSE is available")]
    NoFuseDevice,
    #[error("mountpoint {0} does not exist: create it first (mkdir -p {0})")]
    MountpointMissing(String),
    #[error("mountpoint {0} is not a directory")]
    MountpointNotDir(String),
    #[error("mountpoint {0} is not empty; give an empty directory")]
    MountpointNotEmpty(String),
    #[error("mountpoint {0} is in use: something is already mounted there (if it is a dead tarn mount, run `tarn umount {0}`)")]
    MountpointBusy(String),
    #[error("dataset '{0}' has no mountpoint (its mountpoint property is 'none'): give one (tarn mount {0} DIR) or set it (tarn set mountpoint=/path {0})")]
    NoMountpoint(String),
    #[error("cannot mount FUSE at {path}: {source}")]
    Mount { path: String, source: std::io::Error },
    #[error("{0}")]
    Startup(String),
    #[error(transparent)]
    Daemon(#[from] tarn_daemon::DaemonError),
    #[error(
        "no tarn mount at '{0}' (see `tarn ds list` for datasets; mounts are recorded in $TARN_RUN_DIR or /run/tarn)"
    )]
    NotMounted(String),
    #[error("cannot unmount {path}: {detail}")]
    Umount { path: String, detail: String },
    #[error("mount state: {0}")]
    State(String),
    /// What the daemon holding the pool answered on its control socket (boxed: it can
    /// carry any engine error, and the others here are small).
    #[error(transparent)]
    Control(Box<tarn_control::OpError>),
}

impl From<tarn_control::OpError> for MountError {
    fn from(e: tarn_control::OpError) -> MountError {
        MountError::Control(Box::new(e))
    }
}
