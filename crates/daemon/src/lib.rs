//! daemon — the process and mount plumbing shared by tarn's two FUSE daemons: the
//! `tarn mount` daemon (crate `fuse`) and the emulated disk `tarn-pacer` (crate `pacer`).
//!
//! Layer: the lowest; depends on no other workspace crate, so the pacer can use it
//! without depending on the engine.
//! Owns: starting a daemon ([`process`]: fork, the readiness pipe, the new session,
//! letting go of the caller's stdio), its termination signals ([`signals`]), ending it
//! at once when a thread panics ([`panics`]), and unmounting and reading the mount table
//! ([`mounts`]). What a daemon serves, what it
//! prints and in which words stays with its caller.
//! Promises: in daemon mode the caller's command returns only once the daemon reported
//! the mount usable (exit 0) or failed (exit 1, after the caller's report of the
//! error); SIGTERM/SIGINT/SIGHUP reach only the thread that waits for them.
//! Must never: print on its own account, know about FUSE sessions or any engine type,
//! or force an unmount that would fail I/O in flight.

pub mod mounts;
pub mod panics;
pub mod process;
pub mod signals;

use std::io;

pub use mounts::{umount, unmount_or_detach};
pub use panics::end_on_panic;
pub use process::{start, Readiness, Report, Verdict};
pub use signals::{Asked, Termination};

/// Why a daemon could not be started (nothing has been forked when this is returned).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("pipe: {0}")]
    Pipe(#[source] io::Error),
    #[error("fork: {0}")]
    Fork(#[source] io::Error),
}
