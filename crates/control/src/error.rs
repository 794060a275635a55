//! Every way a pool command can fail, on whichever side of the socket it ran.
//!
//! Owns: [`OpError`] (a command's failure, with its exit code) and [`ControlError`] (the
//! socket itself: connecting, the protocol, the peer).
//! Promises: an error that crosses the socket arrives with the same words and the same
//! exit code it would have had if the command had run in the caller's own process
//! ([`OpError::Remote`] carries both); the engine's typed errors pass through unchanged.
//! Must never: turn a failure into success, or lose the exit code of a malformed
//! command line (2) on the way through the socket.

use std::path::PathBuf;

use tarn_dataset::FsError;
use tarn_pool::PoolError;
use tarn_send::SendError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The command line is malformed in a way the grammar cannot see (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Understood, and refused for a reason the command found itself.
    #[error("{0}")]
    Refused(String),
    /// Boxed: engine errors are large, and every command returns this.
    #[error(transparent)]
    Pool(Box<PoolError>),
    /// A send or a receive (`tarn send`, `tarn recv`).
    #[error(transparent)]
    Send(Box<SendError>),
    /// A path inside a dataset (put, cat, ls).
    #[error("{path}: {source}")]
    File { path: String, source: FsError },
    /// A path on the host (a file being copied in, a mountpoint).
    #[error("{path}: {source}")]
    Host { path: String, source: std::io::Error },
    /// Only the process that holds the pool can do this (mount another dataset, tune a
    /// running cache…), and no process holds it.
    #[error("{0}")]
    NotHeld(String),
    /// What the mount daemon said (it failed to mount, unmount, or close).
    #[error("{0}")]
    Daemon(String),
    /// The daemon's error, in its words and with its exit code.
    #[error("{message}")]
    Remote { message: String, exit: u8 },
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> OpError {
        OpError::Pool(Box::new(e))
    }
}

impl From<SendError> for OpError {
    fn from(e: SendError) -> OpError {
        match e {
            // One variant for the pool's own errors, however they came.
            SendError::Pool(p) => OpError::Pool(Box::new(p)),
            e => OpError::Send(Box::new(e)),
        }
    }
}

impl OpError {
    /// 2 for a malformed command line, 1 for a failed command (as the README promises).
    pub fn exit_code(&self) -> u8 {
        match self {
            OpError::Usage(_) => 2,
            OpError::Remote { exit, .. } => *exit,
            _ => 1,
        }
    }

    pub fn file(path: impl std::fmt::Display, source: FsError) -> OpError {
        OpError::File { path: path.to_string(), source }
    }

    pub fn host(path: impl std::fmt::Display, source: std::io::Error) -> OpError {
        OpError::Host { path: path.to_string(), source }
    }

    /// The daemon is ending its life (the last unmount, an export): the caller may wait
    /// for it to exit and then run the command itself.
    pub fn is_closing(&self) -> bool {
        matches!(self, OpError::Control(ControlError::Closing { .. }))
    }

    /// The daemon closed the connection without answering (killed while the request was
    /// queued, or crashed): if it is gone, the caller may run the command itself.
    pub fn is_hangup(&self) -> bool {
        matches!(self, OpError::Control(ControlError::Hangup { .. }))
    }
}

/// Why the control socket could not carry a command.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("pool '{pool}' is held by a tarn mount daemon whose control socket {} is for root only ({source}); run tarn as root", path.display())]
    PermissionDenied { pool: String, path: PathBuf, source: std::io::Error },
    #[error("the control socket {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// The daemon refused the peer: not root.
    #[error("the control socket of pool '{pool}' serves root only (the caller is uid {uid})")]
    NotRoot { pool: String, uid: u32 },
    #[error("control protocol version {found} is not supported (this tarn speaks {supported}); run the same tarn as the mount daemon of the pool, or remount after upgrading")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error(
        "the tarn mount daemon does not know the command '{0}' (it runs another tarn version); remount after upgrading"
    )]
    UnknownCommand(String),
    #[error("malformed control message: {0}")]
    Malformed(String),
    #[error("pool '{pool}' is being closed by its mount daemon (pid {pid}); try again once it has exited")]
    Closing { pool: String, pid: u32 },
    #[error("the tarn mount daemon of pool '{pool}' (pid {pid}) closed the connection without answering (did it die? see {})", log.display())]
    Hangup { pool: String, pid: u32, log: PathBuf },
    #[error("the control socket {} could not be set up: {detail}", path.display())]
    Bind { path: PathBuf, detail: String },
}
